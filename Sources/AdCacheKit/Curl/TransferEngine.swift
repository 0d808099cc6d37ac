import CCurl

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

/// Runs transfers through libcurl's multi interface: up to `parallel` at once, each streamed
/// to memory or to its file, transient failures retried with exponential back-off and jitter
/// (honouring `Retry-After`), everything abandoned at the deadline.
final class TransferEngine {
    let settings: TransferSettings
    var onProgress: ((FetchProgress) -> Void)?
    /// Called as request `i` is handed to libcurl (the first time; not for retries).
    var onStart: ((Int) -> Void)?

    init(settings: TransferSettings) {
        self.settings = settings
    }

    private struct Waiting {
        var index: Int
        var attempt: Int
        var notBefore: Double
    }

    /// Carries out `requests`; `completion` is called once per request, on this thread,
    /// as each finishes (in completion order).
    func run(_ requests: [TransferRequest], completion: (Int, TransferResponse) -> Void) {
        // The loop takes its completion boxed: given the closure itself, the optimiser copies
        // the whole loop into each caller with that caller's closure inlined (six copies,
        // ~100 KB of a binary SPEC §7 caps at 16 MB). The completion runs once per finished
        // transfer, never per byte.
        withoutActuallyEscaping(completion) { run(requests, CompletionBox($0)) }
    }

    /// A completion the run loop calls through (see `run(_:completion:)`).
    private final class CompletionBox {
        let call: (Int, TransferResponse) -> Void
        init(_ call: @escaping (Int, TransferResponse) -> Void) { self.call = call }
    }

    @inline(never)
    private func run(_ requests: [TransferRequest], _ box: CompletionBox) {
        let completion = box.call
        guard !requests.isEmpty else { return }
        let loaded = CurlAPI.shared
        guard case .success(let api) = loaded, let multi = api.multiInit() else {
            var r = TransferResponse()
            if case .failure(let e) = loaded {
                r.error = .other(e.message)
            } else {
                r.error = .other("cannot start libcurl")
            }
            for i in requests.indices { completion(i, r) }
            return
        }
        defer { _ = api.multiCleanup(multi) }
        adc_multi_setopt_long(api.multiSetopt, multi, CURLMOPT_MAXCONNECTS, max(settings.parallel, 4))

        // Two queues: the requests not begun, in order (a head index, no O(n) removal: a report
        // may hold 10,000), and the retries, each due at its own time (few).
        var fresh = 0
        var waiting: [Waiting] = []
        var active: [UnsafeMutableRawPointer: EasyTransfer] = [:]
        var doneCount = 0
        var finishedBytes: Int64 = 0   // received in this run by finished attempts
        var finishedSizes: Int64 = 0   // the whole files of finished transfers
        var begun = Set<Int>()
        let started = monotonicNow()
        var lastProgress = 0.0

        func report(force: Bool = false, finished: (String, Int64)? = nil) {
            guard let onProgress else { return }
            let now = monotonicNow()
            guard force || now - lastProgress >= 0.1 else { return }
            lastProgress = now
            let received = finishedBytes + active.values.reduce(0) { $0 + $1.received }
            let bytes = finishedSizes + active.values.reduce(0) { $0 + $1.resumedFrom + $1.received }
            var total: Int64? = finishedSizes
            if begun.count < requests.count { total = nil }
            for t in active.values { total = total.flatMap { sum in t.expectedSize.map { sum + $0 } } }
            let elapsed = now - started
            onProgress(
                FetchProgress(
                    bytes: bytes, totalBytes: total, done: doneCount, total: requests.count, elapsed: elapsed,
                    rate: elapsed > 0 ? Double(received) / elapsed : 0, finished: finished))
        }

        func complete(_ index: Int, _ response: TransferResponse) {
            doneCount += 1
            finishedSizes += response.error == nil ? response.fileBytes : 0
            completion(index, response)
            if response.error == nil, !response.notModified {
                report(force: true, finished: (requests[index].url, response.fileBytes))
            }
        }

        /// A transfer libcurl is done with (`code`): completed, or queued for a retry.
        func finished(_ h: UnsafeMutableRawPointer, _ t: EasyTransfer, _ code: CURLcode) {
            active[h] = nil
            _ = api.multiRemove(multi, h)
            let response = t.finish(code)
            finishedBytes += t.received
            if let delay = retryDelay(response, attempt: t.attempt, request: t.request) {
                waiting.append(Waiting(index: t.index, attempt: t.attempt + 1, notBefore: monotonicNow() + delay))
            } else {
                complete(t.index, response)
            }
        }

        // --limit-rate: the transfers the bucket paused are resumed in turn while it has
        // tokens (each resumed one takes its piece at once, and may pause again).
        var turn = 0
        func resumePaused(_ limiter: RateLimiter) {
            let paused = active.filter { $0.value.isPaused }.sorted { $0.value.index < $1.value.index }
            guard !paused.isEmpty else { return }
            var k = 0
            while k < paused.count, limiter.hasTokens {
                let (h, t) = paused[(turn + k) % paused.count]
                k += 1
                let code = t.resume()
                if code != CURLE_OK { finished(h, t, code) }   // its write callback failed it
            }
            turn += k   // the next resumes where this one stopped
        }

        while fresh < requests.count || !waiting.isEmpty || !active.isEmpty {
            let now = monotonicNow()
            let stop: TransferError? =
                settings.isCancelled?() == true
                ? .interrupted : settings.deadline.map { now >= $0 ? TransferError.deadline : nil } ?? nil
            if let stop {
                for (h, t) in active {
                    _ = api.multiRemove(multi, h)
                    var r = t.response
                    r.error = stop
                    complete(t.index, t.abandon(r))
                }
                active.removeAll()
                for index in waiting.map(\.index) + Array(requests.indices[fresh...]) {
                    var r = TransferResponse()
                    r.error = stop
                    complete(index, r)
                }
                waiting.removeAll()
                fresh = requests.count
                break
            }

            // Start what may start.
            var i = 0
            while active.count < settings.parallel {
                let w: Waiting
                if i < waiting.count {   // retries first, when due
                    guard waiting[i].notBefore <= now else { i += 1; continue }
                    w = waiting.remove(at: i)
                } else if fresh < requests.count {
                    w = Waiting(index: fresh, attempt: 0, notBefore: 0)
                    fresh += 1
                } else {
                    break
                }
                guard
                    let t = EasyTransfer(
                        api: api, request: requests[w.index], index: w.index, attempt: w.attempt, settings: settings)
                else {
                    var r = TransferResponse()
                    r.error = .other("cannot start libcurl")
                    complete(w.index, r)
                    continue
                }
                if let refused = t.refusedOption {
                    // Never run a transfer without an option it needs (a protocol restriction
                    // that an old libcurl ignored would let a redirect reach ftp:// or file://).
                    var r = TransferResponse()
                    r.error = .libcurlRefused(refused)
                    complete(w.index, r)
                    continue
                }
                active[t.handle] = t
                if begun.insert(w.index).inserted { onStart?(w.index) }
                _ = api.multiAdd(multi, t.handle)
            }

            if let limiter = settings.rateLimiter { resumePaused(limiter) }
            var running: Int32 = 0
            _ = api.multiPerform(multi, &running)

            var queued: Int32 = 0
            var finishedAny = false
            while let msg = api.multiInfoRead(multi, &queued) {
                guard msg.pointee.msg == CURLMSG_DONE, let h = msg.pointee.easy_handle, let t = active[h] else {
                    continue
                }
                finishedAny = true
                finished(h, t, msg.pointee.data.result)
            }
            report()

            // Sleep until something happens, a retry is due, or the deadline comes; not at
            // all when a slot just freed and a transfer is waiting for it.
            if finishedAny && fresh < requests.count { continue }
            let later = monotonicNow()
            var timeout = 100.0
            if active.count < settings.parallel, let due = waiting.map(\.notBefore).min() {
                timeout = min(timeout, max(0, (due - later) * 1000))
            }
            if let deadline = settings.deadline {
                timeout = min(timeout, max(0, (deadline - later) * 1000))
            }
            if let limiter = settings.rateLimiter, active.values.contains(where: \.isPaused) {
                timeout = min(timeout, (limiter.delay() * 1000).rounded(.up))   // the bucket refills
            }
            if timeout < 1 { continue }
            if !active.isEmpty {
                _ = api.multiPoll(multi, nil, 0, Int32(timeout), nil)
            } else if !waiting.isEmpty || fresh < requests.count {
                usleep(useconds_t(timeout * 1000))
            }
        }
        report(force: true)
    }

    /// When to try again, or nil to give up: transient failures only, within `retries`,
    /// exponential back-off with jitter up to `maxWait`, `Retry-After` honoured (one longer
    /// than `maxWait` gives up for this run), never past the deadline. A 416 to a resume
    /// starts over at once.
    func retryDelay(_ r: TransferResponse, attempt: Int, request: TransferRequest) -> Double? {
        guard let error = r.error else { return nil }
        if case .httpStatus(416) = error, case .file(let partial) = request.destination, attempt == 0 {
            partial.discard()   // our resume point is past the end: start over at once
            return 0
        }
        guard error.isTransient, attempt < settings.retries else { return nil }
        var delay = min(settings.maxWait, settings.retryBaseDelay * pow(2, Double(min(attempt, 30))))
        delay *= Double.random(in: 0.5...1.0)
        if let after = r.retryAfter {
            guard after <= settings.maxWait, !settings.retryAfterEndsAttempts else { return nil }
            delay = max(delay, after)
        }
        if let deadline = settings.deadline, monotonicNow() + delay >= deadline { return nil }
        return delay
    }
}
