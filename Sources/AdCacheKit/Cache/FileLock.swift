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

/// An advisory `flock` on a file, released on close. Not shared between threads.
/// The file is a `CacheFile`: opened without following a link, never written through one.
final class FileLock {
    let file: CacheFile
    var path: String { file.path }
    private var fd: Int32 = -1

    init(_ file: CacheFile) {
        self.file = file
    }

    deinit { unlock() }

    private func openFile() throws {
        guard fd < 0 else { return }
        fd = file.openForWriting(O_RDWR | O_CREAT)
        guard fd >= 0 else { throw FileIO.writeError("cannot open lock file \(path)") }
    }

    /// Takes the lock if it is free; false when another process holds it.
    func tryLock() throws -> Bool {
        try openFile()
        while true {
            if flock(fd, LOCK_EX | LOCK_NB) == 0 { return true }
            if errno == EINTR { continue }
            if errno == EWOULDBLOCK { return false }
            throw AdCacheError.io("cannot lock \(path): \(FileIO.errnoText())")
        }
    }

    /// Waits up to `timeout` seconds for the lock; false when it is still held then.
    func lock(timeout: Double) throws -> Bool {
        let deadline = monotonicNow() + timeout
        var pause: useconds_t = 1000
        while true {
            if try tryLock() { return true }
            if monotonicNow() >= deadline { return false }
            usleep(pause)
            pause = min(pause * 2, 20_000)
        }
    }

    func unlock() {
        guard fd >= 0 else { return }
        flock(fd, LOCK_UN)
        close(fd)
        fd = -1
    }

    /// Records our PID in the lock file (for "another fetch is running (pid N)").
    func writeOwner() {
        guard fd >= 0 else { return }
        let text = Array("\(getpid())\n".utf8)
        ftruncate(fd, 0)
        _ = text.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, 0) }
    }

    /// The PID the holder wrote, if any.
    func owner() -> Int32? {
        guard let bytes = try? file.read(limit: 64) else { return nil }
        return Int32(String(decoding: bytes, as: UTF8.self).trimmedWithNewlines())
    }
}
