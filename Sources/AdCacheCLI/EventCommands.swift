import AdCacheKit

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// `adcache event TYPE ID`.
enum EventCommand: Command {
    static let at = Option.time("at", "Date the event at this time (RFC 3339 or Unix seconds) instead of now.")
    static let offset = Option.seconds(
        "offset", "With 'progress': the video's position, in seconds from its start.", range: 0...86400)
    static let show = Option.text(
        "show", "<token>",
        "With 'impression': the show that 'next' recorded in render mode (its 'show' token) began to render.")

    static let name = "event"
    static let spec = CommandSpec(
        name: name,
        abstract: "Record that an ad was clicked, skipped or played to its end, and queue its trackers.",
        discussion:
            "TYPE is click, skip or complete; for a VAST video also start, firstQuartile, midpoint or thirdQuartile; impression --show TOKEN confirms a show that 'next' recorded in render mode (without it, 'adcache next' records impressions); progress --offset SEC queues a VAST video's progress trackers up to that position. Never touches the network: 'adcache report' or the next fetch delivers the queue. Exit 65 when the cache holds no ad with that id, or no show TOKEN of it awaits its confirmation.",
        arguments: [
            (
                "<type>",
                "click, skip, complete, start, firstQuartile, midpoint, thirdQuartile; impression with --show TOKEN; progress with --offset SEC"
            ),
            ("<id>", "The ad's id, as 'next' gives it in its JSON."),
        ],
        options: [at, show, offset]
    )

    static func run(_ args: ParsedArguments, context: Context) throws -> ExitCode {
        try args.noPositionals(allowed: 2)
        guard args.positionals.count == 2 else { throw args.usage("'event' needs a TYPE and an ID") }
        let name = args.positionals[0]
        let token = try args.get(show)
        if name == "impression", let token {
            let cache = context.cache(at: try args.get(at))
            if try !cache.confirmImpression(id: args.positionals[1], show: token) {
                context.console.warning("show \(Console.visible(token)) was confirmed already; nothing queued")
            }
            return .success
        }
        if token != nil { throw args.usage("'--show' goes with 'impression' only") }
        let position = try args.get(offset)
        if name == "progress" {
            guard let position else { throw args.usage("'progress' needs '--offset SEC' (the video's position)") }
            try context.cache(at: try args.get(at)).reportProgress(id: args.positionals[1], offset: position)
            return .success
        }
        if position != nil { throw args.usage("'--offset' goes with 'progress' only") }
        guard let type = AdEvent(rawValue: name) else {
            let names = AdEvent.allCases.map(\.rawValue).joined(separator: ", ")
            let why =
                name == "impression"
                ? " ('adcache next' records impressions; 'impression --show TOKEN' confirms a render-mode show)" : ""
            throw args.usage("unknown event '\(Console.visible(name))': expected one of \(names)\(why)")
        }
        try context.cache(at: try args.get(at)).event(type, id: args.positionals[1])
        return .success
    }
}

/// `adcache report`.
enum ReportCommand: Command {
    static let maxEvents = Option.integer(
        "max-events", "At most this many events queued; the oldest go first (counted as dropped).",
        range: OptionRanges.maxEvents, default: "100000")
    static let maxEventAge = Option.integer(
        "max-event-age", "Drop queued events older than this many days (counted).", range: OptionRanges.maxEventAge,
        default: "30")
    static let json = Flag("json", "Print {\"delivered\", \"pending\", \"dropped\"} for this run as JSON.")

    static let name = "report"
    static let spec = CommandSpec(
        name: name,
        abstract: "Deliver the queued proof-of-play events now (what fetch does first).",
        discussion:
            "Exit 0 when the queue is empty afterwards, 75 when deliveries remain for a later run (network, timeouts, 408, 429, 5xx).",
        options: [
            FetchCommand.timeout, FetchCommand.deadline, FetchCommand.parallel, FetchCommand.retries,
            FetchCommand.cacert, FetchCommand.userAgent, FetchCommand.proxy, FetchCommand.noProxy, maxEvents,
            maxEventAge, json,
        ]
    )

    static func run(_ args: ParsedArguments, context: Context) throws -> ExitCode {
        try args.noPositionals()
        var options = ReportOptions()
        if let t = try args.get(FetchCommand.timeout) { options.transfer.timeout = t }
        options.transfer.deadline = try args.get(FetchCommand.deadline)
        if let p = try args.get(FetchCommand.parallel) { options.transfer.parallel = p }
        if let r = try args.get(FetchCommand.retries) { options.transfer.retries = r }
        options.transfer.caFile = try FetchCommand.caFile(args)
        options.transfer.userAgent = try args.get(FetchCommand.userAgent)
        options.transfer.proxy = try args.get(FetchCommand.proxy)
        options.transfer.noProxy = try args.get(FetchCommand.noProxy)
        options.maxEvents = try args.get(maxEvents)
        options.maxEventAge = try args.get(maxEventAge)
        Signals.watch()
        defer { Signals.restore() }
        options.transfer.isCancelled = { Signals.received != nil }
        let result = try context.cache().report(options)
        let console = context.console
        if args.has(json) {
            console.out(result.json)
        } else if !console.quiet {
            console.out(result.summary)
        }
        // -v says why what stays queued stays (offline, a certificate, a 503).
        if result.pending > 0, let why = result.lastError { console.note("not delivered: \(why)") }
        if let sig = Signals.received { return ExitCode(signal: sig) }
        return result.pending == 0 ? .success : .tempFail
    }
}

/// `adcache stats`.
enum StatsCommand: Command {
    static let json = Flag("json", "Print the counts and the queue as JSON.")
    static let since = Option.time("since", "From this time's local day on (wins over --days).")
    static let days = Option.integer("days", "The last <n> local days, today included.", range: 1...90, default: "30")

    static let name = "stats"
    static let spec = CommandSpec(
        name: name,
        abstract: "Proof of play: shows, clicks, skips and completes per ad and day, and the event queue.",
        discussion: "Counts are kept 90 days, also for ads gone from the feed. Reads only.",
        options: [json, since, days]
    )

    static func run(_ args: ParsedArguments, context: Context) throws -> ExitCode {
        try args.noPositionals()
        let options = StatsOptions(since: try args.get(since), days: try args.get(days) ?? 30)
        var stats = try context.cache().stats(options)
        if let budget = context.config.value("max-download-per-day") {
            stats.downloadBudget = try FetchCommand.maxDownloadPerDay.read(budget, FetchCommand.maxDownloadPerDay.spec)
        }
        let console = context.console
        if args.has(json) {
            console.out(stats.json)
            return .success
        }
        guard !console.quiet else { return .success }
        // Render mode's and VAST's columns only when some count is not zero, or says
        // something (impressions other than the shows).
        let rendering = stats.days.contains { $0.unrendered != 0 || $0.impressions != $0.shows }
        let extra: [(String, KeyPath<Stats.Day, Int64>)] =
            (rendering ? [("IMPRESSIONS", \Stats.Day.impressions), ("UNRENDERED", \Stats.Day.unrendered)] : [])
            + [
                ("STARTS", \.starts), ("Q1", \.firstQuartiles), ("MID", \.midpoints), ("Q3", \.thirdQuartiles),
                ("NOTUSED", \.notUsed), ("ERRORS", \.errors),
            ].filter { _, path in stats.days.contains { $0[keyPath: path] != 0 } }
        let header = ["DAY", "ID", "SHOWS", "CLICKS", "SKIPS", "COMPLETES"] + extra.map(\.0)
        let rows =
            [header]
            + stats.days.map { d in
                [d.day, Console.visible(d.id), "\(d.shows)", "\(d.clicks)", "\(d.skips)", "\(d.completes)"]
                    + extra.map { "\(d[keyPath: $0.1])" }
            }
        let widths = header.indices.map { c in rows.map { $0[c].count }.max() ?? 0 }
        for row in rows {
            console.out(
                row.enumerated().map { c, cell in
                    c == row.count - 1 ? cell : cell.padded(to: widths[c])
                }.joined(separator: "  "))
        }
        let dropped = stats.droppedPermanent + stats.droppedAge + stats.droppedOverflow
        var queue =
            "queue: \(stats.pending) pending, \(stats.delivered) delivered, \(dropped) dropped"
            + " (\(stats.droppedPermanent) permanent, \(stats.droppedAge) age, \(stats.droppedOverflow) overflow)"
        if let oldest = stats.oldestPending { queue += "; oldest pending \(AdCache.formatTime(oldest))" }
        console.out(queue)
        return .success
    }
}
