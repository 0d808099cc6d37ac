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

/// What `check` is asked (SPEC §13): a feed, read as `fetch` would read it.
public struct CheckOptions: Sendable {
    /// The feed (required), its keys, signature, transfer settings and VAST settings, as for
    /// `fetch`; what only a cache has (the download window, the budget, `--jitter`) is not used.
    public var fetch: FetchOptions
    /// Also download each asset into a temporary directory, check it as `fetch` does and
    /// delete it.
    public var assets = false
    /// Where `assets` makes its temporary directory (the command line: `$TMPDIR`, else /tmp).
    public var temporaryDirectory = "/tmp"

    /// Check the feed `fetch` names, read with its settings; with `assets`, its assets too.
    public init(_ fetch: FetchOptions, assets: Bool = false) {
        self.fetch = fetch
        self.assets = assets
    }
}

/// Would this feed work (SPEC §13)? One entry per ad, and the verdict on the whole feed.
public struct CheckReport: Sendable {
    /// An ad's staged rollout (SPEC §13): its percentage and whether this device takes it.
    public struct Rollout: Sendable, Equatable {
        /// The feed's `rollout`: the percentage of devices that take the ad, 1 to 100.
        public var percent: Int64
        /// This device takes the ad (false too when the device has no id yet: the first fetch
        /// makes one).
        public var taken: Bool
    }

    /// One ad of the feed, or one the feed's reader skipped.
    public struct Ad: Sendable {
        /// The ad's id; for an ad skipped before it had one, `#<n>` or the tag's URL.
        public var id: String
        /// Usable: not skipped and, with `assets`, its asset passed. An ad a staged rollout
        /// leaves out on this device is usable.
        public var ok: Bool
        /// Why not (nil when `ok`).
        public var reason: String?
        /// Image or video, as the feed declares it or (with `assets`) the download found; nil
        /// when not known, and for an ad skipped.
        public var type: AdType?
        /// The asset's absolute URL; nil for an ad skipped.
        public var url: String?
        /// The ad's staged rollout; nil when it goes to every device (or was skipped).
        public var rollout: Rollout?
        /// With `assets`: the bytes of the asset checked.
        public var bytes: Int64?
    }

    /// The feed as given: a URL, a path, or `-` for standard input.
    public var feed: String
    /// `json` or `vast`.
    public var format: String
    /// A signed feed that verified: the key's id, its `serial` and `validUntil`; nil when the
    /// feed is not signed or was refused.
    public var signed: Status.Signed?
    /// Why the whole feed would be refused; nil when it would be accepted.
    public var refused: String?
    /// The feed's ads in its order, then those a staged rollout leaves out on this device,
    /// then those skipped (with a refused feed, only those skipped).
    public var ads: [Ad] = []
    /// The feed's other warnings (a field dropped or defaulted), one line each.
    public var warnings: [String] = []
    /// This device's id for rollouts, when it has one.
    public var deviceId: String?
    /// The exit code (SPEC §13): 0 every ad usable, 65 refused or any ad skipped or failed,
    /// 69 the feed (or a document it needs) cannot be fetched.
    public var exitCode: Int32 = 0
}

extension AdCache {
    /// Tries a feed as `fetch` would — fetched (with its signature and VAST documents),
    /// verified with the configured keys, parsed, its rollouts judged for this device — and
    /// writes no cache at all (needs none). Throws only for a request that cannot be made
    /// (no feed, a bad option) or a missing library; a feed that cannot be fetched is a report
    /// with exit code 69.
    public func check(_ options: CheckOptions) throws -> CheckReport {
        try options.fetch.validate()
        guard let feedText = options.fetch.feed, !feedText.isEmpty else {
            throw AdCacheError.invalidRequest("'check' needs a FEED")
        }
        _ = try FeedLocation(feedText)
        _ = try CurlAPI.shared.get()
        _ = try CryptoAPI.shared.get()
        var fetchOptions = options.fetch
        fetchOptions.jitter = 0
        fetchOptions.revalidate = true   // no cache: every document is asked for

        // A scratch "cache" no one creates (nothing in acceptance writes); with `assets`, a
        // temporary directory, removed at the end.
        let tmp = options.temporaryDirectory
        var template = Array((tmp + "/adcache-check-XXXXXX").utf8CString)
        let scratchPath: String
        if options.assets {
            guard let made = mkdtemp(&template) else {
                throw AdCacheError.io("cannot make a temporary directory: \(FileIO.errnoText())")
            }
            scratchPath = String(cString: made)
        } else {
            scratchPath = tmp + "/adcache-check-\(UInt64.random(in: 0...UInt64.max))"
        }
        defer { if options.assets { try? FileManager.default.removeItem(atPath: scratchPath) } }

        let collected = Collected()
        let scratch = CacheStore(directory: scratchPath, warn: { collected.add($0) })
        let fetcher = Fetcher(
            store: scratch, options: fetchOptions, warn: { collected.add($0) }, clock: configuration.clock,
            proofOfPlay: configuration.proofOfPlay)
        let device = store.knownDeviceId(configuration.proofOfPlay)
        var report = CheckReport(feed: feedText, format: "json")
        report.deviceId = device

        let empty = CacheIndex()
        let request: Fetcher.FeedRequest
        let answer: Fetcher.FeedDownload
        do {
            request = try fetcher.feedRequest(empty)
            answer = try fetcher.feedStep(request, empty)
        } catch let failure as FeedUnreachable {
            return unreachable(report, failure.error)
        } catch let e as AdCacheError {
            return unreachable(report, e)
        }
        if let body = answer.body,
            body.first(where: { ![0x20, 0x09, 0x0A, 0x0D, 0xEF, 0xBB, 0xBF].contains($0) }) == 0x3C
        {
            report.format = "vast"
        }
        switch fetcher.acceptanceStage(answer, request, before: empty, device: device ?? "") {
        case .refused(let error, let warnings):
            report.refused = error.message
            report.exitCode = error.exitCode == 75 || error.exitCode == 69 ? 69 : 65
            report.ads = Self.skipped(warnings)
            report.warnings = Self.others(warnings + collected.all)
        case .accepted(let accepted):
            let feed = accepted.feed
            if feed.isVAST { report.format = "vast" }
            if let s = accepted.signed {
                report.signed = Status.Signed(
                    keyId: s.keyId, serial: s.serial, validUntil: Date(timeIntervalSince1970: s.validUntil))
            }
            var results: [String: Fetcher.AssetResult] = [:]
            if options.assets, !feed.ads.isEmpty {
                try scratch.prepare()
                var ads = feed.ads
                let judge = fetcher.on(accepted.clock)
                let (jobs, planned) = try judge.planAssets(
                    &ads, cached: empty, past: PastShows(judge, ads, empty), fromRecords: false)
                results = planned
                _ = judge.downloadAssets(jobs, &results)
            }
            for ad in feed.ads {
                var line = CheckReport.Ad(
                    id: ad.id, ok: true, type: ad.type, url: ad.url,
                    rollout: ad.rollout.map { .init(percent: $0, taken: true) })
                if let r = results[ad.id] {
                    line.type = r.type ?? ad.type
                    line.bytes = r.bytes
                    if r.outcome == .failed || r.outcome == .pending {
                        line.ok = false
                        line.reason = r.error ?? "not downloaded"
                    }
                }
                report.ads.append(line)
            }
            for ad in feed.rolledOut {
                report.ads.append(
                    .init(
                        id: ad.id, ok: true, reason: nil, type: ad.type, url: ad.url,
                        rollout: ad.rollout.map { .init(percent: $0, taken: false) }))
            }
            report.ads += Self.skipped(feed.warnings)
            report.warnings = Self.others(feed.warnings + collected.all)
            if report.ads.contains(where: { !$0.ok }) { report.exitCode = 65 }
            if feed.vastTransientFailures > 0 { report.exitCode = 69 }   // a document it needs, not fetched
        }
        return report
    }

    private func unreachable(_ report: CheckReport, _ error: AdCacheError) -> CheckReport {
        var r = report
        r.refused = error.message
        r.exitCode = error.exitCode == 65 ? 65 : 69
        return r
    }

    /// The ads skipped, from the feed's `skipping …` warnings.
    static func skipped(_ warnings: [Diagnostic]) -> [CheckReport.Ad] {
        warnings.filter { $0.message.hasPrefix("skipping ") }.enumerated().map { i, w in
            let text = w.message.dropFirst("skipping ".count)
            let reason = text.firstRange(of: ": ").map { String(text[$0.upperBound...]) } ?? String(text)
            return CheckReport.Ad(id: w.adID ?? "#\(i + 1)", ok: false, reason: reason)
        }
    }

    static func others(_ warnings: [Diagnostic]) -> [String] {
        warnings.filter { !$0.message.hasPrefix("skipping ") }.map(\.message)
    }
}

/// Warnings gathered from the stages (they run on one thread; the lock is for `Sendable`).
private final class Collected: @unchecked Sendable {
    private let lock = Lock()
    private var items: [Diagnostic] = []
    func add(_ d: Diagnostic) { lock.lock(); items.append(d); lock.unlock() }
    var all: [Diagnostic] { lock.lock(); defer { lock.unlock() }; return items }
}
