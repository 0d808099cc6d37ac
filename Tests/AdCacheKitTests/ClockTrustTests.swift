import Foundation
import TestSupport
import Testing

@testable import AdCacheKit

/// SPEC §6 *Clock trust*: the feed server's `Date` corrects a device clock that is more than
/// five minutes off, for fetch itself and for next, list and prune, until a later fetch
/// measures again; `--at` is taken as given.
@Suite struct ClockTrustTests {

    /// A server whose clock reads `skew` seconds from the real one, serving `feed`.
    func serve(_ h: FetchHarness, feed: String, skew: Double) {
        let body = Array(feed.utf8)
        h.setOverride { r in
            guard r.path == "/feed.json" else { return nil }
            let date = httpDate(Date().timeIntervalSince1970 + skew)
            return LoopbackServer.Response(
                status: 200, headers: [("Content-Type", "application/json"), ("Date", date)], body: body)
        }
    }

    func fetch(_ h: FetchHarness, warnings: Collected) throws -> FetchReport {
        let cache = AdCache(.init(directory: h.store.directory, diagnostics: warnings.add))
        var o = FetchOptions(feed: h.server.url("/feed.json"))
        o.transfer.retries = 0
        return try cache.fetch(o)
    }

    @Test func aDeviceClockYearsAheadNeitherExpiresNorPrunesTheCache() throws {
        let h = try FetchHarness()
        h.put("/a.jpg", Media.jpeg())
        let real = Date().timeIntervalSince1970
        // Expired a day ago by the device clock; current by the server's, three years behind.
        serve(h, feed: #"[{"id":"a","url":"a.jpg","expires":\#(Int(real - 86400))}]"#, skew: -3 * 365.25 * 86400)
        let warnings = Collected()
        let report = try fetch(h, warnings: warnings)
        #expect(report.ads.map(\.outcome) == [.downloaded])
        #expect(
            warnings.messages == ["the device clock is 3 years ahead of the feed server's; using the server's time"])
        let offset = try #require(try h.index().clockOffset)
        #expect(abs(offset + 3 * 365.25 * 86400) < 10)
        // next, list and prune use the corrected time: the ad is ready and stays.
        let device = AdCache(.init(directory: h.store.directory))
        #expect(try device.list().map(\.state) == [.ready])
        #expect(try device.prune().removed.isEmpty)
        #expect(try device.shown()?.id == "a")
        // An explicit time is taken as given.
        let given = AdCache(.init(directory: h.store.directory, clock: .fixed(Date(timeIntervalSince1970: real))))
        #expect(try given.list().map(\.state) == [.expired])
        // A later fetch against a server that agrees clears the offset (and the ad expires).
        serve(h, feed: #"[{"id":"a","url":"a.jpg","expires":\#(Int(real - 86400))}]"#, skew: 60)
        let quiet = Collected()
        #expect(try fetch(h, warnings: quiet).ads.map(\.outcome) == [.expired])
        #expect(quiet.messages.isEmpty)
        #expect(try h.index().clockOffset == nil)
        #expect(try device.list().map(\.state) == [.expired])
    }

    @Test func aDeviceClockDaysBehindShowsWhatHasStarted() throws {
        let h = try FetchHarness()
        h.put("/a.jpg", Media.jpeg())
        let real = Date().timeIntervalSince1970
        serve(h, feed: #"[{"id":"a","url":"a.jpg","start":\#(Int(real + 86400))}]"#, skew: 2 * 86400)
        let warnings = Collected()
        _ = try fetch(h, warnings: warnings)
        #expect(warnings.messages == ["the device clock is 2 days behind the feed server's; using the server's time"])
        let device = AdCache(.init(directory: h.store.directory))
        #expect(try device.list().map(\.state) == [.ready])
        let shown = try #require(try device.shown())
        // The show is dated by the corrected clock.
        let lastShown = try #require(try h.index().ads.first?.lastShown)
        #expect(abs(lastShown - (real + 2 * 86400)) < 60)
        #expect(shown.id == "a")
    }

    @Test func withinFiveMinutesNothingIsCorrectedAndALocalFeedMeasuresNothing() throws {
        let h = try FetchHarness()
        h.put("/a.jpg", Media.jpeg())
        serve(h, feed: #"[{"id":"a","url":"a.jpg"}]"#, skew: 290)
        let warnings = Collected()
        _ = try fetch(h, warnings: warnings)
        #expect(warnings.messages.isEmpty)
        #expect(try h.index().clockOffset == nil)
        #expect(
            Fetcher.span(90) == "2 minutes" && Fetcher.span(3600 * 5) == "5 hours" && Fetcher.span(86400) == "24 hours")
    }

    /// SPEC v3 §6: the server's time is its `Date` plus the answer's `Age` — a CDN's copy
    /// cached an hour is no clock an hour behind.
    @Test func aCachedAnswersAgeIsNoClockError() throws {
        let h = try FetchHarness()
        h.put("/a.jpg", Media.jpeg())
        let body = Array(#"[{"id":"a","url":"a.jpg"}]"#.utf8)
        h.setOverride { r in
            guard r.path == "/feed.json" else { return nil }
            let date = httpDate(Date().timeIntervalSince1970 - 3600)   // stored an hour ago
            return LoopbackServer.Response(
                status: 200, headers: [("Content-Type", "application/json"), ("Date", date), ("Age", "3600")],
                body: body)
        }
        let warnings = Collected()
        _ = try fetch(h, warnings: warnings)
        #expect(!warnings.messages.contains { $0.contains("device clock") }, "\(warnings.messages)")
        #expect(try h.index().clockOffset == nil)
    }

    /// SPEC v3 §6: a feed's freshness is reckoned on the clock its own answer measured. With
    /// the device two days ahead, a `max-age` of an hour keeps the feed fresh for an hour of
    /// the server's time, not for two days and an hour.
    @Test func freshnessIsReckonedOnTheMeasuredClock() throws {
        let h = try FetchHarness()
        h.put("/a.jpg", Media.jpeg())
        let body = Array(#"[{"id":"a","url":"a.jpg"}]"#.utf8)
        h.setOverride { r in
            guard r.path == "/feed.json" else { return nil }
            return LoopbackServer.Response(
                status: 200,
                headers: [
                    ("Content-Type", "application/json"), ("Date", httpDate(Date().timeIntervalSince1970)),
                    ("Cache-Control", "max-age=3600"),
                ], body: body)
        }
        let ahead = 2 * 86400.0
        let start = Date().timeIntervalSince1970 + ahead
        func cache(after seconds: Double) -> AdCache {
            AdCache(
                .init(directory: h.store.directory, clock: .device { Date(timeIntervalSince1970: start + seconds) }))
        }
        var o = FetchOptions(feed: h.server.url("/feed.json"))
        o.transfer.retries = 0
        _ = try cache(after: 0).fetch(o)
        let stored = try #require(try h.index().feed?.freshUntil)
        #expect(abs(stored - (start - ahead + 3600)) < 120, "fresh until an hour of the server's time")
        let asked = h.server.requests(to: "/feed.json").count
        _ = try cache(after: 600).fetch(o)
        #expect(h.server.requests(to: "/feed.json").count == asked, "fresh ten minutes later")
        _ = try cache(after: 7200).fetch(o)
        #expect(h.server.requests(to: "/feed.json").count == asked + 1, "asked again two hours later")
    }
    /// A box that booted in 1970 fetches (offset: +56 years), then NTP sets its clock right:
    /// until it reboots, the trusted time is the server's time then plus the boot clock's
    /// elapsed time — not the right clock plus the stale offset (2082: everything expired).
    @Test func aClockSteppedAfterTheMeasurementKeepsTheTrustedTime() throws {
        let h = try FetchHarness()
        h.put("/a.jpg", Media.jpeg())
        let real = Date().timeIntervalSince1970
        serve(h, feed: #"[{"id":"a","url":"a.jpg","expires":\#(Int(real + 30 * 86400))}]"#, skew: 0)
        let booted1970 = real - 56 * 365.25 * 86400
        let start = Date().timeIntervalSince1970
        let before = AdCache(
            .init(
                directory: h.store.directory,
                clock: .device(
                    { Date(timeIntervalSince1970: booted1970 + Date().timeIntervalSince1970 - start) },
                    bootClock: true)))
        var o = FetchOptions(feed: h.server.url("/feed.json"))
        o.transfer.retries = 0
        #expect(try before.fetch(o).ads.map(\.outcome) == [.downloaded])
        #expect(try h.index().clockSync != nil)
        // NTP synced: the device clock is right now.
        let synced = AdCache(.init(directory: h.store.directory, clock: .system))
        #expect(try synced.list().map(\.state) == [.ready], "not 2082")
        #expect(abs(synced.now().timeIntervalSince1970 - Date().timeIntervalSince1970) < 60)
        #expect(try synced.shown()?.id == "a")
        #expect(try synced.prune().removed.isEmpty)
        // Without the boot clock (after a reboot, as before): the clock plus the offset.
        let rebooted = AdCache(.init(directory: h.store.directory, clock: .device { Date() }))
        #expect(try rebooted.list().map(\.state) == [.expired])
    }

    /// `fetch` measures the clock before it judges the queue: a device clock 40 days ahead
    /// does not make the events queued today 40 days old.
    @Test func fetchMeasuresTheClockBeforeItJudgesTheQueue() throws {
        let h = try FetchHarness()
        h.put("/a.jpg", Media.jpeg())
        let real = Date().timeIntervalSince1970
        let tracker = h.server.url("/imp")
        serve(h, feed: #"[{"id":"a","url":"a.jpg","tracking":{"impression":["\#(tracker)"]}}]"#, skew: 0)
        var o = FetchOptions(feed: h.server.url("/feed.json"))
        o.transfer.retries = 0
        o.report = false
        _ = try AdCache(.init(directory: h.store.directory)).fetch(o)
        for _ in 0..<3 { _ = try AdCache(.init(directory: h.store.directory)).shown() }
        _ = try AdCache(.init(directory: h.store.directory)).prune()   // queued today
        _ = try AdCache(.init(directory: h.store.directory)).shown()   // and one to fold
        let ahead = AdCache(
            .init(directory: h.store.directory, clock: .device { Date(timeIntervalSince1970: real + 40 * 86400) }))
        _ = try ahead.fetch(o)
        let stats = try ahead.stats()
        #expect(stats.droppedAge == 0 && stats.pending == 4, "\(stats)")
    }
    /// The boot clock's rule on its own (SPEC §6): in the same boot, a device clock that
    /// moved with the boot clock keeps clock + offset; one stepped by more than 300 s since
    /// the measurement gives the server's time then plus the boot clock's elapsed time;
    /// after a reboot (another boot id) or a boot clock gone backwards, clock + offset again.
    @Test func theBootClockRule() {
        let sync = ClockSync(device: 1_000, boot: BootClock(bootId: "boot-a", seconds: 50))
        let offset = 2_000_000_000.0   // measured at 1970 + 1000 s against a server in 2033
        func now(_ device: Double, _ boot: BootClock?) -> Double {
            sync.trusted(deviceNow: device, offset: offset, bootNow: boot)
        }
        let later = BootClock(bootId: "boot-a", seconds: 650)   // 600 s of boot time later
        #expect(now(1_600, later) == 1_600 + offset, "moved with the boot clock")
        #expect(now(1_800, later) == 1_800 + offset, "200 s off: within the tolerance")
        #expect(now(1_900_000_000, later) == 1_000 + offset + 600, "stepped by NTP: the server's time then + 600 s")
        #expect(now(1_900_000_000, BootClock(bootId: "boot-b", seconds: 20)) == 1_900_000_000 + offset, "rebooted")
        #expect(now(1_900_000_000, BootClock(bootId: "boot-a", seconds: 10)) == 1_900_000_000 + offset)
        #expect(now(1_900_000_000, nil) == 1_900_000_000 + offset, "no boot clock")
        #expect(ClockSync(text: sync.text) == sync)
        #expect(ClockSync.corrected(5, offset: nil, sync: sync, bootClock: true) == 5, "no offset: as it reads")
        #expect(ClockSync.corrected(5, offset: 7, sync: sync, bootClock: false) == 12, "a clock of a test's making")
    }
}
