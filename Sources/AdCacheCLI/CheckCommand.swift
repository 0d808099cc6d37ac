import AdCacheKit

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// `adcache check FEED` (SPEC §13): would this feed work?
enum CheckCommand: Command {
    static let assets = Flag(
        "assets", "Also download each asset into a temporary directory, check it as fetch does, and delete it.")
    static let json = Flag("json", "Print one JSON object (SPEC §13's fields).")

    static let name = "check"
    static let spec = CommandSpec(
        name: name,
        abstract: "Try a feed as fetch would (signature, VAST, rollouts) without writing any cache.",
        discussion:
            "Prints one line per ad (ok, or why fetch would skip it), the ads a staged rollout gives this device, then the verdict on the whole feed. Needs no cache directory and writes none; downloads no asset unless --assets. Exit 0 when every ad is usable, 65 when the feed would be refused or an ad skipped (or, with --assets, an asset failed), 69 when the feed cannot be fetched.",
        arguments: [("<feed>", "An http or https URL, a file: URL, a path, or '-' for standard input.")],
        options: FetchCommand.feedOptionList + [assets, json]
    )

    static func run(_ args: ParsedArguments, context: Context) throws -> ExitCode {
        try args.noPositionals(allowed: 1)
        guard var feed = args.positionals.first else { throw args.usage("'check' needs a FEED") }
        if feed != "-", !feed.contains("://"), !feed.hasPrefix("/") { feed = PathText.absolute(feed) }
        var options = CheckOptions(try FetchCommand.feedOptions(feed, args, context: context), assets: args.has(assets))
        if let tmp = context.environment["TMPDIR"], !tmp.isEmpty { options.temporaryDirectory = tmp }
        let report = try context.cache().check(options)
        let console = context.console
        if args.has(json) {
            console.out(report.json)
        } else if !console.quiet {
            for line in report.lines { console.out(Console.visible(line)) }
        }
        return ExitCode(rawValue: report.exitCode) ?? .software
    }
}

extension CheckReport {
    /// One line per ad, the rollout, then the verdict.
    var lines: [String] {
        var out: [String] = []
        for ad in ads {
            var line = "\(ad.id): " + (ad.ok ? "ok" : "skipped: \(ad.reason ?? "")")
            if ad.ok, let type = ad.type {
                line += " (\(type.rawValue)\(ad.bytes.map { ", \(ByteSize.human($0))" } ?? ""))"
            }
            if let r = ad.rollout {
                line +=
                    "; rollout \(r.percent)%: " + (r.taken ? "this device takes it" : "this device does not take it")
            }
            out.append(line)
        }
        for w in warnings { out.append("warning: \(w)") }
        let rolled = ads.filter { $0.rollout != nil }
        if !rolled.isEmpty {
            let taken = rolled.filter { $0.rollout?.taken == true }.map(\.id)
            out.append(
                "rollout: this device (\(deviceId ?? "no id yet")) takes \(taken.count) of \(rolled.count)"
                    + (taken.isEmpty ? "" : ": " + taken.joined(separator: ", ")))
        }
        if let s = signed {
            out.append(
                "signed: key \(s.keyId), serial \(s.serial), valid until \(AdCache.formatTime(s.validUntil))")
        }
        let skipped = ads.filter { !$0.ok }.count
        if let refused {
            out.append("refused: \(refused)")
        } else if skipped > 0 {
            out.append("accepted, \(skipped) of \(ads.count) ad\(ads.count == 1 ? "" : "s") not usable")
        } else {
            out.append("ok: \(ads.count) ad\(ads.count == 1 ? "" : "s"), \(format)")
        }
        return out
    }

    /// SPEC §13's object.
    var json: String {
        JSONOut.object([
            ("feed", .string(feed)),
            ("format", .string(format)),
            (
                "signed",
                signed.map {
                    .object([
                        ("keyId", .string($0.keyId)), ("serial", .int($0.serial)), ("validUntil", .time($0.validUntil)),
                    ])
                } ?? .null
            ),
            ("refused", .string(refused)),
            (
                "ads",
                .array(
                    ads.map { ad in
                        .object([
                            ("id", .string(ad.id)), ("ok", .bool(ad.ok)), ("reason", .string(ad.reason)),
                            ("type", .string(ad.type?.rawValue)), ("url", .string(ad.url)),
                            (
                                "rollout",
                                ad.rollout.map { .object([("percent", .int($0.percent)), ("taken", .bool($0.taken))]) }
                                    ?? .null
                            ),
                        ])
                    })
            ),
        ]).render(indent: 2)
    }
}
