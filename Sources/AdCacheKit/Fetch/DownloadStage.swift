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
    /// The download stage: the planned transfers, `options.parallel` at once, each checked as
    /// it ends (`finishAsset`); what did not fit on the disk is tried again one at a time.
    func downloadAssets(_ jobs: [Job], _ results: inout [String: AssetResult]) {
        var settings = options.transfer
        if let rate = options.limitRate {   // shared by the transfers that run at once
            let share = max(1, rate / Int64(max(1, min(options.parallel, jobs.count))))
            settings.maxReceiveSpeed = share
            // A share under the stall rule's 1 KiB/s is slow by request, not stalled.
            settings.stallBytesPerSecond = Int(min(Int64(settings.stallBytesPerSecond), max(1, share / 2)))
        }
        let engine = TransferEngine(settings: settings)
        engine.onProgress = onProgress
        engine.run(jobs.map(\.request)) { i, response in
            results.merge(finishAsset(jobs[i], response)) { _, new in new }
        }
        retryWhatDidNotFit(jobs, settings: settings, &results)
    }

    /// Transfers that ran together share the disk: one asset too big for it can take the
    /// room of the small ones while they run (SPEC §6: what fits is committed). Those that
    /// did not fit are tried again one at a time, smallest first (by the size the server
    /// announced), until one still does not fit, or the free space cannot hold it: the larger
    /// ones would not fit either.
    func retryWhatDidNotFit(_ jobs: [Job], settings: TransferSettings, _ results: inout [String: AssetResult]) {
        let full = jobs.indices.filter { results[jobs[$0].ads[0].id]?.noSpace == true }
        guard settings.parallel > 1, jobs.count > 1, !full.isEmpty, options.isCancelled?() != true else { return }
        let order = full.sorted {
            (results[jobs[$0].ads[0].id]?.announcedBytes ?? .max, $0)
                < (results[jobs[$1].ads[0].id]?.announcedBytes ?? .max, $1)
        }
        var one = settings
        one.parallel = 1
        for i in order {
            if let deadline = one.deadline, monotonicNow() >= deadline { return }
            // One the free space cannot hold is not downloaded a second time.
            var fs = statvfs()
            if let wanted = results[jobs[i].ads[0].id]?.announcedBytes, statvfs(store.directory, &fs) == 0,
                wanted > Int64(fs.f_bavail) * Int64(fs.f_frsize)
            {
                return
            }
            let engine = TransferEngine(settings: one)
            engine.onProgress = onProgress
            var again: [String: AssetResult] = [:]
            engine.run([jobs[i].request]) { _, response in again = finishAsset(jobs[i], response) }
            results.merge(again) { _, new in new }
            if again.values.contains(where: \.noSpace) { return }
        }
    }
}
