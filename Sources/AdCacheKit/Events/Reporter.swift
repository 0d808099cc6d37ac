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
        case tracker(nonce: String, url: String, position: Int)
        case batch(nonces: [String])

        var count: Int {
            switch self {
            case .tracker: return 1
            case .batch(let nonces): return nonces.count
            }
        }

        func outcome(delivered: Bool?) -> DeliveryOutcome {
            switch self {
            case .tracker(let nonce, let url, let position):
                return DeliveryOutcome(nonces: [nonce], url: url, position: position, delivered: delivered)
            case .batch(let nonces): return DeliveryOutcome(nonces: nonces, url: nil, delivered: delivered)
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

        // A server that asked for no requests before a time (429/503 Retry-After, SPEC §12)
        // is left alone until then: what goes to its origin stays queued.
        let t = now(index)
        let held = store.reportRetryAfter.flatMap { $0.until > t && $0.until - t <= RetryAfter.cap ? $0 : nil }
        if let held {
            warn(
                Diagnostic(
                    .report,
                    "the report server \(held.origin) asked for no requests before \(Time.formatLocal(held.until))"))
        }
        func allowed(_ url: String) -> Bool { held == nil || Fetcher.origin(url) != held?.origin }
        var deliveries: [Delivery] = []
        var requests: [TransferRequest] = []
        for e in log.queue {
            for (position, url) in e.trackers.enumerated() where !e.done.contains(position) && allowed(url) {
                deliveries.append(.tracker(nonce: e.nonce, url: url, position: position))
                requests.append(TransferRequest(url: url, destination: .discard, maxBytes: .max))
            }
        }
        // What an earlier run began but never finished (killed mid-flight) goes last, so
        // that runs killed early over and over never send the same deliveries each time.
        var attempts: [String: Int] = [:]
        for o in store.deliveryLog.read() where o.delivered == nil { attempts[o.key, default: 0] += 1 }
        if !attempts.isEmpty {   // the fewest attempts first, then in queue order
            let keys = deliveries.map { $0.outcome(delivered: nil).key }
            let order = deliveries.indices.sorted { a, b in
                let ta = attempts[keys[a]] ?? 0, tb = attempts[keys[b]] ?? 0
                return ta != tb ? ta < tb : a < b
            }
            deliveries = order.map { deliveries[$0] }
            requests = order.map { requests[$0] }
        }
        var result = ReportResult()
        let batched = log.queue.filter(\.batch)
        if let reportUrl, allowed(reportUrl) {
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
            // Queued for a report URL that is not configured nor in the feed now (a feed that
            // briefly omits it): they wait for one, counted as pending, never dropped.
            warn(
                Diagnostic(
                    .report,
                    "no report URL is configured or in the feed; \(batched.count) batched events stay queued"))
        }

        // What became of each delivery is appended to events.delivered as it finishes (one
        // write, no rewrite of the queue), so a run killed at any moment re-sends, next time,
        // only what was in flight; the last step writes the queue with it applied.
        let progress = store.deliveryLog.openForAppending()
        defer { if progress >= 0 { close(progress) } }
        var done: [DeliveryOutcome] = []
        var told: RetryAfter?
        var settings = settings
        settings.retryAfterEndsAttempts = true   // remembered for the next runs instead
        let engine = TransferEngine(settings: settings)
        engine.onStart = { i in DeliveryLog.append(deliveries[i].outcome(delivered: nil), to: progress) }
        engine.run(requests) { i, response in
            CrashPoint.reach("report.afterAnswer")
            let outcome: Bool
            if let error = response.error {
                if case .httpStatus(let status) = error, [429, 503].contains(status), case .batch = deliveries[i],
                    let after = response.retryAfter, let origin = reportUrl.flatMap(Fetcher.origin)
                {
                    told = RetryAfter(origin: origin, until: t + min(after, RetryAfter.cap))
                }
                if case .httpStatus(let status) = error, (300...399).contains(status),
                    case .tracker = deliveries[i]
                {
                    outcome = true   // a tracker's 2xx or 3xx final answer delivers
                } else if error.disposition == .permanent {   // a batch: only a 2xx delivers it
                    warn(Diagnostic(.report, "dropping \(describe(deliveries[i])): \(error)"))
                    outcome = false
                } else {
                    result.lastError = "\(describe(deliveries[i])): \(error)"
                    return   // stays queued
                }
            } else {
                outcome = true
            }
            let o = deliveries[i].outcome(delivered: outcome)
            done.append(o)
            if outcome { result.delivered += deliveries[i].count } else { result.dropped += deliveries[i].count }
            DeliveryLog.append(o, to: progress)
            CrashPoint.reach("report.afterLogged")
        }
        result.pending = try record(done)
        if let told {
            try? store.reportRetryAfterFile.writeAtomically(Array("\(told.origin) \(Int64(told.until))\n".utf8))
        } else if held == nil, store.reportRetryAfterFile.exists {
            store.reportRetryAfterFile.remove()   // passed, or the server answered
        }
        return result
    }

    /// Takes finished deliveries out of the queue as it is now (a fetch or prune may have
    /// folded more events in meanwhile), writes it, and empties events.delivered; returns
    /// the deliveries left.
    private func record(_ done: [DeliveryOutcome]) throws -> Int {
        try store.withIndexLock {
            var log = try store.loadEvents(warn: warn, setAside: true)   // events.delivered applied
            log.apply(done)   // what could not be appended (idempotent for the rest)
            try store.saveEvents(log)
            CrashPoint.reach("report.afterSave")
            store.deliveryLog.file.remove()
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
        case .tracker(_, let url, _): return "the tracker \(url)"
        case .batch(let nonces): return "a report of \(nonces.count) events"
        }
    }
}

extension CacheStore {
    /// `report.retry-after`: the report server's "no requests before" (SPEC §12), as
    /// `ORIGIN UNIX-TIME`; written and read under the report lock.
    var reportRetryAfterFile: CacheFile { dir.file("report.retry-after") }

    var reportRetryAfter: RetryAfter? {
        guard let bytes = try? reportRetryAfterFile.read(limit: 4096) else { return nil }
        let parts = String(decoding: bytes, as: UTF8.self).split(whereSeparator: \.isWhitespace)
        guard parts.count == 2, let t = Double(parts[1]), Time.isSupported(t) else { return nil }
        return RetryAfter(origin: String(parts[0]), until: t)
    }
}
