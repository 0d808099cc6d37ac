import AdCacheKit

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// `adcache fetch [FEED]`.
enum FetchCommand: Command {
    static let timeout = Option.seconds(
        "timeout", "The connect time, and the longest stretch without a byte, before a transfer gives up.",
        range: OptionRanges.timeout, default: "30")
    static let deadline = Option.seconds(
        "deadline", "Stop the whole run after this many seconds; what finished is kept.", range: OptionRanges.deadline,
        default: "none")
    static let parallel = Option.integer("parallel", "Transfers at once.", range: OptionRanges.parallel, default: "4")
    static let retries = Option.integer(
        "retries", "Retries of a transient failure.", range: OptionRanges.retries, default: "2")
    static let limitRate = Option.size(
        "limit-rate", "At most this many bytes per second, all transfers of the run together (default: no limit).",
        minimum: 1)
    static let maxAssetSize = Option.size("max-asset-size", "Refuse an asset larger than this.", default: "100M")
    static let maxFeedSize = Option.size("max-feed-size", "Refuse a feed larger than this.", default: "8M")
    static let header = Option.checkedText(
        "header", "<header>", "Send 'Name: value' with the feed request (repeatable).", repeatable: true,
        needs: "'Name: value'", FetchOptions.isHeader)
    static let userAgent = Option.text(
        "user-agent", "<ua>", "The User-Agent of every request (default: adcache/<version> libcurl/<version>).")
    static let cacert = Option.file("cacert", "Trust the CA certificates in this file instead of the system's.")
    static let proxy = Option.checkedText(
        "proxy", "<url>",
        "Send every request through this HTTP proxy, as curl's option (default: http_proxy, https_proxy).",
        needs: "an http:// or https:// URL"
    ) { p in
        let lower = p.lowercased()
        return (lower.hasPrefix("http://") || lower.hasPrefix("https://")) && p.count > 8 && !p.contains(" ")
    }
    static let noProxy = Option.text(
        "noproxy", "<hosts>", "Hosts, comma-separated, that bypass the proxy, as curl's option ('*': all).")
    static let jitter = Option.seconds(
        "jitter", "Sleep a random 0 to <sec> seconds first (for fleets of devices).", range: OptionRanges.jitter,
        default: "0")
    static let revalidate = Flag(
        "revalidate",
        "Ask for the feed and every asset even while the server marked them fresh (Cache-Control), and retry what waits out the back-off of a failure for good."
    )
    static let signature = Option.file(
        "signature",
        "Check the feed against this minisign signature file (needed for '-' when a feed key is configured).")
    static let downloadHours = Option.checkedText(
        "download-hours", "<windows>",
        "Request assets only within these local hours, HH:MM-HH:MM[,...] (the feed is always read).",
        needs: "HH:MM-HH:MM windows, separated by commas, each with a start that is not its end"
    ) { text in
        let windows = text.split(separator: ",").map { String($0.trimmed()) }
        return !windows.isEmpty && windows.allSatisfy(FetchOptions.isDownloadWindow)
    }
    static let maxDownloadPerDay = Option.size(
        "max-download-per-day", "At most this many asset bytes received per local day (default: no budget).")
    static let now = Flag("now", "Download now, whatever download-hours says (an operator at the console).")
    static let progress = Flag("progress", "Show a progress bar on stderr even when it is not a terminal.")
    static let noProgress = Flag("no-progress", "Never show a progress bar.")
    static let json = Flag("json", "Print a report as JSON on stdout.")
    static let noReport = Flag(
        "no-report", "Do not deliver the queued proof-of-play events (after the feed, before the assets).")

    static let name = "fetch"
    static let spec = CommandSpec(
        name: name,
        abstract: "Download the ad feed and the asset of every ad that has not expired.",
        discussion:
            "Assets already cached are revalidated, not downloaded again; interrupted downloads resume. Exit 75 when the feed was read but some asset failed (the rest is committed); 69 when the feed cannot be fetched (the cache is unchanged). With a feed key configured (feed-key, feed-keys-dir), only a feed signed by one of the keys is accepted: <feed>.minisig is fetched after it; a refused feed is exit 65.",
        arguments: [
            ("<feed>?", "An http or https URL, a file: URL or a path (default: the feed of the last successful fetch).")
        ],
        options: [
            timeout, deadline, parallel, retries, maxAssetSize, maxFeedSize, limitRate, header, userAgent, cacert,
            proxy,
            noProxy,
            jitter, revalidate, signature, downloadHours, maxDownloadPerDay, now, noReport, progress, noProgress, json,
        ]
    )

    /// `--cacert`, made absolute and checked readable.
    static func caFile(_ args: ParsedArguments) throws -> String? {
        guard let ca = try args.get(cacert) else { return nil }
        let path = PathText.absolute(ca)
        guard FileManager.default.isReadableFile(atPath: path) else {
            throw args.usage("option '--cacert': cannot read '\(ca)'")
        }
        return path
    }

    /// How the feed and its assets are read, as `fetch` and `check` share it: FEED (`-`:
    /// standard input), the transfer settings, the feed keys and signature, VAST's settings.
    static func feedOptions(_ feed: String?, _ args: ParsedArguments, context: Context) throws -> FetchOptions {
        var options = FetchOptions(feed: feed)
        if options.feed == "-" { options.feedContent = context.console.io.readStandardInput() }
        if let t = try args.get(timeout) { options.transfer.timeout = t }
        options.transfer.deadline = try args.get(deadline)
        if let p = try args.get(parallel) { options.transfer.parallel = p }
        if let r = try args.get(retries) { options.transfer.retries = r }
        if let s = try args.get(maxAssetSize) { options.maxAssetSize = s }
        if let s = try args.get(maxFeedSize) { options.maxFeedSize = s }
        options.limitRate = try args.get(limitRate)
        options.transfer.userAgent = try args.get(userAgent)
        options.headers += try args.all(header)
        options.transfer.caFile = try caFile(args)
        options.transfer.proxy = try args.get(proxy)
        options.transfer.noProxy = try args.get(noProxy)
        options.feedKeys = context.feedKeys
        options.vast = context.config.vast
        options.signatureFile = try args.get(signature).map(PathText.absolute)
        return options
    }

    /// The options `feedOptions` reads.
    static let feedOptionList: [any DeclaredOption] = [
        timeout, deadline, parallel, retries, maxAssetSize, maxFeedSize, limitRate, header, userAgent, cacert, proxy,
        noProxy, signature,
    ]

    static func run(_ args: ParsedArguments, context: Context) throws -> ExitCode {
        try args.noPositionals(allowed: 1)
        // FEED: the argument, else the configured feed, else the last successful fetch's.
        var feed = args.positionals.first ?? context.config.value("feed")
        // A local path is remembered absolute, so that cron's bare `fetch` (run elsewhere) finds it.
        if let f = feed, f != "-", !f.contains("://"), !f.hasPrefix("/") { feed = PathText.absolute(f) }
        var options = try feedOptions(feed, args, context: context)
        if let j = try args.get(jitter) { options.jitter = j }
        options.revalidate = args.has(revalidate)
        options.warnAlways = context.console.verbose
        options.report = !args.has(noReport)
        options.downloadHours = try args.get(downloadHours).map {
            $0.split(separator: ",").map { String($0.trimmed()) }
        }
        options.maxDownloadPerDay = try args.get(maxDownloadPerDay)
        options.ignoreDownloadHours = args.has(now)
        if args.has(progress) && args.has(noProgress) {
            throw args.usage("'--progress' and '--no-progress' cannot go together")
        }

        let console = context.console
        let showProgress = args.has(progress) || (!args.has(noProgress) && console.stderrIsTerminal)
        let bar = ProgressBar(console: console)
        let report: FetchReport
        Signals.watch()
        defer { Signals.restore() }
        options.transfer.isCancelled = { Signals.received != nil }
        do {
            report = try context.cache().fetch(options, progress: showProgress ? { bar.update($0) } : nil)
        } catch AdCacheError.invalidRequest(let message) where options.feed == nil {
            throw args.usage(message)   // no FEED given and none remembered
        } catch let e as AdCacheError {
            if let sig = Signals.received {   // stopped while the feed downloaded: nothing changed
                if showProgress { bar.finish() }
                console.error("interrupted: the cache is unchanged")
                return ExitCode(signal: sig)
            }
            throw e
        }
        if showProgress { bar.finish() }
        if report.toldToWaitUntil != nil, !args.has(json) { return .tempFail }   // the warning said it

        for ad in report.ads {
            if ad.outcome == .failed, let error = ad.error {
                console.warning("ad '\(ad.id)' failed: \(error)")
            } else {
                console.note("\(ad.id): \(ad.outcome.rawValue)\(ad.bytes.map { " (\(ByteSize.human($0)))" } ?? "")")
            }
        }
        var code = ExitCode(rawValue: report.exitCode) ?? .software
        if report.interrupted, let sig = Signals.received {
            let n = report.partialsKept
            console.err("adcache: interrupted: \(n) download\(n == 1 ? "" : "s") kept for the next run\n")
            code = ExitCode(signal: sig)   // wins over every other code of the run
        }
        if args.has(json) {
            console.out(report.json(exitCode: code.rawValue))
        } else if !console.quiet {
            console.out(report.summary)
        }
        return code
    }
}

/// Progress on stderr. On a terminal, one line redrawn in place: bytes done of the total
/// (when every size is known), percent, rate and time left, resumed bytes included. Into a
/// file or pipe it never writes control sequences: one plain line per finished asset.
final class ProgressBar {
    let console: Console
    private var drawn = false

    init(console: Console) { self.console = console }

    func update(_ p: FetchProgress) {
        guard console.stderrIsTerminal else {
            if let (url, bytes) = p.finished {
                console.err("adcache: \(p.done)/\(p.total) \(Console.visible(url)) \(ByteSize.human(bytes))\n")
            }
            return
        }
        console.err("\r\u{1B}[K" + Self.line(p))
        drawn = true
    }

    /// `[#####-------------------] 60M/288M  21%  5.1M/s  0:45 left`.
    static func line(_ p: FetchProgress) -> String {
        let width = 24
        let rate = "\(ByteSize.human(Int64(p.rate)))/s"
        guard let total = p.totalBytes, total > 0 else {
            let filled = p.total == 0 ? width : width * p.done / p.total
            let bar = String(repeating: "#", count: filled) + String(repeating: "-", count: width - filled)
            return "[\(bar)] \(ByteSize.human(p.bytes))  \(rate)  \(p.done)/\(p.total) assets"
        }
        let fraction = min(1, Double(p.bytes) / Double(total))
        let filled = Int(Double(width) * fraction)
        let bar = String(repeating: "#", count: filled) + String(repeating: "-", count: width - filled)
        var text = "[\(bar)] \(ByteSize.human(p.bytes))/\(ByteSize.human(total))  \(Int(fraction * 100))%  \(rate)"
        if p.rate > 0, total > p.bytes {
            let left = Int(Double(total - p.bytes) / p.rate)
            text +=
                "  \(left / 3600 > 0 ? "\(left / 3600):" : "")\(left / 60 % 60):" + Format.padded(left % 60, width: 2)
                + " left"
        }
        return text
    }

    func finish() {
        if drawn { console.err("\r\u{1B}[K") }
    }
}
