import Foundation

/// `adcache next`: which cached asset this launch shows, and the record of the show.
enum SelectionPolicy {
    /// Eligible (SPEC §4), apart from the file check, which the caller makes last because it
    /// costs a `stat`.
    static func isEligible(_ r: AdRecord, at t: Double, day: Int, options: NextOptions) -> Bool {
        guard r.placement == options.placement, options.type == nil || r.type == options.type else { return false }
        return r.state(at: t, day: day, filePresent: true) == .ready
    }

    /// The order of preference: highest priority; then least recently shown (never shown
    /// first; the show counter orders shows within one second); then soonest expiry; then id.
    static func prefers(_ a: AdRecord, _ b: AdRecord) -> Bool {
        if a.priority != b.priority { return a.priority > b.priority }
        let sa = a.lastShowSeq ?? 0, sb = b.lastShowSeq ?? 0
        if sa != sb { return sa < sb }
        let ea = a.expires ?? .infinity, eb = b.expires ?? .infinity
        if ea != eb { return ea < eb }
        return a.id < b.id
    }

    /// True when an ad was shown less than `--cooldown` ago (either way, if the clock jumped).
    static func coolingDown(_ index: CacheIndex, at t: Double, options: NextOptions) -> Bool {
        guard let cooldown = options.cooldown, let last = index.lastShown else { return false }
        return abs(t - last) < cooldown
    }

    /// The index (into `index.ads`) of the ad to show, or nil.
    static func choose(
        in index: CacheIndex, at t: Double, options: NextOptions,
        filePresent: (AdRecord) -> Bool
    ) -> Int? {
        let day = Time.localDay(t)
        var candidates = index.ads.indices.filter { isEligible(index.ads[$0], at: t, day: day, options: options) }
        candidates.sort { prefers(index.ads[$0], index.ads[$1]) }
        return candidates.first { filePresent(index.ads[$0]) }
    }
}

extension AdRecord {
    /// Counts one show at time `t`, as show number `seq` of the index.
    mutating func recordShow(at t: Double, seq: Int64) {
        shows = min(shows + 1, Self.counts.upperBound)
        lastShown = t
        lastShowSeq = seq
        let day = Time.localDay(t)
        showsOnDay = showsOn(day: day) + 1
        showDay = day
    }
}

final class Selector {
    let store: CacheStore
    let warn: WarningSink

    init(store: CacheStore, warn: @escaping WarningSink) {
        self.store = store
        self.warn = warn
    }

    /// The ad this launch shows, with the show recorded (unless `peek`) before returning.
    /// Never touches the network.
    func decide(_ options: NextOptions, at t: Double) throws -> NextResult {
        guard store.exists, FileIO.exists(store.indexPath) else { return .nothingEligible }
        func pick(_ index: CacheIndex) -> Int? {
            SelectionPolicy.choose(in: index, at: t, options: options, filePresent: store.filePresent)
        }
        if options.peek {
            let index = try store.load(warn: warn)
            if SelectionPolicy.coolingDown(index, at: t, options: options) { return .coolingDown }
            return pick(index).map { .show(shown(index.ads[$0])) } ?? .nothingEligible
        }
        do {
            return try store.update(warn: warn) { index in
                if SelectionPolicy.coolingDown(index, at: t, options: options) { return .coolingDown }
                guard let i = pick(index) else { return .nothingEligible }
                index.showSeq = min(index.showSeq + 1, AdRecord.counts.upperBound)
                index.ads[i].recordShow(at: t, seq: index.showSeq)
                index.lastShown = t
                return .show(shown(index.ads[i]))
            }
        } catch let e as AdCacheError {
            // A launch never fails for want of disk space (SPEC §4): a full disk or a
            // read-only cache still shows the choice; only the record of the show is lost.
            switch e {
            case .io, .cacheUnwritable:
                warn(Diagnostic(.cache, "show not recorded: \(e.message)"))
                var peek = options
                peek.peek = true
                return try decide(peek, at: t)
            default:
                throw e
            }
        }
    }

    private func shown(_ r: AdRecord) -> ShownAd {
        ShownAd(
            id: r.id, path: store.assetPath(r.file!), type: r.type, placement: r.placement, duration: r.duration,
            clickUrl: r.clickUrl, remainingShows: r.remainingShows,
            expires: r.expires.map(Date.init(timeIntervalSince1970:)),
            priority: r.priority, meta: r.meta)
    }
}
