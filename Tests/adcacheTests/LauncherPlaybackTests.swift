import Foundation
import TestSupport
import Testing

let mpvInstalled = FileManager.default.isExecutableFile(atPath: "/usr/bin/mpv")

/// The launcher reports what really played (SPEC §4 v3 events, §10): Debian's mpv, headless
/// (`--vo=null --ao=null`), plays a 4-second video it generated itself, and the proof of
/// play comes from the player's position through contrib/adcache-mpv.lua.
@Suite(.serialized, .enabled(if: mpvInstalled, "mpv is not installed (make test installs it)"))
struct LauncherPlaybackTests {
    static let launcher = packageRoot + "/contrib/adcache-launcher"

    /// A short video made by mpv's own encoder (lavfi's test source, MPEG-4 in MP4).
    static func makeVideo(_ path: String, seconds: Int) throws {
        let r = runProgram(
            "/usr/bin/mpv",
            [
                "--no-config", "--really-quiet", "av://lavfi:testsrc=duration=\(seconds):size=160x120:rate=10",
                "--o=\(path)", "--of=mp4", "--ovc=mpeg4",
            ])
        try #require(r.status == 0 && Disk.exists(path), "mpv could not encode: \(r.stderr)")
    }

    /// The bytes of such a video.
    static func video(seconds: Int) throws -> [UInt8] {
        let dir = TempDir()
        defer { dir.remove() }
        try makeVideo(dir.file("v.mp4"), seconds: seconds)
        return Array(try Data(contentsOf: URL(fileURLWithPath: dir.file("v.mp4"))))
    }

    struct Kiosk {
        let s = Sandbox()
        let bin: String
        var env: [String: String]

        init(feed: String, files: [String: [UInt8]] = [:]) throws {
            bin = s.dir.path + "/bin"
            try FileManager.default.createDirectory(atPath: bin, withIntermediateDirectories: true)
            try FileManager.default.createSymbolicLink(atPath: bin + "/adcache", withDestinationPath: Adcache.binary)
            for (name, bytes) in files { _ = s.dir.write(name, bytes) }
            let path = s.dir.write("feed.json", feed)
            env = [
                "PATH": "\(bin):/usr/bin:/bin", "ADCACHE_DIR": s.cache, "ADCACHE_CONFIG": "/dev/null",
                "ADCACHE_LAUNCHER_MPV_OPTIONS": "--no-config --vo=null --ao=null",
            ]
            let r = s.run(["fetch", path])
            try #require(r.status == 0, "\(r.stderr)")
        }

        func day() throws -> [String: Any] {
            let stats = try jsonObject(s.run(["stats", "--json"]).stdout)
            return try #require((stats["days"] as? [[String: Any]])?.first)
        }
    }

    @Test func aVideoPlayedToItsEndReportsStartTheQuartilesAndComplete() throws {
        let bytes = try Self.video(seconds: 4)
        let kiosk = try Kiosk(feed: #"[{"id":"clip","url":"v.mp4","type":"video"}]"#, files: ["v.mp4": bytes])
        defer { kiosk.s.remove() }
        let started = Date()
        let r = runProgram(Self.launcher, ["/opt/app/default.png", "/bin/echo", "app"], environment: kiosk.env)
        #expect(r.status == 0 && r.stdout == "app\n", "\(r.stdout) \(r.stderr)")
        #expect(Date().timeIntervalSince(started) >= 3.5, "it played the video's whole length")
        let day = try kiosk.day()
        for key in ["shows", "impressions", "starts", "firstQuartiles", "midpoints", "thirdQuartiles", "completes"] {
            #expect(day[key] as? Int == 1, "\(key): \(day)")
        }
        #expect(day["skips"] as? Int == 0)
    }

    /// Render mode end to end (SPEC §8 v4): the launcher confirms a video at its first frame
    /// and the tracker hears one impression; a viewer that fails confirms nothing, and its
    /// show, still counted, is never billed; the dry run records no show at all. Beside it,
    /// choice mode (`adcache next` alone) bills at the choice, before anything is on screen.
    @Test func theLauncherBillsWhatRendersAndNothingElse() throws {
        let hits = Locked([String]())
        let trackers = try LoopbackServer { r in
            hits.update { $0.append(r.path) }
            return .text(204, "")
        }
        defer { trackers.stop() }
        let bytes = try Self.video(seconds: 2)
        let feed =
            #"[{"id":"clip","url":"v.mp4","type":"video","tracking":{"impression":["\#(trackers.url("/imp"))?n=[CACHEBUSTING]"]}}]"#
        let kiosk = try Kiosk(feed: feed, files: ["v.mp4": bytes])
        defer { kiosk.s.remove() }
        func report() -> [String] {
            _ = kiosk.s.run(["report"])
            return hits.value
        }

        var dry = kiosk.env
        dry["ADCACHE_LAUNCHER_DRY_RUN"] = "1"
        #expect(runProgram(Self.launcher, ["/opt/app/default.png"], environment: dry).status == 0)
        #expect(
            (try jsonObject(kiosk.s.run(["stats", "--json"]).stdout)["days"] as? [Any])?.isEmpty == true, "no show")

        var failing = kiosk.env
        failing["ADCACHE_LAUNCHER_MPV_OPTIONS"] = "--no-config --vo=null --ao=null --no-such-option"
        #expect(runProgram(Self.launcher, ["/opt/app/default.png"], environment: failing).status == 0)
        #expect(report().isEmpty, "a viewer that failed: no impression")
        #expect(try kiosk.day()["shows"] as? Int == 1 && kiosk.day()["impressions"] as? Int == 0)

        let played = runProgram(Self.launcher, ["/opt/app/default.png"], environment: kiosk.env)
        #expect(played.status == 0, "\(played.stderr)")
        let rendered = report()
        #expect(rendered.count == 1, "one impression, after the first frame: \(rendered)")
        #expect(try kiosk.day()["shows"] as? Int == 2 && kiosk.day()["impressions"] as? Int == 1)

        // Choice mode: `next` alone queues the impression at once, nothing on screen.
        #expect(kiosk.s.run(["next"]).status == 0)
        let chosen = report()
        #expect(chosen.count == 2)
        print("tracker log, render mode (failed viewer, then played): \(rendered); after a choice-mode next: \(chosen)")
    }

    /// A launcher copied without its mpv script cannot confirm: it bills at the choice,
    /// with a warning, rather than never.
    @Test func withoutItsScriptTheLauncherBillsAtTheChoice() throws {
        let kiosk = try Kiosk(feed: #"[{"id":"pic","url":"a.png","duration":3}]"#, files: ["a.png": try Self.png()])
        defer { kiosk.s.remove() }
        let alone = kiosk.s.dir.path + "/alone"
        try FileManager.default.createDirectory(atPath: alone, withIntermediateDirectories: true)
        try FileManager.default.copyItem(atPath: Self.launcher, toPath: alone + "/adcache-launcher")
        let r = runProgram(alone + "/adcache-launcher", ["/opt/app/default.png"], environment: kiosk.env)
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stderr.contains("adcache-mpv.lua not found"), "\(r.stderr)")
        let day = try kiosk.day()
        #expect(day["shows"] as? Int == 1 && day["impressions"] as? Int == 1, "\(day)")
    }

    /// The skip key after under a second: start and skip, no quartile, no complete.
    @Test func aSkippedVideoReportsStartAndSkipOnly() throws {
        let bytes = try Self.video(seconds: 4)
        var kiosk = try Kiosk(feed: #"[{"id":"clip","url":"v.mp4","type":"video"}]"#, files: ["v.mp4": bytes])
        defer { kiosk.s.remove() }
        let socket = kiosk.s.dir.file("mpv.sock")
        kiosk.env["ADCACHE_LAUNCHER_MPV_OPTIONS"]! += " --input-ipc-server=\(socket)"
        let p = Process()
        p.executableURL = URL(fileURLWithPath: Self.launcher)
        p.arguments = ["/opt/app/default.png"]
        p.environment = kiosk.env
        p.standardOutput = FileHandle.nullDevice
        p.standardError = FileHandle.nullDevice
        try p.run()
        // Through mpv's JSON IPC: wait for playback to pass 0.3 s, then press the skip key.
        let until = Date().addingTimeInterval(10)
        var position = 0.0
        while Date() < until, position < 0.3 {
            usleep(50_000)
            if let answer = Self.ipc(socket, #"{"command":["get_property","time-pos"]}"#),
                let data = try? JSONSerialization.jsonObject(with: Data(answer.utf8)) as? [String: Any],
                let pos = data["data"] as? Double
            {
                position = pos
            }
        }
        #expect(position >= 0.3 && position < 0.9, "playing: \(position)")
        _ = Self.ipc(socket, #"{"command":["keypress","s"]}"#)
        p.waitUntilExit()
        #expect(p.terminationStatus == 0)
        let day = try kiosk.day()
        #expect(day["starts"] as? Int == 1 && day["skips"] as? Int == 1, "\(day)")
        for key in ["firstQuartiles", "midpoints", "thirdQuartiles", "completes"] {
            #expect(day[key] as? Int == 0, "\(key): \(day)")
        }
    }

    /// A VAST video with a skipOffset: the skip key does nothing before it (the show already
    /// queued the start: the player reports no second one), and skips after it.
    @Test func aVASTVideoIsSkippedOnlyAfterItsSkipOffset() throws {
        let ads = try VASTTests.AdServer(); defer { ads.stop() }
        ads.serve("/v.mp4", bytes: try Self.video(seconds: 4))
        ads["/tag.xml"] = VASTTests.inline(ads.base, id: "vast").replacingOccurrences(
            of: "<Linear>", with: "<Linear skipoffset=\"00:00:01\">"
        ).replacingOccurrences(of: "/vast.mp4", with: "/v.mp4")
        let s = Sandbox(); defer { s.remove() }
        #expect(s.run(["fetch", ads.base + "/tag.xml"]).status == 0)
        let bin = s.dir.path + "/bin"
        try FileManager.default.createDirectory(atPath: bin, withIntermediateDirectories: true)
        try FileManager.default.createSymbolicLink(atPath: bin + "/adcache", withDestinationPath: Adcache.binary)
        let socket = s.dir.file("mpv.sock")
        let p = Process()
        p.executableURL = URL(fileURLWithPath: Self.launcher)
        p.arguments = ["/opt/app/default.png"]
        p.environment = [
            "PATH": "\(bin):/usr/bin:/bin", "ADCACHE_DIR": s.cache, "ADCACHE_CONFIG": "/dev/null",
            "ADCACHE_LAUNCHER_MPV_OPTIONS": "--no-config --vo=null --ao=null --input-ipc-server=\(socket)",
        ]
        p.standardOutput = FileHandle.nullDevice
        p.standardError = FileHandle.nullDevice
        try p.run()
        func position() -> Double {
            guard let answer = Self.ipc(socket, #"{"command":["get_property","time-pos"]}"#),
                let data = try? JSONSerialization.jsonObject(with: Data(answer.utf8)) as? [String: Any]
            else { return 0 }
            return data["data"] as? Double ?? 0
        }
        func wait(until t: Double) {
            let deadline = Date().addingTimeInterval(10)
            while Date() < deadline, position() < t { usleep(50_000) }
        }
        wait(until: 0.3)
        _ = Self.ipc(socket, #"{"command":["keypress","s"]}"#)   // before the offset: ignored
        wait(until: 1.3)
        #expect(p.isRunning, "still playing after the early skip")
        _ = Self.ipc(socket, #"{"command":["keypress","s"]}"#)
        p.waitUntilExit()
        let stats = try jsonObject(s.run(["stats", "--json"]).stdout)
        let day = try #require((stats["days"] as? [[String: Any]])?.first)
        #expect(day["starts"] as? Int == 1, "the show's start only: \(day)")
        #expect(day["skips"] as? Int == 1 && day["firstQuartiles"] as? Int == 1, "\(day)")
        #expect(day["midpoints"] as? Int == 0 && day["completes"] as? Int == 0, "\(day)")
    }

    /// An image: `complete` when its countdown ran out.
    @Test func anImageReportsCompleteWhenItsCountdownEnds() throws {
        let kiosk = try Kiosk(
            feed: #"[{"id":"pic","url":"a.png","duration":3}]"#, files: ["a.png": try Self.png()])
        defer { kiosk.s.remove() }
        let r = runProgram(Self.launcher, ["/opt/app/default.png"], environment: kiosk.env)
        #expect(r.status == 0, "\(r.stderr)")
        let day = try kiosk.day()
        #expect(day["shows"] as? Int == 1 && day["completes"] as? Int == 1, "\(day)")
        #expect(day["impressions"] as? Int == 1, "confirmed once the image was shown: \(day)")
        #expect(day["starts"] as? Int == 0 && day["skips"] as? Int == 0)
    }

    /// A real PNG mpv can decode (the example feed's), not only the bytes the cache checks.
    static func png() throws -> [UInt8] {
        Array(try Data(contentsOf: URL(fileURLWithPath: packageRoot + "/Examples/assets/new-app.png")))
    }

    /// One request on mpv's JSON IPC socket; its first answer line.
    static func ipc(_ path: String, _ command: String) -> String? {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var addr = sockaddr_un()
        addr.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        guard bytes.count < MemoryLayout.size(ofValue: addr.sun_path) else { return nil }
        withUnsafeMutableBytes(of: &addr.sun_path) { raw in
            for (i, b) in bytes.enumerated() { raw[i] = b }
        }
        let connected = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        guard connected == 0 else { return nil }
        let line = Array((command + "\n").utf8)
        guard write(fd, line, line.count) == line.count else { return nil }
        var tv = timeval(tv_sec: 1, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
        var out: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while !out.contains(0x0A) {
            let n = read(fd, &buffer, buffer.count)
            if n <= 0 { break }
            out += buffer[..<n]
        }
        // Events may come first: the answer is the line with "error".
        return String(decoding: out, as: UTF8.self).split(separator: "\n").first { $0.contains("\"error\"") }.map(
            String.init)
    }
}
