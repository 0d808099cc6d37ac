#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

// `AdCache.fetch`, what it takes and what it returns (the async form: AdCache+Async.swift).

extension AdCache {
    /// Downloads the feed, then every unexpired ad's asset, then commits the index. The
    /// report says what became of each ad; `isComplete` is false when some asset failed or
    /// is still pending (the rest is committed). Throws when the feed cannot be fetched or
    /// read (the cache is then unchanged), when another fetch runs, or when the disk fails.
    public func fetch(_ options: FetchOptions = FetchOptions(), progress: ((FetchProgress) -> Void)? = nil) throws
        -> FetchReport
    {
        try options.validate()
        let warn = configuration.diagnostics
        let reportStep: (TransferSettings, @escaping () -> Double) -> Void = { settings, now in
            // A failed report step is a warning; it never changes the fetch (SPEC §4). The
            // queue is judged on the clock this run measured (SPEC §6, §8).
            do {
                if options.report {
                    _ = try self.reporter(self.configuration.proofOfPlay, now: now).run(settings)
                } else {
                    try self.store.foldJournal(
                        bounds: self.configuration.proofOfPlay.bounds, now: { _ in now() }, warn: warn)
                }
            } catch let e as AdCacheError {
                warn(Diagnostic(.report, "events not reported: \(e.message)"))
            } catch {
                warn(Diagnostic(.report, "events not reported: \(error)"))
            }
        }
        return try Fetcher(
            store: store, options: options, warn: warn, clock: configuration.clock,
            proofOfPlay: configuration.proofOfPlay, onProgress: progress, reportStep: reportStep
        ).run()
    }
}

/// How `fetch` runs.
public struct FetchOptions: Sendable {
    /// The feed: an http or https URL, a `file:` URL or a path; `-` for `feedContent`. Nil
    /// repeats the last successful fetch's feed.
    public var feed: String?
    /// The feed's bytes when `feed` is `-` (the command line reads them from standard input;
    /// an ad with a relative asset URL is then skipped with a warning).
    public var feedContent: [UInt8]?
    /// What every transfer of the run shares: timeouts, parallel transfers, retries, the
    /// User-Agent, the CA file, the proxy, the deadline, cancellation (as `ReportOptions`).
    public var transfer = TransferOptions()
    /// The settings the engine runs with (`transfer`'s, internal knobs included).
    var settings: TransferSettings {
        get { transfer.settings }
        set { transfer.settings = newValue }
    }
    /// Refuse an asset larger than this many bytes.
    public var maxAssetSize: Int64 = 100 << 20
    /// Refuse a feed larger than this many bytes.
    public var maxFeedSize: Int64 = 8 << 20
    /// Extra `Name: value` headers for the feed request only.
    public var headers: [String] = []
    /// Sleep a random 0 to `jitter` seconds first (for fleets of devices).
    public var jitter: Double = 0
    /// At most this many bytes per second in all (shared by the parallel transfers).
    public var limitRate: Int64?
    /// Ask for the feed and every asset even while their last answers are fresh (RFC 9111).
    public var revalidate = false
    /// Say the feed's warnings on every run, not only when its content changed.
    public var warnAlways = false
    /// Deliver the queued events before the feed (SPEC §4: `--no-report` skips that).
    public var report = true
    /// `download-hours` (SPEC §12): asset requests only inside these local windows (the feed
    /// is always read and committed); nil is any time.
    public var downloadHours: [String]?
    /// `--now`: download regardless of `downloadHours`.
    public var ignoreDownloadHours = false
    /// `max-download-per-day`: asset bytes received per local day, at most.
    public var maxDownloadPerDay: Int64?
    /// VAST feeds (SPEC §10): the screen, bitrate and media types the media file is chosen
    /// for, and `[LIMITADTRACKING]`.
    public var vast = VASTOptions()
    /// Signed feeds (SPEC §11): with a key, only a feed one of them signed is accepted.
    public var feedKeys: [FeedKey] = []
    /// The feed's signature from this `.minisig` file instead of where it would be fetched
    /// (`FEED.minisig`, the feed URL's): needed for a feed read from standard input.
    public var signatureFile: String?

    /// Fetch `feed` (nil: the last successful fetch's), every other setting at its default.
    public init(feed: String? = nil) {
        self.feed = feed
    }

    /// The ranges an app could get wrong; the command line checks them first, with its own
    /// messages.
    func validate() throws {
        try transfer.validate()
        func check(_ ok: Bool, _ what: String) throws {
            if !ok { throw AdCacheError.invalidRequest(what) }
        }
        try check(maxAssetSize >= 0 && maxFeedSize >= 0, "size limits cannot be negative")
        try check(OptionRanges.jitter.contains(jitter), "the jitter must be 0 to 86400 seconds")
        if let hours = downloadHours {
            try check(
                !hours.isEmpty && hours.allSatisfy(Self.isDownloadWindow),
                "download-hours needs HH:MM-HH:MM windows whose start is not their end")
        }
        try check(maxDownloadPerDay.map { $0 >= 0 } ?? true, "max-download-per-day cannot be negative")
        try check(limitRate.map { $0 > 0 } ?? true, "the rate limit must be at least 1 byte per second")
        for h in headers where !Self.isHeader(h) {
            throw AdCacheError.invalidRequest("a header must be 'Name: value' (got '\(h)')")
        }
        try check(
            signatureFile == nil || !feedKeys.isEmpty,
            "a signature was given but no feed key is configured to check it (feed-key, feed-keys-dir)")
        try check(
            feed != "-" || feedKeys.isEmpty || signatureFile != nil,
            "a feed from standard input needs its signature (--signature FILE): a feed key is configured")
    }
}

extension FetchOptions {
    /// A `download-hours` window: `HH:MM-HH:MM` (as an ad's `hours`) whose start is not its end.
    package static func isDownloadWindow(_ text: String) -> Bool {
        Schedule.window(text) != nil
    }

    /// A `--header` as curl takes it: `Name: value`, a name before the colon, on one line.
    package static func isHeader(_ h: String) -> Bool {
        guard let colon = h.firstIndex(of: ":") else { return false }
        return colon != h.startIndex && !h.contains("\n") && !h.contains("\r")
    }
}

/// Where a fetch is: asset transfers done of all, bytes received, seconds since it began.
public struct FetchProgress: Sendable {
    /// Bytes of the assets done so far, resumed bytes included.
    public var bytes: Int64
    /// Bytes in all, once every transfer has started and announced its size.
    public var totalBytes: Int64?
    /// Transfers finished, of `total`.
    public var done: Int
    /// Asset transfers in all, this run's (assets already cached need none).
    public var total: Int
    /// Seconds since the transfers began.
    public var elapsed: Double
    /// Bytes per second received in this run (resumed bytes not included).
    public var rate: Double
    /// The asset that just finished (its URL and size), once per asset.
    public var finished: (url: String, bytes: Int64)?
}

/// What `fetch` did, for the summary line and `fetch --json`.
public struct FetchReport: Sendable {
    /// What became of one ad's asset in this run.
    public enum Outcome: String, Sendable {
        /// Downloaded now, from the start.
        case downloaded
        /// Continued from a partial download of an earlier run.
        case resumed
        /// Already cached and still current (304, matching sha256, or an unchanged file).
        case unchanged
        /// Could not be downloaded or failed validation; `error` says why.
        case failed
        /// Not downloaded before the deadline; its partial file is kept for the next run.
        case pending
        /// Already expired: not downloaded.
        case expired
        /// All its shows used: not downloaded.
        case exhausted
    }

    /// One ad of the feed and what became of its asset.
    public struct Ad: Sendable {
        /// The ad's id, as the feed gives it.
        public var id: String
        /// The asset's absolute URL.
        public var url: String
        /// What became of the asset.
        public var outcome: Outcome
        /// The asset file's size in bytes, when the run has one (downloaded, resumed,
        /// unchanged); nil otherwise.
        public var bytes: Int64?
        /// Why it failed or is pending, one line for a person; nil otherwise. A program
        /// branches on `failure`, not on this.
        public var error: String?
        /// For a failure: worth trying again at the next run (network, timeouts, 408, 429,
        /// 5xx, a short body); false for a failure for good (4xx, invalid content, too large,
        /// a wrong sha256, a refused redirect).
        public var transient = false
        /// For a failure: the same value as the errors' (SPEC §1 v4) — the HTTP status, the
        /// kind, whether it is transient, the VAST error code of a VAST ad's media file.
        public var failure: AdCacheError.Failure?
        /// For a new version pending or failed: the ad still shows the file it had.
        public var olderFileServes = false
        /// Pending because of the download window or the day's budget (SPEC §12): not a
        /// failure, the run may exit 0.
        public var deferred = false
    }

    /// Assets deferred by the download window or budget, and when the window opens again.
    public var deferred: Int { ads.filter(\.deferred).count }
    /// When the download window opens again, while assets are deferred; nil otherwise (no
    /// window, or only the budget defers them).
    public var deferredUntil: Date?

    /// How the run ended, for the exit code (SPEC §5).
    public enum Status: Sendable {
        /// Every ad is ready, expired or used up.
        case complete
        /// Some asset failed for good (and none transiently): fixing the feed or the server
        /// is needed, retrying is not.
        case failedForGood
        /// Some asset failed transiently or is pending: a later run should finish the job.
        case tryLater
    }

    /// As given, or the remembered feed.
    public var feed: String
    /// `downloaded`, or `unchanged` when the server answered 304.
    public var feedStatus: String
    /// One entry per ad of the accepted feed, in the feed's order.
    public var ads: [Ad] = []
    /// The feed's warnings (also sent to the diagnostics).
    public var warnings: [String] = []
    /// Wrapped VAST documents that could not be fetched for now (their ads wait).
    public var vastTransientFailures = 0
    /// The feed server asked for no requests before this time (SPEC §12): none was made.
    public var toldToWaitUntil: Date?

    /// How the run ended: try later (a transient failure, an asset pending past the deadline,
    /// a wrapped VAST document not fetched, told to wait), else failed for good, else complete.
    public var status: Status {
        if vastTransientFailures > 0 || toldToWaitUntil != nil
            || ads.contains(where: {
                ($0.outcome == .pending && !$0.deferred) || ($0.outcome == .failed && $0.transient)
            })
        {
            return .tryLater
        }
        if ads.contains(where: { $0.outcome == .failed }) { return .failedForGood }
        return .complete
    }

    /// True when every ad is ready, expired or used up.
    public var isComplete: Bool { status == .complete }

    /// The exit code the command line ends with (SPEC §5): 0 complete, 65 an asset failed
    /// for good, 75 something to try again later (told to wait included), 130 cancelled.
    public var exitCode: Int32 {
        if interrupted { return 130 }
        switch status {
        case .complete: return 0
        case .failedForGood: return 65
        case .tryLater: return 75
        }
    }

    /// Why a run that did not complete did not, in one line (nil when it completed).
    public var problem: String? {
        if interrupted { return "interrupted: \(partialsKept) download\(partialsKept == 1 ? "" : "s") kept" }
        if let until = toldToWaitUntil {
            return "the feed server asked for no requests before \(Time.format(until.timeIntervalSince1970))"
        }
        if let ad = ads.first(where: { $0.outcome == .failed }) {
            return "ad '\(ad.id)' failed: \(ad.error ?? "unknown error")"
        }
        if deadlinePassed { return "the deadline passed: \(partialsKept) download(s) kept for the next run" }
        if vastTransientFailures > 0 { return "\(vastTransientFailures) VAST document(s) could not be fetched for now" }
        if let ad = ads.first(where: { $0.outcome == .pending && !$0.deferred }) {
            return "ad '\(ad.id)' still pending"
        }
        return nil
    }

    /// Stopped by `isCancelled` (what finished is committed).
    public var interrupted = false
    /// The deadline passed (what finished is committed).
    public var deadlinePassed = false
    /// Downloads left in `partial/` for the next run to resume.
    public var partialsKept = 0

    /// How many ads had outcome `o`.
    public func count(_ o: FetchReport.Outcome) -> Int { ads.filter { $0.outcome == o }.count }
}
