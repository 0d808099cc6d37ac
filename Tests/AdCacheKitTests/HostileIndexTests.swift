import Foundation
import TestSupport
import Testing

@testable import AdCacheKit

/// A corrupt or hostile `index.json` (SPEC §6): no content of it can crash adcache or make it
/// open or delete anything that is not an asset of the cache.
@Suite struct HostileIndexTests {
    let now = 1_803_859_200.0

    /// Files outside the cache that a hostile index tries to have deleted, and the names
    /// that reach them from `assets/`.
    struct Victims {
        let paths: [String]
        let names: [String]

        init(_ f: CacheFixture) {
            let beside = f.dir.write("victim", "keep me")
            let inside = f.store.directory + "/keep-me"
            FileManager.default.createFile(atPath: inside, contents: Data("keep me".utf8))
            paths = [beside, inside]
            names = [
                "../victim", "../../victim", beside, "../" + String(repeating: "../", count: 12) + beside,
                "../keep-me", "../index.json", ".", "..", "", "assets/../../victim",
                String(repeating: "a", count: 64) + ".jpg/../../../victim",
                String(repeating: "A", count: 64) + ".jpg", String(repeating: "a", count: 64) + ".",
                String(repeating: "a", count: 64) + "-" + String(repeating: "v", count: 17) + ".jpg",
            ]
        }

        func allThere() -> Bool { paths.allSatisfy { Disk.exists($0) } }
    }

    func prune(_ f: CacheFixture, maxSize: Int64? = 0, warn: @escaping @Sendable (Diagnostic) -> Void = { _ in }) throws
        -> PruneReport
    {
        try f.cache(at: now, warn: warn).prune(PruneOptions(maxSize: maxSize))
    }

    @Test func fileNamesThatAreNotAssetsAreNeverDeleted() throws {
        let f = try CacheFixture(); defer { f.remove() }
        let victims = Victims(f)
        // Every way of reaching a record's file out of the cache: expired (deleted as
        // expired), evicted by the size budget, and withdrawn.
        var records: [AdRecord] = []
        for (n, name) in victims.names.enumerated() {
            for state in ["expired", "evicted", "withdrawn"] {
                records.append(
                    f.ready("\(state)-\(n)") {
                        $0.file = name
                        $0.shows = 2
                        if state == "expired" { $0.expires = now - 1 }
                        if state == "withdrawn" { $0.state = .withdrawn }
                    })
            }
        }
        try f.save(records)
        let warnings = Collected()
        _ = try prune(f, warn: warnings.add)
        #expect(victims.allThere())
        #expect(
            warnings.messages.contains { $0.contains("ad 'evicted-0' loses its file: its file name is not an asset's") }
        )
        // The records keep their counts (only the file is lost).
        let after = try f.index()
        #expect(after.ads.contains { $0.id == "evicted-0" && $0.shows == 2 && $0.file == nil && $0.state == .pending })
        #expect(after.ads.allSatisfy { $0.file == nil })
    }

    @Test func nextAndListNeverOpenAFileNamedOutsideTheCache() throws {
        let f = try CacheFixture(); defer { f.remove() }
        let victims = Victims(f)
        let size = Int64(Disk.size(victims.paths[0])!)
        // A record that would be ready if its file were the victim (same size).
        let hostile = f.ready("hostile", priority: 10) {
            $0.file = "../victim"; $0.bytes = size
        }
        let good = f.ready("good")
        try f.save([hostile, good])
        let warnings = Collected()
        let choice = try f.cache(at: now, warn: warnings.add).shown()
        #expect(choice?.id == "good")
        #expect(
            warnings.messages == [
                "index.json: ad 'hostile' loses its file: its file name is not an asset's (<64 hex digits>.<ext>)"
            ])
        let listed = try f.cache(at: now).list()
        #expect(listed.first { $0.id == "hostile" }?.path == nil)
        #expect(listed.first { $0.id == "hostile" }?.state == .pending)
    }

    @Test(arguments: [
        (#""shows": -9223372036854775808"#, "\"shows\""),
        (#""shows": 9223372036854775807"#, "\"shows\""),
        (#""maxShows": -1"#, "\"maxShows\""),
        (#""expires": 1e300"#, "\"expires\""),
        (#""expires": -1e300"#, "\"expires\""),
        (#""start": 1e400"#, "\"start\""),
        (#""lastShown": 99999999999999"#, "\"lastShown\""),
        (#""lastShowSeq": -5"#, "\"lastShowSeq\""),
        (#""showsOnDay": -1"#, "\"showsOnDay\""),
        (#""showDay": 9223372036854775807"#, "\"showDay\""),
        (#""duration": -9223372036854775808"#, "\"duration\""),
        (#""shows": "3""#, "\"shows\""),
        (#""shows": 1.5"#, "\"shows\""),
        (#""state": "archived""#, "state 'archived'"),
        (#""type": "audio""#, "\"type\""),
    ])
    func impossibleValuesDropTheRecordNotTheIndex(field: String, named: String) throws {
        let f = try CacheFixture(); defer { f.remove() }
        let bad = f.ready("bad") { $0.shows = 1 }
        let good = f.ready("good") { $0.shows = 4 }
        try f.save([bad, good])
        let key = String(field.prefix { $0 != ":" })
        var text = try String(contentsOfFile: f.store.indexPath, encoding: .utf8)
        // The first record is "bad", on a line of its own: replace (or add) the field there.
        var lines = text.components(separatedBy: "\n")
        let line = try #require(lines.firstIndex { $0.contains(#""id":"bad""#) })
        var record = lines[line]
        if let at = record.range(of: key + ":") {   // up to the next field (values here hold no comma)
            let end = record[at.upperBound...].firstIndex { $0 == "," || $0 == "}" }!
            record.replaceSubrange(at.lowerBound..<end, with: field)
        } else {
            record.insert(contentsOf: field + ",", at: record.index(after: record.firstIndex(of: "{")!))
        }
        lines[line] = record
        text = lines.joined(separator: "\n")
        FileManager.default.createFile(atPath: f.store.indexPath, contents: Data(text.utf8))

        var warnings: [String] = []
        let index = try f.store.load { warnings.append($0.message) }
        #expect(index.ads.map(\.id) == ["good"])
        #expect(index.ads.first?.shows == 4)
        #expect(warnings.count == 1)
        #expect(warnings.first?.hasPrefix("index.json: dropped the record of ad 'bad': ") == true, "\(warnings)")
        #expect(warnings.first?.contains(named) == true, "\(warnings)")
        #expect(Disk.list(f.store.directory).filter { $0.hasPrefix("index.json.corrupt") }.isEmpty)

        // A command that only reads repairs nothing on disk; one that writes keeps the rest.
        _ = try f.cache(at: now).shown(NextOptions(peek: true))
        #expect(try String(contentsOfFile: f.store.indexPath, encoding: .utf8) == text)
        #expect(try f.cache(at: now).shown()?.id == "good")
        #expect(try f.index().ads.map(\.shows) == [5])
    }

    @Test func aSecondRecordWithTheSameIDIsDropped() throws {
        let f = try CacheFixture()
        defer { f.remove() }
        let first = f.ready("twin") { $0.shows = 2 }
        let second = f.ready("twin", priority: 9) { $0.shows = 0 }
        try f.save([first, second])
        let warnings = Collected()
        #expect(try f.cache(at: now, warn: warnings.add).list().map(\.shows) == [2])
        #expect(warnings.messages == ["index.json: dropped the record of ad 'twin': an earlier record has the same id"])
    }

    /// The journal is applied by each record's place in what was kept: with a dropped twin
    /// before it, a show recorded for a later ad still counts on that ad (its one show
    /// allowed is used, so the next launch picks the other).
    @Test func showsAfterADroppedTwinCountOnTheirOwnAd() throws {
        let f = try CacheFixture()
        defer { f.remove() }
        try f.save([f.ready("twin"), f.ready("twin"), f.ready("once", priority: 9) { $0.maxShows = 1 }])
        #expect(try f.cache(at: now).shown()?.id == "once")
        #expect(try f.cache(at: now).shown()?.id == "twin")
        #expect(try f.cache(at: now).list().map(\.shows) == [1, 1])
    }

    @Test func showCounterOutOfRangeRestartsAboveEveryRecord() throws {
        let f = try CacheFixture(); defer { f.remove() }
        let a = f.ready("a") { $0.lastShowSeq = 7 }
        let b = f.ready("b") { $0.lastShowSeq = 3 }
        try f.save([a, b])
        var text = try String(contentsOfFile: f.store.indexPath, encoding: .utf8)
        text = text.replacingOccurrences(of: "\"showSeq\": 0", with: "\"showSeq\": 9223372036854775807")
        FileManager.default.createFile(atPath: f.store.indexPath, contents: Data(text.utf8))
        var warnings: [String] = []
        #expect(try f.store.load { warnings.append($0.message) }.showSeq == 7)
        #expect(warnings.count == 1)
        #expect(try f.cache(at: now).shown()?.id == "b")
        #expect(try f.index().showSeq == 8)
    }

    @Test func timesAndStampsOutOfRangeDoNotTrap() throws {
        for t in [Double.nan, .infinity, -.infinity, 1e300, -1e300, 9.3e18] {
            #expect(Time.format(t).hasSuffix("Z"))
            _ = Time.localDay(t)
        }
        #expect(Time.parse(.int(Int64.min)) == nil)
        #expect(Time.parse(.string("9999-12-31T23:59:59Z")) != nil)
        // A file dated past 2262 overflows nanoseconds since 1970.
        let dir = TempDir(); defer { dir.remove() }
        let path = dir.write("late", "x")
        var times = [timespec(tv_sec: 10_000_000_000, tv_nsec: 0), timespec(tv_sec: 10_000_000_000, tv_nsec: 0)]
        #expect(utimensat(AT_FDCWD, path, &times, 0) == 0)
        #expect(Disk.stamp(path)?.mtime == Int64.max)
    }

    /// Thousands of damaged indexes, each run through `list`, `next --peek`, `next` and
    /// `prune --max-size`: no trap, no file outside the cache touched, every outcome an
    /// index, a repair or an error with an exit code.
    @Test func thousandsOfMutatedIndexes() throws {
        let f = try CacheFixture(memory: true); defer { f.remove() }
        let victims = Victims(f)
        var rng = SplitMix(seed: 0x1DE8)
        let seeds: [AdRecord] = [
            f.ready("a", priority: 5) {
                $0.maxShows = 3; $0.shows = 1; $0.lastShown = now - 10; $0.lastShowSeq = 1; $0.showDay = 20_877;
                $0.showsOnDay = 1
            },
            f.ready("b") {
                $0.start = now - 100; $0.expires = now + 100; $0.maxShowsPerDay = 2; $0.minInterval = 60;
                $0.meta = .object(["t": .string("x")])
            },
            f.ready("c") { $0.state = .withdrawn },
            f.ready("d") {
                $0.state = .failed; $0.error = "HTTP 404"
            },
        ]
        var seedIndex = CacheIndex()
        seedIndex.ads = seeds
        seedIndex.showSeq = 1
        seedIndex.lastShown = now - 10
        seedIndex.feed = FeedSource(url: "https://ads.example.com/feed.json", etag: "\"e\"")
        let seedText = String(decoding: try IndexCoder.encode(seedIndex), as: UTF8.self)
        let seedLines = seedText.components(separatedBy: "\n")
        let hostileValues: [String] =
            [
                "-9223372036854775808", "9223372036854775807", "9223372036854775808", "1e300", "-1e300", "1e400",
                "-1", "0", "0.5", "-0", "99999999999999999999", "null", "true", "[]", "{}", "\"\"", "\"-1\"",
                "\"\\u001b]0;owned\\u0007\"", "\"archived\"", "\"video\"", "\"ready\"", "\"withdrawn\"",
            ] + victims.names.map { "\"" + $0.replacingOccurrences(of: "/", with: "\\/") + "\"" }
        let alphabet = Array(#"{}[]":,0123456789-+.eE truefalsnul\/"#.utf8) + [0x00, 0xFF, 0x0A]
        var outcomes: [String: Int] = [:]
        let rounds = 5_000

        for _ in 0..<rounds {
            var lines = seedLines
            for _ in 0..<(1 + Int(rng.next() % 4)) {
                let at = Int(rng.next() % UInt64(lines.count))
                guard let colon = lines[at].range(of: "\": ") else { continue }
                let comma = lines[at].hasSuffix(",") ? "," : ""
                let value = hostileValues[Int(rng.next() % UInt64(hostileValues.count))]
                lines[at] = String(lines[at][..<colon.upperBound]) + value + comma
            }
            var bytes = Array(lines.joined(separator: "\n").utf8)
            if rng.next() % 4 == 0 {
                for _ in 0..<(1 + Int(rng.next() % 3)) where !bytes.isEmpty {
                    let pos = Int(rng.next() % UInt64(bytes.count))
                    switch rng.next() % 3 {
                    case 0: bytes[pos] = alphabet[Int(rng.next() % UInt64(alphabet.count))]
                    case 1: bytes.insert(alphabet[Int(rng.next() % UInt64(alphabet.count))], at: pos)
                    default: bytes = Array(bytes.prefix(pos))
                    }
                }
            }
            // Restore the seed's files (prune deletes them), then the damaged index.
            for r in seeds where !Disk.exists(f.store.assetPath(r.file!)) {
                FileManager.default.createFile(atPath: f.store.assetPath(r.file!), contents: Data(Media.jpeg(100)))
            }
            FileManager.default.createFile(atPath: f.store.indexPath, contents: Data(bytes))

            var outcome: [String] = []
            let collected = Collected()
            let cache = f.cache(at: now, warn: collected.add)
            do {
                _ = ListedAd.json(try cache.list())
                _ = try cache.shown(NextOptions(peek: true))?.json
                _ = try cache.shown()
                _ = try cache.prune(PruneOptions(maxSize: Int64(rng.next() % 3) * 100))
                outcome.append("ok")
            } catch let e as AdCacheError {
                outcome.append(e.caseName)
            }
            let warnings = collected.messages
            if warnings.contains(where: { $0.contains("moved it aside") }) { outcome.append("moved aside") }
            if warnings.contains(where: { $0.hasPrefix("index.json: dropped") || $0.contains("loses its file") }) {
                outcome.append("repaired")
            }
            outcomes[outcome.joined(separator: ", "), default: 0] += 1
            #expect(
                victims.allThere(), "a file outside the assets was deleted by \(String(decoding: bytes, as: UTF8.self))"
            )
            for name in Disk.list(f.store.directory) where name.hasPrefix("index.json.corrupt-") {
                Disk.remove(f.store.directory + "/" + name)
            }
        }
        print(
            "index fuzz: \(rounds) indexes: "
                + outcomes.sorted { $0.key < $1.key }.map { "\($0.key): \($0.value)" }.joined(separator: "; "))
        // The mutations reach each kind of outcome: otherwise the fuzzer tests too little.
        #expect(outcomes.keys.contains("ok"))
        #expect(outcomes.keys.contains { $0.contains("repaired") })
        #expect(outcomes.keys.contains { $0.contains("moved aside") })
    }
}

/// Asset names are checked eight bytes at a time: a byte just outside 0-9 and a-f at any of
/// the 64 positions is refused, as the byte-wise check refused it.
@Suite struct AssetNameCheckTests {
    @Test func everyPositionOfTheHashIsChecked() {
        let good = String(repeating: "0123456789abcdef", count: 4)
        #expect(AssetName.isValid(good + ".jpg"))
        #expect(AssetName.isValid(good + "-mx5m1r7y1bqx.mp4"))
        for position in 0..<64 {
            for bad in ["/", ":", "`", "g", "A", "F", " ", ".", "\u{7F}", "é", "\u{0}"] {
                var chars = Array(good)
                chars[position] = Character(bad)
                #expect(!AssetName.isValid(String(chars) + ".jpg"), "\(position) \(bad.unicodeScalars.first!.value)")
            }
        }
        #expect(!AssetName.isValid(good.uppercased() + ".jpg"))
        #expect(!AssetName.isValid(String(good.dropLast()) + ".jpg"))
        #expect(!AssetName.isValid("../../../../../../../../../../../../../../../../../../../../../../etc/passwd.jpg"))
    }
}
