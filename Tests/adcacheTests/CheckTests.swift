import Foundation
import TestSupport
import Testing

/// SPEC §13 `adcache check FEED`: a feed tried as `fetch` would — signature, VAST chain,
/// rollouts — writing no cache at all, and requesting no asset without `--assets`.
@Suite struct CheckTests {
    typealias AdServer = VASTTests.AdServer
    typealias Device = VASTTests.Device

    static func json(_ r: Run) throws -> [String: Any] { try jsonObject(r.stdout) }

    static func ads(_ json: [String: Any]) -> [String: [String: Any]] {
        var out: [String: [String: Any]] = [:]
        for ad in json["ads"] as? [[String: Any]] ?? [] { out[ad["id"] as? String ?? ""] = ad }
        return out
    }

    /// The temporaries `--assets` made and did not remove, under `tmp`.
    static func leftovers(_ tmp: String) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: tmp)) ?? []).filter { $0.hasPrefix("adcache-check") }
    }

    @Test func aGoodFeedIsOkAndNothingIsWrittenOrAsked() throws {
        let ads = try AdServer(); defer { ads.stop() }
        let b = ads.base
        ads["/feed.json"] = #"[{"id":"a","url":"\#(b)/a.jpg"},{"id":"v","url":"\#(b)/v.mp4"}]"#
        let device = Device(); defer { device.s.remove() }
        let tmp = device.s.dir.path + "/tmp"
        try FileManager.default.createDirectory(atPath: tmp, withIntermediateDirectories: true)
        let r = device.run(["check", b + "/feed.json"])
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.lines == ["a: ok (image)", "v: ok (video)", "ok: 2 ads, json"], "\(r.stdout)")
        #expect(ads.hits("/a.jpg").isEmpty && ads.hits("/v.mp4").isEmpty, "no asset without --assets")
        #expect(!FileManager.default.fileExists(atPath: device.s.cache), "check created the cache directory")

        // --assets: each asset downloaded and checked, into a temporary directory removed after.
        let checked = Adcache.call(
            ["--config", device.conf, "--cache-dir", device.s.cache, "check", "--assets", "--json", b + "/feed.json"],
            environment: ["TMPDIR": tmp])
        #expect(checked.status == 0, "\(checked.stderr)")
        #expect(ads.hits("/a.jpg").count == 1 && ads.hits("/v.mp4").count == 1)
        let json = try Self.json(checked)
        #expect(json["format"] as? String == "json")
        #expect(json["refused"] is NSNull)
        #expect(Self.ads(json)["v"]?["type"] as? String == "video")
        #expect(Self.ads(json).values.allSatisfy { $0["ok"] as? Bool == true })
        #expect(Self.leftovers(tmp).isEmpty, "\(Self.leftovers(tmp))")
        #expect(!FileManager.default.fileExists(atPath: device.s.cache))
        // The temporary directory is made under TMPDIR: where there is none, one clear error.
        let nowhere = Adcache.call(
            ["--config", device.conf, "--cache-dir", device.s.cache, "check", "--assets", b + "/feed.json"],
            environment: ["TMPDIR": tmp + "/none"])
        #expect(nowhere.status == 74, "\(nowhere.stderr)")
        #expect(nowhere.stderr.hasPrefix("adcache: error: cannot make a temporary directory"), "\(nowhere.stderr)")
    }

    /// Every ad `fetch` would skip is a line with its reason, exit 65; with `--assets`, an
    /// asset that fails as `fetch` checks it (404, a wrong sha256) likewise.
    @Test func whatFetchWouldSkipIsNamedAndExit65() throws {
        let ads = try AdServer(); defer { ads.stop() }
        let b = ads.base
        let wrong = String(repeating: "0", count: 64)
        ads["/feed.json"] =
            #"[{"id":"good","url":"\#(b)/a.jpg"},{"id":"ftp","url":"ftp://x/y.jpg"},"#
            + #"{"id":"gone","url":"\#(b)/missing.jpg"},{"id":"forged","url":"\#(b)/b.png","sha256":"\#(wrong)"}]"#
        let device = Device(); defer { device.s.remove() }
        let plain = device.run(["check", "--json", b + "/feed.json"])
        #expect(plain.status == 65)
        var json = try Self.json(plain)
        #expect(json["refused"] is NSNull, "the feed itself is accepted")
        #expect(Self.ads(json)["ftp"]?["ok"] as? Bool == false)
        #expect((Self.ads(json)["ftp"]?["reason"] as? String ?? "").contains("ftp"), "\(json)")
        #expect(Self.ads(json)["gone"]?["ok"] as? Bool == true, "assets are not checked without --assets")

        let full = device.run(["check", "--json", "--assets", b + "/feed.json"])
        #expect(full.status == 65)
        json = try Self.json(full)
        #expect(Self.ads(json)["good"]?["ok"] as? Bool == true)
        #expect((Self.ads(json)["gone"]?["reason"] as? String ?? "").contains("404"), "\(json)")
        #expect((Self.ads(json)["forged"]?["reason"] as? String ?? "").contains("sha256"), "\(json)")
        #expect(!FileManager.default.fileExists(atPath: device.s.cache))
    }

    /// Bad input: one clear line and nothing changed — no FEED (64), a feed that is not one
    /// (65, the verdict names why), one that cannot be fetched (69).
    @Test func badInputIsOneClearLine() throws {
        let ads = try AdServer(); defer { ads.stop() }
        let b = ads.base
        let device = Device(); defer { device.s.remove() }
        let none = device.run(["check"])
        #expect(none.status == 64 && none.stderr.hasPrefix("adcache: error: 'check' needs a FEED"), "\(none.stderr)")
        ads["/bad.json"] = "{ not json"
        let bad = device.run(["check", b + "/bad.json"])
        #expect(bad.status == 65)
        #expect(bad.lines.last?.hasPrefix("refused: ") == true, "\(bad.stdout)")
        #expect(bad.stderr.isEmpty, "\(bad.stderr)")
        let away = device.run(["check", b + "/missing.json"])
        #expect(away.status == 69)
        #expect(away.lines == ["refused: cannot fetch the feed \(b)/missing.json: HTTP 404"], "\(away.stdout)")
        // Every ad invalid: refused whole, as fetch refuses it.
        ads["/broken.json"] = #"[{"id":"x","url":"ftp://x/y.jpg"}]"#
        let broken = try Self.json(device.run(["check", "--json", b + "/broken.json"]))
        #expect((broken["refused"] as? String ?? "").hasPrefix("no ad of the feed"), "\(broken)")
        #expect(!FileManager.default.fileExists(atPath: device.s.cache))
    }

    /// A VAST wrapper chain is followed as fetch follows it.
    @Test func aVASTChainIsFollowed() throws {
        let ads = try AdServer(); defer { ads.stop() }
        ads["/wrapper.xml"] = try VASTTests.sample("VAST4.2-Wrapper_Tag-test.xml", base: ads.base)
        let device = Device(); defer { device.s.remove() }
        let r = device.run(["check", "--json", ads.base + "/wrapper.xml"])
        #expect(r.status == 0, "\(r.stderr)")
        let json = try Self.json(r)
        #expect(json["format"] as? String == "vast")
        #expect(Self.ads(json).keys.sorted() == ["20004"], "\(json)")
        #expect(Self.ads(json)["20004"]?["type"] as? String == "video")
        #expect(!FileManager.default.fileExists(atPath: device.s.cache))
    }

    /// The rollout as the device's id gives it, equal to SPEC §2's rule computed apart.
    @Test(.enabled(if: available("/usr/bin/python3"), "python3 is not installed (make test installs it)"))
    func theRolloutIsShownForThisDevice() throws {
        let ads = try AdServer(); defer { ads.stop() }
        let b = ads.base
        let ids = (1...40).map { "ad-\($0)" }
        ads["/feed.json"] = RolloutTests.feed(b, ids, rollout: "50")
        let device = Device("device-id = kiosk-17\n"); defer { device.s.remove() }
        let r = device.run(["check", "--json", b + "/feed.json"])
        #expect(r.status == 0, "\(r.stderr)")
        let json = try Self.json(r)
        let want = try RolloutTests.expected(device: "kiosk-17", ids: ids, rollout: 50)
        var taken: Set<String> = []
        for (id, ad) in Self.ads(json) {
            let rollout = try #require(ad["rollout"] as? [String: Any], "\(id)")
            #expect(rollout["percent"] as? Int == 50)
            #expect(ad["ok"] as? Bool == true, "a rollout's left-out ad is not broken")
            if rollout["taken"] as? Bool == true { taken.insert(id) }
        }
        #expect(Self.ads(json).count == 40)
        #expect(taken == want)
        let human = device.run(["check", b + "/feed.json"])
        #expect(human.stdout.contains("rollout: this device (kiosk-17) takes \(want.count) of 40"), "\(human.stdout)")
        #expect(ads.hits("/ad-").isEmpty)
    }

    /// A signed feed: verified with the configured keys (the key, serial and validUntil shown);
    /// a tampered one refused with the reason fetch gives.
    @Test(.enabled(if: minisignInstalled, "minisign is not installed (make test installs it)"))
    func aSignedFeedIsVerified() throws {
        let keys = TempDir(); defer { keys.remove() }
        let publisher = try SignedFeedTests.Publisher("pub", in: keys)
        let fleet = try SignedFeedTests.Fleet(keys: [publisher]); defer { fleet.stop() }
        try fleet.serve(SignedFeedTests.feed(serial: 7), signedBy: publisher)
        let r = fleet.run(["check", "--json", fleet.feedURL])
        #expect(r.status == 0, "\(r.stderr)")
        let signed = try #require(try Self.json(r)["signed"] as? [String: Any])
        #expect(signed["keyId"] as? String == publisher.id)
        #expect(signed["serial"] as? Int == 7)
        var tampered = SignedFeedTests.feed(serial: 7)
        fleet.served.signature = try publisher.sign(tampered)
        tampered[tampered.firstIndex(of: UInt8(ascii: "7"))!] = UInt8(ascii: "8")
        fleet.served.feed = tampered
        let refused = fleet.run(["check", fleet.feedURL])
        #expect(refused.status == 65)
        #expect(
            refused.lines.last
                == "refused: feed signature: does not verify with key \(publisher.id) (the feed was changed?)",
            "\(refused.stdout)")
        #expect(!FileManager.default.fileExists(atPath: fleet.s.cache))
    }
}
