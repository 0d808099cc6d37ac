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

/// `adcache fetch`: the feed, then every unexpired ad's asset, then one commit of the index.
///
/// No lock is held across network I/O except the fetch lock, which only other fetches take:
/// the index is read at the start and merged into the index *as it is at commit time*, so
/// shows recorded by `next` meanwhile are kept.
final class Fetcher {
    let store: CacheStore
    var options: FetchOptions
    let warn: WarningSink
    var onProgress: ((FetchProgress) -> Void)?
    /// Now, for expiry: the device clock corrected by `clockOffset` (or a fixed time).
    var clock: AdCache.Clock = .system
    /// Runs once the fetch lock is held and the feed's answer has measured the clock (or the
    /// feed failed): `fetch` delivers the event queue, judged on `now`, the trusted clock.
    var reportStep: ((TransferSettings, _ now: @escaping () -> Double) -> Void)?
    /// The feed server's clock minus the device's, when they differ by more than
    /// `clockTolerance` (the last measurement's until this run measures).
    private(set) var clockOffset: Double?
    /// Where `clockOffset` was measured, on the boot clock.
    private(set) var clockSync: ClockSync?
    /// `pastShows` as read this run, and the day it was read for.
    private var pastShowsRead: (today: Int, counts: [String: (total: Int64, today: Int64)])?
    static let clockTolerance: Double = 300

    func now() -> Double {
        switch clock {
        case .device(let read, let boot):
            let t = read().timeIntervalSince1970
            guard let offset = clockOffset else { return t }
            guard boot, let sync = clockSync else { return t + offset }
            return sync.trusted(deviceNow: t, offset: offset)
        case .fixed(let date): return date.timeIntervalSince1970
        }
    }

    /// The device clock as it reads, uncorrected: what the server's time is measured against.
    func deviceNow() -> Double {
        switch clock {
        case .device(let read, _): return read().timeIntervalSince1970
        case .fixed(let date): return date.timeIntervalSince1970
        }
    }

    init(store: CacheStore, options: FetchOptions, warn: @escaping WarningSink) {
        self.store = store
        self.options = options
        self.warn = warn
    }

    func run() throws -> FetchReport {
        if let given = options.feed { _ = try FeedLocation(given) }   // a bad FEED changes nothing
        // Both libraries, before any transfer: a device without them learns it at once.
        _ = try CurlAPI.shared.get()
        _ = try CryptoAPI.shared.get()
        if let seconds = options.deadline { options.transfer.deadline = monotonicNow() + seconds }
        // One budget for the run: the feed has it alone; the assets share it (below).
        if let rate = options.limitRate { options.transfer.maxReceiveSpeed = rate }
        if options.jitter > 0 {
            var pause = Double.random(in: 0...options.jitter)
            if let deadline = options.transfer.deadline { pause = min(pause, max(0, deadline - monotonicNow())) }
            let until = monotonicNow() + pause
            while monotonicNow() < until, options.isCancelled?() != true {
                usleep(useconds_t(min(0.1, until - monotonicNow()) * 1e6))
            }
        }
        try store.prepare()
        let fetchLock = try store.acquireFetchLock()
        defer { fetchLock.unlock() }
        let before = try store.load(warn: warn)
        clockOffset = before.clockOffset
        clockSync = before.clockSync
        let (feedText, source, previous, download) = try withReportStep {
            () throws -> (
                String, FeedLocation, FeedSource?, FeedDownload
            ) in
            guard let feedText = options.feed ?? before.feed?.url else {
                throw AdCacheError.invalidRequest("no FEED given and no earlier successful fetch to repeat")
            }
            let previous = before.feed?.url == feedText ? before.feed : nil
            let source = try FeedLocation(feedText)
            return (feedText, source, previous, try feedStep(source, previous: previous, before))
        }

        var feed: Feed
        if let bytes = download.body {
            do {
                feed = try FeedParser(baseURL: download.finalURL).parse(bytes)
            } catch let e as AdCacheError {
                throw e.with(message: "the feed \(feedText) is not a valid feed: \(e.message)")
            }
        } else {
            // 304: the feed is as it was; refresh the assets of the ads we have.
            feed = Feed(
                ads: before.ads.filter { $0.state != .withdrawn }.map(\.feedAd), warnings: [],
                reportUrl: before.reportUrl)
        }
        // The feed's warnings, when its content is new (or always with -v): not every half hour.
        let feedDigest = download.body.flatMap { try? SHA256Hasher.hex(bytes: $0) } ?? previous?.sha256
        if options.warnAlways || feedDigest != previous?.sha256 {
            for w in feed.warnings { warn(w) }
        }

        var report = FetchReport(feed: feedText, feedStatus: download.body == nil ? "unchanged" : "downloaded")
        report.warnings = feed.warnings.map(\.message)
        let results = try fetchAssets(feed.ads, cached: before)
        let served = Set(
            before.ads.filter { $0.state != .pending && store.filePresent($0) }.map { $0.id + " " + $0.url })
        for ad in feed.ads {
            let r = results[ad.id] ?? AssetResult(outcome: .failed, error: "not attempted")
            var line = FetchReport.Ad(
                id: ad.id, url: ad.url, outcome: r.outcome, bytes: r.bytes, error: r.error, transient: r.transient)
            // A new version of the same URL pending or failed: the file before still serves.
            line.olderFileServes = [.pending, .failed].contains(r.outcome) && served.contains(ad.id + " " + ad.url)
            report.ads.append(line)
        }

        // Every new file's data reaches the disk before the index names it.
        let downloaded = Set(
            results.values.filter { $0.outcome == .downloaded || $0.outcome == .resumed }.compactMap(\.file))
        if let e = FileIO.syncFiles(downloaded.map(store.asset)) { throw e }
        if !downloaded.isEmpty { store.dir.sync(.assets) }
        CrashPoint.reach("fetch.beforeCommit")

        var feedState = FeedSource(
            url: feedText, finalUrl: download.finalURL.absoluteString,
            etag: download.etag, lastModified: download.lastModified,
            fetchedAt: now())
        feedState.sha256 = feedDigest
        feedState.freshUntil = download.freshUntil
        // A feed read from standard input is not one a bare `fetch` can read again.
        // Nor do the remote feed's validators describe these ads any more: without them the next
        // bare fetch downloads that feed whole (a 304 would keep standard input's ads).
        let remembered =
            source.isStandardInput
            ? before.feed.map { FeedSource(url: $0.url, finalUrl: $0.finalUrl, fetchedAt: $0.fetchedAt) } : feedState
        try commit(
            feed, results: results, feedState: remembered, clockOffset: clockOffset, sweep: !before.ads.isEmpty)

        // What was stopped (deadline, signal) waits in partial/ for the next run.
        report.interrupted = options.isCancelled?() == true
        report.deadlinePassed = !report.interrupted && report.ads.contains { $0.outcome == .pending }
        report.partialsKept = Set(jobsPending(report)).count
        if report.deadlinePassed {
            let n = report.partialsKept
            warn(Diagnostic(.transfer, "the deadline passed: \(n) download\(n == 1 ? "" : "s") kept for the next run"))
        }
        // What succeeded is committed; a failing disk still ends the run with its own error.
        if let diskError = results.values.compactMap(\.ioError).first, case .io = diskError {
            throw diskError
        }
        return report
    }

    /// The URLs of pending ads whose partial file is kept.
    private func jobsPending(_ report: FetchReport) -> [String] {
        report.ads.filter { $0.outcome == .pending }.map(\.url).filter { url in
            guard let hash = try? SHA256Hasher.hex(url) else { return false }
            return store.partial("\(hash).part").exists
        }
    }

    // MARK: The feed

    struct FeedDownload {
        /// nil when the server said 304.
        var body: [UInt8]?
        var finalURL: URL
        var etag: String?
        var lastModified: String?
        /// The server's `Date` (Unix seconds) and the device's clock when the answer came.
        var serverDate: Double?
        var receivedAt: Double?
        /// Until when the answer is fresh.
        var freshUntil: Double?
    }

    /// The feed's transfer. With `--header`, redirects are followed here rather than by
    /// libcurl (which keeps custom headers across hosts): the headers go only to the feed's
    /// own origin (scheme, host and port), never to a CDN it redirects to (SPEC §4).
    private func fetchFeed(_ first: TransferRequest) throws -> TransferResponse {
        var request = first
        request.followRedirects = options.headers.isEmpty
        let origin = Self.origin(first.url)
        for _ in 0...options.transfer.maxRedirects {
            var response = TransferResponse()
            TransferEngine(settings: options.transfer).run([request]) { _, r in response = r }
            if !request.followRedirects, (300...399).contains(response.status), response.status != 304,
                let location = response.headers["location"]
            {
                guard let next = URL(string: location, relativeTo: URL(string: request.url))?.absoluteURL,
                    ["http", "https"].contains(next.scheme?.lowercased() ?? "")
                else {
                    throw AdCacheError.feedUnreachable(
                        "cannot fetch the feed \(first.url): refused: a redirect to \(location)")
                }
                request.url = next.absoluteString
                request.headers = Self.origin(request.url) == origin ? first.headers : []
                continue
            }
            if let error = response.error {
                if case .libcurlRefused(let why) = error { throw AdCacheError.libraryMissing(why) }
                throw AdCacheError.feedUnreachable("cannot fetch the feed \(first.url): \(error)")
            }
            if response.effectiveURL.isEmpty { response.effectiveURL = request.url }
            return response
        }
        throw AdCacheError.feedUnreachable("cannot fetch the feed \(first.url): too many redirects")
    }

    /// scheme://host:port, lowercased, with the default port made explicit.
    static func origin(_ url: String) -> String? {
        guard let u = URL(string: url), let scheme = u.scheme?.lowercased(), let host = u.host?.lowercased() else {
            return nil
        }
        return "\(scheme)://\(host):\(u.port ?? (scheme == "https" ? 443 : 80))"
    }

    /// Until when an answer is fresh, on this run's (corrected) clock.
    func freshUntil(_ headers: [String: String]) -> Double? {
        Freshness.until(headers, receivedAt: now()) { try? CurlAPI.shared.get().parseDate($0) }
    }

    /// SPEC §6 *Clock trust*: a device clock more than five minutes off the feed server's is
    /// corrected from now on (this run, and `next`, `list`, `prune` until a later fetch
    /// measures again), with one warning; a local feed measures nothing.
    private func measureClock(_ download: FeedDownload) {
        guard case .device = clock, let server = download.serverDate, let device = download.receivedAt else { return }
        let offset = server - device
        guard abs(offset) > Self.clockTolerance else {
            clockOffset = nil
            clockSync = nil
            return
        }
        clockOffset = offset.rounded()
        clockSync = BootClock.now().map { ClockSync(device: device, boot: $0) }
        let way = offset > 0 ? "behind" : "ahead of"
        warn(
            Diagnostic(
                .clock,
                "the device clock is \(Self.span(abs(offset))) \(way) the feed server's; using the server's time"))
    }

    /// 90 → "2 minutes", 172800 → "2 days", as a person says it.
    static func span(_ seconds: Double) -> String {
        let (n, unit): (Int, String)
        switch seconds {
        case ..<5400: (n, unit) = (Int((seconds / 60).rounded()), "minute")
        case ..<(36 * 3600): (n, unit) = (Int((seconds / 3600).rounded()), "hour")
        case ..<(548 * 86400): (n, unit) = (Int((seconds / 86400).rounded()), "day")
        default: (n, unit) = (Int((seconds / (365.25 * 86400)).rounded()), "year")
        }
        return "\(n) \(unit)\(n == 1 ? "" : "s")"
    }

    /// Proof of play (SPEC §4, §8): the queued events are delivered once the feed's answer
    /// has measured the clock, so that they are judged on the trusted time — or, when the
    /// feed cannot be read, on the clock as last measured, before the error.
    private func withReportStep<T>(_ feedStep: () throws -> T) rethrows -> T {
        let result: T
        do {
            result = try feedStep()
        } catch {
            reportStep?(options.transfer) { self.now() }
            throw error
        }
        reportStep?(options.transfer) { self.now() }
        return result
    }

    /// The feed's answer (or none, while it is fresh), with the clock measured against it.
    private func feedStep(_ source: FeedLocation, previous: FeedSource?, _ before: CacheIndex) throws -> FeedDownload {
        var download: FeedDownload
        if !options.revalidate, let previous, let fresh = previous.freshUntil, now() < fresh, !before.ads.isEmpty {
            // Still fresh (RFC 9111): not asked at all; the ads we have are refreshed as after a 304.
            download = FeedDownload(
                body: nil, finalURL: previous.finalUrl.flatMap(URL.init(string:)) ?? URL(fileURLWithPath: "/"),
                etag: previous.etag, lastModified: previous.lastModified, freshUntil: fresh)
        } else {
            download = try downloadFeed(source, previous: previous, hasAds: !before.ads.isEmpty)
            let offsetBefore = clockOffset ?? 0
            measureClock(download)
            // Freshness on the clock as this answer measured it (a device clock days ahead
            // must not keep the feed "fresh" for those days).
            download.freshUntil = download.freshUntil.map { $0 + (clockOffset ?? 0) - offsetBefore }
        }
        return download
    }

    private func downloadFeed(_ source: FeedLocation, previous: FeedSource?, hasAds: Bool) throws -> FeedDownload {
        switch source {
        case .standardInput:
            let bytes = options.feedContent ?? []
            guard Int64(bytes.count) <= options.maxFeedSize else {
                throw AdCacheError.feedUnreachable(
                    "cannot read the feed: standard input is larger than the limit of \(options.maxFeedSize) bytes")
            }
            return FeedDownload(body: bytes, finalURL: FeedParser.standardInputBase)
        case .local(let path):
            let bytes: [UInt8]
            do {
                bytes = try FileIO.read(path, limit: options.maxFeedSize)
            } catch let e as AdCacheError {
                throw AdCacheError.feedUnreachable("cannot read the feed: \(e.message)")
            }
            return FeedDownload(body: bytes, finalURL: URL(fileURLWithPath: path))
        case .remote(let url):
            var request = TransferRequest(url: url, destination: .memory, maxBytes: options.maxFeedSize)
            request.headers = options.headers
            request.acceptCompressed = true
            if hasAds, let previous {
                request.ifNoneMatch = previous.etag
                request.ifModifiedSince = previous.lastModified
            }
            let response = try fetchFeed(request)
            let finalURL = URL(string: response.effectiveURL) ?? URL(string: url)!
            let receivedAt = deviceNow()
            // The server's time: its Date plus the Age of a cached answer (a CDN's copy is not
            // a clock error, SPEC §6).
            let age = response.headers["age"].flatMap(Double.init).map { max(0, min($0, 365 * 86400)) } ?? 0
            let serverDate = response.headers["date"].flatMap { try? CurlAPI.shared.get().parseDate($0) }.map {
                $0 + age
            }
            let fresh = freshUntil(response.headers)
            if response.notModified {
                return FeedDownload(
                    body: nil, finalURL: previous?.finalUrl.flatMap(URL.init(string:)) ?? finalURL,
                    etag: response.headers["etag"] ?? previous?.etag,
                    lastModified: response.headers["last-modified"] ?? previous?.lastModified,
                    serverDate: serverDate, receivedAt: receivedAt, freshUntil: fresh)
            }
            return FeedDownload(
                body: response.body, finalURL: finalURL,
                etag: response.headers["etag"], lastModified: response.headers["last-modified"],
                serverDate: serverDate, receivedAt: receivedAt, freshUntil: fresh)
        }
    }

    // MARK: The assets

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
        /// Until when the answer is fresh (RFC 9111).
        var freshUntil: Double?
        /// Set when the local disk failed (full, I/O error): the run exits 74.
        var ioError: AdCacheError?
        /// It did not fit on the disk; the size the server announced, if it did.
        var noSpace = false
        var announcedBytes: Int64?

        static func failedForGood(_ message: String, etag: String? = nil, lastModified: String? = nil) -> AssetResult {
            AssetResult(outcome: .failed, error: message, failedEtag: etag, failedLastModified: lastModified)
        }

        static func failedForNow(_ message: String) -> AssetResult {
            AssetResult(outcome: .failed, error: message, transient: true)
        }
    }

    /// One download (ads that share a URL share it).
    private struct Job {
        var url: String
        var ads: [FeedAd]
        var cached: AdRecord?
        var request: TransferRequest
        /// Retrying a version that failed for good, conditionally: its error, for a 304.
        var retryingFailure: String?
    }

    /// What a failure for good is remembered against: the ad's asset as the feed describes
    /// it and the run's size cap. While these stay the same, it is retried with a back-off.
    func failureKey(_ ad: FeedAd) -> String {
        "\(ad.url)|\(ad.sha256 ?? "")|\(ad.type?.rawValue ?? "")|\(options.maxAssetSize)"
    }

    private func fetchAssets(_ ads: [FeedAd], cached index: CacheIndex) throws -> [String: AssetResult] {
        var results: [String: AssetResult] = [:]
        var jobs: [Job] = []
        var jobByURL: [String: Int] = [:]
        // A file whose size is right but whose mtime changed (a backup restore, an rsync
        // without -t) is hashed again and kept when it matches: no download (SPEC §4).
        var index = index
        for i in index.ads.indices where index.ads[i].state != .pending && !store.fileUnchanged(index.ads[i]) {
            let r = index.ads[i]
            guard let file = r.file, AssetName.isValid(file), let digest = r.fileSha256,
                let stamp = store.asset(file).stamp, stamp.size == r.bytes,
                SHA256Hasher.hex(of: store.asset(file)) == digest
            else { continue }
            index.ads[i].fileMtime = stamp.mtime
        }
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
        let past = ads.contains { byID[$0.id] == nil } ? pastShows(today: today) : [:]
        for ad in ads {
            // What the commit will record for this ad: if it can never be shown, no download.
            var record = byID[ad.id] ?? AdRecord(ad: ad, shown: past[ad.id], today: today)
            record.apply(ad)
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
            jobs.append(Job(url: ad.url, ads: [ad], cached: cached, request: request, retryingFailure: retrying))
        }

        var settings = options.transfer
        if let rate = options.limitRate {   // shared by the transfers that run at once
            let share = max(1, rate / Int64(max(1, min(options.parallel, jobs.count))))
            settings.maxReceiveSpeed = share
            // A share under the stall rule's 1 KiB/s is slow by request, not stalled.
            settings.stallBytesPerSecond = Int(min(Int64(settings.stallBytesPerSecond), max(1, share / 2)))
        }
        let engine = TransferEngine(settings: settings)
        engine.onProgress = onProgress
        engine.run(jobs.map(\.request)) { i, response in
            results.merge(finishAsset(jobs[i], response)) { _, new in new }
        }
        retryWhatDidNotFit(jobs, settings: settings, &results)
        return results
    }

    /// Transfers that ran together share the disk: one asset too big for it can take the
    /// room of the small ones while they run (SPEC §6: what fits is committed). Those that
    /// did not fit are tried again one at a time, smallest first (by the size the server
    /// announced), until one still does not fit, or the free space cannot hold it: the larger
    /// ones would not fit either.
    private func retryWhatDidNotFit(_ jobs: [Job], settings: TransferSettings, _ results: inout [String: AssetResult]) {
        let full = jobs.indices.filter { results[jobs[$0].ads[0].id]?.noSpace == true }
        guard settings.parallel > 1, jobs.count > 1, !full.isEmpty, options.isCancelled?() != true else { return }
        let order = full.sorted {
            (results[jobs[$0].ads[0].id]?.announcedBytes ?? .max, $0)
                < (results[jobs[$1].ads[0].id]?.announcedBytes ?? .max, $1)
        }
        var one = settings
        one.parallel = 1
        for i in order {
            if let deadline = one.deadline, monotonicNow() >= deadline { return }
            // One the free space cannot hold is not downloaded a second time.
            var fs = statvfs()
            if let wanted = results[jobs[i].ads[0].id]?.announcedBytes, statvfs(store.directory, &fs) == 0,
                wanted > Int64(fs.f_bavail) * Int64(fs.f_frsize)
            {
                return
            }
            let engine = TransferEngine(settings: one)
            engine.onProgress = onProgress
            var again: [String: AssetResult] = [:]
            engine.run([jobs[i].request]) { _, response in again = finishAsset(jobs[i], response) }
            results.merge(again) { _, new in new }
            if again.values.contains(where: \.noSpace) { return }
        }
    }

    /// The cases where no request is needed: a cached file whose sha256 the feed confirms, an
    /// unchanged local file, or (after a lost index) a file already in `assets/` for this URL.
    private func reuse(_ ad: FeedAd, cached: AdRecord?, recoverable: [String: [String]]) throws -> AssetResult? {
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
    private func localStamp(_ url: String) -> String? {
        var st = stat()
        guard let path = URL(string: url)?.path, stat(path, &st) == 0 else { return nil }
        let mtime = Double(st.st_mtim.tv_sec) + Double(st.st_mtim.tv_nsec) / 1e9
        return "mtime \(Date(timeIntervalSince1970: mtime).timeIntervalSince1970) size \(Int64(st.st_size))"
    }

    /// Validates a finished download against each ad that wants it (their own `sha256` and
    /// `type`) and moves it into `assets/` under a new name when one accepts it.
    private func finishAsset(_ job: Job, _ response: TransferResponse) -> [String: AssetResult] {
        let url = job.url
        func all(_ r: AssetResult) -> [String: AssetResult] {
            Dictionary(job.ads.map { ($0.id, r) }, uniquingKeysWith: { a, _ in a })
        }
        guard case .file(let partial) = job.request.destination else {
            return all(.failedForGood("\(url): not streamed to a file"))
        }
        let validators = (response.headers["etag"], response.headers["last-modified"])
        func forGood(_ message: String) -> AssetResult {
            .failedForGood(message, etag: validators.0, lastModified: validators.1)
        }
        if let error = response.error {
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
                return all(.failedForNow("\(url): \(error)"))
            }
            partial.discard()   // never keep what failed for good (an over-cap partial included)
            return all(forGood("\(url): \(error)"))
        }
        if response.notModified {
            if let c = job.cached, job.retryingFailure == nil {
                var r = AssetResult(
                    outcome: .unchanged, file: c.file, bytes: c.bytes, fileMtime: c.fileMtime,
                    fileSha256: c.fileSha256, etag: response.headers["etag"] ?? c.etag,
                    lastModified: response.headers["last-modified"] ?? c.lastModified, type: c.type)
                r.freshUntil = freshUntil(response.headers)
                return all(r)
            }
            // Asked with the validators of a version that failed: it is still that version.
            return all(forGood(job.retryingFailure ?? "\(url): unchanged since it failed"))
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
                    "\(url): not an image or video\(what): the first bytes are not JPEG, PNG, GIF, WebP, MP4/MOV or WebM"
                ))
        }
        // Each ad checks the bytes against its own sha256 and type: the feed's (or the URL
        // extension's), else the Content-Type's; the first bytes must agree with it.
        var results: [String: AssetResult] = [:]
        var accepted: [FeedAd] = []
        let served = response.headers["content-type"].flatMap(MediaFormat.type(forContentType:))
        for ad in job.ads {
            if let sha = ad.sha256, response.fileSha256 != sha {
                results[ad.id] = forGood("\(url): the file's SHA-256 does not match the feed's sha256")
            } else if let type = ad.type ?? served, type != format.type {
                let source = ad.type == nil ? "the server's Content-Type says" : "the ad says"
                results[ad.id] = forGood(
                    "\(url): the file is \(format.type.rawValue) (\(format.rawValue)), but \(source) \(type.rawValue)")
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

    // MARK: The commit

    /// Merges the results into the index as it is now (keeping shows recorded meanwhile),
    /// withdraws what the feed no longer lists, and deletes files nothing names any more.
    /// `sweep`: also delete what an interrupted predecessor left in assets/ (not after a
    /// rebuild of a lost index, whose files the next run may still confirm).
    private func commit(
        _ feed: Feed, results: [String: AssetResult], feedState: FeedSource?, clockOffset: Double?, sweep: Bool
    ) throws {
        let ads = feed.ads
        // A run's downloads are worth more than a second's wait: the commit waits for the
        // index lock as long as the deadline allows (a minute without one), not the second a
        // launch waits (SPEC §6; a fold by another command may hold it a while).
        let wait = options.transfer.deadline.map { max(1, $0 - monotonicNow()) } ?? 60
        let launchWait = store.lockTimeout
        store.lockTimeout = max(launchWait, wait)
        defer { store.lockTimeout = launchWait }
        var leftovers: [CacheFile] = []
        let orphans: [String]
        do {
            orphans = try merge(feed, results: results, feedState: feedState, clockOffset: clockOffset, sweep: sweep) {
                leftovers = $0
            }
        } catch {
            // The downloads stay for the next run, which asks the server about them.
            let today = Time.localDay(now())
            store.saveUncommitted(
                ads.compactMap { ad in
                    guard let r = results[ad.id], r.file != nil else { return nil }
                    var record = AdRecord(ad: ad, shown: nil, today: today)
                    record.apply(ad)
                    record.take(r, at: now(), failureKey: failureKey(ad))
                    return record.file != nil && store.fileUnchanged(record) ? record : nil
                })
            throw error
        }
        store.uncommittedFile.remove()
        for file in leftovers { file.remove() }
        CrashPoint.reach("fetch.afterCommit")
        // A superseded file may be what a launch just printed (SPEC §6): it stays, dated now,
        // for `prune` to delete once the grace has passed.
        for name in orphans where AssetName.isValid(name) { store.asset(name).touch() }
    }

    /// The commit's read-modify-write of the index (under the index lock); returns the files
    /// the index no longer names, and gives `leftovers` what the sweep deletes.
    private func merge(
        _ feed: Feed, results: [String: AssetResult], feedState: FeedSource?, clockOffset: Double?, sweep: Bool,
        leftovers: ([CacheFile]) -> Void
    ) throws -> [String] {
        let ads = feed.ads
        return try store.update(warn: warn) { index in
            let filesBefore = Set(index.ads.compactMap(\.file))
            var byID = Dictionary(index.ads.map { ($0.id, $0) }, uniquingKeysWith: { a, _ in a })
            let known = Set(byID.keys)
            let today = Time.localDay(now())
            let past = ads.contains { !known.contains($0.id) } ? pastShows(today: today) : [:]
            var merged: [AdRecord] = []
            for ad in ads {
                var record = byID.removeValue(forKey: ad.id) ?? AdRecord(ad: ad, shown: past[ad.id], today: today)
                record.apply(ad)
                if let r = results[ad.id] { record.take(r, at: now(), failureKey: failureKey(ad)) }
                merged.append(record)
            }
            for var gone in index.ads where byID[gone.id] != nil {
                gone.state = .withdrawn
                merged.append(gone)
            }
            index.ads = merged
            index.feed = feedState
            index.reportUrl = feed.reportUrl
            index.clockOffset = clockOffset
            index.clockSync = clockOffset == nil ? nil : clockSync
            let filesAfter = Set(merged.compactMap(\.file))
            // What an interrupted predecessor moved into assets/ and never committed (this
            // run holds the fetch lock): gone once past the grace, as prune would.
            if sweep { leftovers(Pruner.orphans(in: store, named: filesAfter.union(filesBefore))) }
            return Array(filesBefore.subtracting(filesAfter))
        }
    }
}

extension Fetcher {
    /// The shows of each ad id that the proof-of-play counts hold (90 days, SPEC §8),
    /// with those still in the journal: an ad listed again after its record went (pruned
    /// as expired by a clock set ahead, withdrawn and back) resumes its count, so that its
    /// `maxShows` and `maxShowsPerDay` are never exceeded. The caller holds the index lock.
    func pastShows(today: Int) -> [String: (total: Int64, today: Int64)] {
        // Read once a run: events.json may be large, and the asset stage and the commit both ask.
        if let cached = pastShowsRead, cached.today == today { return cached.counts }
        let counts = readPastShows(today: today)
        pastShowsRead = (today, counts)
        return counts
    }

    private func readPastShows(today: Int) -> [String: (total: Int64, today: Int64)] {
        guard var log = try? store.loadEvents(warn: { _ in }, setAside: false) else { return [:] }
        let records = (try? store.journal.read(warn: { _ in }, deliveries: false)) ?? []
        log.fold(records, bounds: EventBounds(maxEvents: .max, maxAge: 36500), now: Double(today) * 86400)
        var out: [String: (total: Int64, today: Int64)] = [:]
        for (day, ads) in log.days {
            for (id, counts) in ads {
                var entry = out[id] ?? (0, 0)
                entry.total.add(counts.shows)
                if day == today { entry.today.add(counts.shows) }
                out[id] = entry
            }
        }
        return out
    }
}

extension AdRecord {
    /// A new record for `ad`, resuming the counts its id already has (`Fetcher.pastShows`).
    init(ad: FeedAd, shown: (total: Int64, today: Int64)?, today: Int) {
        self.init(ad: ad)
        guard let shown, shown.total > 0 else { return }
        shows = min(max(0, shown.total), AdRecord.counts.upperBound)
        if shown.today > 0 {
            showsOnDay = shown.today
            showDay = today
        }
    }
}

extension AdRecord {
    /// Records what the fetch found for this ad's asset.
    mutating func take(_ r: Fetcher.AssetResult, at t: Double, failureKey: String) {
        switch r.outcome {
        case .downloaded, .resumed, .unchanged:
            state = .ready
            file = r.file
            bytes = r.bytes
            fileMtime = r.fileMtime
            fileSha256 = r.fileSha256
            etag = r.etag
            lastModified = r.lastModified
            if let t = r.type { type = t }
            error = nil
            freshUntil = r.freshUntil
            forgetFailure()
        case .failed:
            guard !r.waiting else { return }   // nothing was tried: nothing changes
            // A file we already have stays usable (offline first); the error is noted.
            if state != .ready { state = .failed }
            error = r.error
            if !r.transient, r.ioError == nil {
                // Failed for good: not again on every run (SPEC §4), but after 30 minutes,
                // doubling up to a day, while the ad's asset and the size cap stay the same.
                failures = failedFor == failureKey ? min((failures ?? 0) + 1, 64) : 1
                failedFor = failureKey
                retryAt = t + min(1800 * pow(2, Double(failures! - 1)), 86400)
                failedEtag = r.failedEtag ?? failedEtag
                failedLastModified = r.failedLastModified ?? failedLastModified
            }
        case .pending:
            if state != .ready { state = .pending }
        case .expired, .exhausted:
            break
        }
    }

    /// The ad as a feed would give it (after a 304 for the feed).
    var feedAd: FeedAd {
        var ad = FeedAd(id: id, url: url)
        ad.type = feedType   // not a sniffed type: the server may swap an image for a video
        ad.start = start
        ad.expires = expires
        ad.maxShows = maxShows
        ad.maxShowsPerDay = maxShowsPerDay
        ad.minInterval = minInterval
        ad.duration = duration
        ad.priority = priority
        ad.placement = placement
        ad.clickUrl = clickUrl
        ad.sha256 = sha256
        ad.meta = meta
        ad.weight = weight
        ad.schedule = schedule
        ad.tracking = tracking
        return ad
    }
}

/// FEED on the command line: an http/https URL, a `file:` URL, or a local path.
enum FeedLocation {
    case remote(String)
    case local(String)
    /// `-`: the feed's bytes come with the options (the command line reads standard input).
    case standardInput

    init(_ text: String) throws {
        let lower = text.lowercased()
        if text == "-" {
            self = .standardInput
        } else if lower.hasPrefix("http://") || lower.hasPrefix("https://") {
            guard let u = URL(string: text), u.host?.isEmpty == false else {
                throw AdCacheError.invalidRequest("FEED '\(text)' is not a valid URL")
            }
            self = .remote(text)
        } else if lower.hasPrefix("file:") {
            guard let u = URL(string: text), u.isFileURL else {
                throw AdCacheError.invalidRequest("FEED '\(text)' is not a valid file: URL")
            }
            self = .local(u.path)
        } else if let r = text.firstRange(of: "://"), !text[..<r.lowerBound].contains("/") {
            throw AdCacheError.invalidRequest("FEED '\(text)': only http, https and file: feeds are supported")
        } else {
            self = .local(CacheStore.absolute(text))
        }
    }
}

extension FeedLocation {
    var isStandardInput: Bool {
        if case .standardInput = self { return true }
        return false
    }
}
