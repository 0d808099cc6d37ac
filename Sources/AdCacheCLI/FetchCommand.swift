import AdCacheKit
import Foundation

/// `adcache fetch [FEED]`.
enum FetchCommand: Command {
    static let spec = CommandSpec(
        name: "fetch",
        abstract: "Download the ad feed and the asset of every ad that has not expired.",
        discussion: "Assets already cached are revalidated, not downloaded again; interrupted downloads resume. Exit 75 when the feed was read but some asset failed (the rest is committed); 69 when the feed cannot be fetched (the cache is unchanged).",
        arguments: [("<feed>?", "An http or https URL, a file: URL or a path (default: the feed of the last successful fetch).")],
        options: [
            .option("timeout", "<sec>", "Give up on one transfer after this many seconds (default: 60)."),
            .option("deadline", "<sec>", "Stop the whole run after this many seconds; what finished is kept (default: none)."),
            .option("parallel", "<n>", "Transfers at once (default: 4)."),
            .option("retries", "<n>", "Retries of a transient failure (default: 2)."),
            .option("max-asset-size", "<size>", "Refuse an asset larger than this (default: 100M)."),
            .option("max-feed-size", "<size>", "Refuse a feed larger than this (default: 8M)."),
            .option("header", "<header>", "Send 'Name: value' with the feed request (repeatable).", repeatable: true),
            .option("user-agent", "<ua>", "The User-Agent of every request (default: adcache/<version> libcurl/<version>)."),
            .option("cacert", "<file>", "Trust the CA certificates in this file instead of the system's."),
            .option("jitter", "<sec>", "Sleep a random 0 to <sec> seconds first (for fleets of devices)."),
            .flag("progress", "Show a progress bar on stderr even when it is not a terminal."),
            .flag("no-progress", "Never show a progress bar."),
            .flag("json", "Print a report as JSON on stdout."),
        ]
    )

    static func run(_ args: ParsedArguments, context: Context) throws -> ExitCode {
        let startedAt = monotonicNow()
        try args.noPositionals(spec, allowed: 1)
        var options = FetchOptions()
        options.feed = args.positionals.first
        if let t = try args.number("timeout", command: spec, range: 0.001...86400 * 365) { options.transfer.timeout = t }
        if let d = try args.number("deadline", command: spec, range: 0.001...86400 * 365) { options.transfer.deadline = startedAt + d }
        if let p = try args.integer("parallel", command: spec, range: 1...64) { options.transfer.parallel = p }
        if let r = try args.integer("retries", command: spec, range: 0...20) { options.transfer.retries = r }
        if let s = try args.size("max-asset-size", command: spec) { options.maxAssetSize = s }
        if let s = try args.size("max-feed-size", command: spec) { options.maxFeedSize = s }
        if let j = try args.number("jitter", command: spec) { options.jitter = j }
        if let ua = args.value("user-agent") { options.transfer.userAgent = ua }
        for h in args.values["header"] ?? [] {
            guard let colon = h.firstIndex(of: ":"), colon != h.startIndex, !h.contains("\n"), !h.contains("\r") else {
                throw AdCacheError.usage("option '--header' needs 'Name: value' (got '\(h)')", hint: "see 'adcache fetch --help'")
            }
            options.headers.append(h)
        }
        if let ca = args.value("cacert") {
            let path = CacheStore.absolute(ca)
            guard FileManager.default.isReadableFile(atPath: path) else {
                throw AdCacheError.usage("option '--cacert': cannot read '\(ca)'", hint: "see 'adcache fetch --help'")
            }
            options.transfer.caFile = path
        }
        if args.has("progress") && args.has("no-progress") {
            throw AdCacheError.usage("'--progress' and '--no-progress' cannot go together", hint: "see 'adcache fetch --help'")
        }

        let console = context.console
        let fetcher = Fetcher(store: context.store, options: options, warn: context.warn)
        let showProgress = args.has("progress") || (!args.has("no-progress") && console.stderrIsTerminal)
        let bar = ProgressBar(console: console)
        if showProgress { fetcher.onProgress = { bar.update($0) } }
        let report = try fetcher.run()
        if showProgress { bar.finish() }

        for ad in report.ads {
            if ad.outcome == .failed, let error = ad.error {
                console.warning("ad '\(ad.id)' failed: \(error)")
            } else {
                console.note("\(ad.id): \(ad.outcome.rawValue)\(ad.bytes.map { " (\(ByteSize.human($0)))" } ?? "")")
            }
        }
        if args.has("json") {
            console.out(report.json.render(indent: 2))
        } else if !console.quiet {
            console.out(report.summary)
        }
        return ExitCode(rawValue: report.exitCode) ?? .software
    }
}

extension FetchReport {
    var json: JSONOut {
        .object([
            ("feed", .string(feed)),
            ("feedStatus", .string(feedStatus)),
            ("ads", .array(ads.map { ad in
                .object([
                    ("id", .string(ad.id)),
                    ("url", .string(ad.url)),
                    ("outcome", .string(ad.outcome.rawValue)),
                    ("bytes", .int(ad.bytes)),
                    ("error", .string(ad.error)),
                ])
            })),
            ("warnings", .array(warnings.map { .string($0) })),
            ("summary", .string(summary)),
            ("exitCode", .int(Int64(exitCode))),
        ])
    }
}

/// A one-line progress bar on stderr: assets done, bytes, rate.
final class ProgressBar {
    let console: Console
    private var drawn = false

    init(console: Console) { self.console = console }

    func update(_ p: TransferProgress) {
        let width = 24
        let filled = p.total == 0 ? width : width * p.done / p.total
        let bar = String(repeating: "#", count: filled) + String(repeating: "-", count: width - filled)
        let rate = p.elapsed > 0 ? Int64(Double(p.bytes) / p.elapsed) : 0
        console.err("\r\u{1B}[K[\(bar)] \(p.done)/\(p.total) assets  \(ByteSize.human(p.bytes))  \(ByteSize.human(rate))/s")
        drawn = true
    }

    func finish() {
        if drawn { console.err("\r\u{1B}[K") }
    }
}
