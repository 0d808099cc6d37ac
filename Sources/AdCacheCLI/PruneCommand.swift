import AdCacheKit

/// `adcache prune`.
enum PruneCommand: Command {
    static let maxSize = Option.size(
        "max-size", "Then evict ready ads until assets/ holds at most <size> (K, M, G: powers of 1024).")
    static let dryRun = Flag("dry-run", "Say what would be removed; remove nothing.")
    static let at = Option.time("at", "Evaluate as of this time (RFC 3339 or Unix seconds).")
    static let json = Flag("json", "Print the report as JSON.")

    static let name = "prune"
    static let spec = CommandSpec(
        name: name,
        abstract: "Delete expired, used-up and withdrawn ads, unknown files and stale downloads.",
        options: [maxSize, dryRun, at, json]
    )

    static func run(_ args: ParsedArguments, context: Context) throws -> ExitCode {
        try args.noPositionals()
        let options = PruneOptions(maxSize: try args.get(maxSize), dryRun: args.has(dryRun))
        let report = try context.cache(at: try args.get(at)).prune(options)
        let console = context.console
        if args.has(json) {
            console.out(report.json)
            return .success
        }
        guard !console.quiet else { return .success }
        let verb = options.dryRun ? "would remove" : "removed"
        for r in report.removed {
            let what = r.id.map { "ad '\($0)'" } ?? (r.file ?? "")
            let file = r.id != nil && r.file != nil ? ", \(r.file!)" : ""
            let held = r.heldFile.map { ", its file \($0) kept 10 minutes: a launch may have shown it" } ?? ""
            console.out(Console.visible("\(verb) \(what) (\(r.reason)\(file)\(held), \(ByteSize.human(r.bytes)))"))
        }
        let total = "\(ByteSize.human(report.bytesFreed)) (\(report.bytesFreed) bytes)"
        console.out(options.dryRun ? "would free \(total)" : "freed \(total)")
        return .success
    }
}
