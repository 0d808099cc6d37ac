/// `--limit-rate`: one token bucket for every transfer of a run — the feed, its VAST
/// documents, the assets and the report step's deliveries (SPEC §4: at most SIZE bytes per
/// second in all). libcurl's own limiter (`CURLOPT_MAX_RECV_SPEED_LARGE`, 7.88) reads a whole
/// socket buffer before it paces, and knows nothing of the other transfers: a 200 KiB file at
/// 20K came in 5 s, four 10 KiB files at 4K in 0.05 s. So a limited transfer asks the bucket
/// before each piece of body it is handed (`EasyTransfer`'s paced write callback): while the
/// bucket is in debt it returns `CURL_WRITEFUNC_PAUSE` (libcurl keeps that piece and stops
/// reading the socket, so the server is held back by TCP itself), and the engine resumes the
/// paused transfers in turn once the bucket has refilled (`TransferEngine`).
///
/// The arithmetic: the bucket starts empty and tokens accrue at `rate` a second up to
/// `capacity` (a 50th of a second's worth: what a pause of the whole run saves up); a piece is
/// taken whole whenever the bucket is not in debt, which may take it up to one piece into
/// debt. So the bytes delivered in any window of `w` seconds are at most
/// `rate × w + capacity + chunk` (`burst`, about 5% of a second's worth, and never more than
/// 1 KiB plus 2% under 32 KiB/s) — the first piece of the run included.
final class RateLimiter: @unchecked Sendable {
    /// Bytes per second.
    let rate: Double
    /// libcurl's receive buffer under the limit (`CURLOPT_BUFFERSIZE`): the most one write
    /// callback hands over, a 32nd of a second's worth, from 1 KiB (libcurl's least) to 16 KiB.
    let chunk: Int
    /// The most tokens saved up. Paused transfers resume when half of it has come, so a fast
    /// limit wakes the engine every 10 ms or so, not for every piece.
    let capacity: Double
    private var tokens: Double
    private var last: Double
    private let clock: @Sendable () -> Double
    /// The engines of a run take turns on one thread; the lock is for an app that runs two.
    private let lock = Lock()

    init(bytesPerSecond: Int64, clock: @escaping @Sendable () -> Double = { monotonicNow() }) {
        rate = Double(max(1, bytesPerSecond))
        chunk = Int(min(16_384, max(1_024, bytesPerSecond / 32)))
        capacity = rate / 50
        tokens = 0
        self.clock = clock
        last = clock()
    }

    /// The most that may arrive in any window beyond `rate × window`.
    var burst: Double { capacity + Double(chunk) }

    private func refill() {
        let now = clock()
        tokens = min(capacity, tokens + max(0, now - last) * rate)
        last = now
    }

    /// True when `bytes` may be delivered now (they are counted); false when the transfer
    /// must pause until `delay()` has passed.
    func take(_ bytes: Int) -> Bool {
        lock.withLock {
            refill()
            guard tokens >= 0 else { return false }
            tokens -= Double(bytes)
            return true
        }
    }

    /// True when a paused transfer may be resumed now.
    var hasTokens: Bool {
        lock.withLock {
            refill()
            return tokens >= 0
        }
    }

    /// Seconds until paused transfers are worth resuming: when half the bucket has refilled
    /// (at least a millisecond, the engine's poll granularity).
    func delay() -> Double {
        lock.withLock {
            refill()
            return max(0.001, (capacity / 2 - tokens) / rate)
        }
    }
}
