import AdCacheKit

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// What an option's value is: how it is read, what `--help` says of it, and what a shell
/// completes after it.
enum ValueKind: Sendable {
    case flag
    case text
    /// Seconds, decimals and exponents accepted, within the range.
    case seconds(ClosedRange<Double>)
    case integer(ClosedRange<Int>)
    /// Bytes, with K, M or G.
    case size
    /// RFC 3339 or Unix seconds.
    case time
    /// One of these words.
    case choice([String])
    case file
    case directory
}

/// One option of a command, as swift-argument-parser would declare it. Declared once (see
/// `Option`), it drives the parser, `--help`, the completions and the man-page test.
struct OptionSpec: Sendable {
    var long: String
    var short: Character? = nil
    /// The value's placeholder (`<sec>`); nil for a flag.
    var value: String?
    var help: String
    var repeatable = false
    var kind: ValueKind
    /// What it is when nobody says (for `adcache config`); nil: unset.
    var defaultValue: String? = nil
}

/// A typed option: reading it from `ParsedArguments` gives a `Value`, or a usage error that
/// names the option.
struct Option<Value>: Sendable {
    let spec: OptionSpec
    let read: @Sendable (String, OptionSpec) throws -> Value

    var long: String { spec.long }
}

/// A flag: present or not.
struct Flag: Sendable {
    let spec: OptionSpec

    init(_ long: String, short: Character? = nil, _ help: String) {
        spec = OptionSpec(long: long, short: short, value: nil, help: help, kind: .flag)
    }
}

/// Either kind, for the lists a command declares.
protocol DeclaredOption: Sendable { var spec: OptionSpec { get } }
extension Option: DeclaredOption {}
extension Flag: DeclaredOption {}

/// A usage error: exit 64, one line, then the hint.
struct UsageError: Error {
    var message: String
    var hint: String?
}

extension Option where Value == String {
    static func text(
        _ long: String, _ placeholder: String, _ help: String, repeatable: Bool = false, default value: String? = nil
    ) -> Option {
        var spec = OptionSpec(
            long: long, value: placeholder, help: noting(help, value.map { "default: \($0)" }), repeatable: repeatable,
            kind: .text)
        spec.defaultValue = value
        return Option(spec: spec) { v, _ in v }
    }

    /// Text that must pass `valid` wherever it is read (the command line or a file); else
    /// "option '--LONG' needs NEEDS (got '…')".
    static func checkedText(
        _ long: String, _ placeholder: String, _ help: String, repeatable: Bool = false, needs: String,
        _ valid: @escaping @Sendable (String) -> Bool
    ) -> Option {
        let spec = text(long, placeholder, help, repeatable: repeatable).spec
        return Option(spec: spec) { v, spec in
            guard valid(v) else { throw UsageError(message: "option '--\(spec.long)' needs \(needs) (got '\(v)')") }
            return v
        }
    }

    static func file(_ long: String, _ help: String) -> Option {
        Option(spec: OptionSpec(long: long, value: "<file>", help: help, kind: .file)) { v, _ in v }
    }

    static func directory(_ long: String, _ help: String) -> Option {
        Option(spec: OptionSpec(long: long, value: "<dir>", help: help, kind: .directory)) { v, _ in v }
    }
}

/// `help` with `note` in parentheses before its final full stop ("Transfers at once (1 to 64).").
func noting(_ help: String, _ note: String?) -> String {
    guard let note else { return help }
    return help.hasSuffix(".") ? String(help.dropLast()) + " (\(note))." : help + " (\(note))"
}

/// 0.001, 30, 86400: a bound as a person writes it.
func plain(_ v: Double) -> String {
    v == v.rounded() && abs(v) < 1e15 ? String(Int64(v)) : String(v)
}

extension Option where Value == Double {
    /// Seconds within `range` (SPEC §4: every numeric option has one, said in --help).
    static func seconds(_ long: String, _ help: String, range: ClosedRange<Double>, default value: String? = nil)
        -> Option
    {
        let bounds = "\(plain(range.lowerBound)) to \(plain(range.upperBound))"
        let said = noting(help, bounds + (value.map { "; default: \($0)" } ?? ""))
        var spec = OptionSpec(long: long, value: "<sec>", help: said, kind: .seconds(range))
        spec.defaultValue = value == "none" ? nil : value
        return Option(spec: spec) { text, spec in
            guard let v = Double(text), v.isFinite, range.contains(v) else {
                throw UsageError(
                    message: "option '--\(spec.long)' needs a number of seconds from \(bounds) (got '\(text)')")
            }
            return v
        }
    }
}

extension Option where Value == Int {
    static func integer(_ long: String, _ help: String, range: ClosedRange<Int>, default value: String) -> Option {
        let said = noting(help, "\(range.lowerBound) to \(range.upperBound); default: \(value)")
        var spec = OptionSpec(long: long, value: "<n>", help: said, kind: .integer(range))
        spec.defaultValue = value
        return Option(spec: spec) { text, spec in
            guard let v = Int(text), range.contains(v) else {
                throw UsageError(
                    message:
                        "option '--\(spec.long)' needs a whole number from \(range.lowerBound) to \(range.upperBound) (got '\(text)')"
                )
            }
            return v
        }
    }
}

extension Option where Value == Int64 {
    /// Bytes, at least `minimum`, with K, M or G (and B or iB).
    static func size(_ long: String, _ help: String, minimum: Int64 = 0, default value: String? = nil) -> Option {
        var spec = OptionSpec(
            long: long, value: "<size>", help: noting(help, value.map { "default: \($0)" }), kind: .size)
        spec.defaultValue = value
        return Option(spec: spec) { text, spec in
            guard let v = ByteSize.parse(text), v >= minimum else {
                let least = minimum > 0 ? "a size of at least \(minimum) bytes, " : "a size "
                // Say the range too: a number too long for it reads as no size at all.
                throw UsageError(
                    message:
                        "option '--\(spec.long)' needs \(least)such as 500K, 100M or 2G, at most 8589934591G (got '\(text)')"
                )
            }
            return v
        }
    }
}

extension Option where Value == Date {
    static func time(_ long: String, _ help: String) -> Option {
        Option(spec: OptionSpec(long: long, value: "<time>", help: help, kind: .time)) { text, spec in
            guard let v = AdCache.parseTime(text) else {
                throw UsageError(
                    message:
                        "option '--\(spec.long)' needs an RFC 3339 time with a zone (2027-03-01T08:00:00+08:00) or Unix seconds (got '\(text)')"
                )
            }
            return v
        }
    }
}

extension Option where Value: RawRepresentable & CaseIterable, Value.RawValue == String {
    static func choice(_ long: String, _ placeholder: String, _ help: String) -> Option {
        let names = Value.allCases.map(\.rawValue)
        return Option(spec: OptionSpec(long: long, value: placeholder, help: help, kind: .choice(names))) {
            text, spec in
            guard let v = Value(rawValue: text) else {
                let listed = names.map { "'\($0)'" }.joined(separator: names.count == 2 ? " or " : ", ")
                throw UsageError(message: "option '--\(spec.long)' needs \(listed) (got '\(text)')")
            }
            return v
        }
    }
}

/// A subcommand's interface: its help text, parser and completions come from this.
struct CommandSpec: Sendable {
    var name: String
    var abstract: String
    var discussion: String? = nil
    /// (placeholder, help); a trailing `?` marks an optional argument.
    var arguments: [(String, String)] = []
    var options: [any DeclaredOption] = []

    var optionSpecs: [OptionSpec] { options.map(\.spec) }
    var seeHelp: String { name.isEmpty ? "see 'adcache --help'" : "see 'adcache \(name) --help'" }
}

/// Options every command takes.
enum GlobalOptions {
    static let cacheDir = Option.directory(
        "cache-dir", "The cache directory (default: $ADCACHE_DIR, else $XDG_CACHE_HOME/adcache, else ~/.cache/adcache)."
    )
    static let config = Option.file(
        "config", "Read this configuration file instead of /etc/adcache.conf and ~/.config/adcache/config.")
    static let quiet = Flag("quiet", short: "q", "Print nothing on stdout (errors and warnings still go to stderr).")
    static let verbose = Flag("verbose", short: "v", "Say more on stderr.")
    static let help = Flag("help", short: "h", "Show help information.")

    static let all: [any DeclaredOption] = [cacheDir, config, quiet, verbose, help]
    static var specs: [OptionSpec] { all.map(\.spec) }
}

/// What the command line said, read through the options' declarations.
struct ParsedArguments {
    let command: CommandSpec
    var values: [String: [String]] = [:]
    var flags: Set<String> = []
    var positionals: [String] = []

    func has(_ flag: Flag) -> Bool { flags.contains(flag.spec.long) }

    /// The option's value (the last one given), or nil when absent.
    func get<V>(_ option: Option<V>) throws -> V? {
        guard let text = values[option.long]?.last else { return nil }
        return try read(option, text)
    }

    /// Every value of a repeatable option.
    func all<V>(_ option: Option<V>) throws -> [V] {
        try (values[option.long] ?? []).map { try read(option, $0) }
    }

    private func read<V>(_ option: Option<V>, _ text: String) throws -> V {
        do {
            return try option.read(text, option.spec)
        } catch var e as UsageError {
            e.hint = e.hint ?? command.seeHelp
            throw e
        }
    }

    func noPositionals(allowed: Int = 0) throws {
        if positionals.count > allowed {
            throw UsageError(message: "unexpected argument '\(positionals[allowed])'", hint: command.seeHelp)
        }
    }

    func usage(_ message: String) -> UsageError { UsageError(message: message, hint: command.seeHelp) }
}

enum ArgumentParser {
    /// Parses `args` (after the command name) against the command's options and the global
    /// ones. `--name value`, `--name=value`, `-q`, `-qv` and `--` are understood.
    static func parse(_ args: [String], command: CommandSpec) throws -> ParsedArguments {
        let options = command.optionSpecs + GlobalOptions.specs
        var result = ParsedArguments(command: command)
        var i = 0
        var onlyPositionals = false
        func take(_ spec: OptionSpec, inline: String?) throws {
            guard let placeholder = spec.value else {
                if let inline {
                    throw UsageError(
                        message: "option '--\(spec.long)' takes no value (got '\(inline)')", hint: command.seeHelp)
                }
                result.flags.insert(spec.long)
                return
            }
            var v = inline
            if v == nil {
                i += 1
                guard i < args.count else {
                    throw UsageError(
                        message: "option '--\(spec.long)' needs a value \(placeholder)", hint: command.seeHelp)
                }
                v = args[i]
            }
            if !spec.repeatable, result.values[spec.long] != nil {
                throw UsageError(message: "option '--\(spec.long)' given more than once", hint: command.seeHelp)
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
                    throw UsageError(
                        message: "unknown option '--\(name)'\(command.name.isEmpty ? "" : " for '\(command.name)'")",
                        hint: guess ?? command.seeHelp)
                }
                try take(spec, inline: inline)
            } else {
                let letters = Array(arg.dropFirst())
                for (n, c) in letters.enumerated() {
                    guard let spec = options.first(where: { $0.short == c }) else {
                        throw UsageError(message: "unknown option '-\(c)'", hint: command.seeHelp)
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
