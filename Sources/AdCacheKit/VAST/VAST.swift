#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// The device's side of VAST (SPEC §10): which media file suits it, and the values of the
/// IAB macros that describe it.
public struct VASTOptions: Sendable, Equatable {
    /// `screen = WIDTHxHEIGHT`: the width, in pixels.
    public var screenWidth = 1920
    /// The screen's height, in pixels.
    public var screenHeight = 1080
    /// `max-bitrate`, kbit/s.
    public var maxBitrate: Int?
    /// `media-types`: the video types that count, in order of preference.
    public var mediaTypes = ["video/mp4", "video/webm", "video/quicktime"]
    /// `limit-ad-tracking`: `[LIMITADTRACKING]`.
    public var limitAdTracking = false

    /// A 1920x1080 screen, no bitrate limit, MP4 then WebM then QuickTime, tracking not
    /// limited.
    public init() {}
}

/// VAST's error codes that adcache sends to `Error` URLs (SPEC §10).
enum VASTCode: Int, Sendable {
    case xmlParse = 100
    case schema = 101
    case unsupported = 200
    case wrapper = 300
    case wrapperTimeout = 301
    case wrapperLimit = 302
    case noAds = 303
    case mediaGeneral = 400
    case mediaNotFound = 401
    case mediaTimeout = 402
    case noMediaFile = 403
    case mediaMismatch = 405
    case undefined = 900
}

/// The trackers of an `InLine` or a `Wrapper`: a wrapped ad takes every wrapper's as well as
/// its own.
struct VASTTrackers: Sendable, Hashable {
    var impression: [String] = []
    var error: [String] = []
    /// `start` (with `creativeView`), the quartiles, `complete`, `skip`, `notUsed`.
    var events: [String: [String]] = [:]
    var click: [String] = []

    /// `progress` trackers with their `offset` as the document gives it (`HH:MM:SS[.mmm]` or
    /// `n%`), resolved against the InLine's `Duration` when the ad is made.
    var progress: [ProgressTracker] = []

    mutating func add(_ other: VASTTrackers) {
        impression += other.impression
        error += other.error
        click += other.click
        progress += other.progress
        for (k, v) in other.events { events[k, default: []] += v }
    }

    /// As a feed ad's `tracking` (SPEC §8 names, with VAST's events beside them).
    var tracking: [String: [String]] {
        var t = events
        if !impression.isEmpty { t["impression"] = impression }
        if !click.isEmpty { t["click"] = click }
        if !error.isEmpty { t["error"] = error }
        return t.filter { !$0.value.isEmpty }
    }

    static let events = ["start", "firstQuartile", "midpoint", "thirdQuartile", "complete", "skip", "notUsed"]

    /// A `progress` tracker (SPEC §10 v4).
    struct ProgressTracker: Sendable, Hashable {
        var offset: String
        var url: String
    }

    /// A record's `tracking` key for a `progress` tracker at `milliseconds` into the ad.
    static func progressKey(_ milliseconds: Int64) -> String { "progress@\(milliseconds)" }

    /// The offset, in milliseconds, of a `tracking` key `progressKey` made; nil for another key.
    static func progressOffset(_ key: String) -> Int64? {
        guard key.hasPrefix("progress@"), let ms = Int64(key.dropFirst("progress@".count)),
            (0...Int64(VASTLimits.seconds.upperBound * 1000)).contains(ms)
        else { return nil }
        return ms
    }
}

/// One `Ad` of a VAST document.
enum VASTEntry: Sendable {
    /// `id`: the `Ad`'s `id` attribute.
    case inline(id: String?, XMLElement)
    case wrapper(VASTWrapper)
}

struct VASTWrapper: Sendable, Hashable {
    var id: String?
    /// `VASTAdTagURI`, nil when absent or not http/https.
    var tagURI: String?
    var trackers: VASTTrackers
    var followAdditionalWrappers: Bool
    var allowMultipleAds: Bool
}

/// A VAST document: its ads in order, the root's `Error` URLs, and the `adcache` Extension
/// of a signed feed (SPEC §11).
struct VASTDocument: Sendable {
    var entries: [VASTEntry] = []
    var rootErrors: [String] = []
    var serial: Int64?
    var validUntil: Double?
    /// One line for each number of an `Ad` that was out of its range and ignored (`sequence`).
    var warnings: [String] = []

    /// Reads `bytes`. Throws a one-line reason (`code`: the VAST error it is). `deadline`
    /// (monotonic seconds): a failure once it has passed, before or while the bytes are read.
    static func read(_ bytes: [UInt8], deadline: Double? = nil) throws(VASTFailure) -> VASTDocument {
        let root: XMLElement
        do {
            root = try XMLReader.parse(bytes, deadline: deadline)
        } catch {
            switch error {
            case .doctype: throw VASTFailure(.xmlParse, "it has a DOCTYPE (refused: no DTD is read)")
            case .notWellFormed(let why): throw VASTFailure(.xmlParse, "not well-formed XML (\(why))")
            case .libraryMissing(let why): throw VASTFailure(.undefined, why, libraryMissing: true)
            case .deadline: throw VASTFailure(.wrapperTimeout, "the deadline passed while reading it", transient: true)
            }
        }
        guard root.name == "VAST" else {
            throw VASTFailure(.schema, "its root element is <\(root.name)>, not <VAST>")
        }
        var doc = VASTDocument()
        doc.rootErrors = root.children("Error").compactMap { webURL($0.text) }
        if let ext = root.at("Extensions")?.children("Extension").first(where: { $0.attribute("type") == "adcache" }) {
            doc.serial = ext.child("Serial").flatMap { JSONValue.string($0.text).integerValue }.flatMap {
                $0 >= 1 ? $0 : nil
            }
            doc.validUntil = ext.child("ValidUntil").flatMap { Time.parse($0.text) }
        }
        // Pods (`sequence`) in order of sequence, in the places pods hold; the rest in order.
        // A sequence out of its range counts as absent: that ad is not in the pod.
        let ads = root.children("Ad")
        let pod = ads.enumerated().compactMap { i, ad -> (offset: Int, sequence: Int, ad: XMLElement)? in
            var notes: [String] = []
            let sequence = bounded(ad.attribute("sequence"), "sequence", VASTLimits.sequence, &notes)
            let name = ad.attribute("id").flatMap { $0.isEmpty ? nil : $0 } ?? "#\(i + 1)"
            doc.warnings += notes.map { "VAST ad '\(name)': \($0)" }
            return sequence.map { (i, $0, ad) }
        }
        let ordered = pod.sorted { ($0.sequence, $0.offset) < ($1.sequence, $1.offset) }
        var sorted = ads
        for (slot, ad) in zip(pod.map(\.offset), ordered.map(\.ad)) { sorted[slot] = ad }
        for ad in sorted {
            let id = ad.attribute("id").flatMap { $0.isEmpty ? nil : $0 }
            // An audio or hybrid ad (SPEC §10 (v4)) is not followed nor made: it stands as an
            // element named `Ad` (its InLine's or Wrapper's children, for their `Error` URLs),
            // which `ad()` refuses with 200.
            if let type = ad.attribute("adType"), VASTLimits.unsupportedAdTypes.contains(type.lowercased()),
                var body = ad.child("InLine") ?? ad.child("Wrapper")
            {
                body.name = "Ad"
                body.attributes = ad.attributes
                doc.entries.append(.inline(id: id, body))
            } else if let inline = ad.child("InLine") {
                doc.entries.append(.inline(id: id, inline))
            } else if let w = ad.child("Wrapper") {
                doc.entries.append(
                    .wrapper(
                        VASTWrapper(
                            id: id, tagURI: w.child("VASTAdTagURI").flatMap { webURL($0.text) },
                            trackers: trackers(of: w, creative: nil),
                            followAdditionalWrappers: boolean(w.attribute("followAdditionalWrappers")) ?? true,
                            allowMultipleAds: boolean(w.attribute("allowMultipleAds")) ?? false)))
            }
        }
        return doc
    }

    /// An XML Schema boolean.
    static func boolean(_ s: String?) -> Bool? {
        switch s {
        case "true", "1": return true
        case "false", "0": return false
        default: return nil
        }
    }

    /// An http or https URL with a host, trimmed; `about:blank` and the rest are nil.
    static func webURL(_ s: String) -> String? {
        let t = s.trimmedWithNewlines()
        return FeedParser.isWebURL(t) ? t : nil
    }

    /// The trackers of an `InLine` or `Wrapper`: its `Impression`s and `Error`s, and those of
    /// `creative` (or, for a wrapper, of every creative).
    static func trackers(of element: XMLElement, creative: XMLElement?) -> VASTTrackers {
        var t = VASTTrackers()
        t.impression = element.children("Impression").compactMap { webURL($0.text) }
        t.error = element.children("Error").compactMap { webURL($0.text) }
        let creatives = creative.map { [$0] } ?? (element.child("Creatives")?.children("Creative") ?? [])
        for c in creatives {
            for holder in [c.child("Linear"), c.child("NonLinearAds"), c.child("CompanionAds")].compactMap({ $0 }) {
                for tracking in holder.descendants("Tracking") {
                    guard var event = tracking.attribute("event"), let url = webURL(tracking.text) else { continue }
                    if event == "progress" {
                        if let offset = tracking.attribute("offset") {
                            t.progress.append(.init(offset: offset, url: url))
                        }
                        continue
                    }
                    if event == "creativeView" { event = "start" }
                    if VASTTrackers.events.contains(event) { t.events[event, default: []].append(url) }
                }
            }
            t.click += (c.child("Linear")?.child("VideoClicks")?.children("ClickTracking") ?? []).compactMap {
                webURL($0.text)
            }
            t.click += c.descendants("NonLinearClickTracking").compactMap { webURL($0.text) }
            t.click += c.descendants("CompanionClickTracking").compactMap { webURL($0.text) }
        }
        return t
    }
}

/// Why a VAST document, or an ad of one, cannot be used: the VAST error code to send, and a
/// one-line reason.
struct VASTFailure: Error, Sendable {
    var code: VASTCode
    var reason: String
    var transient = false
    var libraryMissing = false

    init(_ code: VASTCode, _ reason: String, transient: Bool = false, libraryMissing: Bool = false) {
        self.code = code
        self.reason = reason
        self.transient = transient
        self.libraryMissing = libraryMissing
    }
}

/// An `InLine` made into a feed ad for this device (SPEC §10 *Ads*, *Media file*, *Fields*).
extension VASTDocument {
    static let imageTypes: [String: AdType] = [
        "image/jpeg": .image, "image/png": .image, "image/gif": .image, "image/webp": .image,
    ]

    /// `now`: the trusted time of the fetch, for `Expires`. `wrappers`: the trackers of
    /// every wrapper above it. `maxAssetSize`: the run's cap, the top of `fileSize`'s range.
    /// A number out of its range (SPEC §10 (v4) *Bounded numbers*) is ignored with one of
    /// the warnings returned; a `Linear` without a valid `Duration` throws 101.
    static func ad(
        _ inline: XMLElement, id adID: String?, wrappers: VASTTrackers, options: VASTOptions, now: Double,
        maxAssetSize: Int64 = Int64.max
    ) throws(VASTFailure) -> VASTAd {
        if inline.name == "Ad" {
            throw VASTFailure(
                .unsupported,
                "its adType is \(short(inline.attribute("adType") ?? "")) (adcache plays video and images)")
        }
        let creatives = inline.child("Creatives")?.children("Creative") ?? []
        var url: String
        var type: AdType
        var duration = FeedAd.defaultDuration
        var skipOffset: Double?
        var clickUrl: String?
        var fileSize: Int64?
        var renditions: [VASTRendition] = []
        var notes: [String] = []
        let creative: XMLElement
        if let c = creatives.first(where: { $0.child("Linear") != nil }), let linear = c.child("Linear") {
            creative = c
            guard let text = linear.child("Duration")?.text else {
                throw VASTFailure(.schema, "its Linear has no Duration")
            }
            guard let seconds = clock(text), VASTLimits.seconds.contains(seconds) else {
                throw VASTFailure(.schema, "its Linear's Duration '\(short(text))' is not a time from 0 to 24:00:00")
            }
            duration = max(1, Int(seconds.rounded(.up)))
            renditions = rankMedia(
                linear.child("MediaFiles")?.children("MediaFile") ?? [], options, maxAssetSize: maxAssetSize, &notes)
            guard let media = renditions.first else {
                throw VASTFailure(
                    .noMediaFile,
                    "no progressive media file of a supported type (\(options.mediaTypes.joined(separator: ", ")))")
            }
            url = media.url
            fileSize = media.fileSize
            type = .video
            if let s = linear.attribute("skipoffset") {
                if s.hasSuffix("%") {
                    if let p = Double(s.dropLast()), (0...100).contains(p) {
                        skipOffset = seconds * p / 100
                    } else {
                        notes.append("skipoffset '\(short(s))' is not a percentage from 0 to 100; ignored")
                    }
                } else if let t = clock(s), VASTLimits.seconds.contains(t) {
                    skipOffset = t
                } else {
                    notes.append("skipoffset '\(short(s))' is not a time from 0 to 24:00:00; ignored")
                }
            }
            clickUrl = linear.at("VideoClicks", "ClickThrough").flatMap { webURL($0.text) }
        } else if let (c, resource, click) = staticImage(creatives) {
            creative = c
            url = resource
            type = .image
            clickUrl = click
        } else {
            throw VASTFailure(.unsupported, "no video or image creative adcache can show (VPAID, interactive or audio)")
        }
        var all = wrappers
        all.add(Self.trackers(of: inline, creative: creative))
        // AdVerifications (inside an Extension in VAST 3 and 4.0): no script runs here.
        let verifications =
            (inline.child("AdVerifications")?.children("Verification") ?? [])
            + (inline.child("Extensions")?.children("Extension").filter { $0.attribute("type") == "AdVerifications" }
                .flatMap { $0.child("AdVerifications")?.children("Verification") ?? [] } ?? [])
        let notExecuted = verifications.flatMap { $0.descendants("Tracking") }.filter {
            $0.attribute("event") == "verificationNotExecuted"
        }.compactMap { webURL($0.text) }

        let servingID = inline.child("AdServingId")?.text.nilIfEmpty
        let universal = creative.children("UniversalAdId").compactMap { u -> String? in
            let registry = u.attribute("idRegistry") ?? "unknown"
            return u.text.isEmpty ? nil : "\(registry) \(u.text)"
        }
        var ad = FeedAd(id: adID ?? servingID ?? url, url: url)
        ad.type = type
        ad.duration = duration
        ad.clickUrl = clickUrl
        ad.fileSize = fileSize
        ad.renditions = renditions
        ad.vast = VASTFields(
            skipOffset: skipOffset, adServingId: servingID,
            universalAdId: universal.isEmpty ? nil : universal.joined(separator: ","))
        ad.tracking = all.tracking
        if !notExecuted.isEmpty { ad.tracking["verificationNotExecuted"] = notExecuted }
        // `progress` at its offset (SPEC §10 v4): a time, or a share of the Duration, 0 to 24
        // hours; one that is neither is ignored with a warning.
        if type == .video {
            for p in all.progress {
                let text = p.offset.trimmed()
                var seconds: Double?
                if text.hasSuffix("%") {
                    if let share = Double(text.dropLast()), (0...100).contains(share) {
                        seconds = Double(duration) * share / 100
                    }
                } else if let t = clock(text), VASTLimits.seconds.contains(t) {
                    seconds = t
                }
                guard let seconds, VASTLimits.seconds.contains(seconds) else {
                    notes.append(
                        "a progress tracker's offset '\(short(text))' is not a time from 0 to 24:00:00 nor a percentage; ignored"
                    )
                    continue
                }
                ad.tracking[VASTTrackers.progressKey(Int64((seconds * 1000).rounded())), default: []].append(p.url)
            }
        }
        if let text = inline.child("Expires")?.text {
            if let e = Double(text), VASTLimits.expires.contains(e) {
                ad.expires = now + e
            } else {
                notes.append("Expires '\(short(text))' is not a number of seconds from 0 to 10 years; ignored")
            }
        }
        var meta: [String: JSONValue] = [:]
        if let s = inline.child("AdSystem")?.text.nilIfEmpty { meta["adSystem"] = .string(s) }
        if let s = inline.child("AdTitle")?.text.nilIfEmpty { meta["adTitle"] = .string(s) }
        if let s = servingID { meta["adServingId"] = .string(s) }
        if !universal.isEmpty { meta["universalAdId"] = .string(universal.joined(separator: ",")) }
        if let s = inline.child("Advertiser")?.text.nilIfEmpty { meta["advertiser"] = .string(s) }
        if !meta.isEmpty { ad.meta = .object(meta) }
        return VASTAd(ad: ad, warnings: notes.map { "VAST ad '\(ad.id)': \($0)" })
    }

    /// The first `StaticResource` image of a `NonLinear` or `Companion`, with its click-through.
    static func staticImage(_ creatives: [XMLElement]) -> (XMLElement, String, String?)? {
        for c in creatives {
            for (holder, item, click) in [
                ("NonLinearAds", "NonLinear", "NonLinearClickThrough"),
                ("CompanionAds", "Companion", "CompanionClickThrough"),
            ] {
                for element in c.child(holder)?.children(item) ?? [] {
                    for r in element.children("StaticResource") {
                        guard let t = r.attribute("creativeType")?.lowercased(), imageTypes[t] != nil,
                            let url = webURL(r.text)
                        else { continue }
                        return (c, url, element.child(click).flatMap { webURL($0.text) })
                    }
                }
            }
        }
        return nil
    }

    /// The media files this device can play, best first (SPEC §10 *Media file*, and (v4)
    /// *The next rendition*): element 0 is the rule's choice, element 1 the choice once 0 is
    /// gone, and so on. The rule as one total order: the files that fit the screen, smallest
    /// first, then those that do not, largest first; among equal sizes, with `max-bitrate`
    /// the bitrates not above it, highest first, then those above it, lowest first (without
    /// one, highest first); then the order of `media-types`; then document order. Numbers out
    /// of their range count as absent, with a line in `notes`.
    static func rankMedia(
        _ files: [XMLElement], _ options: VASTOptions, maxAssetSize: Int64 = Int64.max, _ notes: inout [String]
    ) -> [VASTRendition] {
        struct Candidate {
            var url: String
            var width: Int
            var height: Int
            var bitrate: Int?
            var typeRank: Int
            var order: Int
            var fileSize: Int64?
            /// At most 16384², as width and height are bounded.
            var area: Int { width * height }
        }
        let types = options.mediaTypes.map { $0.lowercased() }
        let candidates = files.enumerated().compactMap { (i, f) -> Candidate? in
            // An interactive unit (VPAID) is code, not a video to play.
            guard f.attribute("delivery")?.lowercased() == "progressive", f.attribute("apiFramework") == nil,
                let type = f.attribute("type")?.lowercased(), let rank = types.firstIndex(of: type),
                let url = webURL(f.text)
            else { return nil }
            var own: [String] = []
            func number(_ name: String, _ range: ClosedRange<Int>) -> Int? {
                bounded(f.attribute(name), name, range, &own)
            }
            let width = number("width", VASTLimits.pixels) ?? 0
            let height = number("height", VASTLimits.pixels) ?? 0
            let bitrate = number("bitrate", VASTLimits.bitrate)
            let maxBitrate = number("maxBitrate", VASTLimits.bitrate)
            let minBitrate = number("minBitrate", VASTLimits.bitrate)
            let fileSize = bounded(f.attribute("fileSize"), "fileSize", 1...max(1, maxAssetSize), &own)
            notes += own.map { "MediaFile \(i + 1): \($0)" }
            return Candidate(
                url: url, width: width, height: height, bitrate: bitrate ?? maxBitrate ?? minBitrate, typeRank: rank,
                order: i, fileSize: fileSize)
        }
        let screen = (width: options.screenWidth, height: options.screenHeight)
        // Comparisons, not arithmetic on the configured max-bitrate: nothing can overflow.
        func key(_ c: Candidate) -> (Int, Int, Int, Int, Int, Int) {
            let fits = c.width >= screen.width && c.height >= screen.height
            let b = c.bitrate ?? 0
            let rate: (Int, Int)
            if let max = options.maxBitrate {
                rate = b <= max ? (0, -b) : (1, b)
            } else {
                rate = (0, -b)
            }
            return (fits ? 0 : 1, fits ? c.area : -c.area, rate.0, rate.1, c.typeRank, c.order)
        }
        return candidates.map { (key($0), $0) }.sorted { $0.0 < $1.0 }.map {
            VASTRendition(url: $0.1.url, fileSize: $0.1.fileSize)
        }
    }

    /// `text` as a whole number in `range`: nil when absent, and nil with a line in `notes`
    /// when it does not parse or lies outside the range.
    static func bounded<T: FixedWidthInteger>(
        _ text: String?, _ name: String, _ range: ClosedRange<T>, _ notes: inout [String]
    ) -> T? {
        guard let text else { return nil }
        if let v = T(text), range.contains(v) { return v }
        let digits = !text.isEmpty && text.drop { $0 == "-" || $0 == "+" }.allSatisfy { $0.isASCII && $0.isNumber }
        let what = digits ? "is out of range" : "is not a whole number"
        notes.append("\(name) \(short(text)) \(what) (\(range.lowerBound)–\(range.upperBound)); ignored")
        return nil
    }

    /// A value from the document as a warning quotes it: at most 40 characters.
    static func short(_ s: String) -> String {
        s.count > 40 ? String(s.prefix(40)) + "…" : s
    }

    /// `HH:MM:SS` or `HH:MM:SS.mmm` in seconds.
    static func clock(_ s: String) -> Double? {
        let parts = s.trimmed().split(separator: ":", omittingEmptySubsequences: false)
        let digits = { (p: Substring) in !p.isEmpty && p.allSatisfy { $0.isASCII && $0.isNumber } }
        guard parts.count == 3, digits(parts[0]), digits(parts[1]), let h = Int(parts[0]), let m = Int(parts[1]),
            (0..<60).contains(m),
            let sec = Double(parts[2]), sec >= 0, sec < 60, h >= 0, parts[2].first?.isNumber == true
        else { return nil }
        // In Double: an hour count of any size cannot overflow (the caller bounds the result).
        return Double(h) * 3600 + Double(m * 60) + sec
    }
}

/// An `InLine` made into an ad, with the warnings about numbers of it that were ignored (one
/// line each, naming the ad).
struct VASTAd: Sendable {
    var ad: FeedAd
    var warnings: [String]
}

/// A media file of a VAST ad, in the order of the media-file rule (SPEC §10 (v4) *The next
/// rendition*): what the fetch tries when the one before it fails for good.
struct VASTRendition: Equatable, Sendable {
    var url: String
    /// `fileSize` as the document gives it (1 byte to the run's max asset size), else nil.
    var fileSize: Int64?
}

/// The ranges of a VAST document's numbers (SPEC §10 (v4) *Bounded numbers*): a value
/// outside its range, or one that does not parse, counts as absent.
enum VASTLimits {
    /// `Duration` and `skipoffset`: 0 to 24 hours.
    static let seconds = 0.0...86400
    /// `width` and `height`.
    static let pixels = 1...16384
    /// `bitrate`, `minBitrate`, `maxBitrate`, kbit/s.
    static let bitrate = 1...1_000_000
    /// `Expires`: 0 to 10 years, in seconds.
    static let expires = 0.0...Double(10 * 365 * 86400)
    static let sequence = 0...1_000_000
    /// `adType`s adcache does not play (error 200).
    static let unsupportedAdTypes: Set<String> = ["audio", "hybrid"]
}

/// What a VAST ad carries beyond a JSON feed's fields.
struct VASTFields: Equatable, Sendable {
    var skipOffset: Double?
    var adServingId: String?
    var universalAdId: String?
}

extension String {
    var nilIfEmpty: String? { isEmpty ? nil : self }
}
