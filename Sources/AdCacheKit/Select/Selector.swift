#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// Now, as a command evaluates it (SPEC §6 *Clock trust*).
enum Moment: Sendable {
    /// The device clock, corrected by the offset the last fetch measured against the feed
    /// server's `Date`.
    case device(Double, bootClock: Bool = false)
    /// Exactly this time (`--at`): taken as given.
    case given(Double)

    func resolve(_ index: CacheIndex) -> Double {
        switch self {
        case .device(let t, let boot):
            return ClockSync.corrected(t, offset: index.clockOffset, sync: index.clockSync, bootClock: boot)
        case .given(let t): return t
        }
    }

    /// The real time, corrected, even under `--at`: what bounds real data (the queue's age
    /// and overflow, the 90 days of counts). A preview of another date never drops them.
    func trusted(_ index: CacheIndex) -> Double {
        switch self {
        case .device: return resolve(index)
        case .given: return Moment.device(Date().timeIntervalSince1970, bootClock: true).resolve(index)
        }
    }
}

/// `adcache next`: which cached asset this launch shows, and the record of the show.
enum SelectionPolicy {
    /// Eligible (SPEC §4), apart from the file check, which the caller makes last because it
    /// costs a `stat`.
    static func isEligible(_ r: AdRecord, at t: Double, local: LocalTime, options: NextOptions) -> Bool {
        check(r, at: t, local: local, options: options, filePresent: true, frozen: nil, explain: nil)
    }

    /// The rules of eligibility (SPEC §4 `next`), in one place: `next` asks whether an ad
    /// passes them all (stopping at the first that fails, building no text), `why` asks for
    /// each rule's verdict and detail (`explain`). `filePresent` and `frozen` come from the
    /// caller (a `stat`; whether the signed feed's `validUntil` has passed, nil for a feed
    /// that is not signed — `choose` checks it once for every ad).
    static func check(
        _ r: AdRecord, at t: Double, local: LocalTime, options: NextOptions, filePresent: Bool, frozen: Bool?,
        explain: ((_ rule: String, _ pass: Bool, _ detail: String) -> Void)?
    ) -> Bool {
        var eligible = true
        /// False when the walk may stop (no explanation asked for and a rule failed).
        func rule(_ name: String, _ pass: Bool, _ detail: @autoclosure () -> String) -> Bool {
            if !pass { eligible = false }
            explain?(name, pass, detail())
            return pass || explain != nil
        }
        func when(_ x: Double?) -> String { x.map { Time.format($0) } ?? "none" }
        let ready = r.state != .withdrawn && r.state == .ready && r.file != nil && filePresent
        guard
            rule(
                "ready", ready,
                r.state == .withdrawn
                    ? "withdrawn: the feed no longer lists it"
                    : r.state == .pending
                        ? "not downloaded yet"
                        : r.state == .failed
                            ? "the download failed: \(r.error ?? "")"
                            : ready ? "downloaded, \(ByteSize.human(r.bytes ?? 0))" : "its file is missing"),
            rule("placement", r.placement == options.placement, "\(r.placement) (asked: \(options.placement))"),
            rule(
                "type", options.type == nil || r.type == options.type,
                "\(r.type?.rawValue ?? "unknown")" + (options.type.map { " (asked: \($0.rawValue))" } ?? "")),
            rule("start", (r.start ?? -.infinity) <= t, r.start.map { "starts \(when($0))" } ?? "no start"),
            rule(
                "expires", r.finished(at: t) != .expired,
                r.expires.map { $0 <= t ? "expired \(when($0))" : "expires \(when($0))" } ?? "never"),
            rule(
                "shows", r.maxShows.map { r.shows < $0 } ?? true,
                r.maxShows.map { "\(r.shows) of \($0) shown" } ?? "\(r.shows) shown, no limit")
        else { return false }
        if let frozen {
            guard
                rule(
                    "signature", !frozen,
                    (frozen ? "the signed feed's validUntil has passed" : "its signed feed is still valid")
                        + (r.vast != nil && r.sha256 == nil
                            ? "; a VAST ad: its file is signed by URL only, not its bytes" : ""))
            else { return false }
        }
        if let cap = r.maxShowsPerDay {
            guard
                rule("maxShowsPerDay", r.showsOn(day: local.day) < cap, "\(r.showsOn(day: local.day)) of \(cap) today")
            else { return false }
        }
        if let interval = r.minInterval {
            let since = r.lastShown.map { abs(t - $0) }
            guard
                rule(
                    "minInterval", since.map { $0 >= Double(interval) } ?? true,
                    since.map { "last shown \(Int($0)) s ago; needs \(interval) s" } ?? "never shown")
            else { return false }
        }
        if !r.schedule.isAlways {
            // A window that crosses midnight belongs to the day it starts on: hours and days
            // are one rule when both are given.
            let text = [
                r.schedule.hoursText.map { "hours " + $0.joined(separator: ", ") },
                r.schedule.daysText.map { "days " + $0.joined(separator: ", ") },
            ].compactMap { $0 }.joined(separator: "; ")
            guard
                rule(
                    r.schedule.windows.isEmpty ? "days" : "hours", r.schedule.allows(local),
                    "\(text) (now \(Format.padded(local.minute / 60, width: 2)):\(Format.padded(local.minute % 60, width: 2)), \(Schedule.dayNames[(local.weekday % 7 + 7) % 7]))"
                )
            else { return false }
        }
        return eligible
    }

    /// The order among equal weights: least recently shown (never shown first; the show
    /// counter orders shows within one second); then soonest expiry; then id.
    static func prefers(_ a: AdRecord, _ b: AdRecord) -> Bool {
        let sa = a.lastShowSeq ?? 0
        let sb = b.lastShowSeq ?? 0
        if sa != sb { return sa < sb }
        let ea = a.expires ?? .infinity
        let eb = b.expires ?? .infinity
        if ea != eb { return ea < eb }
        return a.id < b.id
    }

    /// True when an ad was shown less than `--cooldown` ago (either way, if the clock jumped).
    static func coolingDown(_ index: CacheIndex, at t: Double, options: NextOptions) -> Bool {
        guard let cooldown = options.cooldown, let last = index.lastShown else { return false }
        return abs(t - last) < cooldown
    }

    /// The ad to show: its position in `index.ads` and, in a weighted rotation, the rotation
    /// the show advances. (A type of its own, not a tuple: a launch that drops an optional
    /// labelled tuple has the Swift runtime build its type from its mangled name, 40,000
    /// instructions.)
    struct Choice {
        var position: Int
        var rotation: (key: String, signature: String)?
    }

    /// The ad to show; nil when none. The highest priority with an eligible ad whose file is
    /// there; among those, by weight.
    static func choose(
        in index: CacheIndex, at t: Double, options: NextOptions, filePresent: (AdRecord) -> Bool
    ) -> Choice? {
        guard !index.frozen(at: t) else { return nil }   // a signed feed past its validUntil
        let local = Time.local(t)
        // The eligible ads in the index's order; the highest priority's first. No sort: the
        // order within a group is `prefers`, a total order, so the first of a group is found
        // in one pass (and a sort would look up Int's Comparable conformance at every launch).
        var remaining = index.ads.indices.filter { isEligible(index.ads[$0], at: t, local: local, options: options) }
        while let priority = remaining.lazy.map({ index.ads[$0].priority }).max() {
            let group = remaining.filter { index.ads[$0].priority == priority }
            remaining.removeAll { index.ads[$0].priority == priority }
            let weight = index.ads[group[0]].weight
            if group.allSatisfy({ index.ads[$0].weight == weight }) {
                // Equal weights rotate strictly: the first in order whose file is there.
                if let i = firstPresent(index, group, filePresent: filePresent) { return Choice(position: i) }
            } else {
                let present = group.filter { filePresent(index.ads[$0]) }
                if !present.isEmpty {
                    let key = options.rotationKey
                    let (i, signature) = rotate(index, present, key: key)
                    return Choice(position: i, rotation: (key, signature))
                }
            }
        }
        return nil
    }

    /// The first of `group` in `prefers`' order whose file is there. Files are checked from
    /// the first on, as the launch needs them; after a few missing ones the rest is sorted.
    static func firstPresent(_ index: CacheIndex, _ group: [Int], filePresent: (AdRecord) -> Bool) -> Int? {
        var left = group
        for _ in 0..<8 {
            guard var best = left.indices.first else { return nil }
            for k in left.indices.dropFirst() where prefers(index.ads[left[k]], index.ads[left[best]]) { best = k }
            if filePresent(index.ads[left[best]]) { return left[best] }
            left.remove(at: best)
        }
        return left.sorted { prefers(index.ads[$0], index.ads[$1]) }.first { filePresent(index.ads[$0]) }
    }

    /// Smooth weighted round-robin (as nginx balances upstreams): every ad gains its weight
    /// in credit, the one with the most is shown and pays the total back. Over any run of
    /// shows with the same ads and weights, each ad stays within one show of its weighted
    /// share; ties go as equal weights do (`prefers`). When the set of ads or their weights
    /// changes, the rotation starts over.
    ///
    /// After `rounds` shows an ad's credit is `rounds × weight − total × picks`, so the index
    /// keeps two numbers, not every credit, and a show recorded in the journal is replayed
    /// by counting it (`CacheIndex.apply`). Returns the ad and the set's signature.
    static func rotate(_ index: CacheIndex, _ group: [Int], key: String) -> (Int, String) {
        let signature = digest(group.map { "\(index.ads[$0].id)\u{0}\(index.ads[$0].weight)" }.sorted())
        let rotation = index.rotations[key].flatMap { $0.signature == signature && $0.rounds < 1 << 40 ? $0 : nil }
        let rounds = (rotation?.rounds ?? 0).adding(1)
        let total = group.reduce(Int64(0)) { $0.adding(index.ads[$1].weight) }
        var best = group[0]
        var bestCredit = Int64.min
        for i in group {
            let ad = index.ads[i]
            let picks = rotation != nil && ad.pickEpoch == rotation!.epoch ? ad.picks ?? 0 : 0
            let credit = rounds.times(ad.weight).subtracting(total.times(picks))
            if credit > bestCredit || (credit == bestCredit && prefers(ad, index.ads[best])) {
                best = i
                bestCredit = credit
            }
        }
        return (best, signature)
    }

    /// FNV-1a, 64 bits, of the lines: a cheap fingerprint (next loads no libcrypto).
    static func digest(_ lines: [String]) -> String {
        var h: UInt64 = 0xcbf2_9ce4_8422_2325
        for line in lines {
            for b in line.utf8 {
                h ^= UInt64(b)
                h = h &* 0x100_0000_01b3
            }
            h ^= 0x0A
            h = h &* 0x100_0000_01b3
        }
        return String(h, radix: 16)
    }
}

extension NextOptions {
    /// Which weighted rotation a call belongs to.
    var rotationKey: String { placement + "|" + (type?.rawValue ?? "*") }
}

extension AdRecord {
    /// Counts one show at time `t` on local day `day`, as show number `seq` of the index.
    mutating func recordShow(at t: Double, day: Int, seq: Int64) {
        shows = min(shows + 1, Self.counts.upperBound)
        lastShown = t
        lastShowSeq = seq
        showsOnDay = showsOn(day: day).adding(1)
        showDay = max(day, showDay ?? day)
    }
}

final class Selector {
    let store: CacheStore
    let warn: WarningSink
    let proofOfPlay: AdCache.ProofOfPlay

    init(store: CacheStore, proofOfPlay: AdCache.ProofOfPlay, warn: @escaping WarningSink) {
        self.store = store
        self.proofOfPlay = proofOfPlay
        self.warn = warn
    }

    /// The ad this launch shows, with the show recorded (unless `peek`) before returning.
    /// Never touches the network.
    func decide(_ options: NextOptions, at moment: Moment) throws -> NextResult {
        guard store.exists, store.indexFile.exists || store.oldIndexFile.exists else {
            return .nothingEligible
        }
        if options.peek {
            let loaded = try store.load(warn: warn, forSelection: true)
            let t = moment.resolve(loaded.index)
            if SelectionPolicy.coolingDown(loaded.index, at: t, options: options) { return .coolingDown }
            guard
                let choice = SelectionPolicy.choose(
                    in: loaded.index, at: t, options: options, filePresent: store.filePresent)
            else { return .nothingEligible }
            var ad = loaded.index.ads[choice.position]
            loaded.complete(&ad, at: choice.position)
            return .show(shown(ad))
        }
        do {
            // The show and its impression: one line appended to the journal, under the
            // journal's lock — a few hundred bytes whatever the size of the index (SPEC §7,
            // §8). The index is read for the choice only; the chosen record is then read whole.
            // The index is read before the lock (at 10,000 ads most of a launch's time): the
            // lock covers the journal and the choice, so concurrent launches wait for each
            // other milliseconds, not the index's reading; and it is not the index lock, so
            // no fold or commit makes a launch wait.
            var early = store.snapshotForSelection()
            let journal = store.journal
            let result: NextResult = try journal.withLock(timeout: store.lockTimeout) {
                let loaded = try store.loadLocked(early: &early, warn: warn, forSelection: true)
                let index = loaded.index
                let t = moment.resolve(index)
                if SelectionPolicy.coolingDown(index, at: t, options: options) { return .coolingDown }
                guard
                    let choice = SelectionPolicy.choose(
                        in: index, at: t, options: options, filePresent: store.filePresent)
                else { return .nothingEligible }
                // The chosen record alone is completed and counted (the index is not changed
                // here: copying 10,000 records under the lock is what launches would wait for).
                var ad = index.ads[choice.position]
                loaded.complete(&ad, at: choice.position)
                // In render mode counted as a show only: the impression (its trackers, its place
                // in a batch, a VAST start) waits for the launcher (SPEC §8), so none is made.
                var record =
                    options.render
                    ? proofOfPlay.renderRecord(of: ad, at: t)
                    : proofOfPlay.record("impression", of: ad, at: t, reportUrl: index.reportUrl)
                let seq = min(index.showSeq + 1, AdRecord.counts.upperBound)
                record.seq = seq
                record.rotationKey = choice.rotation?.key
                record.rotationSignature = choice.rotation?.signature
                try journal.append(record)
                ad.recordShow(at: t, day: record.day, seq: seq)   // as the index will count it
                var shown = shown(ad)
                shown.show = record.nonce
                return .show(shown)
            }
            if case .show = result { foldIfLong(at: moment) }
            return result
        } catch let e as AdCacheError {
            // A launch never fails for want of disk space (SPEC §4): a full disk or a
            // read-only cache still shows the choice; only the record of the show is lost.
            switch e {
            case .io, .cacheUnwritable:
                warn(Diagnostic(.cache, "show not recorded: \(e.message)"))
                var peek = options
                peek.peek = true
                return try decide(peek, at: moment)
            case .busy:
                // Nor for a lock another command holds past its second: the choice from the
                // index as it is on disk (never torn: it is only replaced whole).
                warn(Diagnostic(.cache, "show not recorded: cache busy (journal.lock is held)"))
                var peek = options
                peek.peek = true
                return try decide(peek, at: moment)
            default:
                throw e
            }
        }
    }

    /// A device that never runs fetch, report or prune would grow the journal, and the cost
    /// of every launch with it: past `store.journalFoldSize` this launch folds it (the show is
    /// already recorded; a fold that fails is a warning). Only when the index lock is free:
    /// a command that holds it folds, or is about to.
    private func foldIfLong(at moment: Moment) {
        guard store.journal.size > store.journalFoldSize else { return }
        do {
            _ = try store.withIndexLock(timeout: 0) {
                try store.foldJournalLocked(bounds: proofOfPlay.bounds, now: { moment.trusted($0) }, warn: warn)
            }
        } catch AdCacheError.busy {
            return
        } catch let e as AdCacheError {
            warn(Diagnostic(.cache, "the journal could not be folded: \(e.message)"))
        } catch {
            warn(Diagnostic(.cache, "the journal could not be folded: \(error)"))
        }
    }

    private func shown(_ r: AdRecord) -> ShownAd {
        ShownAd(
            id: r.id, path: store.assetPath(r.file ?? ""), type: r.type, placement: r.placement, duration: r.duration,
            skipOffset: r.vast?.skipOffset, startQueued: r.vast != nil && r.type == .video, clickUrl: r.clickUrl,
            remainingShows: r.remainingShows,
            expires: r.expires.map(Date.init(timeIntervalSince1970:)),
            priority: r.priority, meta: r.meta,
            progress: r.tracking.keys.compactMap(VASTTrackers.progressOffset).sorted().map { Double($0) / 1000 })
    }
}
