/// The states `list` shows (SPEC §4), derived from the stored state, the clock and the file.
public enum AdState: String, Sendable, CaseIterable {
    case ready, scheduled, expired, exhausted, withdrawn, pending, failed, missing
}

extension AdRecord {
    /// What a person should see for this ad at time `t`. `filePresent` says whether its file
    /// is in `assets/` with its recorded size.
    func displayState(at t: Double, filePresent: Bool) -> AdState {
        if state == .withdrawn { return .withdrawn }
        if let e = expires, e <= t { return .expired }
        if let m = maxShows, shows >= m { return .exhausted }
        switch state {
        case .pending: return .pending
        case .failed: return .failed
        default: break
        }
        if !filePresent { return .missing }
        if let s = start, s > t { return .scheduled }
        return .ready
    }
}

extension CacheStore {
    /// True when the record's file is in `assets/` with its recorded size and modification
    /// time: the very file that was validated and committed. (A crash between moving a new
    /// version of an asset into place and committing the index leaves a file this record
    /// does not describe: it counts as missing until the next fetch.)
    func filePresent(_ r: AdRecord) -> Bool {
        guard let file = r.file, AssetName.isValid(file), let bytes = r.bytes,
              let s = FileIO.stamp(assetPath(file)) else { return false }
        return s.size == bytes && (r.fileMtime == nil || r.fileMtime == s.mtime)
    }
}
