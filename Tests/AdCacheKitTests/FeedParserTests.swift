import Foundation
import Testing

@testable import AdCacheKit

@Suite struct FeedParserTests {
    let base = URL(string: "https://ads.example.com/v2/splash.json")!

    func parse(_ json: String, base: URL? = nil) throws -> Feed {
        try FeedParser(baseURL: base ?? self.base).parse(Array(json.utf8))
    }

    @Test func canonicalShapeKeepsEveryField() throws {
        let feed = try parse(
            """
            {"version":1,"ads":[{"id":"spring-sale","type":"video","url":"https://cdn.example.com/s/spring.mp4",
              "sha256":"\(String(repeating: "A", count: 64))","start":"2027-03-01T00:00:00+08:00","expires":1806508800,
              "maxShows":3,"maxShowsPerDay":1,"minInterval":3600,"duration":4,"priority":10,"placement":"interstitial",
              "clickUrl":"https://example.com/sale","meta":{"title":"Spring sale","logo":"bottom"}}]}
            """)
        #expect(feed.warnings.isEmpty)
        let ad = try #require(feed.ads.first)
        #expect(ad.id == "spring-sale")
        #expect(ad.type == .video)
        #expect(ad.url == "https://cdn.example.com/s/spring.mp4")
        #expect(ad.sha256 == String(repeating: "a", count: 64))
        #expect(ad.start == 1803830400)   // 2027-02-28T16:00:00Z
        #expect(ad.expires == 1806508800)
        #expect(ad.maxShows == 3 && ad.maxShowsPerDay == 1 && ad.minInterval == 3600)
        #expect(ad.duration == 4 && ad.priority == 10 && ad.placement == "interstitial")
        #expect(ad.clickUrl == "https://example.com/sale")
        #expect(ad.meta == .object(["title": .string("Spring sale"), "logo": .string("bottom")]))
    }

    @Test func defaults() throws {
        let ad = try #require(try parse(#"{"ads":[{"url":"https://cdn.example.com/a.png"}]}"#).ads.first)
        #expect(ad.id == "https://cdn.example.com/a.png")
        #expect(ad.type == .image)   // from the extension
        #expect(ad.duration == 5 && ad.priority == 0 && ad.placement == "splash")
        #expect(ad.maxShows == nil && ad.expires == nil && ad.meta == nil)
    }

    @Test func bareArrayAndLegacyFields() throws {
        let feed = try parse(
            #"[{"picUrl":"/img/a.jpg","showTime":"3","timestamp":1806508800000},{"url":"b.webm","id":"b"}]"#)
        #expect(feed.ads.count == 2)
        #expect(feed.ads[0].url == "https://ads.example.com/img/a.jpg")
        #expect(feed.ads[0].maxShows == 3)
        #expect(feed.ads[0].expires == 1806508800)   // milliseconds
        #expect(feed.ads[1].url == "https://ads.example.com/v2/b.webm")
        #expect(feed.ads[1].type == .video)
    }

    @Test func singleLegacyObjectAndBodyEnvelope() throws {
        let legacy = try parse(#"{"picUrl":"https://c.example.com/x","showTime":2}"#)
        #expect(legacy.ads.map(\.maxShows) == [2])
        let body = try parse(#"{"code":0,"body":{"imgUrl":"../p/launch.bin"}}"#)
        #expect(body.ads.count == 1)
        #expect(body.ads[0].type == .image)
        #expect(body.ads[0].url == "https://ads.example.com/p/launch.bin")
    }

    @Test func relativeURLsResolveAgainstTheFinalFeedURL() throws {
        let feed = try parse(
            #"{"ads":[{"url":"a.jpg"},{"url":"//cdn.example.net/b.jpg"},{"url":"?v=2"}]}"#,
            base: URL(string: "https://redirected.example.org/feeds/today.json?x=1")!)
        #expect(
            feed.ads.map(\.url) == [
                "https://redirected.example.org/feeds/a.jpg",
                "https://cdn.example.net/b.jpg",
                "https://redirected.example.org/feeds/today.json?v=2",
            ])
    }

    @Test(arguments: [
        (#"{"id":"x"}"#, "no \"url\""),
        (#"{"id":"x","url":"ftp://h/a.jpg"}"#, "scheme 'ftp'"),
        (#"{"id":"x","url":"file:///etc/passwd"}"#, "file: URL"),
        (#"{"id":"x","url":"a.jpg","start":"tomorrow"}"#, "\"start\""),
        (#"{"id":"x","url":"a.jpg","expires":"2027-03-01T00:00:00"}"#, "\"expires\""),
        (#"{"id":"x","url":"a.jpg","maxShows":-1}"#, "\"maxShows\""),
        (#"{"id":"x","url":"a.jpg","priority":"high"}"#, "\"priority\""),
        (#"{"id":"x","url":"a.jpg","type":"audio"}"#, "\"type\""),
        (#"{"id":"x","url":"a.jpg","sha256":"abc"}"#, "\"sha256\""),
        (#"{"id":"","url":"a.jpg"}"#, "\"id\""),
        (#"{"id":7,"url":"a.jpg"}"#, "\"id\""),
        (#"{"id":"x","url":42}"#, "\"url\""),
        (#"{"id":"x","url":"http:///nohost.jpg"}"#, "host"),
    ])
    func badAdIsSkippedWithOneWarning(ad: String, reason: String) throws {
        let feed = try parse(#"{"ads":[\#(ad),{"id":"good","url":"g.jpg"}]}"#)
        #expect(feed.ads.map(\.id) == ["good"])
        #expect(feed.warnings.count == 1)
        #expect(feed.warnings[0].message.hasPrefix("skipping ad"))
        #expect(feed.warnings[0].message.contains(reason), "\(feed.warnings[0])")
        #expect(feed.warnings[0].kind == .feed)
    }

    @Test func idOver128CharactersIsSkipped() throws {
        let feed = try parse(
            #"{"ads":[{"id":"\#(String(repeating: "é", count: 129))","url":"a.jpg"},{"id":"\#(String(repeating: "é", count: 128))","url":"b.jpg"}]}"#
        )
        #expect(feed.ads.count == 1)
        #expect(feed.ads[0].id.count == 128)
    }

    @Test func idIsKeptExactly() throws {
        let feed = try parse(#"{"ads":[{"id":"  spaced / ../id  ","url":"a.jpg"}]}"#)
        #expect(feed.ads[0].id == "  spaced / ../id  ")
    }

    @Test func duplicateIDIsSkipped() throws {
        let feed = try parse(#"{"ads":[{"id":"a","url":"1.jpg"},{"id":"a","url":"2.jpg"}]}"#)
        #expect(feed.ads.map(\.url) == ["https://ads.example.com/v2/1.jpg"])
        #expect(feed.warnings.count == 1)
    }

    @Test func droppedFieldsWarnButKeepTheAd() throws {
        let feed = try parse(
            #"{"ads":[{"id":"a","url":"1.jpg","duration":9,"clickUrl":"javascript:alert(1)","meta":[1]}]}"#)
        #expect(feed.ads.count == 1)
        let ad = feed.ads[0]
        #expect(ad.duration == 5 && ad.clickUrl == nil && ad.meta == nil)
        #expect(feed.warnings.count == 3)
        #expect(feed.warnings.allSatisfy { $0.message.contains("'a'") && $0.adID == "a" })
    }

    @Test(arguments: [
        "", "   ", "not json", "{\"ads\": {}}", "{\"foo\": 1}", "42", "\"str\"", "[1, 2", "{\"ads\":[]}x",
    ])
    func badFeedThrowsDataError(text: String) {
        #expect(throws: AdCacheError.self) { try parse(text) }
        do {
            _ = try parse(text)
        } catch AdCacheError.feedInvalid {
        } catch {
            Issue.record("not feedInvalid: \(error)")
        }
    }

    @Test func invalidUTF8AndDeepNestingAreDataErrors() {
        let bad: [UInt8] = Array(#"{"ads":[{"url":"a"#.utf8) + [0xFF, 0xFE] + Array(#".jpg"}]}"#.utf8)
        #expect(throws: AdCacheError.self) { try FeedParser(baseURL: base).parse(bad) }
        let deep = String(repeating: "[", count: 100_000) + String(repeating: "]", count: 100_000)
        #expect(throws: AdCacheError.self) { try parse(deep) }
    }

    @Test func emptyAdsListIsAValidFeed() throws {
        #expect(try parse(#"{"version":1,"ads":[]}"#).ads.isEmpty)
    }

    @Test func fileAssetsOnlyInALocalFeed() throws {
        let local = try FeedParser(baseURL: URL(fileURLWithPath: "/srv/feed/feed.json")).parse(
            Array(#"[{"url":"img/a.jpg"}]"#.utf8))
        #expect(local.ads[0].url == "file:///srv/feed/img/a.jpg")
        let remote = try parse(#"[{"url":"file:///srv/feed/img/a.jpg"}]"#)
        #expect(remote.ads.isEmpty)
    }
}

/// SPEC §2 v4: a URL libcurl would refuse as malformed breaks the rule of `url`; one it
/// accepts — an IDN, in either spelling; an IPv6 address, with a zone — does not.
@Suite struct URLCheckTests {
    @Test(arguments: [
        ("http://example.com/a.jpg", true), ("https://a_b.example:8443/x", true), ("http://127.0.0.1:65535/x", true),
        ("http://bücher.example/x.jpg", true), ("http://b%C3%BCcher.example/x.jpg", true),
        ("http://[::1]:8080/x", true),
        ("http://[fe80::1%25eth0]/x", true), ("http://127.0.0.1:99999/x", false), ("http://127.0.0.1:0/x", false),
        ("http://exa%20mple.com/x", false), ("http://exa%3Cmple.com/x", false), ("ftp://example.com/x", false),
        ("http:///x", false),
    ])
    func aURLLibcurlWouldRefuseIsNoWebURL(_ url: String, _ accepted: Bool) {
        #expect(FeedParser.isWebURL(url) == accepted, "\(url)")
    }
}
