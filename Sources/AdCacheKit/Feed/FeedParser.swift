#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// Reads a feed in any of the shapes of SPEC §2 into `[FeedAd]`.
///
/// A feed that is not JSON or has no recognisable shape throws (exit 65). An ad that breaks a
/// rule is skipped with one warning naming it and the reason; a field that can be dropped
/// (`clickUrl`, `meta`) or defaulted (`duration`) is, with a warning.
struct FeedParser: Sendable {
    /// The feed's final URL after redirects; relative asset URLs resolve against it.
    var baseURL: URL
    /// `file:` assets are allowed only when the feed itself is a local file.
    var allowFileAssets: Bool

    /// The base of a feed read from standard input: nothing to resolve a relative URL against.
    static let standardInputBase = URL(string: "stdin:")!

    init(baseURL: URL) {
        self.baseURL = baseURL
        self.allowFileAssets = baseURL.isFileURL
    }

    func parse(_ bytes: [UInt8]) throws -> Feed {
        if bytes.allSatisfy({ $0 == 0x20 || $0 == 0x0A || $0 == 0x0D || $0 == 0x09 }) {
            throw AdCacheError.notAFeed("the feed is empty")
        }
        return try parse(JSONValue.parse(bytes))
    }

    func parse(_ json: JSONValue) throws -> Feed {
        var warnings: [Diagnostic] = []
        let items: [JSONValue]
        var reportUrl: String?
        if case .object(let o) = json, let v = present(o["reportUrl"]) {
            if let s = v.stringValue, Self.isWebURL(s) {
                reportUrl = s
            } else {
                warnings.append(Diagnostic(.feed, "ignoring the feed's \"reportUrl\": not an http or https URL"))
            }
        }
        switch json {
        case .array(let a):
            items = a
        case .object(let o):
            if let ads = o["ads"] {
                guard case .array(let a) = ads else {
                    throw AdCacheError.notAFeed("the feed's \"ads\" is \(ads.typeName), not an array")
                }
                if let v = o["version"], v.integerValue != 1 {
                    warnings.append(Diagnostic(.feed, "the feed's version is not 1; reading it as version 1"))
                }
                items = a
            } else if let body = o["body"], case .object(let b) = body, b["imgUrl"] != nil {
                var ad = b
                ad["url"] = b["imgUrl"]
                if ad["type"] == nil { ad["type"] = .string("image") }
                items = [.object(ad)]
            } else if o["picUrl"] != nil || o["url"] != nil {
                items = [json]
            } else {
                throw AdCacheError.notAFeed(
                    "the feed has no recognisable shape (expected an object with \"ads\", an array of ads, a legacy ad or a \"body\" envelope)"
                )
            }
        default:
            throw AdCacheError.notAFeed("the feed is \(json.typeName), not an object or an array")
        }

        var ads: [FeedAd] = []
        var seen = Set<String>()
        var tags: [VASTTag] = []
        for (index, item) in items.enumerated() {
            // `"vast": URL` instead of `url`: the ads of that VAST document (SPEC §10).
            if case .object(var o) = item, let v = present(o["vast"]), present(o["url"]) == nil {
                guard let url = v.stringValue, Self.isWebURL(url) else {
                    warnings.append(
                        Diagnostic(.feed, "skipping ad #\(index + 1): its \"vast\" is not an http or https URL"))
                    continue
                }
                o["url"] = .string(url)
                do {
                    let template = try parseAd(.object(o), index: index, warnings: &warnings)
                    tags.append(
                        VASTTag(
                            position: ads.count, url: url,
                            idPrefix: o["id"]?.stringValue.flatMap { $0.isEmpty ? nil : $0 },
                            template: template))
                } catch let e as AdError {
                    warnings.append(Diagnostic(.feed, ad: e.id, "skipping \(e.name): \(e.reason)"))
                }
                continue
            }
            do {
                let ad = try parseAd(item, index: index, warnings: &warnings)
                if !seen.insert(ad.id).inserted {
                    throw AdError(
                        name: "ad '\(ad.id)'", id: ad.id, reason: "its id is used by an earlier ad in the feed")
                }
                ads.append(ad)
            } catch let e as AdError {
                warnings.append(Diagnostic(.feed, ad: e.id, "skipping \(e.name): \(e.reason)"))
            }
        }
        var feed = Feed(ads: ads, warnings: warnings, reportUrl: reportUrl)
        feed.vastTags = tags
        feed.listed = items.count
        if case .object(let o) = json {
            feed.serial = present(o["serial"])?.integerValue.flatMap { $0 >= 1 ? $0 : nil }
            feed.validUntil = present(o["validUntil"]).flatMap(Time.parse)
        }
        return feed
    }

    /// An absolute http or https URL with a host that libcurl would accept (SPEC §2).
    static func isWebURL(_ s: String) -> Bool {
        guard let u = URL(string: s), let scheme = u.scheme?.lowercased() else { return false }
        return (scheme == "http" || scheme == "https") && hasUsableHost(u)
    }

    /// A host libcurl would parse — a name of letters, digits, `-`, `_` and `.` (or non-ASCII,
    /// an IDN), or a bracketed IPv6 address — and a port of 1–65535 when one is given: a URL
    /// libcurl refuses as malformed is an ad's broken rule, not a failure on every run.
    static func hasUsableHost(_ u: URL) -> Bool {
        if let port = u.port, !(1...65535).contains(port) { return false }
        // Decoded: an IDN may come percent-encoded (`b%C3%BCcher.de`), as libcurl reads it.
        guard let host = u.host(percentEncoded: false), !host.isEmpty, host.utf8.count <= 253 else { return false }
        let bare = host.hasPrefix("[") && host.hasSuffix("]") ? host.dropFirst().dropLast() : Substring(host)
        if bare.contains(":") {   // an IPv6 address, with its zone after a `%` (`fe80::1%eth0`)
            let zone = bare.firstIndex(of: "%")
            let address = bare[..<(zone ?? bare.endIndex)]
            let zoneName = zone.map { bare[bare.index(after: $0)...] } ?? ""
            return address.utf8.allSatisfy { isHexDigit($0) || $0 == 0x3A || $0 == 0x2E }
                && zoneName.unicodeScalars.allSatisfy {
                    $0.isASCII && ($0.properties.isAlphabetic || ("0"..."9").contains($0))
                }
        }
        return host.unicodeScalars.allSatisfy { c in
            !c.isASCII || ("a"..."z").contains(c) || ("A"..."Z").contains(c) || ("0"..."9").contains(c)
                || c == "-" || c == "_" || c == "."
        }
    }

    struct AdError: Error {
        var name: String
        var id: String?
        var reason: String
    }

    func parseAd(_ item: JSONValue, index: Int, warnings: inout [Diagnostic]) throws -> FeedAd {
        guard case .object(let o) = item else {
            throw AdError(name: "ad #\(index + 1)", reason: "it is \(item.typeName), not an object")
        }
        // The name used in warnings: the id when there is a usable one.
        var name = "ad #\(index + 1)"
        var knownID: String?
        if let id = o["id"]?.stringValue, !id.isEmpty { name = "ad '\(id.prefix(128))'"; knownID = id }
        func fail(_ reason: String) -> AdError { AdError(name: name, id: knownID, reason: reason) }

        guard let rawURL = o["url"] ?? o["picUrl"] ?? o["imgUrl"], rawURL != .null else {
            throw fail("it has no \"url\"")
        }
        guard let urlText = rawURL.stringValue else { throw fail("its \"url\" is \(rawURL.typeName), not a string") }
        let url = try resolve(urlText, fail: fail)

        var id = url
        if let rawID = o["id"], rawID != .null {
            guard let s = rawID.stringValue else { throw fail("its \"id\" is \(rawID.typeName), not a string") }
            guard !s.isEmpty, s.count <= 128 else { throw fail("its \"id\" must be 1 to 128 characters") }
            id = s
        }
        name = "ad '\(id)'"
        knownID = id
        var ad = FeedAd(id: id, url: url)

        if let t = present(o["type"]) {
            guard let s = t.stringValue, let type = AdType(rawValue: s) else {
                throw fail("its \"type\" must be \"image\" or \"video\"")
            }
            ad.type = type
        } else if let u = URL(string: url) {
            ad.type = MediaFormat.type(forExtension: u.pathExtension)
        }

        for (key, value) in [("start", o["start"]), ("expires", o["expires"] ?? o["timestamp"])] {
            guard let v = present(value) else { continue }
            guard let t = Time.parse(v) else {
                throw fail("its \"\(key)\" is not a time (Unix seconds, milliseconds or RFC 3339)")
            }
            if key == "start" { ad.start = t } else { ad.expires = t }
        }

        func count(_ key: String, _ value: JSONValue?) throws -> Int64? {
            guard let v = present(value) else { return nil }
            guard let i = v.integerValue, i >= 0 else { throw fail("its \"\(key)\" must be a whole number ≥ 0") }
            return i
        }
        ad.maxShows = try count("maxShows", o["maxShows"] ?? o["showTime"])
        ad.maxShowsPerDay = try count("maxShowsPerDay", o["maxShowsPerDay"])
        ad.minInterval = try count("minInterval", o["minInterval"])

        if let v = present(o["priority"]) {
            guard let p = v.integerValue else { throw fail("its \"priority\" must be a whole number") }
            ad.priority = p
        }
        if let v = present(o["placement"]) {
            guard let p = v.stringValue, !p.isEmpty else { throw fail("its \"placement\" must be a non-empty string") }
            ad.placement = p
        }
        if let v = present(o["sha256"]) {
            guard let s = v.stringValue, s.utf8.count == 64, s.utf8.allSatisfy({ isHexDigit($0) }) else {
                throw fail("its \"sha256\" must be 64 hex digits")
            }
            ad.sha256 = s.lowercased()
        }
        if let v = present(o["duration"]) {
            if let d = v.integerValue, FeedAd.durationRange.contains(Int(clamping: d)) {
                ad.duration = Int(d)
            } else {
                warnings.append(
                    Diagnostic(
                        .feed, ad: id,
                        "ad '\(id)': \"duration\" must be 3 to 5 seconds; using \(FeedAd.defaultDuration)"))
            }
        }
        if let v = present(o["clickUrl"]) {
            if let s = v.stringValue, Self.isWebURL(s) {
                ad.clickUrl = s
            } else {
                warnings.append(
                    Diagnostic(.feed, ad: id, "ad '\(id)': dropping \"clickUrl\": not an http or https URL"))
            }
        }
        if let v = present(o["rollout"]) {
            if let r = v.integerValue, (1...100).contains(r) {
                ad.rollout = r
            } else {
                warnings.append(
                    Diagnostic(
                        .feed, ad: id,
                        "ad '\(id)': ignoring \"rollout\": it must be a whole number from 1 to 100 (the ad goes to every device)"
                    ))
            }
        }
        if let v = present(o["weight"]) {
            if let w = v.integerValue, FeedAd.weightRange.contains(w) {
                ad.weight = w
            } else {
                warnings.append(
                    Diagnostic(
                        .feed, ad: id, "ad '\(id)': ignoring \"weight\": it must be a whole number from 1 to 1000"))
            }
        }
        /// A list of strings, or nil when the value is anything else.
        func strings(_ v: JSONValue) -> [String]? {
            guard let items = v.arrayValue else { return nil }
            let texts = items.compactMap(\.stringValue)
            return texts.count == items.count ? texts : nil
        }
        if let v = present(o["hours"]) {
            if let windows = strings(v).flatMap(Schedule.windows) {
                ad.schedule.windows = windows
            } else {
                warnings.append(
                    Diagnostic(
                        .feed, ad: id, "ad '\(id)': ignoring \"hours\": it must be a list of \"HH:MM-HH:MM\" windows"))
            }
        }
        if let v = present(o["days"]) {
            if let mask = strings(v).flatMap(Schedule.dayMask) {
                ad.schedule.days = mask
            } else {
                warnings.append(
                    Diagnostic(.feed, ad: id, "ad '\(id)': ignoring \"days\": it must be a list of \"mon\" … \"sun\""))
            }
        }
        ad.tracking = tracking(o, id: id, warnings: &warnings)
        if let v = present(o["meta"]) {
            if case .object = v {
                ad.meta = v
            } else {
                warnings.append(
                    Diagnostic(.feed, ad: id, "ad '\(id)': dropping \"meta\": it is \(v.typeName), not an object"))
            }
        }
        return ad
    }

    /// `tracking` (event → URLs) with its aliases `impressionUrls` and `clickTrackingUrls`
    /// (SPEC §2): other events, other schemes and values that are not strings are dropped,
    /// each with a warning.
    func tracking(_ o: [String: JSONValue], id: String, warnings: inout [Diagnostic]) -> [String: [String]] {
        var result: [String: [String]] = [:]
        func add(_ event: String, _ value: JSONValue, field: String) {
            guard let items = value.arrayValue else {
                warnings.append(
                    Diagnostic(.feed, ad: id, "ad '\(id)': ignoring \"\(field)\": it is not a list of URLs"))
                return
            }
            for item in items {
                guard let s = item.stringValue, Self.isWebURL(s) else {
                    warnings.append(
                        Diagnostic(.feed, ad: id, "ad '\(id)': dropping a \(event) tracker: not an http or https URL"))
                    continue
                }
                if !(result[event] ?? []).contains(s) { result[event, default: []].append(s) }
            }
        }
        if let v = present(o["tracking"]) {
            if case .object(let events) = v {
                for name in events.keys.sorted() {
                    guard FeedAd.trackedEvents.contains(name) else {
                        warnings.append(
                            Diagnostic(
                                .feed, ad: id,
                                "ad '\(id)': ignoring the tracking event '\(name)': not one of \(FeedAd.trackedEvents.joined(separator: ", "))"
                            ))
                        continue
                    }
                    if let urls = present(events[name]) { add(name, urls, field: "tracking.\(name)") }
                }
            } else {
                warnings.append(Diagnostic(.feed, ad: id, "ad '\(id)': ignoring \"tracking\": it is not an object"))
            }
        }
        if let v = present(o["impressionUrls"]) { add("impression", v, field: "impressionUrls") }
        if let v = present(o["clickTrackingUrls"]) { add("click", v, field: "clickTrackingUrls") }
        return result
    }

    /// A JSON value that is there and not null.
    private func present(_ v: JSONValue?) -> JSONValue? {
        guard let v, v != .null else { return nil }
        return v
    }

    /// Resolves an asset reference against the feed's URL, as a browser would, and checks
    /// its scheme.
    func resolve(_ text: String, fail: (String) -> AdError) throws -> String {
        let trimmed = text.trimmed()
        if baseURL == Self.standardInputBase, URL(string: trimmed)?.scheme == nil {
            throw fail("its \"url\" is relative, and a feed read from standard input has no URL to resolve it against")
        }
        guard !trimmed.isEmpty,
            let resolved = URL(string: trimmed, relativeTo: baseURL)?.absoluteURL
        else {
            throw fail("its \"url\" is not a valid URL")
        }
        switch resolved.scheme?.lowercased() {
        case "http", "https":
            guard let host = resolved.host, !host.isEmpty else { throw fail("its \"url\" has no host") }
            guard Self.hasUsableHost(resolved) else {
                throw fail(
                    "its \"url\" is malformed (a port above 65535, or a host that is not a host name or address)")
            }
        case "file":
            guard allowFileAssets else { throw fail("its \"url\" is a file: URL, allowed only in a local feed") }
        default:
            throw fail("its \"url\" scheme '\(resolved.scheme ?? "")' is not http or https")
        }
        return resolved.absoluteString
    }
}

private func isHexDigit(_ c: UInt8) -> Bool {
    (48...57).contains(c) || (65...70).contains(c) || (97...102).contains(c)
}
