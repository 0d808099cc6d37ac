/// One ad as the feed describes it, after every rule of SPEC §2 has been applied.
public struct FeedAd: Equatable, Sendable {
    public var id: String
    /// The absolute asset URL.
    public var url: String
    /// nil until known: inferred later from Content-Type or the file's first bytes.
    public var type: AdType?
    public var start: Double?
    public var expires: Double?
    public var maxShows: Int64?
    public var maxShowsPerDay: Int64?
    public var minInterval: Int64?
    public var duration: Int = FeedAd.defaultDuration
    public var priority: Int64 = 0
    public var placement: String = FeedAd.defaultPlacement
    public var clickUrl: String?
    /// Lowercase hex, when the feed gives one.
    public var sha256: String?
    public var meta: JSONValue?

    public static let defaultDuration = 5
    /// The countdowns a feed may ask for (SPEC §2).
    static let durationRange = 3...5
    public static let defaultPlacement = "splash"

    public init(id: String, url: String) {
        self.id = id
        self.url = url
    }
}

/// A parsed feed: the ads that passed the rules and one warning for each that did not.
public struct Feed: Sendable {
    public var ads: [FeedAd]
    public var warnings: [String]
}
