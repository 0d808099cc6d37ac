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

/// The commit stage of a fetch: the results merged into the index as it is at commit time.
extension Fetcher {
    /// Merges the results into the index as it is now (keeping shows recorded meanwhile),
    /// withdraws what the feed no longer lists, and deletes files nothing names any more.
    /// `sweep`: also delete what an interrupted predecessor left in assets/ (not after a
    /// rebuild of a lost index, whose files the next run may still confirm).
    func commit(
        _ feed: Feed, results: [String: AssetResult], feedState: FeedSource?, signed: SignedFeed? = nil,
        received: Int64, past: PastShows, sweep: Bool
    ) throws {
        let ads = feed.ads
        // A run's downloads are worth more than a second's wait: the commit waits for the
        // index lock as long as the deadline allows (a minute without one), not the second a
        // launch waits (SPEC §6; a fold by another command may hold it a while).
        let wait = max(store.lockTimeout, options.settings.deadline.map { max(1, $0 - monotonicNow()) } ?? 60)
        var leftovers: [CacheFile] = []
        do {
            _ = try merge(
                feed, results: results, feedState: feedState, signed: signed, received: received, past: past,
                sweep: sweep, wait: wait
            ) {
                leftovers = $0
            }
        } catch {
            // The downloads stay for the next run, which asks the server about them.
            let today = Time.localDay(now())
            store.saveUncommitted(
                ads.compactMap { ad in
                    guard let r = results[ad.id], r.file != nil else { return nil }
                    var record = AdRecord(ad: ad, shown: nil, today: today)
                    record.update(from: ad)
                    record.take(r, at: now(), failureKey: failureKey(ad))
                    return record.file != nil && store.fileUnchanged(record) ? record : nil
                })
            throw error
        }
        store.uncommittedFile.remove()
        for file in leftovers { file.remove() }
        store.keepReserve()   // room for the index a prune on a full disk must write (Reserve.swift)
        CrashPoint.reach("fetch.afterCommit")
    }

    /// The commit's read-modify-write of the index (under the index lock); returns the files
    /// the index no longer names, and gives `leftovers` what the sweep deletes.
    func merge(
        _ feed: Feed, results: [String: AssetResult], feedState: FeedSource?, signed: SignedFeed? = nil,
        received: Int64, past: PastShows, sweep: Bool, wait: Double? = nil, leftovers: ([CacheFile]) -> Void
    ) throws -> [String] {
        let ads = feed.ads
        return try store.update(warn: warn, timeout: wait) { index in
            let filesBefore = Set(index.ads.compactMap(\.file))
            var byID = Dictionary(index.ads.map { ($0.id, $0) }, uniquingKeysWith: { a, _ in a })
            let known = Set(byID.keys)
            let today = Time.localDay(now())
            let past = ads.contains { !known.contains($0.id) } ? past.counts(today: today, self) : [:]
            var merged: [AdRecord] = []
            for ad in ads {
                var record = byID.removeValue(forKey: ad.id) ?? AdRecord(ad: ad, shown: past[ad.id], today: today)
                record.update(from: ad)
                if let r = results[ad.id] { record.take(r, at: now(), failureKey: failureKey(ad)) }
                merged.append(record)
            }
            let leftOut = Dictionary(feed.rolledOut.map { ($0.id, $0.rollout) }, uniquingKeysWith: { a, _ in a })
            for var gone in index.ads where byID[gone.id] != nil {
                gone.state = .withdrawn
                if let percent = leftOut[gone.id] { gone.rollout = percent }   // for `why`
                merged.append(gone)
            }
            // A file this commit stops naming, or whose ad it withdraws, may be what a launch
            // just printed (SPEC §6): dated now, before the commit (a crash after it must not
            // leave it old), for `prune` to delete once the grace has passed.
            // So is a file whose ad this commit ends (a feed moving its expiry back, lowering
            // its cap): `prune` takes it by its record's times, the file's date keeps it.
            let t = now()
            let shown = { (ads: [AdRecord]) in
                Set(ads.filter { $0.state != .withdrawn && $0.finished(at: t) == nil }.compactMap(\.file))
            }
            for name in shown(index.ads).subtracting(shown(merged)) where AssetName.isValid(name) {
                _ = store.asset(name).touch()
            }
            index.ads = merged
            index.feed = feedState
            index.retryAfter = nil   // the server answered
            index.downloaded = (today, Self.downloadedToday(index, day: today) + received)
            index.reportUrl = feed.reportUrl
            // The clock of the accepted answer (SPEC §6): only now does the cache trust it.
            index.clockOffset = clock.offset
            index.clockSync = clock.offset == nil ? nil : clock.sync
            // The last signed feed belongs to the cache: an unsigned feed leaves it as it was.
            if let signed { index.signed = signed }
            let filesAfter = Set(merged.compactMap(\.file))
            // What an interrupted predecessor moved into assets/ and never committed (this
            // run holds the fetch lock): gone once past the grace, as prune would.
            if sweep { leftovers(Pruner.orphans(in: store, named: filesAfter.union(filesBefore))) }
            return Array(filesBefore.subtracting(filesAfter))
        }
    }
}

extension Fetcher {
    /// The shows of each ad id that the proof-of-play counts hold (90 days, SPEC §8), with
    /// those still in the journal: an ad listed again after its record went (pruned as expired
    /// by a clock set ahead, withdrawn and back) resumes its count, so that its `maxShows` and
    /// `maxShowsPerDay` are never exceeded.
    func readPastShows(today: Int) -> [String: (total: Int64, today: Int64)] {
        guard var log = try? store.loadEvents(warn: { _ in }, setAside: false) else { return [:] }
        let records = (try? store.journal.read(warn: { _ in }, deliveries: false)) ?? []
        log.fold(records, bounds: EventBounds(maxEvents: .max, maxAge: 36500), now: Double(today) * 86400)
        var out: [String: (total: Int64, today: Int64)] = [:]
        for (day, ads) in log.days {
            for (id, counts) in ads {
                var entry = out[id] ?? (0, 0)
                entry.total.add(counts.shows)
                if day == today { entry.today.add(counts.shows) }
                out[id] = entry
            }
        }
        return out
    }
}

/// The past shows a run reads once (events.json may be large; the plan and the commit both
/// ask), and only when the feed lists an ad the index does not hold.
struct PastShows {
    let today: Int
    let read: [String: (total: Int64, today: Int64)]

    init(_ fetcher: Fetcher, _ ads: [FeedAd], _ before: CacheIndex) {
        today = Time.localDay(fetcher.now())
        let known = Set(before.ads.map(\.id))
        read = ads.contains { !known.contains($0.id) } ? fetcher.readPastShows(today: today) : [:]
    }

    /// The counts for local day `day` (read again when the run crossed midnight).
    func counts(today day: Int, _ fetcher: Fetcher) -> [String: (total: Int64, today: Int64)] {
        day == today && !read.isEmpty ? read : fetcher.readPastShows(today: day)
    }
}
