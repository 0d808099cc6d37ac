import AdCacheKit

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

// The command line's output formats (SPEC §4): what `--json` and the summary lines print.
// The library returns values; these are the command line's words for them.

/// `next --json` and `list --json` (SPEC §4).
extension ShownAd {
    /// The `next --json` object, on one line.
    package var json: String {
        JSONOut.object([
            ("id", .string(id)),
            ("path", .string(path)),
            ("type", .string(type?.rawValue)),
            ("placement", .string(placement)),
            ("duration", .int(Int64(duration))),
            ("skipOffset", skipOffset.map { .raw(.double($0)) } ?? .null),
            ("progress", .array(progress.map { .raw(.double($0)) })),
            ("startQueued", .bool(startQueued)),
            ("clickUrl", .string(clickUrl)),
            ("remainingShows", .int(remainingShows)),
            ("expires", .time(expires)),
            ("priority", .int(priority)),
            ("meta", meta.map { .raw($0) } ?? .null),
            ("fallback", .bool(false)),
            ("show", .string(show)),
        ]).render()
    }

    /// The `next --json --fallback FILE` answer when nothing is eligible.
    package static func fallbackJSON(path: String, placement: String) -> String {
        JSONOut.object([
            ("id", .null),
            ("path", .string(path)),
            ("type", .string(MediaFormat.type(forExtension: PathText.pathExtension(path))?.rawValue)),
            ("placement", .string(placement)),
            ("duration", .int(Int64(FeedAd.defaultDuration))),
            ("skipOffset", .null),
            ("progress", .array([])),
            ("startQueued", .bool(false)),
            ("clickUrl", .null),
            ("remainingShows", .null),
            ("expires", .null),
            ("priority", .null),
            ("meta", .null),
            ("fallback", .bool(true)),
            ("show", .null),
        ]).render()
    }
}

extension ListedAd {
    package var jsonValue: JSONOut {
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
    package static func json(_ ads: [ListedAd]) -> String {
        JSONOut.array(ads.map(\.jsonValue)).render(indent: 2)
    }
}

extension FetchReport {
    /// `4 ads: 3 ready (2 downloaded, 1 unchanged), 1 failed`.
    package var summary: String {
        // An ad whose check was deferred (outside the window, over the budget) while its file
        // serves is ready, not deferred: only what waits for its first file is (SPEC §12).
        let kept = ads.filter { $0.deferred && $0.olderFileServes }.count
        let deferred = self.deferred - kept
        let ready = count(.downloaded) + count(.resumed) + count(.unchanged) + kept
        var detail: [String] = []
        for o in [FetchReport.Outcome.downloaded, .resumed, .unchanged] where count(o) > 0 {
            detail.append("\(count(o)) \(o.rawValue)")
        }
        if kept > 0 { detail.append("\(kept) not checked until the window opens") }
        var parts = ["\(ready) ready" + (detail.isEmpty ? "" : " (\(detail.joined(separator: ", ")))")]
        for o in [FetchReport.Outcome.failed, .pending, .expired, .exhausted] {
            let these = ads.filter { $0.outcome == o && !$0.deferred }
            guard !these.isEmpty else { continue }
            let older = these.filter(\.olderFileServes).count
            let serving =
                older == 0
                ? "" : older == these.count ? " (an older file serves)" : " (\(older) with an older file serving)"
            parts.append("\(these.count) \(o.rawValue)" + serving)
        }
        if deferred > 0 {
            // The window's next opening, as the local wall clock says it (SPEC §12).
            let until = deferredUntil.map { " until " + AdCache.formatLocalTime($0).dropFirst(11).prefix(5) } ?? ""
            parts.append("\(deferred) deferred\(until)")
        }
        let noun = ads.count == 1 ? "ad" : "ads"
        return "\(ads.count) \(noun): " + parts.joined(separator: ", ")
    }

    /// The `fetch --json` report, with the exit code the command line ends with.
    package func json(exitCode: Int32) -> String {
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
    package var json: String {
        JSONOut.object([
            ("dryRun", .bool(dryRun)),
            (
                "removed",
                .array(
                    removed.map { r in
                        .object([
                            ("id", .string(r.id)), ("reason", .string(r.reason)), ("file", .string(r.file)),
                            ("heldFile", .string(r.heldFile)),
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
    package var json: String {
        JSONOut.object([
            ("delivered", .int(Int64(delivered))), ("pending", .int(Int64(pending))), ("dropped", .int(Int64(dropped))),
        ]).render(indent: 2)
    }

    /// `3 delivered, 0 pending, 0 dropped`.
    package var summary: String { "\(delivered) delivered, \(pending) pending, \(dropped) dropped" }
}

extension Stats {
    /// The `stats --json` object (SPEC §4).
    package var json: String {
        JSONOut.object([
            (
                "days",
                .array(
                    days.map { d in
                        .object([
                            ("day", .string(d.day)), ("id", .string(d.id)), ("shows", .int(d.shows)),
                            ("clicks", .int(d.clicks)), ("skips", .int(d.skips)), ("completes", .int(d.completes)),
                            ("starts", .int(d.starts)), ("firstQuartiles", .int(d.firstQuartiles)),
                            ("midpoints", .int(d.midpoints)), ("thirdQuartiles", .int(d.thirdQuartiles)),
                            ("notUsed", .int(d.notUsed)), ("errors", .int(d.errors)),
                            ("impressions", .int(d.impressions)), ("unrendered", .int(d.unrendered)),
                        ])
                    })
            ),
            (
                "downloaded",
                .object([("today", .int(downloadedToday)), ("budget", downloadBudget.map { .int($0) } ?? .null)])
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
