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

/// The plan stage of a fetch: for each ad of the parsed feed, what its asset needs — nothing
/// (still fresh, confirmed by the feed's `sha256`, an unchanged local file, a file a lost
/// index left), a wait (a failure for good in its back-off), or a transfer, conditional when
/// there is a version to keep.
extension Fetcher {
    /// What became of one ad's asset.
    struct AssetResult {
        var outcome: FetchReport.Outcome
        var file: String?
        var bytes: Int64?
        var fileMtime: Int64?
        var fileSha256: String?
        var etag: String?
        var lastModified: String?
        var type: AdType?
        var error: String?
        /// For a failure: worth trying again in the next run (network, 5xx, a short body…);
        /// false for a failure for good (4xx, invalid content, too large, a wrong sha256).
        var transient = false
        /// The validators of a response that failed for good, for a conditional retry.
        var failedEtag: String?
        var failedLastModified: String?
        /// Not attempted: waiting out the back-off of an earlier failure for good.
        var waiting = false
        /// Not attempted: outside the download window, or over the day's budget (SPEC §12).
        var deferred = false
        /// Until when the answer is fresh (RFC 9111).
        var freshUntil: Double?
        /// Set when the local disk failed (full, I/O error): the run exits 74.
        var ioError: AdCacheError?
        /// It did not fit on the disk; the size the server announced, if it did.
        var noSpace = false
        var announcedBytes: Int64?
        /// For a failure: the VAST error it is for a media file (SPEC §10), typed where it
        /// happened (CheckStage); nil for one VAST does not hear of.
        var mediaError: VASTCode?
        /// For a failure of the transfer: libcurl's or the server's (for `failure`).
        var transferError: TransferError?

        /// The failure as the public value (SPEC §1 v4); `vast`: the VAST error code counts.
        func failure(vast: Bool) -> AdCacheError.Failure? {
            guard outcome == .failed, let error else { return nil }
            var f = transferError?.failure(error) ?? AdCacheError.Failure(error, kind: .content)
            f.transient = transient
            if vast, let code = mediaError { f.vastError = code.rawValue }
            return f
        }

        static func failedForGood(_ message: String, etag: String? = nil, lastModified: String? = nil) -> AssetResult {
            AssetResult(outcome: .failed, error: message, failedEtag: etag, failedLastModified: lastModified)
        }

        static func failedForNow(_ message: String) -> AssetResult {
            AssetResult(outcome: .failed, error: message, transient: true)
        }
    }

    /// One download (ads that share a URL share it).
    struct Job {
        var url: String
        var ads: [FeedAd]
        var cached: AdRecord?
        var request: TransferRequest
        /// Retrying a version that failed for good, conditionally: its error, for a 304.
        var retriedError: String?
        /// The bytes the day's budget still allows it (SPEC §12): larger, it is abandoned
        /// before its body and deferred.
        var budgetCap: Int64?
    }

    /// What a failure for good is remembered against: the ad's asset as the feed describes
    /// it and the run's size cap. While these stay the same, it is retried with a back-off.
    func failureKey(_ ad: FeedAd) -> String {
        "\(ad.url)|\(ad.sha256 ?? "")|\(ad.type?.rawValue ?? "")|\(options.maxAssetSize)"
    }

    /// `ads`: with `fromRecords`, a VAST ad whose record holds a later rendition (SPEC §10
    /// *The next rendition*) starts from it, unless `--revalidate`: the ones before it failed
    /// for good — a ready one, or one that failed too and whose back-off still waits (after
    /// it, the run starts over from the first). A re-plan of the next rendition starts where
    /// it was moved to.
    func planAssets(_ ads: inout [FeedAd], cached index: CacheIndex, past: PastShows, fromRecords: Bool = true)
        throws -> (jobs: [Job], results: [String: AssetResult])
    {
        var results: [String: AssetResult] = [:]
        var jobs: [Job] = []
        var jobByURL: [String: Int] = [:]
        // A file whose size is right but whose mtime changed (a backup restore, an rsync
        // without -t) is hashed again and kept when it matches: no download (SPEC §4).
        var index = index
        for i in index.ads.indices where index.ads[i].state != .pending { _ = store.confirmFile(&index.ads[i]) }
        let byID = Dictionary(index.ads.map { ($0.id, $0) }, uniquingKeysWith: { a, _ in a })
        var readyByURL: [String: AdRecord] = [:]
        for r in index.ads where r.state != .pending && store.fileUnchanged(r) {
            readyByURL[r.url] = readyByURL[r.url] ?? r
        }
        // What the last run downloaded and could not commit: its validators are asked about.
        for r in store.uncommittedDownloads() where readyByURL[r.url] == nil { readyByURL[r.url] = r }
        let t = now()
        let assetNames = store.dir.list(.assets)
        var recoverable: [String: [String]] = [:]   // URL hash → file names (versions)
        for name in assetNames where AssetName.isValid(name) {
            recoverable[AssetName.urlHash(name), default: []].append(name)
        }

        let today = Time.localDay(t)
        let past = ads.contains { byID[$0.id] == nil } ? past.counts(today: today, self) : [:]
        for i in ads.indices {
            if fromRecords, !options.revalidate, let known = byID[ads[i].id] {
                let ready = known.state != .pending && known.state != .failed && store.fileUnchanged(known)
                let waiting = known.state == .failed && known.retryAt.map { t < $0 } == true
                if ready || waiting { ads[i].startRendition(at: known.url) }
            }
            let ad = ads[i]
            // What the commit will record for this ad: if it can never be shown, no download.
            var record = byID[ad.id] ?? AdRecord(ad: ad, shown: past[ad.id], today: today)
            record.update(from: ad)
            switch record.finished(at: t) {
            case .expired?:
                results[ad.id] = AssetResult(outcome: .expired)
                continue
            case .exhausted?:
                results[ad.id] = AssetResult(outcome: .exhausted)
                continue
            default: break
            }
            if let j = jobByURL[ad.url] {
                jobs[j].ads.append(ad)
                continue
            }
            // The file we have for this URL: this ad's own, or one another ad shares.
            let mine = byID[ad.id].flatMap { $0.url == ad.url && store.fileUnchanged($0) ? $0 : nil }
            let cached = mine ?? readyByURL[ad.url]
            if !options.revalidate, let c = cached, let fresh = c.freshUntil, t < fresh,
                ad.sha256 == nil || ad.sha256 == c.fileSha256
            {
                var r = AssetResult(
                    outcome: .unchanged, file: c.file, bytes: c.bytes, fileMtime: c.fileMtime, fileSha256: c.fileSha256,
                    etag: c.etag, lastModified: c.lastModified, type: c.type)
                r.freshUntil = fresh
                results[ad.id] = r
                continue
            }
            if let reused = try reuse(ad, cached: cached, recoverable: recoverable) {
                results[ad.id] = reused
                continue
            }
            // Failed for good before, and nothing it depends on changed: wait out the back-off
            // (`--revalidate` asks anyway: after the server was fixed, a person need not wait).
            var retrying: String?
            if let known = byID[ad.id], known.failedFor == failureKey(ad), let until = known.retryAt {
                guard t >= until || options.revalidate else {
                    let wait = Fetcher.span(until - t)
                    var r = AssetResult.failedForGood(
                        (known.error ?? "\(ad.url): failed") + " (not retried for \(wait))")
                    r.waiting = true
                    results[ad.id] = r
                    continue
                }
                retrying = known.error
            }
            let hash = try SHA256Hasher.hex(ad.url)
            var request = TransferRequest(
                url: ad.url, destination: .file(PartialDownload(file: store.partial("\(hash).part"))),
                maxBytes: options.maxAssetSize)
            request.allowFile = ad.url.hasPrefix("file:")
            if let known = byID[ad.id], retrying != nil, known.failedEtag != nil || known.failedLastModified != nil {
                // The version that failed carried validators: a 304 costs no body.
                request.ifNoneMatch = known.failedEtag
                request.ifModifiedSince = request.allowFile ? nil : known.failedLastModified
            } else if let cached, ad.sha256 == nil {   // a feed sha256 that differs means the file is stale
                retrying = nil
                request.ifNoneMatch = cached.etag
                request.ifModifiedSince = request.allowFile ? nil : cached.lastModified
            } else {
                retrying = nil
            }
            jobByURL[ad.url] = jobs.count
            jobs.append(Job(url: ad.url, ads: [ad], cached: cached, request: request, retriedError: retrying))
        }
        return (jobs, results)
    }

    /// The cases where no request is needed: a cached file whose sha256 the feed confirms, an
    /// unchanged local file, or (after a lost index) a file already in `assets/` for this URL.
    func reuse(_ ad: FeedAd, cached: AdRecord?, recoverable: [String: [String]]) throws -> AssetResult? {
        if let c = cached {
            let asIs = AssetResult(
                outcome: .unchanged, file: c.file, bytes: c.bytes, fileMtime: c.fileMtime, fileSha256: c.fileSha256,
                etag: c.etag, lastModified: c.lastModified, type: c.type)
            if let sha = ad.sha256, c.fileSha256 == sha { return asIs }
            if ad.url.hasPrefix("file:"), let stamp = localStamp(ad.url), stamp == c.lastModified,
                ad.sha256 == nil || ad.sha256 == c.fileSha256
            {
                return asIs
            }
            return nil
        }
        // Recovery (a lost index, or a crash between moving a new version into assets/ and
        // committing): a file named by this URL's hash that the index does not describe. It
        // is reused only when something confirms it is the current version: the feed's
        // sha256, or for a local feed the source file itself. Otherwise it is downloaded again.
        let local = ad.url.hasPrefix("file:")
        let expected = ad.sha256 ?? (local ? URL(string: ad.url).flatMap { SHA256Hasher.hex(ofFile: $0.path) } : nil)
        guard let expected else { return nil }
        for name in recoverable[try SHA256Hasher.hex(ad.url)] ?? [] {
            let file = store.asset(name)
            guard let format = MediaFormat.sniff(file.head()), ad.type == nil || ad.type == format.type,
                let stamp = file.stamp, SHA256Hasher.hex(of: file) == expected
            else { continue }
            return AssetResult(
                outcome: .unchanged, file: name, bytes: stamp.size, fileMtime: stamp.mtime, fileSha256: expected,
                etag: nil, lastModified: local ? localStamp(ad.url) : nil, type: format.type)
        }
        return nil
    }

    /// For a `file:` asset: its modification time and size, as the validator.
    func localStamp(_ url: String) -> String? {
        var st = stat()
        guard let path = URL(string: url)?.path, stat(path, &st) == 0 else { return nil }
        let mtime = Double(st.st_mtim.tv_sec) + Double(st.st_mtim.tv_nsec) / 1e9
        return "mtime \(Date(timeIntervalSince1970: mtime).timeIntervalSince1970) size \(Int64(st.st_size))"
    }
}
