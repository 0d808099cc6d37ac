import AdCacheKit
import Foundation

/// `adcache list`.
enum ListCommand: Command {
    static let spec = CommandSpec(
        name: "list",
        abstract: "Show the cached ads and their states.",
        options: [
            .flag("json", "Print a JSON array of ads."),
            .option("at", "<time>", "Evaluate as of this time (RFC 3339 or Unix seconds)."),
        ]
    )

    static func run(_ args: ParsedArguments, context: Context) throws -> ExitCode {
        try args.noPositionals(spec)
        let t = try args.time("at", command: spec) ?? Date().timeIntervalSince1970
        let entries = try context.store.listing(at: t, warn: context.warn)
        let console = context.console
        if args.has("json") {
            console.out(JSONOut.array(entries.map(\.json)).render(indent: 2))
            return .success
        }
        guard !console.quiet else { return .success }
        var rows = [["ID", "TYPE", "STATE", "SHOWS", "STARTS", "EXPIRES", "SIZE"]]
        for e in entries {
            let r = e.record
            rows.append([
                r.id,
                r.type?.rawValue ?? "-",
                e.state.rawValue,
                "\(r.shows)/\(r.maxShows.map(String.init) ?? "∞")",
                r.start.map(shortTime) ?? "-",
                r.expires.map(shortTime) ?? "never",
                r.file == nil ? "-" : ByteSize.human(r.bytes ?? 0),
            ])
        }
        let widths = (0..<7).map { c in rows.map { $0[c].count }.max()! }
        for (n, row) in rows.enumerated() {
            var line = ""
            for (c, cell) in row.enumerated() {
                let padded = c == 6 ? String(repeating: " ", count: widths[c] - cell.count) + cell
                    : cell + String(repeating: " ", count: widths[c] - cell.count)
                line += (c == 0 ? "" : "  ") + padded
            }
            console.out(line.trimmingCharacters(in: .whitespaces))
            if n == 0 && entries.isEmpty { break }
        }
        for e in entries where e.state == .failed {
            console.out("  \(e.record.id): \(e.record.error ?? "failed")")
        }
        return .success
    }

    /// `2027-03-01 08:00` in UTC.
    static func shortTime(_ t: Double) -> String {
        let s = Time.format(t.rounded(.down))
        return s.prefix(10) + " " + s.dropFirst(11).prefix(5)
    }
}

/// `adcache clear`.
enum ClearCommand: Command {
    static let spec = CommandSpec(name: "clear", abstract: "Remove every cached ad and file (the directory stays).")

    static func run(_ args: ParsedArguments, context: Context) throws -> ExitCode {
        try args.noPositionals(spec)
        let n = try clearCache(context.store, warn: context.warn)
        if !context.console.quiet { context.console.out("removed \(n) file\(n == 1 ? "" : "s")") }
        return .success
    }
}
