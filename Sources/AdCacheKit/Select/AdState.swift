/// The states `list` shows (SPEC §4), derived from the stored state, the clock and the file.
public enum AdState: String, Sendable, CaseIterable {
    /// Downloaded, its file present, and showable now.
    case ready
    /// Its `start` is still to come.
    case scheduled
    /// Showable, but not now: today's cap reached, `minInterval` not passed since its last
    /// show, or outside its `hours` and `days` (`ListedAd.restingUntil` says until when).
    case resting
    /// Its `expires` has passed: never shown again.
    case expired
    /// Every show its `maxShows` allows was used: never shown again.
    case exhausted
    /// The feed no longer lists it (or a staged rollout leaves this device out): never shown
    /// again; `prune` deletes it.
    case withdrawn
    /// Not downloaded yet.
    case pending
    /// No usable file, and the last attempt to download it failed (`error` says why).
    case failed
    /// Its file is gone (or `verify` set it aside as damaged): the next fetch downloads it
    /// again.
    case missing
}

/// The one place that decides whether an ad can be shown: `next` shows only `ready` ads,
/// `list` prints the state, `fetch` downloads nothing `finished`, `prune` deletes it.
extension AdRecord {
    /// Why this ad can never be shown again, if it cannot: past its `expires`, or every show
    /// used (`maxShows: 0` included). A clock set back never undoes a count.
    func finished(at t: Double) -> AdState? {
        if let e = expires, e <= t { return .expired }
        if let m = maxShows, shows >= m { return .exhausted }
        return nil
    }

    /// Showable, but not now: today's cap reached, `minInterval` not passed since the last
    /// show (either way, if the clock jumped), or outside its `hours` and `days`.
    func resting(at t: Double, local: LocalTime) -> Bool {
        if let cap = maxShowsPerDay, showsOn(day: local.day) >= cap { return true }
        if let interval = minInterval, let last = lastShown, abs(t - last) < Double(interval) { return true }
        return !schedule.isAlways && !schedule.allows(local)
    }

    /// When a resting ad can next be shown: the first moment within a week at which no rest
    /// rule holds (the end of `minInterval`, a local midnight, the start of a window), or nil.
    /// Midnights are reckoned from `t`'s offset, so near a DST change this is a hint.
    func restsUntil(after t: Double, local: LocalTime) -> Double? {
        var candidates: [Double] = []
        if let interval = minInterval, let last = lastShown { candidates.append(max(last, t) + Double(interval)) }
        let midnight = (t / 60).rounded(.down) * 60 - Double(local.minute) * 60
        for d in 0...7 {
            let day = midnight + Double(d) * 86400
            candidates.append(day)
            candidates += schedule.windows.map { day + Double($0.start) * 60 }
        }
        return candidates.filter { $0 > t }.sorted().first { !resting(at: $0, local: Time.local($0)) }
    }

    /// The state at `t` (`local`: the wall clock then), the first that applies of: withdrawn,
    /// expired, exhausted, failed, pending, missing, scheduled, resting, ready.
    /// `filePresent` says whether its file is in `assets/` as committed; `frozen`, that the
    /// signed feed it came from is past its `validUntil` (`CacheIndex.frozen`): it is then
    /// `expired` — but not `finished`, so that `prune` keeps it for a newer signed feed.
    func state(at t: Double, local: LocalTime, filePresent: Bool, frozen: Bool = false) -> AdState {
        if state == .withdrawn { return .withdrawn }
        if let done = finished(at: t) { return done }
        if frozen { return .expired }
        switch state {
        case .pending: return .pending
        case .failed: return .failed
        default: break
        }
        if !filePresent || file == nil { return .missing }
        if let s = start, s > t { return .scheduled }
        if resting(at: t, local: local) { return .resting }
        return .ready
    }
}

extension CacheStore {
    /// True when the record's file is in `assets/` with its recorded size (SPEC §4): what a
    /// launch and `list` check. A file whose time changed (`touch`, `cp -r`, tar without
    /// times) is still shown; `fetch` re-hashes it (`fileUnchanged`) and `verify` checks it.
    func filePresent(_ r: AdRecord) -> Bool {
        guard let file = r.file, AssetName.isValid(file), let bytes = r.bytes, let size = asset(file).size else {
            return false
        }
        return size == bytes
    }

    /// True when the record's file also has its recorded modification time: the very file
    /// that was validated and committed, with no need to hash it again.
    func fileUnchanged(_ r: AdRecord) -> Bool {
        guard let file = r.file, AssetName.isValid(file), let bytes = r.bytes, let s = asset(file).stamp else {
            return false
        }
        return s.size == bytes && (r.fileMtime == nil || r.fileMtime == s.mtime)
    }

    /// True when the record's file is still the one it names: unchanged, or with its size
    /// and a new time (a backup restore, an rsync without -t) and, hashed again, its recorded
    /// SHA-256 — then `r` takes the file's new time, so that the next check needs no hash.
    func confirmFile(_ r: inout AdRecord) -> Bool {
        if fileUnchanged(r) { return true }
        guard let file = r.file, AssetName.isValid(file), let digest = r.fileSha256, let stamp = asset(file).stamp,
            stamp.size == r.bytes, SHA256Hasher.hex(of: asset(file)) == digest
        else { return false }
        r.fileMtime = stamp.mtime
        return true
    }
}
