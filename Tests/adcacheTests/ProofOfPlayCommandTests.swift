import Foundation
import TestSupport
import Testing

@testable import AdCacheKit

/// `adcache event`, `report` and `stats` as a person or a launcher runs them, and `report`
/// killed part-way.
@Suite struct ProofOfPlayCommandTests {
    /// A server with one image ad whose impression and click trackers, and a report URL,
    /// all point back at it; a configuration file naming the device and the report URL.
    final class Setup: @unchecked Sendable {
        let dir = TempDir()
        let server: LoopbackServer
        var cache: String { dir.path + "/cache" }
        let config: String
        private let lock = NSLock()
        private var answer: @Sendable (LoopbackServer.Request) -> LoopbackServer.Response = { _ in .text(200, "ok") }

        init(trackerDelay: Double = 0) throws {
            let image = Media.jpeg(4000)
            let holder = Holder()
            server = try LoopbackServer { r in
                if r.path == "/a.jpg" { return .file(image, for: r, etag: "\"a\"") }
                if r.path == "/feed.json" { return .text(200, holder.feed, contentType: "application/json") }
                var response = holder.setup?.current(r) ?? .text(200, "ok")
                response.delay = trackerDelay
                return response
            }
            let server = server
            let t = { (e: String) in server.url("/t/\(e)?cb=[CACHEBUSTING]&ad=[ADID]&dev=[DEVICEID]") }
            holder.feed = """
                {"version": 1, "ads": [{"id": "a", "url": "\(server.url("/a.jpg"))", "type": "image",
                  "tracking": {"impression": ["\(t("impression"))"], "click": ["\(t("click"))"]}}]}
                """
            config = dir.write("adcache.conf", "device-id = kiosk-7\nreport-url = \(server.url("/report"))\n")
            holder.setup = self
            #expect(run(["fetch", "-q", server.url("/feed.json")]).status == 0)
        }

        func current(_ r: LoopbackServer.Request) -> LoopbackServer.Response {
            lock.lock(); defer { lock.unlock() }
            return answer(r)
        }

        func answer(_ a: @escaping @Sendable (LoopbackServer.Request) -> LoopbackServer.Response) {
            lock.lock(); answer = a; lock.unlock()
        }

        var env: [String: String] { ["ADCACHE_CONFIG": config] }

        /// In this process (fast).
        func call(_ args: [String]) -> Run { Adcache.call(["--cache-dir", cache] + args, environment: env) }
        /// The binary.
        func run(_ args: [String]) -> Run { Adcache.run(["--cache-dir", cache] + args, environment: env) }

        var trackerPaths: [String] { server.log.map(\.path).filter { $0.hasPrefix("/t/") } }

        deinit {
            server.stop()
            dir.remove()
        }
    }

    final class Holder: @unchecked Sendable {
        var feed = ""
        weak var setup: Setup?
    }

    @Test func eventChecksItsTypeAndIdAndTouchesNoNetwork() throws {
        let s = try Setup()
        let before = s.server.log.count
        #expect(s.call(["event", "click", "a"]).status == 0)
        let impression = s.call(["event", "impression", "a"])
        #expect(impression.status == 64)
        #expect(impression.stderr.contains("'adcache next' records impressions"), "\(impression.stderr)")
        #expect(s.call(["event", "tap", "a"]).status == 64)
        #expect(s.call(["event", "click"]).status == 64)
        let unknown = s.call(["event", "click", "nope"])
        #expect(unknown.status == 65)
        #expect(unknown.stderr == "adcache: error: no ad 'nope' in the cache\n", "\(unknown.stderr)")
        #expect(s.server.log.count == before, "event never touches the network")
        let stats = s.call(["stats", "--json"])
        #expect(stats.status == 0)
        let json = try JSONValue.parse(Array(stats.stdout.utf8))
        #expect(json["days"]?.arrayValue?.first?["clicks"]?.integerValue == 1)
        #expect(json["queue"]?["pending"]?.integerValue == 2, "one tracker and one batch place")
    }

    @Test func reportSaysWhatItDeliveredAndExits75WhileSomethingIsLeft() throws {
        let s = try Setup()
        #expect(s.call(["next"]).status == 0)
        #expect(s.call(["event", "--at", "2026-12-01T10:00:00Z", "click", "a"]).status == 0)
        s.answer { r in r.path.hasPrefix("/report") ? .text(503, "later") : .text(200, "ok") }
        let first = s.run(["report", "--retries", "0", "--json"])
        #expect(first.status == 75, "\(first.stderr)")
        let json = try JSONValue.parse(Array(first.stdout.utf8))
        #expect(json.objectValue?.keys.sorted() == ["delivered", "dropped", "pending"])
        #expect(json["delivered"]?.integerValue == 2 && json["pending"]?.integerValue == 2)
        s.answer { _ in .text(200, "ok") }
        let second = s.run(["report"])
        #expect(second.status == 0)
        #expect(second.stdout == "2 delivered, 0 pending, 0 dropped\n")
        #expect(s.run(["report", "-q"]).stdout.isEmpty)
        // The batch carried the device id from the configuration and both events.
        let post = try #require(s.server.log.last { $0.path == "/report" })
        let body = try JSONValue.parse(post.body)
        #expect(body["device"]?.stringValue == "kiosk-7")
        #expect(
            body["events"]?.arrayValue?.compactMap { $0["event"]?.stringValue }.sorted() == ["click", "impression"])
        #expect(s.trackerPaths.allSatisfy { $0.contains("&dev=kiosk-7") })
        let stats = try JSONValue.parse(Array(s.call(["stats", "--json"]).stdout.utf8))
        let queue = try #require(stats["queue"])
        #expect(queue.objectValue?.keys.sorted() == ["delivered", "dropped", "oldestPending", "pending"])
        #expect(queue["delivered"]?.integerValue == 4 && queue["pending"]?.integerValue == 0)
        #expect(queue["oldestPending"] == .null)
        #expect(queue["dropped"]?.objectValue?.keys.sorted() == ["age", "overflow", "permanent"])
        let day = try #require(stats["days"]?.arrayValue?.first)
        #expect(
            day.objectValue?.keys.sorted() == [
                "clicks", "completes", "day", "errors", "firstQuartiles", "id", "impressions", "midpoints", "notUsed",
                "shows",
                "skips",
                "starts", "thirdQuartiles", "unrendered",
            ], "SPEC §4 v3's keys, and v4's impressions and unrendered")
    }

    @Test func fetchReportsFirstUnlessToldNot() throws {
        let s = try Setup()
        #expect(s.call(["next"]).status == 0)
        #expect(s.run(["fetch", "-q", "--no-report"]).status == 0)
        #expect(s.trackerPaths.isEmpty)
        #expect(s.call(["stats", "--json"]).stdout.contains("\"pending\": 2"))
        // A report that fails is a warning; the fetch goes on and its exit code stays.
        s.answer { _ in .text(500, "down") }
        let failing = s.run(["fetch", "-q", "--retries", "0"])
        #expect(failing.status == 0, "\(failing.stderr)")
        s.answer { _ in .text(200, "ok") }
        let r = s.run(["fetch", "-q"])
        #expect(r.status == 0, "\(r.stderr)")
        #expect(s.trackerPaths.count == 2, "the impression: once failing, once delivered")
        #expect(s.call(["stats", "--json"]).stdout.contains("\"pending\": 0"))
    }

    @Test func statsTableAndClearKeepingEvents() throws {
        let s = try Setup()
        for _ in 0..<3 { #expect(s.call(["next", "--at", "2026-12-01T09:00:00Z"]).status == 0) }
        let table = s.call(["stats", "--since", "2026-11-30T00:00:00Z"])
        #expect(table.status == 0)
        #expect(table.stdout.contains("2026-12-01  a   3      0"), "\(table.stdout)")
        #expect(table.stdout.contains("queue: 6 pending, 0 delivered, 0 dropped"), "\(table.stdout)")
        #expect(s.call(["stats", "--days", "0"]).status == 64)
        #expect(s.call(["clear"]).status == 0)
        #expect(s.call(["stats", "--json", "--since", "2026-11-30T00:00:00Z"]).stdout.contains("\"shows\": 3"))
        #expect(s.call(["clear", "--events"]).status == 0)
        #expect(!s.call(["stats", "--json", "--since", "2026-11-30T00:00:00Z"]).stdout.contains("\"shows\""))
    }

    @Test func theProofOfPlayKeysAreChecked() throws {
        let s = try Setup()
        let bad = s.dir.write("bad.conf", "report-url = ftp://example.com/r\n")
        let r = Adcache.call(["--config", bad, "stats"])
        #expect(r.status == 64)
        #expect(r.stderr.contains("bad.conf:1: 'report-url' needs an http or https URL"), "\(r.stderr)")
        let range = s.dir.write("range.conf", "max-events = 0\n")
        #expect(Adcache.call(["--config", range, "stats"]).status == 64)
        let shown = Adcache.call(["--config", s.config, "config"])
        #expect(shown.stdout.contains("device-id = kiosk-7"), "\(shown.stdout)")
    }

    /// kill -9 of `report` at varied moments while it delivers: nothing is lost (every queued
    /// tracker URL and batch nonce reaches the server in the end) and nothing is invented
    /// (the server never sees one that was not queued); a delivery may repeat, with the same
    /// URL or nonce, which is what they are for.
    @Test func killNineOfReportLosesAndInventsNothing() throws {
        let s = try Setup(trackerDelay: 0.01)
        for _ in 0..<150 { #expect(s.call(["next"]).status == 0) }
        for _ in 0..<50 { #expect(s.call(["event", "click", "a"]).status == 0) }
        // What is queued, read from the journal (the commands that fold it have not run).
        let store = CacheStore(directory: s.cache)
        let records = try store.journal.read(warn: { _ in })
        #expect(records.count == 200)
        let queuedURLs = Set(records.flatMap(\.trackers).map { URL(string: $0)!.path + "?" + URL(string: $0)!.query! })
        let queuedNonces = Set(records.map(\.nonce))
        #expect(queuedURLs.count == 200)

        var kills = 0, midway = 0
        for i in 0..<8 {
            let p = Process()
            p.executableURL = URL(fileURLWithPath: Adcache.binary)
            p.arguments = ["--cache-dir", s.cache, "report", "--parallel", "2"]
            p.environment = ["PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "ADCACHE_CONFIG": s.config]
            p.standardOutput = FileHandle.nullDevice
            p.standardError = FileHandle.nullDevice
            let before = s.trackerPaths.count
            try p.run()
            usleep(useconds_t(60_000 + i * 45_000))
            if p.isRunning {
                kill(p.processIdentifier, SIGKILL)
                kills += 1
                if s.trackerPaths.count > before { midway += 1 }
            }
            p.waitUntilExit()
        }
        let last = s.run(["report"])
        #expect(last.status == 0, "\(last.stderr)")
        let sent = s.trackerPaths
        #expect(Set(sent) == queuedURLs, "nothing lost, nothing invented")
        var posted = [String]()
        for post in s.server.log where post.path == "/report" {
            let body = try JSONValue.parse(post.body)
            posted += body["events"]?.arrayValue?.compactMap { $0["nonce"]?.stringValue } ?? []
        }
        #expect(Set(posted) == queuedNonces)
        // Where the kills land depends on the machine's pace: a second opinion, never a
        // condition (CrashPointTests end the process at each named step).
        let stats = try JSONValue.parse(Array(s.call(["stats", "--json"]).stdout.utf8))
        #expect(stats["queue"]?["pending"]?.integerValue == 0)
        print(
            "kill -9 of report: \(kills) kills, \(midway) mid-delivery; \(sent.count) tracker calls for \(queuedURLs.count) queued, \(posted.count) batch places for \(queuedNonces.count); none lost, none invented"
        )
    }

    /// kill -9 of the commands that fold the journal, between launches that record shows:
    /// after each kill the shows counted in the index and in the counts are exactly the
    /// launches that printed an ad — never one lost, never one counted twice.
    @Test func aShowIsNeverLostNorCountedTwiceAcrossAKilledFold() throws {
        let s = try Setup()
        let store = CacheStore(directory: s.cache)
        var shows = 0, kills = 0, partial = 0
        func startPrune(_ i: Int) throws -> Process {
            let p = Process()
            p.executableURL = URL(fileURLWithPath: Adcache.binary)
            p.arguments = ["--cache-dir", s.cache, "prune"] + (i % 2 == 1 ? ["--max-size", "1G"] : [])
            p.environment = ["PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "ADCACHE_CONFIG": s.config]
            p.standardOutput = FileHandle.nullDevice
            p.standardError = FileHandle.nullDevice
            try p.run()
            return p
        }
        // How long a folding prune takes on this machine (the median of three whole runs):
        // the kills are spread over that time, so they land inside it on a fast machine too.
        var took = [Double]()
        for i in 0..<3 {
            for _ in 0..<3 where s.run(["next"]).status == 0 { shows += 1 }
            let started = monotonicNow()
            let p = try startPrune(i)
            p.waitUntilExit()
            took.append(monotonicNow() - started)
        }
        let span = took.sorted()[1]
        for i in 0..<30 {
            for _ in 0..<3 where s.run(["next"]).status == 0 { shows += 1 }
            let p = try startPrune(i)
            usleep(useconds_t(span * (0.1 + 0.8 * Double((i * 7) % 30) / 30) * 1_000_000))
            if p.isRunning {
                kill(p.processIdentifier, SIGKILL)
                kills += 1
            }
            p.waitUntilExit()
            // A fold cut short leaves the journal with lines some file already took.
            let journal = try store.journal.read(warn: { _ in })
            let index = try store.load(warn: { _ in })
            if !journal.isEmpty,
                try store.loadEvents(warn: { _ in }, setAside: false).lastFolded?.nonce == journal.last?.nonce
            {
                partial += 1   // killed between the fold into events.json and emptying the journal
            }
            #expect(index.ads.reduce(0) { $0 + $1.shows } == Int64(shows), "index after kill \(i)")
            let stats = try AdCache(.init(directory: s.cache)).stats(StatsOptions(days: 1))
            #expect(stats.days.reduce(0) { $0 + $1.shows } == Int64(shows), "counts after kill \(i)")
            #expect(stats.pending == Int64(2 * shows), "queue after kill \(i)")
        }
        // (How many kills landed is reported, not asserted: CrashPointTests cover each step.)
        print(
            "kill -9 of a fold (one takes \(Int(span * 1000)) ms): \(kills) kills in 30 runs (\(partial) between two of its steps), \(shows) shows, each counted once"
        )
    }
}
