import Foundation
import TestSupport
import Testing

/// SPEC §10: VAST feeds, against the IAB Tech Lab's own sample tags (Fixtures/VAST, served
/// from the loopback server with their hosts rewritten to it) and documents written to
/// provoke each rule.
@Suite struct VASTTests {
    static let fixtures = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent(
        "Fixtures/VAST")

    /// A sample, every http(s) host in it made the loopback server's.
    static func sample(_ name: String, base: String) throws -> String {
        let text = try String(contentsOf: fixtures.appendingPathComponent(name), encoding: .utf8)
        let regex = try NSRegularExpression(pattern: "https?://[A-Za-z0-9.-]+(:[0-9]+)?")
        return regex.stringByReplacingMatches(
            in: text, range: NSRange(text.startIndex..., in: text), withTemplate: base)
    }

    /// A VAST ad server on loopback: documents by path, media files (sized by their
    /// resolution, so that the choice shows), and trackers answering 204, all logged.
    final class AdServer: @unchecked Sendable {
        private let lock = NSLock()
        private var documents: [String: [UInt8]] = [:]
        /// Serve the documents with an ETag (and 304s), as a static file server.
        var withValidators = false
        var server: LoopbackServer!
        var base: String { server.baseURL }

        init() throws {
            server = try LoopbackServer { [unowned self] r in self.respond(r) }
        }

        subscript(path: String) -> String? {
            get {
                lock.lock(); defer { lock.unlock() }; return documents[path].map { String(decoding: $0, as: UTF8.self) }
            }
            set { lock.lock(); documents[path] = newValue.map { Array($0.utf8) }; lock.unlock() }
        }

        /// A document served byte for byte (invalid UTF-8 too).
        func serve(_ path: String, bytes: [UInt8]) { lock.lock(); documents[path] = bytes; lock.unlock() }

        func bytes(_ path: String) -> [UInt8]? { lock.lock(); defer { lock.unlock() }; return documents[path] }

        func respond(_ r: LoopbackServer.Request) -> LoopbackServer.Response {
            let path = String(r.path.split(separator: "?", maxSplits: 1).first ?? "")
            if let doc = bytes(path) {
                if withValidators {   // as a static server would: an ETag, a 304 to a match
                    return .file(
                        doc, for: r, etag: "\"\(doc.count)-\(doc.reduce(0) { $0 &+ Int($1) })\"",
                        contentType: "application/xml")
                }
                return LoopbackServer.Response(status: 200, headers: [("Content-Type", "application/xml")], body: doc)
            }
            // A wrapped sample, named as on GitHub.
            if path.hasPrefix("/InteractiveAdvertisingBureau/VAST_Samples/master/"),
                let decoded = path.removingPercentEncoding
            {
                let parts = decoded.split(separator: "/")
                let version = parts[parts.count - 2].replacingOccurrences(of: "VAST ", with: "")
                    .replacingOccurrences(of: " Samples", with: "")
                let name = "VAST\(version)-\(parts.last!)"
                if let text = try? VASTTests.sample(name, base: base) {
                    return .text(200, text, contentType: "application/xml")
                }
            }
            if path.hasPrefix("/missing") { return .text(404, "no") }
            if path.hasPrefix("/broken") { return .text(500, "no") }
            if path.hasPrefix("/slow") {   // no byte for three seconds: past a --timeout of 1
                var r = LoopbackServer.Response.text(200, "late")
                r.delay = 3
                return r
            }
            if path.hasSuffix(".mp4") {
                let seed = UInt8(truncatingIfNeeded: path.count)
                return .file(Media.mp4(4096 + path.count, seed: seed), for: r, etag: "\"\(path.count)\"")
            }
            if path.hasSuffix(".png") { return .file(Media.png(), for: r, etag: "\"png\"") }
            if path.hasSuffix(".jpg") { return .file(Media.jpeg(), for: r, etag: "\"jpg\"") }
            return .text(204, "")
        }

        /// The paths (with queries) of the GET requests to `prefix`.
        func hits(_ prefix: String) -> [String] {
            server.log.map(\.path).filter { $0.hasPrefix(prefix) }
        }

        func stop() { server.stop() }
    }

    struct Device {
        let s = Sandbox()
        let conf: String

        init(_ settings: String = "") {
            conf = s.dir.write("adcache.conf", settings)
        }

        func run(_ args: [String]) -> Run {
            Adcache.call(["--config", conf, "--cache-dir", s.cache] + args)
        }

        func fetch(_ url: String) -> Run { run(["fetch", "--no-progress", url]) }

        func listJSON() throws -> [[String: Any]] {
            try #require(
                try JSONSerialization.jsonObject(with: Data(run(["list", "--json"]).stdout.utf8)) as? [[String: Any]])
        }

        func index() throws -> [String: Any] {
            try jsonObject(String(contentsOfFile: s.cache + "/index.json", encoding: .utf8))
        }

        func record(_ id: String) throws -> [String: Any]? {
            (try index()["ads"] as? [[String: Any]])?.first { $0["id"] as? String == id }
        }
    }

    // MARK: The IAB samples

    @Test func theSimpleInlineSampleIsAVideoAd() throws {
        let ads = try AdServer(); defer { ads.stop() }
        ads["/simple.xml"] = try Self.sample("VAST4.2-Inline_Simple.xml", base: ads.base)
        let device = Device(); defer { device.s.remove() }
        let r = device.fetch(ads.base + "/simple.xml")
        #expect(r.status == 0, "\(r.stderr)")
        let list = try device.listJSON()
        #expect(list.map { $0["id"] as? String } == ["20001"])
        #expect(list.first?["type"] as? String == "video")
        #expect(
            list.first?["url"] as? String == ads.base + "/vast/VAST-4.0-Short-Intro.mp4",
            "the largest: no file fits 1920x1080")
        let next = try jsonObject(device.run(["next", "--json"]).stdout)
        #expect(next["duration"] as? Int == 16, "its length, not a countdown")
        #expect(next["skipOffset"] is NSNull)
        #expect(next["clickUrl"] as? String == ads.base)
        let meta = try #require(next["meta"] as? [String: Any])
        #expect(meta["adSystem"] as? String == "iabtechlab")
        #expect(meta["adTitle"] as? String == "Inline Simple Ad")
        #expect(meta["adServingId"] as? String == "a532d16d-4d7f-4440-bd29-2ec05553fc80")
        #expect(meta["universalAdId"] as? String == "Ad-ID 8465")
        #expect(meta["advertiser"] as? String == "IAB Sample Company")
        // The show called the impression and the start trackers (one journal record).
        #expect(device.run(["report"]).status == 0)
        #expect(ads.hits("/track/impression").count == 1)
        #expect(ads.hits("/tracking/start").count == 1)
        #expect(ads.hits("/tracking/firstQuartile").isEmpty)
        // The launcher reports the quartiles and the end as it plays.
        for event in ["firstQuartile", "midpoint", "thirdQuartile", "complete"] {
            #expect(device.run(["event", event, "20001"]).status == 0)
        }
        #expect(device.run(["report"]).status == 0)
        for event in ["firstQuartile", "midpoint", "thirdQuartile", "complete"] {
            #expect(ads.hits("/tracking/\(event)").count == 1, "\(event)")
        }
    }

    /// Each sample reads as what it is: video, image (companion, non-linear), or skipped
    /// with its error code (VPAID: 403; `adType="audio"`: 200, SPEC §10 (v4)).
    @Test(arguments: [
        ("VAST2.0-Inline_LinearRegular_VAST2.0.xml", "video", 1),
        ("VAST3.0-Inline_Linear_Tag-test.xml", "video", 1),
        ("VAST4.0-Event_Tracking-test.xml", "video", 1),
        ("VAST4.2-Inline_Companion_Tag-test.xml", "video", 1),
        ("VAST4.2-Inline_Non-Linear_Tag-test.xml", "image", 1),
        ("VAST4.2-Universal_Ad_ID-multi-test.xml", "video", 1),
        ("VAST2.0-Inline_LinearVAST2vpaid.xml", "", 0),
        ("VAST4.1-Audio_DAAST_Sample.xml", "", 0),
    ])
    func everySampleReads(_ name: String, _ type: String, _ count: Int) throws {
        let ads = try AdServer(); defer { ads.stop() }
        ads["/tag.xml"] = try Self.sample(name, base: ads.base)
        let device = Device(); defer { device.s.remove() }
        let r = device.fetch(ads.base + "/tag.xml")
        // A feed whose one ad cannot be used is refused whole (SPEC §2 v4): 65, nothing changed.
        #expect(r.status == (count == 0 ? 65 : 0), "\(name): \(r.stderr)")
        let list = try device.listJSON()
        #expect(list.count == count, "\(name): \(list)")
        if count > 0 {
            #expect(list[0]["type"] as? String == type, "\(name)")
            #expect(list[0]["state"] as? String == "ready", "\(name): \(r.stderr)")
        } else {
            let code = name.contains("Audio") ? 200 : 403
            #expect(r.stderr.contains("(error \(code))"), "\(name): \(r.stderr)")
        }
    }

    @Test func universalAdIdsAreJoinedInDocumentOrder() throws {
        let ads = try AdServer(); defer { ads.stop() }
        ads["/tag.xml"] = try Self.sample("VAST4.2-Universal_Ad_ID-multi-test.xml", base: ads.base)
        let device = Device(); defer { device.s.remove() }
        #expect(device.fetch(ads.base + "/tag.xml").status == 0)
        let meta = try #require(try device.record("20011")?["meta"] as? [String: Any])
        #expect(meta["universalAdId"] as? String == "Ad-ID 8465,FooId 9999,BarId ADSe9999", "\(meta)")
    }

    /// The wrapper sample leads to the companion sample; the wrapper's impression and the
    /// ad's are both called (the same URL, once for each appearance).
    @Test func theWrapperSampleAccumulatesTrackers() throws {
        let ads = try AdServer(); defer { ads.stop() }
        ads["/wrapper.xml"] = try Self.sample("VAST4.2-Wrapper_Tag-test.xml", base: ads.base)
        let device = Device(); defer { device.s.remove() }
        let r = device.fetch(ads.base + "/wrapper.xml")
        #expect(r.status == 0, "\(r.stderr)")
        let list = try device.listJSON()
        #expect(list.count == 1, "\(list)")
        #expect(list.first?["id"] as? String == "20004", "the InLine's Ad id: \(list)")
        #expect(device.run(["next"]).status == 0)
        #expect(device.run(["report"]).status == 0)
        #expect(ads.hits("/track/impression").count == 2, "\(ads.server.log.map(\.path))")
        // Delivered once: a second report sends nothing again.
        #expect(device.run(["report"]).status == 0)
        #expect(ads.hits("/track/impression").count == 2)
    }

    /// libxml2 is loaded by the fetch that reads XML, never by a launch (nor are libcurl
    /// and libcrypto): glibc's loader says what it opens (`LD_DEBUG=files`).
    @Test func aLaunchLoadsNoLibraryAndAVASTFetchLoadsLibxml2() throws {
        let ads = try AdServer(); defer { ads.stop() }
        ads["/simple.xml"] = try Self.sample("VAST4.2-Inline_Simple.xml", base: ads.base)
        let device = Device(); defer { device.s.remove() }
        let trace = ["LD_DEBUG": "files"]
        let fetch = Adcache.run(
            ["--config", device.conf, "--cache-dir", device.s.cache, "fetch", ads.base + "/simple.xml"],
            environment: trace)
        #expect(fetch.status == 0, "\(fetch.stderr.suffix(500))")
        #expect(fetch.stderr.contains("file=libxml2.so.2"), "the fetch loads libxml2")
        let next = Adcache.run(["--config", device.conf, "--cache-dir", device.s.cache, "next"], environment: trace)
        #expect(next.status == 0)
        for library in ["libxml2", "libcurl", "libcrypto"] {
            #expect(!next.stderr.contains("file=\(library)"), "next loaded \(library)")
        }
    }

    // MARK: The media file

    /// The smallest file at least the screen, else the largest; then the bitrate closest to
    /// max-bitrate without exceeding it.
    @Test(arguments: [
        ("screen = 640x360", "/vast/VAST-4.0-Short-Intro-low-resolution.mp4"),
        ("screen = 800x450", "/vast/VAST-4.0-Short-Intro-mid-resolution.mp4"),
        ("screen = 3840x2160", "/vast/VAST-4.0-Short-Intro.mp4"),
    ])
    func theMediaFileSuitsTheScreen(_ setting: String, _ chosen: String) throws {
        let ads = try AdServer(); defer { ads.stop() }
        ads["/simple.xml"] = try Self.sample("VAST4.2-Inline_Simple.xml", base: ads.base)
        let device = Device(setting + "\n"); defer { device.s.remove() }
        #expect(device.fetch(ads.base + "/simple.xml").status == 0)
        #expect(try device.listJSON().first?["url"] as? String == ads.base + chosen)
    }

    static func linear(_ files: String, duration: String = "00:00:10", skip: String? = nil, error: String = "")
        -> String
    {
        """
        <VAST version="4.1"><Ad id="v"><InLine><AdSystem>t</AdSystem><AdTitle>t</AdTitle>\(error)
        <Impression>IMP/imp</Impression>
        <Creatives><Creative><Linear\(skip.map { " skipoffset=\"\($0)\"" } ?? "")><Duration>\(duration)</Duration>
        <TrackingEvents><Tracking event="firstQuartile">IMP/q1?ph=[ADPLAYHEAD]&amp;ps=[PLAYERSIZE]&amp;lat=[LIMITADTRACKING]&amp;u=[ASSETURI]&amp;x=[UNKNOWN]</Tracking></TrackingEvents>
        <MediaFiles>\(files)</MediaFiles></Linear></Creative></Creatives></InLine></Ad></VAST>
        """
    }

    @Test func bitrateAndTypesNarrowTheChoice() throws {
        let ads = try AdServer(); defer { ads.stop() }
        let files = """
            <MediaFile delivery="progressive" type="video/webm" width="1920" height="1080" bitrate="900">B/a.mp4</MediaFile>
            <MediaFile delivery="progressive" type="video/mp4" width="1920" height="1080" bitrate="3000">B/b.mp4</MediaFile>
            <MediaFile delivery="progressive" type="video/mp4" width="1920" height="1080" bitrate="1500">B/c.mp4</MediaFile>
            <MediaFile delivery="streaming" type="video/mp4" width="1920" height="1080" bitrate="1000">B/d.mp4</MediaFile>
            """.replacingOccurrences(of: "B/", with: ads.base + "/")
        ads["/tag.xml"] = Self.linear(files).replacingOccurrences(of: "IMP/", with: ads.base + "/")
        for (setting, chosen) in [
            ("", "/b.mp4"), ("max-bitrate = 2000", "/c.mp4"), ("max-bitrate = 1000", "/a.mp4"),
            ("max-bitrate = 500", "/a.mp4"), ("media-types = video/webm", "/a.mp4"),
        ] {
            let device = Device(setting + "\n"); defer { device.s.remove() }
            let r = device.fetch(ads.base + "/tag.xml")
            #expect(r.status == 0, "\(r.stderr)")
            #expect(try device.listJSON().first?["url"] as? String == ads.base + chosen, "\(setting)")
        }
    }

    // MARK: Fields, macros, events

    @Test func skipOffsetAndTheIABMacros() throws {
        let ads = try AdServer(); defer { ads.stop() }
        let file = #"<MediaFile delivery="progressive" type="video/mp4" width="640" height="360">B/m.mp4</MediaFile>"#
            .replacingOccurrences(of: "B/", with: ads.base + "/")
        ads["/tag.xml"] = Self.linear(file, duration: "00:00:09.2", skip: "25%").replacingOccurrences(
            of: "IMP/", with: ads.base + "/")
        let device = Device("screen = 1280x720\nlimit-ad-tracking = true\n"); defer { device.s.remove() }
        #expect(device.fetch(ads.base + "/tag.xml").status == 0)
        let next = try jsonObject(device.run(["next", "--json"]).stdout)
        #expect(next["duration"] as? Int == 10, "9.2 s rounded up")
        #expect((next["skipOffset"] as? Double).map { abs($0 - 2.3) < 1e-9 } == true, "\(next)")
        #expect(device.run(["event", "firstQuartile", "v"]).status == 0)
        #expect(device.run(["report"]).status == 0)
        let q1 = try #require(ads.hits("/q1").first)
        let asset = ads.base + "/m.mp4"
        let encoded = asset.addingPercentEncoding(
            withAllowedCharacters: .alphanumerics.union(.init(charactersIn: "-._~")))!
        #expect(q1 == "/q1?ph=00%3A00%3A02.500&ps=1280%2C720&lat=1&u=\(encoded)&x=[UNKNOWN]", "\(q1)")
    }

    @Test func theEventCommandTakesTheQuartiles() throws {
        let device = Device(); defer { device.s.remove() }
        let r = device.run(["event", "thirdQuartile", "nothing"])
        #expect(r.status == 65, "an unknown ad, not an unknown event: \(r.stderr)")
        let bad = device.run(["event", "quarter", "x"])
        #expect(bad.status == 64)
        #expect(bad.stderr.contains("start, firstQuartile, midpoint, thirdQuartile"), "\(bad.stderr)")
    }

    // MARK: Errors, each with its code, checked at the server after `report`

    static func withError(_ doc: String, _ base: String) -> String {
        doc.replacingOccurrences(of: "IMP/", with: base + "/")
    }

    @Test(arguments: [
        ("404", 401), ("notvideo", 405), ("vpaid", 403), ("noduration", 101), ("size", 400),
    ])
    func mediaAndAdErrorsAreReportedWithTheirCode(_ kind: String, _ code: Int) throws {
        let ads = try AdServer(); defer { ads.stop() }
        let b = ads.base
        let error = "<Error>\(b)/err?code=[ERRORCODE]&amp;ad=[ADID]</Error>"
        var file =
            #"<MediaFile delivery="progressive" type="video/mp4" width="640" height="360">\#(b)/m.mp4</MediaFile>"#
        var duration = "00:00:10"
        switch kind {
        case "404": file = file.replacingOccurrences(of: "/m.mp4", with: "/missing.mp4")
        case "notvideo": file = file.replacingOccurrences(of: "/m.mp4", with: "/pic.png")
        case "vpaid":
            file = file.replacingOccurrences(of: "type=\"video/mp4\"", with: "type=\"application/javascript\"")
        case "noduration": duration = "ten seconds"
        default: file = file.replacingOccurrences(of: "<MediaFile ", with: "<MediaFile fileSize=\"7\" ")
        }
        // With an ad that can be used beside it: a feed of none is refused whole, and queues
        // nothing (SPEC §2, §6 v4; `aFeedOfNoUsableAdIsRefusedWhole`).
        ads["/tag.xml"] = Self.plusGoodAd(
            Self.linear(file, duration: duration, error: error).replacingOccurrences(of: "IMP/", with: b + "/"), base: b
        )
        let device = Device(); defer { device.s.remove() }
        let r = device.fetch(b + "/tag.xml")
        #expect([0, 65].contains(r.status), "\(r.stderr)")
        #expect(device.run(["report"]).status == 0)
        #expect(ads.hits("/err").count == 1, "\(kind): \(ads.server.log.map(\.path)) \(r.stderr)")
        #expect(ads.hits("/err").first?.hasPrefix("/err?code=\(code)&") == true, "\(kind): \(ads.hits("/err"))")
        // Once per failure: the next run's back-off tries nothing, so it reports nothing.
        _ = device.fetch(b + "/tag.xml")
        #expect(device.run(["report"]).status == 0)
        if ["vpaid", "noduration"].contains(kind) {
            #expect(ads.hits("/err").count == 2, "a skipped ad is skipped on every run that reads it")
        } else {
            #expect(ads.hits("/err").count == 1, "\(kind): \(ads.hits("/err"))")
        }
    }

    static func wrapper(_ n: Int, to uri: String, base: String, follow: Bool = true) -> String {
        """
        <VAST version="4.0"><Ad id="w\(n)"><Wrapper\(follow ? "" : " followAdditionalWrappers=\"false\"")>
        <AdSystem>w</AdSystem><Error>\(base)/err\(n)?c=[ERRORCODE]</Error><Impression>\(base)/wimp\(n)</Impression>
        <VASTAdTagURI><![CDATA[\(uri)]]></VASTAdTagURI></Wrapper></Ad></VAST>
        """
    }

    /// `doc` with one more `Ad`, an InLine that can be used (`good`), before `</VAST>`.
    static func plusGoodAd(_ doc: String, base: String) -> String {
        let ad = inline(base, id: "good").replacingOccurrences(of: "<VAST version=\"4.0\">", with: "")
            .replacingOccurrences(of: "</VAST>", with: "")
        return doc.replacingOccurrences(of: "</VAST>", with: ad + "</VAST>")
    }

    static func inline(_ base: String, id: String = "deep") -> String {
        """
        <VAST version="4.0"><Ad id="\(id)"><InLine><AdSystem>t</AdSystem><AdTitle>t</AdTitle>
        <Impression>\(base)/imp-\(id)</Impression><Creatives><Creative><Linear><Duration>00:00:05</Duration>
        <MediaFiles><MediaFile delivery="progressive" type="video/mp4" width="1920" height="1080">\(base)/\(id).mp4</MediaFile></MediaFiles>
        </Linear></Creative></Creatives></InLine></Ad></VAST>
        """
    }

    /// Five wrappers lead to an InLine; a sixth is error 302 to every wrapper's Error URL,
    /// the sixth included. Every wrapper's impression is called at the show.
    @Test(arguments: [5, 6])
    func wrapperChains(_ depth: Int) throws {
        let ads = try AdServer(); defer { ads.stop() }
        let b = ads.base
        for n in 1...depth {
            ads["/w\(n).xml"] = Self.wrapper(n, to: n == depth ? b + "/inline.xml" : b + "/w\(n + 1).xml", base: b)
        }
        // Six: the root has an ad that can be used too, else it would be refused whole.
        if depth == 6 { ads["/w1.xml"] = Self.plusGoodAd(ads["/w1.xml"]!, base: b) }
        ads["/inline.xml"] = Self.inline(b)
        let device = Device(); defer { device.s.remove() }
        let r = device.fetch(b + "/w1.xml")
        #expect(r.status == 0, "\(r.stderr)")
        if depth == 5 {
            #expect(try device.listJSON().map { $0["id"] as? String } == ["deep"])
            #expect(device.run(["next"]).status == 0)
            #expect(device.run(["report"]).status == 0)
            for n in 1...5 { #expect(ads.hits("/wimp\(n)").count == 1, "wrapper \(n)") }
            #expect(ads.hits("/imp-deep").count == 1)
            #expect(ads.hits("/err").isEmpty)
        } else {
            #expect(try device.listJSON().map { $0["id"] as? String } == ["good"])
            #expect(r.stderr.contains("more than 5 wrappers"), "\(r.stderr)")
            #expect(ads.hits("/inline.xml").isEmpty, "the sixth's tag is never fetched")
            #expect(device.run(["report"]).status == 0)
            for n in 1...6 { #expect(ads.hits("/err\(n)?") == ["/err\(n)?c=302"], "wrapper \(n): \(ads.hits("/err"))") }
        }
    }

    /// Wrapped documents are asked for conditionally: a 304 keeps the copy of the last run,
    /// so a feed that changed elsewhere still has the wrapped ads.
    @Test func wrappedDocumentsAreAskedForConditionally() throws {
        let ads = try AdServer(); defer { ads.stop() }
        ads.withValidators = true
        let b = ads.base
        ads["/w.xml"] = Self.wrapper(1, to: b + "/in.xml", base: b)
        ads["/in.xml"] = Self.inline(b, id: "deep")
        ads["/feed.json"] = #"{"ads":[{"id":"tag","vast":"\#(b)/w.xml"}],"reportUrl":null}"#
        let device = Device(); defer { device.s.remove() }
        #expect(device.fetch(b + "/feed.json").status == 0)
        // The feed changes (so it is read again); the wrapped documents do not.
        ads["/feed.json"] = #"{"ads":[{"id":"tag","vast":"\#(b)/w.xml","priority":3}]}"#
        let r = device.fetch(b + "/feed.json")
        #expect(r.status == 0, "\(r.stderr)")
        let second = ads.server.log.suffix(3).filter { $0.path.hasSuffix(".xml") }
        #expect(second.count == 2 && second.allSatisfy { $0.header("If-None-Match") != nil }, "\(second.map(\.path))")
        let list = try device.listJSON()
        #expect(list.map { $0["id"] as? String } == ["tag/deep"] && list.first?["priority"] as? Int == 3, "\(list)")
        #expect(Disk.exists(device.s.cache + "/vast.documents"))
        #expect(device.run(["clear"]).status == 0)
        #expect(!Disk.exists(device.s.cache + "/vast.documents"))
    }

    @Test func loopsNoFollowAndBrokenWrappers() throws {
        let ads = try AdServer(); defer { ads.stop() }
        let b = ads.base
        ads["/loop1.xml"] = Self.wrapper(1, to: b + "/loop2.xml", base: b)
        ads["/loop2.xml"] = Self.wrapper(2, to: b + "/loop1.xml", base: b)
        ads["/nofollow.xml"] = Self.wrapper(3, to: b + "/again.xml", base: b, follow: false)
        ads["/again.xml"] = Self.wrapper(4, to: b + "/inline.xml", base: b)
        ads["/bad.xml"] = Self.wrapper(5, to: b + "/notxml.xml", base: b)
        ads["/notxml.xml"] = "<VAST><Ad>"
        ads["/down.xml"] = Self.wrapper(6, to: b + "/broken.xml", base: b)
        ads["/empty.xml"] = Self.wrapper(7, to: b + "/nothing.xml", base: b)
        ads["/nothing.xml"] = #"<VAST version="4.0"><Error>\#(b)/root-err?c=[ERRORCODE]</Error></VAST>"#
        ads["/inline.xml"] = Self.inline(b)
        // A JSON feed naming each as a VAST tag: a failed wrapper fails only its ads.
        ads["/feed.json"] = """
            {"ads":[
             {"id":"loop","vast":"\(b)/loop1.xml"},{"id":"nofollow","vast":"\(b)/nofollow.xml"},
             {"id":"bad","vast":"\(b)/bad.xml"},{"id":"down","vast":"\(b)/down.xml"},
             {"id":"empty","vast":"\(b)/empty.xml"},
             {"id":"ok","vast":"\(b)/inline.xml","priority":7,"maxShows":2}
            ]}
            """
        let device = Device(); defer { device.s.remove() }
        let r = device.fetch(b + "/feed.json")
        #expect(r.status == 75, "a wrapper that failed for now (HTTP 500): \(r.stderr)")
        let list = try device.listJSON()
        #expect(list.map { $0["id"] as? String } == ["ok/deep"], "\(list)")
        #expect(list.first?["priority"] as? Int == 7)
        #expect(list.first?["maxShows"] as? Int == 2)
        #expect(device.run(["report"]).status == 0)
        #expect(ads.hits("/err1?") == ["/err1?c=302"] && ads.hits("/err2?") == ["/err2?c=302"], "loop")
        #expect(ads.hits("/err3?") == ["/err3?c=302"] && ads.hits("/err4?") == ["/err4?c=302"], "no follow")
        #expect(ads.hits("/err5?") == ["/err5?c=100"], "not XML")
        #expect(ads.hits("/err6?") == ["/err6?c=300"], "HTTP 500")
        #expect(ads.hits("/err7?") == ["/err7?c=303"], "no ad")
        #expect(ads.hits("/root-err?") == ["/root-err?c=303"], "the empty document's own Error")
    }

    /// Timeouts have codes of their own: a wrapped document that does not answer in time is
    /// 301 to its wrapper's Error URL, a media file 402 to the ad's; both are transient (75).
    @Test func timeoutsAreReportedAs301And402() throws {
        let ads = try AdServer(); defer { ads.stop() }
        let b = ads.base
        ads["/w.xml"] = Self.wrapper(1, to: b + "/slow.xml", base: b)
        ads["/in.xml"] = Self.inline(b, id: "late").replacingOccurrences(of: "/late.mp4", with: "/slow.mp4")
            .replacingOccurrences(of: "<Impression>", with: "<Error>\(b)/err-media?c=[ERRORCODE]</Error><Impression>")
        ads["/feed.json"] = #"{"ads":[{"id":"w","vast":"\#(b)/w.xml"},{"id":"m","vast":"\#(b)/in.xml"}]}"#
        let device = Device("timeout = 1\nretries = 0\n"); defer { device.s.remove() }
        let r = device.fetch(b + "/feed.json")
        #expect(r.status == 75, "\(r.stderr)")
        #expect(device.run(["report"]).status == 0)
        #expect(ads.hits("/err1?") == ["/err1?c=301"], "\(ads.hits("/err"))")
        #expect(ads.hits("/err-media?") == ["/err-media?c=402"], "\(ads.hits("/err"))")
    }

    /// An ad never shown whose feed withdraws it queues its notUsed once; a shown one none.
    @Test func notUsedIsQueuedOnceForANeverShownAd() throws {
        let ads = try AdServer(); defer { ads.stop() }
        let b = ads.base
        func doc(_ ids: [String]) -> String {
            "<VAST version=\"4.1\">"
                + ids.map { id in
                    Self.inline(b, id: id).replacingOccurrences(of: "<VAST version=\"4.0\">", with: "")
                        .replacingOccurrences(of: "</VAST>", with: "")
                        .replacingOccurrences(
                            of: "<Duration>",
                            with:
                                "<TrackingEvents><Tracking event=\"notUsed\">\(b)/notused-\(id)</Tracking></TrackingEvents><Duration>"
                        )
                }.joined() + "</VAST>"
        }
        ads["/tag.xml"] = doc(["a", "b"])
        let device = Device(); defer { device.s.remove() }
        #expect(device.fetch(b + "/tag.xml").status == 0)
        let shown = try jsonObject(device.run(["next", "--json"]).stdout)["id"] as? String
        let other = shown == "a" ? "b" : "a"
        ads["/tag.xml"] = #"<VAST version="4.1"></VAST>"#
        #expect(device.fetch(b + "/tag.xml").status == 0)
        #expect(device.fetch(b + "/tag.xml").status == 0)
        #expect(device.run(["prune"]).status == 0)
        #expect(device.run(["report"]).status == 0)
        #expect(ads.hits("/notused-\(other)").count == 1)
        #expect(ads.hits("/notused-\(shown ?? "")").isEmpty)
    }

    /// An ad never shown and evicted by `prune --max-size` queues its notUsed too, once: not
    /// again when a fetch brings it back and a prune evicts it again (SPEC §10).
    @Test func notUsedIsQueuedOnceForAnEvictedAd() throws {
        let ads = try AdServer(); defer { ads.stop() }
        let b = ads.base
        ads["/tag.xml"] = Self.inline(b, id: "e").replacingOccurrences(
            of: "<Duration>",
            with: "<TrackingEvents><Tracking event=\"notUsed\">\(b)/notused-e</Tracking></TrackingEvents><Duration>")
        let device = Device(); defer { device.s.remove() }
        for _ in 0..<2 {
            #expect(device.fetch(b + "/tag.xml").status == 0)
            #expect(try device.listJSON().first?["state"] as? String == "ready")
            #expect(device.run(["prune", "--max-size", "1"]).status == 0)
            #expect(try device.listJSON().first?["state"] as? String != "ready", "evicted")
            #expect(device.run(["report"]).status == 0)
            #expect(ads.hits("/notused-e").count == 1)
        }
    }

    /// AdVerifications: adcache runs no script, so each verificationNotExecuted tracker is
    /// called at the first show with [REASON] 2.
    @Test func verificationNotExecutedAtTheFirstShow() throws {
        let ads = try AdServer(); defer { ads.stop() }
        let b = ads.base
        ads["/tag.xml"] = Self.inline(b, id: "ver").replacingOccurrences(
            of: "<Creatives>",
            with: """
                <AdVerifications><Verification vendor="v"><JavaScriptResource>\(b)/v.js</JavaScriptResource>
                <TrackingEvents><Tracking event="verificationNotExecuted">\(b)/vne?r=[REASON]</Tracking></TrackingEvents>
                </Verification></AdVerifications><Creatives>
                """)
        let device = Device(); defer { device.s.remove() }
        #expect(device.fetch(b + "/tag.xml").status == 0)
        #expect(device.run(["next"]).status == 0)
        #expect(device.run(["next"]).status == 0)
        #expect(device.run(["report"]).status == 0)
        #expect(ads.hits("/vne") == ["/vne?r=2"], "\(ads.hits("/vne"))")
        #expect(ads.hits("/v.js").isEmpty, "no script is fetched")
    }

    // MARK: Hostile XML: refused, nothing read or fetched outside what §10 allows

    @Test(arguments: ["billion laughs", "external entity", "external dtd", "deep", "invalid utf-8", "not vast"])
    func hostileDocumentsAreRefused(_ kind: String) throws {
        let ads = try AdServer(); defer { ads.stop() }
        let b = ads.base
        let doc: [UInt8]
        switch kind {
        case "billion laughs":
            var entities = #"<!ENTITY lol "lol">"#
            for i in 1...9 {
                entities +=
                    "<!ENTITY lol\(i) \"" + String(repeating: "&lol\(i == 1 ? "" : String(i - 1));", count: 10) + "\">"
            }
            doc = Array("<?xml version=\"1.0\"?><!DOCTYPE VAST [\(entities)]><VAST version=\"4.0\">&lol9;</VAST>".utf8)
        case "external entity":
            doc = Array(
                #"<?xml version="1.0"?><!DOCTYPE VAST [<!ENTITY x SYSTEM "file:///etc/passwd">]><VAST version="4.0"><Error>&x;</Error></VAST>"#
                    .utf8)
        case "external dtd":
            doc = Array(
                #"<?xml version="1.0"?><!-- c --><!DOCTYPE VAST SYSTEM "\#(b)/evil.dtd"><VAST version="4.0"/>"#.utf8)
        case "deep":
            doc = Array(
                ("<VAST>" + String(repeating: "<a>", count: 100_000) + String(repeating: "</a>", count: 100_000)
                    + "</VAST>").utf8)
        case "invalid utf-8":
            doc = Array(#"<VAST version="4.0"><Ad id=""#.utf8) + [0xFF, 0xFE, 0xC3] + Array(#""/></VAST>"#.utf8)
        default:
            doc = Array(#"<rss version="2.0"><channel/></rss>"#.utf8)
        }
        let device = Device(); defer { device.s.remove() }
        let path = device.s.dir.write("feed.xml", doc)
        let r = device.run(["fetch", path])
        #expect(r.status == 65, "\(kind): \(r.stderr)")
        #expect(r.stderr.hasPrefix("adcache: error: the feed \(path) is not a valid feed: "), "\(r.stderr)")
        #expect(r.stderr.split(separator: "\n").count == 1, "one line: \(r.stderr)")
        #expect(!r.stderr.contains("root:"), "nothing of /etc/passwd")
        #expect(ads.server.log.isEmpty, "no request: \(ads.server.log.map(\.path))")
        #expect(!Disk.exists(device.s.cache + "/index.json"), "nothing changed")
        // The same document wrapped: error 100 for the ads under it, the rest goes on.
        ads.serve("/hostile.xml", bytes: doc)
        ads["/w.xml"] = Self.plusGoodAd(Self.wrapper(1, to: b + "/hostile.xml", base: b), base: b)
        let wrapped = device.fetch(b + "/w.xml")
        #expect(wrapped.status == 0, "\(wrapped.stderr)")
        #expect(device.run(["report"]).status == 0)
        let code = kind == "not vast" ? 101 : 100
        #expect(ads.hits("/err1?") == ["/err1?c=\(code)"], "\(kind): \(ads.hits("/err"))")
        #expect(ads.hits("/evil.dtd").isEmpty)
    }

    // MARK: §6 holds with VAST ads in the cache

    /// A fetch of a VAST feed killed before and after its commit, and launches at once: the
    /// cache is one generation or the other, every show is counted with its impression and
    /// start, and the next fetch completes.
    @Test(arguments: ["fetch.beforeCommit", "write.index.json.beforeRename", "fetch.afterCommit"])
    func killedFetchesAndConcurrentLaunches(_ point: String) throws {
        let ads = try AdServer(); defer { ads.stop() }
        let b = ads.base
        ads["/w.xml"] = Self.wrapper(1, to: b + "/in.xml", base: b)
        ads["/in.xml"] = Self.inline(b, id: "one")
        let device = Device(); defer { device.s.remove() }
        #expect(device.fetch(b + "/w.xml").status == 0)
        // A second ad arrives; the fetch that brings it is killed at `point`.
        ads["/in.xml"] =
            "<VAST version=\"4.0\">"
            + Self.inline(b, id: "one").dropFirst("<VAST version=\"4.0\">".count).dropLast("</VAST>".count)
            + Self.inline(b, id: "two").dropFirst("<VAST version=\"4.0\">".count)
        ads["/w.xml"] = ads["/w.xml"]!.replacingOccurrences(
            of: "<Wrapper>", with: "<Wrapper allowMultipleAds=\"true\">")
        let killed = Adcache.run(
            ["--config", device.conf, "--cache-dir", device.s.cache, "fetch", b + "/w.xml"],
            environment: ["ADCACHE_CRASH_AT": point])
        #expect(killed.status != 0, "\(point): \(killed.stderr)")
        // Twenty launches at once, whatever generation the index is.
        let group = DispatchGroup()
        let statuses = Locked<[Int32]>([])
        for _ in 0..<20 {
            group.enter()
            DispatchQueue.global().async {
                let r = Adcache.run(["--config", device.conf, "--cache-dir", device.s.cache, "next"])
                statuses.update { $0.append(r.status) }
                group.leave()
            }
        }
        group.wait()
        #expect(statuses.value.allSatisfy { $0 == 0 }, "\(statuses.value)")
        let r = device.fetch(b + "/w.xml")
        #expect(r.status == 0, "\(r.stderr)")
        #expect(try device.listJSON().map { $0["id"] as? String ?? "" }.sorted() == ["one", "two"])
        let stats = try jsonObject(device.run(["stats", "--json"]).stdout)
        let days = stats["days"] as? [[String: Any]] ?? []
        #expect(days.reduce(0) { $0 + ($1["shows"] as? Int ?? 0) } == 20, "\(days)")
        #expect(days.reduce(0) { $0 + ($1["starts"] as? Int ?? 0) } == 20, "a video's start with each show")
        #expect(device.run(["report"]).status == 0)
        let impressions = ads.hits("/imp-").count + ads.hits("/wimp1").count
        #expect(impressions == 40, "each show's own impression and its wrapper's, once: \(impressions)")
    }

    // MARK: Signed VAST feeds (SPEC §11)

    @Test(.enabled(if: minisignInstalled, "minisign is not installed (make test installs it)"))
    func aSignedVASTFeedCarriesItsSerialInAnExtension() throws {
        let keys = TempDir(); defer { keys.remove() }
        let publisher = try SignedFeedTests.Publisher("publisher", in: keys)
        let ads = try AdServer(); defer { ads.stop() }
        let b = ads.base
        let until = Int(Date().timeIntervalSince1970 + 3600)
        let body = Self.inline(b, id: "signed").replacingOccurrences(
            of: "<Ad id=\"signed\">",
            with:
                #"<Extensions><Extension type="adcache"><Serial>3</Serial><ValidUntil>\#(until)</ValidUntil></Extension></Extensions><Ad id="signed">"#
        ).replacingOccurrences(
            of: "</VAST>",
            with: Self.wrapper(9, to: b + "/x.xml", base: b)
                .replacingOccurrences(of: "<VAST version=\"4.0\">", with: ""))
        ads["/signed.xml"] = body
        ads["/signed.xml.minisig"] = String(decoding: try publisher.sign(Array(body.utf8)), as: UTF8.self)
        let device = Device("feed-key = \(publisher.publicLine)\n"); defer { device.s.remove() }
        let r = device.fetch(b + "/signed.xml")
        #expect(r.status == 0, "\(r.stderr)")
        #expect(
            r.stderr.contains("skipping VAST wrapper 'w9': a signed feed's wrapped documents are not signed"),
            "\(r.stderr)")
        #expect(try device.listJSON().map { $0["id"] as? String } == ["signed"])
        #expect((try device.index()["signed"] as? [String: Any])?["serial"] as? Int == 3)
        #expect(ads.hits("/x.xml").isEmpty)
        let why = try jsonObject(device.run(["why", "--json"]).stdout)
        let rules = ((why["ads"] as? [[String: Any]])?.first?["rules"] as? [[String: Any]]) ?? []
        let signature = rules.first { $0["rule"] as? String == "signature" }
        #expect((signature?["detail"] as? String)?.contains("signed by URL only, not its bytes") == true, "\(rules)")
        // Fetched again (the same bytes): its InLine ad stays, though VAST gives no sha256.
        let again = device.fetch(b + "/signed.xml")
        #expect(again.status == 0, "\(again.stderr)")
        #expect(try device.listJSON().map { $0["id"] as? String } == ["signed"], "\(again.stderr)")
    }
}
