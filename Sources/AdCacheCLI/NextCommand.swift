import AdCacheKit

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// `adcache next`.
enum NextCommand: Command {
    static let peek = Flag("peek", "Do not record the show.")
    static let json = Flag("json", "Print one JSON object instead of the path.")
    static let fallback = Option.file("fallback", "When nothing is eligible, print this file's path and exit 0.")
    static let type = Option<AdType>.choice("type", "<type>", "Only ads of this type: image or video.")
    static let placement = Option.text("placement", "<name>", "Only ads for this placement.", default: "splash")
    static let cooldown = Option.seconds(
        "cooldown", "Show nothing if any ad was shown less than <sec> seconds ago.", range: 0...31_536_000,
        default: "none")
    static let at = Option.time("at", "Evaluate as of this time (RFC 3339 or Unix seconds), and date the show at it.")
    static let render = Flag(
        "render",
        "Record the show, but queue its impression only when the launcher confirms it ('adcache event impression ID --show TOKEN')."
    )
    static let choice = Flag("choice", "Queue the impression with the show (the default; 'impression = choice').")

    static let name = "next"
    static let spec = CommandSpec(
        name: name,
        abstract: "Print the cached asset this launch shows, and record the show.",
        discussion:
            "Never touches the network. Exit 1 with nothing on stdout when no ad is eligible (unless --fallback is given).",
        options: [peek, json, fallback, type, placement, cooldown, at, render, choice]
    )

    static func run(_ args: ParsedArguments, context: Context) throws -> ExitCode {
        try args.noPositionals()
        var options = NextOptions(peek: args.has(peek), type: try args.get(type), cooldown: try args.get(cooldown))
        // The command line wins over the configuration's `impression` (SPEC §8).
        if args.has(render) && args.has(choice) { throw args.usage("'--render' and '--choice' say opposite things") }
        options.render = args.has(render) || (!args.has(choice) && context.config.value("impression") == "render")
        if let p = try args.get(placement) {
            guard !p.isEmpty else { throw args.usage("option '--placement' needs a name") }
            options.placement = p
        }
        var fallbackPath = try args.get(fallback).map(PathText.absolute)
        if let path = fallbackPath, !FileIO.exists(path) {
            context.console.warning("the fallback \(path) does not exist; not showing it")
            fallbackPath = nil
        }
        let cache = context.cache(at: try args.get(at))

        let console = context.console
        switch try cache.next(options) {
        case .show(let ad):
            console.out(args.has(json) ? ad.json : ad.path)
            return .success
        case .coolingDown:
            return .nothingToShow   // no splash at all, not even the fallback
        case .nothingEligible:
            break
        }
        guard let fallbackPath else { return .nothingToShow }
        console.out(
            args.has(json) ? ShownAd.fallbackJSON(path: fallbackPath, placement: options.placement) : fallbackPath)
        return .success
    }
}
