import Foundation
import TestSupport
import Testing

@testable import AdCacheKit

/// `fetch` against a real HTTP server on 127.0.0.1.
final class FetchHarness: @unchecked Sendable {
    let dir = TempDir()
    let store: CacheStore
    var files: [String: [UInt8]] = [:]
    var server: LoopbackServer!
    var warnings: [String] = []
    private let lock = NSLock()
    /// Overrides for a path: return nil to fall through to the static files.
    var override: (@Sendable (LoopbackServer.Request) -> LoopbackServer.Response?)?

    init() throws {
        store = CacheStore(directory: dir.path + "/cache")
        server = try LoopbackServer { [weak self] request in
            guard let self else { return .text(503, "gone") }
            if let o = self.currentOverride(), let r = o(request) { return r }
            guard let body = self.file(request.path) else { return .text(404, "not found") }
            return .file(body, for: request, etag: "\"\(Media.sha256(body).prefix(12))\"")
        }
    }

    func currentOverride() -> (@Sendable (LoopbackServer.Request) -> LoopbackServer.Response?)? {
        lock.lock(); defer { lock.unlock() }
        return override
    }

    func setOverride(_ o: (@Sendable (LoopbackServer.Request) -> LoopbackServer.Response?)?) {
        lock.lock(); override = o; lock.unlock()
    }

    func file(_ path: String) -> [UInt8]? {
        lock.lock(); defer { lock.unlock() }
        return files[path]
    }

    func put(_ path: String, _ bytes: [UInt8]) {
        lock.lock(); files[path] = bytes; lock.unlock()
    }

    func feed(_ json: String, at path: String = "/feed.json") {
        put(path, Array(json.utf8))
    }

    deinit {
        server.stop()
        dir.remove()
    }

    /// The facade on this cache.
    var cache: AdCache { AdCache(.init(directory: store.directory)) }

    /// A fetch, its device clock reading `at` when given.
    func fetch(at: Double? = nil, _ configure: (inout FetchOptions) -> Void = { _ in }) throws -> FetchReport {
        var o = FetchOptions()
        o.feed = server.url("/feed.json")
        o.transfer.settings.retryBaseDelay = 0.05
        configure(&o)
        let fetcher = Fetcher(
            store: store, options: o,
            warn: { [weak self] w in
                self?.lock.lock(); self?.warnings.append(w.message); self?.lock.unlock()
            }, clock: at.map { at in .device { Date(timeIntervalSince1970: at) } } ?? .system)
        return try fetcher.run()
    }

    func index() throws -> CacheIndex { try store.load(warn: { _ in }) }

    func assetBodyRequests(_ path: String) -> Int {
        server.requests(to: path).count
    }

    /// Bytes of the file an ad points at.
    func cachedBytes(_ id: String) throws -> [UInt8]? {
        guard let r = try index().ads.first(where: { $0.id == id }), let f = r.file else { return nil }
        return try FileIO.read(store.assetPath(f))
    }

    var snapshot: [String: Data] {
        var out: [String: Data] = [:]
        let root = store.directory
        guard let e = FileManager.default.enumerator(atPath: root) else { return out }
        while let p = e.nextObject() as? String {
            // The locks, and the run's record for `status` (SPEC §3: every run writes it).
            if p.hasSuffix(".lock") || p == "fetch.last" { continue }
            if let d = FileManager.default.contents(atPath: root + "/" + p) { out[p] = d }
        }
        return out
    }
}

@Suite struct FetcherTests {
    @Test func downloadsValidatesAndCommits() throws {
        let h = try FetchHarness()
        let jpeg = Media.jpeg(5000), mp4 = Media.mp4(9000)
        h.put("/a.jpg", jpeg)
        h.put("/v/clip", mp4)
        h.feed(
            #"{"version":1,"ads":[{"id":"a","url":"a.jpg","sha256":"\#(Media.sha256(jpeg))"},{"id":"v","url":"/v/clip"}]}"#
        )
        let report = try h.fetch()
        #expect(report.summary == "2 ads: 2 ready (2 downloaded)")
        #expect(report.isComplete)
        #expect(try h.cachedBytes("a") == jpeg)
        #expect(try h.cachedBytes("v") == mp4)
        let v = try #require(try h.index().ads.first { $0.id == "v" })
        #expect(v.type == .video)   // from the first bytes
        // <sha256 of the URL>-<version>.<ext>: a new version never replaces a committed file.
        let hash = try SHA256Hasher.hex(h.server.url("/v/clip"))
        #expect(v.file.map { $0.hasPrefix(hash + "-") && $0.hasSuffix(".mp4") && AssetName.isValid($0) } == true)
        #expect(v.etag != nil && v.state == .ready)
        #expect(try h.index().feed?.url == h.server.url("/feed.json"))
        #expect(Disk.list(h.store.partialDirectory).isEmpty)
    }

    @Test func secondFetchRevalidatesAndTransfersNoBodies() throws {
        let h = try FetchHarness()
        h.put("/a.jpg", Media.jpeg())
        h.put("/b.png", Media.png())
        let sha = Media.sha256(Media.png())
        h.feed(#"{"ads":[{"id":"a","url":"a.jpg"},{"id":"b","url":"b.png","sha256":"\#(sha)"}]}"#)
        _ = try h.fetch()
        let report = try h.fetch()
        #expect(report.summary == "2 ads: 2 ready (2 unchanged)")
        #expect(report.feedStatus == "unchanged")
        // The feed and a.jpg were asked conditionally and answered 304; b.png not asked at all.
        let feedRequests = h.server.requests(to: "/feed.json")
        #expect(feedRequests.count == 2)
        #expect(feedRequests[1].header("If-None-Match") != nil)
        let a = h.server.requests(to: "/a.jpg")
        #expect(a.count == 2)
        #expect(a[1].header("If-None-Match") != nil)
        #expect(h.server.requests(to: "/b.png").count == 1)
    }

    @Test func changedAssetIsDownloadedAgain() throws {
        let h = try FetchHarness()
        h.put("/a.jpg", Media.jpeg(3000, seed: 1))
        h.feed(#"[{"id":"a","url":"a.jpg"}]"#)
        _ = try h.fetch()
        h.put("/a.jpg", Media.jpeg(4000, seed: 9))
        let report = try h.fetch()
        #expect(report.ads[0].outcome == .downloaded)
        #expect(try h.cachedBytes("a") == Media.jpeg(4000, seed: 9))
        // The superseded version stays (a launch may have printed it, SPEC §6) until a prune
        // past the grace of ten minutes.
        let files = Disk.list(h.store.assetsDirectory)
        #expect(files.count == 2)
        _ = try h.cache.prune()
        #expect(Disk.list(h.store.assetsDirectory).count == 2, "within the grace")
        let current = try #require(try h.index().ads[0].file)
        for name in files where name != current { PrunerTests.age(h.store.assetPath(name), by: 601) }
        _ = try h.cache.prune()
        #expect(Disk.list(h.store.assetsDirectory) == [current])
    }

    @Test func showsFollowTheIDAndTheFeedIsAuthoritative() throws {
        let h = try FetchHarness()
        h.put("/a.jpg", Media.jpeg())
        h.put("/b.jpg", Media.jpeg(seed: 7))
        h.feed(#"[{"id":"a","url":"a.jpg","maxShows":5},{"id":"b","url":"b.jpg"}]"#)
        _ = try h.fetch()
        var o = NextOptions(); o.type = nil
        _ = try h.cache.shown(o)   // a (id order)
        _ = try h.cache.shown(o)   // b
        h.put("/a2.jpg", Media.jpeg(seed: 3))
        h.feed(#"[{"id":"a","url":"a2.jpg","maxShows":5}]"#)
        _ = try h.fetch()
        let index = try h.index()
        let a = try #require(index.ads.first { $0.id == "a" })
        #expect(a.shows == 1 && a.url == h.server.url("/a2.jpg") && a.state == .ready)
        #expect(index.ads.first { $0.id == "b" }?.state == .withdrawn)
        for _ in 0..<3 { #expect(try h.cache.shown(o)?.id == "a") }
        // The old file of a stays for the grace (dated now), and b's until prune.
        #expect(Disk.list(h.store.assetsDirectory).count == 3)
    }

    @Test func failedFeedChangesNothing() throws {
        let h = try FetchHarness()
        h.put("/a.jpg", Media.jpeg())
        h.feed(#"[{"id":"a","url":"a.jpg"}]"#)
        _ = try h.fetch()
        let before = h.snapshot
        for bad in [
            LoopbackServer.Response.text(500, "oops"), .text(404, "gone"),
            .text(200, "<html>portal</html>", contentType: "text/html"),
            .text(200, #"{"nothing": "here"}"#),
        ] {
            h.setOverride { $0.path == "/feed.json" ? bad : nil }
            do {
                _ = try h.fetch { $0.transfer.retries = 0 }
                Issue.record("fetch should fail for \(bad.status)")
            } catch let e as AdCacheError {
                #expect(e.caseName == (bad.status == 200 ? "feedInvalid" : "feedUnreachable"), "\(e)")
            }
            #expect(h.snapshot == before)
        }
    }

    @Test func unreachableFeedIs69() throws {
        let h = try FetchHarness()
        h.server.stop()
        do {
            _ = try h.fetch { $0.transfer.retries = 0 }
            Issue.record("expected failure")
        } catch let e as AdCacheError {
            #expect(e.caseName == "feedUnreachable")
            #expect(e.message.contains("could not connect"))
        }
    }

    @Test func htmlServedAsJPEGIsRejected() throws {
        let h = try FetchHarness()
        h.setOverride {
            $0.path == "/a.jpg"
                ? LoopbackServer.Response(status: 200, headers: [("Content-Type", "image/jpeg")], body: Media.html)
                : nil
        }
        h.put("/b.jpg", Media.jpeg())
        h.feed(#"[{"id":"a","url":"a.jpg"},{"id":"b","url":"b.jpg"}]"#)
        let report = try h.fetch()
        #expect(!report.isComplete)
        #expect(report.summary == "2 ads: 1 ready (1 downloaded), 1 failed")
        #expect(report.ads[0].error?.contains("not an image or video") == true)
        let a = try #require(try h.index().ads.first { $0.id == "a" })
        #expect(a.state == .failed && a.file == nil)
        #expect(Disk.list(h.store.partialDirectory).isEmpty)
        #expect(Disk.list(h.store.assetsDirectory).count == 1)
    }

    @Test func typeFromContentTypeWhenTheFeedAndURLDoNotSay() throws {
        let h = try FetchHarness()
        h.setOverride { r in
            switch r.path {
            case "/labelled": return .file(Media.mp4(), for: r, contentType: "video/mp4")
            case "/mislabelled": return .file(Media.jpeg(), for: r, contentType: "video/mp4")
            case "/unlabelled": return .file(Media.png(), for: r)
            default: return nil
            }
        }
        h.feed(#"[{"id":"l","url":"labelled"},{"id":"m","url":"mislabelled"},{"id":"u","url":"unlabelled"}]"#)
        let report = try h.fetch()
        #expect(report.ads.map(\.outcome) == [.downloaded, .failed, .downloaded])
        #expect(report.ads[1].error?.contains("Content-Type says video") == true)
        #expect(try h.index().ads.map(\.type) == [.video, nil, .image])
    }

    @Test func typeMismatchAndSHAMismatchAreRejected() throws {
        let h = try FetchHarness()
        h.put("/a.jpg", Media.jpeg())
        h.put("/b.jpg", Media.jpeg(seed: 4))
        h.feed(
            #"[{"id":"a","url":"a.jpg","type":"video"},{"id":"b","url":"b.jpg","sha256":"\#(String(repeating: "0", count: 64))"}]"#
        )
        let report = try h.fetch()
        #expect(report.ads.map(\.outcome) == [.failed, .failed])
        #expect(report.ads[0].error?.contains("the ad says video") == true)
        #expect(report.ads[1].error?.contains("SHA-256") == true)
        #expect(Disk.list(h.store.assetsDirectory).isEmpty)
    }

    @Test func sizeCapWithAndWithoutContentLength() throws {
        let h = try FetchHarness()
        h.put("/big.jpg", Media.jpeg(50_000))
        h.setOverride { r in
            guard r.path == "/chunked.jpg" else { return nil }
            var resp = LoopbackServer.Response(status: 200, body: Media.jpeg(50_000))
            resp.noContentLength = true
            return resp
        }
        h.put("/small.jpg", Media.jpeg(1000))
        h.feed(#"[{"id":"big","url":"big.jpg"},{"id":"chunked","url":"chunked.jpg"},{"id":"small","url":"small.jpg"}]"#)
        let report = try h.fetch { $0.maxAssetSize = 10_000 }
        #expect(report.ads.map(\.outcome) == [.failed, .failed, .downloaded])
        #expect(report.ads[0].error?.contains("larger than the limit") == true)
        #expect(report.ads[1].error?.contains("larger than the limit") == true)
        #expect(Disk.list(h.store.partialDirectory).isEmpty)
        // Chunked, over the cap, with validators: still never kept in partial/ (outside
        // --max-size's reach), and not asked for again before its back-off.
        h.setOverride { r in
            guard r.path == "/chunked.jpg" else { return nil }
            var resp = LoopbackServer.Response(status: 200, headers: [("ETag", "\"c\"")], body: Media.jpeg(50_000))
            resp.noContentLength = true
            return resp
        }
        _ = try h.fetch { $0.maxAssetSize = 10_000 }
        #expect(Disk.list(h.store.partialDirectory).isEmpty)
    }

    /// SPEC v2: an asset that failed for good is not downloaded again on every run (a wrong
    /// sha256 cost its full size every 30 minutes), but after 30 minutes, doubling to a day,
    /// conditionally; a change to the ad's url, sha256 or type retries it at once.
    /// A file restored from a backup (same bytes, new mtime) is hashed again, not downloaded.
    @Test func aTouchedFileIsRehashedNotDownloaded() throws {
        let h = try FetchHarness()
        h.put("/a.jpg", Media.jpeg(20_000))
        h.feed(#"[{"id":"a","url":"a.jpg"}]"#)
        _ = try h.fetch()
        let file = try #require(try h.index().ads[0].file)
        var times = [timespec(tv_sec: 1_700_000_000, tv_nsec: 0), timespec(tv_sec: 1_700_000_000, tv_nsec: 0)]
        #expect(utimensat(AT_FDCWD, h.store.assetPath(file), &times, 0) == 0)
        // Still shown (SPEC §4 asks only for the recorded size: cp -r, tar without times).
        #expect(try h.cache.list().first?.state == .ready)
        if case .show(let ad) = try h.cache.next(NextOptions(peek: true)) {
            #expect(ad.path == h.store.assetPath(file))
        } else {
            Issue.record("a touched file is still shown")
        }
        let again = try h.fetch()
        #expect(again.ads[0].outcome == .unchanged)
        #expect(h.server.requests(to: "/a.jpg").filter { $0.header("If-None-Match") == nil }.count == 1)
        #expect(try h.cache.list()[0].state == .ready)
    }

    /// After a 304 for the feed, a sniffed type is not taken for the feed's: a server may
    /// swap an image for a video at one URL (version 1 refused it).
    @Test func aSniffedTypeIsNotMistakenForADeclaredOne() throws {
        let h = try FetchHarness()
        h.put("/clip", Media.jpeg())
        h.feed(#"[{"id":"a","url":"clip"}]"#)
        _ = try h.fetch()
        #expect(try h.index().ads[0].type == .image)
        h.put("/clip", Media.mp4())   // the feed is unchanged (304), the asset is not
        let report = try h.fetch()
        #expect(report.feedStatus == "unchanged")
        #expect(report.ads[0].outcome == .downloaded, "\(report.ads[0])")
        #expect(try h.index().ads[0].type == .video)
    }

    /// SPEC v2 §2: the feed's warnings are said when its content is new, not on every run
    /// that gets the same bytes from a server without validators (cron mailed them).
    @Test func feedWarningsOnlyWhenTheFeedChanged() throws {
        let h = try FetchHarness()
        h.put("/a.jpg", Media.jpeg())
        let feed = #"[{"id":"a","url":"a.jpg"},{"id":"bad","url":"ftp://x/y.jpg"}]"#
        h.setOverride { r in r.path == "/feed.json" ? .text(200, feed) : nil }   // no ETag, no Last-Modified
        func warned(_ configure: (inout FetchOptions) -> Void = { _ in }) throws -> [String] {
            h.warnings = []
            let report = try h.fetch(configure)
            #expect(report.warnings.count == 1, "the report always lists them")
            return h.warnings
        }
        #expect(try warned().count == 1)
        #expect(try warned().isEmpty, "same bytes: said once already")
        #expect(try warned { $0.warnAlways = true }.count == 1, "-v says them always")
        h.setOverride { r in r.path == "/feed.json" ? .text(200, feed + " ") : nil }
        #expect(try warned().count == 1, "new bytes")
    }

    /// SPEC v2 §4: what the server marks fresh is not asked for again until it goes stale;
    /// an unchanged run then costs no request at all. --revalidate asks anyway.
    @Test func freshAnswersAreNotAskedForAgain() throws {
        let h = try FetchHarness()
        let jpeg = Media.jpeg()
        let cacheControl = Flag2(value: "max-age=3600")
        h.setOverride { r in
            var resp: LoopbackServer.Response
            switch r.path {
            case "/feed.json":
                resp = .file(Array(#"[{"id":"a","url":"a.jpg"},{"id":"b","url":"b.jpg"}]"#.utf8), for: r, etag: "\"f\"")
            case "/a.jpg", "/b.jpg": resp = .file(jpeg, for: r, etag: "\"j\"")
            default: return nil
            }
            resp.headers.append(("Cache-Control", cacheControl.value))
            return resp
        }
        _ = try h.fetch()
        #expect(h.server.log.count == 3)
        let quiet = try h.fetch()
        #expect(quiet.ads.map(\.outcome) == [.unchanged, .unchanged])
        #expect(h.server.log.count == 3, "fresh: no request at all")
        // An hour later, stale: conditional requests (304s).
        _ = try h.fetch(at: Date().timeIntervalSince1970 + 3700)
        #expect(h.server.log.count == 6)
        #expect(h.server.log.suffix(3).allSatisfy { $0.header("If-None-Match") != nil })
        _ = try h.fetch { $0.revalidate = true }
        #expect(h.server.log.count == 9, "--revalidate asks for everything")
        // no-cache: stale at once.
        cacheControl.value = "no-cache, max-age=3600"
        _ = try h.fetch { $0.revalidate = true }
        _ = try h.fetch()
        #expect(h.server.log.count == 15)
        #expect(Freshness.until(["cache-control": "max-age=0"], receivedAt: 0) { _ in nil } == nil)
        // A private cache: s-maxage is for shared ones (RFC 9111 §5.2.2.10); Age counts.
        #expect(
            Freshness.until(["cache-control": "s-maxage=600, max-age=10", "age": "20"], receivedAt: 0) { _ in nil }
                == nil)
        #expect(Freshness.until(["cache-control": "s-maxage=600"], receivedAt: 0) { _ in nil } == nil)
        #expect(Freshness.until(["cache-control": "max-age=60", "age": "20"], receivedAt: 0) { _ in nil } == 40)
        #expect(Freshness.until(["expires": "x", "date": "y"], receivedAt: 0) { $0 == "x" ? 100 : 40 } == 60)
        #expect(Freshness.until([:], receivedAt: 0) { _ in 1 } == nil, "no heuristic freshness")
    }

    @Test func anAssetThatFailedForGoodBacksOff() throws {
        let h = try FetchHarness()
        let body = Media.jpeg(30_000)
        h.setOverride { r in r.path == "/a.jpg" ? .file(body, for: r, etag: "\"a1\"") : nil }
        let wrong = String(repeating: "ab", count: 32)
        h.feed(#"[{"id":"a","url":"a.jpg","sha256":"\#(wrong)"}]"#)
        let t0 = 1_900_000_000.0
        let first = try h.fetch(at: t0)
        #expect(first.ads[0].outcome == .failed && !first.ads[0].transient)
        #expect(first.status == .failedForGood)
        #expect(h.server.requests(to: "/a.jpg").count == 1)
        // Ten minutes later: no request at all, still failed for good.
        let waiting = try h.fetch(at: t0 + 600)
        #expect(waiting.ads[0].outcome == .failed && !waiting.ads[0].transient)
        #expect(waiting.ads[0].error?.hasSuffix("(not retried for 20 minutes)") == true, "\(waiting.ads[0])")
        #expect(h.server.requests(to: "/a.jpg").count == 1)
        // After 30 minutes: asked again, with the failed version's ETag; a 304 costs no body.
        let retried = try h.fetch(at: t0 + 1801)
        #expect(retried.ads[0].outcome == .failed)
        let ask = try #require(h.server.requests(to: "/a.jpg").last)
        #expect(h.server.requests(to: "/a.jpg").count == 2)
        #expect(ask.header("If-None-Match") == "\"a1\"")
        #expect(retried.ads[0].error?.contains("SHA-256") == true, "the same bad version, told by a 304")
        // The back-off doubled: 59 minutes on, still waiting.
        _ = try h.fetch(at: t0 + 1801 + 3540)
        #expect(h.server.requests(to: "/a.jpg").count == 2)
        // --revalidate asks anyway (a person who fixed the server need not wait).
        _ = try h.fetch(at: t0 + 1801 + 3541) { $0.revalidate = true }
        #expect(h.server.requests(to: "/a.jpg").count == 3)
        #expect(try h.index().ads[0].failures == 3)
        // The feed corrects the sha256: tried at once, and the record forgets the failures.
        h.feed(#"[{"id":"a","url":"a.jpg","sha256":"\#(Media.sha256(body))"}]"#)
        #expect(try h.fetch(at: t0 + 1801 + 3600).ads[0].outcome == .downloaded)
        #expect(try h.index().ads[0].failures == nil)
    }

    @Test func oversizedFeedIsRefused() throws {
        let h = try FetchHarness()
        h.feed("[" + String(repeating: #"{"url":"a.jpg"},"#, count: 200) + #"{"url":"a.jpg"}]"#)
        #expect(throws: AdCacheError.self) { try h.fetch { $0.maxFeedSize = 1000 } }
    }

    /// A video past the sizes where the digest moves to its own thread (4 MiB) and the
    /// writes are pushed to disk as they go (8 MiB): the digest is the file's, whole or
    /// resumed, and a wrong one is refused.
    @Test func aBigVideoIsHashedWholeAlsoWhenResumed() throws {
        let h = try FetchHarness()
        let body = Media.mp4(24 << 20, seed: 9)
        let digest = Media.sha256(body)
        h.put("/big.mp4", body)
        h.feed(#"[{"id":"v","url":"big.mp4","sha256":"\#(digest)"}]"#)
        #expect(try h.fetch().ads[0].outcome == .downloaded)
        #expect(try h.cachedBytes("v") == body)
        #expect(try h.index().ads[0].fileSha256 == digest)

        // Cut short at 13 MiB, then resumed: the prefix is hashed from the partial file, the
        // rest as it arrives.
        let h2 = try FetchHarness()
        h2.put("/big.mp4", body)
        h2.setOverride { r in
            guard r.path == "/big.mp4", r.header("Range") == nil else { return nil }
            var resp = LoopbackServer.Response.file(body, for: r, etag: "\"b1\"")
            resp.truncateAfter = 13 << 20
            return resp
        }
        h2.feed(#"[{"id":"v","url":"big.mp4","sha256":"\#(digest)"}]"#)
        #expect(try h2.fetch { $0.transfer.retries = 0 }.ads[0].outcome == .failed)
        h2.setOverride { r in r.path == "/big.mp4" ? .file(body, for: r, etag: "\"b1\"") : nil }
        #expect(try h2.fetch().ads[0].outcome == .resumed)
        #expect(try h2.cachedBytes("v") == body)

        // One byte changed on the server: refused for its digest.
        var other = body
        other[20 << 20] ^= 0xFF
        let h3 = try FetchHarness()
        h3.put("/big.mp4", other)
        h3.feed(#"[{"id":"v","url":"big.mp4","sha256":"\#(digest)"}]"#)
        let r = try h3.fetch()
        #expect(r.ads[0].outcome == .failed && r.ads[0].error?.contains("sha256") == true, "\(r.ads[0])")
    }

    @Test func truncatedBodyLeavesNoAssetAndResumesNextRun() throws {
        let h = try FetchHarness()
        let body = Media.mp4(300_000)
        h.put("/v.mp4", body)
        h.setOverride { r in
            guard r.path == "/v.mp4", r.header("Range") == nil else { return nil }
            var resp = LoopbackServer.Response.file(body, for: r, etag: "\"v1\"")
            resp.truncateAfter = 150_000
            return resp
        }
        h.feed(#"[{"id":"v","url":"v.mp4"}]"#)
        let first = try h.fetch { $0.transfer.retries = 0 }
        #expect(first.ads[0].outcome == .failed)
        #expect(first.ads[0].transient, "a short body is worth another try")
        #expect(Disk.list(h.store.assetsDirectory).isEmpty)
        #expect(try h.index().ads[0].state == .failed)
        // The partial file is kept for resuming.
        let partial = h.store.partialDirectory + "/" + (try SHA256Hasher.hex(h.server.url("/v.mp4"))) + ".part"
        #expect(Disk.size(partial) == 150_000)
        // A power cut can leave zeros where the disk never got the data: the last 64 KiB of a
        // partial file are not trusted (version 1 spliced them into the committed file).
        let zeros = [UInt8](repeating: 0, count: 30_000)
        let fd = open(partial, O_WRONLY)
        _ = zeros.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, 120_000) }
        close(fd)

        h.setOverride { r in r.path == "/v.mp4" ? .file(body, for: r, etag: "\"v1\"") : nil }
        let second = try h.fetch()
        #expect(second.ads[0].outcome == .resumed)
        let resume = try #require(h.server.requests(to: "/v.mp4").last)
        #expect(resume.header("Range") == "bytes=\(150_000 - 65_536)-")
        #expect(resume.header("If-Range") == "\"v1\"")
        #expect(try h.cachedBytes("v") == body)
        #expect(try h.index().ads[0].fileSha256 == Media.sha256(body))
    }

    @Test func resumeOfAChangedResourceStartsOver() throws {
        let h = try FetchHarness()
        let old = Media.mp4(30_000, seed: 1), new = Media.mp4(20_000, seed: 2)
        h.setOverride { r in
            guard r.path == "/v.mp4" else { return nil }
            var resp = LoopbackServer.Response.file(old, for: r, etag: "\"old\"")
            resp.truncateAfter = 10_000
            return resp
        }
        h.feed(#"[{"id":"v","url":"v.mp4"}]"#)
        _ = try h.fetch { $0.transfer.retries = 0 }
        // The server now has another version: If-Range fails, it answers 200 with all of it.
        h.setOverride { r in r.path == "/v.mp4" ? .file(new, for: r, etag: "\"new\"") : nil }
        let report = try h.fetch()
        #expect(report.ads[0].outcome == .downloaded)
        #expect(try h.cachedBytes("v") == new)
    }

    @Test func serverThatIgnoresRangeOrAnswers416StartsOver() throws {
        let h = try FetchHarness()
        let body = Media.jpeg(20_000)
        let partialName = try SHA256Hasher.hex(h.server.url("/a.jpg")) + ".part"
        for answer in ["ignore", "416"] {
            h.setOverride { r in
                guard r.path == "/a.jpg" else { return nil }
                if answer == "416", r.header("Range") != nil { return LoopbackServer.Response(status: 416) }
                return LoopbackServer.Response(status: 200, headers: [("ETag", "\"e\"")], body: body)
            }
            try h.store.prepare()
            h.dir.write("cache/partial/" + partialName, Array(body.prefix(5000)) + [1, 2, 3])   // garbage tail
            h.dir.write("cache/partial/" + partialName + ".validator", "\"e\"")
            h.feed(#"[{"id":"a\#(answer)","url":"a.jpg"}]"#)
            let report = try h.fetch()
            #expect(report.ads[0].outcome == .downloaded, "\(answer): \(report.ads[0])")
            #expect(try h.cachedBytes("a\(answer)") == body)
        }
    }

    @Test func transientErrorsAreRetriedHonouringRetryAfter() throws {
        let h = try FetchHarness()
        h.put("/a.jpg", Media.jpeg())
        let attempts = Counter()
        h.setOverride { r in
            guard r.path == "/a.jpg" else { return nil }
            if attempts.next() < 2 { return LoopbackServer.Response(status: 503, headers: [("Retry-After", "1")]) }
            return nil
        }
        h.feed(#"[{"id":"a","url":"a.jpg"}]"#)
        let report = try h.fetch { $0.transfer.retries = 2 }
        #expect(report.ads[0].outcome == .downloaded)
        let tries = h.server.requests(to: "/a.jpg")
        #expect(tries.count == 3)
        // Retry-After: 1 is honoured although the back-off base is 0.05 s.
        #expect(tries[1].receivedAt - tries[0].receivedAt >= 0.95)
        #expect(tries[2].receivedAt - tries[1].receivedAt >= 0.95)
    }

    @Test func retryAfterIsCappedAndNeverWaitsPastTheDeadline() throws {
        let h = try FetchHarness()
        let attempts = Counter()
        h.setOverride { r in
            guard r.path == "/a.jpg" else { return nil }
            if attempts.next() == 0 { return LoopbackServer.Response(status: 429, headers: [("Retry-After", "3600")]) }
            return nil
        }
        h.put("/a.jpg", Media.jpeg())
        h.put("/b.jpg", Media.jpeg(seed: 2))
        h.feed(#"[{"id":"a","url":"a.jpg"}]"#)
        // An hour's Retry-After is longer than any wait (5 minutes; 0.5 s here): this run
        // gives up on the ad at once, transiently; the next run tries again.
        let started0 = monotonicNow()
        let capped = try h.fetch { $0.transfer.settings.maxWait = 0.5 }
        #expect(capped.ads[0].outcome == .failed)
        #expect(h.server.requests(to: "/a.jpg").count == 1)
        #expect(monotonicNow() - started0 < 3)
        #expect(try h.fetch().ads[0].outcome == .downloaded)

        // With a deadline nearer than the wait, the ad fails at once instead of waiting.
        h.setOverride {
            $0.path == "/b.jpg" ? LoopbackServer.Response(status: 503, headers: [("Retry-After", "30")]) : nil
        }
        h.feed(#"[{"id":"b","url":"b.jpg"}]"#)
        let started = monotonicNow()
        let bounded = try h.fetch { $0.transfer.settings.deadline = monotonicNow() + 5 }
        #expect(bounded.ads[0].outcome == .failed)
        #expect(bounded.ads[0].error?.contains("HTTP 503") == true)
        #expect(h.server.requests(to: "/b.jpg").count == 1)
        #expect(monotonicNow() - started < 5)   // gave up rather than sleeping into the deadline
    }

    /// Every libcurl option is checked: one it refuses (as a libcurl before 7.85 refused
    /// `CURLOPT_PROTOCOLS_STR`) stops the transfer before it runs, never a silent default.
    @Test func anOptionLibcurlRefusesStopsTheTransferBeforeItRuns() throws {
        let h = try FetchHarness()
        h.feed(#"[{"id":"a","url":"a.jpg"}]"#)
        do {
            _ = try h.fetch { $0.transfer.settings.refuseOption = EasyTransfer.protocolsOption }
            Issue.record("the fetch should fail")
        } catch let e as AdCacheError {
            #expect(e.caseName == "libraryMissing")
            #expect(e.message.contains("refused CURLOPT_PROTOCOLS"), "\(e.message)")
        }
        #expect(h.server.log.isEmpty, "no request was made")
        // Redirects stay within http and https on the loaded libcurl, whatever its version.
        let api = try CurlAPI.shared.get()
        #expect(throws: AdCacheError.self) { try CurlAPI.check(versionNumber: 0x07_3A_00, text: "7.58.0") }
        #expect((try? CurlAPI.check(versionNumber: 0x07_44_00, text: "7.68.0")) != nil)
        #expect(!api.version.isEmpty)
    }

    @Test func permanentErrorsAreNotRetried() throws {
        let h = try FetchHarness()
        h.feed(#"[{"id":"a","url":"missing.jpg"}]"#)
        let report = try h.fetch { $0.transfer.retries = 3 }
        #expect(report.ads[0].error?.contains("HTTP 404") == true)
        #expect(h.server.requests(to: "/missing.jpg").count == 1)
    }

    @Test func retriesGiveUpAfterTheLimit() throws {
        let h = try FetchHarness()
        h.setOverride { $0.path == "/a.jpg" ? .text(500, "down") : nil }
        h.feed(#"[{"id":"a","url":"a.jpg"}]"#)
        let report = try h.fetch { $0.transfer.retries = 2 }
        #expect(report.ads[0].outcome == .failed)
        #expect(h.server.requests(to: "/a.jpg").count == 3)
    }

    @Test func redirectsAreFollowedButNeverToFile() throws {
        let h = try FetchHarness()
        h.put("/real.jpg", Media.jpeg())
        h.setOverride { r in
            switch r.path {
            case "/moved.jpg": return .redirect("/real.jpg")
            case "/evil.jpg": return .redirect("file:///etc/passwd")
            case "/loop.jpg": return .redirect("/loop.jpg")
            default: return nil
            }
        }
        h.feed(#"[{"id":"ok","url":"moved.jpg"},{"id":"evil","url":"evil.jpg"},{"id":"loop","url":"loop.jpg"}]"#)
        let report = try h.fetch()
        #expect(report.ads.map(\.outcome) == [.downloaded, .failed, .failed])
        #expect(report.ads[2].error?.contains("too many redirects") == true)
        #expect(h.server.requests(to: "/loop.jpg").count == 6)   // the first + 5 redirects
        #expect(Disk.list(h.store.assetsDirectory).count == 1)
    }

    @Test func feedRedirectMovesTheBaseForRelativeURLs() throws {
        let h = try FetchHarness()
        h.put("/new/a.jpg", Media.jpeg())
        h.setOverride { $0.path == "/feed.json" ? .redirect("/new/feed.json") : nil }
        h.feed(#"[{"id":"a","url":"a.jpg"}]"#, at: "/new/feed.json")
        let report = try h.fetch()
        #expect(report.ads[0].outcome == .downloaded)
        // FEED is remembered as given, not after redirects.
        #expect(try h.index().feed?.url == h.server.url("/feed.json"))
    }

    @Test func stalledTransferIsAbandoned() throws {
        let h = try FetchHarness()
        h.setOverride { r in
            guard r.path == "/slow.jpg" else { return nil }
            var resp = LoopbackServer.Response(status: 200, body: Media.jpeg(4000))
            resp.dripChunk = 10
            resp.dripPause = 0.5
            return resp
        }
        h.feed(#"[{"id":"s","url":"slow.jpg"}]"#)
        let report = try h.fetch {
            $0.transfer.settings.stallSeconds = 1; $0.transfer.retries = 0
        }
        #expect(report.ads[0].error?.contains("stalled") == true)
    }

    @Test func deadlineKeepsWhatFinishedAndLeavesTheRestPending() throws {
        let h = try FetchHarness()
        h.put("/fast.jpg", Media.jpeg())
        h.setOverride { r in
            guard r.path == "/slow.mp4" else { return nil }
            var resp = LoopbackServer.Response.file(Media.mp4(100_000), for: r, etag: "\"s\"")
            resp.dripChunk = 10_000
            resp.dripPause = 0.3
            return resp
        }
        h.feed(#"[{"id":"fast","url":"fast.jpg"},{"id":"slow","url":"slow.mp4"}]"#)
        let report = try h.fetch { $0.transfer.settings.deadline = monotonicNow() + 1.2 }
        #expect(!report.isComplete)
        #expect(report.ads.map(\.outcome) == [.downloaded, .pending])
        let index = try h.index()
        #expect(index.ads.map(\.state) == [.ready, .pending])
        // The partial download stays for the next run to resume.
        #expect(Disk.list(h.store.partialDirectory).contains { $0.hasSuffix(".part") })
    }

    @Test func expiredAdsAreNotDownloadedScheduledOnesAre() throws {
        let h = try FetchHarness()
        h.put("/old.jpg", Media.jpeg())
        h.put("/future.jpg", Media.jpeg(seed: 5))
        h.feed(
            #"[{"id":"old","url":"old.jpg","expires":1000000000},{"id":"future","url":"future.jpg","start":"2099-01-01T00:00:00Z"}]"#
        )
        let report = try h.fetch()
        #expect(report.ads.map(\.outcome) == [.expired, .downloaded])
        #expect(h.server.requests(to: "/old.jpg").isEmpty)
        #expect(report.isComplete)
    }

    @Test func adsThatCanNeverBeShownAreNotDownloaded() throws {
        let h = try FetchHarness()
        h.put("/zero.jpg", Media.jpeg())
        h.put("/ok.jpg", Media.jpeg(seed: 5))
        h.feed(#"[{"id":"zero","url":"zero.jpg","maxShows":0},{"id":"ok","url":"ok.jpg","maxShows":1}]"#)
        let report = try h.fetch()
        #expect(report.ads.map(\.outcome) == [.exhausted, .downloaded])
        #expect(h.server.requests(to: "/zero.jpg").isEmpty)
        #expect(try h.cache.shown()?.id == "ok")
        h.put("/ok.jpg", Media.jpeg(seed: 6))   // a new version of an exhausted ad: not fetched
        let again = try h.fetch()
        #expect(again.ads.map(\.outcome) == [.exhausted, .exhausted])
        #expect(h.server.requests(to: "/ok.jpg").count == 1)
    }

    @Test func twoAdsWithOneURLShareOneFileAndOneRequest() throws {
        let h = try FetchHarness()
        h.put("/same.jpg", Media.jpeg())
        h.feed(#"[{"id":"a","url":"same.jpg"},{"id":"b","url":"same.jpg","placement":"banner"}]"#)
        _ = try h.fetch()
        let index = try h.index()
        #expect(index.ads[0].file == index.ads[1].file)
        #expect(h.server.requests(to: "/same.jpg").count == 1)
        #expect(Disk.list(h.store.assetsDirectory).count == 1)
    }

    @Test func rebuildAfterALostIndexReusesFiles() throws {
        let h = try FetchHarness()
        h.put("/a.jpg", Media.jpeg())
        h.feed(#"[{"id":"a","url":"a.jpg","sha256":"\#(Media.sha256(Media.jpeg()))"}]"#)
        _ = try h.fetch()
        FileManager.default.createFile(atPath: h.store.indexPath, contents: Data("{ torn".utf8))
        let report = try h.fetch()
        #expect(report.ads[0].outcome == .unchanged)
        #expect(h.server.requests(to: "/a.jpg").count == 1)
        #expect(h.warnings.contains { $0.contains("moved it aside") })
        #expect(Disk.list(h.store.directory).contains { $0.hasPrefix("index.json.corrupt-") })
    }

    @Test func missingFileIsFetchedAgain() throws {
        let h = try FetchHarness()
        h.put("/a.jpg", Media.jpeg())
        h.feed(#"[{"id":"a","url":"a.jpg"}]"#)
        _ = try h.fetch()
        for f in Disk.list(h.store.assetsDirectory) { Disk.remove(h.store.assetPath(f)) }
        #expect(try h.cache.list()[0].state == .missing)
        let report = try h.fetch()
        #expect(report.ads[0].outcome == .downloaded)
        #expect(h.server.requests(to: "/a.jpg").last?.header("If-None-Match") == nil)
    }

    /// --header goes to the feed's own origin only: never to another scheme, host or port a
    /// redirect leads to (libcurl keeps custom headers there; an API key reached the CDN).
    @Test func customHeadersStayWithTheFeedsOrigin() throws {
        let h = try FetchHarness()
        let cdn = try LoopbackServer { r in
            r.path == "/feed.json" ? .text(200, #"[{"id":"a","url":"a.jpg"}]"#) : .file(Media.jpeg(), for: r)
        }
        defer { cdn.stop() }
        h.setOverride { r in
            switch r.path {
            case "/feed.json": return .redirect("/moved.json")   // same origin
            case "/moved.json": return .redirect(cdn.url("/feed.json"), status: 301)   // another port
            default: return nil
            }
        }
        let report = try h.fetch { $0.headers = ["X-Api-Key: s3cret"] }
        #expect(report.ads.map(\.outcome) == [.downloaded])
        #expect(h.server.requests(to: "/feed.json").first?.header("X-Api-Key") == "s3cret")
        #expect(h.server.requests(to: "/moved.json").first?.header("X-Api-Key") == "s3cret")
        let atCDN = try #require(cdn.requests(to: "/feed.json").first)
        #expect(atCDN.header("X-Api-Key") == nil)
        #expect(cdn.requests(to: "/a.jpg").count == 1, "relative URLs resolve against the final feed URL")
        #expect(Fetcher.origin("HTTP://Example.com/x") == Fetcher.origin("http://example.com:80/y"))
        #expect(Fetcher.origin("https://example.com/") != Fetcher.origin("http://example.com/"))
    }

    @Test func headersAndUserAgent() throws {
        let h = try FetchHarness()
        h.put("/a.jpg", Media.jpeg())
        h.feed(#"[{"id":"a","url":"a.jpg"}]"#)
        _ = try h.fetch {
            $0.headers = ["Authorization: Bearer t0k3n"]; $0.transfer.userAgent = "kiosk/7"
        }
        let feed = try #require(h.server.requests(to: "/feed.json").first)
        #expect(feed.header("Authorization") == "Bearer t0k3n")
        #expect(feed.header("User-Agent") == "kiosk/7")
        let asset = try #require(h.server.requests(to: "/a.jpg").first)
        #expect(asset.header("Authorization") == nil)   // feed request only
        #expect(asset.header("User-Agent") == "kiosk/7")
        #expect(defaultUserAgent().hasPrefix("adcache/") && defaultUserAgent().contains(" libcurl/"))
    }

    @Test func noFeedAndNoEarlierFetchIsAUsageError() throws {
        let h = try FetchHarness()
        do {
            _ = try h.fetch { $0.feed = nil }
            Issue.record("expected a usage error")
        } catch let e as AdCacheError {
            #expect(e == .invalidRequest("no FEED given and no earlier successful fetch to repeat"))
        }
        h.put("/a.jpg", Media.jpeg())
        h.feed(#"[{"id":"a","url":"a.jpg"}]"#)
        _ = try h.fetch()
        #expect(try h.fetch { $0.feed = nil }.feed == h.server.url("/feed.json"))
    }

    @Test func parallelTransfersOverlap() throws {
        let h = try FetchHarness()
        var ads: [String] = []
        for i in 0..<8 {
            h.put("/\(i).jpg", Media.jpeg(seed: UInt8(i)))
            ads.append(#"{"id":"\#(i)","url":"\#(i).jpg"}"#)
        }
        let inFlight = Gauge()
        h.setOverride { r in
            guard r.path.hasSuffix(".jpg"), let body = h.file(r.path) else { return nil }
            inFlight.enter()
            usleep(300_000)
            inFlight.leave()
            return LoopbackServer.Response.file(body, for: r)
        }
        h.feed("[" + ads.joined(separator: ",") + "]")
        let report = try h.fetch { $0.transfer.parallel = 3 }
        #expect(report.ads.allSatisfy { $0.outcome == .downloaded })
        #expect(inFlight.peak == 3)   // never more than --parallel, and really that many at once
    }
}

/// How many handlers run at once, and the most there ever were.
final class Gauge: @unchecked Sendable {
    private var now = 0
    private(set) var peakValue = 0
    private let lock = NSLock()
    var peak: Int { lock.lock(); defer { lock.unlock() }; return peakValue }
    func enter() { lock.lock(); now += 1; peakValue = max(peakValue, now); lock.unlock() }
    func leave() { lock.lock(); now -= 1; lock.unlock() }
}

/// A thread-safe counter for server handlers.
final class Counter: @unchecked Sendable {
    private var value = 0
    private let lock = NSLock()
    func next() -> Int {
        lock.lock(); defer { lock.unlock() }
        value += 1
        return value - 1
    }
    var count: Int {
        lock.lock(); defer { lock.unlock() }
        return value
    }
}

/// A value a server closure reads while the test changes it.
final class Flag2: @unchecked Sendable {
    private var v: String
    private let lock = NSLock()
    init(value: String) { v = value }
    var value: String {
        get { lock.lock(); defer { lock.unlock() }; return v }
        set { lock.lock(); v = newValue; lock.unlock() }
    }
}
