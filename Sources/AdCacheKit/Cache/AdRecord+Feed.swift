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

extension AdRecord {
    /// A new record for `ad`, resuming the counts its id already has (`Fetcher.pastShows`).
    init(ad: FeedAd, shown: (total: Int64, today: Int64)?, today: Int) {
        self.init(ad: ad)
        guard let shown, shown.total > 0 else { return }
        shows = min(max(0, shown.total), AdRecord.counts.upperBound)
        if shown.today > 0 {
            showsOnDay = shown.today
            showDay = today
        }
    }
}

extension AdRecord {
    /// Records what the fetch found for this ad's asset.
    mutating func take(_ r: Fetcher.AssetResult, at t: Double, failureKey: String) {
        switch r.outcome {
        case .downloaded, .resumed, .unchanged:
            state = .ready
            file = r.file
            bytes = r.bytes
            fileMtime = r.fileMtime
            fileSha256 = r.fileSha256
            etag = r.etag
            lastModified = r.lastModified
            if let t = r.type { type = t }
            error = nil
            freshUntil = r.freshUntil
            forgetFailure()
        case .failed:
            guard !r.waiting else { return }   // nothing was tried: nothing changes
            // A file we already have stays usable (offline first); the error is noted.
            if state != .ready { state = .failed }
            error = r.error
            if !r.transient, r.ioError == nil {
                // Failed for good: not again on every run (SPEC §4), but after 30 minutes,
                // doubling up to a day, while the ad's asset and the size cap stay the same.
                failures = failedFor == failureKey ? min((failures ?? 0) + 1, 64) : 1
                failedFor = failureKey
                retryAt = t + min(1800 * pow(2, Double(failures! - 1)), 86400)
                failedEtag = r.failedEtag ?? failedEtag
                failedLastModified = r.failedLastModified ?? failedLastModified
            }
        case .pending:
            if state != .ready { state = .pending }
        case .expired, .exhausted:
            break
        }
    }

    /// The ad as a feed would give it (after a 304 for the feed).
    var feedAd: FeedAd {
        var ad = FeedAd(id: id, url: url)
        ad.type = feedType   // not a sniffed type: the server may swap an image for a video
        giveFeedFields(to: &ad)
        return ad
    }
}
