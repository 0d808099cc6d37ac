import AdCacheKit

/// `adcache clear`.
enum ClearCommand: Command {
    static let spec = CommandSpec(name: "clear", abstract: "Remove every cached ad and file (the directory stays).")

    static func run(_ args: ParsedArguments, context: Context) throws -> ExitCode {
        try args.noPositionals()
        let n = try context.cache().clear()
        if !context.console.quiet { context.console.out("removed \(n) file\(n == 1 ? "" : "s")") }
        return .success
    }
}
