import Foundation
import TestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// SPEC §8: every event reaches the server, never lost, never invented — through TLS
/// failures, redirected reports, previews of other dates, a busy lock and killed runs.
@Suite(.serialized) struct BillingTests {
    /// A cache fed from a loopback server whose ad has an impression tracker and whose feed
    /// names a report URL (both on `tracker` / `report`, relative to that server unless
    /// absolute).
    final class Rig: @unchecked Sendable {
        let dir = TempDir()
        let server: LoopbackServer
        var cache: String { dir.path + "/cache" }
        let answer: Answer

        final class Answer: @unchecked Sendable {
            private let lock = NSLock()
            private var handler: @Sendable (LoopbackServer.Request) -> LoopbackServer.Response? = { _ in nil }
            var delay: Double = 0
            /// The server's base URL (trackers and report URLs must be absolute).
            var base = ""
            func set(_ h: @escaping @Sendable (LoopbackServer.Request) -> LoopbackServer.Response?) {
                lock.lock(); handler = h; lock.unlock()
            }
            func callAsFunction(_ r: LoopbackServer.Request) -> LoopbackServer.Response? {
                lock.lock(); let h = handler; lock.unlock()
                return h(r)
            }
        }

        init(tracker: String = "/imp?ad=[ADID]&cb=[CACHEBUSTING]", report: String = "/report", trackers: Int = 1)
            throws
        {
            let answer = Answer()
            self.answer = answer
            server = try LoopbackServer { r in
                if let custom = answer(r) { return custom }
                switch r.path {
                case "/feed.json":
                    let list = (0..<trackers).map { "\"\(answer.base)\(tracker)&t=\($0)\"" }.joined(separator: ",")
                    return .text(
                        200,
                        #"{"ads":[{"id":"a","url":"a.jpg","tracking":{"impression":[\#(list)]}}],"reportUrl":"\#(answer.base)\#(report)"}"#
                    )
                case "/a.jpg": return .file(Media.jpeg(4000), for: r)
                default:
                    if answer.delay > 0 { usleep(useconds_t(answer.delay * 1e6)) }
                    return .text(204, "")
                }
            }
            answer.base = server.url("")
            let fetch = run(["fetch", "--no-report", server.url("/feed.json")])
            try #require(fetch.status == 0, "\(fetch.stderr)")
        }

        func run(_ args: [String], environment: [String: String] = [:]) -> Run {
            Adcache.run(["--cache-dir", cache] + args, environment: environment)
        }

        func stats() throws -> [String: Any] {
            let r = run(["stats", "--json"])
            return try #require(try JSONSerialization.jsonObject(with: Data(r.stdout.utf8)) as? [String: Any])
        }

        func pending() throws -> Int { try ((stats()["queue"] as? [String: Any])?["pending"] as? Int) ?? -1 }
        func shows() throws -> Int {
            try (stats()["days"] as? [[String: Any]] ?? []).reduce(0) { $0 + (($1["shows"] as? Int) ?? 0) }
        }

        /// Another command holding `lock` (index.lock by default) for `seconds` (flock), from
        /// about 0.3 s from now.
        func holdLock(_ lock: String = "index.lock", seconds: Double) throws -> Process {
            let holder = Process()
            holder.executableURL = URL(fileURLWithPath: "/usr/bin/flock")
            holder.arguments = [cache + "/" + lock, "sleep", String(seconds)]
            try holder.run()
            usleep(300_000)
            return holder
        }

        func remove() {
            server.stop()
            dir.remove()
        }
    }

    /// A redirected batch stays a POST with its body to the final URL, whatever the code;
    /// only then does the queue empty.
    @Test(arguments: [301, 302, 303, 307, 308])
    func aRedirectedBatchArrivesAsAPost(status: Int) throws {
        let rig = try Rig(tracker: "/imp?x=1", report: "/report")
        defer { rig.remove() }
        rig.answer.set { r in
            switch r.path {
            case "/report": return .redirect("/report2", status: status)
            case "/report2": return .text(r.method == "POST" && !r.body.isEmpty ? 200 : 405, "")
            default: return nil
            }
        }
        #expect(rig.run(["next"]).status == 0)
        let report = rig.run(["report"])
        #expect(report.status == 0, "\(status): \(report.stderr)")
        let arrived = rig.server.requests(to: "/report2")
        #expect(arrived.count == 1 && arrived.first?.method == "POST", "\(status): \(arrived.map(\.method))")
        let body = String(decoding: arrived.first?.body ?? [], as: UTF8.self)
        #expect(body.contains("\"impression\""), "\(body)")
        #expect(try rig.pending() == 0)
    }

    /// A batch whose final answer is not a 2xx (a redirect to an error, a redirect loop)
    /// stays queued; a tracker's 3xx still delivers it.
    @Test func aBatchIsDeliveredOnlyByA2xx() throws {
        let rig = try Rig(tracker: "/imp?x=1", report: "/report")
        defer { rig.remove() }
        rig.answer.set { r in
            if r.path.hasPrefix("/imp?") { return .redirect("/pixel", status: 302) }
            switch r.path {
            case "/report": return .redirect("/report2", status: 302)
            case "/report2": return .text(503, "")
            default: return nil
            }
        }
        #expect(rig.run(["next"]).status == 0)
        let waiting = rig.run(["report", "--retries", "0", "-v"])
        #expect(waiting.status == 75)
        #expect(waiting.stderr.contains("not delivered: ") && waiting.stderr.contains("HTTP 503"), "\(waiting.stderr)")
        #expect(try rig.pending() == 1, "the batch place waits; the tracker was delivered")
        rig.answer.set { _ in nil }
        #expect(rig.run(["report"]).status == 0)
        #expect(try rig.pending() == 0)
    }

    /// `--at` is a preview: a far future date never drops the real queue nor the counts.
    @Test func aPreviewOfAnotherDateNeverTouchesTheRealQueue() throws {
        let rig = try Rig(tracker: "/imp?x=1", report: "/report")
        defer { rig.remove() }
        rig.answer.set { _ in .text(503, "") }   // nothing can be delivered
        for _ in 0..<2 { #expect(rig.run(["next"]).status == 0) }
        #expect(try rig.pending() == 4)
        let prune = rig.run(["prune", "--at", "2031-01-01T00:00:00Z"])
        #expect(prune.status == 0, "\(prune.stderr)")
        #expect(try rig.pending() == 4, "prune --at kept the queue")
        _ = rig.run(["next", "--at", "2031-01-01T00:00:00Z"])
        _ = rig.run(["report", "--retries", "0"])
        let stats = try rig.stats()
        let dropped = stats["queue"] as? [String: Any]
        #expect((dropped?["dropped"] as? [String: Any])?["age"] as? Int == 0, "\(stats)")
        #expect(try rig.shows() >= 2)
    }

    /// A launch while another command holds the index lock (a fold, a commit) for 3 s: it
    /// never waits for it — the show is recorded at once. While the journal's own lock is
    /// held past its second (which no command does): the choice is printed (never nothing),
    /// the show is not recorded, exit 0.
    @Test func aBusyLockNeverCostsTheSplash() throws {
        let rig = try Rig()
        defer { rig.remove() }
        let before = try rig.shows()
        let holder = try rig.holdLock(seconds: 3)
        let recorded = rig.run(["next"])
        #expect(holder.isRunning, "the show was recorded while index.lock was still held")
        #expect(recorded.status == 0 && recorded.stderr.isEmpty, "\(recorded.stderr)")
        #expect(recorded.stdout.hasPrefix(rig.cache + "/assets/"), "\(recorded.stdout)")
        holder.waitUntilExit()
        #expect(try rig.shows() == before + 1)

        let journalHolder = try rig.holdLock("journal.lock", seconds: 3)
        defer { journalHolder.waitUntilExit() }
        let next = rig.run(["next"])
        #expect(next.status == 0, "\(next.stderr)")
        #expect(next.stdout.hasPrefix(rig.cache + "/assets/"), "\(next.stdout)")
        #expect(next.stderr.contains("show not recorded: cache busy"), "\(next.stderr)")
    }

    /// A fetch whose commit finds the index lock held past a second waits for it (within
    /// its deadline) instead of leaving its downloads uncommitted.
    @Test func aDelayedCommitWaitsForTheLock() throws {
        let rig = try Rig()
        defer { rig.remove() }
        let holder = try rig.holdLock(seconds: 2.5)
        defer { holder.waitUntilExit() }
        let fetch = rig.run(["fetch", "--no-report", "--revalidate"])
        #expect(fetch.status == 0, "committed once the lock was free: \(fetch.stderr)")
        #expect(!fetch.stderr.contains("adcache: error:"), "\(fetch.stderr)")
        let bounded = rig.run(["fetch", "--no-report", "--deadline", "0.5"])
        #expect([0, 75].contains(bounded.status), "a deadline still bounds the wait: \(bounded.stderr)")
    }

    /// A fetch whose commit cannot happen (the index lock held past its deadline) keeps its
    /// downloads for the next run: `prune` leaves them, and the next fetch asks the server
    /// about them (a 304) instead of downloading them again, and commits them.
    @Test func aCommitThatCannotHappenKeepsItsDownloads() throws {
        let dir = TempDir()
        defer { dir.remove() }
        let server = try LoopbackServer { r in
            r.path == "/feed.json"
                ? .text(200, #"[{"id":"a","url":"a.jpg"}]"#) : .file(Media.jpeg(50_000), for: r, etag: "\"v1\"")
        }
        defer { server.stop() }
        let cache = dir.path + "/cache"
        let c = ["--cache-dir", cache]
        mkdir(cache, 0o755)
        let holder = Process()
        holder.executableURL = URL(fileURLWithPath: "/usr/bin/flock")
        holder.arguments = [cache + "/index.lock", "sleep", "5"]
        try holder.run()
        usleep(300_000)
        let stuck = Adcache.run(c + ["fetch", "--no-report", "--deadline", "2", server.url("/feed.json")])
        #expect(stuck.status == 75, "\(stuck.status) \(stuck.stderr)")
        holder.waitUntilExit()
        let files = Disk.list(cache + "/assets")
        try #require(files.count == 1, "the download is in assets/: \(files)")
        #expect(Disk.exists(cache + "/fetch.uncommitted"))
        let hourAgo = timespec(tv_sec: Int(Date().timeIntervalSince1970) - 3600, tv_nsec: 0)
        var times = [hourAgo, hourAgo]
        utimensat(AT_FDCWD, cache + "/assets/" + files[0], &times, 0)   // past the grace for orphans
        #expect(Adcache.run(c + ["prune"]).status == 0)
        #expect(Disk.list(cache + "/assets") == files, "prune kept what the next fetch will commit")

        let fetch = Adcache.run(c + ["fetch", "--no-report", server.url("/feed.json")])
        #expect(fetch.status == 0, "\(fetch.stderr)")
        let asked = server.requests(to: "/a.jpg")
        #expect(asked.count == 2 && asked.last?.header("If-None-Match") == "\"v1\"", "a 304, not a second download")
        #expect(Disk.list(cache + "/assets") == files)
        #expect(!Disk.exists(cache + "/fetch.uncommitted"))
        let next = Adcache.run(c + ["next"])
        #expect(next.status == 0 && next.stdout.hasSuffix(files[0] + "\n"), "\(next.stdout) \(next.stderr)")
    }

    /// The path a launch printed still opens after a fetch superseded its file.
    @Test func aPrintedPathOutlivesTheCommitThatSupersedesIt() throws {
        let dir = TempDir()
        defer { dir.remove() }
        nonisolated(unsafe) var v = 1
        let lock = NSLock()
        let server = try LoopbackServer { r in
            lock.lock(); let n = v; lock.unlock()
            return r.path == "/feed.json"
                ? .text(200, #"[{"id":"a","url":"a\#(n).jpg"}]"#) : .file(Media.jpeg(3000, seed: UInt8(n)), for: r)
        }
        defer { server.stop() }
        let c = ["--cache-dir", dir.path + "/cache"]
        #expect(Adcache.run(c + ["fetch", server.url("/feed.json")]).status == 0)
        let printed = Adcache.run(c + ["next"]).stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        lock.lock(); v = 2; lock.unlock()
        #expect(Adcache.run(c + ["fetch"]).status == 0)
        #expect(Adcache.run(c + ["prune"]).status == 0)
        #expect(FileManager.default.contents(atPath: printed) == Data(Media.jpeg(3000, seed: 1)), "\(printed)")
        #expect(Adcache.run(c + ["next"]).stdout.trimmingCharacters(in: .whitespacesAndNewlines) != printed)
    }

    /// SPEC §8 v4 *Every appearance is a delivery*: a pixel named twice by one event (a VAST
    /// wrapper's and its InLine's) is called twice in all — when the first call succeeds and
    /// the second gets 503, the second stays queued and the next report sends it (version 3
    /// keyed deliveries by URL: "1 delivered, 0 pending", the second never sent).
    @Test func aPixelNamedTwiceIsDeliveredTwice() throws {
        let rig = try Rig()
        defer { rig.remove() }
        let calls = Locked(0)
        let base = rig.server.url("")
        let pixel = "<Impression>\(base)/pix</Impression>"
        rig.answer.set { r in
            switch r.path {
            case "/w.xml":
                let w = VASTTests.wrapper(1, to: base + "/in.xml", base: base)
                return .text(200, w.replacingOccurrences(of: "<Impression>\(base)/wimp1</Impression>", with: pixel))
            case "/in.xml":
                let inline = VASTTests.inline(base)
                return .text(
                    200, inline.replacingOccurrences(of: "<Impression>\(base)/imp-deep</Impression>", with: pixel))
            case "/pix":
                var n = 0
                calls.update {
                    n = $0 + 1; $0 = n
                }
                return n == 2 ? .text(503, "busy") : .text(200, "")
            case "/deep.mp4": return .file(Media.mp4(), for: r)
            default: return nil
            }
        }
        let fetched = rig.run(["fetch", "--no-report", rig.server.url("/w.xml")])
        #expect(fetched.status == 0, "\(fetched.stderr)")
        #expect(rig.run(["next"]).status == 0)
        #expect(try rig.pending() == 2)
        let first = rig.run(["report", "--retries", "0", "--parallel", "1"])
        #expect(first.status == 75, "one delivery stays queued: \(first.stdout) \(first.stderr)")
        #expect(try rig.pending() == 1)
        #expect(rig.run(["report"]).status == 0)
        #expect(try rig.pending() == 0)
        #expect(calls.value == 3, "200, 503, then 200: two deliveries")
        #expect(rig.run(["report"]).status == 0)
        #expect(calls.value == 3, "a delivery done is never sent again")
    }

    /// A report whose outcomes were recorded (`events.delivered`) but not yet written into the
    /// queue — cut short after its deliveries — never sends them again: the next run applies
    /// them before it reads the queue (version 3 re-sent the whole delivered backlog).
    @Test func deliveriesRecordedByACutShortReportAreNotSentAgain() throws {
        let rig = try Rig(trackers: 3)
        defer { rig.remove() }
        for _ in 0..<5 { #expect(rig.run(["next"]).status == 0) }
        // Folded first, so that the cut-short report finds an empty journal (the fast path).
        #expect(rig.run(["prune"]).status == 0)
        let cut = rig.run(["report", "--parallel", "1"], environment: ["ADCACHE_CRASH_AT": "report.afterLogged#15"])
        #expect(cut.status == 222 || cut.status == 0, "\(cut.stderr)")
        let sent = rig.server.log.filter { $0.path.hasPrefix("/imp?") }.count
        #expect(sent == 15)
        _ = rig.run(["report"])
        #expect(rig.server.log.filter { $0.path.hasPrefix("/imp?") }.count == sent, "nothing sent twice")
        #expect(try rig.pending() == 0)
    }

    /// `report` ended at a named point (twelve times), then killed within its first 100 ms
    /// (twenty times): the queue drains, nothing is lost, and no URL is sent more than twice
    /// — a run re-sends only what was in flight when the last one died, and what an earlier
    /// run began goes after what none has tried (so while the kills have not tried every
    /// delivery once, none is tried twice: 200 URLs here, a few dozen tried per run).
    @Test(arguments: ["report.afterLogged#3", "kill"])
    func aReportKilledOverAndOverSendsNothingTwiceMore(how: String) throws {
        let rig = try Rig(trackers: 2)
        defer { rig.remove() }
        rig.answer.delay = 0.01
        for _ in 0..<100 { #expect(rig.run(["next"]).status == 0) }
        #expect(try rig.pending() == 100 * 3)
        var crashed = 0
        for round in 0..<(how == "kill" ? 20 : 12) {
            if how == "kill" {
                let p = Process()
                p.executableURL = URL(fileURLWithPath: Adcache.binary)
                p.arguments = ["--cache-dir", rig.cache, "report", "--parallel", "2"]
                p.environment = ["PATH": "/usr/bin:/bin", "HOME": rig.dir.path]
                p.standardOutput = FileHandle.nullDevice
                p.standardError = FileHandle.nullDevice
                try p.run()
                usleep(useconds_t(20_000 + (round * 4_000) % 80_000))
                kill(p.processIdentifier, SIGKILL)
                p.waitUntilExit()
                if p.terminationReason == .uncaughtSignal { crashed += 1 }
            } else {
                let r = rig.run(["report", "--parallel", "2"], environment: ["ADCACHE_CRASH_AT": how])
                if r.status == 222 { crashed += 1 }
            }
        }
        let last = rig.run(["report"])
        #expect(last.status == 0, "\(last.stderr)")
        #expect(try rig.pending() == 0)
        var sent: [String: Int] = [:]
        let urls = rig.server.log.map(\.path).filter { $0.hasPrefix("/imp?") }
        for u in urls { sent[u, default: 0] += 1 }
        #expect(sent.count == 100 * 2, "every tracker URL arrived")
        #expect(sent.values.max() ?? 0 <= 2, "no URL sent more than twice: \(sent.values.sorted().suffix(5))")
        let batches = rig.server.requests(to: "/report").count
        print(
            "report \(how): \(crashed) runs ended early; \(urls.count) tracker calls for 200 URLs, \(batches) batch POSTs"
        )
    }
}
