import AdCacheKit
import Foundation
import TestSupport
import Testing

/// `maxShowsPerDay` counts local calendar days through the path `next` really takes (libc's
/// localtime_r and the process's TZ), so these run the binary with TZ set: a day that is not
/// UTC's, and the 23-hour day when Europe/Berlin moves to summer time.
@Suite struct TimeZoneTests {
    static let zoneinfo = FileManager.default.fileExists(atPath: "/usr/share/zoneinfo/Asia/Tokyo")

    /// A cache with one ad shown at most once per local day.
    func oncePerDay(_ s: Sandbox) throws {
        let feed = s.dir.write(
            "feed.json",
            #"[{"id":"daily","url":"file://\#(packageRoot)/Examples/assets/spring.jpg","maxShowsPerDay":1}]"#)
        #expect(s.run(["fetch", "-q", feed]).status == 0)
    }

    func show(_ s: Sandbox, at time: String, tz: String) -> Int32 {
        s.runBinary(["next", "--at", time], env: ["TZ": tz]).status
    }

    @Test(.enabled(if: zoneinfo, "tzdata is not installed (make test installs it)"))
    func dailyCapFollowsTokyoMidnightNotUTCs() throws {
        let s = Sandbox()
        defer { s.remove() }
        try oncePerDay(s)
        // 23:30 and 00:30 in Tokyo are one UTC day (14:30Z, 15:30Z) but two local days.
        #expect(show(s, at: "2027-03-01T23:30:00+09:00", tz: "Asia/Tokyo") == 0)
        #expect(show(s, at: "2027-03-01T23:50:00+09:00", tz: "Asia/Tokyo") == 1, "capped for the local day")
        #expect(show(s, at: "2027-03-02T00:30:00+09:00", tz: "Asia/Tokyo") == 0, "a new local day")
        // The same three moments under UTC fall on one day: only the first is shown.
        let u = Sandbox()
        defer { u.remove() }
        try oncePerDay(u)
        #expect(show(u, at: "2027-03-01T23:30:00+09:00", tz: "UTC") == 0)
        #expect(show(u, at: "2027-03-02T00:30:00+09:00", tz: "UTC") == 1)
    }

    @Test(.enabled(if: zoneinfo, "tzdata is not installed (make test installs it)"))
    func dailyCapAcrossBerlinsSpringForward() throws {
        let s = Sandbox()
        defer { s.remove() }
        try oncePerDay(s)
        // Sunday 2027-03-28 has 23 hours in Berlin: 00:30 CET and 23:30 CEST are one day.
        #expect(show(s, at: "2027-03-28T00:30:00+01:00", tz: "Europe/Berlin") == 0)
        #expect(show(s, at: "2027-03-28T23:30:00+02:00", tz: "Europe/Berlin") == 1, "same local day")
        #expect(show(s, at: "2027-03-29T00:10:00+02:00", tz: "Europe/Berlin") == 0, "Monday")
        // And the list agrees: resting until the next local midnight.
        let list = s.runBinary(["list", "--at", "2027-03-29T12:00:00+02:00"], env: ["TZ": "Europe/Berlin"])
        #expect(list.stdout.contains("resting"), "\(list.stdout)")
    }

    /// `hours` are the device's wall clock: 07:30 in Tokyo is breakfast there, 22:30 in UTC.
    @Test(.enabled(if: zoneinfo, "tzdata is not installed (make test installs it)"))
    func hoursAreLocalWallClockTime() throws {
        let s = Sandbox()
        defer { s.remove() }
        let feed = s.dir.write(
            "feed.json",
            #"[{"id":"breakfast","url":"file://\#(packageRoot)/Examples/assets/spring.jpg","hours":["07:00-09:00"],"days":["mon"]}]"#
        )
        #expect(s.run(["fetch", "-q", feed]).status == 0)
        let monday = "2027-03-01T07:30:00+09:00"   // Monday in Tokyo, Sunday 22:30 in UTC
        #expect(s.runBinary(["next", "--peek", "--at", monday], env: ["TZ": "Asia/Tokyo"]).status == 0)
        #expect(s.runBinary(["next", "--peek", "--at", monday], env: ["TZ": "UTC"]).status == 1)
        // Across Berlin's spring-forward: 03:10 CEST on Monday 2027-03-29 is not; Sunday's is not Monday.
        #expect(
            s.runBinary(["next", "--peek", "--at", "2027-03-29T07:10:00+02:00"], env: ["TZ": "Europe/Berlin"]).status
                == 0)
        #expect(
            s.runBinary(["next", "--peek", "--at", "2027-03-28T07:10:00+02:00"], env: ["TZ": "Europe/Berlin"]).status
                == 1)
        let list = s.runBinary(["list", "--at", "2027-03-28T07:10:00+02:00"], env: ["TZ": "Europe/Berlin"])
        #expect(list.stdout.contains("resting (in 23 h)"), "\(list.stdout)")   // Monday 07:00
    }
}
