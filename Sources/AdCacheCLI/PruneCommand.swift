import AdCacheKit

/// `adcache prune`.
enum PruneCommand: Command {
    static let spec = CommandSpec(
        name: "prune",
        abstract: "Delete expired, used-up and withdrawn ads, unknown files and stale downloads.",
        options: [
            .option("max-size", "<size>", "Then evict ready ads until assets/ holds at most <size> (K, M, G: powers of 1024)."),
            .flag("dry-run", "Say what would be removed; remove nothing."),
            .option("at", "<time>", "Evaluate as of this time (RFC 3339 or Unix seconds)."),
            .flag("json", "Print the report as JSON."),
        ]
    )

    static func run(_ args: ParsedArguments, context: Context) throws -> ExitCode {
        try args.noPositionals(spec)
        var options = PruneOptions()
        options.maxSize = try args.size("max-size", command: spec)
        options.dryRun = args.has("dry-run")
        options.at = try args.time("at", command: spec)
        let report = try Pruner(store: context.store, warn: context.warn).run(options)
        let console = context.console
        if args.has("json") {
            console.out(report.json.render(indent: 2))
            return .success
        }
        guard !console.quiet else { return .success }
        let verb = options.dryRun ? "would remove" : "removed"
        for r in report.removed {
            let what = r.id.map { "ad '\($0)'" } ?? (r.file ?? "")
            let file = r.id != nil && r.file != nil ? ", \(r.file!)" : ""
            console.out("\(verb) \(what) (\(r.reason)\(file), \(ByteSize.human(r.bytes)))")
        }
        let total = "\(ByteSize.human(report.bytesFreed)) (\(report.bytesFreed) bytes)"
        console.out(options.dryRun ? "would free \(total)" : "freed \(total)")
        return .success
    }
}

extension PruneReport {
    var json: JSONOut {
        .object([
            ("dryRun", .bool(dryRun)),
            ("removed", .array(removed.map { r in
                .object([("id", .string(r.id)), ("reason", .string(r.reason)), ("file", .string(r.file)), ("bytes", .int(r.bytes))])
            })),
            ("bytesFreed", .int(bytesFreed)),
            ("bytesKept", .int(bytesKept)),
        ])
    }
}
