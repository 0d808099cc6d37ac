import Foundation
import TestSupport
import Testing

/// SPEC §10 v4: a VAST `progress` tracker with an `offset` (a time, or a share of the
/// `Duration`) is queued by `adcache event progress ID --offset SEC` once the video's position
/// passes it — once for each show — and the shipped launcher reports it from mpv.
@Suite struct VASTProgressTests {
    typealias AdServer = VASTTests.AdServer
    typealias Device = VASTTests.Device

    static func tag(_ b: String) -> String {
        VASTTests.inline(b, id: "v").replacingOccurrences(
            of: "<Duration>00:00:05</Duration>",
            with: """
                <TrackingEvents>
                <Tracking event="progress" offset="00:00:02">\(b)/p2?ph=[ADPLAYHEAD]&amp;e=[EVENT]</Tracking>
                <Tracking event="progress" offset="50%">\(b)/p50</Tracking>
                <Tracking event="progress" offset="soon">\(b)/pbad</Tracking>
                <Tracking event="progress" offset="00:00:01.001">\(b)/pms</Tracking>
                </TrackingEvents><Duration>00:00:10</Duration>
                """)
    }

    @Test func progressIsQueuedOnceItsOffsetIsPassedOnceAShow() throws {
        let ads = try AdServer(); defer { ads.stop() }
        let b = ads.base
        ads["/tag.xml"] = Self.tag(b)
        let device = Device(); defer { device.s.remove() }
        let fetched = device.fetch(b + "/tag.xml")
        #expect(fetched.status == 0, "\(fetched.stderr)")
        #expect(fetched.stderr.contains("progress tracker's offset 'soon'"), "\(fetched.stderr)")
        let shown = try jsonObject(device.run(["next", "--json"]).stdout)
        #expect(shown["progress"] as? [Double] == [1.001, 2, 5], "\(shown)")
        func progress(_ sec: String) { #expect(device.run(["event", "progress", "v", "--offset", sec]).status == 0) }
        func report() { #expect(device.run(["report"]).status == 0) }
        progress("1")
        report()
        #expect(ads.hits("/p").isEmpty)
        progress("1.001")   // 1000.999… ms in binary: still the 1001 ms offset
        report()
        #expect(ads.hits("/pms").count == 1)
        progress("3")
        report()
        #expect(ads.hits("/p2") == ["/p2?ph=00%3A00%3A02.000&e=progress"], "\(ads.hits("/p"))")
        progress("3.5")
        progress("9")
        report()
        #expect(ads.hits("/p2").count == 1 && ads.hits("/p50").count == 1, "each once for the show")
        // A new show: its progress is queued anew.
        #expect(device.run(["next"]).status == 0)
        progress("10")
        report()
        #expect(ads.hits("/p2").count == 2 && ads.hits("/p50").count == 2)
        #expect(ads.hits("/pbad").isEmpty)
        #expect(device.run(["event", "progress", "v"]).status == 64, "--offset is needed")
        #expect(device.run(["event", "click", "v", "--offset", "3"]).status == 64)
        #expect(device.run(["event", "progress", "nosuch", "--offset", "3"]).status == 65)
    }

    /// The launcher reports progress from mpv's position (Debian's mpv, headless).
    @Test(.enabled(if: mpvInstalled, "mpv is not installed (make test installs it)"))
    func theLauncherReportsProgressFromThePlayer() throws {
        let ads = try AdServer(); defer { ads.stop() }
        let b = ads.base
        let video = try LauncherPlaybackTests.video(seconds: 3)
        ads.serve("/clip.mp4", bytes: video)
        ads["/tag.xml"] = VASTTests.inline(b, id: "v").replacingOccurrences(of: "/v.mp4", with: "/clip.mp4")
            .replacingOccurrences(
                of: "<Duration>00:00:05</Duration>",
                with: """
                    <TrackingEvents><Tracking event="progress" offset="00:00:01">\(b)/p1</Tracking>
                    <Tracking event="progress" offset="100%">\(b)/pend</Tracking></TrackingEvents>
                    <Duration>00:00:03</Duration>
                    """)
        let device = Device(); defer { device.s.remove() }
        #expect(device.fetch(b + "/tag.xml").status == 0)
        let bin = device.s.dir.path + "/bin"
        try FileManager.default.createDirectory(atPath: bin, withIntermediateDirectories: true)
        try FileManager.default.createSymbolicLink(atPath: bin + "/adcache", withDestinationPath: Adcache.binary)
        let env = [
            "PATH": "\(bin):/usr/bin:/bin", "ADCACHE_DIR": device.s.cache, "ADCACHE_CONFIG": device.conf,
            "ADCACHE_LAUNCHER_MPV_OPTIONS": "--no-config --vo=null --ao=null",
        ]
        let r = runProgram(LauncherPlaybackTests.launcher, ["/opt/app/default.png"], environment: env)
        #expect(r.status == 0, "\(r.stderr)")
        #expect(device.run(["report"]).status == 0)
        #expect(ads.hits("/p1").count == 1 && ads.hits("/pend").count == 1, "\(ads.hits("/p"))")
    }
}
