#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// The stable machine interface: `next --json` and `list --json` objects (SPEC §4).
extension ShownAd {
    /// The `next --json` object, on one line.
    public var json: String {
        JSONOut.object([
            ("id", .string(id)),
            ("path", .string(path)),
            ("type", .string(type?.rawValue)),
            ("placement", .string(placement)),
            ("duration", .int(Int64(duration))),
            ("clickUrl", .string(clickUrl)),
            ("remainingShows", .int(remainingShows)),
            ("expires", .time(expires)),
            ("priority", .int(priority)),
            ("meta", meta.map { .raw($0) } ?? .null),
            ("fallback", .bool(false)),
        ]).render()
    }

    /// The `next --json --fallback FILE` answer when nothing is eligible.
    public static func fallbackJSON(path: String, placement: String) -> String {
        JSONOut.object([
            ("id", .null),
            ("path", .string(path)),
            ("type", .string(MediaFormat.type(forExtension: PathText.pathExtension(path))?.rawValue)),
            ("placement", .string(placement)),
            ("duration", .int(Int64(FeedAd.defaultDuration))),
            ("clickUrl", .null),
            ("remainingShows", .null),
            ("expires", .null),
            ("priority", .null),
            ("meta", .null),
            ("fallback", .bool(true)),
        ]).render()
    }
}

extension ListedAd {
    var jsonValue: JSONOut {
        .object([
            ("id", .string(id)),
            ("url", .string(url)),
            ("type", .string(type?.rawValue)),
            ("placement", .string(placement)),
            ("state", .string(state.rawValue)),
            ("shows", .int(shows)),
            ("maxShows", .int(maxShows)),
            ("priority", .int(priority)),
            ("start", .time(start)),
            ("expires", .time(expires)),
            ("lastShown", .time(lastShown)),
            ("bytes", .int(bytes)),
            ("path", .string(path)),
            ("error", .string(error)),
        ])
    }

    /// The `list --json` array.
    public static func json(_ ads: [ListedAd]) -> String {
        JSONOut.array(ads.map(\.jsonValue)).render(indent: 2)
    }
}

extension CacheStore {
    /// The cache at a glance, as of `t`.
    func listing(at moment: Moment, warn: WarningSink) throws -> [ListedAd] {
        guard exists else {
            // A mistyped --cache-dir must not look like an empty cache.
            warn(Diagnostic(.cache, "the cache directory \(directory) does not exist"))
            return []
        }
        let index = try load(warn: warn)
        let t = moment.resolve(index)
        let local = Time.local(t)
        return index.ads.map { r in
            let state = r.state(at: t, local: local, filePresent: filePresent(r))
            func date(_ t: Double?) -> Date? { t.map(Date.init(timeIntervalSince1970:)) }
            return ListedAd(
                id: r.id, url: r.url, type: r.type, placement: r.placement, state: state, shows: r.shows,
                maxShows: r.maxShows, priority: r.priority, start: date(r.start), expires: date(r.expires),
                lastShown: date(r.lastShown), bytes: r.file == nil ? nil : r.bytes,
                path: r.file.map(assetPath), error: r.error,
                restingUntil: state == .resting ? date(r.restsUntil(after: t, local: local)) : nil)
        }
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

extension PruneReport {
    /// The `prune --json` report.
    public var json: String {
        JSONOut.object([
            ("dryRun", .bool(dryRun)),
            (
                "removed",
                .array(
                    removed.map { r in
                        .object([
                            ("id", .string(r.id)), ("reason", .string(r.reason)), ("file", .string(r.file)),
                            ("bytes", .int(r.bytes)),
                        ])
                    })
            ),
            ("bytesFreed", .int(bytesFreed)),
            ("bytesKept", .int(bytesKept)),
        ]).render(indent: 2)
    }
}

extension ReportResult {
    /// The `report --json` object: `{"delivered": n, "pending": n, "dropped": n}`.
    public var json: String {
        JSONOut.object([
            ("delivered", .int(Int64(delivered))), ("pending", .int(Int64(pending))), ("dropped", .int(Int64(dropped))),
        ]).render(indent: 2)
    }

    /// `3 delivered, 0 pending, 0 dropped`.
    public var summary: String { "\(delivered) delivered, \(pending) pending, \(dropped) dropped" }
}

extension Stats {
    /// The `stats --json` object (SPEC §4).
    public var json: String {
        JSONOut.object([
            (
                "days",
                .array(
                    days.map { d in
                        .object([
                            ("day", .string(d.day)), ("id", .string(d.id)), ("shows", .int(d.shows)),
                            ("clicks", .int(d.clicks)), ("skips", .int(d.skips)), ("completes", .int(d.completes)),
                        ])
                    })
            ),
            (
                "queue",
                .object([
                    ("pending", .int(pending)), ("delivered", .int(delivered)),
                    (
                        "dropped",
                        .object([
                            ("permanent", .int(droppedPermanent)), ("age", .int(droppedAge)),
                            ("overflow", .int(droppedOverflow)),
                        ])
                    ),
                    ("oldestPending", .time(oldestPending)),
                ])
            ),
        ]).render(indent: 2)
    }
}
