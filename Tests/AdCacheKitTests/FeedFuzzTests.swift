import Foundation
import Testing

@testable import AdCacheKit

/// A seeded mutation fuzzer for the feed parser, run in `swift test`: thousands of damaged
/// feeds must each give ads, skipped ads with warnings, or a data error; never a crash.
@Suite struct FeedFuzzTests {
    static let seeds: [String] = [
        #"{"version":1,"ads":[{"id":"a","type":"video","url":"https://c.example.com/a.mp4","sha256":"\#(String(repeating: "ab", count: 32))","start":"2027-03-01T00:00:00+08:00","expires":1806508800,"maxShows":3,"maxShowsPerDay":1,"minInterval":3600,"duration":5,"priority":10,"placement":"splash","clickUrl":"https://example.com/","meta":{"t":"x","n":[1,2,{"d":null}]}}]}"#,
        #"[{"picUrl":"/a.jpg","showTime":"3","timestamp":1806508800000},{"url":"b.png","id":"b"}]"#,
        #"{"body":{"imgUrl":"https://c.example.com/x.jpg"}}"#,
        #"{"picUrl":"x.gif","showTime":2,"timestamp":"2027-01-01T00:00:00Z"}"#,
    ]

    /// Regression inputs: shapes that once looked risky, kept so they stay handled.
    static let regressions: [String] = [
        #"{"ads":[{"url":"a.jpg","maxShows":99999999999999999999999}]}"#,
        #"{"ads":[{"url":"a.jpg","priority":1e400}]}"#,
        #"{"ads":[{"url":"a.jpg","expires":-99999999999999999}]}"#,
        #"{"ads":[{"url":"a.jpg","start":"9999-12-31T23:59:59+23:59"}]}"#,
        #"{"ads":[{"url":"a.jpg","start":"0000-01-01T00:00:00-23:59"}]}"#,
        #"{"ads":[{"url":"\u0000"}]}"#,
        #"{"ads":[{"url":"http://[::1"}]}"#,
        #"{"ads":[{"url":"http://h/\ud800.jpg"}]}"#,
        #"{"ads":null}"#,
        #"{"body":{"imgUrl":null}}"#,
        #"{"ads":[{"url":"a.jpg","duration":-9223372036854775808}]}"#,
        #"{"ads":[{"url":"a.jpg","showTime":"-"}]}"#,
        #"{"ads":[{"url":"a.jpg","expires":"1806508800.5"}]}"#,
    ]

    /// What a damaged feed gave: "ads" (every ad satisfying the rules), "warned" (some ad
    /// skipped or a field dropped), "invalid" (a data error), or "broken rule"/"other error".
    func outcome(_ bytes: [UInt8]) -> String {
        do {
            let feed = try FeedParser(baseURL: URL(string: "https://ads.example.com/feed.json")!).parse(bytes)
            for ad in feed.ads {
                // Whatever passes must satisfy the rules.
                guard !ad.id.isEmpty, ad.id.count <= 128 || ad.id == ad.url, (3...5).contains(ad.duration),
                    ad.url.hasPrefix("http://") || ad.url.hasPrefix("https://")
                else { return "broken rule" }
            }
            return feed.warnings.isEmpty ? "ads" : "warned"
        } catch AdCacheError.feedInvalid {
            return "invalid"
        } catch {
            return "other error"
        }
    }

    func parseNeverCrashes(_ bytes: [UInt8]) -> Bool {
        ["ads", "warned", "invalid"].contains(outcome(bytes))
    }

    @Test func regressionInputs() {
        for input in Self.regressions {
            #expect(parseNeverCrashes(Array(input.utf8)), "\(input)")
        }
    }

    @Test func thousandsOfMutatedFeeds() {
        var rng = SplitMix(seed: 0xADCAC4E)
        let alphabet = Array(#"{}[]":,0123456789-+.eE truefalsnul\"#.utf8) + [0x00, 0xFF, 0xC3, 0x80, 0x0A]
        var outcomes: [String: Int] = [:]
        for round in 0..<6000 {
            var bytes = Array(Self.seeds[round % Self.seeds.count].utf8)
            for _ in 0..<(1 + Int(rng.next() % 8)) {
                let pos = bytes.isEmpty ? 0 : Int(rng.next() % UInt64(bytes.count))
                switch rng.next() % 5 {
                case 0 where !bytes.isEmpty: bytes[pos] = alphabet[Int(rng.next() % UInt64(alphabet.count))]
                case 1: bytes.insert(alphabet[Int(rng.next() % UInt64(alphabet.count))], at: pos)
                case 2 where !bytes.isEmpty: bytes.removeSubrange(pos..<min(bytes.count, pos + Int(rng.next() % 16)))
                case 3:
                    let other = Array(Self.seeds[Int(rng.next() % UInt64(Self.seeds.count))].utf8)
                    let from = Int(rng.next() % UInt64(other.count))
                    bytes.insert(contentsOf: other[from..<min(other.count, from + Int(rng.next() % 40))], at: pos)
                default: bytes = Array(bytes.prefix(pos))
                }
            }
            let o = outcome(bytes)
            outcomes[o, default: 0] += 1
            #expect(["ads", "warned", "invalid"].contains(o), "\(o): \(String(decoding: bytes, as: UTF8.self))")
        }
        print(
            "feed fuzz: 6000 feeds: "
                + outcomes.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", "))
        // The mutations reach every kind of outcome, or the fuzzer tests too little.
        #expect(
            outcomes["ads", default: 0] > 100 && outcomes["warned", default: 0] > 100
                && outcomes["invalid", default: 0] > 100)
    }
}
