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

/// An event whose deliveries are not all made: its tracker URLs still to call and whether its
/// place in a batch report is still to POST (SPEC §8).
struct QueuedEvent: Equatable, Sendable {
    var id: String
    var event: String
    var at: Double
    var nonce: String
    /// Its tracker URLs as the journal gave them: each appearance is a delivery of its own,
    /// named by its position (SPEC §8 *Every appearance is a delivery*), so a URL named twice
    /// (a wrapper's pixel and its InLine's) is called twice.
    var trackers: [String]
    var batch: Bool
    /// The positions in `trackers` delivered (or dropped for good) already.
    var done: [Int] = []
    /// When it was queued (a fold), on the trusted clock; nil in a queue written before it
    /// was kept. Its age counts from the later of this and `at`: an event dated by a clock
    /// set back (a box that booted in 2000) is not old for that.
    var queuedAt: Double? = nil

    /// What the age bound counts from.
    var ageFrom: Double { max(at, queuedAt ?? at) }

    /// Deliveries left: one per tracker not done, one for the batch.
    var pending: Int { trackers.count - done.count + (batch ? 1 : 0) }

    /// The trackers still to call, with their positions.
    var trackersLeft: [(position: Int, url: String)] {
        trackers.enumerated().filter { !done.contains($0.offset) }.map { ($0.offset, $0.element) }
    }
}

/// The counts of one ad on one local day.
struct DayCounts: Equatable, Sendable {
    var shows: Int64 = 0
    var clicks: Int64 = 0
    var skips: Int64 = 0
    var completes: Int64 = 0
    /// A VAST video's playback and VAST's own reports (SPEC §4 v3, §10). A VAST ad's show
    /// counts its `start` too (one journal record holds both).
    var starts: Int64 = 0
    var firstQuartiles: Int64 = 0
    var midpoints: Int64 = 0
    var thirdQuartiles: Int64 = 0
    var notUsed: Int64 = 0
    var errors: Int64 = 0
    /// Impressions queued (SPEC §8 v4): a show's own in `choice` mode, a confirmation's in
    /// `render` mode.
    var impressions: Int64 = 0
    /// Shows recorded in `render` mode and not confirmed within `render-timeout`: never billed.
    var unrendered: Int64 = 0

    mutating func count(_ event: String) {
        switch event {
        case "impression": shows.add(1)
        case "click": clicks.add(1)
        case "skip": skips.add(1)
        case "complete": completes.add(1)
        case "start": starts.add(1)
        case "firstQuartile": firstQuartiles.add(1)
        case "midpoint": midpoints.add(1)
        case "thirdQuartile": thirdQuartiles.add(1)
        case "notUsed": notUsed.add(1)
        case "error": errors.add(1)
        case "rendered": impressions.add(1)
        default: break
        }
    }

    /// The v3 counts by their `stats --json` names.
    static var playbackKeys: [(String, WritableKeyPath<DayCounts, Int64>)] {
        [
            ("starts", \.starts), ("firstQuartiles", \.firstQuartiles), ("midpoints", \.midpoints),
            ("thirdQuartiles", \.thirdQuartiles), ("notUsed", \.notUsed), ("errors", \.errors),
            ("impressions", \.impressions), ("unrendered", \.unrendered),
        ]
    }
}

/// How the queue is bounded (SPEC §8).
struct EventBounds: Sendable {
    var maxEvents = 100_000
    /// Days.
    var maxAge = 30
    /// Seconds a `render` show waits for its confirmation before it counts `unrendered`.
    var renderTimeout: Double = 600
}

/// The last `progress` of an ad: its time, and the offset (ms) its trackers were queued to.
struct ProgressMark: Equatable, Sendable {
    var at: Double
    var upTo: Int64
}

/// A show `next --render` recorded, waiting for the launcher's confirmation.
struct AwaitingRender: Equatable, Sendable {
    var id: String
    var at: Double
    var day: Int
}

/// `events.json`: the queue of deliveries still to make, what became of those already made,
/// and the counts per ad per day — written like the index (temporary, fsync, rename) by the
/// commands that fold the journal into it. `next` never reads it, so the queue's length never
/// costs a launch anything.
struct EventLog: Equatable, Sendable {
    static let fileName = "events.json"
    static let keptDays = 90

    /// The nonce of the last journal record folded in: a fold cut short before the journal
    /// was emptied never counts a record twice.
    var lastFolded: JournalMark?
    var queue: [QueuedEvent] = []
    var delivered: Int64 = 0
    var droppedPermanent: Int64 = 0
    var droppedAge: Int64 = 0
    var droppedOverflow: Int64 = 0
    /// Deliveries dropped (any reason) by the hour they were dropped in (Unix hour), for the
    /// last two days: `status`'s "dropped in the last 24 hours" (SPEC §13).
    var droppedRecent: [Int64: Int64] = [:]
    /// Shows and impressions over the cache's whole life (the days are kept 90 days): the
    /// counters `status --prometheus` publishes.
    var showsTotal: Int64 = 0
    var impressionsTotal: Int64 = 0
    /// Local day → ad id → counts.
    var days: [Int: [String: DayCounts]] = [:]
    /// Render shows not confirmed yet, by token; and the tokens confirmed lately (a second
    /// confirmation is a warning, not an error), with when.
    var awaiting: [String: AwaitingRender] = [:]
    var confirmed: [String: Double] = [:]
    /// Each ad's last `progress` event folded (when, and up to which millisecond): what was
    /// queued for its show then (SPEC §10 v4).
    var progress: [String: ProgressMark] = [:]
    /// How long a confirmed token is remembered.
    static let confirmedKept: Double = 2 * 86400

    var pending: Int64 { queue.reduce(0) { $0.adding(Int64($1.pending)) } }

    /// Counts `n` deliveries dropped at `t` in the recent drops (and forgets those over two
    /// days old).
    mutating func noteDropped(_ n: Int64, at t: Double) {
        guard n > 0, t.isFinite else { return }
        let hour = Int64(clamping: Int((t / 3600).rounded(.down)))
        droppedRecent[hour, default: 0].add(n)
        droppedRecent = droppedRecent.filter { $0.key > hour - 48 }
    }

    /// Deliveries dropped in the 24 hours before `t`.
    func droppedInDay(before t: Double) -> Int64 {
        let hour = Int64(clamping: Int((t / 3600).rounded(.down)))
        return droppedRecent.filter { $0.key > hour - 24 }.values.reduce(0) { $0.adding($1) }
    }

    /// Takes the journal's records it does not hold yet: counts them and queues their
    /// deliveries; then applies the bounds as of `now`. True when anything changed.
    /// `ledger` hears each line the ledger records of it (SPEC §14), in order.
    @discardableResult
    mutating func fold(
        _ records: [JournalRecord], bounds: EventBounds, now: Double, ledger: ((LedgerEntry) -> Void)? = nil
    ) -> Bool {
        let fresh = JournalMark.unread(records, after: lastFolded)
        for r in fresh {
            // A confirmation counts, and bills, only the show still awaiting it: never one
            // already counted unrendered, confirmed, or another ad's (SPEC §8).
            if r.event == "rendered" {
                guard let token = r.show, let show = awaiting[token], show.id == r.id else { continue }
            }
            if let ledger { r.ledgerEntries.forEach(ledger) }
            days[r.day, default: [:]][r.id, default: DayCounts()].count(r.event)
            if r.event == "impression" { showsTotal.add(1) }
            if r.event == "rendered" { impressionsTotal.add(1) }
            if r.start { days[r.day, default: [:]][r.id, default: DayCounts()].count("start") }
            if r.event == "impression" {
                if r.render {
                    awaiting[r.nonce] = AwaitingRender(id: r.id, at: r.at, day: r.day)
                } else {
                    days[r.day, default: [:]][r.id, default: DayCounts()].impressions.add(1)
                    impressionsTotal.add(1)
                }
            }
            if r.event == "rendered", let token = r.show {
                awaiting[token] = nil
                confirmed[token] = r.at
            }
            if r.event == "progress", let upTo = r.upTo, r.at >= (progress[r.id]?.at ?? -.infinity) {
                progress[r.id] = ProgressMark(at: r.at, upTo: upTo)
            }
            if !r.trackers.isEmpty || r.batch {
                queue.append(
                    QueuedEvent(
                        // A confirmation is the show's impression, to the report URL too.
                        id: r.id, event: r.event == "rendered" ? "impression" : r.event, at: r.at, nonce: r.nonce,
                        trackers: r.trackers, batch: r.batch,
                        queuedAt: now))
            }
        }
        if let last = fresh.last { lastFolded = JournalMark(after: last) }
        let bounded = bound(bounds, now: now)
        // Render shows past their timeout: `unrendered` on the day of the show, never billed.
        var rendersChanged = false
        for (token, a) in awaiting.sorted(by: { ($0.value.at, $0.key) < ($1.value.at, $1.key) })
        where now - a.at > bounds.renderTimeout {
            ledger?(LedgerEntry(at: a.at, id: a.id, event: "unrendered", nonce: token + ".unrendered"))
            days[a.day, default: [:]][a.id, default: DayCounts()].unrendered.add(1)
            awaiting[token] = nil
            rendersChanged = true
        }
        for (token, at) in confirmed where now - at > Self.confirmedKept {
            confirmed[token] = nil
            rendersChanged = true
        }
        for (id, mark) in progress where now - mark.at > Self.confirmedKept {
            progress[id] = nil
            rendersChanged = true
        }
        let today = Time.localDay(now)
        let before = days.count
        days = days.filter { $0.key > today - Self.keptDays }
        return !fresh.isEmpty || bounded || days.count != before || rendersChanged
    }

    /// Drops events older than the age bound and, past the count bound, the oldest; each
    /// delivery dropped is counted by reason. True when anything was dropped.
    @discardableResult
    mutating func bound(_ bounds: EventBounds, now: Double) -> Bool {
        let oldest = now - Double(bounds.maxAge) * 86400
        var changed = false
        var aged: Int64 = 0
        queue.removeAll { e in
            guard e.ageFrom < oldest else { return false }
            aged.add(Int64(e.pending))
            changed = true
            return true
        }
        droppedAge.add(aged)
        noteDropped(aged, at: now)
        if queue.count > bounds.maxEvents {
            let excess = queue.count - bounds.maxEvents
            let order = queue.indices.sorted { (queue[$0].at, $0) < (queue[$1].at, $1) }
            let drop = Set(order.prefix(excess))
            for i in drop {
                droppedOverflow.add(Int64(queue[i].pending))
                noteDropped(Int64(queue[i].pending), at: now)
            }
            queue = queue.indices.filter { !drop.contains($0) }.map { queue[$0] }
            changed = true
        }
        return changed
    }

    // MARK: The file

    static func decode(_ bytes: [UInt8]) throws -> EventLog {
        try bytes.withUnsafeBufferPointer { buffer in
            var s = JSONScanner(buffer)
            var log = EventLog()
            var version: Int64?
            var foldedLine: Int?
            var foldedPrefix: UInt64?
            var totalsGiven = false
            try s.object { s, key in
                switch key {
                case "version": version = try s.int()
                case "lastFolded": log.lastFolded = try s.optString().map { JournalMark(nonce: $0, line: nil) }
                case "lastFoldedPrefix":
                    foldedPrefix = UInt64(try s.string(), radix: 16)
                case "lastFoldedLine":
                    let line = try s.int()
                    if line >= 0, line <= Int.max { foldedLine = Int(line) }
                case "delivered": log.delivered = try s.int()
                case "totals":
                    totalsGiven = true
                    try s.object { s, key in
                        switch key {
                        case "shows": log.showsTotal = max(0, try s.int())
                        case "impressions": log.impressionsTotal = max(0, try s.int())
                        default: try s.skip()
                        }
                    }
                case "droppedRecent":
                    try s.object { s, hour in
                        let n = try s.int()
                        if let h = Int64(hour), n > 0 { log.droppedRecent[h] = n }
                    }
                case "dropped":
                    try s.object { s, reason in
                        let n = try s.int()
                        switch reason {
                        case "permanent": log.droppedPermanent = n
                        case "age": log.droppedAge = n
                        case "overflow": log.droppedOverflow = n
                        default: break
                        }
                    }
                case "queue":
                    try s.array { s in
                        var e = QueuedEvent(id: "", event: "", at: 0, nonce: "", trackers: [], batch: false)
                        try s.object { s, key in
                            switch key {
                            case "id": e.id = try s.string()
                            case "event": e.event = try s.string()
                            case "at": e.at = try s.double()
                            case "nonce": e.nonce = try s.string()
                            case "trackers": e.trackers = try s.strings()
                            case "done":
                                try s.array { s in e.done.append(Int(clamping: try s.int())) }
                            case "batch": e.batch = try s.bool()
                            case "queued":
                                let t = try s.double()
                                if Time.isSupported(t) { e.queuedAt = t }
                            default: try s.skip()
                            }
                        }
                        guard !e.id.isEmpty, !e.nonce.isEmpty, Time.isSupported(e.at) else {
                            throw s.fail("a queued event without an id, a nonce or a time")
                        }
                        // Positions that are no tracker's are nothing done; each counts once.
                        e.done = Array(Set(e.done.filter { e.trackers.indices.contains($0) })).sorted()
                        log.queue.append(e)
                    }
                case "days":
                    try s.array { s in
                        var day: Int?
                        var id: String?
                        var c = DayCounts()
                        var impressionsGiven = false
                        try s.object { s, key in
                            switch key {
                            case "day": day = Time.parseDay(try s.string())
                            case "id": id = try s.string()
                            case "shows": c.shows = try s.int()
                            case "clicks": c.clicks = try s.int()
                            case "skips": c.skips = try s.int()
                            case "completes": c.completes = try s.int()
                            case let k:
                                if let (_, path) = DayCounts.playbackKeys.first(where: { $0.0 == k }) {
                                    c[keyPath: path] = try s.int()
                                    if k == "impressions" { impressionsGiven = true }
                                } else {
                                    try s.skip()
                                }
                            }
                        }
                        guard let day, let id else { throw s.fail("a day's counts without a day or an id") }
                        // Counted before v4, when every recorded show was its impression.
                        if !impressionsGiven { c.impressions = c.shows }
                        log.days[day, default: [:]][id] = c
                    }
                case "awaiting":
                    try s.array { s in
                        var token: String?
                        var a = AwaitingRender(id: "", at: .nan, day: Int.min)
                        try s.object { s, key in
                            switch key {
                            case "show": token = try s.string()
                            case "id": a.id = try s.string()
                            case "at": a.at = try s.double()
                            case "day": a.day = Time.parseDay(try s.string()) ?? Int.min
                            default: try s.skip()
                            }
                        }
                        guard let token, !token.isEmpty, !a.id.isEmpty, Time.isSupported(a.at),
                            Time.supportedDays.contains(a.day)
                        else { throw s.fail("a show awaiting its confirmation without a token, an id or a time") }
                        log.awaiting[token] = a
                    }
                case "confirmed":
                    try s.object { s, token in
                        let t = try s.double()
                        if Time.isSupported(t), !token.isEmpty { log.confirmed[token] = t }
                    }
                case "progress":
                    try s.object { s, id in
                        var mark = ProgressMark(at: .nan, upTo: -1)
                        try s.object { s, key in
                            switch key {
                            case "at": mark.at = try s.double()
                            case "upTo": mark.upTo = try s.int()
                            default: try s.skip()
                            }
                        }
                        if Time.isSupported(mark.at), mark.upTo >= 0, !id.isEmpty { log.progress[id] = mark }
                    }
                default: try s.skip()
                }
            }
            try s.finish()
            guard version == 1 else { throw s.fail("not version 1") }
            if !totalsGiven {   // written by an older adcache: the days kept are what is known
                for ads in log.days.values {
                    for c in ads.values {
                        log.showsTotal.add(c.shows)
                        log.impressionsTotal.add(c.impressions)
                    }
                }
            }
            if let foldedLine, log.lastFolded != nil {
                log.lastFolded?.line = foldedLine
                log.lastFolded?.prefix = foldedPrefix
            }
            return log
        }
    }

    func encode() -> [UInt8] {
        var w = JSONWriter(indent: nil, capacity: 256 + queue.count * 200)
        w.beginObject()
        if !awaiting.isEmpty {
            w.key("awaiting")
            w.beginArray()
            for (token, a) in awaiting.sorted(by: { ($0.value.at, $0.key) < ($1.value.at, $1.key) }) {
                w.key(nil)
                w.beginObject()
                w.field("at", a.at)
                w.field("day", Time.formatDay(a.day))
                w.field("id", a.id)
                w.field("show", token)
                w.endObject()
            }
            w.endArray()
        }
        if !confirmed.isEmpty {
            w.key("confirmed")
            w.beginObject()
            for (token, at) in confirmed.sorted(by: { $0.key < $1.key }) { w.field(token, at) }
            w.endObject()
        }
        if !progress.isEmpty {
            w.key("progress")
            w.beginObject()
            for (id, mark) in progress.sorted(by: { $0.key < $1.key }) {
                w.key(id)
                w.beginObject()
                w.field("at", mark.at)
                w.field("upTo", mark.upTo)
                w.endObject()
            }
            w.endObject()
        }
        w.key("days")
        w.beginArray()
        for (day, ads) in days.sorted(by: { $0.key < $1.key }) {
            for (id, c) in ads.sorted(by: { $0.key < $1.key }) {
                w.key(nil)
                w.beginObject()
                w.field("clicks", c.clicks)
                w.field("completes", c.completes)
                w.field("day", Time.formatDay(day))
                w.field("id", id)
                w.field("shows", c.shows)
                w.field("skips", c.skips)
                for (key, path) in DayCounts.playbackKeys where c[keyPath: path] != 0 || key == "impressions" {
                    w.field(key, c[keyPath: path])
                }
                w.endObject()
            }
        }
        w.endArray()
        w.field("delivered", delivered)
        w.key("dropped")
        w.beginObject()
        w.field("age", droppedAge)
        w.field("overflow", droppedOverflow)
        w.field("permanent", droppedPermanent)
        w.endObject()
        if !droppedRecent.isEmpty {
            w.key("droppedRecent")
            w.beginObject()
            for (hour, n) in droppedRecent.sorted(by: { $0.key < $1.key }) { w.field(String(hour), n) }
            w.endObject()
        }
        w.key("totals")
        w.beginObject()
        w.field("impressions", impressionsTotal)
        w.field("shows", showsTotal)
        w.endObject()
        w.field("lastFolded", lastFolded?.nonce)
        w.field("lastFoldedLine", lastFolded?.line.map(Int64.init))
        w.field("lastFoldedPrefix", lastFolded?.prefix.map { String($0, radix: 16) })
        w.key("queue")
        w.beginArray()
        for e in queue {
            w.key(nil)
            w.beginObject()
            w.field("at", e.at)
            if e.batch { w.key("batch"); w.bool(true) }
            w.field("event", e.event)
            w.field("id", e.id)
            w.field("nonce", e.nonce)
            w.field("queued", e.queuedAt)
            if !e.done.isEmpty {
                w.key("done")
                w.beginArray()
                for p in e.done { w.int(Int64(p)) }
                w.endArray()
            }
            if !e.trackers.isEmpty { w.field("trackers", e.trackers) }
            w.endObject()
        }
        w.endArray()
        w.field("version", Int64(1))
        w.endObject()
        w.out.append(0x0A)
        return w.out
    }
}

extension Time {
    /// `YYYY-MM-DD` of a day number (days since 1970-01-01).
    static func formatDay(_ day: Int) -> String {
        let (y, m, d) = civilFromDays(day)
        return Format.padded(y, width: 4) + "-" + Format.padded(m, width: 2) + "-" + Format.padded(d, width: 2)
    }

    /// The day number of `YYYY-MM-DD`, or nil.
    static func parseDay(_ text: String) -> Int? {
        let parts = text.split(separator: "-", omittingEmptySubsequences: false)
        guard parts.count == 3, parts[0].count == 4, let y = Int(parts[0]), let m = Int(parts[1]),
            let d = Int(parts[2]),
            (1...12).contains(m), (1...daysIn(month: m, year: y)).contains(d)
        else { return nil }
        return daysFromCivil(year: y, month: m, day: d)
    }

    /// RFC 3339 in UTC, always with milliseconds (proof of play: `[TIMESTAMP]`, `at`).
    static func formatMillis(_ t: Double) -> String {
        let t = clamped(t)
        let whole = t.rounded(.down)
        return utc(whole, millis: min(Int(((t - whole) * 1000).rounded(.down)), 999))
    }

    /// A position in an ad as VAST writes it: `HH:MM:SS.mmm` (`[ADPLAYHEAD]`).
    static func formatPlayhead(_ seconds: Double) -> String {
        let ms = Int((max(0, min(seconds, 359_999)) * 1000).rounded())
        let s = ms / 1000
        return Format.padded(s / 3600, width: 2) + ":" + Format.padded(s / 60 % 60, width: 2) + ":"
            + Format.padded(s % 60, width: 2) + "." + Format.padded(ms % 1000, width: 3)
    }
}

extension CacheStore {
    var eventsFile: CacheFile { dir.file(EventLog.fileName) }
    /// The previous generation of the queue, as `index.json.old` is of the index.
    var oldEventsFile: CacheFile { dir.file(EventLog.fileName + ".old") }
    var eventsPath: String { eventsFile.path }
    var deliveryLog: DeliveryLog { DeliveryLog(file: dir.file("events.delivered")) }

    /// The event log, with what a report recorded since it was written applied
    /// (`events.delivered`); empty when there is none. One that cannot be read is set aside
    /// (`events.json.corrupt-<time>`, when `setAside`) with a warning, and its previous
    /// generation takes its place (losing at most the last change), else an empty one
    /// begins: the journal still holds what was not folded.
    func loadEvents(warn: WarningSink, setAside: Bool) throws -> EventLog {
        var log: EventLog
        switch try readEvents(eventsFile) {
        case .success(let decoded): log = decoded
        case .failure:
            var what = "\(EventLog.fileName) could not be read"
            if setAside {
                let aside = asideName(eventsFile)
                if eventsFile.rename(to: aside) { what += "; moved it aside to \(aside.path)" }
            }
            if case .success(let old) = try readEvents(oldEventsFile) {
                warn(Diagnostic(.report, what + "; using \(oldEventsFile.name), the previous generation"))
                log = old
            } else {
                warn(Diagnostic(.report, what + "; starting an empty queue"))
                log = EventLog()
            }
        }
        log.apply(deliveryLog.read())
        return log
    }

    private struct UnreadableEvents: Error {}

    private func readEvents(_ file: CacheFile) throws -> Result<EventLog, UnreadableEvents> {
        guard let st = file.status() else { return .success(EventLog()) }
        guard (st.st_mode & S_IFMT) == S_IFREG else { return .failure(UnreadableEvents()) }   // a link: damaged
        let bytes: [UInt8]
        do {
            bytes = try file.read()
        } catch let e as AdCacheError {
            throw AdCacheError.io(e.message)
        }
        guard let log = try? EventLog.decode(bytes) else { return .failure(UnreadableEvents()) }
        return .success(log)
    }

    /// Replaces events.json atomically, keeping the generation it replaces as events.json.old.
    func saveEvents(_ log: EventLog) throws {
        try replaceKeepingPrevious(eventsFile, previous: oldEventsFile, with: log.encode())
    }

    /// Folds the journal into the event log and the index, then removes what it folded — in
    /// that order, each step durable before the next, so a crash anywhere folds nothing
    /// twice: the log remembers the last record it took, the index the last show it holds.
    /// Holds the index lock (no network), and the journal lock only to move the journal aside
    /// and to remove it (`Journal`): launches never wait for a fold. Returns the event log
    /// and the index as folded.
    @discardableResult
    func foldJournal(bounds: EventBounds, now: (CacheIndex) -> Double, warn: WarningSink) throws -> (
        log: EventLog, index: CacheIndex
    ) {
        guard exists else { return (EventLog(), CacheIndex()) }
        if journal.size == 0, journal.folding.status() == nil, eventsFile.status() != nil,
            deliveryLog.file.status() == nil,   // else a report's outcomes are to be applied
            case .success(var log) = try readEvents(eventsFile), let index = try? load(warn: warn),
            !log.fold([], bounds: bounds, now: now(index))
        {
            return (log, index)   // nothing to fold nor to bound: no lock to wait for
        }
        return try withIndexLock { try foldJournalLocked(bounds: bounds, now: now, warn: warn) }
    }

    /// `foldJournal`, for a caller that holds the index lock.
    @discardableResult
    func foldJournalLocked(bounds: EventBounds, now: (CacheIndex) -> Double, warn: WarningSink) throws -> (
        log: EventLog, index: CacheIndex
    ) {
        let journal = self.journal
        if journal.file.size ?? 0 > 0 { try journal.withLock(timeout: lockTimeout) { try journal.moveAside() } }
        // Read once, for the queue and the index: both files, so also what launches appended
        // since the move.
        let records = try journal.read(warn: warn)
        let loaded = try loadLocked(warn: warn, journal: records)
        var log = try loadEvents(warn: warn, setAside: true)
        // The ledger's lines first, durable, then the queue: never a queued record the
        // ledger lacks (SPEC §14). When they cannot be written, the journal waits.
        let (changed, ledgerWaits) = try foldIntoLedger(
            &log, records: records, bounds: bounds, now: now(loaded.index), warn: warn)
        if changed { try saveEvents(log) }
        CrashPoint.reach("fold.afterEvents")
        if loaded.journalApplied { try save(loaded.index) }
        CrashPoint.reach("fold.afterIndex")
        if !ledgerWaits, journal.folding.status() != nil {
            try journal.withLock(timeout: lockTimeout) { try journal.removeFolded() }
        }
        CrashPoint.reach("fold.afterRemove")
        return (log, loaded.index)
    }
}
