import Foundation
import TestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Crashes at named steps (`ADCACHE_CRASH_AT`, a debug build's `CrashPoint`) instead of
/// timed kills: each test ends the process at one step of a fold, a commit, a prune or a
/// report, and checks what SPEC §6 and §8 promise of the cache it leaves.
@Suite(.serialized) struct CrashPointTests {
    /// A cache fed over HTTP (trackers and a report URL on the same loopback server), with
    /// shows in the journal and deliveries in the queue.
    final class Rig: @unchecked Sendable {
        let dir = TempDir()
        let server: LoopbackServer
        var cache: String { dir.path + "/cache" }
        var c: [String] { ["--cache-dir", cache] }

        init() throws {
            let state = Shared()
            server = try LoopbackServer { r in
                switch r.path {
                case "/feed.json":
                    let v = state.version
                    return .text(
                        200,
                        """
                        {"ads":[{"id":"a","url":"a\(v).jpg","weight":2,"tracking":{"impression":["/imp?a=[ADID]&n=[CACHEBUSTING]"]}}
                        \(state.withdrawB ? "" : #",{"id":"b","url":"b\#(v).png","weight":1}"#)],"reportUrl":"/pop"}
                        """)
                case "/imp", "/pop": return .text(204, "")
                default:
                    let seed = UInt8(state.version)
                    return .file(
                        r.path.hasSuffix("png") ? Media.png(3000, seed: seed) : Media.jpeg(3000, seed: seed), for: r)
                }
            }
            self.state = state
            try #require(run(["fetch", server.url("/feed.json")]).status == 0)
            for _ in 0..<3 { try #require(run(["next"]).status == 0) }
        }
        let state: Shared

        final class Shared: @unchecked Sendable {
            private let lock = NSLock()
            private var v = 1
            private var w = false
            var version: Int {
                get { lock.lock(); defer { lock.unlock() }; return v }
                set { lock.lock(); v = newValue; lock.unlock() }
            }
            /// The feed no longer lists `b`.
            var withdrawB: Bool {
                get { lock.lock(); defer { lock.unlock() }; return w }
                set { lock.lock(); w = newValue; lock.unlock() }
            }
        }

        func run(_ args: [String], crashAt point: String? = nil) -> Run {
            Adcache.run(c + args, environment: point.map { ["ADCACHE_CRASH_AT": $0] } ?? [:])
        }

        func remove() {
            server.stop()
            dir.remove()
        }

        /// Shows per ad by the index (`list --json`) and by `stats`.
        func books() throws -> (index: [String: Int], stats: [String: Int]) {
            let list = run(["list", "--json"]), stats = run(["stats", "--json"])
            let ads = try #require(try JSONSerialization.jsonObject(with: Data(list.stdout.utf8)) as? [[String: Any]])
            let json = try #require(try JSONSerialization.jsonObject(with: Data(stats.stdout.utf8)) as? [String: Any])
            var index: [String: Int] = [:]
            for ad in ads { index[ad["id"] as? String ?? "?"] = ad["shows"] as? Int ?? -1 }
            var counted: [String: Int] = [:]
            for day in json["days"] as? [[String: Any]] ?? [] {
                counted[day["id"] as? String ?? "?", default: 0] += day["shows"] as? Int ?? 0
            }
            return (index, counted)
        }

        /// Every ad `list` calls ready has its file; none is missing.
        func everyReadyFileIsThere() throws -> Bool {
            let list = run(["list", "--json"])
            let ads = try #require(try JSONSerialization.jsonObject(with: Data(list.stdout.utf8)) as? [[String: Any]])
            return ads.allSatisfy { ad in
                guard ad["state"] as? String != "missing" else { return false }
                guard ad["state"] as? String == "ready" else { return true }
                return (ad["path"] as? String).map { FileManager.default.fileExists(atPath: $0) } ?? false
            }
        }
    }

    /// The fold's steps: events.json written, the index written, the journal emptied.
    @Test(arguments: [
        "fold.afterMove", "fold.afterEvents", "fold.afterIndex", "fold.afterRemove", "write.events.json.beforeRename",
        "write.index.json.beforeRename", "save.beforeDigest", "write.index.sel.beforeRename",
    ])
    func aFoldCutShortCountsEveryShowOnce(point: String) throws {
        let rig = try Rig()
        defer { rig.remove() }
        let crashed = rig.run(["prune"], crashAt: point)
        #expect(crashed.status == 222, "the crash point \(point) is reached: \(crashed.stderr)")
        let after = try rig.books()
        #expect(after.stats.values.reduce(0, +) == 3, "\(point): \(after.stats)")
        #expect(after.index == after.stats, "\(point): index \(after.index), stats \(after.stats)")
        #expect(rig.run(["next"]).status == 0)
        #expect(rig.run(["prune"]).status == 0)
        let folded = try rig.books()
        #expect(folded.stats.values.reduce(0, +) == 4 && folded.index == folded.stats, "\(point): \(folded)")
    }

    /// A launch killed after its show is durable, before it printed: counted once, and the
    /// next launch works.
    @Test func aLaunchCutShortAfterItsShowCountsItOnce() throws {
        let rig = try Rig()
        defer { rig.remove() }
        #expect(rig.run(["next"], crashAt: "journal.afterAppend").status == 222)
        let after = try rig.books()
        #expect(after.stats.values.reduce(0, +) == 4 && after.index == after.stats, "\(after)")
        #expect(rig.run(["next"]).status == 0)
    }

    /// The commit's steps: the new assets durable, the index's temporary durable, the index
    /// committed with the superseded files not yet deleted. The old index or the new one,
    /// every ready ad's file there, and the next fetch completes.
    /// (`save.beforeDigest`, `write.index.sel.beforeRename`: the new index committed, the
    /// selection digest beside it still the old one's, which a launch must not believe.)
    @Test(arguments: [
        "fetch.beforeCommit", "write.index.json.beforeRename", "save.beforeDigest", "write.index.sel.beforeRename",
        "fetch.afterCommit",
    ])
    func aCommitCutShortLeavesAWholeIndex(point: String) throws {
        let rig = try Rig()
        defer { rig.remove() }
        rig.state.version = 2   // every asset has a new URL
        let crashed = rig.run(["fetch"], crashAt: point)
        #expect(crashed.status == 222, "\(point) reached: \(crashed.stderr)")
        #expect(try rig.everyReadyFileIsThere(), "\(point): \(rig.run(["list"]).stdout)")
        // The launch shows a file of the index as it is (the old files are still on disk
        // until the commit's deletions: a stale digest would name one of those).
        let shown = rig.run(["next", "--peek"]).stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        let listed = try #require(
            try JSONSerialization.jsonObject(with: Data(rig.run(["list", "--json"]).stdout.utf8)) as? [[String: Any]])
        #expect(listed.contains { $0["path"] as? String == shown }, "\(point): shown \(shown)")
        #expect(rig.run(["next"]).status == 0)
        let again = rig.run(["fetch"])
        #expect(again.status == 0, "\(point): \(again.stderr)")
        #expect(try rig.everyReadyFileIsThere())
        let after = try rig.books()
        #expect(after.index == after.stats && after.stats.values.reduce(0, +) == 4, "\(point): \(after)")
    }

    /// The prune's steps: the index written, the files it no longer names part-deleted.
    @Test(arguments: ["prune.afterSave", "prune.afterDelete"])
    func aPruneCutShortNeverLeavesAReadyAdWithoutItsFile(point: String) throws {
        let rig = try Rig()
        defer { rig.remove() }
        // `b` withdrawn more than 10 minutes ago: its file is deleted after the commit.
        rig.state.withdrawB = true
        #expect(rig.run(["fetch"]).status == 0)
        for name in Disk.list(rig.cache + "/assets") {
            let t = timespec(tv_sec: Int(Date().timeIntervalSince1970) - 3600, tv_nsec: 0)
            var times = [t, t]
            utimensat(AT_FDCWD, rig.cache + "/assets/" + name, &times, 0)
        }
        let crashed = rig.run(["prune", "--max-size", "4000"], crashAt: point)
        #expect(crashed.status == 222, "\(point) reached: \(crashed.stderr)")
        #expect(try rig.everyReadyFileIsThere(), "\(point): \(rig.run(["list"]).stdout)")
        #expect(rig.run(["prune", "--max-size", "4000"]).status == 0)
        #expect(try rig.everyReadyFileIsThere())
        let after = try rig.books()
        #expect(after.stats.values.reduce(0, +) == 3, "\(point): \(after)")
    }

    /// Killed fetches leave finished downloads in assets/ that no index names (152 dead files
    /// after 210 kills in a torture run): the next fetch removes those past the grace.
    @Test func aFetchSweepsWhatKilledFetchesLeft() throws {
        let rig = try Rig()
        defer { rig.remove() }
        for v in 2...4 {
            rig.state.version = v
            #expect(rig.run(["fetch"], crashAt: "fetch.beforeCommit").status == 222)
        }
        let assets = rig.cache + "/assets"
        let named = { () throws -> Set<String> in
            let list = rig.run(["list", "--json"])
            let ads = try #require(try JSONSerialization.jsonObject(with: Data(list.stdout.utf8)) as? [[String: Any]])
            return Set(ads.compactMap { ($0["path"] as? String).map { ($0 as NSString).lastPathComponent } })
        }
        let leftovers = Set(Disk.list(assets)).subtracting(try named())
        #expect(leftovers.count == 6, "two files from each killed fetch: \(leftovers)")
        let old = timespec(tv_sec: Int(Date().timeIntervalSince1970) - 3600, tv_nsec: 0)
        for name in leftovers {
            var times = [old, old]
            utimensat(AT_FDCWD, assets + "/" + name, &times, 0)
        }
        rig.state.version = 1   // the feed as committed: nothing new to download
        #expect(rig.run(["fetch"]).status == 0)
        #expect(Set(Disk.list(assets)) == (try named()), "only what the index names is left: \(Disk.list(assets))")
    }
}
