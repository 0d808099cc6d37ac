#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A download in `partial/`: the file, and beside it `<file>.validator`, the strong ETag (or
/// Last-Modified) of the version the file holds. Every decision about a partial download
/// lives here: resume it (`Range` + `If-Range`), keep it for the next run, discard it, or
/// move it into `assets/` once validated.
struct PartialDownload: Sendable, Equatable {
    let file: CacheFile
    var path: String { file.path }

    var validator: CacheFile { file.sibling(file.name + ".validator") }

    /// What is dropped from the end of a partial file before resuming it: after a power cut
    /// its tail may be zeros the disk never got the data for (SPEC §4).
    static let distrustedTail: Int64 = 64 << 10

    /// Where a resumed transfer continues and the `If-Range` validator: a file whose version
    /// is known, less its last 64 KiB (cut off here). Nil: start from the beginning.
    func resumePoint() -> (offset: Int64, validator: String)? {
        guard let size = file.size, size > Self.distrustedTail,
            let version = try? validator.read(limit: 1024), !version.isEmpty,
            file.truncate(to: size - Self.distrustedTail)
        else { return nil }
        return (size - Self.distrustedTail, String(decoding: version, as: UTF8.self))
    }

    /// True when an interruption leaves something the next run can resume.
    var isResumable: Bool { validator.exists }

    /// Opens the file to continue it; -1 on failure (errno set).
    func openForAppend() -> Int32 {
        file.openForWriting(O_WRONLY | O_APPEND)
    }

    /// Starts the file over for a new body, remembering which version it will hold (`nil`:
    /// a response without a usable validator, which cannot be resumed). -1 on failure.
    func openFresh(validator version: String?) -> Int32 {
        let fd = file.createFresh()
        validator.remove()
        if let version { validator.writeSimply(Array(version.utf8)) }
        return fd
    }

    /// Drops the file and its validator: the next attempt starts over.
    func discard() {
        file.remove()
        validator.remove()
    }

    /// After a failure: kept when it can be resumed, else discarded.
    func keepIfResumable() {
        if !isResumable { discard() }
    }

    /// Moves the finished, validated file to `target`; false with errno set when it cannot.
    func commit(to target: CacheFile) -> Bool {
        guard file.rename(to: target) else { return false }
        validator.remove()
        return true
    }
}
