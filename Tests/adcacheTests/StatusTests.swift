import Foundation
import TestSupport
import Testing

/// SPEC §13 `adcache status`: is this device all right? Each problem provoked, with its exit
/// code; read-only; what a fetch run did kept outside the index (§3).
@Suite struct StatusTests {
    typealias AdServer = VASTTests.AdServer
    typealias Device = VASTTests.Device

    static func statusJSON(_ device: Device, _ extra: [String] = []) throws -> (Int32, [String: Any]) {
        let r = device.run(["status", "--json"] + extra)
        return (r.status, try jsonObject(r.stdout))
    }

    static func problems(_ json: [String: Any]) -> [String: String] {
        var out: [String: String] = [:]
        for p in json["problems"] as? [[String: Any]] ?? [] {
            out[p["name"] as? String ?? ""] = p["detail"] as? String ?? ""
        }
        return out
    }

    /// Every file under `dir` with its bytes and modification time.
    static func snapshot(_ dir: String) -> [String: String] {
        var out: [String: String] = [:]
        let fm = FileManager.default
        for name in (fm.subpaths(atPath: dir) ?? []).sorted() {
            let path = dir + "/" + name
            var st = stat()
            guard lstat(path, &st) == 0 else { continue }
            let bytes =
                (st.st_mode & S_IFMT) == S_IFREG ? Media.sha256(Array(fm.contents(atPath: path) ?? Data())) : "-"
            out[name] = "\(st.st_mode) \(st.st_size) \(st.st_mtim.tv_sec).\(st.st_mtim.tv_nsec) \(bytes)"
        }
        return out
    }

    @Test func aCacheNeverFetchedIsAProblemAndStatusCreatesNothing() throws {
        let device = Device(); defer { device.s.remove() }
        let r = device.run(["status"])
        #expect(r.status == 1)
        #expect(r.stdout.contains("problem: never-fetched"), "\(r.stdout)")
        #expect(r.stdout.contains("problem: nothing-ready"), "\(r.stdout)")
        #expect(!FileManager.default.fileExists(atPath: device.s.cache), "status created the cache directory")
        let q = device.run(["status", "-q"])
        #expect(q.status == 1 && q.stdout.isEmpty && q.stderr.isEmpty, "\(q)")
        // A bad stale-after: one clear line, exit 64, nothing made.
        for bad in ["0", "31536001", "x", "-5"] {
            let b = device.run(["status", "--stale-after", bad])
            #expect(b.status == 64, "\(bad): \(b.stderr)")
            #expect(b.stderr.hasPrefix("adcache: error: option '--stale-after' needs"), "\(b.stderr)")
            #expect(b.stderr.split(separator: "\n").dropFirst().allSatisfy { $0.hasPrefix("see ") }, "\(b.stderr)")
        }
        let conf = device.s.dir.write("bad.conf", "stale-after = 0\n")
        let c = Adcache.call(["--config", conf, "--cache-dir", device.s.cache, "status"])
        #expect(c.status == 64 && c.stderr.contains("\(conf):1"), "\(c.stderr)")
        #expect(!FileManager.default.fileExists(atPath: device.s.cache))
    }

    @Test func aHealthyCacheIsExitZeroAndStatusChangesNoByte() throws {
        let ads = try AdServer(); defer { ads.stop() }
        let b = ads.base
        ads["/feed.json"] = #"[{"id":"a","url":"\#(b)/a.jpg"},{"id":"b","url":"\#(b)/b.png"}]"#
        let device = Device(); defer { device.s.remove() }
        #expect(device.fetch(b + "/feed.json").status == 0)
        #expect(device.run(["next"]).status == 0)   // a show in the journal, not folded yet
        let before = Self.snapshot(device.s.cache)
        let (code, json) = try Self.statusJSON(device)
        #expect(code == 0, "\(json)")
        #expect(json["cacheDir"] as? String == device.s.cache)
        #expect((json["ads"] as? [String: Any])?["ready"] as? Int == 2)
        let last = try #require(json["lastFetch"] as? [String: Any])
        #expect(last["exit"] as? Int == 0)
        #expect(last["error"] is NSNull)
        #expect((json["lastSuccess"] as? [String: Any])?["feed"] as? String == b + "/feed.json")
        #expect(["a", "b"].contains((json["lastShow"] as? [String: Any])?["id"] as? String ?? ""))
        #expect((json["assetsBytes"] as? Int ?? 0) > 0)
        #expect((json["freeBytes"] as? Int ?? 0) > 0)
        #expect((json["problems"] as? [Any])?.isEmpty == true)
        let human = device.run(["status"])
        #expect(human.status == 0)
        #expect(human.stdout.contains("2 ads: 2 ready"), "\(human.stdout)")
        #expect(human.stdout.contains("last fetch: ") && human.stdout.contains(", ok"), "\(human.stdout)")
        #expect(device.run(["status", "--prometheus"]).stdout.contains("adcache_ads{state=\"ready\"} 2"))
        #expect(device.run(["status", "-q"]).stdout.isEmpty)
        #expect(Self.snapshot(device.s.cache) == before, "status changed the cache")
    }

    /// `failing` names the last run's exit code and error; the last success stays; `stale`
    /// once no fetch has succeeded for stale-after seconds.
    @Test func aFailingFetchIsFailingStaleLaterAndTheSuccessStays() throws {
        let ads = try AdServer(); defer { ads.stop() }
        let b = ads.base
        ads["/feed.json"] = #"[{"id":"a","url":"\#(b)/a.jpg"}]"#
        let device = Device(); defer { device.s.remove() }
        #expect(device.fetch(b + "/feed.json").status == 0)
        let (_, good) = try Self.statusJSON(device)
        let success = try #require(good["lastSuccess"] as? [String: Any])

        // Unreachable (404): 69.
        let failed = device.fetch(b + "/missing.json")
        #expect(failed.status == 69)
        let (code, json) = try Self.statusJSON(device)
        #expect(code == 1)
        let last = try #require(json["lastFetch"] as? [String: Any])
        #expect(last["exit"] as? Int == 69)
        #expect((last["error"] as? String ?? "").contains("404"), "\(last)")
        #expect(Self.problems(json)["failing"]?.contains("exited 69") == true, "\(Self.problems(json))")
        #expect((json["lastSuccess"] as? [String: Any])?["at"] as? String == success["at"] as? String)
        #expect(Self.problems(json)["nothing-ready"] == nil, "the ad before still shows")

        // Refused (not a feed): 65, and the index is not touched by it.
        ads["/bad.json"] = "{ not json"
        let index = try String(contentsOfFile: device.s.cache + "/index.json", encoding: .utf8)
        #expect(device.fetch(b + "/bad.json").status == 65)
        #expect(try String(contentsOfFile: device.s.cache + "/index.json", encoding: .utf8) == index)
        let (_, refused) = try Self.statusJSON(device)
        #expect((refused["lastFetch"] as? [String: Any])?["exit"] as? Int == 65)

        // Stale: no success for more than stale-after.
        Thread.sleep(forTimeInterval: 1.2)
        let (staleCode, stale) = try Self.statusJSON(device, ["--stale-after", "1"])
        #expect(staleCode == 1)
        #expect(Self.problems(stale)["stale"] != nil, "\(Self.problems(stale))")
        #expect(Self.problems(try Self.statusJSON(device).1)["stale"] == nil, "default: a day")

        // A good run again: healthy.
        #expect(device.fetch(b + "/feed.json").status == 0)
        #expect(device.run(["status", "-q"]).status == 0)
    }

    @Test func nothingReadyWhenEveryAdWaits() throws {
        let ads = try AdServer(); defer { ads.stop() }
        let b = ads.base
        ads["/feed.json"] = #"[{"id":"later","url":"\#(b)/a.jpg","start":"2099-01-01T00:00:00Z"}]"#
        let device = Device(); defer { device.s.remove() }
        #expect(device.fetch(b + "/feed.json").status == 0)
        let (code, json) = try Self.statusJSON(device)
        #expect(code == 1)
        #expect(Self.problems(json).keys.sorted() == ["nothing-ready"], "\(Self.problems(json))")
        #expect((json["ads"] as? [String: Any])?["scheduled"] as? Int == 1)
    }

    /// The queue: an event pending for over a day is `queue-stuck`; a delivery dropped (the
    /// queue over `max-events`) is `events-dropped`, for 24 hours.
    @Test func aStuckQueueAndDroppedEventsAreProblems() throws {
        let ads = try AdServer(); defer { ads.stop() }
        let b = ads.base
        ads["/feed.json"] = #"[{"id":"a","url":"\#(b)/a.jpg"}]"#
        let dead = "http://127.0.0.1:\(freeLoopbackPort())/report"
        let device = Device("report-url = \(dead)\nmax-events = 2\n"); defer { device.s.remove() }
        #expect(device.fetch(b + "/feed.json").status == 0)
        let twoDaysAgo = String(Int(Date().timeIntervalSince1970) - 2 * 86400)
        #expect(device.run(["event", "click", "a", "--at", twoDaysAgo]).status == 0)
        let (code, json) = try Self.statusJSON(device)
        #expect(code == 1)
        #expect(Self.problems(json).keys.sorted() == ["queue-stuck"], "\(Self.problems(json))")
        let queue = try #require(json["queue"] as? [String: Any])
        #expect(queue["pending"] as? Int == 1)
        #expect(queue["droppedLastDay"] as? Int == 0)
        // Two more: the queue holds two, the oldest is dropped (overflow).
        #expect(device.run(["event", "click", "a"]).status == 0)
        #expect(device.run(["event", "skip", "a"]).status == 0)
        let (_, after) = try Self.statusJSON(device)
        #expect(Self.problems(after)["events-dropped"]?.hasPrefix("1 deliveries dropped") == true, "\(after)")
        #expect(Self.problems(after)["queue-stuck"] == nil, "the stuck one was the one dropped")
        // Folded for real (prune folds): the drop is remembered with its hour.
        #expect(device.run(["prune"]).status == 0)
        let (_, folded) = try Self.statusJSON(device)
        #expect((folded["queue"] as? [String: Any])?["droppedLastDay"] as? Int == 1)
        let prom = device.run(["status", "--prometheus"]).stdout
        #expect(prom.contains("adcache_deliveries_dropped_total 1"), "\(prom)")
        #expect(prom.contains("adcache_problem{name=\"events-dropped\"} 1"), "\(prom)")
    }

    /// A signed feed about to expire, and a device clock far from the feed server's.
    @Test(.enabled(if: minisignInstalled, "minisign is not installed (make test installs it)"))
    func aSignatureExpiringAndAClockOffsetAreProblems() throws {
        let keys = TempDir(); defer { keys.remove() }
        let publisher = try SignedFeedTests.Publisher("pub", in: keys)
        let fleet = try SignedFeedTests.Fleet(keys: [publisher]); defer { fleet.s.remove(); fleet.server.stop() }
        let ahead = Date().timeIntervalSince1970 + 7200   // the server's clock: two hours ahead
        fleet.served.date = httpDate(ahead)
        try fleet.serve(SignedFeedTests.feed(serial: 3, validUntil: ahead + 3 * 3600), signedBy: publisher)
        let r = fleet.fetch()
        #expect(r.status == 0, "\(r.stderr)")
        let s = fleet.run(["status", "--json"])
        #expect(s.status == 1)
        let json = try jsonObject(s.stdout)
        let problems = Self.problems(json)
        #expect(problems.keys.sorted() == ["clock-offset", "signature-expiring"], "\(problems)")
        #expect(problems["clock-offset"]?.contains("behind") == true, "\(problems)")
        let signed = try #require(json["signed"] as? [String: Any])
        #expect(signed["keyId"] as? String == publisher.id)
        #expect(signed["serial"] as? Int == 3)
        let offset = try #require(json["clockOffset"] as? Double)
        #expect(abs(offset - 7200) < 60, "\(offset)")
    }

    /// `disk-low`: under 5% of the cache's file system free, on a small tmpfs of its own.
    @Test(.enabled(if: getuid() == 0, "mounting a tmpfs needs root (CI runs as root)"))
    func aFullDiskIsDiskLow() throws {
        let ads = try AdServer(); defer { ads.stop() }
        let b = ads.base
        ads["/feed.json"] = #"[{"id":"a","url":"\#(b)/a.jpg"}]"#
        let device = Device(); defer { device.s.remove() }
        try FileManager.default.createDirectory(atPath: device.s.cache, withIntermediateDirectories: true)
        let mount = runProgram("/bin/mount", ["-t", "tmpfs", "-o", "size=2m", "tmpfs", device.s.cache])
        try #require(mount.status == 0, "\(mount.stderr)")
        defer { _ = runProgram("/bin/umount", [device.s.cache]) }
        #expect(device.fetch(b + "/feed.json").status == 0)
        #expect(device.run(["status", "-q"]).status == 0)
        let fill = runProgram(
            "/bin/dd", ["if=/dev/zero", "of=\(device.s.cache)/filler", "bs=4096", "count=500"])
        #expect(fill.status == 0 || fill.stderr.contains("No space"), "\(fill.stderr)")
        let (code, json) = try Self.statusJSON(device)
        #expect(code == 1)
        #expect(Self.problems(json).keys.sorted() == ["disk-low"], "\(Self.problems(json))")
    }

    // MARK: Metrics, as a fleet's monitoring reads them

    static let promtool = "/usr/bin/promtool"
    static let nodeExporter = "/usr/bin/prometheus-node-exporter"

    /// `promtool check metrics` finds nothing wrong in the output of a healthy and of a failing
    /// cache (it reads the text on standard input).
    @Test(.enabled(if: available(promtool), "promtool is not installed (make test installs Debian's prometheus)"))
    func promtoolFindsNothingWrong() throws {
        let ads = try AdServer(); defer { ads.stop() }
        let b = ads.base
        ads["/feed.json"] = #"[{"id":"a","url":"\#(b)/a.jpg"}]"#
        let device = Device(); defer { device.s.remove() }
        #expect(device.fetch(b + "/feed.json").status == 0)
        _ = device.run(["next"])
        for failing in [false, true] {
            if failing { #expect(device.fetch(b + "/missing.json").status == 69) }
            let r = device.run(["status", "--prometheus"])
            #expect(r.status == (failing ? 1 : 0))
            let file = device.s.dir.write("metrics-\(failing).prom", r.stdout)
            let check = runProgram("/bin/sh", ["-c", "\(Self.promtool) check metrics < \(file)"])
            #expect(check.status == 0, "\(check.stdout)\(check.stderr)\n\(r.stdout)")
            #expect(check.stdout.isEmpty && check.stderr.isEmpty, "\(check.stdout)\(check.stderr)")
            #expect(r.stdout.contains("adcache_last_fetch_exit_code \(failing ? 69 : 0)"), "\(r.stdout)")
            #expect(r.stdout.contains("adcache_problem{name=\"failing\"} 1") == failing, "\(r.stdout)")
            #expect(r.stdout.contains("adcache_shows_total 1"), "\(r.stdout)")
        }
    }

    /// Debian's node_exporter, its textfile collector pointed at a directory where the output
    /// is written as the fetch service writes it, scraped over HTTP on loopback.
    @Test(.enabled(if: available(nodeExporter), "node_exporter is not installed (make test installs it)"))
    func nodeExporterPublishesTheMetrics() throws {
        let ads = try AdServer(); defer { ads.stop() }
        let b = ads.base
        ads["/feed.json"] = #"[{"id":"a","url":"\#(b)/a.jpg"},{"id":"c","url":"\#(b)/c.png"}]"#
        let device = Device(); defer { device.s.remove() }
        #expect(device.fetch(b + "/feed.json").status == 0)
        let textfiles = device.s.dir.path + "/textfile"
        try FileManager.default.createDirectory(atPath: textfiles, withIntermediateDirectories: true)
        let metrics = device.run(["status", "--prometheus"]).stdout
        _ = device.s.dir.write("textfile/adcache.prom", metrics)

        let port = freeLoopbackPort()
        let exporter = Process()
        exporter.executableURL = URL(fileURLWithPath: Self.nodeExporter)
        exporter.arguments = [
            "--web.listen-address=127.0.0.1:\(port)", "--collector.disable-defaults", "--collector.textfile",
            "--collector.textfile.directory=\(textfiles)",
        ]
        exporter.standardOutput = FileHandle.nullDevice
        exporter.standardError = FileHandle.nullDevice
        try exporter.run()
        defer { exporter.terminate(); exporter.waitUntilExit() }
        var scraped = ""
        for _ in 0..<100 where !scraped.contains("adcache_") {
            let r = runProgram("/usr/bin/curl", ["-sf", "http://127.0.0.1:\(port)/metrics"])
            scraped = r.status == 0 ? r.stdout : ""
            if scraped.isEmpty { Thread.sleep(forTimeInterval: 0.1) }
        }
        #expect(scraped.contains("adcache_ads{state=\"ready\"} 2"), "\(scraped.prefix(2000))")
        #expect(scraped.contains("adcache_last_fetch_exit_code 0"))
        #expect(scraped.contains("# TYPE adcache_shows_total counter"))
        // node_exporter says whether the file was read without error.
        #expect(scraped.contains("node_textfile_scrape_error 0"), "\(scraped.prefix(2000))")
    }

    /// The fetch service's metrics line (ExecStopPost), run as systemd runs it (`$$` is `$`),
    /// against a textfile directory of the test's: the file appears whole, promtool accepts it;
    /// without the directory nothing is written and the line succeeds.
    @Test(.enabled(if: available(promtool), "promtool is not installed (make test installs Debian's prometheus)"))
    func theFetchServiceWritesTheMetricsFileWhole() throws {
        let unit = try String(contentsOfFile: packageRoot + "/contrib/systemd/adcache-fetch.service", encoding: .utf8)
        let line = try #require(unit.split(separator: "\n").first { $0.hasPrefix("ExecStopPost=+/bin/sh -c '") })
        var script = String(line.dropFirst("ExecStopPost=+/bin/sh -c '".count).dropLast())
        let device = Device(); defer { device.s.remove() }
        let textfiles = device.s.dir.path + "/node-exporter"
        script = script.replacingOccurrences(of: "$$", with: "$")
            .replacingOccurrences(of: "/var/lib/prometheus/node-exporter", with: textfiles)
            .replacingOccurrences(
                of: "/usr/bin/adcache", with: "\(Adcache.binary) --config \(device.conf) --cache-dir \(device.s.cache)")
        // No directory: nothing written, success.
        #expect(runProgram("/bin/sh", ["-c", script]).status == 0)
        #expect(!FileManager.default.fileExists(atPath: textfiles))
        try FileManager.default.createDirectory(atPath: textfiles, withIntermediateDirectories: true)
        // A cache never fetched: status exits 1 (problems), the metrics are written all the same.
        let r = runProgram("/bin/sh", ["-c", script])
        #expect(r.status == 0, "\(r.stderr)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: textfiles) == ["adcache.prom"])
        let check = runProgram("/bin/sh", ["-c", "\(Self.promtool) check metrics < \(textfiles)/adcache.prom"])
        #expect(check.status == 0, "\(check.stdout)\(check.stderr)")
        let text = try String(contentsOfFile: textfiles + "/adcache.prom", encoding: .utf8)
        #expect(text.contains("adcache_problem{name=\"never-fetched\"} 1"), "\(text)")
        var st = stat()
        #expect(stat(textfiles + "/adcache.prom", &st) == 0 && st.st_mode & 0o777 == 0o644)
    }
}
