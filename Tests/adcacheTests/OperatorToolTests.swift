import Foundation
import TestSupport
import Testing

/// SPEC §4 (v3): `why` explains the choice with the rules `next` uses, `verify` checks the
/// files, and `stats` counts a video's playback.
@Suite struct OperatorToolTests {
    /// A local feed of ads (JSON objects without url), each given a JPEG of its own.
    static func cache(_ s: Sandbox, _ ads: [String]) -> String {
        var items: [String] = []
        for (i, ad) in ads.enumerated() {
            _ = s.dir.write("a\(i).jpg", Media.jpeg(2048, seed: UInt8(i + 1)))
            items.append("{\"url\":\"a\(i).jpg\"," + ad + "}")
        }
        return s.dir.write("feed.json", "{\"ads\":[" + items.joined(separator: ",") + "]}")
    }

    static func why(_ s: Sandbox, _ args: [String] = []) throws -> [String: Any] {
        let r = s.run(["why", "--json"] + args)
        #expect(r.status == 0, "\(r.stderr)")
        return try jsonObject(r.stdout)
    }

    /// The rules an ad fails, by name.
    static func failed(_ why: [String: Any], _ id: String) -> [String] {
        let ads = why["ads"] as? [[String: Any]] ?? []
        let ad = ads.first { $0["id"] as? String == id }
        return (ad?["rules"] as? [[String: Any]] ?? []).filter { $0["pass"] as? Bool == false }.compactMap {
            $0["rule"] as? String
        }
    }

    @Test func eachBlockedAdNamesItsRule() throws {
        let s = Sandbox(); defer { s.remove() }
        let now = Int(Date().timeIntervalSince1970)
        let feed = Self.cache(
            s,
            [
                #""id":"top","priority":9,"minInterval":3600"#,
                #""id":"later","start":\#(now + 86400)"#,
                #""id":"capped","maxShowsPerDay":1,"priority":8"#,
                #""id":"used","maxShows":1,"priority":7"#,
                #""id":"night","hours":["\#(Self.hourAway())"]"#,
                #""id":"lobby","placement":"lobby""#,
                #""id":"ok""#,
            ])
        #expect(s.run(["fetch", feed]).status == 0)
        // Shows: top (priority 9), then capped, then used; each then rests or is used up.
        for _ in 0..<3 { #expect(s.run(["next"]).status == 0) }
        let why = try Self.why(s)
        #expect(why["chosen"] as? String == "ok", "\(why)")
        #expect(Self.failed(why, "top") == ["minInterval"])
        #expect(Self.failed(why, "later") == ["start"])
        #expect(Self.failed(why, "capped") == ["maxShowsPerDay"])
        #expect(Self.failed(why, "used") == ["shows"])
        #expect(Self.failed(why, "night") == ["hours"])
        #expect(Self.failed(why, "lobby") == ["placement"])
        #expect(Self.failed(why, "ok").isEmpty)
        #expect(Self.failed(try Self.why(s, ["--type", "video"]), "ok") == ["type"])
        // One ad; an unknown one is 65.
        let one = try Self.why(s, ["top"])
        #expect((one["ads"] as? [Any])?.count == 1)
        #expect(s.run(["why", "nope"]).status == 65)
        // A missing file fails `ready`; a withdrawn ad too.
        let path = try #require(try jsonObject(s.run(["next", "--json", "--peek"]).stdout)["path"] as? String)
        _ = Disk.remove(path)
        #expect(Self.failed(try Self.why(s), "ok") == ["ready"])
        // The human form, as an operator reads it.
        let text = s.run(["why", "top"])
        #expect(text.lines.first == "top: not eligible (minInterval)", "\(text.stdout)")
        #expect(text.lines.contains { $0.hasPrefix("  FAIL  minInterval") && $0.contains("needs 3600 s") })
        // Read-only: nothing recorded.
        let before = try Data(contentsOf: URL(fileURLWithPath: s.cache + "/index.json"))
        _ = s.run(["why"])
        #expect(try Data(contentsOf: URL(fileURLWithPath: s.cache + "/index.json")) == before)
    }

    /// "HH:MM-HH:MM" an hour from now for an hour: a window that is not now (UTC, the
    /// tests' zone).
    static func hourAway() -> String {
        let minute = (Int(Date().timeIntervalSince1970) / 60 + 120) % 1440
        func hm(_ m: Int) -> String { String(format: "%02d:%02d", m / 60 % 24, m % 60) }
        return hm(minute) + "-" + hm(minute + 60)
    }

    /// `why`'s choice is `next --peek`'s, over many random caches: states, caps, intervals,
    /// dayparts, weights and placements, at random times.
    @Test func whyChoosesWhatNextChooses() throws {
        var rng = SystemRandomNumberGenerator()
        var agreed = 0
        var choices = Set<String?>()
        for round in 0..<25 {
            let s = Sandbox(); defer { s.remove() }
            let now = Int(Date().timeIntervalSince1970)
            var ads: [String] = []
            for i in 0..<Int.random(in: 2...8, using: &rng) {
                var fields = [#""id":"ad\#(i)""#, #""priority":\#(Int.random(in: 0...2, using: &rng))"#]
                if Bool.random(using: &rng) { fields.append(#""weight":\#(Int.random(in: 1...4, using: &rng))"#) }
                if Int.random(in: 0..<4, using: &rng) == 0 { fields.append(#""placement":"lobby""#) }
                if Int.random(in: 0..<4, using: &rng) == 0 {
                    fields.append(#""maxShows":\#(Int.random(in: 0...3, using: &rng))"#)
                }
                if Int.random(in: 0..<4, using: &rng) == 0 { fields.append(#""maxShowsPerDay":1"#) }
                if Int.random(in: 0..<4, using: &rng) == 0 {
                    fields.append(#""minInterval":\#(Int.random(in: 1...7200, using: &rng))"#)
                }
                if Int.random(in: 0..<5, using: &rng) == 0 {
                    fields.append(#""start":\#(now + Int.random(in: -7200...7200, using: &rng))"#)
                }
                if Int.random(in: 0..<5, using: &rng) == 0 {
                    fields.append(#""expires":\#(now + Int.random(in: 60...7200, using: &rng))"#)
                }
                if Int.random(in: 0..<5, using: &rng) == 0 { fields.append(#""hours":["08:00-20:00"]"#) }
                if Int.random(in: 0..<6, using: &rng) == 0 { fields.append(#""days":["mon","wed","sat"]"#) }
                ads.append(fields.joined(separator: ","))
            }
            #expect(s.run(["fetch", Self.cache(s, ads)]).status == 0)
            for _ in 0..<Int.random(in: 0...6, using: &rng) { _ = s.run(["next"]) }
            for _ in 0..<4 {
                var args: [String] = []
                if Bool.random(using: &rng) { args += ["--placement", "lobby"] }
                if Int.random(in: 0..<4, using: &rng) == 0 { args += ["--type", "image"] }
                if Bool.random(using: &rng) {
                    args += ["--at", String(now + Int.random(in: -3600...90000, using: &rng))]
                }
                if Int.random(in: 0..<5, using: &rng) == 0 { args += ["--cooldown", "600"] }
                let next = s.run(["next", "--peek", "--json"] + args)
                let chosen = next.status == 0 ? try jsonObject(next.stdout)["id"] as? String : nil
                let why = try Self.why(s, args)
                choices.insert(chosen)
                #expect(why["chosen"] as? String == chosen, "round \(round) \(args): why \(why), next \(next.stdout)")
                // The chosen ad passes every rule; `eligible` is the conjunction.
                for ad in why["ads"] as? [[String: Any]] ?? [] {
                    let rules = ad["rules"] as? [[String: Any]] ?? []
                    #expect((ad["eligible"] as? Bool) == rules.allSatisfy { $0["pass"] as? Bool == true })
                }
                agreed += 1
            }
        }
        #expect(agreed == 100)
        #expect(choices.contains(nil) && choices.count > 3, "both outcomes, many ads: \(choices)")
    }

    @Test func verifyFindsDamageAndAFetchMendsIt() throws {
        let s = Sandbox(); defer { s.remove() }
        let feed = Self.cache(s, [#""id":"a""#, #""id":"b""#, #""id":"c""#])
        #expect(s.run(["fetch", feed]).status == 0)
        var r = s.run(["verify"])
        #expect(r.status == 0)
        #expect(r.stdout == "3 files verified, 0 damaged, 0 missing\n")
        let files = try FileManager.default.contentsOfDirectory(atPath: s.cache + "/assets").sorted()
        let list = try #require(
            try JSONSerialization.jsonObject(with: Data(s.run(["list", "--json"]).stdout.utf8)) as? [[String: Any]])
        let path = { (id: String) in list.first { $0["id"] as? String == id }?["path"] as? String ?? "" }
        // One flipped byte, same size and time (a worn SD card); one file deleted.
        var bytes = try Data(contentsOf: URL(fileURLWithPath: path("a")))
        let stamp = Disk.stamp(path("a"))
        bytes[100] ^= 0x01
        try bytes.write(to: URL(fileURLWithPath: path("a")))
        if let stamp {
            var times = [
                timespec(tv_sec: 0, tv_nsec: (1 << 30) - 2),
                timespec(tv_sec: Int(stamp.mtime / 1_000_000_000), tv_nsec: Int(stamp.mtime % 1_000_000_000)),
            ]
            #expect(utimensat(AT_FDCWD, path("a"), &times, 0) == 0)
        }
        _ = Disk.remove(path("b"))
        r = s.run(["verify"])
        #expect(r.status == 65)
        #expect(
            r.lines.contains {
                $0.hasPrefix("ad 'a': its file ") && $0.hasSuffix("is damaged: its SHA-256 is not the one recorded")
            }, "\(r.stdout)")
        #expect(r.lines.contains { $0.hasPrefix("ad 'b': its file ") && $0.hasSuffix(" is missing") })
        #expect(r.lines.last == "1 file verified, 1 damaged, 1 missing")
        let json = try jsonObject(s.run(["verify", "--json"]).stdout)
        #expect(
            json["verified"] as? Int == 1 && (json["damaged"] as? [String])?.isEmpty == true,
            "already set aside: \(json)")
        // Still missing on every run until a fetch restores them (SPEC §4 v4).
        #expect((json["missing"] as? [String])?.sorted() == ["a", "b"], "\(json)")
        #expect(s.run(["verify"]).status == 65)
        let aside = try FileManager.default.contentsOfDirectory(atPath: s.cache + "/assets").filter {
            $0.contains(".bad-")
        }
        #expect(aside.count == 1 && files.contains { aside[0].hasPrefix($0) }, "\(aside)")
        let states = s.run(["list"]).lines.dropFirst().map {
            $0.split(separator: " ", omittingEmptySubsequences: true)[2]
        }
        #expect(states == ["missing", "missing", "ready"], "\(s.run(["list"]).stdout)")
        // The next fetch downloads them again; prune removes the damaged copy.
        #expect(s.run(["fetch"]).status == 0)
        #expect(s.run(["verify"]).status == 0)
        #expect(s.run(["prune"]).status == 0)
        #expect(
            try FileManager.default.contentsOfDirectory(atPath: s.cache + "/assets").filter { $0.contains(".bad-") }
                .isEmpty)
    }

    /// An ad used up, whose file prune took on purpose, is not missing: verify passes, and
    /// stays passing after a fetch (which does not download it again).
    @Test func verifyDoesNotCountAUsedUpAdMissing() throws {
        let s = Sandbox(); defer { s.remove() }
        let feed = Self.cache(s, [#""id":"a","maxShows":1"#])
        #expect(s.run(["fetch", feed]).status == 0)
        #expect(s.run(["next"]).status == 0)
        #expect(s.run(["prune"]).status == 0)
        for _ in 0..<2 {
            let r = s.run(["verify"])
            #expect(r.status == 0 && r.lines.last?.hasSuffix("0 missing") == true, "\(r.stdout)")
            #expect(s.run(["fetch", feed]).status == 0)
        }
    }

    /// The playback events through `stats` and `report`, counted per ad per day.
    @Test func playbackEventsAreCountedAndDelivered() throws {
        let ads = try VASTTests.AdServer(); defer { ads.stop() }
        ads["/tag.xml"] = VASTTests.inline(ads.base, id: "v").replacingOccurrences(
            of: "<Duration>",
            with: "<TrackingEvents><Tracking event=\"midpoint\">\(ads.base)/mid</Tracking></TrackingEvents><Duration>")
        let s = Sandbox(); defer { s.remove() }
        #expect(s.run(["fetch", ads.base + "/tag.xml"]).status == 0)
        #expect(s.run(["next"]).status == 0)
        for e in ["firstQuartile", "midpoint", "midpoint", "thirdQuartile", "complete"] {
            #expect(s.run(["event", e, "v"]).status == 0)
        }
        let stats = try jsonObject(s.run(["stats", "--json"]).stdout)
        let day = try #require((stats["days"] as? [[String: Any]])?.first)
        #expect(day["shows"] as? Int == 1 && day["starts"] as? Int == 1, "the show counted its start: \(day)")
        #expect(
            day["firstQuartiles"] as? Int == 1 && day["midpoints"] as? Int == 2 && day["thirdQuartiles"] as? Int == 1)
        #expect(day["completes"] as? Int == 1 && day["notUsed"] as? Int == 0 && day["errors"] as? Int == 0)
        let table = s.run(["stats"])
        #expect(
            table.lines.first?.contains("STARTS") == true && table.lines.first?.contains("ERRORS") == false,
            "\(table.stdout)")
        #expect(s.run(["report"]).status == 0)
        #expect(ads.hits("/mid").count == 2)
    }
}
