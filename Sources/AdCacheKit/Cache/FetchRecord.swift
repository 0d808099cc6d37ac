/// `fetch.last`: what the last `fetch` run did and the last successful one (SPEC §3 v4), for
/// `status` (§13). Kept outside the index: a run that refused its feed, or could not reach
/// it, changes no byte of the index, and still says so here.
///
/// `{"version": 1, "at": T, "exit": N, "error": "…" | null, "feed": "…",
///   "lastSuccess": {"at": T, "feed": "…"} | null}` — times RFC 3339 UTC.
struct FetchRecord: Sendable {
    static let fileName = "fetch.last"

    /// When the last run ended, on the clock it trusted; its exit code (SPEC §5) and, when
    /// that is not 0, its one-line error; the feed it asked for.
    var at: Double
    var exit: Int32
    var error: String?
    var feed: String
    /// The last run that exited 0: when it ended and its feed.
    var lastSuccess: (at: Double, feed: String)?

    func encode() -> [UInt8] {
        var w = JSONWriter(indent: 2)
        w.beginObject()
        w.field("version", 1)
        w.field("at", Time.format(at))
        w.field("exit", Int64(exit))
        w.key("error")
        if let error { w.string(error) } else { w.null() }
        w.field("feed", feed)
        w.key("lastSuccess")
        if let s = lastSuccess {
            w.beginObject()
            w.field("at", Time.format(s.at))
            w.field("feed", s.feed)
            w.endObject()
        } else {
            w.null()
        }
        w.endObject()
        w.out.append(0x0A)
        return w.out
    }

    /// Nil for a file that is not a whole record (a newer layout, damage): `status` then
    /// reads the index's own time of the last commit.
    static func decode(_ bytes: [UInt8]) -> FetchRecord? {
        bytes.withUnsafeBufferPointer { buffer in
            var s = JSONScanner(buffer)
            var at: Double?
            var exit: Int64?
            var error: String?
            var feed = ""
            var success: (at: Double, feed: String)?
            do {
                try s.object { s, key in
                    switch key {
                    case "at": at = Time.parse(try s.string())
                    case "exit": exit = try s.int()
                    case "error": error = try s.optString()
                    case "feed": feed = try s.string()
                    case "lastSuccess":
                        guard !(try s.null()) else { return }
                        var t: Double?
                        var f = ""
                        try s.object { s, key in
                            switch key {
                            case "at": t = Time.parse(try s.string())
                            case "feed": f = try s.string()
                            default: try s.skip()
                            }
                        }
                        success = t.map { ($0, f) }
                    default: try s.skip()
                    }
                }
            } catch {
                return nil
            }
            guard let at, let exit, (0...255).contains(exit) else { return nil }
            return FetchRecord(at: at, exit: Int32(exit), error: error, feed: feed, lastSuccess: success)
        }
    }
}

extension CacheStore {
    var fetchRecordFile: CacheFile { dir.file(FetchRecord.fileName) }

    /// The record as the last run left it; nil when there is none (never fetched, or an
    /// older adcache fetched).
    func loadFetchRecord() -> FetchRecord? {
        guard let bytes = try? fetchRecordFile.read(limit: 1 << 20) else { return nil }
        return FetchRecord.decode(bytes)
    }

    /// Writes the end of a run: `exit` 0 also becomes the last success. A record that cannot
    /// be written is lost (a warning of its own would bury the run's outcome): `status` then
    /// reports the run before.
    func recordFetch(at t: Double, exit: Int32, error: String?, feed: String) {
        var record = FetchRecord(at: t, exit: exit, error: exit == 0 ? nil : error, feed: feed)
        record.lastSuccess = exit == 0 ? (t, feed) : loadFetchRecord()?.lastSuccess
        try? fetchRecordFile.writeAtomically(record.encode(), durable: false)
    }
}
