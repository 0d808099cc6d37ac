import Foundation
import TestSupport
import Testing

@testable import AdCacheKit

/// `--limit-rate`'s bucket (SPEC §4), on a clock of its own: transfers that always have bytes
/// waiting, driven as `TransferEngine` drives them (resumed in turn while the bucket has
/// tokens, each taking pieces until it pauses; the loop sleeping `delay()`, woken a little
/// late). The timed side — that a real run takes at least its bytes ÷ the rate — is in
/// adcacheTests' `RateLimitTests`.
@Suite struct RateLimiterTests {
    final class FakeClock: @unchecked Sendable {
        var now = 1_000.0
    }

    /// The pieces delivered (time, bytes) by `transfers` greedy transfers for `seconds`.
    func simulate(rate: Int64, transfers: Int, seconds: Double) -> (RateLimiter, [(Double, Int)]) {
        let clock = FakeClock()
        let limiter = RateLimiter(bytesPerSecond: rate, clock: { clock.now })
        let start = clock.now
        var delivered: [(Double, Int)] = []
        var lateness = SystemRandomNumberGenerator()
        while clock.now - start < seconds {
            var k = 0
            while k < transfers, limiter.hasTokens {
                // Resumed: its kept piece, then what it reads, until the bucket pauses it.
                while limiter.take(limiter.chunk) { delivered.append((clock.now - start, limiter.chunk)) }
                k += 1
            }
            clock.now += limiter.delay() + Double.random(in: 0...0.002, using: &lateness)
        }
        return (limiter, delivered)
    }

    /// The most bytes delivered in any closed window of `w` seconds.
    func busiest(_ pieces: [(Double, Int)], window w: Double) -> Int {
        var best = 0
        var sum = 0
        var head = 0
        for (t, n) in pieces {
            sum += n
            while pieces[head].0 < t - w {
                sum -= pieces[head].1
                head += 1
            }
            best = max(best, sum)
        }
        return best
    }

    @Test(arguments: [1_024, 8_192, 20_480, 32_768, 1 << 20, 100 << 20] as [Int64], [1, 4])
    func noWindowOfASecondOrMoreGoesPastTheRate(rate: Int64, transfers: Int) {
        let seconds = 10.0
        let (limiter, pieces) = simulate(rate: rate, transfers: transfers, seconds: seconds)
        let r = Double(rate)
        // The measure: within 10% of rate × window, plus one small burst.
        for w in [1.0, 2.0, 5.0] {
            let most = Double(busiest(pieces, window: w))
            #expect(most <= 1.1 * r * w + min(r, 16_384), "\(rate) B/s, \(transfers) transfers, \(w) s: \(most)")
            #expect(most <= r * w + limiter.burst + 1, "the bound the limiter states")
        }
        // And the limit is used, not starved: over the whole run, at least 95% of it.
        let total = Double(pieces.reduce(0) { $0 + $1.1 })
        #expect(total >= 0.95 * r * seconds, "\(rate) B/s: \(total / seconds) B/s on average")
    }

    @Test func theBucketStartsEmptyAndSavesAFiftiethOfASecond() {
        let clock = FakeClock()
        let limiter = RateLimiter(bytesPerSecond: 100_000, clock: { clock.now })
        #expect(limiter.chunk == 3_125)
        #expect(limiter.take(3_125), "the first piece goes at once")
        #expect(!limiter.take(1), "then the bucket is in debt")
        clock.now += 60   // a long pause saves up 2,000 bytes, not a minute's worth
        #expect(limiter.take(2_000) && limiter.take(1) && !limiter.take(1))
        #expect(RateLimiter(bytesPerSecond: 1).chunk == 1_024, "libcurl's smallest buffer")
        #expect(RateLimiter(bytesPerSecond: 1 << 30).chunk == 16_384)
    }
}
