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

/// A show or an event as it leaves the journal for the queue, before the ledger numbers and
/// chains it (SPEC §14).
struct LedgerEntry: Equatable, Sendable {
    /// When the show or event happened.
    var at: Double
    var id: String
    /// `show`, `impression`, `click`, …, `unrendered`.
    var event: String
    /// Unique in the ledger: the record's nonce (the one the report URL receives) for an
    /// event, with `.show`, `.start` or `.unrendered` after it for the lines a record adds.
    var nonce: String
}

/// One line of the ledger as read back.
struct LedgerLine: Equatable, Sendable {
    var seq: Int64
    var at: Double
    var id: String
    var event: String
    var nonce: String
    /// The SHA-256 (hex) of the previous line's bytes, without its newline.
    var prev: String

    /// 64 zeros: the first line's `prev`.
    static let genesis = String(repeating: "0", count: 64)

    /// The line's bytes, without a newline: `{"seq":…,"at":"…","id":"…","event":"…","nonce":"…","prev":"…"}`.
    static func encode(seq: Int64, _ e: LedgerEntry, prev: String) -> [UInt8] {
        var w = JSONWriter(indent: nil, capacity: 256)
        w.beginObject()
        w.field("seq", seq)
        w.field("at", Time.formatMillis(e.at))
        w.field("id", e.id)
        w.field("event", e.event)
        w.field("nonce", e.nonce)
        w.field("prev", prev)
        w.endObject()
        return w.out
    }

    enum Field: String, CaseIterable, Sendable {
        case seq, at, id, event, nonce, prev
    }
    static let fields = JSONKeyTable<Field>()

    /// Reads one line (without its newline); nil when it is not a whole ledger line.
    init?(_ line: UnsafeBufferPointer<UInt8>) {
        var seq: Int64?
        var at: Double?
        var id: String?
        var event: String?
        var nonce: String?
        var prev: String?
        var s = JSONScanner(line)
        do {
            try s.object(Self.fields) { s, key in
                switch key {
                case .seq: seq = try s.int()
                case .at: at = Time.parse(try s.string())
                case .id: id = try s.string()
                case .event: event = try s.string()
                case .nonce: nonce = try s.string()
                case .prev: prev = try s.string()
                case nil: try s.skip()
                }
            }
            try s.finish()
        } catch {
            return nil
        }
        guard let seq, seq >= 1, let at, let id, let event, let nonce, let prev, prev.utf8.count == 64 else {
            return nil
        }
        self.init(seq: seq, at: at, id: id, event: event, nonce: nonce, prev: prev)
    }

    init(seq: Int64, at: Double, id: String, event: String, nonce: String, prev: String) {
        self.seq = seq
        self.at = at
        self.id = id
        self.event = event
        self.nonce = nonce
        self.prev = prev
    }

    init?(_ bytes: [UInt8]) {
        guard let line = bytes.withUnsafeBufferPointer({ LedgerLine($0) }) else { return nil }
        self = line
    }
}

/// The ledger (SPEC §14): `ledger.jsonl` in `ledger-dir`, outside the group-writable cache,
/// one JSON line per show and per event as each leaves the journal for the queue, numbered
/// (`seq`, no gaps) and chained (`prev`, the SHA-256 of the line before). Only the fetching
/// user writes it (the directory is that user's, 0755; the file 0644).
///
/// As durable as the queue: a fold appends its lines (one write, fdatasync) before it saves
/// the queue, so a crash never leaves a queued record the ledger lacks. A fold cut short
/// after the append and before the queue was saved folds the same records again: a record
/// whose nonce is among the ledger's last lines is not appended twice. A last line without
/// its newline (a write cut short) is cut off before anything is appended. Writers take
/// `ledger.lock` (the ledger itself is replaced whole when its front is cut).
struct Ledger: Sendable {
    let directory: String
    static let fileName = "ledger.jsonl"
    static let lockName = "ledger.lock"
    /// Lines older than this are cut from the front …
    static let keptDays = 90
    /// … once the oldest is this many days older still (a week's lines at a time: the whole
    /// file is rewritten then, so rarely).
    static let cutSlackDays = 7

    var path: String { PathText.join(directory, Self.fileName) }
    var lockPath: String { PathText.join(directory, Self.lockName) }

    init(directory: String) {
        self.directory = directory.count > 1 && directory.hasSuffix("/") ? String(directory.dropLast()) : directory
    }

    /// Creates the directory (0755, parents too, but never a missing top-level folder: a
    /// `HOME` that does not exist is no place for it). Throws `cacheUnwritable`.
    func prepare() throws {
        try Self.makeDirectory(directory)
    }

    private static func makeDirectory(_ path: String) throws {
        var st = stat()
        if stat(path, &st) == 0 {
            guard (st.st_mode & S_IFMT) == S_IFDIR else {
                throw AdCacheError.cacheUnwritable("cannot create the ledger directory \(path): a file is in the way")
            }
            return
        }
        let parent = PathText.parent(path)
        guard !parent.isEmpty, parent != "/", parent != path else {
            throw AdCacheError.cacheUnwritable("cannot create the ledger directory \(path): no such directory")
        }
        try makeDirectory(parent)
        if mkdir(path, 0o755) != 0, errno != EEXIST {
            throw AdCacheError.cacheUnwritable("cannot create the ledger directory \(path): \(FileIO.errnoText())")
        }
    }

    /// Runs `body` holding `ledger.lock` (exclusive for a writer, shared for a reader), waiting
    /// at most `timeout`.
    func withLock<T>(exclusive: Bool, timeout: Double = 10, _ body: () throws -> T) throws -> T {
        try prepare()
        let fd = open(lockPath, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0o644)
        guard fd >= 0 else {
            let e = errno
            let text = "cannot write the ledger \(path): \(FileIO.errnoText(e))"
            throw e == EACCES || e == EPERM || e == EROFS ? AdCacheError.cacheUnwritable(text) : AdCacheError.io(text)
        }
        defer { close(fd) }
        giveToDirectoryOwner(fd, directory: directory)
        let deadline = monotonicNow() + timeout
        while flock(fd, exclusive ? LOCK_EX | LOCK_NB : LOCK_SH | LOCK_NB) != 0 {
            guard errno == EINTR || errno == EWOULDBLOCK else {
                throw AdCacheError.io("cannot lock \(lockPath): \(FileIO.errnoText())")
            }
            guard monotonicNow() < deadline else {
                throw AdCacheError.busy("the ledger is busy (\(lockPath) is held); try again")
            }
            usleep(10_000)
        }
        return try body()
    }

    /// Whether this user may append to the ledger: its directory and file (where they exist)
    /// are writable. A fold by another user leaves the journal to the ledger's writer.
    var isWritable: Bool {
        var st = stat()
        if stat(path, &st) == 0 { return access(path, W_OK) == 0 && access(directory, W_OK) == 0 }
        if stat(directory, &st) == 0 { return access(directory, W_OK) == 0 }
        return true   // to be created: prepare says whether it can be
    }

    /// Appends `entries` (those whose nonce the ledger's last lines do not hold already),
    /// numbered and chained, in one write and one fdatasync. Then cuts the lines older than
    /// 90 days from the front when the oldest is older than 97 (`now`: the trusted clock).
    ///
    /// `lookBack`: how many more lines a fold cut short may have appended than this one makes
    /// (its `unrendered` lines depend on its clock and `render-timeout`: at most the shows
    /// awaiting confirmation then and the records it folded), so that every line it left is
    /// looked at for a repeated nonce. `wait`: how long to wait for an export's shared lock (a
    /// fold holds the index lock meanwhile: a second, as a launch waits, then the journal
    /// waits for the next fold).
    func append(_ entries: [LedgerEntry], now: Double, lookBack: Int = 0, wait: Double = 1) throws {
        guard !entries.isEmpty else { return }
        try withLock(exclusive: true, timeout: wait) {
            let existed = FileIO.exists(path)
            let fd = open(path, O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0o644)
            guard fd >= 0 else {
                let e = errno
                let text = "cannot write the ledger \(path): \(FileIO.errnoText(e))"
                throw e == EACCES || e == EPERM || e == EROFS
                    ? AdCacheError.cacheUnwritable(text) : AdCacheError.io(text)
            }
            defer { close(fd) }
            giveToDirectoryOwner(fd, directory: directory)
            var st = stat()
            guard fstat(fd, &st) == 0, (st.st_mode & S_IFMT) == S_IFREG else {
                throw AdCacheError.io("the ledger \(path) is not a regular file")
            }
            var size = Int64(st.st_size)
            let tail = try Self.tail(fd: fd, size: size, lines: entries.count + max(0, lookBack) + 1, path: path)
            if tail.end < size {   // a line cut short by a crash: never part of the chain
                guard ftruncate(fd, off_t(tail.end)) == 0, fdatasync(fd) == 0 else {
                    throw FileIO.writeError("cannot repair the ledger \(path)")
                }
                size = tail.end
            }
            var seq: Int64 = 0
            var prev = LedgerLine.genesis
            var present = Set<String>(minimumCapacity: tail.lines.count)
            if let last = tail.lines.last {
                guard let line = LedgerLine(last) else {
                    throw AdCacheError.io(
                        "the ledger \(path) ends with a line adcache did not write; move it aside to start a new one")
                }
                seq = line.seq
                prev = try SHA256Hasher.hex(bytes: last)
                for bytes in tail.lines { if let l = LedgerLine(bytes) { present.insert(l.nonce) } }
            }
            var out: [UInt8] = []
            out.reserveCapacity(entries.count * 200)
            for e in entries where !present.contains(e.nonce) {
                seq += 1
                let line = LedgerLine.encode(seq: seq, e, prev: prev)
                prev = try SHA256Hasher.hex(bytes: line)
                out += line
                out.append(0x0A)
                present.insert(e.nonce)
            }
            guard !out.isEmpty else { return }
            #if DEBUG
                if CrashPoint.isArmed("ledger.tornWrite") {   // half a write, as a crash mid-write leaves it
                    _ = out.withUnsafeBytes {
                        FileIO.writeAll(fd, UnsafeRawBufferPointer(rebasing: $0[..<(out.count / 2)]))
                    }
                    CrashPoint.reach("ledger.tornWrite")
                }
            #endif
            if let e = out.withUnsafeBytes({ FileIO.writeAll(fd, $0) }) {
                ftruncate(fd, off_t(size))
                throw FileIO.writeError("cannot write the ledger \(path)", e)
            }
            guard fdatasync(fd) == 0 else {
                let e = errno
                ftruncate(fd, off_t(size))
                throw FileIO.writeError("cannot write the ledger \(path)", e)
            }
            if !existed { Self.syncDirectory(directory) }
            CrashPoint.reach("ledger.afterAppend")
            try cutFront(fd: fd, now: now)
        }
    }

    /// The last `lines` whole lines of the file (fewer when it has fewer) and where the last
    /// whole line ends (`size`, unless a line was cut short by a crash).
    static func tail(fd: Int32, size: Int64, lines wanted: Int, path: String) throws -> (
        lines: [[UInt8]], end: Int64
    ) {
        guard size > 0 else { return ([], 0) }
        var offset = size
        let chunk: Int64 = 64 << 10
        var newlines = 0
        // Read backwards until `wanted` whole lines (and the newline before them) are in hand,
        // block by block, joined once at the end (prepending each block to what was read
        // copied the tail over and over: a fold of 10,000 records at a ledger of 800,000
        // lines took 364 ms instead of 159).
        var blocks: [[UInt8]] = []
        while offset > 0 && newlines <= wanted {
            let n = min(chunk, offset)
            offset -= n
            var block = [UInt8](repeating: 0, count: Int(n))
            let got = block.withUnsafeMutableBytes { pread(fd, $0.baseAddress, Int(n), off_t(offset)) }
            guard got == Int(n) else { throw AdCacheError.io("cannot read the ledger \(path): \(FileIO.errnoText())") }
            newlines += block.reduce(0) { $0 + ($1 == 0x0A ? 1 : 0) }
            blocks.append(block)
        }
        var buffer: [UInt8] = []
        buffer.reserveCapacity(Int(size - offset))
        for block in blocks.reversed() { buffer.append(contentsOf: block) }
        guard let lastNewline = buffer.lastIndex(of: 0x0A) else {
            return ([], offset)   // no whole line at all: the file is one torn line
        }
        let end = offset + Int64(lastNewline) + 1
        var lines: [[UInt8]] = []
        var stop = lastNewline
        while lines.count < wanted {
            let start = buffer[..<stop].lastIndex(of: 0x0A).map { $0 + 1 }
            if start == nil && offset > 0 { break }   // the first line read is not whole
            let from = start ?? 0
            lines.append(Array(buffer[from..<stop]))
            guard let s = start, s > 0 else { break }
            stop = s - 1
        }
        return (lines.reversed(), end)
    }

    /// Cuts the lines dated more than 90 days before `now` from the front, once the first is
    /// 97 days old: the kept lines are written to a temporary, synced and renamed over the
    /// ledger (the first kept line keeps its `prev`). The caller holds the lock.
    private func cutFront(fd: Int32, now: Double) throws {
        var head = [UInt8](repeating: 0, count: 4096)
        let got = head.withUnsafeMutableBytes { pread(fd, $0.baseAddress, 4096, 0) }
        guard got > 0, let nl = head[..<got].firstIndex(of: 0x0A), let first = LedgerLine(Array(head[..<nl])),
            first.at < now - Double(Self.keptDays + Self.cutSlackDays) * 86400
        else { return }
        lseek(fd, 0, SEEK_SET)
        let all = try FileIO.read(fd: fd, path: path)
        let cutoff = now - Double(Self.keptDays) * 86400
        var start = 0
        while start < all.count, let nl = all[start...].firstIndex(of: 0x0A) {
            guard let line = LedgerLine(Array(all[start..<nl])), line.at < cutoff else { break }
            start = nl + 1
        }
        guard start > 0 else { return }
        let temporary = path + ".tmp"
        unlink(temporary)
        let out = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0o644)
        guard out >= 0 else { throw FileIO.writeError("cannot write \(temporary)") }
        giveToDirectoryOwner(out, directory: directory)
        let failed = all[start...].withUnsafeBytes { FileIO.writeAll(out, $0) }
        guard failed == nil, fsync(out) == 0 else {
            close(out)
            unlink(temporary)
            throw FileIO.writeError("cannot write \(temporary)", failed ?? errno)
        }
        close(out)
        guard rename(temporary, path) == 0 else {
            unlink(temporary)
            throw FileIO.writeError("cannot replace the ledger \(path)")
        }
        Self.syncDirectory(directory)
    }

    static func syncDirectory(_ path: String) {
        let fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { return }
        fsync(fd)
        close(fd)
    }

    /// The whole ledger (under the shared lock, so never half an append); empty when there is
    /// none yet.
    func read() throws -> [UInt8] {
        guard FileIO.exists(path) else { return [] }
        return try withLock(exclusive: false) {
            do {
                return try FileIO.read(path)
            } catch let e as AdCacheError {
                throw AdCacheError.io(e.message)
            }
        }
    }
}

extension CrashPoint {
    /// True when the test environment names `name` (the step is about to be reached).
    static func isArmed(_ name: String) -> Bool {
        #if DEBUG
            guard let value = getenv("ADCACHE_CRASH_AT").map({ String(cString: $0) }) else { return false }
            return value.split(separator: "#", maxSplits: 1).first.map(String.init) == name
        #else
            return false
        #endif
    }
}

extension JournalRecord {
    /// The ledger's lines for this record as the queue takes it (SPEC §14): a show is a
    /// `show` line, followed in `choice` mode by its `impression` (the nonce the report URL
    /// receives) and by the `start` a VAST video's show counts; a confirmation is the show's
    /// `impression`; any other event is a line of its own.
    var ledgerEntries: [LedgerEntry] {
        switch event {
        case "impression":
            var lines = [LedgerEntry(at: at, id: id, event: "show", nonce: nonce + ".show")]
            if !render { lines.append(LedgerEntry(at: at, id: id, event: "impression", nonce: nonce)) }
            if start { lines.append(LedgerEntry(at: at, id: id, event: "start", nonce: nonce + ".start")) }
            return lines
        case "rendered":
            return [LedgerEntry(at: at, id: id, event: "impression", nonce: nonce)]
        default:
            return [LedgerEntry(at: at, id: id, event: event, nonce: nonce)]
        }
    }
}

/// A file root creates in a directory another user owns — the ledger's, the device key's — is
/// given to that user (SPEC §14: the fetching user writes the ledger): a `sudo adcache
/// report` or `sudo adcache export` must not leave a file the fetching user can no longer
/// write or read. Only a file of one link is changed (never what a hard link planted by
/// someone else points to).
func giveToDirectoryOwner(_ fd: Int32, directory: String) {
    guard geteuid() == 0 else { return }
    var dir = stat()
    var file = stat()
    guard stat(directory, &dir) == 0, dir.st_uid != 0, fstat(fd, &file) == 0, file.st_nlink == 1,
        file.st_uid != dir.st_uid || file.st_gid != dir.st_gid
    else { return }
    _ = fchown(fd, dir.st_uid, dir.st_gid)
}
