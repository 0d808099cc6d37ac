#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif
#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

extension CacheStore {
    /// A fold's step for the queue: `log` takes `records` and its bounds as of `now`, and
    /// the ledger its lines first — appended and synced before the caller saves the queue,
    /// so that the queue never holds a record the ledger lacks (SPEC §14). When the ledger
    /// cannot take them (another user's ledger, a full disk), the queue takes nothing from
    /// the journal (only its bounds apply), with a warning: the records wait in the journal
    /// for a fold that can write the ledger, and `ledgerWaits` tells the caller to keep
    /// `journal.folding`. `changed`: the queue is to be saved.
    func foldIntoLedger(
        _ log: inout EventLog, records: [JournalRecord], bounds: EventBounds, now: Double, warn: WarningSink
    ) throws -> (changed: Bool, ledgerWaits: Bool) {
        guard let ledger else { return (log.fold(records, bounds: bounds, now: now), false) }
        var folded = log
        var entries: [LedgerEntry] = []
        let changed = folded.fold(records, bounds: bounds, now: now) { entries.append($0) }
        if !entries.isEmpty {
            do {
                guard ledger.isWritable else {
                    throw AdCacheError.cacheUnwritable(
                        "the ledger \(ledger.path) is not writable by this user; the fetching user's next fold takes them"
                    )
                }
                // A fold cut short before its queue was saved may have appended more lines than
                // this one makes (unrendered shows: at most those awaiting then, and the records).
                try ledger.append(entries, now: now, lookBack: log.awaiting.count + records.count)
            } catch let e as AdCacheError {
                let n = entries.count
                warn(
                    Diagnostic(
                        .report,
                        "\(n) show\(n == 1 ? "" : "s") and event\(n == 1 ? "" : "s") wait in the journal: \(e.message)"
                    ))
                return (log.bound(bounds, now: now), true)
            }
            CrashPoint.reach("fold.afterLedger")
        }
        log = folded
        return (changed, false)
    }
}

extension AdCache {
    /// The default `ledger-dir` (SPEC §14): `/var/lib/adcache` when it exists and this user
    /// can write it (the Debian package makes it the fetching user's), else
    /// `$XDG_DATA_HOME/adcache`, else `~/.local/share/adcache`.
    public static func defaultLedgerDirectory(environment: [String: String]) -> String {
        let system = "/var/lib/adcache"
        if access(system, W_OK) == 0 { return system }
        if let x = environment["XDG_DATA_HOME"], !x.isEmpty { return PathText.absolute(x) + "/adcache" }
        let home =
            environment["HOME"].flatMap { $0.isEmpty ? nil : $0 } ?? getpwuid(getuid()).map {
                String(cString: $0.pointee.pw_dir)
            } ?? "/"
        return PathText.join(home, ".local/share/adcache")
    }
}
