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

/// What `status` is asked about (SPEC §13).
public struct StatusOptions: Sendable {
    /// `stale-after`: seconds without a successful fetch before `stale` (1 to 31536000).
    public var staleAfter: Double = 86400
    /// The download window and the day's budget as `fetch` is configured (SPEC §12), shown
    /// when set.
    public var downloadHours: [String]?
    /// The day's budget in bytes, as `FetchOptions.maxDownloadPerDay`; nil is none.
    public var maxDownloadPerDay: Int64?

    /// `stale` after a day; no download window or budget.
    public init() {}

    func validate() throws {
        guard staleAfter >= 1, staleAfter <= 31_536_000 else {
            throw AdCacheError.invalidRequest("stale-after must be from 1 to 31536000 seconds")
        }
    }
}

/// Is this device all right (SPEC §13): what `status` prints, and its problems.
public struct Status: Sendable {
    /// One thing wrong with the device, by name.
    public struct Problem: Sendable, Equatable {
        /// A fixed name: `never-fetched`, `stale`, `failing`, `nothing-ready`,
        /// `signature-expiring`, `signature-expired`, `queue-stuck`, `events-dropped`,
        /// `clock-offset`, `disk-low`.
        public var name: String
        /// What was found, one line for a person (for `failing`, the run's exit code).
        public var detail: String
    }

    /// A fetch run, as `fetch.last` keeps it (SPEC §3).
    public struct Run: Sendable {
        /// When it ended, on the clock it trusted.
        public var at: Date
        /// Its exit code (SPEC §5): 0 when it succeeded.
        public var exit: Int32
        /// The one-line error of a run that did not exit 0.
        public var error: String?
        /// The feed it asked for.
        public var feed: String
    }

    /// A signed feed as last accepted (SPEC §11).
    public struct Signed: Sendable {
        /// The id of the key that signed it.
        public var keyId: String
        /// The feed's `serial`: a later feed with a lower one is refused (a rollback).
        public var serial: Int64
        /// The feed's `validUntil`: `status` warns a day before it (`signature-expiring`).
        public var validUntil: Date
    }

    /// The cache directory, as configured.
    public var cacheDirectory: String
    /// How many ads are in each state (states with none left out), in `AdState`'s order.
    public var ads: [(state: AdState, count: Int)] = []
    /// The last fetch run that got as far as the cache; nil when none is recorded.
    public var lastFetch: Run?
    /// The last run that exited 0: when it ended, and its feed; nil when none is known.
    public var lastSuccess: (at: Date, feed: String)?
    /// The feed server's `Retry-After`, while it lasts: no request before this time (SPEC §12).
    public var retryAfter: Date?
    /// The download window as configured, and whether it is open now.
    public var downloadHours: [String]?
    /// The window is open now; nil when no window is configured.
    public var windowOpen: Bool?
    /// The day's budget and the asset bytes received today (local day).
    public var maxDownloadPerDay: Int64?
    /// Asset bytes received today (local day, SPEC §12).
    public var downloadedToday: Int64 = 0
    /// The signed feed last accepted; nil when the feed is not signed.
    public var signed: Signed?
    /// The trusted time minus the device clock, in seconds, when an offset is recorded.
    public var clockOffset: Double?
    /// Deliveries still queued (SPEC §8).
    public var queuePending: Int64 = 0
    /// The time of the oldest event still queued; nil when none is.
    public var oldestPending: Date?
    /// Deliveries dropped in the last 24 hours (`events-dropped`).
    public var droppedLastDay: Int64 = 0
    /// Deliveries dropped over the cache's life (as `stats`), shows and impressions likewise.
    public var droppedTotal: Int64 = 0
    /// Shows recorded over the cache's life.
    public var showsTotal: Int64 = 0
    /// Impressions queued over the cache's life (in render mode, confirmed shows).
    public var impressionsTotal: Int64 = 0
    /// The last recorded show: when, and the ad's id; nil when none is.
    public var lastShow: (at: Date, id: String)?
    /// Bytes of the files in `assets/`, files no record names included.
    public var assetsBytes: Int64 = 0
    /// The free space of the file system that holds `assets/` (nil when it cannot be read).
    public var freeBytes: Int64?
    /// What is wrong, one entry per problem; empty when all is well.
    public var problems: [Problem] = []

    /// No problem.
    public var isHealthy: Bool { problems.isEmpty }

    /// How long before `validUntil` a signed feed is `signature-expiring`.
    static let signatureWarning: Double = 86400
    /// How old the oldest pending delivery is before `queue-stuck`.
    static let queueStuckAfter: Double = 86400
    /// An offset larger than this is `clock-offset` (the one that is applied, SPEC §6).
    static let clockOffsetLimit: Double = 300
    /// Under this share of the file system free is `disk-low` (as `prune`'s, SPEC §6).
    static let diskLowShare = 0.05
}

extension AdCache {
    /// Is this device all right (SPEC §13)? Read-only: writes nothing, takes no lock, never
    /// touches the network. A cache directory that does not exist is `never-fetched`.
    public func status(_ options: StatusOptions = StatusOptions()) throws -> Status {
        try options.validate()
        var status = Status(cacheDirectory: store.directory)
        status.downloadHours = options.downloadHours
        status.maxDownloadPerDay = options.maxDownloadPerDay
        let quiet: WarningSink = { _ in }
        // The selection read (what `next` reads, from the digest when it is current): the
        // states, the last show and the top-level fields are all in it.
        let index =
            store.exists ? try store.load(warn: configuration.diagnostics, forSelection: true).index : CacheIndex()
        let t = moment.resolve(index)
        let trusted = moment.trusted(index)
        let local = Time.local(t)

        // The files of assets/, read once: their bytes, and which records' files are present.
        // The files of assets/ by name, one listing (a `stat` of 10,000 files costs more than a
        // launch: a fleet polls `status`): a record's file is present when its name is there —
        // a file of another size is `list`'s and `verify`'s to find. Their bytes are the
        // records'; only a file no record names (an orphan) is sized by its own `stat`.
        var names = Set<String>(minimumCapacity: index.ads.count)
        if store.exists { for name in store.dir.list(.assets) where AssetName.isValid(name) { names.insert(name) } }
        // Each name found is taken out of `names` (one hash a record): what remains is named by
        // no record. A file two ads share is found by the second in `taken`, made only once a
        // name is not found (rare: a file missing, or shared).
        var present = [Bool](repeating: false, count: index.ads.count)
        var taken: Set<String>?
        for i in index.ads.indices {
            guard let file = index.ads[i].file, index.ads[i].bytes != nil else { continue }
            if names.remove(file) != nil {
                present[i] = true
                status.assetsBytes.add(index.ads[i].bytes ?? 0)
                taken?.insert(file)
                continue
            }
            if taken == nil {
                taken = Set(index.ads.indices.prefix(i).filter { present[$0] }.compactMap { index.ads[$0].file })
            }
            present[i] = taken?.contains(file) == true
        }
        for orphan in names { status.assetsBytes.add(store.asset(orphan).size ?? 0) }

        // The ads by state.
        let frozen = index.frozen(at: t)
        var counts: [AdState: Int] = [:]
        for i in index.ads.indices {
            counts[index.ads[i].state(at: t, local: local, filePresent: present[i], frozen: frozen), default: 0] += 1
        }
        status.ads = AdState.allCases.compactMap { s in counts[s].map { (s, $0) } }

        // The runs.
        let record = store.exists ? store.loadFetchRecord() : nil
        if let r = record {
            status.lastFetch = Status.Run(
                at: Date(timeIntervalSince1970: r.at), exit: r.exit, error: r.error, feed: r.feed)
        }
        if let s = record?.lastSuccess {
            status.lastSuccess = (Date(timeIntervalSince1970: s.at), s.feed)
        } else if record == nil, let feed = index.feed, let at = feed.fetchedAt {
            // A cache an older adcache fetched: its last commit is the last success known.
            status.lastSuccess = (Date(timeIntervalSince1970: at), feed.url)
        }
        if let wait = index.retryAfter, wait.until > trusted {
            status.retryAfter = Date(timeIntervalSince1970: wait.until)
        }
        if let hours = options.downloadHours, let windows = Schedule.windows(hours) {
            var schedule = Schedule()
            schedule.windows = windows
            status.windowOpen = schedule.allows(local)
        }
        status.downloadedToday = Fetcher.downloadedToday(index, day: local.day)
        if let s = index.signed {
            status.signed = Status.Signed(
                keyId: s.keyId, serial: s.serial, validUntil: Date(timeIntervalSince1970: s.validUntil))
        }
        status.clockOffset = index.clockOffset

        // The queue, with the journal's records not folded yet (as `stats`).
        if store.exists {
            var log = try store.loadEvents(warn: configuration.diagnostics, setAside: false)
            log.fold(try store.journal.read(warn: quiet), bounds: configuration.proofOfPlay.bounds, now: trusted)
            status.queuePending = log.pending
            status.oldestPending = log.queue.map(\.at).min().map(Date.init(timeIntervalSince1970:))
            status.droppedLastDay = log.droppedInDay(before: trusted)
            status.droppedTotal = log.droppedPermanent.adding(log.droppedAge).adding(log.droppedOverflow)
            status.showsTotal = log.showsTotal
            status.impressionsTotal = log.impressionsTotal
        }
        if let at = index.lastShown {
            let id = index.ads.filter { $0.lastShown == at }.max { ($0.lastShowSeq ?? 0) < ($1.lastShowSeq ?? 0) }?.id
            if let id { status.lastShow = (Date(timeIntervalSince1970: at), id) }
        }

        // The disk.
        var free: (bytes: Int64, share: Double)?
        if store.exists {
            var fs = statvfs()
            if statvfs(store.directory, &fs) == 0, fs.f_blocks > 0 {
                let bytes = Int64(clamping: UInt64(fs.f_bavail).multipliedReportingOverflow(by: UInt64(fs.f_frsize)).0)
                free = (bytes, Double(fs.f_bavail) / Double(fs.f_blocks))
                status.freeBytes = bytes
            }
        }
        status.problems = Self.problems(status, index: index, now: trusted, options: options, freeShare: free?.share)
        return status
    }

    /// The problems SPEC §13 names, in its order.
    static func problems(
        _ s: Status, index: CacheIndex, now t: Double, options: StatusOptions, freeShare: Double?
    ) -> [Status.Problem] {
        var problems: [Status.Problem] = []
        func add(_ name: String, _ detail: String) { problems.append(.init(name: name, detail: detail)) }
        func ago(_ date: Date) -> String { Format.duration(max(0, t - date.timeIntervalSince1970)) + " ago" }
        if s.lastSuccess == nil {
            add("never-fetched", "no fetch has succeeded in \(s.cacheDirectory)")
        } else if let last = s.lastSuccess, t - last.at.timeIntervalSince1970 > options.staleAfter {
            add(
                "stale",
                "the last successful fetch was \(ago(last.at)) (\(Time.format(last.at.timeIntervalSince1970))); stale after \(Format.duration(options.staleAfter))"
            )
        }
        if let run = s.lastFetch, run.exit != 0 {
            add("failing", "the last fetch (\(ago(run.at))) exited \(run.exit): \(run.error ?? "no error recorded")")
        }
        if !s.ads.contains(where: { $0.state == .ready }) {
            add("nothing-ready", index.ads.isEmpty ? "the cache holds no ad" : "no ad of \(index.ads.count) is ready")
        }
        if let signed = s.signed {
            let left = signed.validUntil.timeIntervalSince1970 - t
            if left <= 0 {
                add(
                    "signature-expired",
                    "the signed feed's validUntil \(Time.format(signed.validUntil.timeIntervalSince1970)) has passed: no ad is shown"
                )
            } else if left <= Status.signatureWarning {
                add(
                    "signature-expiring",
                    "the signed feed's validUntil is in \(Format.duration(left)) (\(Time.format(signed.validUntil.timeIntervalSince1970)))"
                )
            }
        }
        if let oldest = s.oldestPending, t - oldest.timeIntervalSince1970 > Status.queueStuckAfter {
            add("queue-stuck", "\(s.queuePending) deliveries pending, the oldest from \(ago(oldest))")
        }
        if s.droppedLastDay > 0 {
            add("events-dropped", "\(s.droppedLastDay) deliveries dropped in the last 24 hours")
        }
        if let offset = s.clockOffset, abs(offset) > Status.clockOffsetLimit {
            add(
                "clock-offset",
                "the device clock is \(Format.duration(abs(offset))) \(offset > 0 ? "behind" : "ahead of") the feed server's"
            )
        }
        if let share = freeShare, share < Status.diskLowShare {
            add(
                "disk-low",
                "\(Int(share * 1000) / 10)% of the file system is free (\(ByteSize.human(s.freeBytes ?? 0)))")
        }
        return problems
    }
}
