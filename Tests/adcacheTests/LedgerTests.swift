import Foundation
import TestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// SPEC §14: the ledger, the device key and `export`, checked through the built binary and
/// Debian's `minisign` (an auditor's tool, not ours).
@Suite struct LedgerTests {
    /// A cache of the example feed, its ledger in `data/adcache`, a report URL nobody answers
    /// (so that every event is queued), and shows recorded.
    final class Rig: @unchecked Sendable {
        let dir = TempDir()
        var cache: String { dir.path + "/cache" }
        var ledgerDir: String { dir.path + "/data/adcache" }
        var ledger: String { ledgerDir + "/ledger.jsonl" }
        let config: String

        init(shows: Int = 4) throws {
            config = dir.write("adcache.conf", "report-url = http://127.0.0.1:9/pop\n")
            try #require(run(["fetch", "-q", "--no-progress", packageRoot + "/Examples/feed.json"]).status == 0)
            for _ in 0..<shows { try #require(run(["next"]).status == 0) }
        }

        var environment: [String: String] { ["XDG_DATA_HOME": dir.path + "/data", "ADCACHE_CONFIG": config] }

        func run(_ args: [String], crashAt point: String? = nil) -> Run {
            var env = environment
            if let point { env["ADCACHE_CRASH_AT"] = point }
            return Adcache.run(["--cache-dir", cache] + args, environment: env)
        }

        func spawn(_ args: [String]) throws -> Process {
            let p = Process()
            p.executableURL = URL(fileURLWithPath: Adcache.binary)
            p.arguments = ["--cache-dir", cache] + args
            p.environment = environment.merging(["PATH": "/usr/bin:/bin", "HOME": dir.path, "TZ": "UTC"]) { $1 }
            p.standardOutput = FileHandle.nullDevice
            p.standardError = FileHandle.nullDevice
            try p.run()
            return p
        }

        /// The ledger's lines, each checked: whole, read, numbered from 1 without a gap,
        /// chained, no nonce twice. Returns the parsed lines.
        func checkedLedger(_ context: String) throws -> [[String: Any]] {
            let bytes = (try? Data(contentsOf: URL(fileURLWithPath: ledger))) ?? Data()
            if !bytes.isEmpty { #expect(bytes.last == 0x0A, "\(context): a torn last line") }
            var prev = String(repeating: "0", count: 64)
            var nonces = Set<String>()
            var lines: [[String: Any]] = []
            for (i, raw) in bytes.split(separator: 0x0A, omittingEmptySubsequences: false).dropLast().enumerated() {
                let line = try #require(
                    try JSONSerialization.jsonObject(with: Data(raw)) as? [String: Any], "\(context): line \(i + 1)")
                #expect(line["seq"] as? Int == i + 1, "\(context): line \(i + 1) has seq \(line["seq"] ?? "none")")
                #expect(line["prev"] as? String == prev, "\(context): line \(i + 1)'s prev")
                let nonce = try #require(line["nonce"] as? String)
                #expect(nonces.insert(nonce).inserted, "\(context): nonce \(nonce) twice")
                prev = sha256(Array(raw))
                lines.append(line)
            }
            return lines
        }

        /// The nonces of the events in the queue (events.json).
        func queuedNonces() throws -> Set<String> {
            guard let data = try? Data(contentsOf: URL(fileURLWithPath: cache + "/events.json")) else { return [] }
            let json = try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
            return Set((json["queue"] as? [[String: Any]] ?? []).compactMap { $0["nonce"] as? String })
        }

        /// Shows per ad and day by `stats --json`.
        func statsShows() throws -> [String: Int] {
            let json = try #require(
                try JSONSerialization.jsonObject(with: Data(run(["stats", "--json"]).stdout.utf8)) as? [String: Any])
            var shows: [String: Int] = [:]
            for day in json["days"] as? [[String: Any]] ?? [] {
                let n = day["shows"] as? Int ?? 0
                if n > 0 { shows["\(day["id"] as? String ?? "?") \(day["day"] as? String ?? "?")", default: 0] += n }
            }
            return shows
        }

        func remove() { dir.remove() }
    }

    static func sha256(_ bytes: [UInt8]) -> String {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/sha256sum")
        let input = Pipe(), output = Pipe()
        p.standardInput = input
        p.standardOutput = output
        try? p.run()
        input.fileHandleForWriting.write(Data(bytes))
        try? input.fileHandleForWriting.close()
        let out = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        p.waitUntilExit()
        return String(out.prefix(64))
    }

    /// Every queued record is in the ledger; every show in `stats` is a `show` line.
    func checkAgreement(_ rig: Rig, _ context: String) throws {
        let lines = try rig.checkedLedger(context)
        let nonces = Set(lines.compactMap { $0["nonce"] as? String })
        let queued = try rig.queuedNonces()
        #expect(queued.isSubset(of: nonces), "\(context): queued but not in the ledger: \(queued.subtracting(nonces))")
        var shows: [String: Int] = [:]
        for line in lines where line["event"] as? String == "show" {
            let day = (line["at"] as? String ?? "").prefix(10)   // TZ=UTC: the local day
            shows["\(line["id"] as? String ?? "?") \(day)", default: 0] += 1
        }
        #expect(shows == (try rig.statsShows()), "\(context): the ledger's shows \(shows)")
    }

    @Test func foldsAppendEveryShowAndEventOnceAndStatsAgree() throws {
        let rig = try Rig(shows: 3)
        defer { rig.remove() }
        #expect(rig.run(["event", "click", "spring-sale"]).status == 0)
        #expect(rig.run(["prune"]).status == 0)
        var lines = try rig.checkedLedger("after the first fold")
        #expect(lines.count == 3 * 2 + 1, "a show and its impression per show, and the click: \(lines)")
        #expect(lines.map { $0["event"] as? String ?? "" }.filter { $0 == "click" }.count == 1)
        try checkAgreement(rig, "after the first fold")
        for _ in 0..<2 { #expect(rig.run(["next"]).status == 0) }
        #expect(rig.run(["prune"]).status == 0)
        #expect(rig.run(["prune"]).status == 0)   // nothing new: nothing appended
        lines = try rig.checkedLedger("after the second fold")
        #expect(lines.count == 5 * 2 + 1)
        try checkAgreement(rig, "after the second fold")
        var st = stat()
        #expect(stat(rig.ledger, &st) == 0 && st.st_mode & 0o777 == 0o644)
    }

    /// A fold cut short after the ledger, whose next try makes fewer lines (render-mode shows
    /// past a 1-second render-timeout then, not once the timeout is 600): every line the first
    /// left is looked at, none appended twice (review of issue 39: the shows were appended
    /// again after its `unrendered` lines).
    @Test func aRetriedFoldThatMakesFewerLinesAppendsNoneTwice() throws {
        let rig = try Rig(shows: 0)
        defer { rig.remove() }
        let settings = "report-url = http://127.0.0.1:9/pop\nimpression = render\n"
        try (settings + "render-timeout = 1\n").write(toFile: rig.config, atomically: true, encoding: .utf8)
        for _ in 0..<3 { #expect(rig.run(["next"]).status == 0) }
        Thread.sleep(forTimeInterval: 1.3)
        let cut = rig.run(["prune"], crashAt: "fold.afterLedger")
        #expect(cut.status != 0, "the crash point was reached: \(cut.stderr)")
        let first = try rig.checkedLedger("after the cut fold")
        #expect(first.filter { $0["event"] as? String == "unrendered" }.count == 3, "\(first)")
        try (settings + "render-timeout = 600\n").write(toFile: rig.config, atomically: true, encoding: .utf8)
        #expect(rig.run(["prune"]).status == 0)
        let lines = try rig.checkedLedger("after the retried fold")   // no nonce twice, no gap
        #expect(lines.count == first.count, "nothing appended twice: \(lines.count) lines, \(first.count) before")
    }

    /// Root folding (a `sudo adcache report`) or exporting in a ledger directory the fetching
    /// user owns leaves every file that user's: its next fold still appends, and it still reads
    /// the device key (review of issue 39: root's files locked the fetcher out for good).
    @Test(.enabled(if: getuid() == 0, "needs root to act as root in another user's directory (CI runs as root)"))
    func rootLeavesTheLedgerToItsOwner() throws {
        let rig = try Rig(shows: 2)
        defer { rig.remove() }
        try FileManager.default.createDirectory(atPath: rig.ledgerDir, withIntermediateDirectories: true)
        let owner: uid_t = 65534
        #expect(chown(rig.ledgerDir, owner, gid_t(owner)) == 0)
        #expect(rig.run(["prune"]).status == 0)   // root folds: the ledger is made
        _ = rig.run(["export", "--public-key"])   // root makes the device key
        for name in ["ledger.jsonl", "ledger.lock", "device.key", "device.pub"] {
            var st = stat()
            #expect(stat(rig.ledgerDir + "/" + name, &st) == 0, "\(name)")
            #expect(st.st_uid == owner && st.st_gid == gid_t(owner), "\(name) is \(st.st_uid):\(st.st_gid)")
        }
        _ = try rig.checkedLedger("after root's fold")
    }

    @Test(.enabled(if: minisignInstalled, "minisign is not installed (make test installs it)"))
    func anExportIsVerifiedByMinisignAndATamperedOneIsRefused() throws {
        let rig = try Rig(shows: 4)
        defer { rig.remove() }
        #expect(rig.run(["prune"]).status == 0)
        let file = rig.dir.path + "/export.jsonl"
        let exported = rig.run(["export", "--output", file])
        #expect(exported.status == 0, "\(exported.stderr)")
        #expect(exported.stdout.contains("exported 8 lines (seq 1 to 8)"), "\(exported.stdout)")
        var st = stat()
        #expect(stat(rig.ledgerDir + "/device.key", &st) == 0 && st.st_mode & 0o777 == 0o600)
        let pub = rig.run(["export", "--public-key"])
        #expect(pub.status == 0)
        #expect(pub.stdout == (try String(contentsOfFile: rig.ledgerDir + "/device.pub", encoding: .utf8)))
        let verified = runProgram("/usr/bin/minisign", ["-Vm", file, "-p", rig.ledgerDir + "/device.pub"])
        #expect(verified.status == 0, "\(verified.stdout)\(verified.stderr)")
        #expect(verified.stdout.contains("Signature and comment signature verified"))
        #expect(verified.stdout.contains("Trusted comment: adcache ledger lines=8 seq=1-8"))
        #expect(verified.stdout.contains("prev=" + String(repeating: "0", count: 64)))
        print("minisign -Vm: \(verified.stdout)")
        #expect(rig.run(["export", "--verify", file]).status == 0)
        // minisign signs with the secret key file as written: the format is minisign's own.
        let signed = runProgram(
            "/usr/bin/minisign", ["-S", "-s", rig.ledgerDir + "/device.key", "-m", rig.config, "-x", file + ".2"])
        #expect(signed.status == 0, "\(signed.stderr)")

        let original = try String(contentsOfFile: file, encoding: .utf8)
        var lines = original.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        lines.removeLast()
        func tampered(_ name: String, _ changed: [String], named expected: String) throws {
            let path = rig.dir.path + "/" + name
            try (changed.joined(separator: "\n") + "\n").write(toFile: path, atomically: true, encoding: .utf8)
            try FileManager.default.copyItem(atPath: file + ".minisig", toPath: path + ".minisig")
            let r = rig.run(["export", "--verify", path])
            #expect(r.status == 65, "\(name): \(r.stderr)")
            #expect(r.stderr.contains(expected), "\(name): \(r.stderr)")
            let m = runProgram("/usr/bin/minisign", ["-Vm", path, "-p", rig.ledgerDir + "/device.pub"])
            #expect(m.status != 0, "minisign refuses \(name) too")
            print("export --verify \(name): \(r.stderr.trimmingCharacters(in: .newlines))")
        }
        var byte = lines
        byte[2] = byte[2].replacingOccurrences(of: "\"id\":\"", with: "\"id\":\"x")
        try tampered("changed-byte", byte, named: "line 3: changed")
        var deleted = lines
        deleted.remove(at: 3)
        try tampered("deleted-line", deleted, named: "line 4: seq 5 follows seq 3 (a line is missing before it)")
        var swapped = lines
        swapped.swapAt(2, 3)
        try tampered("swapped-lines", swapped, named: "line 3: seq 4 follows seq 2 (lines out of order or repeated)")
    }

    @Test func anExportOfARangeIsAStretchOfTheChain() throws {
        let rig = try Rig(shows: 0)
        defer { rig.remove() }
        for day in 1...4 {
            #expect(rig.run(["next", "--at", "2030-01-0\(day)T12:00:00Z"]).status == 0)
        }
        #expect(rig.run(["prune"]).status == 0)
        let file = rig.dir.path + "/range.jsonl"
        let r = rig.run(
            ["export", "--output", file, "--since", "2030-01-02T00:00:00Z", "--until", "2030-01-03T12:00:00Z"])
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stdout.contains("exported 4 lines (seq 3 to 6)"), "\(r.stdout)")
        #expect(rig.run(["export", "--verify", file]).status == 0)
        let none = rig.run(["export", "--output", file, "--since", "2031-01-01T00:00:00Z"])
        #expect(none.status == 64 && none.stderr.contains("no line in that range"), "\(none.stderr)")
        #expect(rig.run(["export"]).status == 64)
    }

    /// A fold ended at each step (`CrashPoint`): the next fold leaves no torn line, no nonce
    /// twice, no gap, and every queued record in the ledger.
    @Test(arguments: [
        "ledger.tornWrite", "ledger.afterAppend", "fold.afterLedger", "write.events.json.beforeRename",
        "fold.afterEvents", "fold.afterIndex", "fold.afterRemove",
    ])
    func aFoldCutShortLeavesTheLedgerWhole(point: String) throws {
        let rig = try Rig(shows: 3)
        defer { rig.remove() }
        #expect(rig.run(["prune"]).status == 0)
        for _ in 0..<3 { #expect(rig.run(["next"]).status == 0) }
        #expect(rig.run(["event", "skip", "new-app"]).status == 0)
        let crashed = rig.run(["prune"], crashAt: point)
        #expect(crashed.status == 222, "\(point) is reached: \(crashed.stderr)")
        if point == "ledger.tornWrite" {
            let bytes = try Data(contentsOf: URL(fileURLWithPath: rig.ledger))
            #expect(bytes.last != 0x0A, "the crash left half a line")
        }
        if point != "ledger.tornWrite" {   // else the next fold repairs it first
            try checkAgreement(rig, "\(point), before the next fold")
        }
        #expect(rig.run(["next"]).status == 0)
        #expect(rig.run(["prune"]).status == 0, "\(point)")
        let lines = try rig.checkedLedger(point)
        #expect(lines.count == 7 * 2 + 1, "\(point): 7 shows and their impressions, the skip: \(lines.count)")
        try checkAgreement(rig, "\(point), after the next fold")
    }

    /// kill -9 of folding commands at random instants, between launches.
    @Test func killNineOfFoldsAtRandomInstantsLeavesTheLedgerWhole() throws {
        let rig = try Rig(shows: 0)
        defer { rig.remove() }
        var shows = 0, kills = 0
        for i in 0..<12 {
            for _ in 0..<4 where rig.run(["next"]).status == 0 { shows += 1 }
            let p = try rig.spawn([i % 3 == 0 ? "report" : "prune"])
            usleep(useconds_t.random(in: 1_000...40_000))
            if p.isRunning {
                kill(p.processIdentifier, SIGKILL)
                kills += 1
            }
            p.waitUntilExit()
            _ = try rig.checkedLedger("after kill \(i)")
        }
        #expect(rig.run(["prune"]).status == 0)
        let lines = try rig.checkedLedger("at the end")
        #expect(lines.filter { $0["event"] as? String == "show" }.count == shows)
        try checkAgreement(rig, "at the end")
        print("kill -9 of folds: \(kills) kills, \(shows) shows, \(lines.count) ledger lines, none torn or twice")
    }
}
