import AdCacheKit

/// One option of a command, as swift-argument-parser would declare it.
struct OptionSpec {
    var long: String
    var short: Character? = nil
    /// The value's placeholder (`<sec>`); nil for a flag.
    var value: String? = nil
    var help: String
    var repeatable = false

    static func flag(_ long: String, short: Character? = nil, _ help: String) -> OptionSpec {
        OptionSpec(long: long, short: short, help: help)
    }

    static func option(_ long: String, _ value: String, _ help: String, repeatable: Bool = false) -> OptionSpec {
        OptionSpec(long: long, value: value, help: help, repeatable: repeatable)
    }
}

/// A subcommand's interface: its help text is generated from this.
struct CommandSpec {
    var name: String
    var abstract: String
    var discussion: String? = nil
    /// (placeholder, help); a trailing `?` marks an optional argument.
    var arguments: [(String, String)] = []
    var options: [OptionSpec] = []
}

/// Options every command takes.
let globalOptions: [OptionSpec] = [
    .option("cache-dir", "<dir>", "The cache directory (default: $ADCACHE_DIR, else $XDG_CACHE_HOME/adcache, else ~/.cache/adcache)."),
    .flag("quiet", short: "q", "Print nothing on stdout (errors and warnings still go to stderr)."),
    .flag("verbose", short: "v", "Say more on stderr."),
    .flag("help", short: "h", "Show help information."),
]

/// What the command line said.
struct ParsedArguments {
    var values: [String: [String]] = [:]
    var flags: Set<String> = []
    var positionals: [String] = []

    func has(_ flag: String) -> Bool { flags.contains(flag) }
    func value(_ name: String) -> String? { values[name]?.last }
}

enum ArgumentParser {
    /// Parses `args` (after the command name) against the command's options and the global
    /// ones. `--name value`, `--name=value`, `-q`, `-qv` and `--` are understood.
    static func parse(_ args: [String], command: CommandSpec) throws -> ParsedArguments {
        let options = command.options + globalOptions
        var result = ParsedArguments()
        var i = 0
        var onlyPositionals = false
        func take(_ spec: OptionSpec, inline: String?) throws {
            guard spec.value != nil else {
                if let inline {
                    throw AdCacheError.usage("option '--\(spec.long)' takes no value (got '\(inline)')", hint: seeHelp(command))
                }
                result.flags.insert(spec.long)
                return
            }
            var v = inline
            if v == nil {
                i += 1
                guard i < args.count else {
                    throw AdCacheError.usage("option '--\(spec.long)' needs a value \(spec.value!)", hint: seeHelp(command))
                }
                v = args[i]
            }
            if !spec.repeatable, result.values[spec.long] != nil {
                throw AdCacheError.usage("option '--\(spec.long)' given more than once", hint: seeHelp(command))
            }
            result.values[spec.long, default: []].append(v!)
        }

        while i < args.count {
            let arg = args[i]
            if onlyPositionals || arg == "-" || !arg.hasPrefix("-") {
                result.positionals.append(arg)
            } else if arg == "--" {
                onlyPositionals = true
            } else if arg.hasPrefix("--") {
                let body = arg.dropFirst(2)
                let name = String(body.prefix { $0 != "=" })
                let inline = body.contains("=") ? String(body.drop { $0 != "=" }.dropFirst()) : nil
                guard let spec = options.first(where: { $0.long == name }) else {
                    let guess = nearest(name, among: options.map(\.long)).map { "did you mean '--\($0)'?" }
                    throw AdCacheError.usage("unknown option '--\(name)'\(command.name.isEmpty ? "" : " for '\(command.name)'")",
                                             hint: guess ?? seeHelp(command))
                }
                try take(spec, inline: inline)
            } else {
                let letters = Array(arg.dropFirst())
                for (n, c) in letters.enumerated() {
                    guard let spec = options.first(where: { $0.short == c }) else {
                        throw AdCacheError.usage("unknown option '-\(c)'", hint: seeHelp(command))
                    }
                    if spec.value != nil {
                        let rest = String(letters[(n + 1)...])
                        try take(spec, inline: rest.isEmpty ? nil : rest)
                        break
                    }
                    try take(spec, inline: nil)
                }
            }
            i += 1
        }
        return result
    }

    static func seeHelp(_ command: CommandSpec) -> String {
        command.name.isEmpty ? "see 'adcache --help'" : "see 'adcache \(command.name) --help'"
    }

    /// The closest name within a small edit distance, for "did you mean".
    static func nearest(_ word: String, among names: [String]) -> String? {
        let scored = names.map { ($0, editDistance(word, $0)) }.filter { $0.1 <= max(2, word.count / 3) }
        return scored.min { $0.1 < $1.1 }?.0
    }

    static func editDistance(_ a: String, _ b: String) -> Int {
        let a = Array(a), b = Array(b)
        guard !a.isEmpty else { return b.count }
        guard !b.isEmpty else { return a.count }
        var prev = Array(0...b.count)
        for i in 1...a.count {
            var cur = [i] + Array(repeating: 0, count: b.count)
            for j in 1...b.count {
                cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1))
            }
            prev = cur
        }
        return prev[b.count]
    }
}

/// Typed readers for option values; a bad value is a usage error naming the option.
extension ParsedArguments {
    func number(_ name: String, command: CommandSpec, range: ClosedRange<Double> = 0...Double.greatestFiniteMagnitude) throws -> Double? {
        guard let text = value(name) else { return nil }
        guard let v = Double(text), v.isFinite, range.contains(v) else {
            throw AdCacheError.usage("option '--\(name)' needs a number of seconds ≥ \(Int(range.lowerBound)) (got '\(text)')",
                                     hint: ArgumentParser.seeHelp(command))
        }
        return v
    }

    func integer(_ name: String, command: CommandSpec, range: ClosedRange<Int>) throws -> Int? {
        guard let text = value(name) else { return nil }
        guard let v = Int(text), range.contains(v) else {
            throw AdCacheError.usage("option '--\(name)' needs a whole number from \(range.lowerBound) to \(range.upperBound) (got '\(text)')",
                                     hint: ArgumentParser.seeHelp(command))
        }
        return v
    }

    func size(_ name: String, command: CommandSpec) throws -> Int64? {
        guard let text = value(name) else { return nil }
        guard let v = ByteSize.parse(text) else {
            throw AdCacheError.usage("option '--\(name)' needs a size such as 500K, 100M or 2G (got '\(text)')",
                                     hint: ArgumentParser.seeHelp(command))
        }
        return v
    }

    func time(_ name: String, command: CommandSpec) throws -> Double? {
        guard let text = value(name) else { return nil }
        guard let v = Time.parse(text) else {
            throw AdCacheError.usage("option '--\(name)' needs an RFC 3339 time with a zone (2027-03-01T08:00:00+08:00) or Unix seconds (got '\(text)')",
                                     hint: ArgumentParser.seeHelp(command))
        }
        return v
    }

    func noPositionals(_ command: CommandSpec, allowed: Int = 0) throws {
        if positionals.count > allowed {
            throw AdCacheError.usage("unexpected argument '\(positionals[allowed])'", hint: ArgumentParser.seeHelp(command))
        }
    }
}
