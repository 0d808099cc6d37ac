import AdCacheKit

/// `adcache clear`.
enum ClearCommand: Command {
    static let events = Flag("events", "Also drop the proof-of-play queue and counts (kept otherwise).")

    static let name = "clear"
    static let spec = CommandSpec(
        name: name, abstract: "Remove every cached ad and file (the directory stays).",
        discussion: "The queued proof-of-play events and the counts stay (they are billing data) unless asked.",
        options: [events])

    static func run(_ args: ParsedArguments, context: Context) throws -> ExitCode {
        try args.noPositionals()
        let n = try context.cache().clear(events: args.has(events))
        if !context.console.quiet { context.console.out("removed \(n) file\(n == 1 ? "" : "s")") }
        return .success
    }
}
