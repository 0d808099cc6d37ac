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
final class CacheStore {
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
    var indexPath: String { indexFile.path }
    var oldIndexPath: String { oldIndexFile.path }
    var assetsDirectory: String { dir.path(of: .assets) }
    var partialDirectory: String { dir.path(of: .partial) }

    /// How long `next` and the other commands wait for the index lock (SPEC §6).
    var lockTimeout: Double = 1
    /// Past this many bytes of journal, `next` folds it itself (about 4,000 shows).
    var journalFoldSize: Int64 = 1 << 20

    /// `warn` hears what the directory itself is found to be (a link where a folder belongs,
    /// a cache others can write while running as root).
    init(directory: String, warn: @escaping WarningSink = { _ in }) {
        let path = directory.hasSuffix("/") && directory.count > 1 ? String(directory.dropLast()) : directory
        dir = CacheDirectory(path: path, warn: warn)
        indexFile = dir.file("index.json")
        oldIndexFile = dir.file("index.json.old")
        indexLockFile = dir.file("index.lock")
        fetchLockFile = dir.file("fetch.lock")
    }

    /// `$ADCACHE_DIR`, else `$XDG_CACHE_HOME/adcache`, else `~/.cache/adcache`.
    static func defaultDirectory(environment: [String: String] = ProcessInfo.processInfo.environment) -> String {
        if let d = environment["ADCACHE_DIR"], !d.isEmpty { return absolute(d) }
        if let x = environment["XDG_CACHE_HOME"], !x.isEmpty { return absolute(x) + "/adcache" }
        let home =
            environment["HOME"].flatMap { $0.isEmpty ? nil : $0 } ?? getpwuid(getuid()).map {
                String(cString: $0.pointee.pw_dir)
            } ?? "/"
        return home + "/.cache/adcache"
    }

    static func absolute(_ path: String) -> String {
        if path.hasPrefix("/") { return path }
        let cwd = FileManager.default.currentDirectoryPath
        return PathText.join(cwd, path)
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
        var unfolded = false
        /// For an index read `forSelection`: the bytes and each record's place in them, to
        /// read the chosen record whole (`complete`).
        var source: [UInt8] = []
        var ranges: [Range<Int>] = []

        /// Fills in what a selection read left out of record `i` (its feed-given texts).
        func complete(_ record: inout AdRecord, at i: Int) {
            guard i < ranges.count else { return }
            let whole: AdRecord? = source.withUnsafeBufferPointer { all in
                var s = JSONScanner(UnsafeBufferPointer(rebasing: all[ranges[i]]))
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
    func applyJournal(_ index: inout CacheIndex, records: [JournalRecord]? = nil, warn: WarningSink) throws -> Bool {
        let mark = index.journalMark
        index.apply(try records ?? journal.read(warn: warn, deliveries: false))   // the shows only
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
        switch try read(indexFile, forSelection: forSelection) {
        case .success(let decoded): return decoded.loaded(warn: warn)
        case .failure(let unreadable): return try fallBack(unreadable.reason, movedTo: nil, warn: warn)
        }
    }

    /// As `load`, for a caller that holds the index lock and may write: an index that cannot
    /// be parsed is moved aside (`index.json.corrupt-<time>`, never over an earlier one) and
    /// the previous generation, if readable, takes its place.
    /// `journal`: its records when the caller has read them already (a fold).
    /// `early`: the index as read before the lock was taken; used when the file is still
    /// that one (it is only ever replaced whole, by a rename), so that a launch holds the lock
    /// for the journal and its choice only, not for reading a large index.
    /// `repair: false` for a caller that holds only the journal lock (a launch, an event): an
    /// unreadable index is read as `load` reads it, and left where it is.
    func loadLocked(
        warn: WarningSink, forSelection: Bool = false, journal records: [JournalRecord]? = nil,
        early: IndexSnapshot? = nil, repair: Bool = true
    ) throws -> Loaded {
        var loaded: Loaded
        if let early, early.identity == indexFile.identity {
            loaded = early.decoded.loaded(warn: warn)
        } else if repair {
            loaded = try loadLockedIndex(warn: warn, forSelection: forSelection)
        } else {
            loaded = try loadIndex(warn: warn, forSelection: forSelection)
        }
        loaded.unfolded = try applyJournal(&loaded.index, records: records, warn: warn)
        return loaded
    }

    /// The index file's identity: a replacement (a rename) or an edit changes it.
    struct FileIdentity: Equatable {
        var device: UInt64, inode: UInt64, size: Int64, mtime: Int64
    }

    /// An index as read without the lock, and which file it was read from.
    struct IndexSnapshot {
        var decoded: IndexCoder.Decoded
        var identity: FileIdentity
    }

    /// Reads the index for selection without the lock; nil when there is none or it cannot
    /// be read as it is (the locked path then deals with it).
    func snapshotForSelection() -> IndexSnapshot? {
        guard let before = indexFile.identity, case .success(let decoded)? = try? read(indexFile, forSelection: true),
            indexFile.identity == before
        else { return nil }
        return IndexSnapshot(decoded: decoded, identity: before)
    }

    private func loadLockedIndex(warn: WarningSink, forSelection: Bool) throws -> Loaded {
        switch try read(indexFile, forSelection: forSelection) {
        case .success(let decoded): return decoded.loaded(warn: warn)
        case .failure(let unreadable):
            let aside = asideName(indexFile)
            guard indexFile.rename(to: aside) else {
                throw AdCacheError.io(
                    "index.json cannot be read (\(unreadable.reason)) nor moved aside: \(FileIO.errnoText())")
            }
            let loaded = try fallBack(unreadable.reason, movedTo: aside.path, warn: warn)
            // The previous generation is current again.
            if loaded.recovered, !oldIndexFile.isLink { _ = oldIndexFile.link(to: indexFile) }
            dir.sync(.top)
            return loaded
        }
    }

    /// After an unreadable index: the previous generation when it can be read (show counts
    /// survive; at most the last change is lost), else an empty index for the next fetch to
    /// rebuild.
    private func fallBack(_ reason: String, movedTo aside: String?, warn: WarningSink) throws -> Loaded {
        let what = "index.json could not be read (\(reason))" + (aside.map { "; moved it aside to \($0)" } ?? "")
        if oldIndexFile.exists, case .success(let old) = try read(oldIndexFile) {
            warn(Diagnostic(.index, what + "; using index.json.old, the previous generation"))
            return Loaded(index: old.index(warn: warn), recovered: true)
        }
        warn(Diagnostic(.index, what + "; the next fetch rebuilds it"))
        return Loaded(index: CacheIndex(), recovered: true)
    }

    /// `<name>.corrupt-<time>`, with `.1`, `.2`… when that name is taken.
    func asideName(_ file: CacheFile) -> CacheFile {
        let base = "\(file.name).corrupt-\(Int(Date().timeIntervalSince1970))"
        var aside = file.sibling(base)
        var n = 0
        while aside.exists {
            n += 1
            aside = file.sibling("\(base).\(n)")
        }
        return aside
    }

    struct Unreadable: Error { var reason: String }

    private func read(_ file: CacheFile, forSelection: Bool = false) throws -> Result<IndexCoder.Decoded, Unreadable> {
        guard let st = file.status() else { return .success(IndexCoder.Decoded(index: CacheIndex())) }
        guard (st.st_mode & S_IFMT) == S_IFREG else {   // a link (never followed), a fifo…
            return .failure(Unreadable(reason: "it is not a regular file"))
        }
        let bytes: [UInt8]
        do {
            bytes = try file.read()
        } catch let e as AdCacheError {
            throw AdCacheError.io(e.message)
        }
        if bytes.isEmpty { return .failure(Unreadable(reason: "it is empty")) }
        let decoded: IndexCoder.Decoded
        do {
            decoded = try IndexCoder.decode(bytes, forSelection: forSelection)
        } catch let e as JSONScanner.Malformed {
            return .failure(Unreadable(reason: "\(e.what) at byte \(e.offset)"))
        } catch {
            return .failure(Unreadable(reason: "it is not a valid index"))
        }
        guard decoded.index.version <= CacheIndex.currentVersion else {
            throw AdCacheError.io(
                "index.json has version \(decoded.index.version), newer than this adcache understands (\(CacheIndex.currentVersion))"
            )
        }
        return .success(decoded)
    }

    /// Replaces index.json atomically (temporary, fsync, rename, fsync of the directory),
    /// keeping the generation it replaces as index.json.old.
    func save(_ index: CacheIndex) throws {
        guard !index.forSelection else {   // it lacks the feed's texts: never written
            throw AdCacheError.io("internal error: an index read for selection cannot be saved")
        }
        try replaceKeepingPrevious(indexFile, previous: oldIndexFile, with: try IndexCoder.encode(index))
    }

    /// Replaces `file` atomically; the generation it replaces becomes `previous` (a hard
    /// link, renamed into place so that `previous` is never torn), as dpkg keeps
    /// `status-old`.
    func replaceKeepingPrevious(_ file: CacheFile, previous: CacheFile, with bytes: [UInt8]) throws {
        try file.writeAtomically(bytes) {
            let staging = previous.sibling(previous.name + ".tmp")
            staging.remove()
            if file.status().map({ ($0.st_mode & S_IFMT) == S_IFREG }) == true, file.link(to: staging),
                !staging.rename(to: previous) || staging.exists
            {
                staging.remove()   // rename between two links of one file does nothing
            }
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
    func update<T>(warn: WarningSink, _ body: (inout CacheIndex) throws -> T) throws -> T {
        try withIndexLock {
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

    /// True when a fetch holds its lock now.
    func fetchIsRunning() -> Bool {
        guard fetchLockFile.exists else { return false }
        let lock = FileLock(fetchLockFile)
        guard let free = try? lock.tryLock() else { return false }
        lock.unlock()
        return !free
    }
}

/// The index's JSON form: readable (pretty, sorted keys), versioned, and read and written
/// without Codable, which would dominate `next` on a large index.
enum IndexCoder {
    /// An index as read, with what had to be left out or repaired to trust it.
    struct Decoded {
        var index: CacheIndex
        var repairs: [Diagnostic] = []
        var source: [UInt8] = []
        var ranges: [Range<Int>] = []

        /// The index, each repair said once as a warning.
        func index(warn: WarningSink) -> CacheIndex {
            for r in repairs { warn(r) }
            return index
        }

        func loaded(warn: WarningSink) -> CacheStore.Loaded {
            var l = CacheStore.Loaded(index: index(warn: warn))
            l.source = source
            l.ranges = ranges
            return l
        }

        mutating func repair(_ ad: String?, _ text: String) {
            repairs.append(Diagnostic(.index, ad: ad, "index.json: " + text))
        }
    }

    /// Reads the index. Malformed JSON (a torn or garbled file) throws. A record whose values
    /// cannot be trusted — a field of the wrong kind, an unknown state, a negative count, a
    /// time out of range — is dropped; a record whose only fault is its file name keeps its
    /// counts and loses the file. Either is a repair, said as a warning.
    static func decode(_ bytes: [UInt8], forSelection: Bool = false) throws -> Decoded {
        try bytes.withUnsafeBufferPointer { buffer in
            var s = JSONScanner(buffer)
            var decoded = Decoded(index: CacheIndex())
            if forSelection {
                decoded.index.forSelection = true
                decoded.source = bytes
            }
            var version: Int64?
            var showSeq: Int64?
            try s.object { s, key in
                switch key {
                case "version": version = try s.int()
                case "feed": decoded.index.feed = try s.null() ? nil : FeedSource(&s)
                case "showSeq": showSeq = try s.lenient { try $0.int() }
                case "lastShown": decoded.index.lastShown = try s.lenient { try $0.optDouble() } ?? nil
                case "clockOffset": decoded.index.clockOffset = try s.lenient { try $0.optDouble() } ?? nil
                case "clockSync":
                    decoded.index.clockSync = try s.lenient { try $0.optString() }?.flatMap(ClockSync.init(text:))
                case "rotations":
                    _ = try s.lenient { s in
                        try s.object { s, key in
                            let text = try s.string()   // "signature epoch rounds"
                            let parts = text.split(separator: " ")
                            if parts.count == 3, let epoch = Int64(parts[1]), let rounds = Int64(parts[2]),
                                AdRecord.counts.contains(epoch), AdRecord.counts.contains(rounds)
                            {
                                decoded.index.rotations[key] = Rotation(
                                    signature: String(parts[0]), epoch: epoch, rounds: rounds)
                            }
                        }
                    }
                case "journalSeq": decoded.index.journalSeq = try s.lenient { try $0.int() } ?? 0
                case "journalMark":
                    decoded.index.journalMark = try s.lenient { try $0.optString() }?.flatMap(JournalMark.init(text:))
                case "reportUrl": decoded.index.reportUrl = try s.lenient { try $0.optString() } ?? nil
                case "ads":
                    var ids = Set<String>()
                    try s.array { s in
                        let start = s.position()
                        var record = try AdRecord.Decoded(&s, forSelection: forSelection)
                        let end = s.position()
                        if record.fault == nil, !ids.insert(record.record.id).inserted {
                            record.fault = "an earlier record has the same id"
                        }
                        if let fault = record.fault {
                            decoded.repair(record.record.id, "dropped the record of \(record.name): \(fault)")
                            return
                        }
                        if let fault = record.fileFault {
                            decoded.repair(record.record.id, "\(record.name) loses its file: \(fault)")
                            record.record.forgetFile()
                            if record.record.state == .ready { record.record.state = .pending }
                        }
                        decoded.index.ads.append(record.record)
                        if forSelection { decoded.ranges.append(start..<end) }
                    }
                default: try s.skip()
                }
            }
            try s.finish()
            guard let version else { throw s.fail("no version") }
            decoded.index.version = Int(version)
            // The show counter orders shows: it must be a count and at least every record's.
            let highest = decoded.index.ads.compactMap(\.lastShowSeq).max() ?? 0
            if let seq = showSeq, AdRecord.counts.contains(seq), seq >= highest {
                decoded.index.showSeq = seq
            } else {
                decoded.index.showSeq = highest
                if showSeq != nil {
                    decoded.repair(nil, "the show counter was out of range; restarted it at \(highest)")
                }
            }
            // Journal records up to this number are in the index: never more than it counted.
            if !(0...decoded.index.showSeq).contains(decoded.index.journalSeq) {
                decoded.index.journalSeq = decoded.index.showSeq
                decoded.repair(nil, "the journal mark was out of range; set it to the show counter")
            }
            if let offset = decoded.index.clockOffset, !(abs(offset) < 1e10) {
                decoded.index.clockOffset = nil
                decoded.repair(nil, "the clock offset was out of range; forgot it")
            }
            if let t = decoded.index.lastShown, !Time.isSupported(t) {
                decoded.index.lastShown = nil
                decoded.repair(nil, "the time of the last show was out of range; forgot it")
            }
            return decoded
        }
    }

    static func encode(_ index: CacheIndex) throws -> [UInt8] {
        var w = JSONWriter(indent: 2, capacity: 512 + index.ads.count * 700)
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
            w.field("freshUntil", feed.freshUntil)
            w.field("lastModified", feed.lastModified)
            w.field("sha256", feed.sha256)
            w.field("url", feed.url)
            w.endObject()
        }
        w.field("clockOffset", index.clockOffset)
        w.field("clockSync", index.clockSync?.text)
        w.field("journalMark", index.journalMark?.text)
        w.field("journalSeq", index.journalSeq)
        w.field("lastShown", index.lastShown)
        w.field("reportUrl", index.reportUrl)
        if !index.rotations.isEmpty {
            w.key("rotations")
            w.beginObject()
            for (k, r) in index.rotations.sorted(by: { $0.key < $1.key }) {
                w.field(k, "\(r.signature) \(r.epoch) \(r.rounds)")
            }
            w.endObject()
        }
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
            case "sha256": f.sha256 = try s.optString()
            case "freshUntil": f.freshUntil = try s.lenient { try $0.optDouble() } ?? nil
            default: try s.skip()
            }
        }
        guard let url else { throw s.fail("feed without url") }
        f.url = url
        self = f
    }
}

extension AdRecord {
    /// Counters adcache keeps (shows, the show counter): whole numbers from 0 to 2^53, where
    /// a JSON number is still exact. Anything else in the index is damage.
    static let counts: ClosedRange<Int64> = 0...(1 << 53)

    /// One record as read: the record, or why it cannot be trusted.
    struct Decoded {
        var record: AdRecord
        /// Why the whole record is dropped.
        var fault: String?
        /// Why the record keeps its counts but loses its file.
        var fileFault: String?
        /// How warnings name the record.
        var name: String { record.id.isEmpty ? "an ad without an id" : "ad '\(record.id)'" }

        /// The keys of a record as `write` writes them.
        enum Field: String, CaseIterable, Sendable {
            case id, url, type, placement, state, file, bytes, fileMtime, sha256, fileSha256, etag, lastModified
            case start, expires, maxShows, maxShowsPerDay, minInterval, duration, priority, clickUrl, meta
            case shows, lastShown, lastShowSeq, showDay, showsOnDay, error, weight, failures, freshUntil
            case feedType, failedFor, retryAt, failedEtag, failedLastModified, picks, pickEpoch, tracking
            case hours, days
        }
        static let fields = JSONKeyTable<Field>()

        /// `forSelection` skips the texts choosing an ad does not need (`takeTexts` brings
        /// them back for the chosen one).
        init(_ s: inout JSONScanner, forSelection: Bool = false) throws {
            var id: String?, url: String?, state: StoredState?, stateName: String?
            var r = AdRecord(ad: FeedAd(id: "", url: ""))
            var fault: String?
            try s.object(Self.fields) { s, key in
                let ok = try s.lenient { s -> Bool in
                    switch key {
                    case .id: id = try s.string()
                    case .url: if forSelection { try s.skip(); url = "" } else { url = try s.string() }
                    case .type:
                        if let name = try s.optString() {
                            guard let t = AdType(rawValue: name) else { return false }
                            r.type = t
                        }
                    case .placement: r.placement = try s.string()
                    case .state:
                        stateName = try s.string()
                        state = StoredState(rawValue: stateName!)
                    case .file: r.file = try s.optString()
                    case .bytes: r.bytes = try s.optInt()
                    case .fileMtime: r.fileMtime = try s.optInt()
                    case .sha256: if forSelection { try s.skip() } else { r.sha256 = try s.optString() }
                    case .fileSha256: if forSelection { try s.skip() } else { r.fileSha256 = try s.optString() }
                    case .etag: if forSelection { try s.skip() } else { r.etag = try s.optString() }
                    case .lastModified: if forSelection { try s.skip() } else { r.lastModified = try s.optString() }
                    case .start: r.start = try s.optDouble()
                    case .expires: r.expires = try s.optDouble()
                    case .maxShows: r.maxShows = try s.optInt()
                    case .maxShowsPerDay: r.maxShowsPerDay = try s.optInt()
                    case .minInterval: r.minInterval = try s.optInt()
                    case .duration: r.duration = Int(try s.int())
                    case .priority: r.priority = try s.int()
                    case .clickUrl: if forSelection { try s.skip() } else { r.clickUrl = try s.optString() }
                    case .meta:
                        if forSelection { try s.skip() } else { r.meta = try s.null() ? nil : s.value() }
                    case .shows: r.shows = try s.int()
                    case .lastShown: r.lastShown = try s.optDouble()
                    case .lastShowSeq: r.lastShowSeq = try s.optInt()
                    case .showDay: r.showDay = try s.optInt().map(Int.init)
                    case .showsOnDay: r.showsOnDay = try s.optInt()
                    case .error: if forSelection { try s.skip() } else { r.error = try s.optString() }
                    case .weight: r.weight = try s.int()
                    case .failures: r.failures = try s.optInt()
                    case .freshUntil: r.freshUntil = try s.optDouble()
                    case .feedType:
                        if let name = try s.optString() {
                            guard let t = AdType(rawValue: name) else { return false }
                            r.feedType = t
                        }
                    case .failedFor: if forSelection { try s.skip() } else { r.failedFor = try s.optString() }
                    case .retryAt: r.retryAt = try s.optDouble()
                    case .failedEtag: if forSelection { try s.skip() } else { r.failedEtag = try s.optString() }
                    case .failedLastModified:
                        if forSelection { try s.skip() } else { r.failedLastModified = try s.optString() }
                    case .picks: r.picks = try s.optInt()
                    case .pickEpoch: r.pickEpoch = try s.optInt()
                    case .tracking where forSelection: try s.skip()
                    case .tracking:
                        var tracking: [String: [String]] = [:]
                        try s.object { s, event in tracking[event] = try s.strings() }
                        r.tracking = tracking
                    case .hours:
                        guard let windows = Schedule.windows(try s.strings()) else { return false }
                        r.schedule.windows = windows
                    case .days:
                        guard let mask = Schedule.dayMask(try s.strings()) else { return false }
                        r.schedule.days = mask
                    case nil: try s.skip()
                    }
                    return true
                }
                if ok != true, fault == nil, let key { fault = "its \"\(key.rawValue)\" is not a value adcache writes" }
            }
            r.id = id ?? ""
            r.url = url ?? ""
            r.state = state ?? .pending
            record = r
            if fault == nil {
                if id == nil || url == nil || stateName == nil {
                    fault = "it has no id, url or state"
                } else if state == nil {
                    fault = "its state '\(stateName!)' is not one this adcache knows"
                }
            }
            self.fault = fault ?? r.implausibility
            fileFault = r.fileImplausibility
        }
    }

    /// Why this record's counts or times cannot be trusted, or nil.
    var implausibility: String? {
        // One by one, not as lists: this runs for every record a launch reads.
        func count(_ name: StaticString, _ v: Int64?) -> String? {
            guard let v, !Self.counts.contains(v) else { return nil }
            return "its \"\(name)\" (\(v)) is not a count"
        }
        func negative(_ name: StaticString, _ v: Int64?) -> String? {
            guard let v, v < 0 else { return nil }
            return "its \"\(name)\" (\(v)) is negative"
        }
        func time(_ name: StaticString, _ v: Double?) -> String? {
            guard let v, !Time.isSupported(v) else { return nil }
            return "its \"\(name)\" is not a time between the years 0 and 9999"
        }
        if let why = count("shows", shows) ?? count("showsOnDay", showsOnDay) { return why }
        if let why = count("lastShowSeq", lastShowSeq) ?? count("picks", picks) { return why }
        if let why = count("pickEpoch", pickEpoch) ?? negative("maxShows", maxShows) { return why }
        if let why = negative("maxShowsPerDay", maxShowsPerDay) ?? negative("minInterval", minInterval) {
            return why
        }
        if let f = failures, !(1...64).contains(f) { return "its \"failures\" (\(f)) is out of range" }
        if let why = time("start", start) ?? time("expires", expires) ?? time("lastShown", lastShown) { return why }
        if let why = time("retryAt", retryAt) ?? time("freshUntil", freshUntil) { return why }
        if let d = showDay, !(-800_000...3_000_000).contains(d) { return "its \"showDay\" (\(d)) is out of range" }
        if !(FeedAd.durationRange).contains(duration) { return "its \"duration\" (\(duration)) is out of range" }
        if !FeedAd.weightRange.contains(weight) { return "its \"weight\" (\(weight)) is out of range" }
        return nil
    }

    /// Why this record's file cannot be used, or nil: a name that is not an asset's (SPEC §6:
    /// never opened or deleted) or a negative size.
    var fileImplausibility: String? {
        guard let file else { return nil }
        if !AssetName.isValid(file) { return "its file name is not an asset's (<64 hex digits>.<ext>)" }
        if let b = bytes, b < 0 { return "its size (\(b)) is negative" }
        return nil
    }

    func write(_ w: inout JSONWriter) {
        w.beginObject()
        w.field("bytes", bytes)
        w.field("clickUrl", clickUrl)
        w.field("duration", duration)
        w.field("error", error)
        w.field("etag", etag)
        w.field("expires", expires)
        w.field("file", file)
        w.field("fileMtime", fileMtime)
        w.field("failedEtag", failedEtag)
        w.field("failedFor", failedFor)
        w.field("failedLastModified", failedLastModified)
        w.field("failures", failures)
        w.field("feedType", feedType?.rawValue)
        w.field("fileSha256", fileSha256)
        w.field("freshUntil", freshUntil)
        w.field("hours", schedule.hoursText)
        w.field("days", schedule.daysText)
        w.field("id", id)
        w.field("lastModified", lastModified)
        w.field("lastShowSeq", lastShowSeq)
        w.field("lastShown", lastShown)
        w.field("maxShows", maxShows)
        w.field("maxShowsPerDay", maxShowsPerDay)
        w.field("meta", meta)
        w.field("minInterval", minInterval)
        w.field("pickEpoch", pickEpoch)
        w.field("picks", picks)
        w.field("placement", placement)
        w.field("priority", priority)
        w.field("retryAt", retryAt)
        w.field("sha256", sha256)
        w.field("showDay", showDay)
        w.field("shows", shows)
        w.field("showsOnDay", showsOnDay)
        w.field("start", start)
        w.field("state", state.rawValue)
        if !tracking.isEmpty {
            w.key("tracking")
            w.beginObject()
            for (event, urls) in tracking.sorted(by: { $0.key < $1.key }) { w.field(event, urls) }
            w.endObject()
        }
        w.field("type", type?.rawValue)
        w.field("url", url)
        if weight != 1 { w.field("weight", weight) }
        w.endObject()
    }
}

extension Optional {
    func orThrow(_ e: @autoclosure () -> Error) throws -> Wrapped {
        guard let v = self else { throw e() }
        return v
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
            for name in dir.list(.top) where name == "index.json" || name.hasPrefix("index.json.") {
                dir.file(name).remove()
            }
            uncommittedFile.remove()
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

    /// The records whose file is still the one downloaded: same size and time, or else same
    /// content (hashed again).
    func uncommittedDownloads() -> [AdRecord] {
        loadUncommitted().filter { r in
            fileUnchanged(r)
                || (filePresent(r) && r.fileSha256 != nil && SHA256Hasher.hex(of: asset(r.file ?? "")) == r.fileSha256)
        }
    }
}
