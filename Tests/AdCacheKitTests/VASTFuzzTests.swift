import Foundation
import Testing

@testable import AdCacheKit

/// SPEC §10 *Parsing*: no document can crash adcache. Thousands of mutations of the IAB
/// Tech Lab's real sample tags (bytes flipped, cut, repeated, spliced between samples,
/// elements and entities inserted) are read as VAST and every ad made for the device: each
/// gives ads, skipped ads with their error code, or a refusal — never a crash, and nothing
/// that breaks the rules.
@Suite struct VASTFuzzTests {
    static let rounds = 10_000

    static let samples: [[UInt8]] = {
        let dir = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("adcacheTests/Fixtures/VAST")
        let names = (try? FileManager.default.contentsOfDirectory(atPath: dir.path)) ?? []
        return names.filter { $0.hasSuffix(".xml") }.sorted().compactMap {
            (try? Data(contentsOf: dir.appendingPathComponent($0))).map(Array.init)
        }
    }()

    static let insertions: [String] =
        [
            "<!DOCTYPE VAST [<!ENTITY x SYSTEM \"file:///etc/passwd\">]>", "&x;", "&amp;", "&#0;", "&#x110000;",
            "<![CDATA[", "]]>", "<Ad id=\"\">", "<InLine>", "<Wrapper>", "<Linear skipoffset=\"200%\">",
            "<Duration>99:99:99</Duration>", "<Duration>-00:00:01</Duration>",
            "<MediaFile delivery=\"progressive\" type=\"video/mp4\" width=\"-1\" height=\"99999999999999999999\">",
            "<Expires>1e400</Expires>", "<VASTAdTagURI>file:///etc/passwd</VASTAdTagURI>", "\u{0}", "\u{FEFF}",
            "<?xml-stylesheet href=\"http://127.0.0.1:1/x\"?>",
            "<xi:include href=\"/etc/passwd\" xmlns:xi=\"http://www.w3.org/2001/XInclude\"/>",
        ] + extremes

    /// SPEC §10 (v4) *Bounded numbers*: values that parse but lie at or past the edge of their
    /// range (an overflow, once), inserted as attributes of the element they land in or as
    /// whole elements.
    static let extremes: [String] = {
        var out: [String] = []
        for value in ["3037000500", "16384", "16385"] {
            out += [" width=\"\(value)\"", " height=\"\(value)\""]
        }
        for value in ["9223372036854775807", "-9223372036854775808"] {
            out += [" bitrate=\"\(value)\"", " minBitrate=\"\(value)\"", " maxBitrate=\"\(value)\""]
        }
        for value in ["9999999999999999:00:00", "2562047788015215:30:07", "24:00:00", "24:00:01"] {
            out += ["<Duration>\(value)</Duration>", " skipoffset=\"\(value)\""]
        }
        out += [" skipoffset=\"100%\"", " skipoffset=\"1e308%\""]
        out += ["1e300", "315360000", "315360001"].map { "<Expires>\($0)</Expires>" }
        out += [" sequence=\"9223372036854775807\"", " fileSize=\"9223372036854775807\"", " adType=\"audio\""]
        out += [
            "<MediaFile delivery=\"progressive\" type=\"video/mp4\" width=\"3037000500\" height=\"3037000500\""
                + " bitrate=\"9223372036854775807\" fileSize=\"9223372036854775807\">https://x.test/v.mp4</MediaFile>"
        ]
        return out
    }()

    static let maxAssetSize: Int64 = 100 << 20

    func mutate(_ input: [UInt8], _ rng: inout SplitMix) -> [UInt8] {
        var b = input
        for _ in 0...(rng.next() % 2) {
            guard !b.isEmpty else { break }
            let at = Int(rng.next() % UInt64(b.count))
            switch rng.next() % 7 {
            case 0: b[at] = UInt8(truncatingIfNeeded: rng.next())
            case 1: b.removeSubrange(at..<min(b.count, at + Int(rng.next() % 64)))
            case 2:
                let insertion = Self.insertions[Int(rng.next() % UInt64(Self.insertions.count))]
                var place = at
                if insertion.hasPrefix(" ") {
                    // An attribute: inside the start tag at or after `at`, before its `>`.
                    while place < b.count, b[place] != UInt8(ascii: ">") { place += 1 }
                    if place > 0, place < b.count, b[place - 1] == UInt8(ascii: "/") { place -= 1 }
                }
                b.insert(contentsOf: Array(insertion.utf8), at: min(place, b.count))
            case 3:
                let other = Self.samples[Int(rng.next() % UInt64(Self.samples.count))]
                let from = Int(rng.next() % UInt64(other.count))
                b.insert(contentsOf: other[from..<min(other.count, from + Int(rng.next() % 400))], at: at)
            case 4: if rng.next() % 4 == 0 { b = Array(b[..<at]) }
            case 5:
                let n = Int(rng.next() % 32)
                b.insert(contentsOf: b[at..<min(b.count, at + n)], at: at)
            default:
                b[at] =
                    [UInt8(ascii: "<"), UInt8(ascii: ">"), UInt8(ascii: "\""), UInt8(ascii: "&"), 0x80][
                        Int(rng.next() % 5)]
            }
        }
        return b
    }

    @Test func thousandsOfMutatedSampleTags() throws {
        try #require(Self.samples.count >= 10, "the fixtures are missing")
        var rng = SplitMix(seed: 0xAD_CAC4E)
        var outcomes: [String: Int] = [:]
        var options = VASTOptions()
        options.maxBitrate = 1000
        for round in 0..<Self.rounds {
            let input = mutate(Self.samples[round % Self.samples.count], &rng)
            let doc: VASTDocument
            do {
                doc = try VASTDocument.read(input)
            } catch {
                #expect(!error.libraryMissing, "libxml2 must load")
                #expect([.xmlParse, .schema].contains(error.code), "\(error)")
                outcomes["refused \(error.code.rawValue)", default: 0] += 1
                continue
            }
            for entry in doc.entries {
                switch entry {
                case .inline(let id, let inline):
                    do {
                        let made = try VASTDocument.ad(
                            inline, id: id, wrappers: VASTTrackers(), options: options, now: 1e9,
                            maxAssetSize: Self.maxAssetSize)
                        let ad = made.ad
                        if !made.warnings.isEmpty { outcomes["ad with a number ignored", default: 0] += 1 }
                        // What passes satisfies the rules.
                        #expect(!ad.id.isEmpty)
                        #expect(FeedParser.isWebURL(ad.url), "\(ad.url)")
                        #expect(ad.vast != nil && FeedAd.vastDurationRange.contains(ad.duration) || ad.type == .image)
                        #expect(ad.vast?.skipOffset.map { $0 >= 0 && $0.isFinite } ?? true)
                        #expect(ad.tracking.values.allSatisfy { $0.allSatisfy(FeedParser.isWebURL) })
                        // Every number within its range (SPEC §10 (v4) *Bounded numbers*).
                        #expect(ad.duration <= 86400)
                        #expect(ad.vast?.skipOffset.map { $0 <= 86400 } ?? true)
                        #expect(ad.expires.map { $0 - 1e9 >= 0 && $0 - 1e9 <= 10 * 365 * 86400 } ?? true)
                        #expect(ad.fileSize.map { (1...Self.maxAssetSize).contains($0) } ?? true)
                        if ad.type == .video {
                            #expect(ad.renditions.first?.url == ad.url)
                            #expect(ad.renditions.allSatisfy { $0.fileSize.map { $0 >= 1 } ?? true })
                        }
                        outcomes["ad", default: 0] += 1
                    } catch {
                        outcomes["skipped \(error.code.rawValue)", default: 0] += 1
                    }
                case .wrapper(let w):
                    #expect(w.tagURI.map(FeedParser.isWebURL) ?? true)
                    outcomes["wrapper", default: 0] += 1
                }
            }
            if doc.entries.isEmpty { outcomes["no ad", default: 0] += 1 }
        }
        // Every kind of outcome happened: the fuzzer reached past the parser.
        #expect(outcomes["ad", default: 0] > 100, "\(outcomes)")
        #expect(outcomes["refused 100", default: 0] > 100, "\(outcomes)")
        #expect(outcomes.keys.contains { $0.hasPrefix("skipped") }, "\(outcomes)")
        #expect(outcomes["wrapper", default: 0] > 10, "\(outcomes)")
        #expect(outcomes["ad with a number ignored", default: 0] > 10, "\(outcomes)")
        print("VAST fuzz, \(Self.rounds) documents: \(outcomes.sorted { $0.key < $1.key })")
    }
}
