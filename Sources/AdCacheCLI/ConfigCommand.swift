import AdCacheKit

/// `adcache config [--show-origin]`: the effective settings (SPEC §9).
enum ConfigCommand: Command {
    static let showOrigin = Flag("show-origin", "Say where each setting comes from, as git config does.")

    static let name = "config"
    static let spec = CommandSpec(
        name: name,
        abstract: "Print the effective settings, one 'key = value' a line.",
        discussion:
            "Every setting that has a value, set or default, sorted by key. Files: /etc/adcache.conf, then $XDG_CONFIG_HOME/adcache/config (else ~/.config/adcache/config); --config FILE or ADCACHE_CONFIG=FILE reads FILE instead.",
        options: [showOrigin]
    )

    static func run(_ args: ParsedArguments, context: Context) throws -> ExitCode {
        try args.noPositionals()
        var lines: [(key: String, value: String, origin: String)] = [
            (GlobalOptions.cacheDir.long, context.directory, context.directoryOrigin)
        ]
        var seen: Set<String> = [GlobalOptions.cacheDir.long, GlobalOptions.config.long, showOrigin.spec.long]
        // The command line wins; then the files (the last value, but every header, in order).
        let given = context.commandLine ?? args
        for (key, values) in given.values where !seen.contains(key) && key != "header" {
            lines.append((key, values.last!, "command line"))
            seen.insert(key)
        }
        for key in given.flags where !seen.contains(key) {
            lines.append((key, "true", "command line"))
            seen.insert(key)
        }
        for s in context.config.settings where s.key == "header" { lines.append((s.key, s.value, s.origin)) }
        // The keys of signed feeds by id, as minisign prints them (SPEC §11).
        lines += context.feedKeys.map { ("feed-key", $0.id, $0.origin) }
        if let dir = context.config.keysDirectory { lines.append(("feed-keys-dir", dir.path, dir.origin)) }
        seen.formUnion(["feed-key", "feed-keys-dir"])
        lines += (given.values["header"] ?? []).map { ("header", $0, "command line") }
        seen.insert("header")
        for s in context.config.settings.reversed() where !seen.contains(s.key) {
            seen.insert(s.key)
            lines.append((s.key, s.value, s.origin))
        }
        for (key, option) in Config.declared where !seen.contains(key) {
            if let value = option.spec.defaultValue { lines.append((key, value, "default")) }
            seen.insert(key)
        }
        lines.sort { $0.key < $1.key }
        for l in lines {
            let text = Console.visible("\(l.key) = \(l.value)")
            context.console.out(args.has(showOrigin) ? "\(l.origin)\t\(text)" : text)
        }
        return .success
    }
}
