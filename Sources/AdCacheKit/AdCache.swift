#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// A splash-ad cache: the one type an app (or the `adcache` command line) uses.
///
/// ```swift
/// let cache = AdCache(.init(directory: AdCache.Configuration.defaultDirectory()))
/// _ = try cache.fetch(FetchOptions(feed: "https://ads.example.com/splash.json"))   // from a background job
/// if case .show(let ad) = try cache.next() { showSplash(ad.path, seconds: ad.duration) }
/// ```
///
/// Every call is synchronous, returns a value, and throws only `AdCacheError`. Warnings go to
/// the configuration's `diagnostics`; time comes from its `clock`, so a test (or a preview
/// "as of" some date) uses the same path as production. `next`, `list` and `prune` never
/// touch the network; only `fetch` does.
public final class AdCache {
    /// Where "now" comes from.
    public enum Clock: Sendable {
        /// A device clock, corrected by the offset the last fetch measured against the feed
        /// server's `Date` header when they differed by more than five minutes (SPEC §6).
        /// `bootClock`: the device clock is the system's, so the boot clock tells when it was
        /// stepped since the offset was measured (`ClockSync`); a clock of a test's making
        /// has none.
        case device(@Sendable () -> Date, bootClock: Bool = false)
        /// Exactly this time, taken as given (`--at`: previews and tests).
        case fixed(Date)

        /// The system clock, corrected.
        public static var system: Clock { .device({ Date() }, bootClock: true) }
    }

    public struct Configuration: Sendable {
        /// The cache directory; created by the first fetch.
        public var directory: String
        /// Now. Expiry, schedules and the dates of shows are read from it.
        public var clock: Clock
        /// Where warnings go.
        public var diagnostics: @Sendable (Diagnostic) -> Void
        /// Device id, report URL and the queue's bounds (SPEC §8).
        public var proofOfPlay: ProofOfPlay

        public init(
            directory: String, clock: Clock = .system, proofOfPlay: ProofOfPlay = ProofOfPlay(),
            diagnostics: @escaping @Sendable (Diagnostic) -> Void = { _ in }
        ) {
            self.directory = directory
            self.clock = clock
            self.proofOfPlay = proofOfPlay
            self.diagnostics = diagnostics
        }

        /// `$ADCACHE_DIR`, else `$XDG_CACHE_HOME/adcache`, else `~/.cache/adcache` (SPEC §3).
        public static func defaultDirectory(environment: [String: String] = ProcessInfo.processInfo.environment)
            -> String
        {
            CacheStore.defaultDirectory(environment: environment)
        }
    }

    public let configuration: Configuration
    let store: CacheStore

    public init(_ configuration: Configuration) {
        self.configuration = configuration
        store = CacheStore(directory: configuration.directory, warn: configuration.diagnostics)
        store.ledger = configuration.proofOfPlay.ledgerDirectory.map(Ledger.init)
    }

    var moment: Moment {
        switch configuration.clock {
        case .device(let read, let boot): return .device(read().timeIntervalSince1970, bootClock: boot)
        case .fixed(let date): return .given(date.timeIntervalSince1970)
        }
    }

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

    /// What this launch shows, with the show recorded (unless `options.peek`) before it
    /// returns — and the ad's impression queued in the same step. Never touches the network.
    public func next(_ options: NextOptions = NextOptions()) throws -> NextResult {
        try Selector(store: store, proofOfPlay: configuration.proofOfPlay, warn: configuration.diagnostics)
            .decide(options, at: moment)
    }

    /// Why `next` would choose what it chooses now: every rule of eligibility per ad (or for
    /// ad `id`, `unknownAd` when there is none), and the choice. Records nothing.
    public func why(_ options: NextOptions = NextOptions(), id: String? = nil) throws -> WhyReport {
        try Selector(store: store, proofOfPlay: configuration.proofOfPlay, warn: configuration.diagnostics)
            .why(options, id: id, at: moment)
    }

    /// Records that ad `id` was clicked, skipped or played to its end, and queues that
    /// event's trackers (SPEC §8). Never touches the network. Throws `unknownAd` when the
    /// cache holds no ad with that id.
    public func event(_ event: AdEvent, id: String) throws {
        guard store.exists else { throw AdCacheError.unknownAd("no ad '\(id)' in the cache (it is empty)") }
        let journal = store.journal
        try journal.withLock(timeout: store.lockTimeout) {
            let index = try store.loadLocked(warn: configuration.diagnostics, repair: false).index
            guard let ad = index.ads.first(where: { $0.id == id }) else {
                throw AdCacheError.unknownAd("no ad '\(id)' in the cache")
            }
            let record = configuration.proofOfPlay.record(
                event.rawValue, of: ad, at: moment.resolve(index), reportUrl: index.reportUrl)
            try journal.append(record)
        }
    }

    /// Confirms that the show `token` of ad `id`, which `next` recorded in render mode, began to
    /// render (SPEC §8 *An impression is a render*): queues its impression — for a VAST ad its
    /// `start`/`creativeView` too and, at its first confirmed show, `verificationNotExecuted` —
    /// dated now. Returns false, queuing nothing, when that show was confirmed already. Throws
    /// `unknownAd` (65) for a token that names no show of `id` awaiting confirmation: unknown,
    /// another ad's, or older than `render-timeout`.
    @discardableResult
    public func confirmImpression(id: String, show token: String) throws -> Bool {
        guard store.exists else { throw AdCacheError.unknownAd("no ad '\(id)' in the cache (it is empty)") }
        let journal = store.journal
        let pop = configuration.proofOfPlay
        let warn = configuration.diagnostics
        return try journal.withLock(timeout: store.lockTimeout) {
            let index = try store.loadLocked(warn: warn, repair: false).index
            guard let ad = index.ads.first(where: { $0.id == id }) else {
                throw AdCacheError.unknownAd("no ad '\(id)' in the cache")
            }
            let t = moment.resolve(index)
            // Decided by the fold's own rule, on the real clock (never a preview's `--at`):
            // the queue as the journal would leave it now, and the token awaiting in it.
            let records = try journal.read(warn: { _ in })
            var log = try store.loadEvents(warn: { _ in }, setAside: false)
            let wasRendered = records.contains { $0.event == "impression" && $0.render && $0.nonce == token }
            log.fold(records, bounds: pop.bounds, now: moment.trusted(index))
            if log.confirmed[token] != nil { return false }
            guard let show = log.awaiting[token], show.id == id else {
                let why =
                    wasRendered && !records.contains(where: { $0.nonce == token && $0.id != id })
                    ? "is older than render-timeout (\(Int(pop.renderTimeout)) s); it counts as unrendered"
                    : "is not awaiting its confirmation (unknown, another ad's, or older than render-timeout)"
                throw AdCacheError.unknownAd("show \(token) of ad '\(id)' \(why)")
            }
            // `verificationNotExecuted` at the ad's first confirmed show.
            var first = ad
            let confirmedBefore =
                log.days.values.contains { ($0[id]?.impressions ?? 0) > 0 }
                || records.contains { $0.id == id && $0.event == "rendered" }
            first.shows = confirmedBefore ? max(1, ad.shows) : 0
            var record = pop.record("impression", of: first, at: t, reportUrl: index.reportUrl)
            record.event = "rendered"
            record.show = token
            try journal.append(record)
            return true
        }
    }

    /// A VAST video's position `offset` seconds into its last show (SPEC §10 v4): queues each
    /// of its `progress` trackers whose offset is at most `offset` and that was not queued yet
    /// for that show. Returns how many trackers were queued (0 when none is left).
    @discardableResult
    public func reportProgress(id: String, offset: Double) throws -> Int {
        guard store.exists else { throw AdCacheError.unknownAd("no ad '\(id)' in the cache (it is empty)") }
        guard offset.isFinite, VASTLimits.seconds.contains(offset) else {
            throw AdCacheError.invalidRequest("the offset must be seconds from 0 to 86400")
        }
        let journal = store.journal
        let pop = configuration.proofOfPlay
        return try journal.withLock(timeout: store.lockTimeout) {
            let index = try store.loadLocked(warn: configuration.diagnostics, repair: false).index
            guard let ad = index.ads.first(where: { $0.id == id }) else {
                throw AdCacheError.unknownAd("no ad '\(id)' in the cache")
            }
            // What was queued for its last show: the latest progress since then.
            let lastShow = ad.lastShown ?? -.infinity
            let log = try store.loadEvents(warn: { _ in }, setAside: false)
            var queued: Int64 = -1
            if let mark = log.progress[id], mark.at >= lastShow { queued = mark.upTo }
            for r in try journal.read(warn: { _ in }) where r.id == id && r.event == "progress" && r.at >= lastShow {
                queued = max(queued, r.upTo ?? -1)
            }
            // To the nearest millisecond: 1.001 s is 1001 ms (1000.999… in binary).
            let upTo = Int64((offset * 1000).rounded())
            let keys = ad.tracking.keys.filter { key in
                VASTTrackers.progressOffset(key).map { $0 <= upTo && $0 > queued } ?? false
            }.sorted { (VASTTrackers.progressOffset($0) ?? 0) < (VASTTrackers.progressOffset($1) ?? 0) }
            guard !keys.isEmpty else { return 0 }
            let record = pop.progressRecord(of: ad, keys: keys, upTo: upTo, at: moment.resolve(index))
            try journal.append(record)
            return record.trackers.count
        }
    }

    /// Delivers the queued events now (what `fetch` does first).
    public func report(_ options: ReportOptions = ReportOptions()) throws -> ReportResult {
        try options.validate()
        var settings = options.transfer
        if let seconds = options.deadline { settings.deadline = monotonicNow() + seconds }
        var pop = configuration.proofOfPlay
        if let n = options.maxEvents { pop.maxEvents = n }
        if let d = options.maxEventAge { pop.maxEventAge = d }
        return try reporter(pop).run(settings)
    }

    /// Proof of play: per ad and local day, shows and events; and the queue's figures.
    /// Reads only (the journal's events not folded yet are counted too).
    public func stats(_ options: StatsOptions = StatsOptions()) throws -> Stats {
        let index = try store.load(warn: configuration.diagnostics)
        var log = try store.loadEvents(warn: configuration.diagnostics, setAside: false)
        let t = moment.resolve(index)
        log.fold(
            try store.journal.read(warn: { _ in }), bounds: configuration.proofOfPlay.bounds,
            now: moment.trusted(index))
        let first = options.since.map { Time.localDay($0.timeIntervalSince1970) } ?? Time.localDay(t) - options.days + 1
        var stats = Stats()
        for (day, ads) in log.days.sorted(by: { $0.key < $1.key }) where day >= first {
            for (id, c) in ads.sorted(by: { $0.key < $1.key }) {
                var d = Stats.Day(
                    day: Time.formatDay(day), id: id, shows: c.shows, clicks: c.clicks, skips: c.skips,
                    completes: c.completes)
                (d.starts, d.firstQuartiles, d.midpoints) = (c.starts, c.firstQuartiles, c.midpoints)
                (d.thirdQuartiles, d.notUsed, d.errors) = (c.thirdQuartiles, c.notUsed, c.errors)
                (d.impressions, d.unrendered) = (c.impressions, c.unrendered)
                stats.days.append(d)
            }
        }
        stats.pending = log.pending
        stats.delivered = log.delivered
        stats.droppedPermanent = log.droppedPermanent
        stats.droppedAge = log.droppedAge
        stats.droppedOverflow = log.droppedOverflow
        stats.oldestPending = log.queue.map(\.at).min().map(Date.init(timeIntervalSince1970:))
        stats.downloadedToday = Fetcher.downloadedToday(index, day: Time.localDay(t))
        return stats
    }

    var reporter: Reporter { reporter(configuration.proofOfPlay) }

    /// `now`: the trusted clock, when the caller measured it (a fetch).
    func reporter(_ pop: ProofOfPlay, now: (() -> Double)? = nil) -> Reporter {
        let moment = moment
        return Reporter(
            store: store, proofOfPlay: pop, now: { index in now?() ?? moment.trusted(index) },
            warn: configuration.diagnostics)
    }

    /// Folds the journal into the index and the event queue (no network).
    func fold() throws {
        let moment = moment
        try store.foldJournal(
            bounds: configuration.proofOfPlay.bounds, now: { moment.trusted($0) }, warn: configuration.diagnostics)
    }

    /// Deletes what can no longer be shown, then evicts to `options.maxSize`.
    /// On a full disk, what needs no write goes first and a fold that cannot be written
    /// waits (with a warning): a prune is never a reason to free nothing.
    public func prune(_ options: PruneOptions = PruneOptions()) throws -> PruneReport {
        var postponed = false
        if store.exists, !options.dryRun {
            do {
                try fold()
            } catch AdCacheError.io(let why) {
                configuration.diagnostics(Diagnostic(.report, "the journal was not folded (\(why)); it waits"))
                postponed = true
            }
        }
        let report = try Pruner(
            store: store, warn: configuration.diagnostics, proofOfPlay: configuration.proofOfPlay
        ).run(options, at: moment)
        if postponed, report.bytesFreed > 0 { try? fold() }   // now that there is room
        return report
    }

    /// Checks every recorded file's size and SHA-256; a damaged one is moved aside and its
    /// ad becomes `missing` until the next fetch downloads it again. Never touches the network.
    public func verify() throws -> VerifyReport {
        try store.verify(warn: configuration.diagnostics)
    }

    /// Every ad the cache knows, with its state now.
    public func list() throws -> [ListedAd] {
        try store.listing(at: moment, warn: configuration.diagnostics)
    }

    /// Now as the cache reckons it: the clock, corrected by the offset the last fetch measured
    /// against the feed server (a `fixed` clock as given).
    public func now() -> Date {
        let index = (try? store.load(warn: { _ in })) ?? CacheIndex()
        return Date(timeIntervalSince1970: moment.resolve(index))
    }

    /// Removes every cached ad and file (the directory stays); returns how many files went.
    /// The event queue and the counts stay (billing data), unless `events`.
    public func clear(events: Bool = false) throws -> Int {
        let moment = moment
        let pop = configuration.proofOfPlay
        let warn = configuration.diagnostics
        return try store.clear(events: events) {
            try store.foldJournalLocked(bounds: pop.bounds, now: { moment.trusted($0) }, warn: warn)
        }
    }

    /// This version of adcache.
    public static let version = AdCacheVersion.string

    /// The SHA-256 of `bytes` as a feed's `sha256` names it (64 lowercase hex digits), through
    /// libcrypto; throws `libraryMissing` without it.
    public static func sha256(_ bytes: [UInt8]) throws -> String {
        let h = try SHA256Hasher()
        h.update(bytes)
        return h.finalizeHex()
    }

    /// The default User-Agent: `adcache/<version> libcurl/<version>` (loads libcurl).
    public static var userAgent: String { defaultUserAgent() }

    /// A time as the feed and the command line write it: RFC 3339 with a zone offset, or
    /// integer Unix seconds (milliseconds from 100000000000 up). Nil for anything else.
    public static func parseTime(_ text: String) -> Date? {
        Time.parse(text).map { Date(timeIntervalSince1970: $0) }
    }

    /// RFC 3339 in local time with its offset, whole seconds.
    public static func formatLocalTime(_ date: Date) -> String {
        Time.formatLocal(date.timeIntervalSince1970)
    }

    /// RFC 3339 in UTC, as adcache prints times.
    public static func formatTime(_ date: Date) -> String {
        Time.format(date.timeIntervalSince1970)
    }
}

// MARK: Options

/// How `fetch` runs.
public struct FetchOptions: Sendable {
    /// The feed: an http or https URL, a `file:` URL or a path; `-` for `feedContent`. Nil
    /// repeats the last successful fetch's feed.
    public var feed: String?
    /// The feed's bytes when `feed` is `-` (the command line reads them from standard input;
    /// an ad with a relative asset URL is then skipped with a warning).
    public var feedContent: [UInt8]?
    /// The settings every transfer of the run shares (internal knobs included).
    var transfer = TransferSettings()
    /// Give up on one transfer after this many seconds.
    public var timeout: Double {
        get { transfer.timeout }
        set { transfer.timeout = newValue }
    }
    /// Stop the whole run this many seconds after it starts; what finished is kept.
    public var deadline: Double?
    /// Transfers at once, 1 to 64.
    public var parallel: Int {
        get { transfer.parallel }
        set { transfer.parallel = newValue }
    }
    /// Retries of a transient failure, 0 to 20.
    public var retries: Int {
        get { transfer.retries }
        set { transfer.retries = newValue }
    }
    /// Refuse an asset larger than this many bytes.
    public var maxAssetSize: Int64 = 100 << 20
    /// Refuse a feed larger than this many bytes.
    public var maxFeedSize: Int64 = 8 << 20
    /// Extra `Name: value` headers for the feed request only.
    public var headers: [String] = []
    /// The User-Agent of every request; nil is `AdCache.userAgent`.
    public var userAgent: String? {
        get { transfer.userAgent }
        set { transfer.userAgent = newValue }
    }
    /// Trust the CA certificates in this file instead of the system's.
    public var caFile: String? {
        get { transfer.caFile }
        set { transfer.caFile = newValue }
    }
    /// Every request through this HTTP proxy (`proxy`, as curl's `--proxy`); nil leaves the
    /// environment's `http_proxy`, `https_proxy` and `no_proxy` to apply (SPEC §12).
    public var proxy: String? {
        get { transfer.proxy }
        set { transfer.proxy = newValue }
    }
    /// Hosts, comma-separated, that bypass the proxy (`noproxy`, as curl's `--noproxy`).
    public var noProxy: String? {
        get { transfer.noProxy }
        set { transfer.noProxy = newValue }
    }
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
    /// Polled while the fetch runs: returning true stops it (as SIGINT does in the command
    /// line) — transfers stop, partial files are kept, what finished is committed.
    public var isCancelled: (@Sendable () -> Bool)? {
        get { transfer.isCancelled }
        set { transfer.isCancelled = newValue }
    }

    public init(feed: String? = nil) {
        self.feed = feed
    }

    /// The ranges an app could get wrong; the command line checks them first, with its own
    /// messages.
    func validate() throws {
        try transfer.validate(deadline: deadline)
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
    public static func isDownloadWindow(_ text: String) -> Bool {
        Schedule.window(text) != nil
    }

    /// A `--header` as curl takes it: `Name: value`, a name before the colon, on one line.
    public static func isHeader(_ h: String) -> Bool {
        guard let colon = h.firstIndex(of: ":") else { return false }
        return colon != h.startIndex && !h.contains("\n") && !h.contains("\r")
    }
}

/// What `next` picks from.
public struct NextOptions: Sendable {
    /// Do not record the show.
    public var peek = false
    /// Only ads of this type.
    public var type: AdType?
    /// Only ads for this placement.
    public var placement = FeedAd.defaultPlacement
    /// Show nothing if any ad was shown less than this many seconds ago.
    public var cooldown: Double?
    /// Render mode (SPEC §8 *An impression is a render*): the show is recorded, its
    /// impression queued only when the launcher confirms it (`AdCache.confirm`).
    public var render = false

    public init(
        peek: Bool = false, type: AdType? = nil, placement: String = "splash", cooldown: Double? = nil,
        render: Bool = false
    ) {
        self.peek = peek
        self.type = type
        self.placement = placement
        self.cooldown = cooldown
        self.render = render
    }
}

/// How `report` delivers the queue.
public struct ReportOptions: Sendable {
    var transfer = TransferSettings()
    /// The connect time, and the longest stretch without a byte, per delivery.
    public var timeout: Double {
        get { transfer.timeout }
        set { transfer.timeout = newValue }
    }
    /// Stop the run this many seconds after it starts; what is undelivered stays queued.
    public var deadline: Double?
    public var parallel: Int {
        get { transfer.parallel }
        set { transfer.parallel = newValue }
    }
    public var retries: Int {
        get { transfer.retries }
        set { transfer.retries = newValue }
    }
    public var caFile: String? {
        get { transfer.caFile }
        set { transfer.caFile = newValue }
    }
    public var userAgent: String? {
        get { transfer.userAgent }
        set { transfer.userAgent = newValue }
    }
    /// As `FetchOptions.proxy` and `noProxy`.
    public var proxy: String? {
        get { transfer.proxy }
        set { transfer.proxy = newValue }
    }
    public var noProxy: String? {
        get { transfer.noProxy }
        set { transfer.noProxy = newValue }
    }
    /// Override the configuration's bounds for this run.
    public var maxEvents: Int?
    public var maxEventAge: Int?
    /// Polled while deliveries run: true stops them (what finished is recorded).
    public var isCancelled: (@Sendable () -> Bool)? {
        get { transfer.isCancelled }
        set { transfer.isCancelled = newValue }
    }

    public init() {}

    func validate() throws {
        try transfer.validate(deadline: deadline)
        func check(_ ok: Bool, _ what: String) throws {
            if !ok { throw AdCacheError.invalidRequest(what) }
        }
        try check(maxEvents.map(OptionRanges.maxEvents.contains) ?? true, "max-events must be 1 to 10000000")
        try check(maxEventAge.map(OptionRanges.maxEventAge.contains) ?? true, "max-event-age must be 1 to 365 days")
    }
}

/// What `stats` covers.
public struct StatsOptions: Sendable {
    /// From this time's local day on (wins over `days`).
    public var since: Date?
    /// The last this many local days, today included (1 to 90).
    public var days = 30

    public init(since: Date? = nil, days: Int = 30) {
        self.since = since
        self.days = days
    }
}

/// The ranges of the options, written once: the library checks them (`validate`) and the
/// command line declares its options with them (its own messages, checked first).
public enum OptionRanges {
    /// Seconds: `--timeout`.
    public static let timeout: ClosedRange<Double> = 0.001...86400
    /// Seconds: `--deadline`.
    public static let deadline: ClosedRange<Double> = 0.001...31_536_000
    public static let parallel: ClosedRange<Int> = 1...64
    public static let retries: ClosedRange<Int> = 0...20
    /// Seconds: `--jitter`.
    public static let jitter: ClosedRange<Double> = 0...86400
    public static let maxEvents: ClosedRange<Int> = 1...10_000_000
    /// Days: `--max-event-age`.
    public static let maxEventAge: ClosedRange<Int> = 1...365
}

extension TransferSettings {
    /// The ranges an app could get wrong (fetch and report alike); the command line checks
    /// them first, with its own messages.
    func validate(deadline: Double?) throws {
        func check(_ ok: Bool, _ what: String) throws {
            if !ok { throw AdCacheError.invalidRequest(what) }
        }
        let r = OptionRanges.self
        try check(r.timeout.contains(timeout), "the timeout must be 0.001 to 86400 seconds")
        try check(deadline.map(r.deadline.contains) ?? true, "the deadline must be 0.001 to 31536000 seconds")
        try check(r.parallel.contains(parallel), "parallel transfers must be 1 to 64")
        try check(r.retries.contains(retries), "retries must be 0 to 20")
    }
}

/// What `prune` may remove.
public struct PruneOptions: Sendable {
    /// Then evict ready ads until `assets/` holds at most this many bytes.
    public var maxSize: Int64?
    /// Say what would be removed; remove nothing.
    public var dryRun = false

    public init(maxSize: Int64? = nil, dryRun: Bool = false) {
        self.maxSize = maxSize
        self.dryRun = dryRun
    }
}

// MARK: Results

/// What `next` decided.
public enum NextResult: Sendable {
    /// Show this ad (the show is recorded unless peeking).
    case show(ShownAd)
    /// No ad is eligible: show a default splash, if any.
    case nothingEligible
    /// An ad was shown less than `cooldown` ago: show nothing at all.
    case coolingDown
}

/// The ad a launch shows.
public struct ShownAd: Sendable {
    public var id: String
    /// The asset's absolute path.
    public var path: String
    public var type: AdType?
    public var placement: String
    /// Countdown seconds, 3 to 5; a VAST video's length.
    public var duration: Int
    /// When a VAST ad may be skipped, in seconds from its start (SPEC §10); nil when never
    /// (or not a VAST ad).
    public var skipOffset: Double?
    /// True when the show already queued the video's `start` (a VAST video, SPEC §10): the
    /// player reports only what follows.
    public var startQueued = false
    public var clickUrl: String?
    /// Shows left after this one (as it stands when peeking); nil is unlimited.
    public var remainingShows: Int64?
    public var expires: Date?
    public var priority: Int64
    /// The feed's `meta`, untouched.
    public var meta: JSONValue?
    /// The recorded show's token (nil when peeking, or when the show was not recorded): what
    /// confirms a render-mode show (`AdCache.confirmImpression`).
    public var show: String?
    /// A VAST video's `progress` offsets, in seconds, in order: where the player reports its
    /// position (`AdCache.reportProgress`).
    public var progress: [Double] = []
}

/// One ad as `list` shows it.
public struct ListedAd: Sendable {
    public var id: String
    public var url: String
    public var type: AdType?
    public var placement: String
    public var state: AdState
    /// Shows so far.
    public var shows: Int64
    /// Nil is unlimited.
    public var maxShows: Int64?
    public var priority: Int64
    public var start: Date?
    public var expires: Date?
    public var lastShown: Date?
    /// Nil until downloaded.
    public var bytes: Int64?
    /// The asset's absolute path; nil until downloaded.
    public var path: String?
    /// Why the last fetch failed for this ad; also set while an older file still serves
    /// (state `ready`).
    public var error: String?
    /// For a `resting` ad: when it can next be shown, if within a week.
    public var restingUntil: Date?
}

/// Where a fetch is: asset transfers done of all, bytes received, seconds since it began.
public struct FetchProgress: Sendable {
    /// Bytes of the assets done so far, resumed bytes included.
    public var bytes: Int64
    /// Bytes in all, once every transfer has started and announced its size.
    public var totalBytes: Int64?
    /// Transfers finished, of `total`.
    public var done: Int
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

    public struct Ad: Sendable {
        public var id: String
        public var url: String
        public var outcome: Outcome
        public var bytes: Int64?
        public var error: String?
        /// For a failure: worth trying again at the next run (network, timeouts, 408, 429,
        /// 5xx, a short body); false for a failure for good (4xx, invalid content, too large,
        /// a wrong sha256, a refused redirect).
        public var transient = false
        /// For a new version pending or failed: the ad still shows the file it had.
        public var olderFileServes = false
        /// Pending because of the download window or the day's budget (SPEC §12): not a
        /// failure, the run may exit 0.
        public var deferred = false
    }

    /// Assets deferred by the download window or budget, and when the window opens again.
    public var deferred: Int { ads.filter(\.deferred).count }
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
    public var ads: [Ad] = []
    /// The feed's warnings (also sent to the diagnostics).
    public var warnings: [String] = []
    /// Wrapped VAST documents that could not be fetched for now (their ads wait).
    public var vastTransientFailures = 0
    /// The feed server asked for no requests before this time (SPEC §12): none was made.
    public var toldToWaitUntil: Date?

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

/// What one `report` run did: deliveries (one per tracker URL, one per event in a batch).
public struct ReportResult: Sendable, Equatable {
    public var delivered = 0
    /// Still queued afterwards (in all, not only this run's).
    public var pending = 0
    /// Dropped in this run for good (a permanent answer).
    public var dropped = 0
    /// Why the last delivery that stays queued failed (for `report -v`), if one did.
    public var lastError: String?

    public init(delivered: Int = 0, pending: Int = 0, dropped: Int = 0) {
        self.delivered = delivered
        self.pending = pending
        self.dropped = dropped
    }
}

/// Proof of play (`stats`).
public struct Stats: Sendable {
    public struct Day: Sendable, Equatable {
        /// The local day, `YYYY-MM-DD`.
        public var day: String
        public var id: String
        public var shows: Int64
        public var clicks: Int64
        public var skips: Int64
        public var completes: Int64
        /// A VAST video's playback (`start` counted with its show), and VAST's `notUsed` and
        /// errors (SPEC §4 v3).
        public var starts: Int64 = 0
        public var firstQuartiles: Int64 = 0
        public var midpoints: Int64 = 0
        public var thirdQuartiles: Int64 = 0
        public var notUsed: Int64 = 0
        public var errors: Int64 = 0
        /// Impressions queued (SPEC §8 v4): in `choice` mode one a show, in `render` mode one a
        /// confirmed show.
        public var impressions: Int64 = 0
        /// Render-mode shows never confirmed within `render-timeout`: never billed.
        public var unrendered: Int64 = 0
    }

    /// Asset bytes received today (local day, SPEC §12), and the budget the caller sets.
    public var downloadedToday: Int64 = 0
    public var downloadBudget: Int64?
    public var days: [Day] = []
    /// Deliveries queued, delivered and dropped over the cache's whole life.
    public var pending: Int64 = 0
    public var delivered: Int64 = 0
    public var droppedPermanent: Int64 = 0
    public var droppedAge: Int64 = 0
    public var droppedOverflow: Int64 = 0
    /// The time of the oldest event still queued.
    public var oldestPending: Date?
}

/// What `prune` removed.
public struct PruneReport: Sendable {
    public struct Removed: Sendable {
        /// The ad's id; nil for a file no ad names (an orphan or a stale partial download).
        public var id: String?
        /// expired, exhausted, withdrawn, evicted, orphan, partial, temporary.
        public var reason: String
        public var file: String?
        public var bytes: Int64
        /// The file its record named, kept for the grace (SPEC §6: a launch may have printed
        /// it in the last 10 minutes); a later `prune` deletes it.
        public var heldFile: String?

        init(id: String?, reason: String, file: String?, bytes: Int64, heldFile: String? = nil) {
            self.id = id
            self.reason = reason
            self.file = file
            self.bytes = bytes
            self.heldFile = heldFile
        }
    }

    public var removed: [Removed] = []
    public var bytesFreed: Int64 = 0
    public var dryRun: Bool
    /// Bytes in `assets/` afterwards.
    public var bytesKept: Int64 = 0
}
