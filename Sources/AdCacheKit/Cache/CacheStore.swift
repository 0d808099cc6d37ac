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
        case .failure(let reason):
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

/// The index's JSON form: readable (pretty, sorted keys) and versioned.
enum IndexCoder {
    static func decode(_ bytes: [UInt8]) throws -> CacheIndex {
        try JSONDecoder().decode(CacheIndex.self, from: Data(bytes))
    }

    static func encode(_ index: CacheIndex) throws -> [UInt8] {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        return Array(try encoder.encode(index)) + [0x0A]
    }
}
