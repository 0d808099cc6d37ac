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

/// Reading the index when it cannot be trusted as it is (SPEC §6): an unreadable index is
/// moved aside and its previous generation (`index.json.old`) takes its place; the journal's
/// shows are applied on top by the loader (`CacheStore.applyJournal`).
extension CacheStore {
    func loadLockedIndex(warn: WarningSink, forSelection: Bool) throws -> Loaded {
        switch try readIndex(indexFile, forSelection: forSelection) {
        case .read(let decoded): return decoded.loaded(warn: warn)
        case .unreadable(let reason):
            let aside = asideName(indexFile)
            guard indexFile.rename(to: aside) else {
                throw AdCacheError.io("index.json cannot be read (\(reason)) nor moved aside: \(FileIO.errnoText())")
            }
            let loaded = try fallBack(reason, movedTo: aside.path, warn: warn)
            // The previous generation is current again.
            if loaded.recovered, !oldIndexFile.isLink { _ = oldIndexFile.link(to: indexFile) }
            dir.sync(.top)
            return loaded
        }
    }

    /// After an unreadable index: the previous generation when it can be read (show counts
    /// survive; at most the last change is lost), else an empty index for the next fetch to
    /// rebuild.
    func fallBack(_ reason: String, movedTo aside: String?, warn: WarningSink) throws -> Loaded {
        let what = "index.json could not be read (\(reason))" + (aside.map { "; moved it aside to \($0)" } ?? "")
        if oldIndexFile.exists, case .read(let old) = try readIndex(oldIndexFile) {
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

    /// An index file as read: decoded, or why it cannot be (not a `Result`: a launch that
    /// makes one looks up its failure type's conformance to `Error` in the whole binary).
    enum IndexRead {
        case read(IndexCoder.Decoded)
        case unreadable(String)
    }

    func readIndex(_ file: CacheFile, forSelection: Bool = false) throws -> IndexRead {
        guard let st = file.status() else { return .read(IndexCoder.Decoded(index: CacheIndex())) }
        guard (st.st_mode & S_IFMT) == S_IFREG else {   // a link (never followed), a fifo…
            return .unreadable("it is not a regular file")
        }
        // A launch takes the records from the selection digest, read once for either check:
        // through it alone while index.json is the file it was written for, else when it is
        // the digest of the bytes read.
        let digest =
            forSelection && file.name == indexFile.name
            ? try? digestFile.read(limit: Int64(st.st_size) * 4 + 4096) : nil
        if let digest, let decoded = readIndexByDigest(digest) { return .read(decoded) }
        let bytes: [UInt8]
        do {
            bytes = try file.read()
        } catch let e as AdCacheError {
            throw AdCacheError.io(e.message)
        }
        if bytes.isEmpty { return .unreadable("it is empty") }
        let ads = digest.flatMap { digest in bytes.withUnsafeBufferPointer { SelectionDigest.decode(digest, of: $0) } }
        let decoded: IndexCoder.Decoded
        do {
            decoded = try IndexCoder.decode(bytes, forSelection: forSelection, digest: ads)
        } catch let e as JSONScanner.Malformed {
            return .unreadable("\(e.what) at byte \(e.offset)")
        } catch {
            return .unreadable("it is not a valid index")
        }
        guard decoded.index.version <= CacheIndex.currentVersion else {
            throw AdCacheError.io(
                "index.json has version \(decoded.index.version), newer than this adcache understands (\(CacheIndex.currentVersion))"
            )
        }
        return .read(decoded)
    }

    /// A launch's read of the index through its digest alone, when `index.json` is still the
    /// file the digest was written for (`SelectionDigest.decode(_:identity:)`): the records
    /// from the digest, the top level from the bytes around the `ads` array, the chosen
    /// record later from the file held open. Nil for anything else (the caller then reads
    /// the index whole).
    func readIndexByDigest(_ digest: [UInt8]) -> IndexCoder.Decoded? {
        let fd = indexFile.open(O_RDONLY)
        guard fd >= 0 else { return nil }
        var st = stat()
        guard fstat(fd, &st) == 0 else {
            close(fd)
            return nil
        }
        let file = IndexFileBytes(fd: fd, size: Int(st.st_size))
        guard let ads = SelectionDigest.decode(digest, identity: FileIdentity(st)),
            let head = file.read(IndexCoder.Span(start: 0, end: ads.span.start)),
            let tail = file.read(IndexCoder.Span(start: ads.span.end, end: file.size))
        else { return nil }
        // The top level as it is, the records' array left empty and filled from the digest.
        var around = ads
        around.span = IndexCoder.Span(start: ads.span.start, end: ads.span.start + 2)
        guard var decoded = try? IndexCoder.decode(head + Array("[]".utf8) + tail, forSelection: true, digest: around),
            decoded.index.version <= CacheIndex.currentVersion
        else { return nil }
        decoded.source = []
        decoded.adsSpan = ads.span
        decoded.file = file
        return decoded
    }
}
