#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

// Proof of play through `AdCache`: events, render confirmations, progress, `report` and
// `stats`, what they take and what they return (SPEC §8).

extension AdCache {
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
        var settings = options.transfer.settings
        if let seconds = options.transfer.deadline { settings.deadline = monotonicNow() + seconds }
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
}

/// How `report` delivers the queue.
public struct ReportOptions: Sendable {
    /// What every delivery shares (as `FetchOptions.transfer`).
    public var transfer = TransferOptions()
    /// Override the configuration's bounds for this run: at most this many events queued
    /// (1 to 10000000); nil keeps `ProofOfPlay.maxEvents`.
    public var maxEvents: Int?
    /// Events older than this many days are dropped (1 to 365); nil keeps
    /// `ProofOfPlay.maxEventAge`.
    public var maxEventAge: Int?

    /// The configuration's bounds and the default transfer settings.
    public init() {}

    func validate() throws {
        try transfer.validate()
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

    /// The last `days` local days, or from `since`'s day on when given.
    public init(since: Date? = nil, days: Int = 30) {
        self.since = since
        self.days = days
    }
}

/// What one `report` run did: deliveries (one per tracker URL, one per event in a batch).
public struct ReportResult: Sendable, Equatable {
    /// Delivered in this run: a tracker's final answer 2xx or 3xx, a batch's 2xx (SPEC §8).
    public var delivered = 0
    /// Still queued afterwards (in all, not only this run's).
    public var pending = 0
    /// Dropped in this run for good (a permanent answer).
    public var dropped = 0
    /// Why the last delivery that stays queued failed (for `report -v`), if one did.
    public var lastError: String?

    /// A result with these counts and no error.
    public init(delivered: Int = 0, pending: Int = 0, dropped: Int = 0) {
        self.delivered = delivered
        self.pending = pending
        self.dropped = dropped
    }
}

/// Proof of play (`stats`).
public struct Stats: Sendable {
    /// One ad's counts on one local day.
    public struct Day: Sendable, Equatable {
        /// The local day, `YYYY-MM-DD`.
        public var day: String
        /// The ad's id, as the feed gives it.
        public var id: String
        /// Shows `next` recorded (in render mode, confirmed or not).
        public var shows: Int64
        /// `click` events recorded.
        public var clicks: Int64
        /// `skip` events recorded.
        public var skips: Int64
        /// `complete` events recorded: played to its end.
        public var completes: Int64
        /// A VAST video's playback (`start` counted with its show), and VAST's `notUsed` and
        /// errors (SPEC §4 v3).
        public var starts: Int64 = 0
        /// `firstQuartile` events: a quarter of the video played.
        public var firstQuartiles: Int64 = 0
        /// `midpoint` events: half of the video played.
        public var midpoints: Int64 = 0
        /// `thirdQuartile` events: three quarters of the video played.
        public var thirdQuartiles: Int64 = 0
        /// `notUsed` queued: a VAST ad that went (withdrawn, expired, evicted) never shown.
        public var notUsed: Int64 = 0
        /// VAST `Error` reports queued for the ad (SPEC §10).
        public var errors: Int64 = 0
        /// Impressions queued (SPEC §8 v4): in `choice` mode one a show, in `render` mode one a
        /// confirmed show.
        public var impressions: Int64 = 0
        /// Render-mode shows never confirmed within `render-timeout`: never billed.
        public var unrendered: Int64 = 0
    }

    /// Asset bytes received today (local day, SPEC §12), and the budget the caller sets.
    public var downloadedToday: Int64 = 0
    /// The day's budget in bytes (`max-download-per-day`), as the caller sets it; `stats`
    /// leaves it nil.
    public var downloadBudget: Int64?
    /// The counts per local day and ad, from the first day asked on, by day then id.
    public var days: [Day] = []
    /// Deliveries queued, delivered and dropped over the cache's whole life.
    public var pending: Int64 = 0
    /// Deliveries the servers took, over the cache's life.
    public var delivered: Int64 = 0
    /// Deliveries dropped for a permanent answer (a 4xx other than 408 and 429).
    public var droppedPermanent: Int64 = 0
    /// Deliveries dropped as older than `maxEventAge` days.
    public var droppedAge: Int64 = 0
    /// Deliveries dropped, oldest first, to keep the queue within `maxEvents`.
    public var droppedOverflow: Int64 = 0
    /// The time of the oldest event still queued.
    public var oldestPending: Date?
}
