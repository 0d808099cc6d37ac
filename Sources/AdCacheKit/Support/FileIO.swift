import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The first error of concurrent workers.
private final class ErrorBox: @unchecked Sendable {
    private let lock = NSLock()
    private var first: AdCacheError?
    var value: AdCacheError? { lock.lock(); defer { lock.unlock() }; return first }
    func set(_ e: AdCacheError) { lock.lock(); if first == nil { first = e }; lock.unlock() }
}

/// Small POSIX file helpers: what Foundation does not promise (fsync, errno in messages).
enum FileIO {
    /// The message for the current errno, e.g. "No space left on device".
    static func errnoText(_ code: Int32 = errno) -> String {
        String(cString: strerror(code))
    }

    /// The right error for an errno: a full disk or I/O fault is 74, anything else that stops
    /// us writing into the cache is 73.
    static func writeError(_ what: String, _ code: Int32 = errno) -> AdCacheError {
        let text = "\(what): \(errnoText(code))"
        switch code {
        case ENOSPC, EIO, EDQUOT, EFBIG, EROFS: return .io(text)
        default: return .cacheUnwritable(text)
        }
    }

    static func exists(_ path: String) -> Bool {
        access(path, F_OK) == 0
    }

    /// The size of a regular file, or nil.
    static func size(_ path: String) -> Int64? {
        var st = stat()
        guard stat(path, &st) == 0, (st.st_mode & S_IFMT) == S_IFREG else { return nil }
        return Int64(st.st_size)
    }

    /// A regular file's size and modification time (nanoseconds), or nil.
    static func stamp(_ path: String) -> (size: Int64, mtime: Int64)? {
        var st = stat()
        guard stat(path, &st) == 0, (st.st_mode & S_IFMT) == S_IFREG else { return nil }
        // Saturating: a file dated past 2262 (touch -d) must not overflow nanoseconds.
        let (ns, overflow) = Int64(st.st_mtim.tv_sec).multipliedReportingOverflow(by: 1_000_000_000)
        let mtime =
            overflow
            ? (st.st_mtim.tv_sec < 0 ? Int64.min : Int64.max)
            : ns.addingReportingOverflow(Int64(st.st_mtim.tv_nsec)).partialValue
        return (Int64(st.st_size), mtime)
    }

    /// Reads a whole file, refusing one larger than `limit` bytes.
    static func read(_ path: String, limit: Int64 = .max) throws -> [UInt8] {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw AdCacheError.io("cannot read \(path): \(errnoText())") }
        defer { close(fd) }
        func tooLarge() -> AdCacheError { .io("\(path) is larger than the limit of \(limit) bytes") }
        // Straight into an array of the file's size (a 7 MB index used to be copied twice
        // over as a growing array doubled), one byte more to notice a file that grew.
        var st = stat()
        let size = fstat(fd, &st) == 0 ? Int(max(0, min(Int64(st.st_size), limit))) : 0
        var out = try [UInt8](unsafeUninitializedCapacity: size + 1) { buffer, initialized in
            while initialized < buffer.count {
                let n = Glibc.read(fd, buffer.baseAddress! + initialized, buffer.count - initialized)
                if n < 0 {
                    if errno == EINTR { continue }
                    throw AdCacheError.io("cannot read \(path): \(errnoText())")
                }
                if n == 0 { return }
                initialized += n
            }
        }
        if out.count > size {   // it grew: the rest in blocks
            try forEachBlock(fd: fd, path: path) { block in
                out.append(contentsOf: block)
                if Int64(out.count) > limit { throw tooLarge() }
            }
        }
        if Int64(out.count) > limit { throw tooLarge() }
        return out
    }

    /// Calls `body` with each block of a file, in order.
    static func forEachBlock(ofFile path: String, _ body: (UnsafeRawBufferPointer) throws -> Void) throws {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw AdCacheError.io("cannot read \(path): \(errnoText())") }
        defer { close(fd) }
        try forEachBlock(fd: fd, path: path, body)
    }

    private static func forEachBlock(fd: Int32, path: String, _ body: (UnsafeRawBufferPointer) throws -> Void) throws {
        var buffer = [UInt8](repeating: 0, count: 1 << 16)
        while true {
            let n = buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if n < 0 {
                if errno == EINTR { continue }
                throw AdCacheError.io("cannot read \(path): \(errnoText())")
            }
            if n == 0 { return }
            try buffer.withUnsafeBytes { try body(UnsafeRawBufferPointer(rebasing: $0[0..<n])) }
        }
    }

    /// The first `count` bytes of a file (fewer if it is shorter).
    static func head(_ path: String, count: Int = 32) -> [UInt8] {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return [] }
        defer { close(fd) }
        var buffer = [UInt8](repeating: 0, count: count)
        let n = buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
        return n > 0 ? Array(buffer[0..<n]) : []
    }

    /// Writes every byte to fd, retrying short writes and EINTR.
    static func writeAll(_ fd: Int32, _ bytes: UnsafeRawBufferPointer) -> Int32? {
        var offset = 0
        while offset < bytes.count {
            let n = Glibc.write(fd, bytes.baseAddress! + offset, bytes.count - offset)
            if n < 0 {
                if errno == EINTR { continue }
                return errno
            }
            offset += n
        }
        return nil
    }

    /// Replaces `path` with `bytes` so that a crash at any instant leaves the old file or the
    /// new one: write a temporary in the same directory, fsync it, rename it over the target,
    /// fsync the directory. Callers serialise writes to one path (the index lock), so the
    /// temporary has a fixed name: one that a crash leaves behind is reused, never piles up.
    /// `beforeReplacing` runs once the temporary is durable, just before it takes the name.
    static func writeAtomically(_ bytes: [UInt8], to path: String, beforeReplacing: () -> Void = {}) throws {
        let dir = (path as NSString).deletingLastPathComponent
        let temp = "\(path).tmp"
        let fd = create(temp)
        guard fd >= 0 else { throw writeError("cannot write \(temp)") }
        var failure: Int32? = bytes.withUnsafeBytes { writeAll(fd, $0) }
        if failure == nil, fsync(fd) != 0 { failure = errno }
        if close(fd) != 0, failure == nil { failure = errno }
        if let failure {
            unlink(temp)
            throw writeError("cannot write \(path)", failure)
        }
        beforeReplacing()
        guard rename(temp, path) == 0 else {
            let e = errno
            unlink(temp)
            throw writeError("cannot replace \(path)", e)
        }
        syncDirectory(dir)
    }

    /// Writes a small file with no durability promise (a hint that may be lost in a crash).
    @discardableResult
    static func writeSimply(_ bytes: [UInt8], to path: String) -> Bool {
        let fd = create(path)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        return bytes.withUnsafeBytes { writeAll(fd, $0) } == nil
    }

    /// Makes files durable, several at once (fsyncs issued together are committed together
    /// by the file system's journal). Returns the first failure.
    static func syncFiles(_ paths: [String]) -> AdCacheError? {
        guard !paths.isEmpty else { return nil }
        let errors = ErrorBox()
        DispatchQueue.concurrentPerform(iterations: min(8, paths.count)) { worker in
            for i in stride(from: worker, to: paths.count, by: min(8, paths.count)) {
                let fd = open(paths[i], O_RDONLY | O_CLOEXEC)
                if fd < 0 || fsync(fd) != 0 { errors.set(writeError("cannot sync \(paths[i])")) }
                if fd >= 0 { close(fd) }
            }
        }
        return errors.value
    }

    /// Starts writing `fd`'s dirty pages in `offset..<offset+length` to disk without waiting
    /// (Linux `sync_file_range(SYNC_FILE_RANGE_WRITE)`): a download that does this as it goes
    /// finds little left for its final fsync. Elsewhere, or when the call is missing, nothing.
    static func startWriteback(_ fd: Int32, offset: Int64, length: Int64) {
        guard let call = syncFileRange else { return }
        _ = call(fd, offset, length, 2)   // SYNC_FILE_RANGE_WRITE
    }

    /// Looked up once: Swift's Glibc module does not declare it (it wants _GNU_SOURCE).
    private static let syncFileRange: (@convention(c) (Int32, Int64, Int64, UInt32) -> Int32)? = {
        #if os(Linux)
            guard let f = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "sync_file_range") else { return nil }
            return unsafeBitCast(f, to: (@convention(c) (Int32, Int64, Int64, UInt32) -> Int32).self)
        #else
            return nil
        #endif
    }()

    /// fsync of a directory, so that a rename in it survives a power loss.
    static func syncDirectory(_ dir: String) {
        let fd = open(dir.isEmpty ? "." : dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { return }
        fsync(fd)
        close(fd)
    }

    /// mkdir -p; the error names the directory and the reason.
    static func makeDirectory(_ path: String) throws {
        var isDir: ObjCBool = false
        if FileManager.default.fileExists(atPath: path, isDirectory: &isDir) {
            if isDir.boolValue { return }
            throw AdCacheError.cacheUnwritable("cannot create directory \(path): a file is in the way")
        }
        let parent = (path as NSString).deletingLastPathComponent
        if !parent.isEmpty, parent != path { try makeDirectory(parent) }
        if mkdir(path, 0o777) != 0, errno != EEXIST {
            throw AdCacheError.cacheUnwritable("cannot create directory \(path): \(errnoText())")
        }
        if inSharedDirectory(path) { chmod(path, fileMode(path) | 0o070 | S_ISGID) }
    }

    // MARK: A cache shared through a group (SPEC §3)

    /// Creates (or truncates) a file for writing: its permissions come from the umask,
    /// except in a setgid directory — a cache shared through a group — where it is also
    /// group-readable and group-writable whatever the umask (as git's
    /// `core.sharedRepository = group`), so that every member can record and fetch.
    static func create(_ path: String, flags: Int32 = O_WRONLY | O_CREAT | O_TRUNC) -> Int32 {
        let fd = open(path, flags | O_CLOEXEC, 0o666)
        if fd >= 0, inSharedDirectory(path) {
            var st = stat()
            if fstat(fd, &st) == 0, st.st_mode & 0o060 != 0o060 { fchmod(fd, (st.st_mode & 0o7777) | 0o060) }
        }
        return fd
    }

    /// True when `path`'s directory has the setgid bit: the sign of a shared cache (new
    /// files there take the directory's group; subdirectories inherit the bit).
    static func inSharedDirectory(_ path: String) -> Bool {
        var st = stat()
        return stat((path as NSString).deletingLastPathComponent, &st) == 0 && st.st_mode & S_ISGID != 0
    }

    private static func fileMode(_ path: String) -> mode_t {
        var st = stat()
        return stat(path, &st) == 0 ? st.st_mode & 0o7777 : 0o755
    }

    @discardableResult
    static func remove(_ path: String) -> Bool {
        unlink(path) == 0
    }

    /// The names in a directory (not . or ..); empty when it does not exist.
    static func list(_ dir: String) -> [String] {
        (try? FileManager.default.contentsOfDirectory(atPath: dir)) ?? []
    }
}
