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

/// `adcache prune`: delete what can no longer be shown, then evict to a size budget.
///
/// The order keeps the cache truthful through a crash at any instant: the new index is
/// committed first, and only then are the files it no longer names deleted (a crash in
/// between leaves orphans, never a record naming a missing file). Files nobody names
/// (orphans, stale partial downloads) are swept only while prune holds the fetch lock, so a
/// fetch can neither be mid-way through moving a download into place nor start meanwhile;
/// and not at all while the index is being recovered, whose files a rebuild may reuse.
final class Pruner {
    let store: CacheStore
    let warn: WarningSink
    /// Where a never-shown VAST ad's `notUsed` is queued when it goes (SPEC §10).
    var proofOfPlay: AdCache.ProofOfPlay?

    init(store: CacheStore, warn: @escaping WarningSink, proofOfPlay: AdCache.ProofOfPlay? = nil) {
        self.store = store
        self.warn = warn
        self.proofOfPlay = proofOfPlay
    }

    func run(_ options: PruneOptions, at moment: Moment) throws -> PruneReport {
        var report = PruneReport(dryRun: options.dryRun)
        guard store.exists else { return report }
        // Held for the whole run when free; a running fetch keeps its files.
        let fetchLock = FileLock(store.fetchLockFile)
        let sweep = try fetchLock.tryLock()
        if sweep { fetchLock.writeOwner() }
        defer { fetchLock.unlock() }

        var diskFull = false   // the index went in by `commit`'s other ways
        let doomed: [CacheFile] = try store.withIndexLock {
            let indexExisted = store.indexFile.exists
            let loaded = try store.loadLocked(warn: warn)
            var index = loaded.index
            let t = moment.resolve(index)
            let plan = try plan(&index, at: t, options: options, report: &report)
            // What no record of either index names goes first, before the commit: it needs no
            // write, so a full disk frees that much whatever else fails.
            var unnamed: [CacheFile] = []
            if sweep && indexExisted && !loaded.recovered {
                unnamed += orphans(named: Set(index.ads.compactMap(\.file)).union(plan.names), report: &report)
            }
            if sweep { unnamed += try stalePartials(index, report: &report) }
            unnamed += temporaries(report: &report)
            unnamed += setAside(report: &report)
            if !options.dryRun {
                for file in unnamed { file.remove() }
                if !unnamed.isEmpty { store.dir.sync(.assets) }
                if index != loaded.index {
                    diskFull = try commit(index, deleting: plan.files)
                } else {
                    store.refreshDigest()   // an index an older adcache wrote gets its digest
                }
                queueNotUsed(gone: loaded.index.ads, kept: index.ads, evicted: plan.evicted, at: t)
            }
            CrashPoint.reach("prune.afterSave")
            return plan.files + unnamed
        }
        if !options.dryRun {
            for file in doomed where file.exists {
                file.remove()
                CrashPoint.reach("prune.afterDelete")
            }
            if !doomed.isEmpty { store.dir.sync(.assets) }
            if diskFull { try? store.withIndexLock { store.refreshDigest() } }
            store.keepReserve()   // made, or made again once a full disk has room for it
        }
        report.bytesFreed = report.removed.reduce(0) { $0 + $1.bytes }
        let gone = Set(doomed)
        report.bytesKept = store.dir.list(.assets).map(store.asset).filter { !gone.contains($0) }
            .reduce(Int64(0)) { $0 + ($1.size ?? 0) }
        return report
    }

    /// Commits `index`, on a full disk too (SPEC §6 v4: `prune --max-size` gets space back
    /// even when nothing can be written first). When the index does not fit, it is written
    /// into the reserve's blocks (`saveIntoReserve`), and the order of §4 holds: the files
    /// go after the commit. Without a reserve that holds it, what no commit needs goes first
    /// (the reserve, the previous generation, the selection digest) and, if that is not
    /// enough, the files this prune deletes anyway (`files`): the one case where a crash before
    /// the commit would leave records naming files that are gone — ads `missing` until the
    /// next fetch brings their files back. Returns true when the disk was full.
    private func commit(_ index: CacheIndex, deleting files: [CacheFile]) throws -> Bool {
        do {
            try store.save(index)
            return false
        } catch AdCacheError.io(let message) {
            let bytes = try IndexCoder.encode(index)
            guard store.lacksRoom(for: bytes.count) else { throw AdCacheError.io(message) }
            if store.saveIntoReserve(bytes) { return true }
            for file in [store.reserveFile, store.oldIndexFile, store.digestFile] { file.remove() }
            store.dir.sync(.top)
            if (try? store.save(index)) != nil { return true }
            let first = files.filter(\.exists)
            guard !first.isEmpty else { throw AdCacheError.io(message) }
            warn(
                Diagnostic(
                    .cache,
                    "the disk is full and the cache has no reserve: deleted \(first.count) file\(first.count == 1 ? "" : "s") before writing the index that stops naming them"
                ))
            for file in first {
                file.remove()
                CrashPoint.reach("prune.deletedFirst")
            }
            store.dir.sync(.assets)
            try store.save(index)
            return true
        }
    }

    /// `notUsed` for each VAST ad the commit deleted (expired) or evicted without its ever
    /// being shown, under the journal lock (prune already holds the index lock; a launch takes
    /// only this). An evicted ad keeps its record, dated `notUsedAt`: once, not at every
    /// eviction after a fetch brought it back.
    private func queueNotUsed(gone before: [AdRecord], kept: [AdRecord], evicted: [AdRecord], at t: Double) {
        guard let pop = proofOfPlay else { return }
        let left = Set(kept.map(\.id))
        let records =
            (before.filter { $0.state != .withdrawn && !left.contains($0.id) } + evicted).flatMap {
                Fetcher.notUsed($0, pop, at: t)
            }
        store.queue(records, what: "notUsed", warn: warn)
    }

    /// Ads that can never be shown again go; an exhausted ad the feed still lists keeps its
    /// record without a file (its count is not forgotten, nor is it downloaded again); then,
    /// over the budget, files are evicted. Returns the asset paths to delete after the commit.
    private func plan(_ index: inout CacheIndex, at t: Double, options: PruneOptions, report: inout PruneReport) throws
        -> (files: [CacheFile], names: Set<String>, evicted: [AdRecord])
    {
        let local = Time.local(t)
        var kept: [AdRecord] = []
        var dropped: [(AdRecord, String)] = []
        let frozen = index.frozen(at: t)
        for var r in index.ads {
            let state = r.state(at: t, local: local, filePresent: true, frozen: frozen)
            switch state {
            case .expired where r.finished(at: t) == nil:
                kept.append(r)   // frozen by its signed feed's validUntil: a newer feed may bring it back
            case .withdrawn, .expired:
                dropped.append((r, state.rawValue))
            case .exhausted:
                dropped.append((r, state.rawValue))
                r.forgetFile()
                kept.append(r)
            default:
                kept.append(r)
            }
        }
        var removed = Set<String>()
        var evicted: [AdRecord] = []
        // A file a launch may have printed stays at least 10 minutes after the index stopped
        // naming it (SPEC §6), whatever the reason; sooner only on a file system under 5% free.
        let spaceLow = store.spaceIsLow
        let realNow = Date().timeIntervalSince1970
        /// Deleted now, or `held`: its record goes, the file stays dated now, an orphan the
        /// sweep deletes once the grace has passed. `unnamedSince`: when, on the cache's clock,
        /// the record stopped being showable (its expiry, its last show); nil when that is
        /// not known (withdrawn, evicted). Past the grace by that, and by the file's date on the
        /// real clock too: a commit that ends an ad (a feed moving its expiry back, a
        /// withdrawal) dates the file, so a path a launch just printed is never taken sooner.
        func remove(_ name: String, id: String?, reason: String, unnamedSince: Double?) {
            removed.insert(name)
            let bytes = store.asset(name).size ?? 0
            let mtime = store.asset(name).stamp.map { Double($0.mtime) / 1e9 }
            let byRecord = reason == "withdrawn" || unnamedSince.map { t - $0 >= Self.supersededGrace } == true
            let byFile = mtime.map { realNow - $0 >= Self.supersededGrace } == true
            if spaceLow || (reason != "evicted" && byRecord && byFile) {
                report.removed.append(.init(id: id, reason: reason, file: name, bytes: bytes))
            } else {
                report.removed.append(.init(id: id, reason: reason, file: nil, bytes: 0, heldFile: name))
                if !options.dryRun { _ = store.asset(name).touch() }
            }
        }
        let stillUsed = Set(kept.compactMap(\.file))
        for (r, reason) in dropped {
            if let f = r.file, AssetName.isValid(f), !stillUsed.contains(f), !removed.contains(f) {
                // Since when no launch can have printed it: its expiry, its last show, or
                // (withdrawn) the commit that withdrew it, which dated the file.
                let since = reason == "expired" ? r.expires : reason == "exhausted" ? r.lastShown : nil
                remove(f, id: r.id, reason: reason, unnamedSince: since)
            } else {
                report.removed.append(.init(id: r.id, reason: reason, file: nil, bytes: 0))
            }
        }

        if let budget = options.maxSize {
            // A file ranks as the best ad that uses it: one shared with a better ad is never
            // evicted for a worse one. Scheduled ads rank like ready ones.
            var best: [String: AdRecord] = [:]
            for r in kept {
                guard let f = r.file else { continue }
                if let b = best[f], !Self.keepsBefore(r, b) { continue }
                best[f] = r
            }
            // The files the index keeps (orphans are swept, or are a running fetch's).
            var total = best.keys.filter { !removed.contains($0) }
                .reduce(Int64(0)) { $0 + (store.asset($1).size ?? 0) }
            for (name, ad) in best.sorted(by: { Self.keepsBefore($1.value, $0.value) }) where total > budget {
                let bytes = store.asset(name).size ?? 0
                remove(name, id: ad.id, reason: "evicted", unnamedSince: nil)
                total -= bytes
            }
            for i in kept.indices {
                guard let f = kept[i].file, removed.contains(f) else { continue }
                if kept[i].notUsedAt == nil, kept[i].owesNotUsed {
                    evicted.append(kept[i])
                    kept[i].notUsedAt = t
                }
                kept[i].forgetFile()
                if kept[i].state == .ready { kept[i].state = .pending }
            }
        }
        index.ads = kept
        let deleted = Set(report.removed.compactMap(\.file))
        return (removed.filter(deleted.contains).map(store.asset), removed, evicted)
    }

    /// The eviction order, reversed: true when `a` is kept in preference to `b` (higher
    /// priority, then later expiry, then more recently shown, then id).
    static func keepsBefore(_ a: AdRecord, _ b: AdRecord) -> Bool {
        if a.priority != b.priority { return a.priority > b.priority }
        let ea = a.expires ?? .infinity
        let eb = b.expires ?? .infinity
        if ea != eb { return ea > eb }
        let sa = a.lastShowSeq ?? 0
        let sb = b.lastShowSeq ?? 0
        if sa != sb { return sa > sb }
        return a.id < b.id
    }

    /// Files in `assets/` that no record names (left by a crash, or by another version).
    /// How long a file no record names stays: a launch may have printed it just before the
    /// commit that superseded it (SPEC §6: at least 10 minutes).
    static let supersededGrace: Double = 600

    /// Only asset names are ever deleted in `assets/` (SPEC §6), and none dated within the
    /// grace (on the real clock either way: a clock set back never keeps a file for good).
    private func orphans(named: Set<String>, report: inout PruneReport) -> [CacheFile] {
        Self.orphans(in: store, named: named, graceUnlessLow: true).map { file in
            report.removed.append(.init(id: nil, reason: "orphan", file: file.name, bytes: file.size ?? 0))
            return file
        }
    }

    /// The asset files no record names and past the grace: what prune sweeps, and what a
    /// fetch sweeps after its commit (downloads a killed fetch moved into place and never
    /// committed). The caller holds the fetch lock and an index that is not being recovered.
    /// `graceUnlessLow`: none is kept on a file system under 5% free (SPEC §6), as after a
    /// crash between a full disk's commit and its deletions.
    static func orphans(in store: CacheStore, named: Set<String>, graceUnlessLow: Bool = false) -> [CacheFile] {
        let now = Date().timeIntervalSince1970
        let grace = !(graceUnlessLow && store.spaceIsLow) ? supersededGrace : 0
        let named = named.union(store.loadUncommitted().compactMap(\.file))   // the next fetch's
        return store.dir.list(.assets).filter { AssetName.isValid($0) && !named.contains($0) }.compactMap { name in
            let file = store.asset(name)
            if let stamp = file.stamp, abs(now - Double(stamp.mtime) / 1e9) < grace { return nil }
            return file
        }
    }

    /// Partial downloads no ad waits for: one for the URL of an ad the index keeps stays, also
    /// when that ad has a file (a new version of it, resumable).
    private func stalePartials(_ index: CacheIndex, report: inout PruneReport) throws -> [CacheFile] {
        let wanted = Set(try index.ads.map { try SHA256Hasher.hex($0.url) })
        return store.dir.list(.partial).filter { !wanted.contains(String($0.prefix(64))) }.map { name in
            let file = store.partial(name)
            report.removed.append(.init(id: nil, reason: "partial", file: "partial/" + name, bytes: file.size ?? 0))
            return file
        }
    }

    /// Files `verify` set aside as damaged (`<name>.bad-<time>`), kept for inspection until now.
    private func setAside(report: inout PruneReport) -> [CacheFile] {
        store.dir.list(.assets).filter(CacheStore.isSetAside).map { name in
            let file = store.asset(name)
            report.removed.append(.init(id: nil, reason: "damaged", file: name, bytes: file.size ?? 0))
            return file
        }
    }

    /// Temporaries of index writers that died (writes happen under the index lock, held here).
    private func temporaries(report: inout PruneReport) -> [CacheFile] {
        let names: Set = [
            "index.json.tmp", "index.json.old.tmp", "\(SelectionDigest.fileName).tmp", "\(EventLog.fileName).tmp",
            "reserve.tmp",
        ]
        return store.dir.list(.top).filter(names.contains).map { name in
            let file = store.dir.file(name)
            report.removed.append(.init(id: nil, reason: "temporary", file: name, bytes: file.size ?? 0))
            return file
        }
    }
}

extension CacheStore {
    /// The file system that holds the cache has less than 5% of its space free: `prune` then
    /// deletes at once what the grace would keep (SPEC §6).
    var spaceIsLow: Bool {
        var fs = statvfs()
        guard statvfs(directory, &fs) == 0, fs.f_blocks > 0 else { return false }
        return Double(fs.f_bavail) < 0.05 * Double(fs.f_blocks)
    }
}
