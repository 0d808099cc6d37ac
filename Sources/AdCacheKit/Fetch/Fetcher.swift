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
/// The run is a pipeline of values, each stage in its own file (Sources/AdCacheKit/README.md):
///
/// 1. feed (FeedStage): the feed's answer and its signature, a value (the server's time in it,
///    not applied);
/// 2. acceptance (AcceptStage): the answer verified, parsed, its VAST resolved (VASTStage), the
///    signed-feed rules and "no feed blanks a fleet" judged, once, on the clock the answer
///    measured — `accepted(feed, trusted clock, signed state)` or `refused(reason)` (SPEC §6
///    *Decide, then act*);
/// 3. report: the event queue delivered on the clock the decision gives;
/// 4. plan (PlanStage) → download (DownloadStage) → check (CheckStage) → commit (CommitStage),
///    each on the accepted feed and its clock.
///
/// A `Fetcher` is immutable: each stage runs on the clock it is given (`on(_:)` makes the
/// fetcher of the accepted clock), and returns what it did. No lock is held across network
/// I/O except the fetch lock, which only other fetches take: the index is read at the start
/// and merged into the index *as it is at commit time*, so shows recorded meanwhile are kept.
struct Fetcher {
    let store: CacheStore
    /// The options, with the run's deadline and rate budget in `transfer`.
    let options: FetchOptions
    let warn: WarningSink
    let onProgress: ((FetchProgress) -> Void)?
    /// Where VAST errors and `notUsed` are queued (SPEC §10); nil queues none.
    let proofOfPlay: AdCache.ProofOfPlay?
    /// The report step (SPEC §4, §8): `fetch` delivers the event queue, judged on `now`.
    let reportStep: ((TransferSettings, _ now: @escaping () -> Double) -> Void)?
    /// The clock this fetcher's stages run on: the cache's until the feed's answer is
    /// accepted, then the one that answer measured.
    let clock: FetchClock

    init(
        store: CacheStore, options: FetchOptions, warn: @escaping WarningSink, clock: AdCache.Clock = .system,
        proofOfPlay: AdCache.ProofOfPlay? = nil, onProgress: ((FetchProgress) -> Void)? = nil,
        reportStep: ((TransferSettings, _ now: @escaping () -> Double) -> Void)? = nil
    ) {
        var options = options
        if let seconds = options.transfer.deadline { options.settings.deadline = monotonicNow() + seconds }
        // One budget for the run (SPEC §4): every transfer of it — the feed, VAST documents,
        // the report step's deliveries, the assets — takes its bytes from this one bucket.
        if let rate = options.limitRate {
            options.settings.rateLimiter = RateLimiter(bytesPerSecond: rate)
            // A limit under the stall rule's 1 KiB/s is slow by request, not stalled.
            options.settings.stallBytesPerSecond = Int(
                min(Int64(options.settings.stallBytesPerSecond), max(1, rate / 2)))
        }
        self.store = store
        self.options = options
        self.warn = warn
        self.proofOfPlay = proofOfPlay
        self.onProgress = onProgress
        self.reportStep = reportStep
        self.clock = FetchClock(source: clock, offset: nil, sync: nil)
    }

    private init(_ other: Fetcher, clock: FetchClock) {
        self.store = other.store
        self.options = other.options
        self.warn = other.warn
        self.proofOfPlay = other.proofOfPlay
        self.onProgress = other.onProgress
        self.reportStep = other.reportStep
        self.clock = clock
    }

    /// The same fetcher, its stages on `clock`.
    func on(_ clock: FetchClock) -> Fetcher { Fetcher(self, clock: clock) }

    /// Now on this fetcher's clock.
    func now() -> Double { clock.now() }

    func run() throws -> FetchReport {
        if let given = options.feed { _ = try FeedLocation(given) }   // a bad FEED changes nothing
        // Both libraries, before any transfer: a device without them learns it at once.
        _ = try CurlAPI.shared.get()
        _ = try CryptoAPI.shared.get()
        waitJitter()
        try store.prepare()
        let fetchLock = try store.acquireFetchLock()
        defer { fetchLock.unlock() }
        // What the run did, for `status` (SPEC §3, §13): written at its end, whatever the end.
        let feedText = options.feed ?? ""
        var ended = self   // the fetcher whose clock the end is timed on: the decided one
        do {
            let report = try runLocked { ended = $0 }
            ended.recordEnd(exit: report.exitCode, error: report.problem, feed: report.feed)
            return report
        } catch let e as AdCacheError {
            ended.recordEnd(exit: e.exitCode, error: e.message, feed: feedText)
            throw e
        } catch {
            ended.recordEnd(exit: 70, error: "\(error)", feed: feedText)
            throw error
        }
    }

    private func recordEnd(exit: Int32, error: String?, feed: String) {
        let remembered = feed.isEmpty ? (store.loadFetchRecord()?.feed ?? "") : feed
        store.recordFetch(at: now(), exit: exit, error: error, feed: remembered)
    }

    /// The run under the fetch lock; `decided` hears of each clock the run moves to.
    private func runLocked(_ decided: (Fetcher) -> Void) throws -> FetchReport {
        let before = try store.load(warn: warn)
        let onCache = on(clock.trusting(before))
        decided(onCache)

        // 1. The feed's answer.
        let request: FeedRequest
        let answer: FeedDownload
        do {
            request = try onCache.feedRequest(before)
            answer = try onCache.feedStep(request, before)
        } catch let wait as ToldToWait {
            onCache.report()
            warn(Diagnostic(.transfer, "the feed server asked for no requests before \(Time.formatLocal(wait.until))"))
            var report = FetchReport(feed: options.feed ?? before.feed?.url ?? "", feedStatus: "unchanged")
            report.toldToWaitUntil = Date(timeIntervalSince1970: wait.until)
            return report
        } catch let failure as FeedUnreachable {
            // The one thing a run whose feed failed writes: the server's "not before".
            if let wait = failure.retryAfter { try? store.update(warn: warn) { $0.retryAfter = wait } }
            onCache.report()
            throw failure.error
        } catch {
            onCache.report()
            throw error
        }

        // 2. The decision, before anything acts on the answer.
        let accepted: AcceptedFeed
        switch onCache.acceptanceStage(answer, request, before: before) {
        case .refused(let error, let warnings):
            // A feed refused whole records nothing, so it warns on every run (SPEC §2).
            for w in warnings { warn(w) }
            onCache.report()
            throw error
        case .accepted(let a):
            accepted = a
        }
        let trusted = on(accepted.clock)
        decided(trusted)
        if let w = accepted.clockWarning { warn(w) }
        // The feed's warnings, when its content is new (or always with -v): not every half hour.
        if options.warnAlways || accepted.digest != request.previous?.sha256 {
            for w in accepted.feed.warnings { warn(w) }
        }

        // 3. The report step, on the accepted answer's clock.
        trusted.report()

        // 4. Plan, download, check, commit.
        return try trusted.act(on: accepted, request: request, before: before)
    }

    /// The report step on this fetcher's clock; a failure there is the step's own warning.
    func report() {
        reportStep?(options.settings) { self.now() }
    }

    /// `--jitter`: a random pause first, within the deadline, cut short by a signal.
    private func waitJitter() {
        guard options.jitter > 0 else { return }
        var pause = Double.random(in: 0...options.jitter)
        if let deadline = options.settings.deadline { pause = min(pause, max(0, deadline - monotonicNow())) }
        let until = monotonicNow() + pause
        while monotonicNow() < until, options.transfer.isCancelled?() != true {
            usleep(useconds_t(min(0.1, until - monotonicNow()) * 1e6))
        }
    }

    /// Plan, download, check and commit the accepted feed; then what VAST asks to be told.
    private func act(on accepted: AcceptedFeed, request: FeedRequest, before: CacheIndex) throws -> FetchReport {
        let download = accepted.download
        var feed = accepted.feed
        var report = FetchReport(
            feed: request.feedText, feedStatus: download.body == nil ? "unchanged" : "downloaded")
        report.warnings = feed.warnings.map(\.message)
        let past = PastShows(self, feed.ads, before)
        var (waiting, results) = try planAssets(&feed.ads, cached: before, past: past)
        // In rounds under a budget: each round only what the day's count still allows; a media
        // file that failed for good gives way to the next rendition in a later round.
        var opensAt: Double?
        var received: Int64 = 0
        var renditionErrors: [VASTErrorReport] = []
        repeat {
            let (admitted, opens, rest) = gateDownloads(waiting, before: before, received: received, &results)
            opensAt = opens
            waiting = rest
            received += downloadAssets(admitted, &results)
            let (moved, errors) = Self.nextRenditions(&feed.ads, results)
            renditionErrors += errors
            if !moved.isEmpty {
                // The failure moved on from is no result of the next rendition's.
                for id in moved { results[id] = nil }
                var next = feed.ads.filter { moved.contains($0.id) }
                let (jobs, planned) = try planAssets(&next, cached: before, past: past, fromRecords: false)
                results.merge(planned) { _, new in new }
                waiting += jobs
            }
            if admitted.isEmpty && moved.isEmpty { break }
        } while !waiting.isEmpty && options.transfer.isCancelled?() != true
        let served = Set(
            before.ads.filter { $0.state != .pending && store.filePresent($0) }.map { $0.id + " " + $0.url })
        for ad in feed.ads {
            let r = results[ad.id] ?? AssetResult(outcome: .failed, error: "not attempted")
            var line = FetchReport.Ad(
                id: ad.id, url: ad.url, outcome: r.outcome, bytes: r.bytes, error: r.error, transient: r.transient)
            // A new version of the same URL pending or failed: the file before still serves.
            line.olderFileServes = [.pending, .failed].contains(r.outcome) && served.contains(ad.id + " " + ad.url)
            line.deferred = r.deferred
            line.failure = r.failure(vast: ad.vast != nil)
            report.ads.append(line)
        }

        // Every new file's data reaches the disk before the index names it.
        let downloaded = Set(
            results.values.filter { $0.outcome == .downloaded || $0.outcome == .resumed }.compactMap(\.file))
        if let e = FileIO.syncFiles(downloaded.map(store.asset)) { throw e }
        if !downloaded.isEmpty { store.dir.sync(.assets) }
        CrashPoint.reach("fetch.beforeCommit")

        var feedState = FeedSource(
            url: request.feedText, finalUrl: download.finalURL.absoluteString,
            etag: download.etag, lastModified: download.lastModified,
            fetchedAt: now())
        feedState.sha256 = accepted.digest
        feedState.freshUntil = download.freshUntil
        feedState.validUntil = accepted.signed?.validUntil
        feedState.signatureEtag = download.signature?.etag
        feedState.signatureLastModified = download.signature?.lastModified
        // A feed read from standard input is not one a bare `fetch` can read again.
        // Nor do the remote feed's validators describe these ads any more: without them the next
        // bare fetch downloads that feed whole (a 304 would keep standard input's ads).
        let standardInput = request.source.isStandardInput
        var remembered =
            standardInput
            ? before.feed.map { FeedSource(url: $0.url, finalUrl: $0.finalUrl, fetchedAt: $0.fetchedAt) } : feedState
        if standardInput, accepted.signed != nil {
            remembered = remembered ?? FeedSource(url: request.feedText)
            remembered?.validUntil = accepted.signed?.validUntil
        }
        // The verified bytes, for a later 304 of the feed or a new signature over them.
        if let verified = accepted.verified, download.body != nil {
            try store.signedFeedFile.writeAtomically(verified.feed)
        }
        try commit(
            feed, results: results, feedState: remembered, signed: accepted.signed, received: received, past: past,
            sweep: !before.ads.isEmpty)
        if let signed = accepted.signed { store.keepSignedSerial(signed) }

        queueVASTReports(feed, results: results, before: before, renditionErrors: renditionErrors)
        saveVASTDocuments(accepted.vastDocuments, feedBytes: accepted.vastFeedBytes)
        report.vastTransientFailures = feed.vastTransientFailures

        // What was stopped (deadline, signal) waits in partial/ for the next run.
        report.interrupted = options.transfer.isCancelled?() == true
        report.deadlinePassed = !report.interrupted && report.ads.contains { $0.outcome == .pending && !$0.deferred }
        report.deferredUntil = report.deferred > 0 ? opensAt.map(Date.init(timeIntervalSince1970:)) : nil
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
}
