#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// What became of one delivery: a tracker URL of one event, or the places of events in a
/// batch report (`url` nil).
struct DeliveryOutcome: Equatable, Sendable {
    var nonces: [String]
    var url: String?
    /// The tracker's position among its event's trackers: each appearance of a URL is a
    /// delivery of its own. Nil in a line an older adcache wrote (then the first appearance
    /// of `url` not yet done).
    var position: Int?
    /// Delivered; false: refused for good (dropped, counted); nil: only begun (an attempt,
    /// so that the next run sends what it never tried before what it tried).
    var delivered: Bool?

    /// Which delivery it names: the first nonce, the position and the URL.
    var key: String { "\(nonces.first ?? "") \(position.map(String.init) ?? "-") \(url ?? "")" }

    func line() -> [UInt8] {
        var w = JSONWriter(indent: nil, capacity: 128)
        w.beginObject()
        w.field("n", nonces)
        if let delivered {
            w.key("ok")
            w.bool(delivered)
        }
        w.field("p", position)
        w.field("u", url)
        w.endObject()
        w.out.append(0x0A)
        return w.out
    }

    init(nonces: [String], url: String?, position: Int? = nil, delivered: Bool?) {
        self.nonces = nonces
        self.url = url
        self.position = position
        self.delivered = delivered
    }

    /// Nil for a line that is not a whole outcome (torn by a power loss, garbled).
    init?(line: UnsafeBufferPointer<UInt8>) {
        var s = JSONScanner(line)
        var nonces: [String]?
        var url: String?
        var position: Int?
        var ok: Bool?
        do {
            try s.object { s, key in
                switch key {
                case "n": nonces = try s.strings()
                case "p":
                    let p = try s.int()
                    guard (0...Int64(Int32.max)).contains(p) else { throw s.fail("a position out of range") }
                    position = Int(p)
                case "u": url = try s.string()
                case "ok": ok = try s.bool()
                default: try s.skip()
                }
            }
            try s.finish()
        } catch {
            return nil
        }
        guard let nonces, !nonces.isEmpty else { return nil }
        self.init(nonces: nonces, url: url, position: position, delivered: ok)
    }
}

/// `events.delivered`: a running `report` appends one line per finished delivery as it
/// finishes — one write(2), no rewrite of the queue — so a report killed at any moment
/// re-sends, next time, only the deliveries that were in flight. Every reader of the queue
/// applies these lines (`EventLog.apply`, which is idempotent); the report's last step
/// writes the queue with them applied and then removes the file (SPEC §8).
struct DeliveryLog {
    let file: CacheFile

    /// Opens the file to append to; -1 when it cannot (the run then records at its end only).
    func openForAppending() -> Int32 {
        file.openForWriting(O_WRONLY | O_CREAT | O_APPEND)
    }

    /// Appends an outcome; false when the write failed.
    @discardableResult
    static func append(_ outcome: DeliveryOutcome, to fd: Int32) -> Bool {
        guard fd >= 0 else { return false }
        return outcome.line().withUnsafeBytes { FileIO.writeAll(fd, $0) } == nil
    }

    /// The outcomes recorded, in order; a damaged line is skipped.
    func read() -> [DeliveryOutcome] {
        guard let st = file.status(), (st.st_mode & S_IFMT) == S_IFREG, let bytes = try? file.read() else { return [] }
        var out: [DeliveryOutcome] = []
        bytes.withUnsafeBufferPointer { all in
            var start = 0
            while let end = all[start...].firstIndex(of: 0x0A) {
                if end > start, let o = DeliveryOutcome(line: UnsafeBufferPointer(rebasing: all[start..<end])) {
                    out.append(o)
                }
                start = end + 1
            }
        }
        return out
    }
}

extension EventLog {
    /// Takes delivered (or dropped) deliveries out of the queue and counts them. Applying an
    /// outcome twice changes nothing the second time. Returns the deliveries it took.
    @discardableResult
    mutating func apply(_ outcomes: [DeliveryOutcome], at now: Double = Double(time(nil))) -> (
        delivered: Int, dropped: Int
    ) {
        guard !outcomes.isEmpty else { return (0, 0) }
        var position: [String: Int] = [:]
        for (i, e) in queue.enumerated() where position[e.nonce] == nil { position[e.nonce] = i }
        var delivered = 0, dropped = 0
        for o in outcomes where o.delivered != nil {
            for nonce in o.nonces {
                guard let i = position[nonce] else { continue }
                var taken = 0
                if let url = o.url {
                    // The appearance it names (an older line: the first of that URL not done).
                    let e = queue[i]
                    let p =
                        o.position.flatMap { e.trackers.indices.contains($0) && e.trackers[$0] == url ? $0 : nil }
                        ?? (o.position == nil ? e.trackersLeft.first { $0.url == url }?.position : nil)
                    if let p, !e.done.contains(p) {
                        queue[i].done.append(p)
                        queue[i].done.sort()
                        taken = 1
                    }
                } else if queue[i].batch {
                    queue[i].batch = false
                    taken = 1
                }
                if o.delivered == true { delivered += taken } else { dropped += taken }
            }
        }
        self.delivered.add(Int64(delivered))
        droppedPermanent.add(Int64(dropped))
        noteDropped(Int64(dropped), at: now)
        queue.removeAll { $0.pending == 0 }
        return (delivered, dropped)
    }
}
