/// What `fetch` did, for the summary line and `fetch --json`.
public struct FetchReport: Codable, Sendable {
    public enum Outcome: String, Codable, Sendable {
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

    public struct Ad: Codable, Sendable {
        public var id: String
        public var url: String
        public var outcome: Outcome
        public var bytes: Int64?
        public var error: String?
    }

    public var feed: String
    /// `downloaded`, or `unchanged` when the server answered 304.
    public var feedStatus: String
    public var ads: [Ad] = []
    public var warnings: [String] = []
    public var exitCode: Int32 = 0

    func count(_ o: Outcome) -> Int { ads.filter { $0.outcome == o }.count }

    /// `4 ads: 3 ready (2 downloaded, 1 unchanged), 1 failed`.
    public var summary: String {
        let ready = count(.downloaded) + count(.resumed) + count(.unchanged)
        var detail: [String] = []
        for o in [Outcome.downloaded, .resumed, .unchanged] where count(o) > 0 {
            detail.append("\(count(o)) \(o.rawValue)")
        }
        var parts = ["\(ready) ready" + (detail.isEmpty ? "" : " (\(detail.joined(separator: ", ")))")]
        for o in [Outcome.failed, .pending, .expired, .exhausted] where count(o) > 0 {
            parts.append("\(count(o)) \(o.rawValue)")
        }
        let noun = ads.count == 1 ? "ad" : "ads"
        return "\(ads.count) \(noun): " + parts.joined(separator: ", ")
    }
}
