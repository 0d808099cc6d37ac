import Foundation
import TestSupport
import Testing

/// SPEC v4 §2, §4, §6 *Decide, then act*, §10 *Bounded numbers*, *Bounded effort*, *Wrapped
/// documents stay fresh*, *The next rendition*: a fetch that no third party can break. Each
/// test provokes its failure through the command line against a loopback server and shows
/// that nothing is lost.
@Suite struct DecideThenActTests {
    typealias AdServer = VASTTests.AdServer
    typealias Device = VASTTests.Device

    /// The cache's regular files and their bytes (lock files aside).
    /// Every file but the locks and `fetch.last`, the run's record for `status`, which every
    /// run writes, a refused one too (SPEC §3).
    static func snapshot(_ cache: String) throws -> [String: [UInt8]] {
        var out: [String: [UInt8]] = [:]
        for path in try FileManager.default.subpathsOfDirectory(atPath: cache)
        where !path.hasSuffix(".lock") && path != "fetch.last" {
            var st = stat()
            guard lstat(cache + "/" + path, &st) == 0, (st.st_mode & S_IFMT) == S_IFREG else { continue }
            out[path] = Array(try Data(contentsOf: URL(fileURLWithPath: cache + "/" + path)))
        }
        return out
    }

    // MARK: §2 No feed blanks a fleet

    /// A publisher's broken export — every ad invalid — is refused whole: 65, one error with the
    /// count and the first reason, the cache byte-identical, and a prune after it deletes
    /// nothing. An empty list still withdraws everything.
    @Test func aFeedOfNoUsableAdIsRefusedWhole() throws {
        let ads = try AdServer(); defer { ads.stop() }
        let b = ads.base
        ads["/feed.json"] = #"{"ads":[{"id":"a","url":"\#(b)/a.jpg"},{"id":"b","url":"\#(b)/b.jpg"}]}"#
        let device = Device(); defer { device.s.remove() }
        #expect(device.fetch(b + "/feed.json").status == 0)
        let accepted = try Self.snapshot(device.s.cache)

        ads["/feed.json"] = #"{"ads":[{"id":"a"},{"id":"b","url":"ftp://x/b.jpg"},{"id":"c","url":7}]}"#
        let r = device.fetch(b + "/feed.json")
        #expect(r.status == 65, "\(r.stderr)")
        // One error line, after the warning of each skipped ad (a feed refused whole records
        // nothing, so it warns on every run: SPEC §2).
        let lines = r.stderr.split(separator: "\n")
        #expect(lines.filter { $0.hasPrefix("adcache: warning: skipping ad ") }.count == 3, "\(r.stderr)")
        #expect(
            lines.last?.hasPrefix(
                "adcache: error: no ad of the feed \(b)/feed.json can be used (3 skipped; first: ad 'a': ") == true,
            "\(r.stderr)")
        #expect(lines.filter { $0.hasPrefix("adcache: error: ") }.count == 1, "one error: \(r.stderr)")
        #expect(try Self.snapshot(device.s.cache) == accepted, "the cache unchanged")
        #expect(device.run(["prune"]).status == 0)
        #expect(try device.listJSON().map { $0["state"] as? String } == ["ready", "ready"])
        #expect(device.run(["next", "--peek"]).status == 0, "the screens keep showing")

        ads["/feed.json"] = #"{"ads":[]}"#
        #expect(device.fetch(b + "/feed.json").status == 0)
        #expect(try device.listJSON().map { $0["state"] as? String } == ["withdrawn", "withdrawn"])
    }

    /// A VAST feed whose only ad stands under a wrapper that fails for now is refused with 75
    /// (try again later), not 65; nothing is queued.
    @Test func aFeedWhoseOnlyWrapperFailsForNowIsTryAgainLater() throws {
        let ads = try AdServer(); defer { ads.stop() }
        let b = ads.base
        ads["/w.xml"] = VASTTests.wrapper(1, to: b + "/broken.xml", base: b)
        let device = Device(); defer { device.s.remove() }
        let r = device.run(["fetch", "--no-progress", "--retries", "0", b + "/w.xml"])
        #expect(r.status == 75, "\(r.stderr)")
        #expect(r.stderr.contains("no ad of the feed"), "\(r.stderr)")
        #expect(!Disk.exists(device.s.cache + "/index.json"))
        #expect(device.run(["report"]).status == 0)
        #expect(ads.hits("/err1").isEmpty, "a refused answer queues no VAST error")
    }

    // MARK: §2, §4 URLs libcurl would refuse, and redirect loops

    /// An asset URL with port 99999 is skipped at parse time (a warning, the rest goes on), not
    /// failed on every run.
    @Test func aMalformedURLIsSkippedAtParseTime() throws {
        let ads = try AdServer(); defer { ads.stop() }
        let b = ads.base
        ads["/feed.json"] =
            #"{"ads":[{"id":"good","url":"\#(b)/a.jpg"},{"id":"port","url":"http://127.0.0.1:99999/x.jpg"},{"id":"host","url":"http://exa%20mple.com/x.jpg"}]}"#
        let device = Device(); defer { device.s.remove() }
        for _ in 0..<2 {
            let r = device.fetch(b + "/feed.json")
            #expect(r.status == 0, "\(r.stderr)")
            #expect(try device.listJSON().map { $0["id"] as? String } == ["good"])
        }
        let r = device.run(["fetch", "--no-progress", "-v", b + "/feed.json"])
        #expect(r.stderr.contains("skipping ad 'port': its \"url\" is malformed"), "\(r.stderr)")
    }

    /// A redirect loop on an asset is a failure for good (65), retried with the back-off of
    /// one, not every run (version 3: 75 every run, 6 requests each).
    @Test func aRedirectLoopIsAFailureForGood() throws {
        let requests = Locked(0)
        let server = try LoopbackServer { r in
            switch r.path {
            case "/feed.json":
                return .text(200, #"{"ads":[{"id":"loop","url":"/loop.jpg"},{"id":"ok","url":"/ok.jpg"}]}"#)
            case "/loop.jpg":
                requests.update { $0 += 1 }
                return .redirect("/loop.jpg")
            default: return .file(Media.jpeg(), for: r, etag: "\"ok\"")
            }
        }
        defer { server.stop() }
        let device = Device(); defer { device.s.remove() }
        let first = device.fetch(server.url("/feed.json"))
        #expect(first.status == 65, "\(first.stderr)")
        #expect(first.stderr.contains("too many redirects"), "\(first.stderr)")
        #expect(requests.value <= 6, "one transfer: \(requests.value) requests")
        let before = requests.value
        let second = device.fetch(server.url("/feed.json"))
        #expect(second.status == 65, "\(second.stderr)")
        #expect(second.stderr.contains("not retried for"), "\(second.stderr)")
        #expect(requests.value == before, "the back-off of a failure for good")
    }

    // MARK: §10 Bounded effort

    /// A 1 KB root of 5 wrappers whose documents hold 5 wrappers each, 5 levels deep: one
    /// request per distinct document (version 3 made 3,907).
    @Test func aWrapperFanOutCostsOneRequestPerDocument() throws {
        let ads = try AdServer(); defer { ads.stop() }
        let b = ads.base
        func fan(_ uri: String) -> String {
            let one = """
                <Ad><Wrapper allowMultipleAds="true"><AdSystem>w</AdSystem><Impression>\(b)/wimp</Impression>
                <VASTAdTagURI>\(uri)</VASTAdTagURI></Wrapper></Ad>
                """
            return "<VAST version=\"4.0\">" + String(repeating: one, count: 5) + "</VAST>"
        }
        ads["/root.xml"] = fan(b + "/l2.xml")
        for level in 2...5 { ads["/l\(level).xml"] = fan(b + (level == 5 ? "/inline.xml" : "/l\(level + 1).xml")) }
        ads["/inline.xml"] = VASTTests.inline(b)
        let device = Device(); defer { device.s.remove() }
        let r = device.fetch(b + "/root.xml")
        #expect(r.status == 0, "\(r.stderr.prefix(2000))")
        #expect(try device.listJSON().map { $0["id"] as? String } == ["deep"])
        let documents = ads.server.log.map(\.path).filter { $0.hasSuffix(".xml") }
        #expect(documents.count == 6, "1 + 5 distinct documents: \(documents.count)")
    }

    /// A run reads at most 64 wrapped documents: a wrapper beyond them is error 302 for the
    /// ads under it, and the rest of the feed goes on.
    @Test func aRunReadsAtMost64WrappedDocuments() throws {
        let ads = try AdServer(); defer { ads.stop() }
        let b = ads.base
        var root = "<VAST version=\"4.0\">"
        for i in 1...70 {
            root += """
                <Ad id="w\(i)"><Wrapper><AdSystem>w</AdSystem><Error>\(b)/err\(i)?c=[ERRORCODE]</Error>
                <VASTAdTagURI>\(b)/in\(i).xml</VASTAdTagURI></Wrapper></Ad>
                """
            ads["/in\(i).xml"] = VASTTests.inline(b, id: "a\(i)").replacingOccurrences(of: "/a\(i).mp4", with: "/m.mp4")
        }
        ads["/root.xml"] = root + "</VAST>"
        let device = Device(); defer { device.s.remove() }
        let r = device.fetch(b + "/root.xml")
        #expect(r.status == 0, "\(r.stderr)")
        #expect(try device.listJSON().count == 64)
        #expect(ads.hits("/in").count == 64, "no request past the 64th document")
        #expect(r.stderr.contains("more than 64 wrapped documents in one run (error 302)"), "\(r.stderr)")
        #expect(device.run(["report"]).status == 0)
        #expect(ads.hits("/err").count == 6 && ads.hits("/err").allSatisfy { $0.hasSuffix("?c=302") })
    }

    /// At most 100 ads are taken from one wrapped document, with one warning.
    @Test func atMost100AdsFromOneWrappedDocument() throws {
        let ads = try AdServer(); defer { ads.stop() }
        let b = ads.base
        let one = VASTTests.inline(b, id: "ID").replacingOccurrences(of: "<VAST version=\"4.0\">", with: "")
            .replacingOccurrences(of: "</VAST>", with: "").replacingOccurrences(of: "/ID.mp4", with: "/m.mp4")
        ads["/many.xml"] =
            "<VAST version=\"4.0\">"
            + (1...120).map { one.replacingOccurrences(of: "\"ID\"", with: "\"a\($0)\"") }.joined() + "</VAST>"
        ads["/feed.json"] = #"{"ads":[{"id":"tag","vast":"\#(b)/many.xml"}]}"#
        let device = Device(); defer { device.s.remove() }
        let r = device.fetch(b + "/feed.json")
        #expect(r.status == 0, "\(r.stderr)")
        #expect(try device.listJSON().count == 100)
        #expect(r.stderr.contains("only its first 100 ads are taken (it has 120)"), "\(r.stderr)")
    }

    /// Wrappers that each carry trackers of their own (so no two chains are the same), 30
    /// to a document, 3 levels deep: 27,000 chains to the InLine by version 3's count. The run
    /// follows at most 6,400, says so in one warning (and one for the repeated ad), and makes
    /// one request per distinct document.
    @Test func aHostileFanOutIsBoundedInWorkAndWords() throws {
        let ads = try AdServer(); defer { ads.stop() }
        let b = ads.base
        func fan(_ uri: String, _ level: Int) -> String {
            "<VAST version=\"4.0\">"
                + (0..<30).map { i in
                    """
                    <Ad><Wrapper allowMultipleAds="true"><AdSystem>w</AdSystem><Impression>\(b)/w\(level)-\(i)</Impression>
                    <VASTAdTagURI>\(uri)</VASTAdTagURI></Wrapper></Ad>
                    """
                }.joined() + "</VAST>"
        }
        ads["/root.xml"] = fan(b + "/l2.xml", 1)
        for level in 2...3 {
            ads["/l\(level).xml"] = fan(b + (level == 3 ? "/inline.xml" : "/l\(level + 1).xml"), level)
        }
        ads["/inline.xml"] = VASTTests.inline(b)
        let device = Device(); defer { device.s.remove() }
        let r = device.run(["fetch", "--no-progress", "--deadline", "120", b + "/root.xml"])
        #expect(r.status == 0, "\(r.stderr.prefix(2000))")
        #expect(try device.listJSON().map { $0["id"] as? String } == ["deep"])
        #expect(ads.server.log.filter { $0.path.hasSuffix(".xml") }.count == 4)
        #expect(r.stderr.contains("wrapper chains past the run's 6400 were not followed"), "\(r.stderr.prefix(2000))")
        #expect(r.stderr.split(separator: "\n").count < 10, "a few lines, not one a chain: \(r.stderr.count) bytes")
    }

    /// SIGINT while the feed's VAST documents are read: nothing changes — the ads a tag gave
    /// before stay ready, not withdrawn for want of the documents not read yet — and the
    /// signal's exit status wins (SPEC §5, §6).
    @Test func aSignalWhileVASTIsReadChangesNothing() throws {
        let slow = Locked(false)
        let base = Locked("")
        let server = try LoopbackServer { r in
            let b = base.value
            switch r.path {
            case "/feed.json":
                return .text(200, #"{"ads":[{"id":"good","url":"\#(b)/g.jpg"},{"id":"tag","vast":"\#(b)/v.xml"}]}"#)
            case "/g.jpg": return .file(Media.jpeg(), for: r, etag: "\"g\"")
            case "/v.xml":
                var response = LoopbackServer.Response.text(200, VASTTests.inline(b), contentType: "application/xml")
                if slow.value { response.delay = 4 }
                return response
            default: return .file(Media.mp4(), for: r)
            }
        }
        defer { server.stop() }
        base.value = server.url("")
        let dir = TempDir(); defer { dir.remove() }
        let cache = dir.path + "/cache"
        try #require(Adcache.run(["--cache-dir", cache, "fetch", server.url("/feed.json")]).status == 0)
        let before = try Self.snapshot(cache)
        slow.value = true
        let p = Process()
        p.executableURL = URL(fileURLWithPath: Adcache.binary)
        p.arguments = ["--cache-dir", cache, "fetch", "--no-progress", server.url("/feed.json")]
        p.standardError = FileHandle.nullDevice
        p.standardOutput = FileHandle.nullDevice
        try p.run()
        usleep(1_000_000)   // the feed is read; its document does not come for four seconds
        kill(p.processIdentifier, SIGINT)
        p.waitUntilExit()
        #expect(p.terminationStatus == 130)
        #expect(try Self.snapshot(cache) == before, "the cache unchanged: the tag's ad is not withdrawn")
    }

    // MARK: §10 Wrapped documents stay fresh

    /// A root wrapper that answers 304 still brings a changed InLine: the wrapped document is
    /// asked again, conditionally, on every run that revalidates the feed.
    @Test func aRootThatAnswers304StillBringsAChangedInLine() throws {
        let ads = try AdServer(); defer { ads.stop() }
        ads.withValidators = true
        let b = ads.base
        ads["/w.xml"] = VASTTests.wrapper(1, to: b + "/inline.xml", base: b)
        ads["/inline.xml"] = VASTTests.inline(b, id: "first")
        let device = Device(); defer { device.s.remove() }
        #expect(device.fetch(b + "/w.xml").status == 0)
        #expect(try device.listJSON().map { $0["id"] as? String } == ["first"])

        ads["/inline.xml"] = VASTTests.inline(b, id: "second")
        let r = device.fetch(b + "/w.xml")
        #expect(r.status == 0, "\(r.stderr)")
        #expect(ads.server.log.filter { $0.path == "/w.xml" }.count == 2)
        let shown = try device.listJSON().filter { $0["state"] as? String != "withdrawn" }
        #expect(shown.map { $0["id"] as? String } == ["second"], "\(shown)")
        // Unchanged: both answer 304, and nothing is downloaded again.
        let before = ads.server.log.count
        #expect(device.fetch(b + "/w.xml").status == 0)
        let again = ads.server.log.dropFirst(before).map(\.path)
        #expect(again == ["/w.xml", "/inline.xml"] || again == ["/w.xml", "/inline.xml", "/second.mp4"], "\(again)")
    }

    /// A wrapped document still fresh by its own `Cache-Control` is not asked again, except
    /// under `--revalidate`.
    @Test func aFreshWrappedDocumentIsNotAskedAgain() throws {
        let log = Locked([String]())
        let server = try LoopbackServer { r in
            log.update { $0.append(r.path) }
            let b = "http://127.0.0.1:\(r.headers["host"]?.split(separator: ":").last ?? "")"
            switch r.path {
            case "/w.xml": return .text(200, VASTTests.wrapper(1, to: b + "/inline.xml", base: b))
            case "/inline.xml":
                var response = LoopbackServer.Response.text(200, VASTTests.inline(b), contentType: "application/xml")
                response.headers.append(("Cache-Control", "max-age=3600"))
                return response
            default: return .file(Media.mp4(), for: r, etag: "\"m\"")
            }
        }
        defer { server.stop() }
        let device = Device(); defer { device.s.remove() }
        for _ in 0..<2 { #expect(device.fetch(server.url("/w.xml")).status == 0) }
        #expect(log.value.filter { $0 == "/inline.xml" }.count == 1, "\(log.value)")
        #expect(device.run(["fetch", "--no-progress", "--revalidate", server.url("/w.xml")]).status == 0)
        #expect(log.value.filter { $0 == "/inline.xml" }.count == 2, "\(log.value)")
        #expect(try device.listJSON().map { $0["id"] as? String } == ["deep"])
    }

    // MARK: §10 The next rendition

    /// When the chosen media file answers 404, the next rendition is tried in the same run;
    /// error 401 is queued once, and later runs start from the rendition that works.
    @Test func a404RenditionFallsBackToTheNext() throws {
        let ads = try AdServer(); defer { ads.stop() }
        let b = ads.base
        let files = """
            <MediaFile delivery="progressive" type="video/mp4" width="1920" height="1080">\(b)/missing.mp4</MediaFile>
            <MediaFile delivery="progressive" type="video/mp4" width="1280" height="720">\(b)/small.mp4</MediaFile>
            """
        ads["/tag.xml"] = VASTTests.linear(files, error: "<Error>\(b)/err?code=[ERRORCODE]</Error>")
            .replacingOccurrences(of: "IMP/", with: b + "/")
        let device = Device(); defer { device.s.remove() }
        let r = device.fetch(b + "/tag.xml")
        #expect(r.status == 0, "an ad that ends ready is a success: \(r.stderr)")
        let list = try device.listJSON()
        #expect(list.first?["url"] as? String == b + "/small.mp4", "\(list)")
        #expect(list.first?["state"] as? String == "ready")
        #expect(device.run(["report"]).status == 0)
        #expect(ads.hits("/err") == ["/err?code=401"], "\(ads.hits("/err"))")

        #expect(device.fetch(b + "/tag.xml").status == 0)
        #expect(device.run(["report"]).status == 0)
        #expect(ads.hits("/missing.mp4").count == 1, "later runs start from the rendition that works")
        #expect(ads.hits("/err").count == 1, "each failure's error queued once")
    }

    /// A later run starts from the rendition that worked; when that one fails in turn, the
    /// next is tried — never the one that just failed again.
    @Test func aRenditionThatFailsLaterGivesWayToTheNext() throws {
        let ads = try AdServer(); defer { ads.stop() }
        let b = ads.base
        let files = """
            <MediaFile delivery="progressive" type="video/mp4" width="1920" height="1080">\(b)/missing.mp4</MediaFile>
            <MediaFile delivery="progressive" type="video/mp4" width="1280" height="720">\(b)/mid.mp4</MediaFile>
            <MediaFile delivery="progressive" type="video/mp4" width="640" height="360">\(b)/low.mp4</MediaFile>
            """
        ads["/tag.xml"] = VASTTests.linear(files, error: "<Error>\(b)/err?code=[ERRORCODE]</Error>")
            .replacingOccurrences(of: "IMP/", with: b + "/")
        let device = Device(); defer { device.s.remove() }
        #expect(device.fetch(b + "/tag.xml").status == 0)
        #expect(try device.listJSON().first?["url"] as? String == b + "/mid.mp4")
        // mid.mp4 now serves a page, not a video.
        ads.serve("/mid.mp4", bytes: Array("<html>gone</html>".utf8))
        let r = device.fetch(b + "/tag.xml")
        #expect(r.status == 0, "\(r.stderr)")
        #expect(try device.listJSON().first?["url"] as? String == b + "/low.mp4")
        #expect(ads.hits("/missing.mp4").count == 1, "the rendition that failed first is not asked again")
        #expect(ads.hits("/mid.mp4").count == 2, "once a run")
        #expect(device.run(["report"]).status == 0)
        #expect(ads.hits("/err").sorted() == ["/err?code=401", "/err?code=405"], "\(ads.hits("/err"))")
    }

    /// Every rendition fails for good: each error once, and later runs wait out the back-off
    /// on the last one tried, asking nothing.
    @Test func whenEveryRenditionFailsEachErrorIsQueuedOnce() throws {
        let ads = try AdServer(); defer { ads.stop() }
        let b = ads.base
        let files = """
            <MediaFile delivery="progressive" type="video/mp4" width="1920" height="1080">\(b)/missing1.mp4</MediaFile>
            <MediaFile delivery="progressive" type="video/mp4" width="1280" height="720">\(b)/missing2.mp4</MediaFile>
            """
        ads["/tag.xml"] = VASTTests.linear(files, error: "<Error>\(b)/err?code=[ERRORCODE]</Error>")
            .replacingOccurrences(of: "IMP/", with: b + "/")
        let device = Device(); defer { device.s.remove() }
        for _ in 0..<3 {
            #expect(device.fetch(b + "/tag.xml").status == 65)
            #expect(device.run(["report"]).status == 0)
        }
        #expect(ads.hits("/missing1.mp4").count == 1 && ads.hits("/missing2.mp4").count == 1)
        #expect(ads.hits("/err") == ["/err?code=401", "/err?code=401"], "\(ads.hits("/err"))")
    }

    // MARK: §10 Bounded numbers

    /// Hostile numbers in a third-party VAST tag never stop a fetch: the JSON feed's other ad
    /// is committed, whatever the document says.
    @Test(arguments: [
        "<Duration>9999999999999999:00:00</Duration>",
        "<Duration>2562047788015215:30:07</Duration>",
        #"<Duration>00:00:10</Duration><MediaFiles><MediaFile delivery="progressive" type="video/mp4" width="3037000500" height="3037000500">B/big.mp4</MediaFile></MediaFiles>"#,
        #"<Duration>00:00:10</Duration><MediaFiles><MediaFile delivery="progressive" type="video/mp4" width="1920" height="1080" bitrate="9223372036854775807">B/b1.mp4</MediaFile><MediaFile delivery="progressive" type="video/mp4" width="1920" height="1080" bitrate="-9223372036854775808">B/b2.mp4</MediaFile></MediaFiles>"#,
        #"<Duration>00:00:10</Duration><MediaFiles><MediaFile delivery="progressive" type="video/mp4" width="1920" height="1080" fileSize="9223372036854775807">B/f.mp4</MediaFile></MediaFiles>"#,
    ])
    func hostileVASTNumbersNeverStopAFetch(_ linear: String) throws {
        let ads = try AdServer(); defer { ads.stop() }
        let b = ads.base
        var body = linear.replacingOccurrences(of: "B/", with: b + "/")
        if !body.contains("<MediaFiles>") {
            body +=
                #"<MediaFiles><MediaFile delivery="progressive" type="video/mp4" width="1920" height="1080">\#(b)/v.mp4</MediaFile></MediaFiles>"#
        }
        ads["/hostile.xml"] = """
            <VAST version="4.1"><Ad id="h" sequence="9223372036854775807"><InLine><AdSystem>t</AdSystem><AdTitle>t</AdTitle>
            <Expires>1e300</Expires><Impression>\(b)/imp</Impression><Creatives><Creative>
            <Linear skipoffset="1e308%">\(body)</Linear></Creative></Creatives></InLine></Ad></VAST>
            """
        ads["/feed.json"] = #"{"ads":[{"id":"good","url":"\#(b)/a.jpg"},{"id":"tag","vast":"\#(b)/hostile.xml"}]}"#
        let device = Device(); defer { device.s.remove() }
        let r = device.fetch(b + "/feed.json")
        #expect([0, 65].contains(r.status), "never a crash: \(r.status) \(r.stderr)")
        let list = try device.listJSON()
        #expect(list.first { $0["id"] as? String == "good" }?["state"] as? String == "ready", "\(list)")
        for ad in list {
            if let expires = ad["expires"] as? String { #expect(!expires.hasPrefix("+"), "\(expires)") }
        }
        // Every later command reads what was committed.
        let again = device.run(["list"])
        #expect(again.status == 0 && !again.stderr.contains("dropped"), "\(again.stderr)")
    }
}
