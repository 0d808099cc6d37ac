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

/// The download stage of a fetch.
extension Fetcher {
    /// The download stage: the planned transfers, `options.transfer.parallel` at once, each checked as
    /// it ends (`finishAsset`); what did not fit on the disk is tried again one at a time.
    /// Returns the asset body bytes received (resumed bytes counted once): the day's count.
    func downloadAssets(_ jobs: [Job], _ results: inout [String: AssetResult]) -> Int64 {
        var received: Int64 = 0
        var settings = options.settings
        if let rate = options.limitRate {   // the run's one bucket, shared by the transfers at once
            let share = max(1, rate / Int64(max(1, min(options.transfer.parallel, jobs.count))))
            // A share under the stall rule's 1 KiB/s is slow by request, not stalled.
            settings.stallBytesPerSecond = Int(min(Int64(settings.stallBytesPerSecond), max(1, share / 2)))
        }
        let engine = TransferEngine(settings: settings)
        engine.onProgress = onProgress
        engine.run(jobs.map(\.request)) { i, response in
            received += response.bytesReceived
            results.merge(finishAsset(jobs[i], response)) { _, new in new }
        }
        return received + retryWhatDidNotFit(jobs, settings: settings, &results)
    }

    /// Transfers that ran together share the disk: one asset too big for it can take the
    /// room of the small ones while they run (SPEC §6: what fits is committed). Those that
    /// did not fit are tried again one at a time, smallest first (by the size the server
    /// announced), until one still does not fit, or the free space cannot hold it: the larger
    /// ones would not fit either.
    func retryWhatDidNotFit(_ jobs: [Job], settings: TransferSettings, _ results: inout [String: AssetResult])
        -> Int64
    {
        var received: Int64 = 0
        let full = jobs.indices.filter { results[jobs[$0].ads[0].id]?.noSpace == true }
        guard settings.parallel > 1, jobs.count > 1, !full.isEmpty, options.transfer.isCancelled?() != true else {
            return 0
        }
        let order = full.sorted {
            (results[jobs[$0].ads[0].id]?.announcedBytes ?? .max, $0)
                < (results[jobs[$1].ads[0].id]?.announcedBytes ?? .max, $1)
        }
        var one = settings
        one.parallel = 1
        for i in order {
            if let deadline = one.deadline, monotonicNow() >= deadline { return received }
            // One the free space cannot hold is not downloaded a second time.
            var fs = statvfs()
            if let wanted = results[jobs[i].ads[0].id]?.announcedBytes, statvfs(store.directory, &fs) == 0,
                wanted > Int64(fs.f_bavail) * Int64(fs.f_frsize)
            {
                return received
            }
            let engine = TransferEngine(settings: one)
            engine.onProgress = onProgress
            var again: [String: AssetResult] = [:]
            engine.run([jobs[i].request]) { _, response in
                received += response.bytesReceived
                again = finishAsset(jobs[i], response)
            }
            results.merge(again) { _, new in new }
            if again.values.contains(where: \.noSpace) { return received }
        }
        return received
    }
}

/// The download window and the day's budget (SPEC §12).
extension Fetcher {
    /// The jobs that may start now, when the window opens again (if it is closed), and the
    /// jobs left for the next round; the ads of those that cannot run are deferred
    /// (`pending`, not a failure). Under a budget a job starts only if the day's count (this
    /// run's bytes included), plus the sizes announced of the others starting with it, plus
    /// its own, stays within the budget; one whose size is not announced only while the count
    /// is under it, alone in its round, and abandoned before its body (deferred) when its
    /// answer's Content-Length is more than is left — without one, it runs to its end (a
    /// running one finishes).
    func gateDownloads(_ jobs: [Job], before: CacheIndex, received: Int64, _ results: inout [String: AssetResult])
        -> (
            [Job], Double?, [Job]
        )
    {
        func deferring(_ job: Job) {
            for ad in job.ads {
                var r = AssetResult(outcome: .pending)
                r.deferred = true
                results[ad.id] = r
            }
        }
        let t = now()
        if let hours = options.downloadHours, !options.ignoreDownloadHours, let windows = Schedule.windows(hours) {
            var schedule = Schedule()
            schedule.windows = windows
            if !schedule.allows(Time.local(t)) {
                jobs.forEach(deferring)
                let minute = (t / 60).rounded(.down) * 60
                let opens = (1...(8 * 1440)).lazy.map { minute + Double($0) * 60 }.first {
                    schedule.allows(Time.local($0))
                }
                return ([], opens, [])
            }
        }
        guard let budget = options.maxDownloadPerDay else { return (jobs, nil, []) }
        var used = Self.downloadedToday(before, day: Time.localDay(t)) + received
        var admitted: [Job] = []
        var rest: [Job] = []
        var alone = false   // an unannounced size runs alone in its round
        for job in jobs {
            // Announced by the feed (VAST's fileSize), else by nobody until it answers.
            let announced = job.ads.compactMap(\.fileSize).first
            if let size = announced {
                if used + size <= budget, admitted.count < options.transfer.parallel, !alone {
                    admitted.append(job)
                    used += size
                } else if used + size <= budget {
                    rest.append(job)
                } else {
                    deferring(job)
                }
            } else if used < budget {
                if admitted.isEmpty {
                    // Abandoned before its body if its answer announces more than is left.
                    var capped = job
                    capped.budgetCap = budget - used
                    capped.request.maxAnnouncedBytes = budget - used
                    admitted.append(capped)
                    alone = true
                } else {
                    rest.append(job)
                }
            } else {
                deferring(job)
            }
        }
        return (admitted, nil, rest)
    }
    /// The asset bytes the index counts for local day `day`.
    static func downloadedToday(_ index: CacheIndex, day: Int) -> Int64 {
        index.downloaded.map { $0.day == day ? $0.bytes : 0 } ?? 0
    }
}

/// The next rendition (SPEC §10): when the chosen media file of a VAST ad fails for good (401,
/// 403, 405, 400), the next one in the order of the media-file rule is tried in the same run.
extension Fetcher {
    /// Moves each ad whose media file failed for good to its next rendition; returns the ids
    /// moved and the error of each failure (queued once the feed is committed).
    static func nextRenditions(_ ads: inout [FeedAd], _ results: [String: AssetResult]) -> (
        moved: Set<String>, errors: [VASTErrorReport]
    ) {
        var moved = Set<String>()
        var errors: [VASTErrorReport] = []
        for i in ads.indices where ads[i].renditions.count > 1 {
            guard let r = results[ads[i].id], r.outcome == .failed, !r.transient, !r.waiting,
                let code = r.mediaError, code != .mediaTimeout,
                let at = ads[i].renditions.firstIndex(where: { $0.url == ads[i].url }),
                at + 1 < ads[i].renditions.count
            else { continue }
            if let urls = ads[i].tracking["error"], !urls.isEmpty {
                errors.append(VASTErrorReport(id: ads[i].id, urls: urls, code: code, assetURI: ads[i].url))
            }
            let next = ads[i].renditions[at + 1]
            ads[i].url = next.url
            ads[i].fileSize = next.fileSize
            moved.insert(ads[i].id)
        }
        return (moved, errors)
    }
}

extension FeedAd {
    /// Starts from the rendition at `url` when it is a later one of this ad's.
    mutating func startRendition(at url: String) {
        guard url != self.url, let at = renditions.firstIndex(where: { $0.url == url }), at > 0 else { return }
        self.url = renditions[at].url
        fileSize = renditions[at].fileSize
    }
}
