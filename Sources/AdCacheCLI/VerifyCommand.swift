import AdCacheKit

/// `adcache verify` (SPEC §4).
enum VerifyCommand: Command {
    static let json = Flag("json", "Print one JSON object instead of the summary.")

    static let name = "verify"
    static let spec = CommandSpec(
        name: name,
        abstract: "Check every cached file's size and SHA-256; set damaged files aside for the next fetch.",
        discussion:
            "A damaged file is moved aside as assets/<name>.bad-<time> (removed by the next prune) and its ad is missing until the next fetch downloads it again. Never touches the network. Exit 0 when all is well, 65 when a file was damaged or missing.",
        options: [json]
    )

    static func run(_ args: ParsedArguments, context: Context) throws -> ExitCode {
        try args.noPositionals()
        let report = try context.cache().verify()
        let console = context.console
        if args.has(json) {
            console.out(
                JSONOut.object([
                    ("verified", .int(Int64(report.verified))),
                    ("damaged", .array(report.damaged.map { .string($0) })),
                    ("missing", .array(report.missing.map { .string($0) })),
                ]).render())
        } else {
            for line in report.problems { console.out(Console.visible(line)) }
            let n = report.verified
            if !console.quiet || !report.isHealthy {
                console.out(
                    "\(n) file\(n == 1 ? "" : "s") verified, \(report.damaged.count) damaged, \(report.missing.count) missing"
                )
            }
        }
        return report.isHealthy ? .success : .dataError
    }
}
