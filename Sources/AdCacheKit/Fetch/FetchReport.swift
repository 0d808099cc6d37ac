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
    }

    /// As given, or the remembered feed.
    public var feed: String
    /// `downloaded`, or `unchanged` when the server answered 304.
    public var feedStatus: String
    public var ads: [Ad] = []
    /// The feed's warnings (also sent to the diagnostics).
    public var warnings: [String] = []
    /// False when some asset failed or is still pending: the rest is committed, and a later
    /// fetch tries again.
    public var isComplete = true

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

extension FetchReport {
    /// The `fetch --json` report, with the exit code the command line ends with.
    public func json(exitCode: Int32) -> String {
        JSONOut.object([
            ("feed", .string(feed)),
            ("feedStatus", .string(feedStatus)),
            (
                "ads",
                .array(
                    ads.map { ad in
                        .object([
                            ("id", .string(ad.id)),
                            ("url", .string(ad.url)),
                            ("outcome", .string(ad.outcome.rawValue)),
                            ("bytes", .int(ad.bytes)),
                            ("error", .string(ad.error)),
                        ])
                    })
            ),
            ("warnings", .array(warnings.map { .string($0) })),
            ("summary", .string(summary)),
            ("exitCode", .int(Int64(exitCode))),
        ]).render(indent: 2)
    }
}
