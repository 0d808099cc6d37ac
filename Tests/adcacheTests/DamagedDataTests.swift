import Foundation
import TestSupport
import Testing

/// SPEC §6: no content of the index, the journal or the queue can crash adcache, and a
/// damaged record never blocks the next command. Run through the binary: a trap here is a
/// signal status, not the end of the test process.
@Suite struct DamagedDataTests {
    /// The exit codes of SPEC §5 a damaged cache may give; a trap gives a signal's number.
    static let codes: Set<Int32> = [0, 1, 64, 65, 69, 73, 74, 75]

    /// A cache with a weighted rotation folded into the index, two shows still in the
    /// journal, and `stats` counting them all.
    struct Seed {
        let dir = TempDir()
        var cache: String { dir.path + "/cache" }

        init() throws {
            _ = dir.write("a.jpg", Media.jpeg())
            _ = dir.write("b.png", Media.png())
            let feed = dir.write(
                "feed.json",
                #"{"ads":[{"id":"a","url":"a.jpg","weight":3,"maxShows":40},{"id":"b","url":"b.png","weight":1}]}"#)
            let c = ["--cache-dir", cache]
            try #require(Adcache.run(c + ["fetch", feed]).status == 0)
            for _ in 0..<4 { try #require(Adcache.run(c + ["next"]).status == 0) }
            try #require(Adcache.run(c + ["prune"]).status == 0)   // folds: picks, rotations in the index
            for _ in 0..<2 { try #require(Adcache.run(c + ["next"]).status == 0) }
        }

        /// A copy of the cache to damage.
        func copy(_ name: String) throws -> String {
            let target = dir.path + "/" + name
            try FileManager.default.copyItem(atPath: cache, toPath: target)
            return target
        }
    }

    static func showsInStats(_ cache: String) -> Int? {
        let run = Adcache.run(["--cache-dir", cache, "stats", "--json"])
        guard run.status == 0, let data = run.stdout.data(using: .utf8),
            let json = try? JSONSerialization.jsonObject(with: data) as? [String: Any],
            let days = json["days"] as? [[String: Any]]
        else { return nil }
        return days.reduce(0) { $0 + (($1["shows"] as? Int) ?? 0) }
    }

    /// Runs what a device runs after the damage: every outcome an exit code, each recorded
    /// show counted once by `stats`, and a launch that still works at the end.
    static func survives(_ cache: String, _ what: String, shows before: Int) {
        var recorded = 0
        for command in [["list"], ["next", "--peek"], ["next"], ["stats"], ["prune"], ["next"], ["list"], ["fetch"]] {
            let run = Adcache.run(["--cache-dir", cache] + command)
            #expect(codes.contains(run.status), "\(what): \(command) gave \(run.status): \(run.stderr)")
            if command == ["next"], run.status == 0, !run.stderr.contains("not recorded") { recorded += 1 }
        }
        #expect(showsInStats(cache) == before + recorded, "\(what): every show counted once")
        let last = Adcache.run(["--cache-dir", cache, "next"])
        #expect(last.status == 0, "\(what): the next launch still shows: \(last.stderr)")
    }

    @Test func everyKeyOfARecordDeletedInTurn() throws {
        let seed = try Seed()
        defer { seed.dir.remove() }
        let before = try #require(Self.showsInStats(seed.cache))
        #expect(before == 6)
        let index = try #require(
            JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: seed.cache + "/index.json")))
                as? [String: Any])
        let ads = try #require(index["ads"] as? [[String: Any]])
        try #require(ads.count == 2 && ads[0]["picks"] != nil, "the seed has a folded rotation: \(ads)")
        var cases: [(String, [String: Any])] = []
        for (n, ad) in ads.enumerated() {
            for key in ad.keys.sorted() {
                var damaged = index
                var list = ads
                list[n].removeValue(forKey: key)
                damaged["ads"] = list
                cases.append(("ads[\(n)] without \(key)", damaged))
            }
        }
        for key in index.keys.sorted() {
            var damaged = index
            damaged.removeValue(forKey: key)
            cases.append(("the index without \(key)", damaged))
        }
        for (i, (what, damaged)) in cases.enumerated() {
            let cache = try seed.copy("case\(i)")
            let data = try JSONSerialization.data(withJSONObject: damaged, options: [.prettyPrinted, .sortedKeys])
            try data.write(to: URL(fileURLWithPath: cache + "/index.json"))
            Self.survives(cache, what, shows: before)
        }
    }
}
