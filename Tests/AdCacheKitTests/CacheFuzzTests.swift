import AdCacheKit
import Foundation
import TestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// SPEC §6: no content of any file in the cache — the index and its previous generation,
/// the journal, the event queue, the lock files, `partial/` — can crash adcache or make it
/// touch anything outside the cache. Every round damages a seeded cache (a weighted
/// rotation, shows in the journal, deliveries in the queue) — values changed, keys deleted
/// and duplicated, records reordered, files truncated or replaced by links, fifos and
/// directories — and runs `list`, `next --peek`, `next`, `stats`, `prune` and `report`
/// against a loopback server. An inotify watch on a directory of sentinels outside, which
/// every link the fuzzer plants points into, must see nothing at all (not even an open).
@Suite struct CacheFuzzTests {
    static let rounds = 2_000

    /// The cache's files, as bytes by relative path.
    typealias Snapshot = [String: [UInt8]]

    static func snapshot(_ root: String) throws -> Snapshot {
        var out: Snapshot = [:]
        for path in try FileManager.default.subpathsOfDirectory(atPath: root) {
            var st = stat()
            guard lstat(root + "/" + path, &st) == 0, (st.st_mode & S_IFMT) == S_IFREG else { continue }
            out[path] = Array(try Data(contentsOf: URL(fileURLWithPath: root + "/" + path)))
        }
        return out
    }

    static func restore(_ s: Snapshot, to root: String) {
        try? FileManager.default.removeItem(atPath: root)
        for folder in ["", "/assets", "/partial"] { mkdir(root + folder, 0o755) }
        for (path, bytes) in s { FileManager.default.createFile(atPath: root + "/" + path, contents: Data(bytes)) }
    }

    @Test func thousandsOfDamagedCaches() throws {
        let dir = Disk.exists("/dev/shm") ? TempDir(under: "/dev/shm") : TempDir()
        defer { dir.remove() }
        let outside = dir.path + "/outside"
        mkdir(outside, 0o755)
        let sentinels = ["journal", "index.json", "events.json", "victim.jpg"]
        for name in sentinels {
            _ = FileManager.default.createFile(atPath: outside + "/" + name, contents: Data(name.utf8))
        }

        let server = try LoopbackServer { r in
            switch r.path {
            case "/imp", "/click", "/pop": return .text(204, "")
            default: return .text(404, "")
            }
        }
        defer { server.stop() }
        _ = dir.write("a.jpg", Media.jpeg())
        _ = dir.write("b.png", Media.png())
        _ = dir.write("c.mp4", Media.mp4())
        let imp = server.url("/imp")
        let feed = dir.write(
            "feed.json",
            """
            {"ads":[
              {"id":"a","url":"a.jpg","weight":3,"maxShows":500,"tracking":{"impression":["\(imp)?a=[ADID]"]}},
              {"id":"b","url":"b.png","weight":1,"maxShowsPerDay":400,"tracking":{"click":["\(server.url("/click"))"]}},
              {"id":"c","url":"c.mp4","type":"video","placement":"other","priority":3}
            ],"reportUrl":"\(server.url("/pop"))"}
            """)
        let cacheDir = dir.path + "/cache"
        let now = 1_803_859_200.0
        func cache(_ warn: @escaping @Sendable (Diagnostic) -> Void = { _ in }) -> AdCache {
            AdCache(.init(directory: cacheDir, clock: .device { Date(timeIntervalSince1970: now) }, diagnostics: warn))
        }
        _ = try cache().fetch(FetchOptions(feed: feed))
        for _ in 0..<4 { _ = try cache().next() }
        try cache().event(.click, id: "b")
        _ = try cache().prune()   // folds: the queue in events.json, the rotation in the index
        for _ in 0..<3 { _ = try cache().next() }   // shows in the journal
        _ = try cache().fetch(FetchOptions(feed: feed))   // index.json.old
        for _ in 0..<2 { _ = try cache().next() }
        // A fold cut short after its first step: the journal moved aside, launches since.
        try #require(rename(cacheDir + "/journal", cacheDir + "/journal.folding") == 0)
        for _ in 0..<2 { _ = try cache().next() }
        FileManager.default.createFile(
            atPath: cacheDir + "/partial/" + String(repeating: "b", count: 64) + ".part",
            contents: Data(Media.jpeg(70_000)))
        // The report server's remembered "not before" (already passed), which report reads.
        FileManager.default.createFile(
            atPath: cacheDir + "/report.retry-after", contents: Data("\(server.baseURL) \(Int(now) - 60)\n".utf8))
        let seed = try Self.snapshot(cacheDir)
        for name in [
            "index.json", "index.json.old", "journal", "journal.folding", "events.json", "fetch.lock", "index.lock",
            "journal.lock", "report.retry-after", "index.sel",
        ] {
            try #require(seed[name] != nil, "the seed has \(name): \(seed.keys.sorted())")
        }

        // The watch: any open, change, creation or deletion in the sentinels' directory.
        let watch = inotify_init1(Int32(IN_NONBLOCK | IN_CLOEXEC))
        try #require(watch >= 0)
        defer { close(watch) }
        let mask = UInt32(IN_OPEN | IN_MODIFY | IN_ATTRIB | IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO)
        try #require(inotify_add_watch(watch, outside, mask) >= 0)

        var rng = SplitMix(seed: 0xCAC4E)
        var fuzz = Mutator(outside: outside, sentinels: sentinels)
        var outcomes: [String: Int] = [:]
        var escapes = 0
        for round in 0..<Self.rounds {
            Self.restore(seed, to: cacheDir)
            let damage = fuzz.damage(cacheDir, seed: seed, &rng)
            let collected = Collected()
            let c = cache(collected.add)
            var outcome: [String] = []
            func attempt(_ what: String, _ body: () throws -> Void) {
                do {
                    try body()
                } catch let e as AdCacheError {
                    outcome.append("\(what) \(e.caseName)")
                } catch {
                    Issue.record("round \(round) (\(damage)): \(what) threw \(error), not an AdCacheError")
                }
            }
            attempt("list") { _ = ListedAd.json(try c.list()) }
            attempt("peek") { _ = try c.shown(NextOptions(peek: true))?.json }
            attempt("next") { _ = try c.shown() }
            attempt("stats") { _ = try c.stats() }
            attempt("why") { _ = try c.why() }
            if rng.next() % 4 == 0 { attempt("verify") { _ = try c.verify() } }   // it rewrites what it finds damaged
            attempt("prune") { _ = try c.prune(PruneOptions(maxSize: rng.next() % 2 == 0 ? nil : 4_000)) }
            var options = ReportOptions()
            options.transfer.timeout = 5
            attempt("report") { _ = try c.report(options) }
            // The next launch after the damage is not blocked by it.
            attempt("next again") { _ = try c.next() }
            let warnings = collected.messages
            for (label, sign) in Self.signs where warnings.contains(where: { $0.contains(sign) }) {
                outcome.append(label)
            }
            outcomes[outcome.isEmpty ? "ok" : outcome.joined(separator: ", "), default: 0] += 1
            if Self.drain(watch) > 0 {
                escapes += 1
                Issue.record("round \(round) (\(damage)): something outside the cache was touched")
            }
        }
        for name in sentinels {
            #expect(FileManager.default.contents(atPath: outside + "/" + name) == Data(name.utf8))
        }
        let summary = outcomes.sorted { $0.value > $1.value }.prefix(12).map { "\($0.key): \($0.value)" }
        print("cache fuzz: \(Self.rounds) rounds, \(escapes) escapes; " + summary.joined(separator: "; "))
        print(
            "cache fuzz: mutations "
                + fuzz.counts.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", "))
        #expect(escapes == 0)
        // The damage reaches each kind of outcome: otherwise the fuzzer tests too little.
        #expect(outcomes["ok"] ?? 0 > 0)
        for (label, _) in Self.signs {
            #expect(outcomes.keys.contains { $0.contains(label) }, "no round was \(label)")
        }
    }

    /// What a round's warnings say adcache worked around.
    static let signs: [(String, String)] = [
        ("index set aside", "index.json could not be read"), ("record repaired", "index.json: "),
        ("journal lines skipped", "journal: skipped"), ("queue set aside", "events.json could not be read"),
        ("odd file replaced", "replaced it"), ("folder not entered", "not entered"),
    ]

    /// The number of inotify events waiting.
    static func drain(_ fd: Int32) -> Int {
        var buffer = [UInt8](repeating: 0, count: 4096)
        var events = 0
        while true {
            let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            guard n > 0 else { return events }
            var offset = 0
            while offset + 16 <= n {
                let length = buffer.withUnsafeBytes { $0.load(fromByteOffset: offset + 12, as: UInt32.self) }
                offset += 16 + Int(length)
                events += 1
            }
        }
    }
}

/// Damages a cache directory in one to three places.
struct Mutator {
    let outside: String
    let sentinels: [String]
    var counts: [String: Int] = [:]

    static let hostile: [String] = [
        "-9223372036854775808", "9223372036854775807", "9223372036854775808", "99999999999999999999", "1e300",
        "-1e300", "1e400", "-1", "0", "0.5", "null", "true", "[]", "{}", "\"\"", "\"-1\"", "\"../../victim.jpg\"",
        "\"\\u001b]0;owned\\u0007\"", "\"withdrawn\"", "\"video\"", "\"ready\"",
    ]

    mutating func damage(_ root: String, seed: CacheFuzzTests.Snapshot, _ rng: inout SplitMix) -> String {
        var done: [String] = []
        let files = seed.keys.sorted()
        for _ in 0..<(1 + Int(rng.next() % 3)) {
            let name = files[Int(rng.next() % UInt64(files.count))]
            let path = root + "/" + name
            // Never through a link the fuzzer planted itself (the watch would see the test).
            var st = stat()
            let folder = (path as NSString).deletingLastPathComponent
            guard lstat(folder, &st) == 0, (st.st_mode & S_IFMT) == S_IFDIR, lstat(path, &st) == 0,
                (st.st_mode & S_IFMT) == S_IFREG, var bytes = FileManager.default.contents(atPath: path).map(Array.init)
            else { continue }
            let kind: String
            switch rng.next() % 12 {
            case 0:
                kind = "link"
                unlink(path)
                let target = outside + "/" + sentinels[Int(rng.next() % UInt64(sentinels.count))]
                symlink(target, path)
            case 1:
                kind = ["fifo", "directory", "empty"][Int(rng.next() % 3)]
                unlink(path)
                if kind == "fifo" { mkfifo(path, 0o644) }
                if kind == "directory" { mkdir(path, 0o755) }
                if kind == "empty" { FileManager.default.createFile(atPath: path, contents: nil) }
            case 2:
                kind = "truncate"
                bytes = Array(bytes.prefix(Int(rng.next() % UInt64(bytes.count + 1))))
            case 3:
                kind = "bytes"
                for _ in 0..<(1 + Int(rng.next() % 4)) where !bytes.isEmpty {
                    let alphabet = Array(#"{}[]":,0123456789-+.e \n"#.utf8) + [0x00, 0xFF]
                    bytes[Int(rng.next() % UInt64(bytes.count))] = alphabet[Int(rng.next() % UInt64(alphabet.count))]
                }
            case 4:
                kind = "folder link"
                let folder = root + (rng.next() % 2 == 0 ? "/assets" : "/partial")
                try? FileManager.default.removeItem(atPath: folder)
                symlink(outside, folder)
            default:
                kind = "json"
                bytes = Self.mutateJSON(bytes, lines: name.hasPrefix("journal"), &rng)
            }
            if ["truncate", "bytes", "json"].contains(kind) {
                FileManager.default.createFile(atPath: path, contents: Data(bytes))
            }
            counts[kind, default: 0] += 1
            done.append("\(name): \(kind)")
        }
        return done.joined(separator: "; ")
    }

    /// A structural change to JSON text: a key deleted or duplicated, a value replaced, a
    /// record reordered, copied or deleted (for the journal, whose records are lines).
    static func mutateJSON(_ bytes: [UInt8], lines journal: Bool, _ rng: inout SplitMix) -> [UInt8] {
        var text = String(decoding: bytes, as: UTF8.self)
        // Every `"key":value` position, at any depth.
        let pairs = Self.pairs(in: text)
        switch rng.next() % 5 {
        case 0 where !pairs.isEmpty:   // delete a key (and its value)
            let p = pairs[Int(rng.next() % UInt64(pairs.count))]
            text.removeSubrange(p.whole)
            text = text.replacingOccurrences(of: ",,", with: ",").replacingOccurrences(of: "{,", with: "{")
                .replacingOccurrences(of: ",}", with: "}")
        case 1 where !pairs.isEmpty:   // duplicate a key with another value
            let p = pairs[Int(rng.next() % UInt64(pairs.count))]
            let copy = String(text[p.key]) + ":" + hostile[Int(rng.next() % UInt64(hostile.count))] + ","
            text.insert(contentsOf: copy, at: p.whole.lowerBound)
        case 2 where !pairs.isEmpty:   // a value replaced
            let p = pairs[Int(rng.next() % UInt64(pairs.count))]
            text.replaceSubrange(p.value, with: hostile[Int(rng.next() % UInt64(hostile.count))])
        default:   // records reordered, copied or dropped
            if journal {
                var lines = text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
                guard lines.count > 1 else { break }
                let i = Int(rng.next() % UInt64(lines.count - 1))
                switch rng.next() % 3 {
                case 0: lines.swapAt(i, Int(rng.next() % UInt64(lines.count - 1)))
                case 1: lines.insert(lines[i], at: Int(rng.next() % UInt64(lines.count)))
                default: lines.remove(at: i)
                }
                text = lines.joined(separator: "\n")
            } else if var object = try? JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any] {
                for key in ["ads", "queue", "days"] {
                    guard var list = object[key] as? [Any], list.count > 1 else { continue }
                    switch rng.next() % 3 {
                    case 0: list.reverse()
                    case 1: list.append(list[0])
                    default: list.removeFirst()
                    }
                    object[key] = list
                }
                if let data = try? JSONSerialization.data(withJSONObject: object, options: [.prettyPrinted]) {
                    text = String(decoding: data, as: UTF8.self)
                }
            }
        }
        return Array(text.utf8)
    }

    struct Pair {
        var key: Range<String.Index>
        var value: Range<String.Index>
        /// The key, its value and a following comma.
        var whole: Range<String.Index>
    }

    /// `"key": value` pairs whose value is a scalar (a string, number or literal).
    static func pairs(in text: String) -> [Pair] {
        var out: [Pair] = []
        var i = text.startIndex
        while let quote = text[i...].firstIndex(of: "\"") {
            guard let close = text[text.index(after: quote)...].firstIndex(of: "\"") else { break }
            var j = text.index(after: close)
            while j < text.endIndex, text[j] == " " { j = text.index(after: j) }
            guard j < text.endIndex, text[j] == ":" else {
                i = text.index(after: close)
                continue
            }
            var v = text.index(after: j)
            while v < text.endIndex, text[v] == " " { v = text.index(after: v) }
            var end = v
            if end < text.endIndex, text[end] == "\"" {
                end =
                    text[text.index(after: end)...].firstIndex(of: "\"").map { text.index(after: $0) } ?? text.endIndex
            } else {
                while end < text.endIndex, !",}]\n".contains(text[end]) { end = text.index(after: end) }
            }
            if end > v, !"{[".contains(text[v]) {
                var whole = end
                if whole < text.endIndex, text[whole] == "," { whole = text.index(after: whole) }
                out.append(Pair(key: quote..<text.index(after: close), value: v..<end, whole: quote..<whole))
            }
            i = end > v ? end : text.index(after: close)
        }
        return out
    }
}
