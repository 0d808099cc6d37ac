import AdCacheKit

/// `adcache why [ID]` (SPEC §4).
enum WhyCommand: Command {
    static let json = Flag("json", "Print one JSON object instead of the explanation.")
    static let at = Option.time("at", "Explain as of this time (RFC 3339 or Unix seconds).")

    static let name = "why"
    static let spec = CommandSpec(
        name: name,
        abstract: "Explain the choice 'next' would make now: every rule per ad, and why the chosen ad won.",
        discussion:
            "Read-only: records nothing and never touches the network. Exit 0, also when nothing is eligible; 65 for an unknown ID.",
        arguments: [("<id>?", "Explain only this ad.")],
        options: [json, NextCommand.type, NextCommand.placement, NextCommand.cooldown, at]
    )

    static func run(_ args: ParsedArguments, context: Context) throws -> ExitCode {
        try args.noPositionals(allowed: 1)
        var options = NextOptions(
            peek: true, type: try args.get(NextCommand.type), cooldown: try args.get(NextCommand.cooldown))
        if let p = try args.get(NextCommand.placement) {
            guard !p.isEmpty else { throw args.usage("option '--placement' needs a name") }
            options.placement = p
        }
        let report = try context.cache(at: try args.get(at)).why(options, id: args.positionals.first)
        let console = context.console
        if args.has(json) {
            console.out(
                JSONOut.object([
                    ("chosen", .string(report.chosen)),
                    ("reason", .string(report.reason)),
                    (
                        "ads",
                        .array(
                            report.ads.map { ad in
                                .object([
                                    ("id", .string(ad.id)), ("eligible", .bool(ad.eligible)),
                                    (
                                        "rules",
                                        .array(
                                            ad.rules.map {
                                                .object([
                                                    ("rule", .string($0.rule)), ("pass", .bool($0.pass)),
                                                    ("detail", .string($0.detail)),
                                                ])
                                            })
                                    ),
                                ])
                            })
                    ),
                ]).render())
            return .success
        }
        let width = (report.ads.flatMap { $0.rules.map(\.rule.count) }.max() ?? 0) + 2
        for ad in report.ads {
            let failed = ad.rules.filter { !$0.pass }.map(\.rule)
            console.out(
                Console.visible(ad.id)
                    + (ad.eligible ? ": eligible" : ": not eligible (\(failed.joined(separator: ", ")))"))
            for r in ad.rules {
                console.out("  \(r.pass ? "pass" : "FAIL")  \(r.rule.padded(to: width))\(Console.visible(r.detail))")
            }
        }
        if let chosen = report.chosen {
            console.out("next would show \(Console.visible(chosen)): \(report.reason)")
        } else {
            console.out("next would show nothing: \(report.reason)")
        }
        return .success
    }
}
