/// What the index remembers of an ad between runs. `list` derives the states a person sees
/// (scheduled, expired, exhausted, missing) from these and the clock.
public enum StoredState: String, Codable, Sendable {
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
public struct AdRecord: Equatable, Sendable {
    public var id: String
    public var url: String
    public var type: AdType?
    public var placement: String
    public var state: StoredState
    /// The file's name in `assets/` once downloaded.
    public var file: String?
    public var bytes: Int64?
    /// The file's modification time (nanoseconds) when it was committed: with `bytes`, it
    /// tells that the file in `assets/` is still the one this record describes.
    public var fileMtime: Int64?
    /// The feed's `sha256`, when it gave one.
    public var sha256: String?
    /// The SHA-256 of the cached file, computed while it was downloaded.
    public var fileSha256: String?
    public var etag: String?
    public var lastModified: String?
    public var start: Double?
    public var expires: Double?
    public var maxShows: Int64?
    public var maxShowsPerDay: Int64?
    public var minInterval: Int64?
    public var duration: Int
    public var priority: Int64
    public var clickUrl: String?
    public var meta: JSONValue?
    /// Shows recorded so far: they follow the id across fetches.
    public var shows: Int64
    public var lastShown: Double?
    /// The index's show counter at the last show: orders shows within one second.
    public var lastShowSeq: Int64?
    /// The local day (days since 1970-01-01) `showsOnDay` counts.
    public var showDay: Int?
    public var showsOnDay: Int64?
    public var error: String?

    public init(ad: FeedAd) {
        id = ad.id
        url = ad.url
        type = ad.type
        placement = ad.placement
        state = .pending
        duration = ad.duration
        priority = ad.priority
        shows = 0
        apply(ad)
    }

    /// Takes the feed's fields, keeping what the cache knows (shows, file, validators).
    public mutating func apply(_ ad: FeedAd) {
        if url != ad.url {
            // A new asset for the campaign: the old file and validators no longer describe it.
            url = ad.url
            state = .pending
            forgetFile()
            type = nil
        }
        if state == .withdrawn { state = file == nil ? .pending : .ready }
        if let t = ad.type { type = t }
        placement = ad.placement
        sha256 = ad.sha256
        start = ad.start
        expires = ad.expires
        maxShows = ad.maxShows
        maxShowsPerDay = ad.maxShowsPerDay
        minInterval = ad.minInterval
        duration = ad.duration
        priority = ad.priority
        clickUrl = ad.clickUrl
        meta = ad.meta
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
    public var remainingShows: Int64? {
        maxShows.map { max(0, $0 - shows) }
    }

    public func showsOn(day: Int) -> Int64 {
        showDay == day ? (showsOnDay ?? 0) : 0
    }
}

/// Where the feed came from, for `fetch` with no FEED and for its conditional request.
public struct FeedSource: Equatable, Sendable {
    /// As given on the command line (not after redirects).
    public var url: String
    public var finalUrl: String?
    public var etag: String?
    public var lastModified: String?
    public var fetchedAt: Double?

    public init(url: String, finalUrl: String? = nil, etag: String? = nil, lastModified: String? = nil, fetchedAt: Double? = nil) {
        self.url = url
        self.finalUrl = finalUrl
        self.etag = etag
        self.lastModified = lastModified
        self.fetchedAt = fetchedAt
    }
}

/// `index.json`.
public struct CacheIndex: Equatable, Sendable {
    public var version: Int = CacheIndex.currentVersion
    public var feed: FeedSource?
    /// Counts every recorded show; orders shows within the same second.
    public var showSeq: Int64 = 0
    /// The last show of any ad (for `next --cooldown`).
    public var lastShown: Double?
    public var ads: [AdRecord] = []

    public static let currentVersion = 1

    public init() {}
}
