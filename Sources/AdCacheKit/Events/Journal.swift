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

/// One show or event, as `next` and `event` append it to the journal: the record of the show
/// (for the index) and the event with its deliveries (for the queue) in one line, so that a
/// crash leaves both or neither (SPEC §8).
struct JournalRecord: Equatable, Sendable {
    /// `impression` (a recorded show), `click`, `skip` or `complete`.
    var event: String
    var id: String
    /// When it happened (the corrected clock, or `--at`).
    var at: Double
    /// The local day it counts for.
    var day: Int
    /// Unique to this event: the receiver drops duplicates by it.
    var nonce: String
    /// The index's show number (impressions only): orders shows, and tells which records the
    /// index already holds.
    var seq: Int64?
    /// Its line in the journal (counting every line, damaged ones too), as read.
    var lineNumber = 0
    /// A hash (FNV-1a, 64 bits) of its file's bytes up to the end of its line, as read: what
    /// ties a reader's mark to this line of this file, not to a line copied to that number.
    var prefixHash: UInt64 = 0
    /// The tracker URLs to call, macros expanded when queued (a retry sends the same URL).
    var trackers: [String] = []
    /// Also POSTed to the report URL in a batch.
    var batch = false
    /// The weighted rotation the show belongs to (its key and signature), if any.
    var rotationKey: String?
    var rotationSignature: String?
    /// A VAST video's show: its `start` is counted with it (SPEC §10).
    var start = false
    /// A show `next --render` recorded: counted as a show, its impression not queued until
    /// the launcher confirms it (SPEC §8 *An impression is a render*); its nonce is the token.
    var render = false
    /// A confirmation (`rendered`): the token of the show it confirms.
    var show: String?
    /// A `progress` event: the ad's position reported, in milliseconds; the trackers of every
    /// offset up to it are queued for the ad's last show.
    var upTo: Int64?

    /// One line of JSON, newline included.
    func line() -> [UInt8] {
        var w = JSONWriter(indent: nil, capacity: 256)
        w.beginObject()
        w.field("at", at)
        if batch { w.key("batch"); w.bool(true) }
        w.field("day", day)
        w.field("event", event)
        w.field("id", id)
        w.field("nonce", nonce)
        if render { w.key("render"); w.bool(true) }
        w.field("rot", rotationKey)
        w.field("seq", seq)
        w.field("show", show)
        w.field("sig", rotationSignature)
        if start { w.key("start"); w.bool(true) }
        if !trackers.isEmpty { w.field("trackers", trackers) }
        w.field("upTo", upTo)
        w.endObject()
        w.out.append(0x0A)
        return w.out
    }

    init(event: String, id: String, at: Double, day: Int, nonce: String) {
        self.event = event
        self.id = id
        self.at = at
        self.day = day
        self.nonce = nonce
    }

    /// The keys of a line as `line` writes them.
    enum Field: String, CaseIterable, Sendable {
        case at, batch, day, event, id, nonce, render, rot, seq, show, sig, start, trackers, upTo
    }
    static let fields = JSONKeyTable<Field>()

    /// Reads one line; nil when it is not a whole record adcache writes (torn or garbled).
    /// Without `deliveries` the tracker URLs are checked, not kept (the index needs only the
    /// show): every reader takes and refuses the same lines (SPEC §6 v4).
    init?(line: UnsafeBufferPointer<UInt8>, deliveries: Bool = true) {
        var r = JournalRecord(event: "", id: "", at: .nan, day: Int.min, nonce: "")
        var s = JSONScanner(line)
        do {
            // Every launch reads the lines not yet folded: keys matched as bytes, as the index's.
            try s.object(Self.fields) { s, key in
                switch key {
                case .at: r.at = try s.double()
                case .batch: r.batch = try s.bool()
                case .day: r.day = Int(try s.int())
                case .event: r.event = try s.string()
                case .id: r.id = try s.string()
                case .nonce: r.nonce = try s.string()
                case .render: r.render = try s.bool()
                case .rot: r.rotationKey = try s.string()
                case .seq: r.seq = try s.int()
                case .show: r.show = try s.string()
                case .upTo: r.upTo = try s.int()
                case .sig: r.rotationSignature = try s.string()
                case .start: r.start = try s.bool()
                case .trackers:
                    if deliveries { r.trackers = try s.strings() } else { try s.checkStrings() }
                case nil: try s.skip()
                }
            }
            try s.finish()
        } catch {
            return nil
        }
        guard FeedAd.journalEvents.contains(r.event), !r.id.isEmpty, !r.nonce.isEmpty, Time.isSupported(r.at),
            Time.supportedDays.contains(r.day), r.seq.map(AdRecord.counts.contains) ?? (r.event != "impression"),
            !r.render || r.event == "impression", (r.show != nil) == (r.event == "rendered"), r.show?.isEmpty != true,
            (r.upTo != nil) == (r.event == "progress"), r.upTo.map { $0 >= 0 } != false
        else { return nil }
        self = r
    }
}

/// `journal` in the cache directory: shows and events appended one line each, with one
/// fdatasync, under the journal's own small lock (`journal.lock`). A recorded show therefore
/// writes a few hundred bytes whatever the size of the index (SPEC §7), and waits for no
/// fold. Loading the index applies the records it does not hold yet; `fetch`, `report`,
/// `prune` and `clear` fold the journal into the index and the event queue: under the
/// journal lock it is moved aside to `journal.folding` (a rename), the long work is done
/// under the index lock only, and `journal.folding` is removed, again under the journal
/// lock. Every reader reads both, `journal.folding` first (`read`).
struct Journal {
    let file: CacheFile
    /// The journal a fold moved aside and has not finished with.
    let folding: CacheFile
    let lockFile: CacheFile
    var path: String { file.path }

    init(in dir: CacheDirectory) {
        file = dir.file("journal")
        folding = dir.file("journal.folding")
        lockFile = dir.file("journal.lock")
    }

    /// The records of `journal.folding`, then of `journal`, in order; each record's line is
    /// its line in its own file (a rename keeps it). A last line without its newline (a write
    /// cut short by a crash, before the show was reported) is not a record; a line that
    /// cannot be read is skipped with a warning, and so is a second line with a nonce already
    /// read (a record is its nonce: a line copied is neither counted nor delivered twice).
    func read(warn: WarningSink, deliveries: Bool = true) throws -> [JournalRecord] {
        var records: [JournalRecord] = []
        var nonces = Set<String>()
        var damaged = 0
        var copies = 0
        for file in [folding, file] {
            guard let st = file.status() else { continue }
            guard (st.st_mode & S_IFMT) == S_IFREG else {   // a link is never followed: no journal
                warn(Diagnostic(.index, "\(file.path) is not a regular file (a symbolic link?); not read"))
                continue
            }
            let bytes: [UInt8]
            do {
                bytes = try file.read()
            } catch let e as AdCacheError {
                throw AdCacheError.io(e.message)
            }
            bytes.withUnsafeBufferPointer { all in
                var start = 0
                var n = 0
                var hash = JournalMark.hashSeed
                while let end = all[start...].firstIndex(of: 0x0A) {
                    hash = JournalMark.hash(UnsafeBufferPointer(rebasing: all[start...end]), from: hash)
                    if end > start {
                        if var r = JournalRecord(
                            line: UnsafeBufferPointer(rebasing: all[start..<end]), deliveries: deliveries)
                        {
                            r.lineNumber = n
                            r.prefixHash = hash
                            if nonces.insert(r.nonce).inserted { records.append(r) } else { copies += 1 }
                        } else {
                            damaged += 1
                        }
                    }
                    start = end + 1
                    n += 1
                }
            }
        }
        if damaged > 0 {
            warn(Diagnostic(.index, "journal: skipped \(damaged) damaged line\(damaged == 1 ? "" : "s")"))
        }
        if copies > 0 {
            warn(
                Diagnostic(
                    .index, "journal: skipped \(copies) repeated line\(copies == 1 ? "" : "s") (a nonce read already)"))
        }
        return records
    }

    /// Runs `body` holding the journal lock, waiting at most `timeout` for it (exit 75).
    /// Held for an append, or for a fold's rename and removal: never for long.
    func withLock<T>(timeout: Double, _ body: () throws -> T) throws -> T {
        let lock = FileLock(lockFile)
        guard try lock.lock(timeout: timeout) else {
            throw AdCacheError.busy("the cache is busy (journal.lock is held); try again")
        }
        defer { lock.unlock() }
        return try body()
    }

    /// Appends `record` durably (write, fdatasync; the directory too when the file is new).
    /// The caller holds the journal lock. A torn last line left by a crash is cut off first,
    /// so that it never swallows this record.
    func append(_ record: JournalRecord) throws {
        let isNew = !file.exists
        let fd = file.openForWriting(O_RDWR | O_CREAT | O_APPEND)
        guard fd >= 0 else { throw FileIO.writeError("cannot write \(path)") }
        defer { close(fd) }
        var st = stat()
        if fstat(fd, &st) == 0, st.st_size > 0 {
            var last: UInt8 = 0
            if pread(fd, &last, 1, off_t(st.st_size - 1)) == 1, last != 0x0A {
                let whole = (try? FileIO.read(fd: fd, path: path)) ?? []
                let keep = whole.lastIndex(of: 0x0A).map { $0 + 1 } ?? 0
                guard ftruncate(fd, off_t(keep)) == 0 else { throw FileIO.writeError("cannot repair \(path)") }
            }
        }
        let line = record.line()
        if let e = line.withUnsafeBytes({ FileIO.writeAll(fd, $0) }) {
            // Leave no part of this record behind: the show was not recorded.
            ftruncate(fd, st.st_size)
            throw FileIO.writeError("cannot write \(path)", e)
        }
        guard fdatasync(fd) == 0 else {
            let e = errno
            ftruncate(fd, st.st_size)
            throw FileIO.writeError("cannot write \(path)", e)
        }
        if isNew { file.directory.sync(file.folder) }
        CrashPoint.reach("journal.afterAppend")
    }

    /// A fold's first step (the caller holds the journal lock): `journal` becomes
    /// `journal.folding`, unless a fold cut short left one, which is folded first (this
    /// journal waits for the next fold). A torn last line goes with it: it was never a
    /// record. Launches append to a new `journal` meanwhile.
    func moveAside() throws {
        guard !folding.exists, (file.size ?? 0) > 0 else { return }
        guard file.rename(to: folding) else { throw FileIO.writeError("cannot move \(path) aside") }
        file.directory.sync(file.folder)
        CrashPoint.reach("fold.afterMove")
    }

    /// A fold's last step, once the index and the queue hold every record of
    /// `journal.folding` (the caller holds the journal lock).
    func removeFolded() throws {
        guard folding.status() != nil else { return }
        guard folding.removeEntry() else { throw FileIO.writeError("cannot remove \(folding.path)") }
        file.directory.sync(file.folder)
    }

    /// Both files gone (`clear --events`; the caller holds both locks).
    func removeAll() {
        file.remove()
        folding.remove()
    }

    /// The bytes not folded yet, in both files.
    var size: Int64 { (file.size ?? 0) + (folding.size ?? 0) }
}

/// Where a reader of the journal stopped: the nonce of the last record it took, and that
/// record's line. The index and the event queue read the journal by this one rule, so that
/// no content of the journal can make them disagree (SPEC §6, §8).
struct JournalMark: Equatable, Sendable {
    var nonce: String
    /// Nil in a mark written before lines were recorded.
    var line: Int?
    /// The hash of its file's bytes through the marked line (`JournalRecord.prefixHash`); nil
    /// in a mark written before it was kept. A line that replays the marked nonce at the
    /// marked number in another file (the one a fold removed) is not the mark: the bytes
    /// before it differ.
    var prefix: UInt64?

    init(nonce: String, line: Int?, prefix: UInt64? = nil) {
        self.nonce = nonce
        self.line = line
        self.prefix = prefix
    }

    init(after record: JournalRecord) {
        self.init(nonce: record.nonce, line: record.lineNumber, prefix: record.prefixHash)
    }

    static let hashSeed: UInt64 = 0xcbf2_9ce4_8422_2325

    /// FNV-1a over `bytes`, continuing from `h` (no libcrypto: every launch reads the journal).
    static func hash(_ bytes: UnsafeBufferPointer<UInt8>, from h: UInt64) -> UInt64 {
        var h = h
        for b in bytes {
            h ^= UInt64(b)
            h = h &* 0x100_0000_01b3
        }
        return h
    }

    /// The record it marks among `records`, or nil.
    func marked(in records: [JournalRecord]) -> Int? {
        guard let i = records.firstIndex(where: { $0.nonce == nonce }) else { return nil }
        let r = records[i]
        guard line == nil || (r.lineNumber == line && (prefix == nil || r.prefixHash == prefix)) else { return nil }
        return i
    }

    /// The records a reader whose mark is `mark` has not taken yet. When the mark's line
    /// still holds its record (in `journal`, or in `journal.folding` since a fold moved it
    /// there: a rename keeps its lines), nothing it took is gone: the records after it.
    /// Otherwise the file that held it was folded and removed: every record, except a copy of
    /// the marked one. (`records` hold each nonce once: `Journal.read`.)
    static func unread(_ records: [JournalRecord], after mark: JournalMark?) -> ArraySlice<JournalRecord> {
        guard let mark else { return records[...] }
        if let i = mark.marked(in: records) { return records[(i + 1)...] }
        if let i = records.firstIndex(where: { $0.nonce == mark.nonce }) {
            return (records[..<i] + records[(i + 1)...])[...]
        }
        return records[...]
    }

    /// "<nonce> <line> <prefix hash, hexadecimal>", as the index and the queue store it.
    var text: String {
        guard let line else { return nonce }
        return prefix.map { "\(nonce) \(line) \(String($0, radix: 16))" } ?? "\(nonce) \(line)"
    }

    init?(text: String) {
        let parts = text.split(separator: " ")
        guard (1...3).contains(parts.count), !parts[0].isEmpty else { return nil }
        nonce = String(parts[0])
        if parts.count >= 2 {
            guard let n = Int(parts[1]), n >= 0 else { return nil }
            line = n
        }
        if parts.count == 3 {
            guard let h = UInt64(parts[2], radix: 16) else { return nil }
            prefix = h
        }
    }
}

extension CacheIndex {
    /// Applies a journal record the index does not hold yet: a show counts, rotates and
    /// dates as it did when `next` recorded it, numbered by the index's own counter (a
    /// line's `seq` is never trusted to stop counting). Other events leave the index as it is.
    mutating func applyJournalRecord(_ r: JournalRecord, positions: [String: Int]) {
        guard r.event == "impression" else { return }
        let seq = min(showSeq.adding(1), AdRecord.counts.upperBound)
        journalSeq = seq
        showSeq = seq
        lastShown = r.at
        guard let i = positions[r.id], ads.indices.contains(i) else { return }   // gone from the index since
        ads[i].recordShow(at: r.at, day: r.day, seq: seq)
        if let key = r.rotationKey, let signature = r.rotationSignature {
            var rotation =
                rotations[key].flatMap { $0.signature == signature ? $0 : nil }
                ?? Rotation(signature: signature, epoch: seq, rounds: 0)
            rotation.rounds.add(1)
            rotations[key] = rotation
            // A record without its picks (a damaged index) counts from this show on.
            if ads[i].pickEpoch != rotation.epoch || ads[i].picks == nil {
                ads[i].pickEpoch = rotation.epoch
                ads[i].picks = 0
            }
            ads[i].picks = (ads[i].picks ?? 0).adding(1)
        }
    }

    /// Each record's place in `ads`, by id.
    var positions: [String: Int] {
        var positions: [String: Int] = [:]
        for (i, ad) in ads.enumerated() { positions[ad.id] = i }
        return positions
    }

    /// Applies the records it does not hold yet (`JournalMark.unread`), in order. An index
    /// written before marks were kept knows its records by show number (`journalSeq`).
    /// `positions`: each record's place by id, when the caller has them already.
    mutating func applyJournal(_ records: [JournalRecord], positions known: [String: Int]? = nil) {
        let unread: ArraySlice<JournalRecord> =
            journalMark != nil
            ? JournalMark.unread(records, after: journalMark)
            : records.filter { r in r.seq.map { $0 > journalSeq } ?? true }[...]
        guard let last = unread.last else { return }
        let positions = known ?? self.positions
        for r in unread { applyJournalRecord(r, positions: positions) }
        journalMark = JournalMark(after: last)
    }
}

extension CacheStore {
    /// Appends records the cache writes of its own (VAST errors, `notUsed`) under the
    /// journal lock; a failure is a warning naming `what`, never the command's error.
    func queue(_ records: [JournalRecord], what: String, warn: WarningSink) {
        guard !records.isEmpty else { return }
        do {
            try journal.withLock(timeout: lockTimeout) {
                for r in records { try journal.append(r) }
            }
        } catch {
            warn(Diagnostic(.report, "\(what) not queued: \(error)"))
        }
    }
}
