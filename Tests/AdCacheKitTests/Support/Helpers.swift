import Foundation
import TestSupport

@testable import AdCacheKit

/// A cache with ready ads whose files exist, for selection and pruning tests.
struct CacheFixture {
    let dir: TempDir
    let store: CacheStore

    init(memory: Bool = false) throws {
        dir = memory && Disk.exists("/dev/shm") ? TempDir(under: "/dev/shm") : TempDir()
        store = CacheStore(directory: dir.path + "/cache")
        try store.prepare()
    }

    func remove() { dir.remove() }

    /// A ready record with a real file of `bytes` bytes.
    func ready(_ id: String, priority: Int64 = 0, bytes: Int = 100, configure: (inout AdRecord) -> Void = { _ in })
        -> AdRecord
    {
        var ad = FeedAd(id: id, url: "https://cdn.example.com/\(id).jpg")
        ad.priority = priority
        ad.type = .image
        var r = AdRecord(ad: ad)
        r.state = .ready
        r.file = try! SHA256Hasher.hex(r.url) + ".jpg"
        r.bytes = Int64(bytes)
        FileManager.default.createFile(atPath: store.assetPath(r.file!), contents: Data(Media.jpeg(bytes)))
        configure(&r)
        return r
    }

    func save(_ ads: [AdRecord]) throws {
        var index = CacheIndex()
        index.ads = ads
        try store.save(index)
    }

    func index() throws -> CacheIndex { try store.load(warn: { _ in }) }

    /// The facade on this cache, its clock stopped at `t` (a device clock that reads `t`, so
    /// that a measured offset applies).
    func cache(at t: Double, warn: @escaping @Sendable (Diagnostic) -> Void = { _ in }) -> AdCache {
        AdCache(.init(directory: store.directory, clock: .device { Date(timeIntervalSince1970: t) }, diagnostics: warn))
    }
}

extension AdCache {
    /// The ad `next` shows, or nil for either kind of nothing.
    func shown(_ options: NextOptions = NextOptions()) throws -> ShownAd? {
        if case .show(let ad) = try next(options) { return ad }
        return nil
    }
}

extension AdCacheError {
    /// The case's name (`busy`, `feedInvalid`…), to compare kinds without messages.
    var caseName: String { Mirror(reflecting: self).children.first?.label ?? "\(self)" }
}

/// Diagnostics collected from any thread.
final class Collected: @unchecked Sendable {
    private var items: [Diagnostic] = []
    private let lock = NSLock()
    func add(_ d: Diagnostic) { lock.lock(); items.append(d); lock.unlock() }
    var messages: [String] { lock.lock(); defer { lock.unlock() }; return items.map(\.message) }
}

/// A small deterministic generator, so a failure can be replayed.
struct SplitMix {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E3779B97F4A7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58476D1CE4E5B9
        z = (z ^ (z >> 27)) &* 0x94D049BB133111EB
        return z ^ (z >> 31)
    }
}

extension ReportResult {
    /// The figures alone, without the last error's text.
    var counts: ReportResult {
        var r = self
        r.lastError = nil
        return r
    }
}
