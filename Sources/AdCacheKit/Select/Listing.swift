#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

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
        let frozen = index.frozen(at: t)
        return index.ads.map { r in
            let state = r.state(at: t, local: local, filePresent: filePresent(r), frozen: frozen)
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
