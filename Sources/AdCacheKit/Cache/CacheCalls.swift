#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

// `AdCache.prune`, `verify`, `list` and `clear`, what they take and what they return.

extension AdCache {
    /// Deletes what can no longer be shown, then evicts to `options.maxSize`.
    /// On a full disk, what needs no write goes first and a fold that cannot be written
    /// waits (with a warning): a prune is never a reason to free nothing.
    public func prune(_ options: PruneOptions = PruneOptions()) throws -> PruneReport {
        var postponed = false
        if store.exists, !options.dryRun {
            do {
                try fold()
            } catch AdCacheError.io(let why) {
                configuration.diagnostics(Diagnostic(.report, "the journal was not folded (\(why)); it waits"))
                postponed = true
            }
        }
        let report = try Pruner(
            store: store, warn: configuration.diagnostics, proofOfPlay: configuration.proofOfPlay
        ).run(options, at: moment)
        if postponed, report.bytesFreed > 0 { try? fold() }   // now that there is room
        return report
    }

    /// Checks every recorded file's size and SHA-256; a damaged one is moved aside and its
    /// ad becomes `missing` until the next fetch downloads it again. Never touches the network.
    public func verify() throws -> VerifyReport {
        try store.verify(warn: configuration.diagnostics)
    }

    /// Every ad the cache knows, with its state now.
    public func list() throws -> [ListedAd] {
        try store.listing(at: moment, warn: configuration.diagnostics)
    }

    /// Removes every cached ad and file (the directory stays); returns how many files went.
    /// The event queue and the counts stay (billing data), unless `events`.
    public func clear(events: Bool = false) throws -> Int {
        let moment = moment
        let pop = configuration.proofOfPlay
        let warn = configuration.diagnostics
        return try store.clear(events: events) {
            try store.foldJournalLocked(bounds: pop.bounds, now: { moment.trusted($0) }, warn: warn)
        }
    }
}

/// What `prune` may remove.
public struct PruneOptions: Sendable {
    /// Then evict ready ads until `assets/` holds at most this many bytes.
    public var maxSize: Int64?
    /// Say what would be removed; remove nothing.
    public var dryRun = false

    /// Options for `prune`: by default, remove what can no longer be shown, and evict nothing.
    public init(maxSize: Int64? = nil, dryRun: Bool = false) {
        self.maxSize = maxSize
        self.dryRun = dryRun
    }
}

/// What `prune` removed.
public struct PruneReport: Sendable {
    /// One thing removed (or, in a dry run, that would be): an ad's record, its file, or both.
    public struct Removed: Sendable {
        /// The ad's id; nil for a file no ad names (an orphan or a stale partial download).
        public var id: String?
        /// expired, exhausted, withdrawn, evicted, orphan, partial, damaged, temporary.
        public var reason: String
        /// The file deleted: a name in `assets/`, `partial/<name>`, or an index writer's
        /// temporary in the cache directory. Nil when no file went now: another ad still uses
        /// it, the ad had none, or it is held for the grace (`heldFile`).
        public var file: String?
        /// The size of `file` in bytes; 0 when no file was deleted.
        public var bytes: Int64
        /// The file its record named, kept for the grace (SPEC §6: a launch may have printed
        /// it in the last 10 minutes); a later `prune` deletes it.
        public var heldFile: String?

        init(id: String?, reason: String, file: String?, bytes: Int64, heldFile: String? = nil) {
            self.id = id
            self.reason = reason
            self.file = file
            self.bytes = bytes
            self.heldFile = heldFile
        }
    }

    /// What went, in the order prune decided it: records and their files first, then evictions
    /// to `maxSize`, then files no record names.
    public var removed: [Removed] = []
    /// The bytes of the files deleted (with `dryRun`, that would be): the sum of `removed`'s.
    public var bytesFreed: Int64 = 0
    /// Nothing was removed: the report says what a real run would remove.
    public var dryRun: Bool
    /// Bytes in `assets/` afterwards.
    public var bytesKept: Int64 = 0
}

/// One ad as `list` shows it.
public struct ListedAd: Sendable {
    /// The ad's id, as the feed gives it.
    public var id: String
    /// The asset's absolute URL.
    public var url: String
    /// Image or video; nil until known (the feed gave no type and nothing was downloaded yet).
    public var type: AdType?
    /// Where the ad shows (`splash` unless the feed says otherwise).
    public var placement: String
    /// Its state now (SPEC §4 `list`): the first of `AdState`'s that applies.
    public var state: AdState
    /// Shows so far.
    public var shows: Int64
    /// Nil is unlimited.
    public var maxShows: Int64?
    /// The feed's `priority`: higher is shown first.
    public var priority: Int64
    /// Not shown before this time; nil is at once.
    public var start: Date?
    /// Not shown from this time on; nil is never.
    public var expires: Date?
    /// When it was last shown; nil when never.
    public var lastShown: Date?
    /// Nil until downloaded.
    public var bytes: Int64?
    /// The asset's absolute path; nil until downloaded.
    public var path: String?
    /// Why the last fetch failed for this ad; also set while an older file still serves
    /// (state `ready`).
    public var error: String?
    /// For a `resting` ad: when it can next be shown, if within a week.
    public var restingUntil: Date?
}
