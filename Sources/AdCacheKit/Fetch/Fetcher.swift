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
/// The run is a pipeline of stages, each in its own file (Sources/AdCacheKit/README.md):
/// feed and signature (FeedStage) → verify (VerifyStage) → parse (ParseStage) → signed-feed
/// rules (VerifyStage) → plan (PlanStage) →
/// download (DownloadStage) → check (CheckStage) → commit (CommitStage).
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
    /// The wrapped VAST documents kept by the last run, and those this run keeps.
    lazy var vastDocumentsBefore: [String: VASTDocumentCopy] = Self.loadVASTDocuments(store)
    var vastDocumentsNow: [String: VASTDocumentCopy] = [:]
    /// Asset body bytes received this run (resumed bytes counted once): the day's count.
    var bytesReceived: Int64 = 0
    /// A 429/503 `Retry-After` of the feed's server this run, remembered even when the feed
    /// failed (SPEC §12).
    var toldToWait: RetryAfter?
    /// Where VAST errors and `notUsed` are queued (SPEC §10); nil queues none.
    var proofOfPlay: AdCache.ProofOfPlay?
    /// The feed server's clock minus the device's, when they differ by more than
    /// `clockTolerance` (the last measurement's until this run measures).
    var clockOffset: Double?
    /// Where `clockOffset` was measured, on the boot clock.
    var clockSync: ClockSync?
    /// `pastShows` as read this run, and the day it was read for.
    var pastShowsRead: (today: Int, counts: [String: (total: Int64, today: Int64)])?
    static let clockTolerance: Double = 300

    func now() -> Double {
        switch clock {
        case .device(let read, let boot):
            return ClockSync.corrected(
                read().timeIntervalSince1970, offset: clockOffset, sync: clockSync, bootClock: boot)
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
        var verified: Verification?
        let feedStage: (String, FeedLocation, FeedSource?, FeedDownload)
        do {
            feedStage = try feedStageWithReport(before, &verified)
        } catch let wait as ToldToWait {
            warn(Diagnostic(.transfer, "the feed server asked for no requests before \(Time.formatLocal(wait.until))"))
            var report = FetchReport(feed: options.feed ?? before.feed?.url ?? "", feedStatus: "unchanged")
            report.toldToWaitUntil = Date(timeIntervalSince1970: wait.until)
            return report
        } catch {
            // The one thing a run whose feed failed writes: the server's "not before".
            if let wait = toldToWait { try? store.update(warn: warn) { $0.retryAfter = wait } }
            throw error
        }
        let (feedText, source, previous, download) = feedStage

        var feed = try parseStage(download, feedText: feedText, before: before)
        let signed = try verified.map { try signedStage(&feed, $0, before: before) }
        // The feed's warnings, when its content is new (or always with -v): not every half hour.
        let feedDigest = download.body.flatMap { try? SHA256Hasher.hex(bytes: $0) } ?? previous?.sha256
        if options.warnAlways || feedDigest != previous?.sha256 {
            for w in feed.warnings { warn(w) }
        }

        var report = FetchReport(feed: feedText, feedStatus: download.body == nil ? "unchanged" : "downloaded")
        report.warnings = feed.warnings.map(\.message)
        var (jobs, results) = try planAssets(feed.ads, cached: before)
        // In rounds under a budget: each round only what the day's count still allows.
        var waiting = jobs
        var opensAt: Double?
        repeat {
            let (admitted, opens, rest) = gateDownloads(waiting, before: before, &results)
            opensAt = opens
            waiting = rest
            downloadAssets(admitted, &results)
            if admitted.isEmpty { break }
        } while !waiting.isEmpty && options.isCancelled?() != true
        let served = Set(
            before.ads.filter { $0.state != .pending && store.filePresent($0) }.map { $0.id + " " + $0.url })
        for ad in feed.ads {
            let r = results[ad.id] ?? AssetResult(outcome: .failed, error: "not attempted")
            var line = FetchReport.Ad(
                id: ad.id, url: ad.url, outcome: r.outcome, bytes: r.bytes, error: r.error, transient: r.transient)
            // A new version of the same URL pending or failed: the file before still serves.
            line.olderFileServes = [.pending, .failed].contains(r.outcome) && served.contains(ad.id + " " + ad.url)
            line.deferred = r.deferred
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
        feedState.validUntil = signed?.validUntil
        feedState.signatureEtag = download.signature?.etag
        feedState.signatureLastModified = download.signature?.lastModified
        // A feed read from standard input is not one a bare `fetch` can read again.
        // Nor do the remote feed's validators describe these ads any more: without them the next
        // bare fetch downloads that feed whole (a 304 would keep standard input's ads).
        var remembered =
            source.isStandardInput
            ? before.feed.map { FeedSource(url: $0.url, finalUrl: $0.finalUrl, fetchedAt: $0.fetchedAt) } : feedState
        if source.isStandardInput, signed != nil {
            remembered = remembered ?? FeedSource(url: feedText)
            remembered?.validUntil = signed?.validUntil
        }
        // The verified bytes, for a later 304 of the feed or a new signature over them.
        if let verified, download.body != nil { try store.signedFeedFile.writeAtomically(verified.feed) }
        try commit(
            feed, results: results, feedState: remembered, clockOffset: clockOffset, signed: signed,
            sweep: !before.ads.isEmpty)

        queueVASTReports(feed, results: results, before: before)
        if download.body != nil { saveVASTDocuments() }   // after a 304 of the feed no tag was read
        report.vastTransientFailures = feed.vastTransientFailures

        // What was stopped (deadline, signal) waits in partial/ for the next run.
        report.interrupted = options.isCancelled?() == true
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

    /// The feed stage and the verify stage, with the report step after them (on either outcome).
    private func feedStageWithReport(_ before: CacheIndex, _ verified: inout Verification?) throws -> (
        String, FeedLocation, FeedSource?, FeedDownload
    ) {
        var checked: Verification?
        let result = try withReportStep { () throws -> (String, FeedLocation, FeedSource?, FeedDownload) in
            // A remembered `-` (a signed feed read from standard input keeps its validUntil
            // there) is no feed a bare fetch can read again.
            guard let feedText = options.feed ?? before.feed.flatMap({ $0.url == "-" ? nil : $0.url }) else {
                throw AdCacheError.invalidRequest("no FEED given and no earlier successful fetch to repeat")
            }
            let previous = before.feed?.url == feedText ? before.feed : nil
            let source = try FeedLocation(feedText)
            let download = try feedStep(source, previous: previous, before)
            do {
                checked = try verifyStage(download)
            } catch {
                // A refused feed's server is not trusted with the clock either: the queue is
                // judged on the clock as last measured.
                clockOffset = before.clockOffset
                clockSync = before.clockSync
                throw error
            }
            return (feedText, source, previous, download)
        }
        verified = checked
        return result
    }

    /// The URLs of pending ads whose partial file is kept.
    private func jobsPending(_ report: FetchReport) -> [String] {
        report.ads.filter { $0.outcome == .pending }.map(\.url).filter { url in
            guard let hash = try? SHA256Hasher.hex(url) else { return false }
            return store.partial("\(hash).part").exists
        }
    }
}
