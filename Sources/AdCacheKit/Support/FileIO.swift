import Dispatch

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

/// The first error of concurrent workers.
private final class ErrorBox: @unchecked Sendable {
    private let lock = Lock()
    private var first: AdCacheError?
    var value: AdCacheError? { lock.lock(); defer { lock.unlock() }; return first }
    func set(_ e: AdCacheError) { lock.lock(); if first == nil { first = e }; lock.unlock() }
}

/// Small POSIX file helpers: what Foundation does not promise (fsync, errno in messages).
package enum FileIO {
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

    /// Nanoseconds since the epoch, saturating: a file dated past 2262 (touch -d) must not
    /// overflow.
    static func nanoseconds(_ t: timespec) -> Int64 {
        let (ns, overflow) = Int64(t.tv_sec).multipliedReportingOverflow(by: 1_000_000_000)
        return overflow
            ? (t.tv_sec < 0 ? Int64.min : Int64.max)
            : ns.addingReportingOverflow(Int64(t.tv_nsec)).partialValue
    }

    /// Whether `path` names something (links followed), as `FileManager.fileExists` says,
    /// with one stat(2) and without starting Foundation's file manager (a launch asks twice).
    package static func exists(_ path: String) -> Bool {
        var st = stat()
        return stat(path, &st) == 0
    }

    /// Reads a whole file, refusing one larger than `limit` bytes.
    /// (A file outside the cache: a local feed. Inside it, `CacheFile.read`.)
    package static func read(_ path: String, limit: Int64 = .max) throws -> [UInt8] {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw AdCacheError.io("cannot read \(path): \(errnoText())") }
        defer { close(fd) }
        return try read(fd: fd, path: path, limit: limit)
    }

    /// Reads what is left of an open file; `path` names it in messages.
    static func read(fd: Int32, path: String, limit: Int64 = .max) throws -> [UInt8] {
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

    /// Calls `body` with each block of an open file, in order.
    static func forEachBlock(fd: Int32, path: String, _ body: (UnsafeRawBufferPointer) throws -> Void) throws {
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

    /// The first `count` bytes of an open file (fewer if it is shorter).
    static func head(fd: Int32, count: Int = 32) -> [UInt8] {
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

    /// Makes files durable, several at once (fsyncs issued together are committed together
    /// by the file system's journal). Returns the first failure.
    static func syncFiles(_ files: [CacheFile]) -> AdCacheError? {
        guard !files.isEmpty else { return nil }
        let errors = ErrorBox()
        DispatchQueue.concurrentPerform(iterations: min(8, files.count)) { worker in
            for i in stride(from: worker, to: files.count, by: min(8, files.count)) {
                let fd = files[i].open(O_RDONLY)
                if fd < 0 || fsync(fd) != 0 { errors.set(writeError("cannot sync \(files[i].path)")) }
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

    /// mkdir -p; the error names the directory and the reason.
    static func makeDirectory(_ path: String) throws {
        var found = stat()
        if stat(path, &found) == 0 {
            if (found.st_mode & S_IFMT) == S_IFDIR { return }
            throw AdCacheError.cacheUnwritable("cannot create directory \(path): a file is in the way")
        }
        let parent = PathText.parent(path)
        if !parent.isEmpty, parent != path { try makeDirectory(parent) }
        if mkdir(path, 0o777) != 0, errno != EEXIST {
            throw AdCacheError.cacheUnwritable("cannot create directory \(path): \(errnoText())")
        }
        var st = stat()
        if stat(parent.isEmpty ? "." : parent, &st) == 0, st.st_mode & S_ISGID != 0, stat(path, &st) == 0 {
            chmod(path, (st.st_mode & 0o7777) | 0o070 | S_ISGID)   // a shared cache (SPEC §3)
        }
    }
}
