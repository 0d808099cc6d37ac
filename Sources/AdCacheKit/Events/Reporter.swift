import Foundation

/// `adcache report` (and the first step of `fetch`): delivers the queued events through the
/// transfer engine — one GET per tracker URL, batches of up to 500 events POSTed to the
/// report URL — and records what became of each delivery (SPEC §8).
final class Reporter {
    static let batchSize = 500

    let store: CacheStore
    let proofOfPlay: AdCache.ProofOfPlay
    let warn: WarningSink
    /// Now (the corrected clock, as the index says).
    let now: (CacheIndex) -> Double

    init(
        store: CacheStore, proofOfPlay: AdCache.ProofOfPlay, now: @escaping (CacheIndex) -> Double,
        warn: @escaping WarningSink
    ) {
        self.store = store
        self.proofOfPlay = proofOfPlay
        self.now = now
        self.warn = warn
    }

    /// One delivery: a tracker URL of one event, or a batch of events.
    private enum Delivery {
        case tracker(nonce: String, url: String)
        case batch(nonces: [String])

        var count: Int {
            switch self {
            case .tracker: return 1
            case .batch(let nonces): return nonces.count
            }
        }
    }

    /// Folds the journal, delivers what is queued, and records the outcome. Another report
    /// running on the same cache is `busy`.
    func run(_ settings: TransferSettings) throws -> ReportResult {
        guard store.exists else { return ReportResult() }
        let lock = FileLock(store.dir.file("report.lock"))
        guard try lock.tryLock() else { throw AdCacheError.busy("another report is running; try again later") }
        defer { lock.unlock() }

        let (log, index) = try store.foldJournal(bounds: proofOfPlay.bounds, now: now, warn: warn)
        guard !log.queue.isEmpty else { return ReportResult() }
        _ = try CurlAPI.shared.get()
        let reportUrl = proofOfPlay.reportUrl ?? index.reportUrl

        var deliveries: [Delivery] = []
        var requests: [TransferRequest] = []
        for e in log.queue {
            for url in e.trackers {
                deliveries.append(.tracker(nonce: e.nonce, url: url))
                requests.append(TransferRequest(url: url, destination: .discard, maxBytes: .max))
            }
        }
        var result = ReportResult()
        var droppedBatch = Set<String>()
        let batched = log.queue.filter(\.batch)
        if let reportUrl {
            var start = 0
            while start < batched.count {
                let chunk = batched[start..<min(start + Self.batchSize, batched.count)]
                start += Self.batchSize
                deliveries.append(.batch(nonces: chunk.map(\.nonce)))
                var request = TransferRequest(url: reportUrl, destination: .discard, maxBytes: .max)
                request.postBody = body(chunk)
                request.headers = ["Content-Type: application/json"]
                requests.append(request)
            }
        } else if !batched.isEmpty {
            // Queued for a report URL that is no longer configured nor in the feed.
            droppedBatch = Set(batched.map(\.nonce))
            warn(
                Diagnostic(
                    .report, "no report URL is configured or in the feed; dropping \(batched.count) batched events"))
        }

        // What became of each delivery is recorded as the run goes (every second, or less
        // often when a long queue makes a record slow) and at the end, so a run killed
        // part-way re-sends, next time, only what it had not recorded yet.
        var done: [(Delivery, Bool)] = []
        var lastRecord = monotonicNow()
        var recordEvery = 1.0   // grows with the time a record takes (a long queue)
        var recordError: Error?
        TransferEngine(settings: settings).run(requests) { i, response in
            CrashPoint.reach("report.afterAnswer")
            if let error = response.error {
                if case .httpStatus(let status) = error, (300...399).contains(status) {
                    done.append((deliveries[i], true))   // any 2xx or 3xx final answer delivers
                } else if !error.isTransient && error != .deadline && error != .interrupted {
                    warn(Diagnostic(.report, "dropping \(describe(deliveries[i])): \(error)"))
                    done.append((deliveries[i], false))
                }
            } else {
                done.append((deliveries[i], true))
            }
            if monotonicNow() - lastRecord >= recordEvery, !done.isEmpty, recordError == nil {
                let started = monotonicNow()
                do {
                    try record(done, droppedBatch: [], into: &result)
                    done.removeAll()
                    CrashPoint.reach("report.afterRecord")
                } catch {
                    recordError = error
                }
                lastRecord = monotonicNow()
                recordEvery = max(1, 10 * (lastRecord - started))
            }
        }
        if let recordError { throw recordError }
        result.pending = try record(done, droppedBatch: droppedBatch, into: &result)
        return result
    }

    /// Takes finished deliveries out of the queue as it is now (a fetch or prune may have
    /// folded more events in meanwhile) and counts them; returns the deliveries left.
    @discardableResult
    private func record(_ done: [(Delivery, Bool)], droppedBatch: Set<String>, into result: inout ReportResult)
        throws -> Int
    {
        try store.withIndexLock {
            var log = try store.loadEvents(warn: warn, setAside: true)
            var trackersDone: [String: Set<String>] = [:]
            var batchDone = droppedBatch
            var delivered = 0, dropped = droppedBatch.count
            for (delivery, ok) in done {
                switch delivery {
                case .tracker(let nonce, let url): trackersDone[nonce, default: []].insert(url)
                case .batch(let nonces): batchDone.formUnion(nonces)
                }
                if ok { delivered += delivery.count } else { dropped += delivery.count }
            }
            log.delivered.add(Int64(delivered))
            log.droppedPermanent.add(Int64(dropped))
            for i in log.queue.indices {
                let nonce = log.queue[i].nonce
                if let urls = trackersDone[nonce] { log.queue[i].trackers.removeAll { urls.contains($0) } }
                if batchDone.contains(nonce) { log.queue[i].batch = false }
            }
            log.queue.removeAll { $0.pending == 0 }
            try store.saveEvents(log)
            result.delivered += delivered
            result.dropped += dropped
            return Int(log.pending)
        }
    }

    /// `{"device": …, "events": [{"id", "event", "at", "nonce"}, …]}`.
    private func body(_ events: ArraySlice<QueuedEvent>) -> [UInt8] {
        var w = JSONWriter(indent: nil, capacity: 64 + events.count * 120)
        w.beginObject()
        w.key("device")
        if let d = proofOfPlay.deviceId { w.string(d) } else { w.null() }
        w.key("events")
        w.beginArray()
        for e in events {
            w.key(nil)
            w.beginObject()
            w.field("id", e.id)
            w.field("event", e.event)
            w.field("at", Time.formatMillis(e.at))
            w.field("nonce", e.nonce)
            w.endObject()
        }
        w.endArray()
        w.endObject()
        return w.out
    }

    private func describe(_ d: Delivery) -> String {
        switch d {
        case .tracker(_, let url): return "the tracker \(url)"
        case .batch(let nonces): return "a report of \(nonces.count) events"
        }
    }
}
