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

        public init(deviceId: String? = nil, reportUrl: String? = nil, maxEvents: Int = 100_000, maxEventAge: Int = 30)
        {
            self.deviceId = deviceId
            self.reportUrl = reportUrl
            self.maxEvents = maxEvents
            self.maxEventAge = maxEventAge
        }

        var bounds: EventBounds { EventBounds(maxEvents: maxEvents, maxAge: maxEventAge) }

        /// The journal record of `event` for `ad` at `t`: a fresh nonce and cachebusting
        /// value, the tracker URLs with their macros expanded (a retry sends the very same
        /// URL), and a place in a batch report when there is somewhere to send it.
        func record(_ event: String, of ad: AdRecord, at t: Double, reportUrl feedReportUrl: String?) -> JournalRecord {
            var r = JournalRecord(event: event, id: ad.id, at: t, day: Time.localDay(t), nonce: Self.nonce())
            if let urls = ad.tracking[event], !urls.isEmpty {   // most launches have none to fill in
                let macros = [
                    "[TIMESTAMP]": Time.formatMillis(t), "[CACHEBUSTING]": Self.cachebusting(), "[ADID]": ad.id,
                    "[EVENT]": event, "[DEVICEID]": deviceId ?? "",
                ]
                r.trackers = urls.map { Self.expand($0, macros) }
            }
            r.batch = (reportUrl ?? feedReportUrl) != nil
            return r
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

/// The events `adcache event` records (impressions come only from `next`).
public enum AdEvent: String, Sendable, CaseIterable {
    case click, skip, complete
}
