/// The state an index record stores (`AdRecord.state`). `list` derives the states a person sees
/// (`AdState`: scheduled, expired, exhausted, missing…) from it, the clock and the file.
enum RecordState: String, Sendable, CaseIterable {
    /// Known from the feed, asset not (yet) downloaded.
    case pending
    /// Asset downloaded, validated and in `assets/`.
    case ready
    /// The last download failed; `error` says why.
    case failed
    /// No longer in the feed: never shown again, deleted by `prune`.
    case withdrawn
}

/// One ad in `index.json`. Field names are documented in the man page (FILES).
struct AdRecord: Equatable, Sendable {
    var id: String
    var url: String
    var type: AdType?
    var placement: String
    var state: RecordState
    /// The file's name in `assets/` once downloaded.
    var file: String?
    var bytes: Int64?
    /// The file's modification time (nanoseconds) when it was committed: with `bytes`, it
    /// tells that the file in `assets/` is still the one this record describes.
    var fileMtime: Int64?
    /// The feed's `sha256`, when it gave one.
    var sha256: String?
    /// The SHA-256 of the cached file, computed while it was downloaded.
    var fileSha256: String?
    var etag: String?
    var lastModified: String?
    var start: Double?
    var expires: Double?
    var maxShows: Int64?
    var maxShowsPerDay: Int64?
    var minInterval: Int64?
    /// When its VAST `notUsed` was queued for an eviction (SPEC §10: once).
    var notUsedAt: Double?
    /// The feed's `rollout` (SPEC §2 v4), for `why`; for an ad withdrawn because this device
    /// is no longer in its rollout, the percentage that left it out.
    var rollout: Int64?
    var duration: Int
    var priority: Int64
    var clickUrl: String?
    var meta: JSONValue?
    /// Shows recorded so far: they follow the id across fetches.
    var shows: Int64
    var lastShown: Double?
    /// The index's show counter at the last show: orders shows within one second.
    var lastShowSeq: Int64?
    /// The local day (days since 1970-01-01) `showsOnDay` counts.
    var showDay: Int?
    var showsOnDay: Int64?
    var error: String?
    /// Share of voice among eligible ads of equal priority (1 to 1000).
    var weight: Int64 = 1
    /// Times shown in the weighted rotation that began at show number `pickEpoch` (see
    /// `SelectionPolicy.rotate`).
    var picks: Int64?
    var pickEpoch: Int64?
    /// Proof of play (SPEC §8): event name → tracker URLs, macros not yet expanded.
    var tracking: [String: [String]] = [:]
    /// When in the local week it may be shown.
    var schedule = Schedule()
    /// A VAST ad's own fields (SPEC §10): `duration` is then its length, not a countdown.
    var vast: VASTFields?
    /// Failures for good in a row of this asset (`failedFor`: what they were against), and
    /// when it may be tried again; the validators of the failed response, to ask
    /// conditionally then.
    /// Until when the asset's last answer is fresh (RFC 9111): no request before then.
    var freshUntil: Double?
    /// The type the feed gave (or its URL's extension): `type` may have been sniffed.
    var feedType: AdType?
    var failures: Int64?
    var failedFor: String?
    var retryAt: Double?
    var failedEtag: String?
    var failedLastModified: String?

    init(ad: FeedAd) {
        id = ad.id
        url = ad.url
        type = ad.type
        placement = ad.placement
        state = .pending
        duration = ad.duration
        priority = ad.priority
        shows = 0
        update(from: ad)
    }

    /// Takes the feed's fields, keeping what the cache knows (shows, file, validators).
    mutating func update(from ad: FeedAd) {
        if url != ad.url {
            // A new asset for the campaign: the old file and validators no longer describe it.
            url = ad.url
            state = .pending
            forgetFile()
            type = nil
        }
        if state == .withdrawn { state = file == nil ? .pending : .ready }
        if let t = ad.type { type = t }
        feedType = ad.type
        takeFeedFields(of: ad)   // the rest, as the table in scripts/record-fields.py lists them
    }

    /// Forgets an earlier failure for good (the asset now downloaded, or changed).
    mutating func forgetFailure() {
        failures = nil
        failedFor = nil
        retryAt = nil
        failedEtag = nil
        failedLastModified = nil
    }

    /// Drops what described the cached file (it is gone or no longer this ad's).
    mutating func forgetFile() {
        file = nil
        bytes = nil
        fileMtime = nil
        fileSha256 = nil
        etag = nil
        lastModified = nil
    }

    /// Shows left; nil is unlimited.
    var remainingShows: Int64? {
        maxShows.map { max(0, $0 - shows) }
    }

    /// Shows counted for local day `day`. A day before the last one counted (the clock went
    /// back) counts as that day: a clock set back never lifts a daily cap.
    func showsOn(day: Int) -> Int64 {
        guard let showDay else { return 0 }
        return day <= showDay ? (showsOnDay ?? 0) : 0
    }
}

/// Where the feed came from, for `fetch` with no FEED and for its conditional request.
struct FeedSource: Equatable, Sendable {
    /// As given on the command line (not after redirects).
    var url: String
    var finalUrl: String?
    var etag: String?
    var lastModified: String?
    var fetchedAt: Double?
    /// The SHA-256 of the feed's bytes as last parsed: its warnings are said again only when
    /// they change (cron would mail them every half hour).
    var sha256: String?
    /// Until when the last answer is fresh (RFC 9111): no request before then.
    var freshUntil: Double?
    /// The signed feed's `validUntil` (SPEC §11): after it, none of its ads is shown.
    var validUntil: Double?
    /// The validators of the feed's signature, for its conditional request.
    var signatureEtag: String?
    var signatureLastModified: String?

    init(
        url: String, finalUrl: String? = nil, etag: String? = nil, lastModified: String? = nil, fetchedAt: Double? = nil
    ) {
        self.url = url
        self.finalUrl = finalUrl
        self.etag = etag
        self.lastModified = lastModified
        self.fetchedAt = fetchedAt
    }
}

/// `index.json`.
struct CacheIndex: Equatable, Sendable {
    var version: Int = CacheIndex.currentVersion
    var feed: FeedSource?
    /// Counts every recorded show; orders shows within the same second.
    var showSeq: Int64 = 0
    /// The last show of any ad (for `next --cooldown`).
    var lastShown: Double?
    /// Each weighted rotation (placement and type → its set of ads and how far it went).
    var rotations: [String: Rotation] = [:]
    /// The show number of the last record of the show journal folded into this index: later
    /// records are applied when it is loaded (SPEC §6, §7).
    var journalSeq: Int64 = 0
    /// The last record of the journal this index holds (`JournalMark.unread`).
    var journalMark: JournalMark?
    /// The feed's top-level `reportUrl` (SPEC §8).
    var reportUrl: String?
    /// Read for `next`'s choice only: its records lack the feed's texts; never saved.
    var forSelection = false
    /// Seconds to add to the device clock (the feed server's `Date` minus the device's,
    /// when they differed by more than 300 s at the last fetch that measured).
    var clockOffset: Double?
    /// Where that offset was measured, on the boot clock (`ClockSync`).
    var clockSync: ClockSync?
    /// The last signed feed accepted: it belongs to the cache (`clear` keeps it).
    var signed: SignedFeed?
    /// The feed server asked for no requests before `until` (429/503 `Retry-After`, SPEC
    /// §12): its origin (`scheme://host:port`) and the time, on the trusted clock.
    var retryAfter: RetryAfter?
    /// Asset bytes received on a local day (SPEC §12 budget): the day and the count.
    var downloaded: (day: Int, bytes: Int64)? {
        get { downloadedDay.map { ($0, downloadedBytes) } }
        set {
            downloadedDay = newValue?.day
            downloadedBytes = newValue?.bytes ?? 0
        }
    }
    var downloadedDay: Int?
    var downloadedBytes: Int64 = 0
    var ads: [AdRecord] = []

    /// True when the ads came from a signed feed whose `validUntil` has passed at `t`: none
    /// is shown until a newer signed feed arrives (SPEC §11).
    func frozen(at t: Double) -> Bool {
        feed?.validUntil.map { $0 <= t } ?? false
    }

    static let currentVersion = 1

    init() {}
}

/// A server's "no requests before" (SPEC §12).
struct RetryAfter: Equatable, Sendable {
    var origin: String
    var until: Double
    /// The longest wait remembered: a later time (a clock that jumped) is forgotten.
    static let cap: Double = 86400
}

/// The last signed feed a fetch accepted (SPEC §11): what a rollback is judged against.
struct SignedFeed: Equatable, Sendable {
    /// The id of the key that verified it, as minisign prints it.
    var keyId: String
    var serial: Int64
    var validUntil: Double
    /// The SHA-256 of the feed's bytes (`feed.signed` holds them): the same serial with other
    /// bytes is a rollback.
    var sha256: String
    /// The `.minisig` file as verified (kept across a 304 of the signature).
    var signature: String
}

/// A smooth weighted round-robin among a set of ads (`SelectionPolicy.rotate`): after
/// `rounds` shows since it began, an ad's credit is `rounds × weight − total × picks`, so
/// a show changes only two numbers and the journal can replay it.
struct Rotation: Equatable, Sendable {
    /// A digest of the ids and weights: when the set changes, the rotation starts over.
    var signature: String
    /// The show number that began it: an ad's `picks` count only when its `pickEpoch` is this.
    var epoch: Int64
    var rounds: Int64
}
