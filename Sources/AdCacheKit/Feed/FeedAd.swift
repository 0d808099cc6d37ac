/// One ad as the feed describes it, after every rule of SPEC §2 has been applied.
package struct FeedAd: Equatable, Sendable {
    var id: String
    /// The absolute asset URL.
    var url: String
    /// nil until known: inferred later from Content-Type or the file's first bytes.
    var type: AdType?
    var start: Double?
    var expires: Double?
    var maxShows: Int64?
    var maxShowsPerDay: Int64?
    var minInterval: Int64?
    var duration: Int = FeedAd.defaultDuration
    var priority: Int64 = 0
    var placement: String = FeedAd.defaultPlacement
    var clickUrl: String?
    /// Lowercase hex, when the feed gives one.
    var sha256: String?
    var meta: JSONValue?
    /// Share of voice among eligible ads of equal priority, 1 to 1000.
    var weight: Int64 = 1
    /// When in the local week it may be shown.
    var schedule = Schedule()
    /// Proof of play (SPEC §8): event name → the http/https URLs to call when it happens.
    var tracking: [String: [String]] = [:]
    /// A VAST ad's own fields (SPEC §10); nil for an ad of a JSON feed.
    var vast: VASTFields?
    /// The media file's size as the VAST document gives it (`fileSize`): checked, not kept.
    var fileSize: Int64?
    /// A VAST video's playable media files, best first (element 0 is `url`): the next one is
    /// tried when one fails for good (SPEC §10 (v4) *The next rendition*). Empty otherwise.
    var renditions: [VASTRendition] = []
    /// `rollout`: the percentage of devices that take this ad (SPEC §2 v4); nil, every device.
    var rollout: Int64?

    /// The events a feed may track.
    static let trackedEvents = ["impression", "click", "skip", "complete"]
    /// The events a journal records: a feed's, and a VAST ad's (SPEC §10).
    static let journalEvents =
        trackedEvents + [
            "start", "firstQuartile", "midpoint", "thirdQuartile", "error", "notUsed", "rendered", "progress",
        ]
    package static let defaultDuration = 5
    /// The countdowns a feed may ask for (SPEC §2).
    static let durationRange = 3...5
    /// A VAST video's length, rounded up (SPEC §10: not clamped).
    static let vastDurationRange = 1...86400
    static let weightRange: ClosedRange<Int64> = 1...1000
    static let defaultPlacement = "splash"

    init(id: String, url: String) {
        self.id = id
        self.url = url
    }
}

/// A parsed feed: the ads that passed the rules and one warning for each that did not.
struct Feed: Sendable {
    var ads: [FeedAd]
    var warnings: [Diagnostic]
    /// The top-level `reportUrl`: where events are POSTed in batches (SPEC §8).
    var reportUrl: String?
    /// A signed feed's top-level `serial` (a whole number ≥ 1) and `validUntil` (SPEC §11);
    /// nil when absent or not such a value.
    var serial: Int64?
    var validUntil: Double?
    /// A JSON feed's `"vast": URL` ads, resolved by the parse stage (SPEC §10).
    var vastTags: [VASTTag] = []
    /// The VAST errors to report (queued once the feed is committed).
    var vastErrors: [VASTErrorReport] = []
    /// Wrapped VAST documents that could not be fetched for now.
    var vastTransientFailures = 0
    /// A VAST document itself (not a JSON feed naming VAST tags).
    var isVAST = false
    /// The root VAST document, read by the parse stage, its ads resolved by the VAST stage.
    var vastRoot: VASTDocument?
    /// Ads a staged rollout left out on this device (SPEC §2): not broken ads.
    var rolledOut: [FeedAd] = []
    /// How many ads the feed lists, those skipped included (a `"vast"` tag or a root
    /// document's `Ad` counts one): a feed that lists some and yields none is refused (SPEC §2).
    var listed = 0

    /// Ads of this feed come from VAST documents.
    var hasVAST: Bool { isVAST || !vastTags.isEmpty }
}
