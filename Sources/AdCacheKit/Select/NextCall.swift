#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

// `AdCache.next` and `why`, what they take and what they return.

extension AdCache {
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

    /// By default: the show recorded, any type, placement `splash`, no cooldown, and the
    /// impression queued with the show (choice mode).
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
    /// The ad's id, as the feed gives it.
    public var id: String
    /// The asset's absolute path.
    public var path: String
    /// Image or video, as the feed declares it or the download found; nil when neither told.
    public var type: AdType?
    /// The placement it was chosen for.
    public var placement: String
    /// Countdown seconds, 3 to 5; a VAST video's length.
    public var duration: Int
    /// When a VAST ad may be skipped, in seconds from its start (SPEC §10); nil when never
    /// (or not a VAST ad).
    public var skipOffset: Double?
    /// True when the show already queued the video's `start` (a VAST video, SPEC §10): the
    /// player reports only what follows.
    public var startQueued = false
    /// Where a tap on the ad leads, as the feed gives it; nil when it gives none.
    public var clickUrl: String?
    /// Shows left after this one (as it stands when peeking); nil is unlimited.
    public var remainingShows: Int64?
    /// Not shown from this time on; nil is never.
    public var expires: Date?
    /// The feed's `priority`: higher is shown first.
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
