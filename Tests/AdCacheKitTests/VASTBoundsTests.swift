import Foundation
import Testing

@testable import AdCacheKit

/// SPEC §10 (v4) *Bounded numbers*, *Bounded effort* and *The next rendition*: every number a
/// VAST document gives has a range (out of it: absent, with a warning naming the ad), the
/// media files come ranked by the media-file rule, and parsing stays linear whatever the
/// document's shape.
@Suite struct VASTBoundsTests {
    static let now = 1_000_000_000.0

    /// One InLine ad with one Linear and one MediaFile, each number replaceable.
    static func document(
        duration: String = "00:00:30", skipoffset: String? = nil, media: [String: String] = [:],
        expires: String? = nil, sequence: String? = nil, adType: String? = nil
    ) -> [UInt8] {
        var attributes = [
            "delivery": "progressive", "type": "video/mp4", "width": "1920", "height": "1080", "bitrate": "2000",
        ]
        attributes.merge(media) { $1 }
        let mediaAttributes = attributes.filter { !$0.value.isEmpty }.sorted { $0.key < $1.key }
            .map { " \($0.key)=\"\($0.value)\"" }.joined()
        let ad =
            [sequence.map { " sequence=\"\($0)\"" }, adType.map { " adType=\"\($0)\"" }].compactMap { $0 }.joined()
        return Array(
            """
            <VAST version="4.2"><Ad id="A"\(ad)><InLine><AdSystem>t</AdSystem><AdTitle>t</AdTitle>
            <Error>https://ads.test/error</Error>
            \(expires.map { "<Expires>\($0)</Expires>" } ?? "")
            <Creatives><Creative><Linear\(skipoffset.map { " skipoffset=\"\($0)\"" } ?? "")>
            <Duration>\(duration)</Duration>
            <MediaFiles><MediaFile\(mediaAttributes)>https://ads.test/a.mp4</MediaFile></MediaFiles>
            </Linear></Creative></Creatives></InLine></Ad><Ad id="B"><InLine><AdSystem>t</AdSystem>
            <Creatives><Creative><Linear><Duration>00:00:05</Duration><MediaFiles>
            <MediaFile delivery="progressive" type="video/mp4">https://ads.test/b.mp4</MediaFile>
            </MediaFiles></Linear></Creative></Creatives></InLine></Ad></VAST>
            """.utf8)
    }

    /// The first ad of `bytes`, made for a default device.
    static func make(
        _ bytes: [UInt8], options: VASTOptions = VASTOptions(), maxAssetSize: Int64 = Int64.max
    ) throws -> VASTAd {
        let doc = try VASTDocument.read(bytes)
        guard case .inline(let id, let inline) = try #require(doc.entries.first) else {
            throw VASTFailure(.schema, "not an inline")
        }
        return try VASTDocument.ad(
            inline, id: id, wrappers: VASTTrackers(), options: options, now: now, maxAssetSize: maxAssetSize)
    }

    // MARK: Bounded numbers

    @Test(arguments: [
        "9999999999999999:00:00", "2562047788015215:30:07", "24:00:01", "99999999999999999999:00:00",
        "-00:00:01", "00:99:00", "nan", "",
    ])
    func aDurationOutOfRangeSkipsTheAdWith101(_ duration: String) throws {
        #expect(throws: VASTFailure.self) { try Self.make(Self.document(duration: duration)) }
        do {
            _ = try Self.make(Self.document(duration: duration))
        } catch let e as VASTFailure {
            #expect(e.code == .schema, "\(duration): \(e)")
        }
    }

    @Test func aDurationOf24HoursIsKept() throws {
        let made = try Self.make(Self.document(duration: "24:00:00"))
        #expect(made.ad.duration == 86400)
        #expect(made.warnings.isEmpty, "\(made.warnings)")
        #expect(try Self.make(Self.document(duration: "23:59:59.001")).ad.duration == 86400)
    }

    @Test(arguments: ["width", "height"], ["3037000500", "16385", "0", "-1", "99999999999999999999", "1e4", "x"])
    func aSizeOutOfRangeIsAbsent(_ name: String, _ value: String) throws {
        let made = try Self.make(Self.document(media: [name: value]))
        #expect(made.ad.url == "https://ads.test/a.mp4")
        #expect(made.ad.renditions.count == 1)
        #expect(made.warnings.count == 1, "\(made.warnings)")
        #expect(made.warnings.first?.hasPrefix("VAST ad 'A': MediaFile 1: \(name) ") == true, "\(made.warnings)")
        #expect(made.warnings.first?.hasSuffix("ignored") == true)
    }

    @Test func theLargestSizesCannotOverflowTheArea() throws {
        let made = try Self.make(Self.document(media: ["width": "16384", "height": "16384"]))
        #expect(made.warnings.isEmpty, "\(made.warnings)")
        let both = try Self.make(Self.document(media: ["width": "3037000500", "height": "3037000500"]))
        #expect(both.warnings.count == 2, "\(both.warnings)")
    }

    @Test(
        arguments: ["bitrate", "minBitrate", "maxBitrate"],
        ["9223372036854775807", "-9223372036854775808", "1000001", "0"])
    func aBitrateOutOfRangeIsAbsent(_ name: String, _ value: String) throws {
        for maxBitrate in [nil, 1000, Int.max, Int.min] {
            var options = VASTOptions()
            options.maxBitrate = maxBitrate
            let made = try Self.make(Self.document(media: [name: value]), options: options)
            #expect(made.ad.url == "https://ads.test/a.mp4")
            #expect(made.warnings.count == 1, "\(made.warnings)")
            #expect(made.warnings.first?.contains("\(name) ") == true, "\(made.warnings)")
        }
    }

    /// A file without `bitrate` is ranked by its `maxBitrate`, else its `minBitrate`.
    @Test func aMissingBitrateFallsBackToMaxThenMinBitrate() throws {
        let files = [
            XMLElement.media(1, ["bitrate": "3000"]), XMLElement.media(2, ["maxBitrate": "2500", "minBitrate": "100"]),
            XMLElement.media(3, ["minBitrate": "2000"]),
        ]
        var options = VASTOptions()
        options.maxBitrate = 2600
        var notes: [String] = []
        let ranked = VASTDocument.rankMedia(files, options, &notes).map(\.url)
        #expect(ranked == ["https://ads.test/2.mp4", "https://ads.test/3.mp4", "https://ads.test/1.mp4"])
        options.maxBitrate = nil
        #expect(
            VASTDocument.rankMedia(files, options, &notes).map(\.url) == [
                "https://ads.test/1.mp4", "https://ads.test/2.mp4", "https://ads.test/3.mp4",
            ])
        #expect(notes.isEmpty)
    }

    @Test func skipOffsets() throws {
        #expect(try Self.make(Self.document(skipoffset: "100%")).ad.vast?.skipOffset == 30)
        #expect(try Self.make(Self.document(skipoffset: "50%")).ad.vast?.skipOffset == 15)
        #expect(try Self.make(Self.document(skipoffset: "00:00:05.5")).ad.vast?.skipOffset == 5.5)
        #expect(try Self.make(Self.document(skipoffset: "24:00:00")).ad.vast?.skipOffset == 86400)
        for hostile in [
            "1e308%", "101%", "-1%", "nan%", "24:00:01", "9999999999999999:00:00", "2562047788015215:30:07",
        ] {
            let made = try Self.make(Self.document(skipoffset: hostile))
            #expect(made.ad.vast?.skipOffset == nil, "\(hostile)")
            #expect(made.warnings.count == 1, "\(hostile): \(made.warnings)")
            #expect(made.warnings.first?.hasPrefix("VAST ad 'A': skipoffset ") == true, "\(made.warnings)")
        }
    }

    @Test func expires() throws {
        #expect(try Self.make(Self.document(expires: "315360000")).ad.expires == Self.now + 315_360_000)
        #expect(try Self.make(Self.document(expires: "0")).ad.expires == Self.now)
        for hostile in ["1e300", "315360001", "-1", "nan", "inf", "1e400", "x"] {
            let made = try Self.make(Self.document(expires: hostile))
            #expect(made.ad.expires == nil, "\(hostile)")
            #expect(made.warnings.count == 1, "\(hostile): \(made.warnings)")
            #expect(made.warnings.first?.hasPrefix("VAST ad 'A': Expires ") == true, "\(made.warnings)")
        }
    }

    @Test func fileSizes() throws {
        let cap: Int64 = 100 << 20
        #expect(try Self.make(Self.document(media: ["fileSize": "1000"]), maxAssetSize: cap).ad.fileSize == 1000)
        #expect(try Self.make(Self.document(media: ["fileSize": "\(cap)"]), maxAssetSize: cap).ad.fileSize == cap)
        let unbounded = try Self.make(Self.document(media: ["fileSize": "9223372036854775807"]))
        #expect(unbounded.ad.fileSize == Int64.max && unbounded.warnings.isEmpty)
        for hostile in ["9223372036854775807", "9223372036854775808", "\(cap + 1)", "0", "-1", "1e3"] {
            let made = try Self.make(Self.document(media: ["fileSize": hostile]), maxAssetSize: cap)
            #expect(made.ad.fileSize == nil, "\(hostile)")
            #expect(made.ad.renditions == [VASTRendition(url: "https://ads.test/a.mp4", fileSize: nil)])
            #expect(made.warnings.count == 1, "\(hostile): \(made.warnings)")
        }
        // A cap of 0 (nothing fits) leaves no range to crash on.
        #expect(try Self.make(Self.document(media: ["fileSize": "5"]), maxAssetSize: 0).ad.fileSize == nil)
    }

    /// A pod's `sequence` out of range counts as absent: that ad is not in the pod and keeps
    /// its place, with a warning from the document.
    @Test(arguments: ["9223372036854775807", "1000001", "-1", "x"])
    func aSequenceOutOfRangeIsAbsent(_ sequence: String) throws {
        func firstID(_ sequence: String) throws -> (String?, [String]) {
            let text = String(decoding: Self.document(sequence: sequence), as: UTF8.self)
                .replacingOccurrences(of: "<Ad id=\"B\">", with: "<Ad id=\"B\" sequence=\"1\">")
            let doc = try VASTDocument.read(Array(text.utf8))
            guard case .inline(let id, _) = doc.entries.first else { return (nil, doc.warnings) }
            return (id, doc.warnings)
        }
        let (id, warnings) = try firstID(sequence)
        #expect(id == "A", "not in the pod: A keeps its place")
        #expect(warnings.count == 1, "\(warnings)")
        #expect(warnings.first?.hasPrefix("VAST ad 'A': sequence ") == true, "\(warnings)")
        let (pod, none) = try firstID("1000000")
        #expect(pod == "B", "a pod in order of sequence")
        #expect(none.isEmpty)
    }

    // MARK: adType

    @Test(arguments: ["audio", "hybrid", "Audio"])
    func audioAndHybridAdsAreSkippedWith200(_ type: String) throws {
        do {
            _ = try Self.make(Self.document(adType: type))
            Issue.record("an \(type) ad was made")
        } catch let e as VASTFailure {
            #expect(e.code == .unsupported, "\(e)")
        }
        #expect(try Self.make(Self.document(adType: "video")).ad.url == "https://ads.test/a.mp4")
    }

    @Test func anAudioWrapperIsNotFollowed() throws {
        let bytes = Array(
            """
            <VAST version="4.2"><Ad id="W" adType="audio"><Wrapper><AdSystem>t</AdSystem>
            <Error>https://ads.test/wrapper-error</Error>
            <VASTAdTagURI>https://ads.test/next.xml</VASTAdTagURI></Wrapper></Ad></VAST>
            """.utf8)
        let doc = try VASTDocument.read(bytes)
        guard case .inline(let id, let element) = try #require(doc.entries.first) else {
            Issue.record("an audio wrapper is followed")
            return
        }
        #expect(id == "W")
        #expect(element.children("Error").map(\.text) == ["https://ads.test/wrapper-error"])
        #expect(throws: VASTFailure.self) {
            try VASTDocument.ad(element, id: id, wrappers: VASTTrackers(), options: VASTOptions(), now: Self.now)
        }
    }

    // MARK: The next rendition

    /// The media-file rule as it chose one file before the ranking (SPEC §10 *Media file*):
    /// the reference the ranking's first element must equal.
    static func ruleChoice(_ files: [XMLElement], _ options: VASTOptions) -> String? {
        struct C {
            var url: String
            var width: Int
            var height: Int
            var bitrate: Int?
            var typeRank: Int
            var order: Int
            var area: Int { width * height }
        }
        let candidates = files.enumerated().compactMap { (i, f) -> C? in
            guard f.attribute("delivery") == "progressive", let t = f.attribute("type"),
                let rank = options.mediaTypes.firstIndex(of: t)
            else { return nil }
            return C(
                url: f.text, width: Int(f.attribute("width") ?? "") ?? 0, height: Int(f.attribute("height") ?? "") ?? 0,
                bitrate: Int(f.attribute("bitrate") ?? ""), typeRank: rank, order: i)
        }
        guard !candidates.isEmpty else { return nil }
        let fitting = candidates.filter { $0.width >= options.screenWidth && $0.height >= options.screenHeight }
        let size = fitting.isEmpty ? candidates.map(\.area).max()! : fitting.map(\.area).min()!
        let sized = (fitting.isEmpty ? candidates : fitting).filter { $0.area == size }
        func bitrateRank(_ c: C) -> Int {
            let b = c.bitrate ?? 0
            guard let max = options.maxBitrate else { return -b }
            let under = sized.contains { ($0.bitrate ?? 0) <= max }
            return under ? (b <= max ? max - b : Int.max) : b
        }
        return sized.min { a, b in
            (bitrateRank(a), a.typeRank, a.order) < (bitrateRank(b), b.typeRank, b.order)
        }!.url
    }

    @Test func theRankingIsTheRuleAppliedAgainAndAgain() {
        var rng = SplitMix(seed: 0x5EED_0F_AD)
        func pick<T>(_ values: [T]) -> T { values[Int(rng.next() % UInt64(values.count))] }
        for round in 0..<3000 {
            var options = VASTOptions()
            options.maxBitrate = pick([nil, 1000, 2500, 0])
            (options.screenWidth, options.screenHeight) = pick([(1920, 1080), (1280, 720), (640, 360)])
            if round % 5 == 0 { options.mediaTypes = ["video/webm", "video/mp4"] }
            let files = (0..<Int(1 + rng.next() % 7)).map { i -> XMLElement in
                var a: [String: String] = [
                    "delivery": pick(["progressive", "progressive", "progressive", "streaming"]),
                    "type": pick(["video/mp4", "video/webm", "video/quicktime"]),
                ]
                let (w, h) = pick([(640, 360), (1280, 720), (1920, 1080), (3840, 2160), (1080, 1920), (0, 0)])
                if w > 0 {
                    a["width"] = "\(w)"
                    a["height"] = "\(h)"
                }
                if let b = pick([nil, 500, 1000, 2000, 2500, 4000]) { a["bitrate"] = "\(b)" }
                return XMLElement.media(i, a)
            }
            var notes: [String] = []
            let ranked = VASTDocument.rankMedia(files, options, &notes).map(\.url)
            #expect(ranked.first == Self.ruleChoice(files, options), "round \(round)")
            // Removing the chosen one and ranking again gives the rest in the same order; the
            // rule, applied again and again, gives the whole ranking.
            if let first = ranked.first {
                let rest = files.filter { $0.text != first }
                #expect(VASTDocument.rankMedia(rest, options, &notes).map(\.url) == Array(ranked.dropFirst()))
            }
            var left = files
            var again: [String] = []
            while let next = Self.ruleChoice(left, options) {
                again.append(next)
                left.removeAll { $0.text == next }
            }
            #expect(again == ranked, "round \(round)")
            #expect(notes.isEmpty)
        }
    }

    @Test func aVideoAdCarriesItsRenditionsBestFirst() throws {
        let bytes = try Data(
            contentsOf: URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
                .appendingPathComponent("adcacheTests/Fixtures/VAST/VAST4.2-Inline_Simple.xml"))
        let made = try Self.make(Array(bytes))
        #expect(made.ad.renditions.count == 3)
        #expect(made.ad.renditions.first?.url == made.ad.url)
        #expect(made.ad.url.hasSuffix("VAST-4.0-Short-Intro.mp4"), "none fits 1920x1080: the largest")
        #expect(made.ad.renditions.map(\.url).last?.hasSuffix("low-resolution.mp4") == true)
    }

    // MARK: Parsing linear in the size, whatever the shape

    /// The fastest of three runs of `body`, in seconds.
    static func fastest(_ body: () -> Void) -> Double {
        (0..<3).map { _ in
            let t = monotonicNow()
            body()
            return monotonicNow() - t
        }.min()!
    }

    /// A plain VAST document of about `size` bytes: the simple sample's ad again and again.
    static func plain(size: Int) throws -> [UInt8] {
        let sample = try String(
            contentsOf: URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
                .appendingPathComponent("adcacheTests/Fixtures/VAST/VAST4.2-Inline_Simple.xml"), encoding: .utf8)
        let start = try #require(sample.range(of: "<Ad "))
        let end = try #require(sample.range(of: "</Ad>"))
        let ad = String(sample[start.lowerBound..<end.upperBound])
        var body = "<VAST version=\"4.2\">"
        while body.utf8.count < size - 10 { body += ad }
        return Array((body + "</VAST>").utf8)
    }

    @Test func aHundredThousandAttributesAreRefusedInLinearTime() throws {
        var hostile = Array("<VAST version=\"4.2\"><Ad".utf8)
        var i = 0
        while hostile.count < 1_000_000 {
            hostile += Array(" a\(i)=\"\"".utf8)
            i += 1
        }
        hostile += Array("/></VAST>".utf8)
        #expect(i >= 100_000)
        let plain = try Self.plain(size: hostile.count)
        do {
            _ = try VASTDocument.read(hostile)
            Issue.record("100,000 attributes were read")
        } catch {
            #expect(error.code == .xmlParse, "\(error)")
            #expect(error.reason.contains("more than 256 attributes"), "\(error)")
        }
        #expect(try VASTDocument.read(plain).entries.count > 100)
        let hostileTime = Self.fastest { _ = try? VASTDocument.read(hostile) }
        let plainTime = Self.fastest { _ = try? VASTDocument.read(plain) }
        #expect(hostileTime <= 10 * plainTime, "hostile \(hostileTime) s, plain \(plainTime) s")
    }

    /// The worst shape the scan admits (every element with 256 attributes, or 256 deep) is
    /// still within the loose bound of a plain document of the same size.
    @Test func theWorstAdmittedShapesStayLinear() throws {
        let attributes = (0..<256).map { " a\($0)=\"v\"" }.joined()
        var wide = "<VAST version=\"4.2\">"
        while wide.utf8.count < 1_000_000 { wide += "<Extension\(attributes)/>" }
        wide += "</VAST>"
        let deep = String(repeating: "<a x=\"1\">", count: 255) + String(repeating: "</a>", count: 255)
        var nested = "<VAST version=\"4.2\">"
        while nested.utf8.count < 1_000_000 { nested += deep }
        nested += "</VAST>"
        for shape in [Array(wide.utf8), Array(nested.utf8)] {
            let plain = try Self.plain(size: shape.count)
            #expect(throws: Never.self) { try VASTDocument.read(shape) }
            let shapeTime = Self.fastest { _ = try? VASTDocument.read(shape) }
            let plainTime = Self.fastest { _ = try? VASTDocument.read(plain) }
            #expect(shapeTime <= 10 * plainTime, "shape \(shapeTime) s, plain \(plainTime) s")
        }
    }

    @Test func aTwentyMegabyteDocumentParses() throws {
        let title = String(repeating: "x", count: 20 << 20)
        let bytes = Array(
            String(decoding: Self.document(), as: UTF8.self).replacingOccurrences(
                of: "<AdTitle>t</AdTitle>", with: "<AdTitle>\(title)</AdTitle>"
            ).utf8)
        #expect(bytes.count > 20 << 20)
        let made = try Self.make(bytes)
        #expect(made.ad.meta?.objectValue?["adTitle"]?.stringValue?.utf8.count == 20 << 20)
    }

    @Test func depthIsBounded() throws {
        func nested(_ depth: Int) -> [UInt8] {
            // The VAST root is one of the `depth` elements.
            Array(
                ("<VAST version=\"4.2\">" + String(repeating: "<x>", count: depth - 1)
                    + String(repeating: "</x>", count: depth - 1) + "</VAST>").utf8)
        }
        #expect(try VASTDocument.read(nested(200)).entries.isEmpty)
        #expect(try VASTDocument.read(nested(256)).entries.isEmpty)
        for depth in [257, 300, 100_000] {
            do {
                _ = try VASTDocument.read(nested(depth))
                Issue.record("\(depth) deep was read")
            } catch {
                #expect(error.code == .xmlParse && error.reason.contains("256 deep"), "\(error)")
            }
        }
    }

    /// The scan skips comments, CDATA, processing instructions and quoted values whole: what
    /// they hold counts as neither an attribute nor an element.
    @Test func theScanSkipsWhatIsNotMarkup() throws {
        let many = String(repeating: "<a b=\"c\">", count: 300)
        let bytes = Array(
            """
            <?xml version="1.0" encoding="UTF-8"?>
            <!-- \(many) <!DOCTYPE x> -->
            <VAST version="4.2" x="\(String(repeating: "= '>' /> &lt;", count: 300))" y='"="'>
            <?pi \(many) ?>
            <Error><![CDATA[https://ads.test/e?\(many)<!DOCTYPE x>]]></Error></VAST>
            """.utf8)
        #expect(try VASTDocument.read(bytes).entries.isEmpty)
        // 256 attributes are read; 257 are refused.
        let attributes = { (n: Int) in
            Array("<VAST\((0..<n).map { " a\($0)='1'" }.joined())/>".utf8)
        }
        #expect(throws: Never.self) { try VASTDocument.read(attributes(256)) }
        #expect(throws: VASTFailure.self) { try VASTDocument.read(attributes(257)) }
    }

    @Test(arguments: [
        "<VAST><x/><!DOCTYPE VAST [<!ENTITY a \"b\">]></VAST>",
        "<?xml version=\"1.0\" encoding=\"UTF-7\"?><VAST/>",
        "<?xml version=\"1.0\" encoding=\"ISO-2022-JP\"?><VAST/>",
        "<VAST>\u{0}</VAST>",
        "\u{FEFF}\u{FEFF}<VAST/>",
    ])
    func whatTheScanCannotReadIsRefused(_ text: String) {
        do {
            _ = try VASTDocument.read(Array(text.utf8))
            Issue.record("read: \(text)")
        } catch {
            #expect(error.code == .xmlParse, "\(error)")
        }
    }

    @Test func asciiCompatibleEncodingsAreRead() throws {
        for encoding in ["UTF-8", "utf-8", "ISO-8859-1", "windows-1252", "US-ASCII"] {
            let text = "<?xml version=\"1.0\" encoding=\"\(encoding)\"?><VAST version=\"4.2\"/>"
            #expect(try VASTDocument.read(Array(text.utf8)).entries.isEmpty, "\(encoding)")
        }
    }

    @Test func aDeadlineThatHasPassedStopsTheRead() throws {
        let plain = try Self.plain(size: 200_000)
        do {
            _ = try VASTDocument.read(plain, deadline: monotonicNow() - 1)
            Issue.record("read after its deadline")
        } catch {
            #expect(error.code == .wrapperTimeout && error.transient, "\(error)")
        }
        #expect(try VASTDocument.read(plain, deadline: monotonicNow() + 60).entries.count > 10)
    }
}

extension XMLElement {
    /// A `MediaFile` whose text is `https://ads.test/<n>.mp4`; progressive mp4 unless said.
    static func media(_ n: Int, _ attributes: [String: String]) -> XMLElement {
        var a = ["delivery": "progressive", "type": "video/mp4"]
        a.merge(attributes) { $1 }
        return XMLElement(
            name: "MediaFile", attributes: a.sorted { $0.key < $1.key }.map { ($0.key, $0.value) },
            text: "https://ads.test/\(n).mp4")
    }
}
