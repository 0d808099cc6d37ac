#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// `reserve`: room kept for the one write a full disk must still allow — the index that
/// stops naming the files `prune --max-size` evicts (SPEC §6 v4: `prune` gets space back on
/// a full disk). Files are deleted only after the index that no longer names them is
/// committed; on a full disk that index has nowhere to go, so the cache keeps a file of
/// written blocks, half as big again as the index (64 KiB at least), which `fetch` and
/// `prune` make when there is room. A `prune` that cannot write the index writes it into
/// those blocks instead — nothing to allocate, nothing another process can take first —
/// renames it into place, deletes what it evicted, and makes the reserve again from the
/// space that freed.
extension CacheStore {
    var reserveFile: CacheFile { dir.file("reserve") }

    static let reserveMinimum: Int64 = 64 << 10

    /// The size a reserve is made at for an index of `indexBytes`: half as big again, in
    /// steps of 64 KiB (so that a growing index remakes it seldom).
    static func reserveSize(forIndex indexBytes: Int64) -> Int64 {
        let wanted = max(reserveMinimum, indexBytes + indexBytes / 2)
        return (wanted + reserveMinimum - 1) / reserveMinimum * reserveMinimum
    }

    /// A reserve that still holds an index of `indexBytes` with a quarter to spare is kept.
    static func reserveHolds(_ st: stat, indexBytes: Int64) -> Bool {
        (st.st_mode & S_IFMT) == S_IFREG && st.st_nlink == 1
            && Int64(st.st_size) >= max(reserveMinimum, indexBytes + indexBytes / 4)
            && Int64(st.st_blocks) * 512 >= Int64(st.st_size)   // written blocks, not a hole
    }

    /// Makes the reserve, or a bigger one for a grown index, when the file system has room
    /// for it; otherwise leaves things as they are. Best effort and silent: a cache without
    /// a reserve still works, and `prune` has its last resort. Takes the index lock (not
    /// longer than a launch would wait for it).
    func keepReserve() {
        try? withIndexLock {
            let indexBytes = indexFile.size ?? 0
            if let st = reserveFile.status(), Self.reserveHolds(st, indexBytes: indexBytes) { return }
            let temp = dir.file("reserve.tmp")
            let fd = temp.createFresh()
            guard fd >= 0 else { return }
            let zeros = [UInt8](repeating: 0, count: Int(Self.reserveMinimum))
            var left = Self.reserveSize(forIndex: indexBytes)
            var ok = true
            while ok, left > 0 {
                let n = Int(min(left, Self.reserveMinimum))
                ok = zeros.withUnsafeBytes { FileIO.writeAll(fd, UnsafeRawBufferPointer(rebasing: $0[..<n])) } == nil
                left -= Int64(n)
            }
            // Not synced: a reserve a crash left short or sparse is made again
            // (`reserveHolds` counts its blocks), and its room counts as used at once.
            if close(fd) != 0 { ok = false }
            if !ok || !temp.rename(to: reserveFile) { temp.remove() }
        }
    }

    /// Commits `bytes` as the index by writing them into the reserve's blocks (the caller
    /// holds the index lock). False, with the index unchanged, when there is no reserve that
    /// holds them or the file system would not write over its blocks in place (one that
    /// copies on write): the caller then frees space another way.
    func saveIntoReserve(_ bytes: [UInt8]) -> Bool {
        let fd = reserveFile.open(O_WRONLY)
        guard fd >= 0 else { return false }
        var st = stat()
        guard fstat(fd, &st) == 0, st.st_nlink == 1, Int64(st.st_size) >= Int64(bytes.count) else {
            close(fd)
            return false
        }
        var failed = bytes.withUnsafeBytes { FileIO.writeAll(fd, $0) } != nil
        if !failed { failed = ftruncate(fd, off_t(bytes.count)) != 0 || fsync(fd) != 0 }
        if close(fd) != 0 { failed = true }
        guard !failed else { return false }
        CrashPoint.reach("prune.reserveWritten")   // the old index stands; the reserve is spent
        keepPrevious(of: indexFile, as: oldIndexFile)
        guard reserveFile.rename(to: indexFile) else { return false }
        dir.sync(.top)
        saveDigest(of: bytes, stamped: stampIndex())   // on a full disk, none: launches hash the index
        return true
    }

    /// The file system has less room than `bytes` needs, with 64 KiB to spare: what tells a
    /// write that failed for want of space from one that failed for another reason.
    func lacksRoom(for bytes: Int) -> Bool {
        var fs = statvfs()
        guard statvfs(directory, &fs) == 0 else { return false }
        return Int64(fs.f_bavail) * Int64(fs.f_frsize) < Int64(bytes) + Self.reserveMinimum
    }
}
