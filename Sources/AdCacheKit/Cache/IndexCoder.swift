#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif
#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

extension RecordState {
    /// The states by name, for a decode that makes no String of a record's state.
    static let names = JSONKeyTable<RecordState>()
}

extension AdType {
    /// The types by name, read the same way.
    static let names = JSONKeyTable<AdType>()
}

/// The index's JSON form: readable (indented, a record per line, each key in a fixed place),
/// versioned, and read and written without Codable, which would dominate `next` on a large
/// index.
enum IndexCoder {
    /// Where a record is in the index's bytes (not a `Range<Int>`: a launch that makes an
    /// array of those looks up Int's conformance to Comparable in the whole binary).
    struct Span {
        var start: Int
        var end: Int
    }

    /// An index as read, with what had to be left out or repaired to trust it.
    struct Decoded {
        var index: CacheIndex
        var repairs: [Diagnostic] = []
        var source: [UInt8] = []
        var ranges: [Span] = []
        /// Each record's place in `index.ads` by id: built as the records are read (it is
        /// what finds a second record with the same id), so the journal is applied to them
        /// without a second dictionary of every id. Nil when the selection digest gave the
        /// records: the journal's records, if any, then build it.
        var positions: [String: Int]?
        /// For a selection read: where the `ads` array is in `source` (`[` to one past `]`).
        var adsSpan: Span?
        /// For a selection read that took the records from the digest without reading the
        /// index (`source` is then empty): the file, to read the chosen record from.
        var file: IndexFileBytes?

        /// The index, each repair said once as a warning.
        func index(warn: WarningSink) -> CacheIndex {
            for r in repairs { warn(r) }
            return index
        }

        func loaded(warn: WarningSink) -> CacheStore.Loaded {
            var l = CacheStore.Loaded(index: index(warn: warn))
            l.source = source
            l.ranges = ranges
            l.file = file
            return l
        }

        mutating func repair(_ ad: String?, _ text: String) {
            repairs.append(Diagnostic(.index, ad: ad, "index.json: " + text))
        }
    }

    /// Reads the index. Malformed JSON (a torn or garbled file) throws. A record whose values
    /// cannot be trusted — a field of the wrong kind, an unknown state, a negative count, a
    /// time out of range — is dropped; a record whose only fault is its file name keeps its
    /// counts and loses the file. Either is a repair, said as a warning.
    /// `digest`: for a selection read, the records as the selection digest of these very
    /// bytes holds them (`SelectionDigest`): the `ads` array is then not parsed again.
    static func decode(_ bytes: [UInt8], forSelection: Bool = false, digest: SelectionDigest.Ads? = nil) throws
        -> Decoded
    {
        try bytes.withUnsafeBufferPointer { buffer in
            var s = JSONScanner(buffer)
            var decoded = Decoded(index: CacheIndex())
            if forSelection {
                decoded.index.forSelection = true
                decoded.source = bytes
            }
            var version: Int64?
            var showSeq: Int64?
            try s.object { s, key in
                switch key {
                case "version": version = try s.int()
                case "feed": decoded.index.feed = try s.null() ? nil : FeedSource(&s)
                case "showSeq": showSeq = try s.lenient { try $0.int() }
                case "lastShown": decoded.index.lastShown = try s.lenient { try $0.optDouble() } ?? nil
                case "clockOffset": decoded.index.clockOffset = try s.lenient { try $0.optDouble() } ?? nil
                case "clockSync":
                    decoded.index.clockSync = try s.lenient { try $0.optString() }?.flatMap(ClockSync.init(text:))
                case "rotations":
                    _ = try s.lenient { s in
                        try s.object { s, key in
                            let text = try s.string()   // "signature epoch rounds"
                            let parts = text.split(separator: " ")
                            if parts.count == 3, let epoch = Int64(parts[1]), let rounds = Int64(parts[2]),
                                AdRecord.counts.contains(epoch), AdRecord.counts.contains(rounds)
                            {
                                decoded.index.rotations[key] = Rotation(
                                    signature: String(parts[0]), epoch: epoch, rounds: rounds)
                            }
                        }
                    }
                case "journalSeq": decoded.index.journalSeq = try s.lenient { try $0.int() } ?? 0
                case "journalMark":
                    decoded.index.journalMark = try s.lenient { try $0.optString() }?.flatMap(JournalMark.init(text:))
                case "reportUrl": decoded.index.reportUrl = try s.lenient { try $0.optString() } ?? nil
                case "signed": decoded.index.signed = try s.lenient { try SignedFeed(&$0) } ?? nil
                case "downloaded":
                    let parts = (try s.lenient { try $0.optString() } ?? nil)?.split(separator: " ") ?? []
                    if parts.count == 2, let d = Int(parts[0]), Time.supportedDays.contains(d), let b = Int64(parts[1]),
                        b >= 0
                    {
                        decoded.index.downloaded = (d, b)
                    }
                case "retryAfter":
                    decoded.index.retryAfter =
                        try s.lenient { s -> RetryAfter? in
                            let parts = try s.string().split(separator: " ")
                            guard parts.count == 2, let t = Double(parts[1]), Time.isSupported(t) else { return nil }
                            return RetryAfter(origin: String(parts[0]), until: t)
                        } ?? nil
                case "ads":
                    let start = s.position()
                    if forSelection, let digest, digest.span.start == start {
                        s.jump(to: digest.span.end)
                        decoded.index.ads = digest.records
                        decoded.ranges = digest.ranges
                        decoded.adsSpan = digest.span
                        return
                    }
                    // Room for a record per 256 bytes (a downloaded ad's record, as adcache
                    // writes it, is longer; a pending one can be shorter, and then the array
                    // grows): a 10,000-ad index is read without the array being copied as it
                    // grows, and pages reserved but not needed are never touched.
                    let room = bytes.count / 256
                    decoded.index.ads.reserveCapacity(room)
                    if forSelection { decoded.ranges.reserveCapacity(room) }
                    var positions: [String: Int] = [:]
                    positions.reserveCapacity(room)
                    defer { decoded.positions = positions }
                    try s.array { s in
                        let start = s.position()
                        decoded.index.ads.append(AdRecord.Decoded.blank)
                        let last = decoded.index.ads.count - 1
                        var (fault, fileFault) = try AdRecord.Decoded.read(
                            &s, into: &decoded.index.ads[last], forSelection: forSelection)
                        let end = s.position()
                        let id = decoded.index.ads[last].id
                        if fault == nil {
                            if positions[id] == nil {
                                positions[id] = last
                            } else {
                                fault = "an earlier record has the same id"
                            }
                        }
                        if let fault {
                            decoded.index.ads.removeLast()
                            decoded.repair(id, "dropped the record of \(AdRecord.Decoded.name(of: id)): \(fault)")
                            return
                        }
                        if let fileFault {
                            decoded.repair(id, "\(AdRecord.Decoded.name(of: id)) loses its file: \(fileFault)")
                            decoded.index.ads[last].forgetFile()
                            if decoded.index.ads[last].state == .ready { decoded.index.ads[last].state = .pending }
                        }
                        if forSelection { decoded.ranges.append(Span(start: start, end: end)) }
                    }
                    if forSelection { decoded.adsSpan = Span(start: start, end: s.i) }
                default: try s.skip()
                }
            }
            try s.finish()
            guard let version else { throw s.fail("no version") }
            decoded.index.version = Int(version)
            // The show counter orders shows: it must be a count and at least every record's.
            let highest = decoded.index.ads.compactMap(\.lastShowSeq).max() ?? 0
            if let seq = showSeq, AdRecord.counts.contains(seq), seq >= highest {
                decoded.index.showSeq = seq
            } else {
                decoded.index.showSeq = highest
                if showSeq != nil {
                    decoded.repair(nil, "the show counter was out of range; restarted it at \(highest)")
                }
            }
            // Journal records up to this number are in the index: never more than it counted.
            if !(0...decoded.index.showSeq).contains(decoded.index.journalSeq) {
                decoded.index.journalSeq = decoded.index.showSeq
                decoded.repair(nil, "the journal mark was out of range; set it to the show counter")
            }
            if let offset = decoded.index.clockOffset, !(abs(offset) < 1e10) {
                decoded.index.clockOffset = nil
                decoded.repair(nil, "the clock offset was out of range; forgot it")
            }
            if let t = decoded.index.lastShown, !Time.isSupported(t) {
                decoded.index.lastShown = nil
                decoded.repair(nil, "the time of the last show was out of range; forgot it")
            }
            return decoded
        }
    }

    static func encode(_ index: CacheIndex) throws -> [UInt8] {
        var w = JSONWriter(indent: 2, capacity: 512 + index.ads.count * 600)
        w.beginObject()
        w.key("ads")
        w.beginArray()
        for ad in index.ads {   // a record per line: a quarter fewer bytes for a launch to read
            w.key(nil)
            w.flat { ad.write(&$0) }
        }
        w.endArray()
        if let feed = index.feed {
            w.key("feed")
            w.beginObject()
            w.field("etag", feed.etag)
            w.field("fetchedAt", feed.fetchedAt)
            w.field("finalUrl", feed.finalUrl)
            w.field("freshUntil", feed.freshUntil)
            w.field("lastModified", feed.lastModified)
            w.field("sha256", feed.sha256)
            w.field("signatureEtag", feed.signatureEtag)
            w.field("signatureLastModified", feed.signatureLastModified)
            w.field("url", feed.url)
            w.field("validUntil", feed.validUntil)
            w.endObject()
        }
        w.field("clockOffset", index.clockOffset)
        w.field("clockSync", index.clockSync?.text)
        w.field("journalMark", index.journalMark?.text)
        w.field("journalSeq", index.journalSeq)
        w.field("lastShown", index.lastShown)
        w.field("reportUrl", index.reportUrl)
        w.field("downloaded", index.downloaded.map { "\($0.day) \($0.bytes)" })
        w.field("retryAfter", index.retryAfter.map { "\($0.origin) \(Int64($0.until))" })
        if !index.rotations.isEmpty {
            w.key("rotations")
            w.beginObject()
            for (k, r) in index.rotations.sorted(by: { $0.key < $1.key }) {
                w.field(k, "\(r.signature) \(r.epoch) \(r.rounds)")
            }
            w.endObject()
        }
        w.field("showSeq", index.showSeq)
        if let signed = index.signed {
            w.key("signed")
            w.beginObject()
            w.field("keyId", signed.keyId)
            w.field("serial", signed.serial)
            w.field("sha256", signed.sha256)
            w.field("signature", signed.signature)
            w.field("validUntil", signed.validUntil)
            w.endObject()
        }
        w.field("version", Int64(index.version))
        w.endObject()
        w.out.append(0x0A)
        return w.out
    }
}

extension FeedSource {
    init(_ s: inout JSONScanner) throws {
        var url: String?
        var f = FeedSource(url: "")
        try s.object { s, key in
            switch key {
            case "url": url = try s.string()
            case "finalUrl": f.finalUrl = try s.optString()
            case "etag": f.etag = try s.optString()
            case "lastModified": f.lastModified = try s.optString()
            case "fetchedAt": f.fetchedAt = try s.optDouble()
            case "sha256": f.sha256 = try s.optString()
            case "freshUntil": f.freshUntil = try s.lenient { try $0.optDouble() } ?? nil
            case "validUntil": f.validUntil = try s.lenient { try $0.optDouble() } ?? nil
            case "signatureEtag": f.signatureEtag = try s.optString()
            case "signatureLastModified": f.signatureLastModified = try s.optString()
            default: try s.skip()
            }
        }
        guard let url else { throw s.fail("feed without url") }
        f.url = url
        self = f
    }
}

extension SignedFeed {
    init(_ s: inout JSONScanner) throws {
        var keyId: String?
        var serial: Int64?
        var validUntil: Double?
        var sha256: String?
        var signature: String?
        try s.object { s, key in
            switch key {
            case "keyId": keyId = try s.optString()
            case "serial": serial = try s.int()
            case "validUntil": validUntil = try s.optDouble()
            case "sha256": sha256 = try s.optString()
            case "signature": signature = try s.optString()
            default: try s.skip()
            }
        }
        guard let keyId, let serial, serial >= 1, let validUntil, Time.isSupported(validUntil), let sha256,
            let signature
        else { throw s.fail("an incomplete signed feed") }
        self.init(keyId: keyId, serial: serial, validUntil: validUntil, sha256: sha256, signature: signature)
    }
}

extension AdRecord {
    /// Counters adcache keeps (shows, the show counter): whole numbers from 0 to 2^53, where
    /// a JSON number is still exact. Anything else in the index is damage.
    static let counts: ClosedRange<Int64> = 0...(1 << 53)

    /// One record as read: the record, or why it cannot be trusted.
    struct Decoded {
        var record: AdRecord
        /// Why the whole record is dropped.
        var fault: String?
        /// Why the record keeps its counts but loses its file.
        var fileFault: String?
        /// How warnings name a record.
        static func name(of id: String) -> String { id.isEmpty ? "an ad without an id" : "ad '\(id)'" }

        /// The record every read starts from: nothing given.
        static let blank = AdRecord(ad: FeedAd(id: "", url: ""))

        /// `forSelection` skips the texts choosing an ad does not need (`takeTexts` brings
        /// them back for the chosen one).
        init(_ s: inout JSONScanner, forSelection: Bool = false) throws {
            record = Self.blank
            (fault, fileFault) = try Self.read(&s, into: &record, forSelection: forSelection)
        }

        /// Reads one record into `r` (which starts as `blank`), in place: an index of 10,000
        /// records is read into its array without copying each one. Returns why the record
        /// cannot be trusted, or why it loses its file.
        static func read(_ s: inout JSONScanner, into r: inout AdRecord, forSelection: Bool) throws -> (
            fault: String?, fileFault: String?
        ) {
            var id: String?, url: String?, state: RecordState?, stateName: String?
            var fault: String?
            try s.object(Self.fields) { s, key in
                guard let key else { return try s.skip() }
                let ok = try s.lenient { s -> Bool in
                    try Self.read(
                        key, &s, into: &r, forSelection: forSelection, id: &id, url: &url, state: &state,
                        stateName: &stateName)
                }
                if ok != true, fault == nil { fault = "its \"\(key.rawValue)\" is not a value adcache writes" }
            }
            r.id = id ?? ""
            r.url = url ?? ""
            r.state = state ?? .pending
            if fault == nil {
                if id == nil || url == nil || (state == nil && stateName == nil) {
                    fault = "it has no id, url or state"
                } else if state == nil {
                    fault = "its state '\(stateName!)' is not one this adcache knows"
                }
            }
            return (fault ?? r.implausibility, r.fileImplausibility)
        }
    }

    /// Why this record's counts or times cannot be trusted, or nil.
    var implausibility: String? {
        // One by one, not as lists: this runs for every record a launch reads.
        func count(_ name: StaticString, _ v: Int64?) -> String? {
            guard let v, !Self.counts.contains(v) else { return nil }
            return "its \"\(name)\" (\(v)) is not a count"
        }
        func negative(_ name: StaticString, _ v: Int64?) -> String? {
            guard let v, v < 0 else { return nil }
            return "its \"\(name)\" (\(v)) is negative"
        }
        func time(_ name: StaticString, _ v: Double?) -> String? {
            guard let v, !Time.isSupported(v) else { return nil }
            return "its \"\(name)\" is not a time between the years 0 and 9999"
        }
        if let why = count("shows", shows) ?? count("showsOnDay", showsOnDay) { return why }
        if let why = count("lastShowSeq", lastShowSeq) ?? count("picks", picks) { return why }
        if let why = count("pickEpoch", pickEpoch) ?? negative("maxShows", maxShows) { return why }
        if let why = negative("maxShowsPerDay", maxShowsPerDay) ?? negative("minInterval", minInterval) {
            return why
        }
        if let f = failures, !(1...64).contains(f) { return "its \"failures\" (\(f)) is out of range" }
        if let why = time("start", start) ?? time("expires", expires) ?? time("lastShown", lastShown) { return why }
        if let why = time("retryAt", retryAt) ?? time("freshUntil", freshUntil) { return why }
        if let d = showDay, !Time.supportedDays.contains(d) { return "its \"showDay\" (\(d)) is out of range" }
        if !(vast == nil ? FeedAd.durationRange : FeedAd.vastDurationRange).contains(duration) {
            return "its \"duration\" (\(duration)) is out of range"
        }
        if !FeedAd.weightRange.contains(weight) { return "its \"weight\" (\(weight)) is out of range" }
        return nil
    }

    /// Why this record's file cannot be used, or nil: a name that is not an asset's (SPEC §6:
    /// never opened or deleted) or a negative size.
    var fileImplausibility: String? {
        guard let file else { return nil }
        if !AssetName.isValid(file) { return "its file name is not an asset's (<64 hex digits>.<ext>)" }
        if let b = bytes, b < 0 { return "its size (\(b)) is negative" }
        return nil
    }

}
