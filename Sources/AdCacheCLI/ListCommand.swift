import AdCacheKit

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// `adcache list`.
enum ListCommand: Command {
    static let json = Flag("json", "Print a JSON array of ads.")
    static let at = Option.time("at", "Evaluate as of this time (RFC 3339 or Unix seconds).")

    static let name = "list"
    static let spec = CommandSpec(name: name, abstract: "Show the cached ads and their states.", options: [json, at])

    static func run(_ args: ParsedArguments, context: Context) throws -> ExitCode {
        try args.noPositionals()
        let cache = context.cache(at: try args.get(at))
        let entries = try cache.list()
        let t = cache.now().timeIntervalSince1970
        let console = context.console
        if args.has(json) {
            console.out(ListedAd.json(entries))
            return .success
        }
        guard !console.quiet else { return .success }
        let color = console.colorOutput
        var rows = [["ID", "TYPE", "STATE", "SHOWS", "STARTS", "EXPIRES", "SIZE"]]
        for e in entries {
            rows.append([
                Console.visible(e.id),
                e.type?.rawValue ?? "-",
                e.state.rawValue + (e.restingUntil.map { " (\(relative($0.timeIntervalSince1970, now: t)))" } ?? ""),
                "\(e.shows)/\(e.maxShows.map(String.init) ?? "∞")",
                e.start.map { relative($0.timeIntervalSince1970, now: t) } ?? "-",
                e.expires.map { relative($0.timeIntervalSince1970, now: t) } ?? "never",
                e.bytes.map(ByteSize.human) ?? "-",
            ])
        }
        let widths = (0..<7).map { c in rows.map { $0[c].count }.max()! }
        for (n, row) in rows.enumerated() {
            var line = ""
            for (c, cell) in row.enumerated() {
                let pad = String(repeating: " ", count: widths[c] - cell.count)
                var padded = c == 6 ? pad + cell : cell + pad
                if color, n > 0, c == 2 { padded = paint(entries[n - 1].state, padded) }
                if color, n == 0 { padded = "\u{1B}[1m" + padded + "\u{1B}[0m" }
                line += (c == 0 ? "" : "  ") + padded
            }
            while line.hasSuffix(" ") { line.removeLast() }
            console.out(line)
            if n == 0 && entries.isEmpty { break }
        }
        // Why the last fetch failed, also for an ad whose older file still serves.
        for e in entries where e.state == .failed || e.error != nil {
            let still = [.ready, .scheduled, .resting].contains(e.state) ? " (the older file still serves)" : ""
            console.out(Console.visible("  \(e.id): \(e.error ?? "failed")\(still)"))
        }
        return .success
    }

    /// "in 3 days", "2 h ago", "now": how far `t` is from `now`, as a person says it.
    static func relative(_ t: Double, now: Double) -> String {
        let d = t - now
        guard d.isFinite else { return "-" }
        let a = min(abs(d), 1e15)
        func plural(_ n: Int, _ unit: String) -> String { "\(n) \(unit)\(n == 1 ? "" : "s")" }
        let text: String
        switch a {
        case ..<60: return "now"
        case ..<3600: text = "\(Int(a / 60)) min"
        case ..<86400: text = "\(Int(a / 3600)) h"
        case ..<(86400 * 60): text = plural(Int(a / 86400), "day")
        case ..<(86400 * 730): text = plural(Int(a / (86400 * 30)), "month")
        default: text = plural(Int(a / (86400 * 365)), "year")
        }
        return d > 0 ? "in \(text)" : "\(text) ago"
    }

    /// The state in a colour that says whether it is good news.
    static func paint(_ state: AdState, _ text: String) -> String {
        let code: String
        switch state {
        case .ready: code = "32"
        case .scheduled, .resting: code = "36"
        case .pending: code = "33"
        case .failed, .missing: code = "31"
        case .expired, .exhausted, .withdrawn: code = "2"
        }
        return "\u{1B}[\(code)m\(text)\u{1B}[0m"
    }
}
