import AdCacheKit

/// `adcache next`.
enum NextCommand: Command {
    static let spec = CommandSpec(
        name: "next",
        abstract: "Print the cached asset this launch shows, and record the show.",
        discussion: "Never touches the network. Exit 1 with nothing on stdout when no ad is eligible (unless --fallback is given).",
        options: [
            .flag("peek", "Do not record the show."),
            .flag("json", "Print one JSON object instead of the path."),
            .option("fallback", "<file>", "When nothing is eligible, print this file's path and exit 0."),
            .option("type", "<type>", "Only ads of this type: image or video."),
            .option("placement", "<name>", "Only ads for this placement (default: splash)."),
            .option("cooldown", "<sec>", "Show nothing if any ad was shown less than <sec> seconds ago."),
            .option("at", "<time>", "Evaluate as of this time (RFC 3339 or Unix seconds), and date the show at it."),
        ]
    )

    static func run(_ args: ParsedArguments, context: Context) throws -> ExitCode {
        try args.noPositionals(spec)
        var options = NextOptions()
        options.peek = args.has("peek")
        if let t = args.value("type") {
            guard let type = AdType(rawValue: t) else {
                throw AdCacheError.usage("option '--type' needs 'image' or 'video' (got '\(t)')", hint: "see 'adcache next --help'")
            }
            options.type = type
        }
        if let p = args.value("placement") {
            guard !p.isEmpty else { throw AdCacheError.usage("option '--placement' needs a name", hint: "see 'adcache next --help'") }
            options.placement = p
        }
        options.cooldown = try args.number("cooldown", command: spec)
        options.at = try args.time("at", command: spec)
        let fallback = args.value("fallback").map(CacheStore.absolute)

        let console = context.console
        switch try Selector(store: context.store, warn: context.warn).decide(options) {
        case .show(let choice):
            console.out(args.has("json") ? choice.json.render() : choice.path)
            return .success
        case .coolingDown:
            return .nothingToShow   // no splash at all, not even the fallback
        case .nothingEligible:
            break
        }
        guard let fallback else { return .nothingToShow }
        console.out(args.has("json") ? NextChoice.fallbackJSON(path: fallback, placement: options.placement).render() : fallback)
        return .success
    }
}
