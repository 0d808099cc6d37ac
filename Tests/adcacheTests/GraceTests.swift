import Foundation
import TestSupport
import Testing

/// SPEC §6 v4 *Superseded files stay a while*: a path `next` printed stays on disk at least
/// 10 minutes, whatever made the index stop naming it — a withdrawal then the documented
/// `&& adcache prune`, an eviction by `--max-size` — and whatever crash came between.
@Suite struct GraceTests {
    typealias AdServer = VASTTests.AdServer
    typealias Device = VASTTests.Device

    /// `feed` served and fetched, then a launch: the path it printed.
    static func printed(_ feed: String, _ ads: AdServer, _ device: Device) throws -> String {
        ads["/feed.json"] = feed
        try #require(device.fetch(ads.base + "/feed.json").status == 0)
        let path = device.run(["next"]).stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        try #require(Disk.exists(path))
        return path
    }

    /// Dates `path` `seconds` back, as a file downloaded long ago is.
    static func age(_ path: String, by seconds: Int) {
        let t = timespec(tv_sec: Int(Date().timeIntervalSince1970) - seconds, tv_nsec: 0)
        var times = [t, t]
        #expect(utimensat(AT_FDCWD, path, &times, 0) == 0)
    }

    @Test func aPrintedPathSurvivesAWithdrawalAndAPrune() throws {
        let ads = try AdServer(); defer { ads.stop() }
        let b = ads.base
        let device = Device(); defer { device.s.remove() }
        let path = try Self.printed(#"{"ads":[{"id":"a","url":"\#(b)/a.jpg"}]}"#, ads, device)
        ads["/feed.json"] = #"{"ads":[]}"#
        #expect(device.run(["fetch", "--no-progress", b + "/feed.json"]).status == 0)
        let pruned = device.run(["prune"])
        #expect(pruned.status == 0)
        #expect(pruned.stdout.contains("kept 10 minutes"), "\(pruned.stdout)")
        #expect(Disk.exists(path), "the viewer can still open what next printed")
        #expect(device.run(["prune", "--max-size", "0"]).status == 0)
        #expect(Disk.exists(path))
    }

    @Test func aPrintedPathSurvivesAnEviction() throws {
        let ads = try AdServer(); defer { ads.stop() }
        let b = ads.base
        let device = Device(); defer { device.s.remove() }
        let path = try Self.printed(
            #"{"ads":[{"id":"a","url":"\#(b)/a.jpg"},{"id":"p","url":"\#(b)/p.png"}]}"#, ads, device)
        let r = device.run(["prune", "--max-size", "0", "--json"])
        #expect(r.status == 0)
        let removed = try #require(try jsonObject(r.stdout)["removed"] as? [[String: Any]])
        #expect(removed.count == 2 && removed.allSatisfy { $0["heldFile"] is String }, "\(removed)")
        #expect(Disk.exists(path))
        #expect(try device.listJSON().allSatisfy { $0["state"] as? String == "pending" })
    }

    /// A feed that moves an ad's expiry into the past (a campaign ended early): the file a
    /// launch printed a moment ago is kept by the prune after the fetch, though its record
    /// says it expired long ago.
    @Test func aPrintedPathSurvivesAnExpiryMovedBack() throws {
        let ads = try AdServer(); defer { ads.stop() }
        let b = ads.base
        let device = Device(); defer { device.s.remove() }
        let path = try Self.printed(#"{"ads":[{"id":"a","url":"\#(b)/a.jpg","expires":4102444800}]}"#, ads, device)
        Self.age(path, by: 86400)   // it has served for days
        ads["/feed.json"] = #"{"ads":[{"id":"a","url":"\#(b)/a.jpg","expires":1577836800}]}"#
        #expect(device.fetch(b + "/feed.json").status == 0)
        #expect(device.run(["prune"]).status == 0)
        #expect(Disk.exists(path), "printed a moment ago: kept")
    }

    /// A fetch killed between its commit and anything after it: the file the commit stopped
    /// naming was dated before the commit, so the next prune keeps it.
    @Test func aCrashAfterTheCommitStillKeepsTheGrace() throws {
        let ads = try AdServer(); defer { ads.stop() }
        let b = ads.base
        let device = Device(); defer { device.s.remove() }
        let path = try Self.printed(#"{"ads":[{"id":"a","url":"\#(b)/a.jpg"}]}"#, ads, device)
        Self.age(path, by: 3600)
        ads["/feed.json"] = #"{"ads":[{"id":"a","url":"\#(b)/a2.jpg"}]}"#
        let crashed = Adcache.run(
            ["--config", device.conf, "--cache-dir", device.s.cache, "fetch", "--no-progress", b + "/feed.json"],
            environment: ["ADCACHE_CRASH_AT": "fetch.afterCommit"])
        #expect(crashed.status == 222, "\(crashed.stderr)")
        #expect(device.run(["prune"]).status == 0)
        #expect(Disk.exists(path), "superseded a moment ago: kept")
    }
}
