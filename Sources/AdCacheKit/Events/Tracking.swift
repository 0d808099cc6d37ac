#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

extension AdCache {
    /// Proof of play (SPEC §8): who this device is, where batches go, and how the queue is
    /// bounded.
    public struct ProofOfPlay: Sendable {
        /// `[DEVICEID]` in tracker URLs and `device` in batch reports; nil is empty / null.
        public var deviceId: String?
        /// Where events are POSTed in batches; nil uses the feed's `reportUrl`, if any.
        public var reportUrl: String?
        /// At most this many events queued; the oldest go first (counted as dropped).
        public var maxEvents = 100_000
        /// Events older than this many days are dropped (counted).
        public var maxEventAge = 30
        /// `[PLAYERSIZE]` of VAST trackers: the screen, `WIDTH,HEIGHT` (SPEC §10).
        public var playerSize = "1920,1080"
        /// `[LIMITADTRACKING]` of VAST trackers.
        public var limitAdTracking = false
        /// `render-timeout`: seconds a show `next --render` recorded waits for its
        /// confirmation before it counts `unrendered` (SPEC §8).
        public var renderTimeout: Double = 600
        /// `ledger-dir`: where folds append every show and event to the ledger (SPEC §14),
        /// outside the cache; nil keeps no ledger. See `AdCache.defaultLedgerDirectory`.
        public var ledgerDirectory: String?
        /// `device-key`: the device's secret key for signing exports; nil is
        /// `<ledgerDirectory>/device.key`.
        public var deviceKey: String?

        /// Proof of play with this device id, report URL and queue bounds; the other settings
        /// at their defaults (no ledger).
        public init(deviceId: String? = nil, reportUrl: String? = nil, maxEvents: Int = 100_000, maxEventAge: Int = 30)
        {
            self.deviceId = deviceId
            self.reportUrl = reportUrl
            self.maxEvents = maxEvents
            self.maxEventAge = maxEventAge
        }

        var bounds: EventBounds {
            EventBounds(maxEvents: maxEvents, maxAge: maxEventAge, renderTimeout: renderTimeout)
        }

        /// The journal record of `event` for `ad` at `t`: a fresh nonce and cachebusting
        /// value, the tracker URLs with their macros expanded (a retry sends the very same
        /// URL), and a place in a batch report when there is somewhere to send it. A VAST
        /// ad's show also calls its `start` trackers (and, at its first show, its
        /// `verificationNotExecuted` ones), in the same record (SPEC §10).
        func record(_ event: String, of ad: AdRecord, at t: Double, reportUrl feedReportUrl: String?) -> JournalRecord {
            var r = JournalRecord(event: event, id: ad.id, at: t, day: Time.localDay(t), nonce: Self.nonce())
            var groups = [(event, ad.tracking[event] ?? [])]
            if ad.vast != nil, event == "impression" {
                // An image's creativeView is its start (SPEC §10); only a video counts one.
                r.start = ad.type == .video
                groups.append(("start", ad.tracking["start"] ?? []))
                if ad.shows == 0 {
                    groups.append(("verificationNotExecuted", ad.tracking["verificationNotExecuted"] ?? []))
                }
            }
            if groups.contains(where: { !$0.1.isEmpty }) {   // most launches have none to fill in
                let cachebusting = Self.cachebusting()
                r.trackers = groups.flatMap { group, urls in
                    let macros = self.macros(group, of: ad, at: t, cachebusting: cachebusting)
                    return urls.map { Self.expand($0, macros) }
                }
            }
            r.batch = (reportUrl ?? feedReportUrl) != nil
            return r
        }

        /// The record of a show `next --render` records: counted as a show, its impression
        /// queued only by its confirmation (SPEC §8); its nonce is the show's token.
        func renderRecord(of ad: AdRecord, at t: Double) -> JournalRecord {
            var r = JournalRecord(event: "impression", id: ad.id, at: t, day: Time.localDay(t), nonce: Self.nonce())
            r.render = true
            return r
        }

        /// The record of a VAST video's `progress` (SPEC §10 v4): the trackers of `keys` (each
        /// `progress@<ms>`, its `[ADPLAYHEAD]` that offset), queued up to `upTo` milliseconds.
        func progressRecord(of ad: AdRecord, keys: [String], upTo: Int64, at t: Double) -> JournalRecord {
            var r = JournalRecord(event: "progress", id: ad.id, at: t, day: Time.localDay(t), nonce: Self.nonce())
            let cachebusting = Self.cachebusting()
            r.trackers = keys.flatMap { key in
                let macros = self.macros(key, of: ad, at: t, cachebusting: cachebusting)
                return (ad.tracking[key] ?? []).map { Self.expand($0, macros) }
            }
            r.upTo = upTo
            r.batch = false
            return r
        }

        /// The record of a VAST error (SPEC §10): `urls` called with `[ERRORCODE]` = `code`.
        func errorRecord(id: String, urls: [String], code: Int, assetURI: String?, at t: Double) -> JournalRecord {
            var r = JournalRecord(event: "error", id: id, at: t, day: Time.localDay(t), nonce: Self.nonce())
            var ad = AdRecord(ad: FeedAd(id: id, url: assetURI ?? ""))
            ad.vast = VASTFields()
            let macros = self.macros("error", of: ad, at: t, cachebusting: Self.cachebusting(), code: code)
            r.trackers = urls.map { Self.expand($0, macros) }
            return r
        }

        /// §8's macros; for a VAST ad, the IAB's too (SPEC §10). A name not listed is left as
        /// it is.
        func macros(_ event: String, of ad: AdRecord, at t: Double, cachebusting: String, code: Int? = nil)
            -> [String: String]
        {
            var m = [
                "[TIMESTAMP]": Time.formatMillis(t), "[CACHEBUSTING]": cachebusting, "[ADID]": ad.id,
                "[EVENT]": event, "[DEVICEID]": deviceId ?? "",
            ]
            guard let vast = ad.vast else { return m }
            let d = Double(ad.duration)
            let progress = VASTTrackers.progressOffset(event)
            if progress != nil { m["[EVENT]"] = "progress" }
            let playhead: Double? =
                switch event {
                case "start": 0
                case "firstQuartile": d / 4
                case "midpoint": d / 2
                case "thirdQuartile": d * 3 / 4
                case "complete": d
                default: progress.map { Double($0) / 1000 }
                }
            m["[ERRORCODE]"] = event == "error" ? String(code ?? VASTCode.undefined.rawValue) : "-1"
            m["[REASON]"] = event == "verificationNotExecuted" ? "2" : "-1"
            m["[ASSETURI]"] = ad.url
            m["[ADSERVINGID]"] = vast.adServingId ?? ""
            m["[UNIVERSALADID]"] = vast.universalAdId ?? ""
            m["[PLAYERSIZE]"] = playerSize
            m["[LIMITADTRACKING]"] = limitAdTracking ? "1" : "0"
            m["[ADPLAYHEAD]"] = playhead.map(Time.formatPlayhead) ?? "-1"
            m["[CONTENTPLAYHEAD]"] = m["[ADPLAYHEAD]"]
            return m
        }

        /// Replaces each macro by its value, percent-encoded (RFC 3986 unreserved characters
        /// stay as they are). Bytes, not Foundation's `replacingOccurrences`, whose first use
        /// costs a launch milliseconds.
        static func expand(_ url: String, _ macros: [String: String]) -> String {
            let bytes = Array(url.utf8)
            guard bytes.contains(UInt8(ascii: "[")) else { return url }
            var out: [UInt8] = []
            out.reserveCapacity(bytes.count + 64)
            var i = 0
            while i < bytes.count {
                if bytes[i] == UInt8(ascii: "["), let close = bytes[i...].firstIndex(of: UInt8(ascii: "]")),
                    let value = macros[String(decoding: bytes[i...close], as: UTF8.self)]
                {
                    out += percentEncoded(value).utf8
                    i = close + 1
                } else {
                    out.append(bytes[i])
                    i += 1
                }
            }
            return String(decoding: out, as: UTF8.self)
        }

        static func percentEncoded(_ s: String) -> String {
            var out: [UInt8] = []
            for b in s.utf8 {
                switch b {
                case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
                    UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"),
                    UInt8(ascii: "~"):
                    out.append(b)
                default:
                    out += Format.percent(b).utf8
                }
            }
            return String(decoding: out, as: UTF8.self)
        }

        /// 128 random bits, hex: unique to one event.
        static func nonce() -> String {
            var g = SystemRandomNumberGenerator()
            return Format.padded(g.next() as UInt64, width: 16, radix: 16)
                + Format.padded(g.next() as UInt64, width: 16, radix: 16)
        }

        /// Eight random digits, fixed per event.
        static func cachebusting() -> String {
            Format.padded(Int.random(in: 0...99_999_999), width: 8)
        }
    }
}

/// The events `adcache event` records (impressions come only from `next`); `start` and the
/// quartiles are a VAST video's (SPEC §10).
public enum AdEvent: String, Sendable, CaseIterable {
    /// The viewer tapped or clicked the ad.
    case click
    /// The viewer skipped the ad.
    case skip
    /// The ad played to its end.
    case complete
    /// A VAST video started playing.
    case start
    /// A VAST video played a quarter of its length.
    case firstQuartile
    /// A VAST video played half of its length.
    case midpoint
    /// A VAST video played three quarters of its length.
    case thirdQuartile
}
