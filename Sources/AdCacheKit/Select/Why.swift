#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// `adcache why`: every rule of eligibility per ad, and the ad `next` would choose (SPEC §4).
public struct WhyReport: Sendable {
    /// One rule of eligibility (SPEC §4 `next`), as one ad fares under it.
    public struct Rule: Sendable {
        /// The rule's name: `ready`, `start`, `expires`, `shows`, `maxShowsPerDay`,
        /// `minInterval`, `hours`, `days`, `placement`, `type`, `signature`, `rollout`.
        public var rule: String
        /// The ad passes it.
        public var pass: Bool
        /// The value it was judged on, for a person.
        public var detail: String
    }

    /// One ad and the rules that apply to it.
    public struct Ad: Sendable {
        /// The ad's id, as the feed gives it.
        public var id: String
        /// `next` could show it now: it passes every rule.
        public var eligible: Bool
        /// The rules that apply to it, in the order `next` checks them.
        public var rules: [Rule]
    }

    /// The ad `next` would show now, or nil.
    public var chosen: String?
    /// Why it beat the others, or why nothing is shown.
    public var reason: String
    /// Every ad of the index (or the one asked about), in the index's order.
    public var ads: [Ad] = []
}

extension Selector {
    /// Read-only: the index as `next` reads it, judged by the rules `next` uses
    /// (`SelectionPolicy.check`) and its choice (`SelectionPolicy.choose`).
    func why(_ options: NextOptions, id: String?, at moment: Moment) throws -> WhyReport {
        let index = try store.load(warn: warn)
        if let id, !index.ads.contains(where: { $0.id == id }) {
            throw AdCacheError.unknownAd("no ad '\(id)' in the cache")
        }
        let t = moment.resolve(index)
        let local = Time.local(t)
        let frozen = index.feed?.validUntil == nil ? nil : index.frozen(at: t)   // nil: not a signed feed
        var report = WhyReport(chosen: nil, reason: "")
        let device = index.ads.contains { $0.rollout != nil } ? store.knownDeviceId(proofOfPlay) : nil
        for r in index.ads where id == nil || r.id == id {
            var rules: [WhyReport.Rule] = []
            var eligible = SelectionPolicy.check(
                r, at: t, local: local, options: options, filePresent: store.filePresent(r), frozen: frozen
            ) { rules.append(.init(rule: $0, pass: $1, detail: $2)) }
            // A staged rollout (SPEC §13): judged by the fetch (an ad left out is withdrawn);
            // shown here with this device's value.
            if let percent = r.rollout {
                let value = device.flatMap { Fetcher.rolloutValue(device: $0, ad: r.id) }
                let taken = value.map { $0 < percent } ?? false
                rules.append(
                    .init(
                        rule: "rollout", pass: taken,
                        detail: value.map {
                            "this device's value \($0) \(taken ? "is under" : "is not under") \(percent)%"
                                + (taken ? "" : ": left out")
                        } ?? "this device has no id yet; rollout \(percent)%"))
                if !taken { eligible = false }
            }
            report.ads.append(.init(id: r.id, eligible: eligible, rules: rules))
        }
        if SelectionPolicy.coolingDown(index, at: t, options: options) {
            let ago = Int(abs(t - (index.lastShown ?? t)))
            report.reason =
                "cooldown: an ad was shown \(ago) s ago, less than --cooldown \(Int(options.cooldown ?? 0)) s"
            return report
        }
        guard
            let choice = SelectionPolicy.choose(in: index, at: t, options: options, filePresent: store.filePresent)
        else {
            report.reason = "no ad is eligible for placement '\(options.placement)'"
            return report
        }
        let ad = index.ads[choice.position]
        report.chosen = ad.id
        let peers = index.ads.filter {
            $0.priority == ad.priority && store.filePresent($0)
                && SelectionPolicy.isEligible($0, at: t, local: local, options: options)
        }
        if peers.count == 1 {
            report.reason = "the only eligible ad at the highest priority (\(ad.priority))"
        } else if choice.rotation != nil {
            let total = peers.reduce(Int64(0)) { $0 + $1.weight }
            report.reason =
                "priority \(ad.priority); a weighted rotation of \(peers.count) ads: weight \(ad.weight) of \(total), and its turn (the most credit)"
        } else {
            report.reason =
                "priority \(ad.priority); \(peers.count) ads of equal weight take turns: "
                + (ad.lastShown == nil ? "never shown yet" : "shown least recently")
        }
        return report
    }
}
