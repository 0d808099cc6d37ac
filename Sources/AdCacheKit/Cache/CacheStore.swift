import Foundation

/// The cache directory: where each file lives, the index's atomic load and save, and the
/// locks that keep concurrent runs safe (SPEC §3, §6).
public final class CacheStore {
    public let directory: String
    public var indexPath: String { directory + "/index.json" }
    public var assetsDirectory: String { directory + "/assets" }
    public var partialDirectory: String { directory + "/partial" }
    /// Held for short, network-free read-modify-write sections of the index.
    public var indexLockPath: String { directory + "/index.lock" }
    /// Held by a running `fetch` for its whole run.
    public var fetchLockPath: String { directory + "/fetch.lock" }

    /// How long `next` and the other commands wait for the index lock (SPEC §6).
    public var lockTimeout: Double = 1

    public init(directory: String) {
        self.directory = directory.hasSuffix("/") && directory.count > 1 ? String(directory.dropLast()) : directory
    }

    /// `$ADCACHE_DIR`, else `$XDG_CACHE_HOME/adcache`, else `~/.cache/adcache`.
    public static func defaultDirectory(environment: [String: String] = ProcessInfo.processInfo.environment) -> String {
        if let d = environment["ADCACHE_DIR"], !d.isEmpty { return absolute(d) }
        if let x = environment["XDG_CACHE_HOME"], !x.isEmpty { return absolute(x) + "/adcache" }
        let home = environment["HOME"].flatMap { $0.isEmpty ? nil : $0 } ?? NSHomeDirectory()
        return home + "/.cache/adcache"
    }

    public static func absolute(_ path: String) -> String {
        if path.hasPrefix("/") { return path }
        let cwd = FileManager.default.currentDirectoryPath
        return (cwd as NSString).appendingPathComponent(path)
    }

    public func assetPath(_ file: String) -> String { assetsDirectory + "/" + file }

    /// Creates the directory and its folders (exit 73 when it cannot).
    public func prepare() throws {
        try FileIO.makeDirectory(directory)
        try FileIO.makeDirectory(assetsDirectory)
        try FileIO.makeDirectory(partialDirectory)
        guard access(directory, W_OK) == 0 else {
            throw AdCacheError.cantCreate("cannot write to the cache directory \(directory): \(FileIO.errnoText())")
        }
    }

    public var exists: Bool { FileIO.exists(directory) }

    // MARK: The index

    /// Reads the index without a lock (it is only ever replaced whole, so what we read is
    /// complete). A missing index is an empty one. One that cannot be parsed is moved aside
    /// under the lock, with a warning, and an empty index is returned.
    public func load(warn: WarningSink) throws -> CacheIndex {
        switch try read() {
        case .success(let index): return index
        case .failure:
            return try withIndexLock { try loadLocked(warn: warn) }
        }
    }

    /// As `load`, for a caller that holds the index lock.
    func loadLocked(warn: WarningSink) throws -> CacheIndex {
        switch try read() {
        case .success(let index): return index
        case .failure(let unreadable):
            let reason = unreadable.reason
            let aside = "\(indexPath).corrupt-\(Int(Date().timeIntervalSince1970))"
            guard rename(indexPath, aside) == 0 else {
                throw AdCacheError.io("index.json cannot be read (\(reason)) nor moved aside: \(FileIO.errnoText())")
            }
            FileIO.syncDirectory(directory)
            warn("index.json could not be read (\(reason)); moved it aside to \(aside); the next fetch rebuilds it")
            return CacheIndex()
        }
    }

    struct Unreadable: Error { var reason: String }

    private func read() throws -> Result<CacheIndex, Unreadable> {
        guard FileIO.exists(indexPath) else { return .success(CacheIndex()) }
        let bytes: [UInt8]
        do {
            bytes = try FileIO.read(indexPath)
        } catch let e as AdCacheError {
            throw AdCacheError.io(e.message)
        }
        if bytes.isEmpty { return .failure(Unreadable(reason: "it is empty")) }
        let index: CacheIndex
        do {
            index = try IndexCoder.decode(bytes)
        } catch let e as JSONScanner.Malformed {
            return .failure(Unreadable(reason: "\(e.what) at byte \(e.offset)"))
        } catch {
            return .failure(Unreadable(reason: "it is not a valid index"))
        }
        guard index.version <= CacheIndex.currentVersion else {
            throw AdCacheError.io("index.json has version \(index.version), newer than this adcache understands (\(CacheIndex.currentVersion))")
        }
        return .success(index)
    }

    /// Replaces index.json atomically (temporary, fsync, rename, fsync of the directory).
    public func save(_ index: CacheIndex) throws {
        try FileIO.writeAtomically(IndexCoder.encode(index), to: indexPath)
    }

    /// Runs `body` holding the index lock, waiting at most `lockTimeout` for it (exit 75).
    public func withIndexLock<T>(_ body: () throws -> T) throws -> T {
        let lock = FileLock(path: indexLockPath)
        guard try lock.lock(timeout: lockTimeout) else {
            throw AdCacheError.busy("the cache is busy (index.lock is held); try again")
        }
        defer { lock.unlock() }
        return try body()
    }

    /// Read-modify-write of the index under its lock; writes only when `body` changed it.
    public func update<T>(warn: WarningSink, _ body: (inout CacheIndex) throws -> T) throws -> T {
        try withIndexLock {
            var index = try loadLocked(warn: warn)
            let before = index
            let result = try body(&index)
            if index != before { try save(index) }
            return result
        }
    }

    /// Takes the fetch lock for a whole run, or says who holds it (exit 75).
    public func acquireFetchLock() throws -> FileLock {
        let lock = FileLock(path: fetchLockPath)
        guard try lock.tryLock() else {
            let who = lock.owner().map { " (pid \($0))" } ?? ""
            throw AdCacheError.busy("another fetch is running\(who); try again later")
        }
        lock.writeOwner()
        return lock
    }

    /// True when a fetch holds its lock now.
    public func fetchIsRunning() -> Bool {
        guard FileIO.exists(fetchLockPath) else { return false }
        let lock = FileLock(path: fetchLockPath)
        guard let free = try? lock.tryLock() else { return false }
        lock.unlock()
        return !free
    }
}

/// The index's JSON form: readable (pretty, sorted keys), versioned, and read and written
/// without Codable, which would dominate `next` on a large index.
enum IndexCoder {
    static func decode(_ bytes: [UInt8]) throws -> CacheIndex {
        try bytes.withUnsafeBufferPointer { buffer in
            var s = JSONScanner(buffer)
            var index = CacheIndex()
            var version: Int64?
            try s.object { s, key in
                switch key {
                case "version": version = try s.int()
                case "feed": index.feed = try s.null() ? nil : FeedSource(&s)
                case "showSeq": index.showSeq = try s.int()
                case "lastShown": index.lastShown = try s.optDouble()
                case "ads":
                    try s.array { s in index.ads.append(try AdRecord(&s)) }
                default: try s.skip()
                }
            }
            try s.finish()
            guard let version else { throw s.fail("no version") }
            index.version = Int(version)
            return index
        }
    }

    static func encode(_ index: CacheIndex) throws -> [UInt8] {
        var w = JSONBytesWriter(capacity: 512 + index.ads.count * 700)
        w.beginObject()
        w.key("ads")
        w.beginArray()
        for ad in index.ads {
            w.key(nil)
            ad.write(&w)
        }
        w.endArray()
        if let feed = index.feed {
            w.key("feed")
            w.beginObject()
            w.field("etag", feed.etag)
            w.field("fetchedAt", feed.fetchedAt)
            w.field("finalUrl", feed.finalUrl)
            w.field("lastModified", feed.lastModified)
            w.field("url", feed.url)
            w.endObject()
        }
        w.field("lastShown", index.lastShown)
        w.field("showSeq", index.showSeq)
        w.field("version", Int64(index.version))
        w.endObject()
        w.out.append(0x0A)
        return w.out
    }
}

extension FeedSource {
    init(_ s: inout JSONScanner) throws {
        var url: String?
        var f = FeedSource(url: "")
        try s.object { s, key in
            switch key {
            case "url": url = try s.string()
            case "finalUrl": f.finalUrl = try s.optString()
            case "etag": f.etag = try s.optString()
            case "lastModified": f.lastModified = try s.optString()
            case "fetchedAt": f.fetchedAt = try s.optDouble()
            default: try s.skip()
            }
        }
        guard let url else { throw s.fail("feed without url") }
        f.url = url
        self = f
    }
}

extension AdRecord {
    init(_ s: inout JSONScanner) throws {
        var id: String?, url: String?, state: StoredState?
        var r = AdRecord(ad: FeedAd(id: "", url: ""))
        try s.object { s, key in
            switch key {
            case "id": id = try s.string()
            case "url": url = try s.string()
            case "type": r.type = try s.optString().map { try AdType(rawValue: $0).orThrow(s.fail("bad type")) }
            case "placement": r.placement = try s.string()
            case "state": state = StoredState(rawValue: try s.string())
            case "file": r.file = try s.optString()
            case "bytes": r.bytes = try s.optInt()
            case "fileMtime": r.fileMtime = try s.optInt()
            case "sha256": r.sha256 = try s.optString()
            case "fileSha256": r.fileSha256 = try s.optString()
            case "etag": r.etag = try s.optString()
            case "lastModified": r.lastModified = try s.optString()
            case "start": r.start = try s.optDouble()
            case "expires": r.expires = try s.optDouble()
            case "maxShows": r.maxShows = try s.optInt()
            case "maxShowsPerDay": r.maxShowsPerDay = try s.optInt()
            case "minInterval": r.minInterval = try s.optInt()
            case "duration": r.duration = Int(try s.int())
            case "priority": r.priority = try s.int()
            case "clickUrl": r.clickUrl = try s.optString()
            case "meta": r.meta = try s.null() ? nil : s.value()
            case "shows": r.shows = try s.int()
            case "lastShown": r.lastShown = try s.optDouble()
            case "lastShowSeq": r.lastShowSeq = try s.optInt()
            case "showDay": r.showDay = try s.optInt().map(Int.init)
            case "showsOnDay": r.showsOnDay = try s.optInt()
            case "error": r.error = try s.optString()
            default: try s.skip()
            }
        }
        guard let id, let url, let state else { throw s.fail("an ad without id, url or state") }
        r.id = id
        r.url = url
        r.state = state
        self = r
    }

    func write(_ w: inout JSONBytesWriter) {
        w.beginObject()
        w.field("bytes", bytes)
        w.field("clickUrl", clickUrl)
        w.field("duration", duration)
        w.field("error", error)
        w.field("etag", etag)
        w.field("expires", expires)
        w.field("file", file)
        w.field("fileMtime", fileMtime)
        w.field("fileSha256", fileSha256)
        w.field("id", id)
        w.field("lastModified", lastModified)
        w.field("lastShowSeq", lastShowSeq)
        w.field("lastShown", lastShown)
        w.field("maxShows", maxShows)
        w.field("maxShowsPerDay", maxShowsPerDay)
        w.field("meta", meta)
        w.field("minInterval", minInterval)
        w.field("placement", placement)
        w.field("priority", priority)
        w.field("sha256", sha256)
        w.field("showDay", showDay)
        w.field("shows", shows)
        w.field("showsOnDay", showsOnDay)
        w.field("start", start)
        w.field("state", state.rawValue)
        w.field("type", type?.rawValue)
        w.field("url", url)
        w.endObject()
    }
}

extension Optional {
    func orThrow(_ e: @autoclosure () -> Error) throws -> Wrapped {
        guard let v = self else { throw e() }
        return v
    }
}
