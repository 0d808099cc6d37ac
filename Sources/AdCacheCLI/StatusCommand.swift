import AdCacheKit

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// `adcache status` (SPEC §13): is this device all right?
enum StatusCommand: Command {
    static let json = Flag("json", "Print one JSON object (SPEC §13's fields).")
    static let prometheus = Flag(
        "prometheus", "Print Prometheus metrics (adcache_…) for node_exporter's textfile collector.")
    static let staleAfter = Option.seconds(
        "stale-after", "Seconds without a successful fetch before the problem 'stale'.", range: 1...31_536_000,
        default: "86400")

    static let name = "status"
    static let spec = CommandSpec(
        name: name,
        abstract: "Is this device all right? The cache, its last fetch, its queue and disk, and any problem.",
        discussion:
            "Read-only: writes nothing, takes no lock and never touches the network. One line per problem (never-fetched, stale, failing, nothing-ready, signature-expiring, signature-expired, queue-stuck, events-dropped, clock-offset, disk-low). Exit 0 with no problem, 1 with at least one: 'adcache status -q || alert'.",
        options: [json, prometheus, staleAfter]
    )

    static func run(_ args: ParsedArguments, context: Context) throws -> ExitCode {
        try args.noPositionals()
        if args.has(json) && args.has(prometheus) {
            throw args.usage("'--json' and '--prometheus' cannot go together")
        }
        var options = StatusOptions()
        if let s = try args.get(staleAfter) { options.staleAfter = s }
        options.downloadHours = context.config.value("download-hours").map {
            $0.split(separator: ",").map { String($0.trimmed()) }
        }
        if let budget = context.config.value("max-download-per-day") {
            options.maxDownloadPerDay = try FetchCommand.maxDownloadPerDay.read(
                budget, FetchCommand.maxDownloadPerDay.spec)
        }
        let status = try context.cache().status(options)
        let console = context.console
        if console.quiet {   // -q prints nothing, whatever the form (SPEC §13)
        } else if args.has(json) {
            console.out(status.json)
        } else if args.has(prometheus) {
            console.io.stdout.write(status.prometheus)
        } else {
            for line in status.lines { console.out(Console.visible(line)) }
        }
        return status.isHealthy ? .success : .nothingToShow
    }
}

extension Status {
    /// The human form: one fact a line, then one line per problem.
    var lines: [String] {
        func at(_ d: Date) -> String { AdCache.formatLocalTime(d) }
        var out = ["cache: \(cacheDirectory)"]
        let total = ads.reduce(0) { $0 + $1.count }
        out.append(
            "\(total) ad\(total == 1 ? "" : "s")"
                + (ads.isEmpty ? "" : ": " + ads.map { "\($0.count) \($0.state.rawValue)" }.joined(separator: ", ")))
        if let run = lastFetch {
            out.append("last fetch: \(at(run.at)), " + (run.exit == 0 ? "ok" : "exit \(run.exit): \(run.error ?? "")"))
        } else {
            out.append("last fetch: never")
        }
        if let s = lastSuccess {
            out.append("last success: \(at(s.at)), feed \(s.feed)")
        } else {
            out.append("last success: never")
        }
        if let r = retryAfter { out.append("retry after: \(at(r)) (the feed server asked)") }
        if let hours = downloadHours {
            out.append(
                "download window: \(hours.joined(separator: ",")) (\(windowOpen == true ? "open" : "closed") now)")
        }
        if let budget = maxDownloadPerDay {
            out.append("budget: \(ByteSize.human(downloadedToday)) of \(ByteSize.human(budget)) today")
        }
        if let s = signed {
            out.append("signed feed: key \(s.keyId), serial \(s.serial), valid until \(at(s.validUntil))")
        }
        if let offset = clockOffset { out.append("clock offset: \(Int(offset)) s (trusted time minus the device's)") }
        var queue = "queue: \(queuePending) pending"
        if let oldest = oldestPending { queue += ", oldest \(at(oldest))" }
        queue += ", \(droppedLastDay) dropped in the last 24 hours"
        out.append(queue)
        if let show = lastShow {
            out.append("last show: \(at(show.at)), \(show.id)")
        } else {
            out.append("last show: never")
        }
        out.append(
            "disk: \(ByteSize.human(assetsBytes)) in assets/, "
                + (freeBytes.map { "\(ByteSize.human($0)) free" } ?? "free space unknown"))
        for p in problems { out.append("problem: \(p.name): \(p.detail)") }
        if problems.isEmpty { out.append("ok: no problem") }
        return out
    }

    /// SPEC §13's object.
    var json: String {
        JSONOut.object([
            ("cacheDir", .string(cacheDirectory)),
            ("ads", .object(ads.map { ($0.state.rawValue, .int(Int64($0.count))) })),
            (
                "lastFetch",
                lastFetch.map {
                    .object([("at", .time($0.at)), ("exit", .int(Int64($0.exit))), ("error", .string($0.error))])
                }
                    ?? .null
            ),
            ("lastSuccess", lastSuccess.map { .object([("at", .time($0.at)), ("feed", .string($0.feed))]) } ?? .null),
            ("retryAfter", .time(retryAfter)),
            (
                "signed",
                signed.map {
                    .object([
                        ("keyId", .string($0.keyId)), ("serial", .int($0.serial)), ("validUntil", .time($0.validUntil)),
                    ])
                } ?? .null
            ),
            ("clockOffset", clockOffset.map { .raw(.double($0)) } ?? .null),
            (
                "queue",
                .object([
                    ("pending", .int(queuePending)), ("oldestPending", .time(oldestPending)),
                    ("droppedLastDay", .int(droppedLastDay)),
                ])
            ),
            ("lastShow", lastShow.map { .object([("at", .time($0.at)), ("id", .string($0.id))]) } ?? .null),
            ("assetsBytes", .int(assetsBytes)),
            ("freeBytes", .int(freeBytes)),
            (
                "problems",
                .array(problems.map { .object([("name", .string($0.name)), ("detail", .string($0.detail))]) })
            ),
        ]).render(indent: 2)
    }

    /// The Prometheus text format (0.0.4) that node_exporter's textfile collector reads: every
    /// metric `adcache_…` with its HELP and TYPE; a value `--json` gives as null left out.
    var prometheus: String {
        var out = ""
        func metric(_ name: String, _ type: String, _ help: String, _ samples: [(labels: String, value: Double)]) {
            guard !samples.isEmpty else { return }
            out += "# HELP adcache_\(name) \(help)\n# TYPE adcache_\(name) \(type)\n"
            for s in samples { out += "adcache_\(name)\(s.labels) \(Self.number(s.value))\n" }
        }
        func one(_ name: String, _ type: String, _ help: String, _ value: Double?) {
            metric(name, type, help, value.map { [("", $0)] } ?? [])
        }
        func seconds(_ d: Date?) -> Double? { d?.timeIntervalSince1970 }
        let counts = Dictionary(uniqueKeysWithValues: ads.map { ($0.state, $0.count) })
        metric(
            "ads", "gauge", "Ads in the cache by state.",
            AdState.allCases.map { ("{state=\"\($0.rawValue)\"}", Double(counts[$0] ?? 0)) })
        one("last_fetch_timestamp_seconds", "gauge", "When the last fetch run ended.", seconds(lastFetch?.at))
        one("last_fetch_exit_code", "gauge", "The exit code of the last fetch run.", lastFetch.map { Double($0.exit) })
        one(
            "last_success_timestamp_seconds", "gauge", "When the last fetch that exited 0 ended.",
            seconds(lastSuccess?.at))
        one("queue_pending", "gauge", "Deliveries of proof of play waiting in the queue.", Double(queuePending))
        one(
            "queue_oldest_pending_timestamp_seconds", "gauge", "The time of the oldest event still queued.",
            seconds(oldestPending))
        one(
            "deliveries_dropped_total", "counter", "Deliveries dropped over the cache's life (all reasons).",
            Double(droppedTotal))
        one("shows_total", "counter", "Shows recorded over the cache's life.", Double(showsTotal))
        one("impressions_total", "counter", "Impressions queued over the cache's life.", Double(impressionsTotal))
        one("last_show_timestamp_seconds", "gauge", "When the last show was recorded.", seconds(lastShow?.at))
        one(
            "signed_valid_until_timestamp_seconds", "gauge", "The signed feed's validUntil.",
            seconds(signed?.validUntil))
        one("clock_offset_seconds", "gauge", "The trusted time minus the device clock.", clockOffset)
        one("assets_bytes", "gauge", "Bytes of the files in assets/.", Double(assetsBytes))
        one("free_bytes", "gauge", "Free bytes of the file system that holds the cache.", freeBytes.map(Double.init))
        metric(
            "problem", "gauge", "1 for each problem present (SPEC 13).",
            problems.map { ("{name=\"\($0.name)\"}", 1) })
        return out
    }

    /// A sample value: whole numbers without a decimal point, others with up to 3 decimals.
    static func number(_ v: Double) -> String {
        if v == v.rounded(), abs(v) < 1e15 { return String(Int64(v)) }
        return String(v)
    }
}
