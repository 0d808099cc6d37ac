import Foundation
import TestSupport
import Testing

/// SPEC §2 v4 `rollout`: a device takes an ad when the first 8 bytes of SHA-256(`<device id>`
/// + "\n" + `<ad id>`), big-endian, modulo 100, are less than `rollout` — the rule an ad server
/// can compute itself; raising the percentage only adds devices; an ad left out is as if the
/// feed did not list it.
@Suite struct RolloutTests {
    typealias AdServer = VASTTests.AdServer
    typealias Device = VASTTests.Device

    /// The rule computed apart, by Python's hashlib (what an ad server's script would do).
    static func expected(device: String, ids: [String], rollout: Int) throws -> Set<String> {
        let script = """
            import hashlib, sys
            device, rollout = sys.argv[1], int(sys.argv[2])
            for ad in sys.argv[3:]:
                n = int.from_bytes(hashlib.sha256((device + "\\n" + ad).encode()).digest()[:8], "big")
                if n % 100 < rollout: print(ad)
            """
        let r = runProgram("/usr/bin/python3", ["-c", script, device, String(rollout)] + ids)
        try #require(r.status == 0, "\(r.stderr)")
        return Set(r.stdout.split(separator: "\n").map(String.init))
    }

    static func feed(_ b: String, _ ids: [String], rollout: String) -> String {
        "[" + ids.map { #"{"id":"\#($0)","url":"\#(b)/\#($0).jpg","rollout":\#(rollout)}"# }.joined(separator: ",")
            + "]"
    }

    @Test(.enabled(if: available("/usr/bin/python3"), "python3 is not installed (make test installs it)"))
    func aDeviceTakesWhatTheRuleSaysAndMoreAsTheShareGrows() throws {
        let ads = try AdServer(); defer { ads.stop() }
        let b = ads.base
        let ids = (1...40).map { "ad-\($0)" }
        let device = Device("device-id = kiosk-17\n"); defer { device.s.remove() }
        var before: Set<String> = []
        for rollout in [10, 50, 100] {
            ads["/feed.json"] = Self.feed(b, ids, rollout: String(rollout))
            let r = device.fetch(b + "/feed.json")
            #expect(r.status == 0, "\(r.stderr)")
            let taken = Set(
                try device.listJSON().filter { $0["state"] as? String == "ready" }.compactMap { $0["id"] as? String })
            let want = try Self.expected(device: "kiosk-17", ids: ids, rollout: rollout)
            #expect(taken == want, "rollout \(rollout)")
            #expect(taken.isSuperset(of: before), "raising the share only adds devices")
            before = taken
            // Not downloaded when left out.
            for id in ids where !want.contains(id) { #expect(ads.hits("/\(id).jpg").isEmpty, "\(id)") }
        }
        #expect(before.count == 40)
        // Down to 10% again: what this device no longer takes is withdrawn, as if not listed.
        ads["/feed.json"] = Self.feed(b, ids, rollout: "10")
        #expect(device.fetch(b + "/feed.json").status == 0)
        let ready = try device.listJSON().filter { $0["state"] as? String == "ready" }.compactMap {
            $0["id"] as? String
        }
        #expect(Set(ready) == (try Self.expected(device: "kiosk-17", ids: ids, rollout: 10)))
    }

    /// A feed whose every ad a rollout leaves out on this device is no broken feed: exit 0, the
    /// ads withdrawn, nothing refused. A bad `rollout` is ignored with a warning: every device.
    @Test func leftOutIsNotBrokenAndABadShareGoesEverywhere() throws {
        let ads = try AdServer(); defer { ads.stop() }
        let b = ads.base
        let device = Device("device-id = kiosk-17\n"); defer { device.s.remove() }
        // An id this device does not take at 1%: found by trying (the rule is the rule).
        let out = try #require(
            (1...500).map { "x\($0)" }.first { id in
                !((try? Self.expected(device: "kiosk-17", ids: [id], rollout: 1).contains(id)) ?? true)
            })
        ads["/feed.json"] = #"[{"id":"\#(out)","url":"\#(b)/a.jpg","rollout":1}]"#
        let r = device.fetch(b + "/feed.json")
        #expect(r.status == 0, "\(r.stderr)")
        #expect(!r.stderr.contains("no ad of the feed"), "\(r.stderr)")
        #expect(try device.listJSON().isEmpty)
        for bad in ["0", "101", "\"x\"", "2.5"] {
            ads["/feed.json"] = #"[{"id":"\#(out)","url":"\#(b)/a.jpg","rollout":\#(bad)}]"#
            let fetched = device.run(["fetch", "--no-progress", "-v", b + "/feed.json"])
            #expect(fetched.status == 0, "\(bad): \(fetched.stderr)")
            #expect(fetched.stderr.contains("ignoring \"rollout\""), "\(bad): \(fetched.stderr)")
            #expect(try device.listJSON().first?["state"] as? String == "ready", "\(bad): every device takes it")
        }
    }

    /// `why` names the rule `rollout` for every ad that has one, with this device's value:
    /// passing for an ad the device takes; failing for one cached before and now left out
    /// (withdrawn); an ad never cached is not listed.
    @Test(.enabled(if: available("/usr/bin/python3"), "python3 is not installed (make test installs it)"))
    func whyNamesTheRolloutRule() throws {
        let ads = try AdServer(); defer { ads.stop() }
        let b = ads.base
        let ids = (1...20).map { "ad-\($0)" }
        let device = Device("device-id = kiosk-17\n"); defer { device.s.remove() }
        ads["/feed.json"] = Self.feed(b, ids, rollout: "60")
        #expect(device.fetch(b + "/feed.json").status == 0)
        let at60 = try Self.expected(device: "kiosk-17", ids: ids, rollout: 60)
        ads["/feed.json"] = Self.feed(b, ids, rollout: "20")
        #expect(device.fetch(b + "/feed.json").status == 0)
        let at20 = try Self.expected(device: "kiosk-17", ids: ids, rollout: 20)
        let why = try jsonObject(device.run(["why", "--json"]).stdout)
        var listed: [String: (pass: Bool, detail: String)] = [:]
        for ad in why["ads"] as? [[String: Any]] ?? [] {
            let rules = ad["rules"] as? [[String: Any]] ?? []
            let rule = try #require(rules.first { $0["rule"] as? String == "rollout" }, "\(ad)")
            listed[ad["id"] as? String ?? ""] = (rule["pass"] as? Bool ?? false, rule["detail"] as? String ?? "")
        }
        #expect(Set(listed.keys) == at60, "the ads cached at 60%, never the others")
        for (id, rule) in listed {
            #expect(rule.pass == at20.contains(id), "\(id): \(rule)")
            #expect(rule.detail.hasSuffix(at20.contains(id) ? "under 20%" : "20%: left out"), "\(id): \(rule.detail)")
        }
        for id in at60.subtracting(at20) {
            #expect(try device.record(id)?["state"] as? String == "withdrawn")
        }
        let human = device.run(["why", at20.sorted().first ?? "ad-1"])
        #expect(human.stdout.contains("rollout"), "\(human.stdout)")
    }
}
