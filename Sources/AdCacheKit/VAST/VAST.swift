#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// The device's side of VAST (SPEC §10): which media file suits it, and the values of the
/// IAB macros that describe it.
public struct VASTOptions: Sendable, Equatable {
    /// `screen = WIDTHxHEIGHT`.
    public var screenWidth = 1920
    public var screenHeight = 1080
    /// `max-bitrate`, kbit/s.
    public var maxBitrate: Int?
    /// `media-types`: the video types that count, in order of preference.
    public var mediaTypes = ["video/mp4", "video/webm", "video/quicktime"]
    /// `limit-ad-tracking`: `[LIMITADTRACKING]`.
    public var limitAdTracking = false

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
struct VASTTrackers: Sendable, Equatable {
    var impression: [String] = []
    var error: [String] = []
    /// `start` (with `creativeView`), the quartiles, `complete`, `skip`, `notUsed`.
    var events: [String: [String]] = [:]
    var click: [String] = []

    mutating func add(_ other: VASTTrackers) {
        impression += other.impression
        error += other.error
        click += other.click
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
}

/// One `Ad` of a VAST document.
enum VASTEntry: Sendable {
    /// `id`: the `Ad`'s `id` attribute.
    case inline(id: String?, XMLElement)
    case wrapper(VASTWrapper)
}

struct VASTWrapper: Sendable {
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

    /// Reads `bytes`. Throws a one-line reason (`code`: the VAST error it is).
    static func read(_ bytes: [UInt8]) throws(VASTFailure) -> VASTDocument {
        let root: XMLElement
        do {
            root = try XMLReader.parse(bytes)
        } catch {
            switch error {
            case .doctype: throw VASTFailure(.xmlParse, "it has a DOCTYPE (refused: no DTD is read)")
            case .notWellFormed(let why): throw VASTFailure(.xmlParse, "not well-formed XML (\(why))")
            case .libraryMissing(let why): throw VASTFailure(.undefined, why, libraryMissing: true)
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
        let ads = root.children("Ad")
        let pod = ads.enumerated().filter { $0.element.attribute("sequence") != nil }
        let ordered = pod.sorted {
            (Int($0.element.attribute("sequence") ?? "") ?? .max, $0.offset)
                < (Int($1.element.attribute("sequence") ?? "") ?? .max, $1.offset)
        }
        var sorted = ads
        for (slot, ad) in zip(pod.map(\.offset), ordered.map(\.element)) { sorted[slot] = ad }
        for ad in sorted {
            let id = ad.attribute("id").flatMap { $0.isEmpty ? nil : $0 }
            if let inline = ad.child("InLine") {
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
    /// every wrapper above it.
    static func ad(
        _ inline: XMLElement, id adID: String?, wrappers: VASTTrackers, options: VASTOptions, now: Double
    ) throws(VASTFailure) -> (ad: FeedAd, fileSize: Int64?) {
        let creatives = inline.child("Creatives")?.children("Creative") ?? []
        var url: String
        var type: AdType
        var duration = FeedAd.defaultDuration
        var skipOffset: Double?
        var clickUrl: String?
        var fileSize: Int64?
        let creative: XMLElement
        if let c = creatives.first(where: { $0.child("Linear") != nil }), let linear = c.child("Linear") {
            creative = c
            guard let seconds = linear.child("Duration").flatMap({ clock($0.text) }), seconds >= 0 else {
                throw VASTFailure(.schema, "its Linear has no valid Duration")
            }
            duration = max(1, Int(seconds.rounded(.up)))
            guard let media = chooseMedia(linear.child("MediaFiles")?.children("MediaFile") ?? [], options) else {
                throw VASTFailure(
                    .noMediaFile,
                    "no progressive media file of a supported type (\(options.mediaTypes.joined(separator: ", ")))")
            }
            url = media.url
            fileSize = media.fileSize
            type = .video
            if let s = linear.attribute("skipoffset") {
                if s.hasSuffix("%"), let p = Double(s.dropLast()), p >= 0, p <= 100 {
                    skipOffset = seconds * p / 100
                } else {
                    skipOffset = clock(s)
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
        ad.vast = VASTFields(
            skipOffset: skipOffset, adServingId: servingID,
            universalAdId: universal.isEmpty ? nil : universal.joined(separator: ","))
        ad.tracking = all.tracking
        if !notExecuted.isEmpty { ad.tracking["verificationNotExecuted"] = notExecuted }
        if let e = inline.child("Expires").flatMap({ Double($0.text) }), e >= 0 { ad.expires = now + e }
        var meta: [String: JSONValue] = [:]
        if let s = inline.child("AdSystem")?.text.nilIfEmpty { meta["adSystem"] = .string(s) }
        if let s = inline.child("AdTitle")?.text.nilIfEmpty { meta["adTitle"] = .string(s) }
        if let s = servingID { meta["adServingId"] = .string(s) }
        if !universal.isEmpty { meta["universalAdId"] = .string(universal.joined(separator: ",")) }
        if let s = inline.child("Advertiser")?.text.nilIfEmpty { meta["advertiser"] = .string(s) }
        if !meta.isEmpty { ad.meta = .object(meta) }
        return (ad, fileSize)
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

    /// The media file for this device (SPEC §10 *Media file*).
    static func chooseMedia(_ files: [XMLElement], _ options: VASTOptions) -> (url: String, fileSize: Int64?)? {
        struct Candidate {
            var url: String
            var width: Int
            var height: Int
            var bitrate: Int?
            var typeRank: Int
            var order: Int
            var fileSize: Int64?
            var area: Int { width * height }
        }
        let types = options.mediaTypes.map { $0.lowercased() }
        let candidates = files.enumerated().compactMap { (i, f) -> Candidate? in
            // An interactive unit (VPAID) is code, not a video to play.
            guard f.attribute("delivery")?.lowercased() == "progressive", f.attribute("apiFramework") == nil,
                let type = f.attribute("type")?.lowercased(), let rank = types.firstIndex(of: type),
                let url = webURL(f.text)
            else { return nil }
            return Candidate(
                url: url, width: Int(f.attribute("width") ?? "") ?? 0, height: Int(f.attribute("height") ?? "") ?? 0,
                bitrate: Int(f.attribute("bitrate") ?? ""), typeRank: rank, order: i,
                fileSize: f.attribute("fileSize").flatMap { Int64($0) })
        }
        guard !candidates.isEmpty else { return nil }
        let fitting = candidates.filter { $0.width >= options.screenWidth && $0.height >= options.screenHeight }
        let size = fitting.isEmpty ? candidates.map(\.area).max()! : fitting.map(\.area).min()!
        let sized = (fitting.isEmpty ? candidates : fitting).filter { $0.area == size }
        // Bitrate: the closest to max-bitrate without exceeding it (all exceed: the lowest);
        // with no max-bitrate, the highest.
        func bitrateRank(_ c: Candidate) -> Int {
            let b = c.bitrate ?? 0
            guard let max = options.maxBitrate else { return -b }
            let under = sized.contains { ($0.bitrate ?? 0) <= max }
            return under ? (b <= max ? max - b : Int.max) : b
        }
        let best = sized.min { a, b in
            (bitrateRank(a), a.typeRank, a.order) < (bitrateRank(b), b.typeRank, b.order)
        }!
        return (best.url, best.fileSize)
    }

    /// `HH:MM:SS` or `HH:MM:SS.mmm` in seconds.
    static func clock(_ s: String) -> Double? {
        let parts = s.trimmed().split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count == 3, let h = Int(parts[0]), let m = Int(parts[1]), (0..<60).contains(m),
            let sec = Double(parts[2]), sec >= 0, sec < 60, h >= 0, parts[2].first?.isNumber == true
        else { return nil }
        return Double(h * 3600 + m * 60) + sec
    }
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
