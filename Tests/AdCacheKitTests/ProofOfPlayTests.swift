import Foundation
import TestSupport
import Testing

@testable import AdCacheKit

/// Proof of play (SPEC §8) against loopback tracker and report servers.
@Suite struct ProofOfPlayTests {
    /// A cache fetched from a feed whose ads track `impression`, `click`, `skip` and
    /// `complete` at `/t/<event>` of the same server (with every macro), and the facade with
    /// a device id.
    final class Harness: @unchecked Sendable {
        let h: FetchHarness
        var deviceId: String? = "dev 1"
        var reportUrl: String?
        let lock = NSLock()
        var tracker: @Sendable (LoopbackServer.Request) -> LoopbackServer.Response? = { _ in .text(200, "ok") }

        init(ids: [String] = ["a"], extra: String = "", weights: [Int] = []) throws {
            h = try FetchHarness()
            let server = h.server!
            var ads: [String] = []
            for (n, id) in ids.enumerated() {
                h.put("/\(n).jpg", Media.jpeg(3000, seed: UInt8(n + 1)))
                let t = { (event: String) in
                    "\"\(server.url("/t/\(event)"))?ts=[TIMESTAMP]&cb=[CACHEBUSTING]&ad=[ADID]&ev=[EVENT]&dev=[DEVICEID]\""
                }
                let weight = n < weights.count ? ", \"weight\": \(weights[n])" : ""
                ads.append(
                    """
                    {"id": "\(id)", "url": "/\(n).jpg", "type": "image"\(weight),
                     "tracking": {"impression": [\(t("impression"))], "click": [\(t("click"))],
                                  "skip": [\(t("skip"))], "complete": [\(t("complete"))]}}
                    """)
            }
            h.feed("{\"version\": 1, \(extra) \"ads\": [\(ads.joined(separator: ","))]}")
            h.setOverride { [weak self] r in
                guard r.path.hasPrefix("/t/") || r.path.hasPrefix("/report") else { return nil }
                return self?.answer(r) ?? .text(503, "gone")
            }
            _ = try h.fetch()
        }

        func answer(_ r: LoopbackServer.Request) -> LoopbackServer.Response? {
            lock.lock()
            let t = tracker
            lock.unlock()
            return t(r)
        }

        func setTracker(_ t: @escaping @Sendable (LoopbackServer.Request) -> LoopbackServer.Response?) {
            lock.lock(); tracker = t; lock.unlock()
        }

        func cache(at t: Double? = nil) -> AdCache {
            AdCache(
                .init(
                    directory: h.store.directory, clock: t.map { .fixed(Date(timeIntervalSince1970: $0)) } ?? .system,
                    proofOfPlay: .init(deviceId: deviceId, reportUrl: reportUrl)))
        }

        /// A device whose clock reads `t` (as a fold judges it: not a preview).
        func cache(device t: Double) -> AdCache {
            AdCache(
                .init(
                    directory: h.store.directory, clock: .device { Date(timeIntervalSince1970: t) },
                    proofOfPlay: .init(deviceId: deviceId, reportUrl: reportUrl)))
        }

        func report(_ configure: (inout ReportOptions) -> Void = { _ in }) throws -> ReportResult {
            var o = ReportOptions()
            o.transfer.settings.retryBaseDelay = 0.02
            configure(&o)
            return try cache().report(o)
        }

        var trackerRequests: [LoopbackServer.Request] { h.server.log.filter { $0.path.hasPrefix("/t/") } }

        /// A query parameter of a request's path.
        static func query(_ r: LoopbackServer.Request, _ name: String) -> String? {
            URLComponents(string: "http://x" + r.path)?.queryItems?.first { $0.name == name }?.value
        }
    }

    @Test func everyRecordedShowIsOneImpressionEvenFromConcurrentLaunches() throws {
        let p = try Harness(ids: ["a", "b", "c"])
        let shows = Counter()
        DispatchQueue.concurrentPerform(iterations: 4) { _ in
            for _ in 0..<15 {
                if case .show = try? p.cache().next() { _ = shows.next() }
            }
        }
        #expect(shows.count == 60)
        #expect(try p.cache().next(NextOptions(peek: true)) != nil)
        let before = try p.cache().stats()
        #expect(before.pending == 60, "one delivery per impression tracker")
        #expect(before.days.reduce(0) { $0 + $1.shows } == 60)
        let result = try p.report()
        #expect(result == ReportResult(delivered: 60, pending: 0, dropped: 0))
        let impressions = p.trackerRequests.filter { $0.path.hasPrefix("/t/impression") }
        #expect(impressions.count == 60, "impressions == recorded shows")
        #expect(Set(impressions.map(\.path)).count == 60, "each with its own cachebusting value and time")
        let index = try p.h.index()
        #expect(index.ads.reduce(0) { $0 + $1.shows } == 60)
        // Nothing left: a second report sends nothing.
        #expect(try p.report() == ReportResult())
        #expect(p.trackerRequests.count == 60)
    }

    /// Launches racing folds (prune, report): a launch never waits for a fold, and reads
    /// what the fold moved aside with what was appended since — so the weighted rotation
    /// picks exactly as it would one launch after another, and every show is counted once.
    @Test func launchesRacingFoldsSeeEveryShow() throws {
        let p = try Harness(ids: ["a", "b", "c"], weights: [2, 1, 1])
        let shows = Counter()
        let picked = Collected()
        let folds = Counter()
        let folder = DispatchSemaphore(value: 0)
        let launched = DispatchSemaphore(value: 0)
        Thread {
            var first = true
            while first || shows.count < 80 {
                _ = try? (folds.next() % 2 == 0 ? p.cache().prune() as Any : p.report() as Any)
                if first { launched.signal() }
                first = false
            }
            folder.signal()
        }.start()
        launched.wait()   // folding has begun
        DispatchQueue.concurrentPerform(iterations: 4) { _ in
            for _ in 0..<20 {
                if case .show(let ad)? = try? p.cache().next() {
                    _ = shows.next()
                    picked.add(Diagnostic(.cache, ad.id))
                }
            }
        }
        folder.wait()
        #expect(shows.count == 80)
        #expect(folds.count > 1)
        let counts = Dictionary(picked.messages.map { ($0, 1) }, uniquingKeysWith: +)
        #expect(counts == ["a": 40, "b": 20, "c": 20], "folds: \(folds.count)")
        #expect(try p.h.index().ads.reduce(0) { $0 + $1.shows } == 80)
        _ = try p.cache().prune()
        #expect(try p.cache().stats().days.reduce(0) { $0 + $1.shows } == 80)
        #expect(!Disk.exists(p.h.store.journal.folding.path))
    }

    @Test func peekingQueuesNothing() throws {
        let p = try Harness()
        for _ in 0..<3 { _ = try p.cache().next(NextOptions(peek: true)) }
        #expect(try p.cache().stats().pending == 0)
        #expect(try p.report() == ReportResult())
        #expect(p.trackerRequests.isEmpty)
    }

    @Test func macrosAreExpandedAndEncodedWhenQueued() throws {
        let p = try Harness(ids: ["spring sale/é&x"])
        let t = try #require(Time.parse("2026-12-01T08:30:00.250Z"))
        #expect(try p.cache(at: t).shown()?.id == "spring sale/é&x")
        try p.cache(at: t + 2).event(.click, id: "spring sale/é&x")
        #expect(try p.report().delivered == 2)
        let impression = try #require(p.trackerRequests.first { $0.path.hasPrefix("/t/impression") })
        #expect(impression.path.contains("ts=2026-12-01T08%3A30%3A00.250Z&"), "\(impression.path)")
        #expect(impression.path.contains("ad=spring%20sale%2F%C3%A9%26x&"), "\(impression.path)")
        #expect(impression.path.contains("ev=impression&dev=dev%201"), "\(impression.path)")
        let cb = try #require(Harness.query(impression, "cb"))
        #expect(cb.count == 8 && cb.allSatisfy(\.isNumber))
        let click = try #require(p.trackerRequests.first { $0.path.hasPrefix("/t/click") })
        #expect(click.path.contains("ts=2026-12-01T08%3A30%3A02.250Z&"), "\(click.path)")
        #expect(click.path.contains("ev=click"))
        // No device id configured: the macro is empty.
        p.deviceId = nil
        _ = try p.cache(at: t + 10).shown()
        _ = try p.report()
        #expect(p.trackerRequests.last?.path.hasSuffix("&dev=") == true, "\(p.trackerRequests.last?.path ?? "")")
    }

    @Test func offlineEventsAreDeliveredOnceOnline() throws {
        let p = try Harness()
        for _ in 0..<3 { _ = try p.cache().shown() }
        try p.cache().event(.complete, id: "a")
        p.setTracker { _ in LoopbackServer.Response(status: 200) }
        // Offline: nothing listens where the trackers point.
        let port = p.h.server.port
        p.h.server.stop()
        let offline = try p.report {
            $0.transfer.retries = 0; $0.transfer.timeout = 2
        }
        #expect(offline.counts == ReportResult(delivered: 0, pending: 4, dropped: 0))
        #expect(offline.lastError?.contains("could not connect") == true, "report -v says why")
        #expect(try p.cache().stats().pending == 4)
        // Online again on the same port (the URLs were fixed when queued).
        let online = try LoopbackServer(port: port) { _ in LoopbackServer.Response(status: 200) }
        defer { online.stop() }
        #expect(try p.report() == ReportResult(delivered: 4, pending: 0, dropped: 0))
        #expect(online.log.count == 4)
        let stats = try p.cache().stats()
        #expect(stats.pending == 0 && stats.delivered == 4 && stats.oldestPending == nil)
    }

    @Test func aTransientAnswerIsRetriedWithTheSameURLAndAPermanentOneDropped() throws {
        let p = try Harness(ids: ["a", "b"])
        let seen = Counter()
        p.setTracker { r in
            if r.path.contains("ad=b") { return .text(404, "no such campaign") }
            return seen.next() == 0 ? .text(503, "busy") : .text(200, "ok")
        }
        _ = try p.cache().shown()
        _ = try p.cache().shown()
        let r = try p.report()
        #expect(r == ReportResult(delivered: 1, pending: 0, dropped: 1))
        let forA = p.trackerRequests.filter { $0.path.contains("ad=a") }
        #expect(forA.count == 2 && forA[0].path == forA[1].path, "a retry sends the identical URL")
        #expect(p.trackerRequests.filter { $0.path.contains("ad=b") }.count == 1, "a 404 is not retried")
        let stats = try p.cache().stats()
        #expect(stats.droppedPermanent == 1 && stats.delivered == 1 && stats.pending == 0)

        // A 503 that persists through the run's retries stays queued for the next run.
        p.setTracker { _ in .text(503, "down") }
        _ = try p.cache().shown()
        #expect(try p.report { $0.transfer.retries = 1 }.counts == ReportResult(delivered: 0, pending: 1, dropped: 0))
        let pending = p.trackerRequests.suffix(2)
        p.setTracker { _ in .text(204, "") }
        #expect(try p.report() == ReportResult(delivered: 1, pending: 0, dropped: 0))
        #expect(Set(p.trackerRequests.suffix(3).map(\.path)).count == 1, "\(pending.map(\.path))")
    }

    @Test func redirectsAreFollowedAndARedirectElsewhereIsPermanent() throws {
        let p = try Harness(ids: ["a", "b"])
        let server = p.h.server!
        p.setTracker { r in
            if r.path.hasPrefix("/t/pixel") { return .text(200, "GIF89a") }
            if r.path.contains("ad=a") { return .redirect(server.url("/t/pixel?from=a")) }
            return .redirect("ftp://127.0.0.1/pixel")
        }
        _ = try p.cache().shown()
        _ = try p.cache().shown()
        #expect(try p.report() == ReportResult(delivered: 1, pending: 0, dropped: 1))
        #expect(p.trackerRequests.contains { $0.path == "/t/pixel?from=a" })
    }

    @Test func batchesOfFiveHundredGoToTheReportURLEachEventOnce() throws {
        let p = try Harness(extra: "")
        p.reportUrl = p.h.server.url("/report")
        p.setTracker { _ in .text(200, "ok") }
        let t0 = 1_800_000_000.0
        for i in 0..<1200 {
            if i % 100 == 99 { _ = try p.cache().prune() }   // folds the journal, as cron would
            if i % 2 == 0 {
                _ = try p.cache(at: t0 + Double(i)).shown()
            } else {
                try p.cache(at: t0 + Double(i)).event(.skip, id: "a")
            }
        }
        let r = try p.report { _ in }
        #expect(r.pending == 0 && r.dropped == 0)
        #expect(r.delivered == 2400, "1,200 tracker calls and 1,200 events in batches")
        let posts = p.h.server.requests(to: "/report")
        #expect(posts.count == 3)
        var nonces: [String] = []
        for post in posts {
            #expect(post.method == "POST" && post.header("Content-Type") == "application/json")
            let json = try JSONValue.parse(post.body)
            #expect(json["device"]?.stringValue == "dev 1")
            let events = try #require(json["events"]?.arrayValue)
            #expect(events.count <= 500)
            for e in events {
                #expect(e["id"]?.stringValue == "a")
                #expect(["impression", "skip"].contains(e["event"]?.stringValue ?? ""))
                #expect(e["at"]?.stringValue?.hasSuffix(".000Z") == true)
                nonces.append(try #require(e["nonce"]?.stringValue))
            }
        }
        #expect(nonces.count == 1200 && Set(nonces).count == 1200, "each event once")
    }

    @Test func theFeedsReportURLServesWhenNoneIsConfigured() throws {
        let probe = try FetchHarness()
        let url = probe.server.url("/report")
        probe.setOverride { r in r.path == "/report" ? .text(202, "accepted") : nil }
        let p = try Harness(extra: "\"reportUrl\": \"\(url)\",")
        #expect(try p.h.index().reportUrl == url)
        _ = try p.cache().shown()
        let r = try p.report()
        #expect(r == ReportResult(delivered: 2, pending: 0, dropped: 0))
        #expect(probe.server.requests(to: "/report").count == 1)
    }

    @Test func clearKeepsTheQueueAndTheCountsUnlessAsked() throws {
        let p = try Harness()
        for _ in 0..<2 { _ = try p.cache().shown() }
        #expect(try p.cache().clear() > 0)
        #expect(try p.h.index().ads.isEmpty)
        var stats = try p.cache().stats()
        #expect(stats.pending == 2 && stats.days.first?.shows == 2, "billing data survives clear")
        #expect(try p.report().delivered == 2)
        _ = try p.h.fetch()
        _ = try p.cache().shown()
        _ = try p.cache().clear(events: true)
        stats = try p.cache().stats()
        #expect(stats.pending == 0 && stats.days.isEmpty && stats.delivered == 0)
    }

    /// Counts follow the id, not the index: an ad withdrawn and pruned keeps its days; a day
    /// older than 90 days goes at the next fold.
    @Test func countsOutliveTheAdAndLastNinetyDays() throws {
        let p = try Harness(ids: ["a", "b"])
        let now = Date().timeIntervalSince1970
        _ = try p.cache(at: now - 100 * 86400).shown()   // a show 100 days ago
        _ = try p.cache(at: now).shown()
        _ = try p.cache(at: now).shown()
        p.h.feed(#"{"version": 1, "ads": []}"#)   // both withdrawn
        _ = try p.h.fetch()
        _ = try p.cache().prune()
        #expect(try p.h.index().ads.isEmpty)
        let stats = try p.cache().stats(StatsOptions(since: Date(timeIntervalSince1970: now - 200 * 86400)))
        #expect(stats.days.map(\.id).sorted() == ["a", "b"], "\(stats.days)")
        #expect(stats.days.allSatisfy { $0.day == Time.formatDay(Time.localDay(now)) }, "the 100-day-old one is gone")
    }

    /// The failure paths of the queue itself: a second report while one runs is busy (and
    /// sends nothing); an events.json that cannot be read is set aside with a warning and the
    /// journal's events are not lost; an event queued for a batch when no report URL is known
    /// any more is dropped and counted, never left pending forever.
    /// events.json keeps a previous generation (SPEC §3: as durable as the index): a damaged
    /// one is set aside and the previous one read, losing at most the last change.
    @Test func aDamagedQueueFallsBackToItsPreviousGeneration() throws {
        let p = try Harness()
        for _ in 0..<2 { _ = try p.cache().shown() }
        _ = try p.cache().prune()   // a fold: events.json with both shows
        _ = try p.cache().shown()
        _ = try p.cache().prune()   // another: the first becomes events.json.old
        #expect(Disk.exists(p.h.store.directory + "/events.json.old"))
        try Data("{\"version\": 1, \"queue\": [".utf8).write(to: URL(fileURLWithPath: p.h.store.eventsPath))
        let warnings = Collected()
        let log = try p.h.store.loadEvents(warn: warnings.add, setAside: true)
        #expect(warnings.messages.contains { $0.contains("using events.json.old") }, "\(warnings.messages)")
        #expect(log.queue.count == 2, "the previous generation's queue, not an empty one")
        #expect(log.days.values.flatMap(\.values).reduce(0) { $0 + $1.shows } == 2)
    }

    @Test func aBusyReportACorruptQueueAndAVanishedReportURL() throws {
        let p = try Harness()
        p.reportUrl = p.h.server.url("/report")
        _ = try p.cache().shown()
        let lock = FileLock(p.h.store.dir.file("report.lock"))
        #expect(try lock.tryLock())
        do {
            _ = try p.report()
            Issue.record("a second report ran")
        } catch let e as AdCacheError {
            #expect(e.caseName == "busy")
        }
        lock.unlock()
        #expect(p.trackerRequests.isEmpty, "the busy report sent nothing")

        _ = try p.cache().prune()   // folds: the show is in events.json now
        try Data("{\"version\": 1, \"queue\": [".utf8).write(to: URL(fileURLWithPath: p.h.store.eventsPath))
        _ = try p.cache().shown()   // in the journal, not yet folded
        let warnings = Collected()
        let log = try p.h.store.foldJournal(bounds: EventBounds(), now: { _ in Date().timeIntervalSince1970 }) {
            warnings.add($0)
        }.log
        #expect(warnings.messages.contains { $0.contains("events.json could not be read") }, "\(warnings.messages)")
        #expect(Disk.list(p.h.store.directory).contains { $0.hasPrefix("events.json.corrupt-") })
        #expect(log.queue.count == 1, "the journal's event survives the lost queue")

        p.reportUrl = nil   // configured when queued, gone when sending: the batch waits for one
        p.setTracker { _ in .text(200, "ok") }
        let r = try p.report()
        #expect(r == ReportResult(delivered: 1, pending: 1, dropped: 0))
        #expect(try p.cache().stats().droppedPermanent == 0)
        #expect(p.h.server.requests(to: "/report").isEmpty)
        p.reportUrl = p.h.server.url("/report")
        #expect(try p.report() == ReportResult(delivered: 1, pending: 0, dropped: 0))
        #expect(p.h.server.requests(to: "/report").count == 1)
    }

    @Test func eventsNeedAnAdTheCacheHolds() throws {
        let p = try Harness()
        #expect(throws: AdCacheError.self) { try p.cache().event(.click, id: "nope") }
        do {
            try p.cache().event(.click, id: "nope")
        } catch let e as AdCacheError {
            #expect(e.caseName == "unknownAd")
        }
        try p.cache().event(.click, id: "a")
        #expect(try p.cache().stats().days.first?.clicks == 1)
    }

    @Test func theQueueIsBoundedAndEveryDropIsCounted() throws {
        let p = try Harness()
        let now = Date().timeIntervalSince1970
        // Queued 40 days ago (shown and folded then), never delivered since.
        for i in 0..<5 { _ = try p.cache(device: now - 40 * 86400 + Double(i)).shown() }
        _ = try p.cache(device: now - 40 * 86400 + 10).prune()
        // Dated 40 days ago by a clock set back, queued now: not old for that (SPEC §8).
        for i in 0..<3 { _ = try p.cache(at: now - 40 * 86400 + Double(i)).shown() }
        for i in 0..<10 { try p.cache(at: now + Double(i)).event(.click, id: "a") }
        p.setTracker { _ in .text(503, "down") }
        #expect(try p.report { $0.transfer.retries = 0 }.pending == 13)
        #expect(try p.cache().stats().droppedAge == 5, "queued more than 30 days ago; the 3 misdated stay")
        let r = try p.report {
            $0.maxEvents = 4; $0.transfer.retries = 0
        }
        #expect(r.pending == 4)
        let stats = try p.cache().stats()
        #expect(stats.droppedAge == 5)
        #expect(stats.droppedOverflow == 9, "beyond 4 queued, the oldest first")
        #expect(stats.days.reduce(0) { $0 + $1.clicks } == 10, "the counts keep every event")
    }

    @Test func weightedRotationSurvivesTheJournalAndItsFold() throws {
        let p = try Harness(ids: ["a", "b", "c"], weights: [5, 3, 2])
        var counts: [String: Int] = [:]
        for i in 0..<100 {
            if i % 7 == 0 { _ = try p.cache().report() }   // folds the journal now and then
            counts[try #require(try p.cache().shown()?.id), default: 0] += 1
        }
        #expect(counts == ["a": 50, "b": 30, "c": 20])
    }

    /// A fold is three durable steps — events.json, index.json, emptying the journal. A crash
    /// after any of them, then another show, then a fold: every show counted once.
    @Test(arguments: [1, 2])
    func aFoldCutShortCountsNothingTwice(stepsDone: Int) throws {
        let p = try Harness()
        for _ in 0..<3 { _ = try p.cache().shown() }
        let store = p.h.store
        let records = try store.journal.read(warn: { _ in })
        var log = try store.loadEvents(warn: { _ in }, setAside: false)
        log.fold(records, bounds: EventBounds(), now: Date().timeIntervalSince1970)
        try store.saveEvents(log)   // step 1
        if stepsDone >= 2 { try store.save(try store.loadLocked(warn: { _ in }).index) }   // step 2
        #expect(try store.journal.read(warn: { _ in }).count == 3, "the crash: the journal was not emptied")
        #expect(try p.h.index().ads[0].shows == 3)
        _ = try p.cache().shown()
        _ = try p.cache().prune()
        #expect(Disk.size(store.journal.path) ?? 0 == 0 && !Disk.exists(store.journal.folding.path))
        #expect(try p.h.index().ads[0].shows == 4)
        let stats = try p.cache().stats()
        #expect(stats.days.map(\.shows) == [4] && stats.pending == 4)
        #expect(try p.report().delivered == 4)
        #expect(p.trackerRequests.count == 4)
    }

    /// Without fetch, report or prune, the journal would grow forever: past its size limit a
    /// launch folds it, and nothing is lost or counted twice.
    @Test func aLongJournalIsFoldedByALaunch() throws {
        let p = try Harness()
        let store = CacheStore(directory: p.h.store.directory, journalFoldSize: 2000)
        let selector = Selector(store: store, proofOfPlay: .init(), warn: { _ in })
        var sizes: [Int64] = []
        for _ in 0..<12 {
            _ = try selector.decide(NextOptions(), at: .device(Date().timeIntervalSince1970))
            sizes.append(store.journal.size)
        }
        #expect(sizes.contains(0), "folded along the way: \(sizes)")
        #expect(sizes.allSatisfy { $0 <= 2000 + 1000 }, "\(sizes)")
        #expect(try p.h.index().ads[0].shows == 12)
        let stats = try p.cache().stats()
        #expect(stats.days.map(\.shows) == [12] && stats.pending == 12)
    }

    /// A crash mid-append leaves a last line without its newline: it is no record (the show
    /// was never reported to the app), and the next append cuts it off instead of gluing
    /// itself to it. A garbled line in the middle is skipped with a warning.
    @Test func aTornOrGarbledJournalLineIsNeverAShow() throws {
        let p = try Harness()
        _ = try p.cache().shown()
        let path = p.h.store.journal.path
        let handle = try #require(FileHandle(forWritingAtPath: path))
        handle.seekToEndOfFile()
        handle.write(Data(#"{"at":1796000000,"day":20787,"event":"impression","id":"a","no"#.utf8))
        try handle.close()
        #expect(try p.h.index().ads[0].shows == 1, "the torn line is not a show")
        _ = try p.cache().shown()
        let text = try String(contentsOfFile: path, encoding: .utf8)
        #expect(text.split(separator: "\n").count == 2 && text.hasSuffix("\n"), "\(text)")
        #expect(try p.h.index().ads[0].shows == 2)
        // Garbage between two good lines.
        let h2 = try #require(FileHandle(forWritingAtPath: path))
        h2.seekToEndOfFile()
        h2.write(Data("\u{0}\u{0}\u{0}garbage\n".utf8))
        try h2.close()
        _ = try p.cache().shown()
        let warnings = Collected()
        let loaded = try p.h.store.load(warn: { warnings.add($0) })
        #expect(loaded.ads[0].shows == 3)
        #expect(warnings.messages.contains { $0.contains("journal: skipped 1 damaged line") }, "\(warnings.messages)")
        _ = try p.cache().prune()
        #expect(try p.cache().stats().days.map(\.shows) == [3])
    }

    @Test func aRecordedShowAppendsALineAndLeavesTheIndexAlone() throws {
        let p = try Harness(ids: (0..<50).map { "ad\($0)" })
        let index = try Data(contentsOf: URL(fileURLWithPath: p.h.store.indexPath))
        _ = try p.cache().shown()
        let journal = Disk.size(p.h.store.journal.path) ?? 0
        #expect(journal > 0 && journal < 1024, "\(journal) bytes")
        #expect(try Data(contentsOf: URL(fileURLWithPath: p.h.store.indexPath)) == index)
        // A fold takes it into the index and the queue, once.
        _ = try p.cache().prune()
        #expect(Disk.size(p.h.store.journal.path) ?? 0 == 0 && !Disk.exists(p.h.store.journal.folding.path))
        #expect(try p.h.index().ads.reduce(0) { $0 + $1.shows } == 1)
        #expect(try p.cache().stats().pending == 1)
    }
}
