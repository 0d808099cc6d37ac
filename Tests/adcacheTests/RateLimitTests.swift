import Foundation
import TestSupport
import Testing

@testable import AdCacheKit

/// `--limit-rate SIZE`: at most SIZE bytes per second in all (SPEC §4). libcurl 7.88's own
/// limiter admitted a socket buffer before it paced: a 200 KiB file at 20K came in 5 s, four
/// 10 KiB files at 4K and --parallel 4 in 0.05 s. Only lower bounds are asserted: that a run
/// takes at least its bytes ÷ the rate is the behaviour itself (how close it stays to the rate
/// is `make bench`'s, and RateLimiterTests' on a clock of their own).
@Suite struct RateLimitTests {
    /// The seconds `fetch` took, and its result.
    func timedFetch(_ s: Sandbox, _ args: [String]) -> (Double, Run) {
        let started = monotonicNow()
        let r = s.run(["fetch", "--no-report"] + args)
        return (monotonicNow() - started, r)
    }

    @Test func oneTransferHoldsTheRate() throws {
        let s = Sandbox(); defer { s.remove() }
        let body = Media.jpeg(64 << 10)
        let srv = try LoopbackServer { r in
            r.path == "/feed.json" ? .text(200, #"[{"id":"a","url":"a.jpg"}]"#) : .file(body, for: r)
        }
        defer { srv.stop() }
        let (elapsed, r) = timedFetch(s, ["--limit-rate", "32K", srv.url("/feed.json")])
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stdout == "1 ad: 1 ready (1 downloaded)\n")
        #expect(elapsed >= 1.8, "64 KiB at 32 KiB/s took \(elapsed) s (about 2 s; libcurl alone: about 1 s)")
    }

    @Test func fourTransfersShareTheRate() throws {
        let s = Sandbox(); defer { s.remove() }
        let bodies = (0..<4).map { Media.jpeg(8 << 10, seed: UInt8($0 + 1)) }
        let srv = try LoopbackServer { r in
            if r.path == "/feed.json" {
                return .text(
                    200, "[" + (0..<4).map { #"{"id":"a\#($0)","url":"a\#($0).jpg"}"# }.joined(separator: ",") + "]")
            }
            return .file(bodies[Int(r.path.dropFirst(2).prefix(1)) ?? 0], for: r)
        }
        defer { srv.stop() }
        let (elapsed, r) = timedFetch(s, ["--limit-rate", "8K", "--parallel", "4", srv.url("/feed.json")])
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stdout == "4 ads: 4 ready (4 downloaded)\n")
        #expect(elapsed >= 3.2, "4 × 8 KiB at 8 KiB/s in all took \(elapsed) s (about 4 s; libcurl alone: 0.05 s)")
        let ads = try #require(
            try JSONSerialization.jsonObject(with: Data(s.run(["list", "--json"]).stdout.utf8)) as? [[String: Any]])
        #expect(ads.map { $0["bytes"] as? Int } == Array(repeating: 8 << 10, count: 4))
    }

    /// The feed's bytes come out of the same budget as the assets'.
    @Test func theFeedSharesTheBudget() throws {
        let s = Sandbox(); defer { s.remove() }
        let padding = String(repeating: "x", count: 16 << 10)
        let feed = #"[{"id":"a","url":"a.jpg","meta":{"note":"\#(padding)"}}]"#
        let body = Media.jpeg(8 << 10)
        let srv = try LoopbackServer { r in
            r.path == "/feed.json" ? .text(200, feed, contentType: "application/json") : .file(body, for: r)
        }
        defer { srv.stop() }
        let (elapsed, r) = timedFetch(s, ["--limit-rate", "8K", srv.url("/feed.json")])
        #expect(r.status == 0, "\(r.stderr)")
        #expect(elapsed >= 2.4, "a 16 KiB feed and an 8 KiB asset at 8 KiB/s took \(elapsed) s (about 3 s)")
    }

    /// A paused transfer whose kept piece fails when it is handed over again (here: past the
    /// size cap of a body sent without a length) fails as it would unpaced, and ends.
    @Test func aPausedTransferCanStillFail() throws {
        let s = Sandbox(); defer { s.remove() }
        let body = Media.jpeg(16 << 10)
        let srv = try LoopbackServer { r in
            if r.path == "/feed.json" { return .text(200, #"[{"id":"a","url":"a.jpg"}]"#) }
            var response = LoopbackServer.Response.file(body, for: r)
            response.noContentLength = true
            return response
        }
        defer { srv.stop() }
        let r = s.run(["fetch", "--no-report", "--limit-rate", "8K", "--max-asset-size", "4K", srv.url("/feed.json")])
        #expect(r.status == 65, "\(r.stderr)")
        #expect(r.stderr.contains("larger than the limit of 4.0K"), "\(r.stderr)")
        #expect(Disk.list(s.cache + "/partial").isEmpty)
    }
}
