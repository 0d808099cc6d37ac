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

/// The check stage of a fetch: a finished transfer validated (status, length, content,
/// `sha256`, type) against each ad that wants it, and moved into `assets/` under a new name.
extension Fetcher {
    /// Validates a finished download against each ad that wants it (their own `sha256` and
    /// `type`) and moves it into `assets/` under a new name when one accepts it.
    func finishAsset(_ job: Job, _ response: TransferResponse) -> [String: AssetResult] {
        let url = job.url
        func all(_ r: AssetResult) -> [String: AssetResult] {
            Dictionary(job.ads.map { ($0.id, r) }, uniquingKeysWith: { a, _ in a })
        }
        guard case .file(let partial) = job.request.destination else {
            return all(.failedForGood("\(url): not streamed to a file"))
        }
        let validators = (response.headers["etag"], response.headers["last-modified"])
        func forGood(_ message: String, _ code: VASTCode = .mediaGeneral) -> AssetResult {
            var r = AssetResult.failedForGood(message, etag: validators.0, lastModified: validators.1)
            r.mediaError = code
            return r
        }
        if let error = response.error {
            if case .tooLarge(let limit) = error, let cap = job.budgetCap, limit == cap, cap < options.maxAssetSize {
                // Over what the day's budget allows, known from its headers: not a failure.
                partial.discard()
                var r = AssetResult(outcome: .pending)
                r.deferred = true
                return all(r)
            }
            if error == .deadline || error == .interrupted {
                partial.keepIfResumable()
                let why = error == .deadline ? "not downloaded before the deadline" : "interrupted"
                return all(AssetResult(outcome: .pending, error: why))
            }
            if case .writeFailed(let text, let code) = error {
                // The disk, not the network: the partial file goes (its space with it). An asset
                // that did not fit is transient (SPEC §6: what finished is committed, the run
                // is 75); any other write fault ends the run in 74.
                partial.discard()
                if code == ENOSPC || code == EDQUOT {
                    var r = AssetResult.failedForNow("\(url): did not fit on the disk (\(text))")
                    r.noSpace = true
                    r.announcedBytes = response.headers["content-length"].flatMap(Int64.init)
                    return all(r)
                }
                var r = AssetResult.failedForNow("cannot write \(partial.path): \(text)")
                r.ioError = FileIO.writeError("cannot write \(partial.path)", code)
                return all(r)
            }
            if error.disposition != .permanent {   // the one failure table (Transfer.swift)
                partial.keepIfResumable()
                var r = AssetResult.failedForNow("\(url): \(error)")
                if error == .timedOut || error == .stalled { r.mediaError = .mediaTimeout }
                r.transferError = error
                return all(r)
            }
            partial.discard()   // never keep what failed for good (an over-cap partial included)
            var r = forGood("\(url): \(error)", error == .httpStatus(404) ? .mediaNotFound : .mediaGeneral)
            r.transferError = error
            return all(r)
        }
        if response.notModified {
            if let c = job.cached, job.retriedError == nil {
                var r = AssetResult(
                    outcome: .unchanged, file: c.file, bytes: c.bytes, fileMtime: c.fileMtime,
                    fileSha256: c.fileSha256, etag: response.headers["etag"] ?? c.etag,
                    lastModified: response.headers["last-modified"] ?? c.lastModified, type: c.type)
                r.freshUntil = freshUntil(response.headers)
                return all(r)
            }
            // Asked with the validators of a version that failed: it is still that version.
            return all(forGood(job.retriedError ?? "\(url): unchanged since it failed"))
        }
        if let announced = Self.announcedTotal(response), announced != response.fileBytes, !job.request.allowFile {
            // Shorter: the connection ended early (resumable); longer: start over.
            if response.fileBytes < announced { partial.keepIfResumable() } else { partial.discard() }
            return all(.failedForNow("\(url): received \(response.fileBytes) bytes of the \(announced) announced"))
        }
        guard let format = MediaFormat.sniff(response.fileHead) else {
            partial.discard()
            let what = response.headers["content-type"].map { " (served as \($0))" } ?? ""
            return all(
                forGood(
                    "\(url): not an image or video\(what): the first bytes are not JPEG, PNG, GIF, WebP, MP4/MOV or WebM",
                    .mediaMismatch))
        }
        // Each ad checks the bytes against its own sha256 and type: the feed's (or the URL
        // extension's), else the Content-Type's; the first bytes must agree with it.
        var results: [String: AssetResult] = [:]
        var accepted: [FeedAd] = []
        let served = response.headers["content-type"].flatMap(MediaFormat.type(forContentType:))
        for ad in job.ads {
            if let sha = ad.sha256, response.fileSha256 != sha {
                results[ad.id] = forGood("\(url): the file's SHA-256 does not match the feed's sha256")
            } else if let size = ad.fileSize, size != response.fileBytes {
                results[ad.id] = forGood(
                    "\(url): \(response.fileBytes) bytes, but the VAST document's fileSize says \(size)")
            } else if let type = ad.type ?? served, type != format.type {
                let source = ad.type == nil ? "the server's Content-Type says" : "the ad says"
                results[ad.id] = forGood(
                    "\(url): the file is \(format.type.rawValue) (\(format.rawValue)), but \(source) \(type.rawValue)",
                    .mediaMismatch)
            } else {
                accepted.append(ad)
            }
        }
        guard !accepted.isEmpty else {
            partial.discard()
            return results
        }
        guard let name = try? AssetName.make(url: url, format: format) else {
            partial.discard()
            return results.merging(all(.failedForNow("\(url): cannot name the file (libcrypto)"))) { a, _ in a }
        }
        let target = store.asset(name)
        guard partial.commit(to: target) else {
            let e = AssetResult.failedForNow(
                "cannot move the download into \(store.assetsDirectory): \(FileIO.errnoText())")
            partial.discard()
            return results.merging(all(e)) { a, _ in a }
        }
        let stamp = target.stamp
        let lastModified = job.request.allowFile ? localStamp(url) : response.headers["last-modified"]
        var done = AssetResult(
            outcome: response.resumed ? .resumed : .downloaded, file: name, bytes: response.fileBytes,
            fileMtime: stamp?.mtime, fileSha256: response.fileSha256, etag: response.headers["etag"],
            lastModified: lastModified, type: format.type)
        done.freshUntil = job.request.allowFile ? nil : freshUntil(response.headers)
        for ad in accepted { results[ad.id] = done }
        return results
    }

    /// The whole file's length as the server announced it: the total of a `Content-Range`
    /// (a resumed 206), else the `Content-Length` of a 200.
    static func announcedTotal(_ response: TransferResponse) -> Int64? {
        if response.resumed {
            guard let range = response.headers["content-range"], let slash = range.lastIndex(of: "/") else {
                return nil
            }
            return Int64(range[range.index(after: slash)...].trimmed())
        }
        return response.headers["content-length"].flatMap(Int64.init)
    }
}
