#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif
#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The cache directory: where each file lives, the index's atomic load and save, and the
/// locks that keep concurrent runs safe (SPEC §3, §6).
final class CacheStore: Sendable {
    /// The directory, held open: every file below is reached through it (SPEC §6).
    let dir: CacheDirectory
    var directory: String { dir.path }
    let indexFile: CacheFile
    /// The previous generation of the index (as dpkg keeps `status-old`).
    let oldIndexFile: CacheFile
    /// Held for short, network-free read-modify-write sections of the index.
    let indexLockFile: CacheFile
    /// Held by a running `fetch` for its whole run.
    let fetchLockFile: CacheFile
    /// `index.sel`: the selection digest of `index.json` (`SelectionDigest`).
    var digestFile: CacheFile { dir.file(SelectionDigest.fileName) }
    var indexPath: String { indexFile.path }
    var oldIndexPath: String { oldIndexFile.path }
    var assetsDirectory: String { dir.path(of: .assets) }
    var partialDirectory: String { dir.path(of: .partial) }

    /// How long `next` and the other commands wait for a lock (SPEC §6): a constant, never
    /// raised for one caller — a longer wait is passed to the call that needs it (a fetch's
    /// commit), so that a launch sharing the store keeps its second.
    let lockTimeout: Double
    /// Past this many bytes of journal, `next` folds it itself (about 4,000 shows).
    let journalFoldSize: Int64
    /// Where folds record every show and event (SPEC §14); nil: no ledger.
    let ledger: Ledger?

    /// `warn` hears what the directory itself is found to be (a link where a folder belongs,
    /// a cache others can write while running as root).
    init(
        directory: String, warn: @escaping WarningSink = { _ in }, lockTimeout: Double = 1,
        journalFoldSize: Int64 = 1 << 20, ledger: Ledger? = nil
    ) {
        self.ledger = ledger
        self.lockTimeout = lockTimeout
        self.journalFoldSize = journalFoldSize
        let path = directory.hasSuffix("/") && directory.count > 1 ? String(directory.dropLast()) : directory
        dir = CacheDirectory(path: path, warn: warn)
        indexFile = dir.file("index.json")
        oldIndexFile = dir.file("index.json.old")
        indexLockFile = dir.file("index.lock")
        fetchLockFile = dir.file("fetch.lock")
    }

    /// `$ADCACHE_DIR`, else `$XDG_CACHE_HOME/adcache`, else `~/.cache/adcache`.
    static func defaultDirectory(environment: [String: String] = ProcessInfo.processInfo.environment) -> String {
        if let d = environment["ADCACHE_DIR"], !d.isEmpty { return PathText.absolute(d) }
        if let x = environment["XDG_CACHE_HOME"], !x.isEmpty { return PathText.absolute(x) + "/adcache" }
        let home =
            environment["HOME"].flatMap { $0.isEmpty ? nil : $0 } ?? getpwuid(getuid()).map {
                String(cString: $0.pointee.pw_dir)
            } ?? "/"
        return home + "/.cache/adcache"
    }

    /// The path of an asset, as `next` prints it.
    func assetPath(_ file: String) -> String { asset(file).path }
    func asset(_ name: String) -> CacheFile { dir.file(name, in: .assets) }
    func partial(_ name: String) -> CacheFile { dir.file(name, in: .partial) }

    /// Creates the directory and its folders (exit 73 when it cannot).
    func prepare() throws {
        try dir.prepare()
        guard faccessat(dir.fd(.top), ".", W_OK, 0) == 0 else {
            throw AdCacheError.cacheUnwritable(
                "cannot write to the cache directory \(directory): \(FileIO.errnoText())")
        }
    }

    var exists: Bool { dir.exists }

    // MARK: The index

    /// An index as loaded, and whether it had to be recovered (moved aside, or taken from
    /// the previous generation): then files it does not name may still be some record's.
    struct Loaded {
        var index: CacheIndex
        var recovered = false
        /// The journal held shows the index on disk does not (see `Journal`).
        var journalApplied = false
        /// For an index read `forSelection`: the bytes and each record's place in them, to
        /// read the chosen record whole (`complete`).
        var source: [UInt8] = []
        var ranges: [IndexCoder.Span] = []
        /// Instead of `source`, when the records came from the digest alone.
        var file: IndexFileBytes?

        /// Fills in what a selection read left out of record `i` (its feed-given texts).
        func complete(_ record: inout AdRecord, at i: Int) {
            guard i < ranges.count else { return }
            let bytes: ArraySlice<UInt8>
            if let file {
                guard let read = file.read(ranges[i]) else { return }
                bytes = read[...]
            } else {
                guard ranges[i].end <= source.count else { return }
                bytes = source[ranges[i].start..<ranges[i].end]
            }
            let whole: AdRecord? = bytes.withUnsafeBufferPointer { buffer in
                var s = JSONScanner(buffer)
                return try? AdRecord.Decoded(&s, forSelection: false).record
            }
            if let whole { record.takeTexts(of: whole) }
        }
    }

    /// Shows and events appended since the last fold.
    var journal: Journal { Journal(in: dir) }

    /// Applies the journal's records that `index` does not hold yet (SPEC §6: show counts
    /// survive a recovery to the previous generation). True when there were some.
    @discardableResult
    func applyJournal(
        _ index: inout CacheIndex, records: [JournalRecord]? = nil, positions: [String: Int]? = nil,
        warn: WarningSink
    ) throws -> Bool {
        let mark = index.journalMark
        // The shows only.
        index.applyJournal(try records ?? journal.read(warn: warn, deliveries: false), positions: positions)
        return index.journalMark != mark
    }

    /// Reads the index without a lock (it is only ever replaced whole, so what we read is
    /// complete) and changes nothing on disk. A missing index is an empty one; one that
    /// cannot be parsed is read from the previous generation instead, with a warning. Records
    /// that cannot be trusted are left out, each with a warning (SPEC §6).
    func load(warn: WarningSink) throws -> CacheIndex {
        try load(warn: warn, forSelection: false).index
    }

    /// As `load`; `forSelection` reads only what choosing an ad needs of each record (`next`
    /// at every launch), and `Loaded.complete` reads the chosen one whole.
    func load(warn: WarningSink, forSelection: Bool) throws -> Loaded {
        var loaded = try loadIndex(warn: warn, forSelection: forSelection)
        try applyJournal(&loaded.index, warn: warn)
        return loaded
    }

    /// The index file, or its previous generation when it cannot be read; nothing moved.
    private func loadIndex(warn: WarningSink, forSelection: Bool) throws -> Loaded {
        switch try readIndex(indexFile, forSelection: forSelection) {
        case .read(let decoded): return decoded.loaded(warn: warn)
        case .unreadable(let reason): return try fallBack(reason, movedTo: nil, warn: warn)
        }
    }

    /// As `load`, for a caller that holds the index lock and may write: an index that cannot
    /// be parsed is moved aside (`index.json.corrupt-<time>`, never over an earlier one) and
    /// the previous generation, if readable, takes its place.
    /// `journal`: its records when the caller has read them already (a fold).
    /// `repair: false` for a caller that holds only the journal lock (a launch, an event): an
    /// unreadable index is read as `load` reads it, and left where it is.
    func loadLocked(
        warn: WarningSink, forSelection: Bool = false, journal records: [JournalRecord]? = nil, repair: Bool = true
    ) throws -> Loaded {
        var loaded: Loaded
        if repair {
            loaded = try loadLockedIndex(warn: warn, forSelection: forSelection)
        } else {
            loaded = try loadIndex(warn: warn, forSelection: forSelection)
        }
        loaded.journalApplied = try applyJournal(&loaded.index, records: records, warn: warn)
        return loaded
    }

    /// The index file's identity: a replacement (a rename) or an edit changes it.
    struct FileIdentity: Equatable {
        var device: UInt64, inode: UInt64, size: Int64, mtime: Int64
    }

    /// An index as read without the lock, with the journal as it was then, and which file it
    /// was read from.
    struct IndexSnapshot {
        var decoded: IndexCoder.Decoded
        var identity: FileIdentity
    }

    /// Reads the index for selection without the lock, and applies the journal's records
    /// (the long part of a launch at 10,000 ads: decoding, the first copy of the records, the
    /// positions); nil when there is none or it cannot be read as it is (the locked path then
    /// deals with it). Warnings wait for the locked read.
    func snapshotForSelection() -> IndexSnapshot? {
        guard let before = indexFile.identity,
            case .read(var decoded)? = try? readIndex(indexFile, forSelection: true),
            indexFile.identity == before
        else { return nil }
        // Each record's place by id, here rather than under the lock (records taken from the
        // digest come without it): the journal's later records are applied with it there.
        if decoded.positions == nil { decoded.positions = decoded.index.positions }
        _ = try? applyJournal(&decoded.index, positions: decoded.positions, warn: { _ in })
        return IndexSnapshot(decoded: decoded, identity: before)
    }

    /// As `loadLocked`, for a launch that read the index before it took the journal's lock:
    /// while the file is still that one (it is only ever replaced whole, by a rename), only
    /// the journal's records appended since are applied, in place — so that a launch holds
    /// the lock for the journal and its choice only. Never repairs (see `loadLocked`).
    func loadLocked(early: inout IndexSnapshot?, warn: WarningSink, forSelection: Bool) throws -> Loaded {
        guard early != nil, early?.identity == indexFile.identity else {
            return try loadLocked(warn: warn, forSelection: forSelection, repair: false)
        }
        let positions = early!.decoded.positions
        let applied = try applyJournal(&early!.decoded.index, positions: positions, warn: warn)
        var loaded = early!.decoded.loaded(warn: warn)
        loaded.journalApplied = applied
        return loaded
    }

    /// Replaces index.json atomically (temporary, fsync, rename, fsync of the directory),
    /// keeping the generation it replaces as index.json.old.
    func save(_ index: CacheIndex) throws {
        guard !index.forSelection else {   // it lacks the feed's texts: never written
            throw AdCacheError.io("internal error: an index read for selection cannot be saved")
        }
        let bytes = try IndexCoder.encode(index)
        try replaceKeepingPrevious(indexFile, previous: oldIndexFile, with: bytes)
        CrashPoint.reach("save.beforeDigest")   // the new index with the old digest beside it
        saveDigest(of: bytes, stamped: stampIndex())
    }

    /// `index.sel` (`SelectionDigest`), for the index just written as `bytes`: the records as
    /// a selection read takes them from these bytes. When it cannot be written, none is left
    /// (a stale one would only be refused, but costs a read).
    /// `stamped`: the identity `stampIndex` gave the file those bytes are.
    func saveDigest(of bytes: [UInt8], stamped: FileIdentity?) {
        guard let decoded = try? IndexCoder.decode(bytes, forSelection: true),
            let digest = SelectionDigest.encode(decoded, of: bytes, identity: stamped),
            (try? digestFile.writeAtomically(digest, durable: false)) != nil
        else {
            digestFile.remove()
            return
        }
    }

    /// Gives `index.json` a modification time of its own — now, to the nanosecond — and
    /// returns its identity when the file system kept that time exactly: any write to the
    /// file since (an edit in place) sets the time to the kernel's clock, which no launch
    /// then takes for the stamp (`SelectionDigest.decode(_:identity:)`). Nil when the file
    /// cannot be stamped (not ours, a file system of coarse times): launches then hash it.
    func stampIndex() -> FileIdentity? {
        let fd = indexFile.open(O_RDONLY)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        if now.tv_nsec == 0 { now.tv_nsec = 1 }
        let omit = (1 << 30) - 2   // UTIME_OMIT (a macro Swift does not import): the access time as it is
        var times = [timespec(tv_sec: 0, tv_nsec: omit), now]
        var st = stat()
        guard futimens(fd, &times) == 0, fstat(fd, &st) == 0, st.st_mtim.tv_sec == now.tv_sec,
            st.st_mtim.tv_nsec == now.tv_nsec
        else { return nil }
        return FileIdentity(st)
    }

    /// Writes `index.sel` for the index on disk unless it has its digest already, for this
    /// very file (a copied index is checked by its hash until then). The caller holds the
    /// index lock.
    func refreshDigest() {
        if let identity = indexFile.identity, let digest = try? digestFile.read(limit: identity.size * 4 + 4096),
            SelectionDigest.isCurrent(digest, identity: identity)
        {
            return
        }
        var stamped = stampIndex()
        guard let bytes = try? indexFile.read(), !bytes.isEmpty else { return }
        if indexFile.identity != stamped { stamped = nil }   // written since: the hash alone
        saveDigest(of: bytes, stamped: stamped)
    }

    /// Replaces `file` atomically; the generation it replaces becomes `previous` (a hard
    /// link, renamed into place so that `previous` is never torn), as dpkg keeps
    /// `status-old`.
    func replaceKeepingPrevious(_ file: CacheFile, previous: CacheFile, with bytes: [UInt8]) throws {
        try file.writeAtomically(bytes) { keepPrevious(of: file, as: previous) }
    }

    /// Makes `previous` another name of `file` as it is, just before a new `file` replaces it.
    func keepPrevious(of file: CacheFile, as previous: CacheFile) {
        let staging = previous.sibling(previous.name + ".tmp")
        staging.remove()
        if file.status().map({ ($0.st_mode & S_IFMT) == S_IFREG }) == true, file.link(to: staging),
            !staging.rename(to: previous) || staging.exists
        {
            staging.remove()   // rename between two links of one file does nothing
        }
    }

    /// Runs `body` holding the index lock, waiting at most `timeout` (`lockTimeout`) for it
    /// (exit 75).
    func withIndexLock<T>(timeout: Double? = nil, _ body: () throws -> T) throws -> T {
        let lock = FileLock(indexLockFile)
        guard try lock.lock(timeout: timeout ?? lockTimeout) else {
            throw AdCacheError.busy("the cache is busy (index.lock is held); try again")
        }
        defer { lock.unlock() }
        return try body()
    }

    /// Read-modify-write of the index under its lock; writes only when `body` changed it.
    /// `timeout`: how long to wait for the index lock (default `lockTimeout`).
    func update<T>(warn: WarningSink, timeout: Double? = nil, _ body: (inout CacheIndex) throws -> T) throws -> T {
        try withIndexLock(timeout: timeout) {
            var index = try loadLocked(warn: warn).index
            let before = index
            let result = try body(&index)
            if index != before { try save(index) }
            return result
        }
    }

    /// Takes the fetch lock for a whole run, or says who holds it (exit 75).
    func acquireFetchLock() throws -> FileLock {
        let lock = FileLock(fetchLockFile)
        guard try lock.tryLock() else {
            let who = lock.owner().map { " (pid \($0))" } ?? ""
            throw AdCacheError.busy("another fetch is running\(who); try again later")
        }
        lock.writeOwner()
        return lock
    }

}

extension CacheStore {
    /// `adcache clear`: every ad and file goes; the directory stays. The index goes first, so
    /// that a crash part-way leaves files no index names (orphans), never a record naming a
    /// deleted file. Returns the number of files removed.
    /// The journal is folded first (`fold`, under the same lock: no show slips between), so
    /// the event queue and the counts keep everything — unless `events`, which drops them too.
    func clear(events: Bool, fold: () throws -> Void) throws -> Int {
        guard exists else { return 0 }
        let fetchLock = try acquireFetchLock()
        defer { fetchLock.unlock() }
        return try withIndexLock {
            if events {
                try journal.withLock(timeout: lockTimeout) { journal.removeAll() }
                eventsFile.remove()
            } else {
                try fold()
            }
            // The last signed feed accepted belongs to the cache (SPEC §11): a fresh index
            // keeps it, written before the old generations go.
            let signed = (try? IndexCoder.decode(indexFile.read(limit: 64 << 20)))?.index.signed
            if let signed {
                var kept = CacheIndex()
                kept.signed = signed
                try indexFile.writeAtomically(try IndexCoder.encode(kept))
            }
            for name in dir.list(.top)
            where (name == "index.json" && signed == nil) || name.hasPrefix("index.json.") {
                dir.file(name).remove()
            }
            uncommittedFile.remove()
            digestFile.remove()
            signedFeedFile.remove()
            vastDocumentsFile.remove()
            vastFeedFile.remove()
            dir.sync(.top)
            var count = 0
            for folder in [CacheDirectory.Folder.assets, .partial] {
                for name in dir.list(folder) where folder != .assets || AssetName.isValid(name) {
                    if dir.file(name, in: folder).remove() { count += 1 }
                }
            }
            dir.sync(.assets)
            return count
        }
    }
}

extension CacheStore {
    /// `feed.signed`: the bytes of the last signed feed accepted (SPEC §11), which a 304 of
    /// the feed stands for and a new signature is checked against.
    var signedFeedFile: CacheFile { dir.file("feed.signed") }
}

extension CacheStore {
    /// `fetch.uncommitted`: the files a fetch downloaded and moved into `assets/` but could
    /// not commit (the index lock held past its deadline, an index it could not write), as
    /// index records — so that the next fetch sends their validators, keeps each on a 304,
    /// and `prune` does not take them for orphans meanwhile. Written and read under the fetch
    /// lock; removed by the next commit.
    var uncommittedFile: CacheFile { dir.file("fetch.uncommitted") }

    func saveUncommitted(_ records: [AdRecord]) {
        var index = CacheIndex()
        index.ads = records
        guard !records.isEmpty, let bytes = try? IndexCoder.encode(index) else { return }
        try? uncommittedFile.writeAtomically(bytes)
    }

    /// The records as written (`prune` keeps the files they name).
    func loadUncommitted() -> [AdRecord] {
        guard uncommittedFile.exists, let bytes = try? uncommittedFile.read(limit: 64 << 20),
            let decoded = try? IndexCoder.decode(bytes)
        else { return [] }
        return decoded.index.ads
    }

    /// The records whose file is still the one downloaded (`confirmFile`).
    func uncommittedDownloads() -> [AdRecord] {
        loadUncommitted().compactMap { r in
            var r = r
            return confirmFile(&r) ? r : nil
        }
    }
}

extension CacheStore.FileIdentity {
    init(_ st: stat) {
        self.init(
            device: UInt64(st.st_dev), inode: UInt64(st.st_ino), size: Int64(st.st_size),
            mtime: FileIO.nanoseconds(st.st_mtim))
    }
}
