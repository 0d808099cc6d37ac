import Foundation

/// `adcache prune`: delete what can no longer be shown, then evict to a size budget.

final class Pruner {
    let store: CacheStore
    let warn: WarningSink

    init(store: CacheStore, warn: @escaping WarningSink) {
        self.store = store
        self.warn = warn
    }

    func run(_ options: PruneOptions, at t: Double) throws -> PruneReport {
        var report = PruneReport(dryRun: options.dryRun)
        guard store.exists else { return report }
        let day = Time.localDay(t)
        // A running fetch may have moved a finished download into assets/ that it has not
        // committed yet, and owns the files in partial/: leave both alone while it runs.
        let fetchRunning = store.fetchIsRunning()

        let work = { (index: inout CacheIndex) throws in
            var removedFiles = Set<String>()
            // `name` is read from the index (only an asset's name is ever deleted: never a
            // path a corrupt index names) or listed from assets/ (`listed`).
            func dropFile(_ name: String, id: String?, reason: String, listed: Bool = false) {
                guard listed || AssetName.isValid(name), !removedFiles.contains(name) else { return }
                removedFiles.insert(name)
                let bytes = FileIO.size(self.store.assetPath(name)) ?? 0
                report.removed.append(.init(id: id, reason: reason, file: name, bytes: bytes))
            }

            // 1. Ads that can never be shown again.
            var kept: [AdRecord] = []
            var dropped: [(AdRecord, String)] = []
            for var r in index.ads {
                let state = r.state(at: t, day: day, filePresent: true)
                switch state {
                case .withdrawn, .expired:
                    dropped.append((r, state.rawValue))
                case .exhausted:
                    // The record stays, without its file, while the feed lists the ad, so
                    // that its show count is not forgotten and it is not downloaded again.
                    dropped.append((r, state.rawValue))
                    r.forgetFile()
                    kept.append(r)
                default:
                    kept.append(r)
                }
            }
            let stillUsed = Set(kept.compactMap(\.file))
            for (r, reason) in dropped {
                if let f = r.file, !stillUsed.contains(f) {
                    dropFile(f, id: r.id, reason: reason)
                } else {
                    report.removed.append(.init(id: r.id, reason: reason, file: nil, bytes: 0))
                }
            }

            // 2. Files the index does not know.
            if !fetchRunning {
                for name in FileIO.list(self.store.assetsDirectory) where !stillUsed.contains(name) {
                    dropFile(name, id: nil, reason: "orphan", listed: true)
                }
            }

            // 3. Over the budget: evict ready ads, lowest priority, soonest expiry, least
            //    recently shown first, until assets/ fits.
            if let budget = options.maxSize {
                var total: Int64 = 0
                var sizes: [String: Int64] = [:]
                for name in FileIO.list(self.store.assetsDirectory) where !removedFiles.contains(name) {
                    let s = FileIO.size(self.store.assetPath(name)) ?? 0
                    sizes[name] = s
                    total += s
                }
                let order = kept.indices.filter { kept[$0].file != nil }.sorted { a, b in
                    let x = kept[a], y = kept[b]
                    if x.priority != y.priority { return x.priority < y.priority }
                    let ex = x.expires ?? .infinity, ey = y.expires ?? .infinity
                    if ex != ey { return ex < ey }
                    return (x.lastShowSeq ?? 0) < (y.lastShowSeq ?? 0)
                }
                for i in order where total > budget {
                    guard let name = kept[i].file, !removedFiles.contains(name) else { continue }
                    dropFile(name, id: kept[i].id, reason: "evicted")
                    total -= sizes[name] ?? 0
                }
                for i in kept.indices {
                    if let f = kept[i].file, removedFiles.contains(f) {
                        kept[i].forgetFile()
                        if kept[i].state == .ready { kept[i].state = .pending }
                    }
                }
            }
            index.ads = kept

            // 4. Partial downloads no fetch will resume, and temporaries of dead writers
            //    (index writes happen under the index lock, which we hold).
            if !fetchRunning {
                let wanted = Set(try kept.filter { $0.file == nil }.map { try SHA256Hasher.hex($0.url) })
                for name in FileIO.list(self.store.partialDirectory) {
                    let hash = String(name.prefix(64))
                    guard !wanted.contains(hash) else { continue }
                    let bytes = FileIO.size(self.store.partialDirectory + "/" + name) ?? 0
                    report.removed.append(.init(id: nil, reason: "partial", file: "partial/" + name, bytes: bytes))
                    if !options.dryRun { FileIO.remove(self.store.partialDirectory + "/" + name) }
                }
            }
            for name in FileIO.list(self.store.directory) where name.hasPrefix("index.json.tmp") {
                report.removed.append(
                    .init(
                        id: nil, reason: "temporary", file: name,
                        bytes: FileIO.size(self.store.directory + "/" + name) ?? 0))
                if !options.dryRun { FileIO.remove(self.store.directory + "/" + name) }
            }

            if !options.dryRun {
                for name in removedFiles { FileIO.remove(self.store.assetPath(name)) }
            }
            report.bytesFreed = report.removed.reduce(0) { $0 + $1.bytes }
            report.bytesKept = FileIO.list(self.store.assetsDirectory)
                .filter { !removedFiles.contains($0) }
                .reduce(Int64(0)) { $0 + (FileIO.size(self.store.assetPath($1)) ?? 0) }
        }

        if options.dryRun {
            var index = try store.load(warn: warn)
            try store.withIndexLock { try work(&index) }
        } else {
            try store.update(warn: warn, work)
            if !report.removed.isEmpty { FileIO.syncDirectory(store.assetsDirectory) }
        }
        return report
    }
}
