import AdCacheKit

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif
#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A subcommand: its interface and what it does.
protocol Command: Sendable {
    /// The word that runs it; a launch finds `next` by it without building every spec.
    static var name: String { get }
    static var spec: CommandSpec { get }
    /// Runs with parsed arguments; returns the exit code.
    static func run(_ args: ParsedArguments, context: Context) throws -> ExitCode
}

/// The exit codes of SPEC §5, from sysexits.h.
enum ExitCode: Int32 {
    case success = 0
    case nothingToShow = 1
    case usage = 64
    case dataError = 65
    case unavailable = 69
    case software = 70
    case cantCreate = 73
    case ioError = 74
    case tempFail = 75
    /// Stopped by SIGINT or SIGTERM (128 + the signal).
    case interrupted = 130
    case terminated = 143

    init(signal: Int32) {
        self = signal == SIGTERM ? .terminated : .interrupted
    }

    /// The code a library error ends the command with.
    init(_ error: AdCacheError) {
        self = ExitCode(rawValue: error.exitCode) ?? .software
    }
}

/// What every command gets: the console, the cache directory and the environment.
struct Context {
    var console: Console
    var directory: String
    var environment: [String: String]
    var config = Config()
    /// Where `directory` came from: `command line`, `environment`, `file:PATH:LINE`, `default`.
    var directoryOrigin = "default"
    /// The arguments as the command line gave them (before the configuration filled in).
    var commandLine: ParsedArguments? = nil
    /// The keys feeds must be signed by (SPEC §11); `next` reads none.
    var feedKeys: [FeedKey] = []

    /// The cache; its clock stopped at `at` when given (`--at`: the same path as now, another
    /// time, taken as given), else the device's, corrected as the last fetch measured.
    func cache(at: Date? = nil) -> AdCache {
        let console = console
        var pop = AdCache.ProofOfPlay(deviceId: config.value("device-id"), reportUrl: config.value("report-url"))
        if let n = config.value("max-events").flatMap(Int.init) { pop.maxEvents = n }
        if let d = config.value("max-event-age").flatMap(Int.init) { pop.maxEventAge = d }
        if let s = config.value("render-timeout").flatMap(Config.renderTimeout) { pop.renderTimeout = s }
        let vast = config.vast
        pop.playerSize = "\(vast.screenWidth),\(vast.screenHeight)"
        pop.limitAdTracking = vast.limitAdTracking
        pop.ledgerDirectory = config.value("ledger-dir") ?? AdCache.defaultLedgerDirectory(environment: environment)
        pop.deviceKey = config.value("device-key")
        return AdCache(
            .init(
                directory: directory, clock: at.map { .fixed($0) } ?? .system, proofOfPlay: pop,
                diagnostics: { console.warning($0.message) }))
    }
}

/// The command line as a function: `main.swift` calls it with the process's arguments,
/// environment and file descriptors; tests call it in-process with their own.
public enum CLI {
    static let commands: [any Command.Type] = [
        FetchCommand.self, NextCommand.self, EventCommand.self, ReportCommand.self, StatsCommand.self,
        PruneCommand.self, ListCommand.self, WhyCommand.self, VerifyCommand.self, StatusCommand.self, CheckCommand.self,
        ClearCommand.self, ExportCommand.self,
        ConfigCommand.self,
        HelpCommand.self,
        CompletionsCommand.self,
    ]

    static var specs: [CommandSpec] { commands.map { $0.spec } }

    /// The environment variables adcache reads (the manual's ENVIRONMENT; libcurl reads the
    /// proxy variables itself): `main.swift` passes only these, read with getenv(3), rather
    /// than decoding the whole environment at every launch.
    public static let environmentNames = [
        "ADCACHE_DIR", "ADCACHE_CONFIG", "XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_DATA_HOME", "HOME", "NO_COLOR",
        "TERM", "TMPDIR",
    ]

    /// The process's values of `environmentNames`.
    public static func processEnvironment() -> [String: String] {
        var environment: [String: String] = [:]
        for name in environmentNames {
            if let value = getenv(name) { environment[name] = String(cString: value) }
        }
        return environment
    }

    static let version = Flag("version", "Show the version.")

    static let root = CommandSpec(
        name: "",
        abstract: "Keep a local cache of splash ads fresh, and pick the one each launch shows.",
        discussion:
            "Run 'adcache fetch' from cron to download the ad feed and its images and videos; run 'adcache next' at app launch to get the asset to show, instantly and without the network. See adcache(1).",
        arguments: [("<command>", "The command to run.")],
        options: [version]
    )

    /// Runs the command line (the arguments after the program's name); returns the exit code.
    public static func run(_ arguments: [String], environment: [String: String], io: CommandIO) -> Int32 {
        var console = Console(io: io, environment: environment)
        var cacheDirectory: String?
        do {
            // The command is the first word that is not a global option (or its value).
            var rest = arguments
            var leading: [String] = []
            while let first = rest.first, first.hasPrefix("-") {
                leading.append(rest.removeFirst())
                if ["--" + GlobalOptions.cacheDir.long, "--" + GlobalOptions.config.long].contains(first),
                    let v = rest.first
                {
                    leading.append(v)
                    rest.removeFirst()
                }
            }
            guard let name = rest.first else {
                let parsed = try ArgumentParser.parse(leading, command: root)
                if parsed.has(version) {
                    console.out("adcache \(AdCache.version) (\(AdCache.userAgent))")
                    return 0
                }
                if parsed.has(GlobalOptions.help) {
                    console.out(Help.text(for: root, subcommands: specs))
                    return 0
                }
                throw UsageError(message: "no command given", hint: "see 'adcache --help'")
            }
            guard let command = commands.first(where: { $0.name == name }) else {
                let guess = ArgumentParser.nearest(name, among: specs.map { $0.name })
                throw UsageError(
                    message: "unknown command '\(name)'",
                    hint: guess.map { "did you mean '\($0)'?" } ?? "see 'adcache --help'")
            }
            var parsed = try ArgumentParser.parse(leading + rest.dropFirst(), command: command.spec)
            if parsed.has(GlobalOptions.help) {
                console.out(Help.text(for: command.spec))
                return 0
            }
            // Precedence, last wins: defaults, the configuration files, the environment
            // (ADCACHE_DIR), the command line (SPEC §9).
            // A launch never fails for a typo in a configuration file: `next` warns and goes on
            // without that line; every other command stops there (SPEC §9).
            let config = try Config.load(
                explicit: try parsed.get(GlobalOptions.config), environment: environment,
                lenient: command.spec.name == "next" ? { console.warning($0) } : nil)
            let cacheDirGiven = try parsed.get(GlobalOptions.cacheDir).map(PathText.absolute)
            let onCommandLine = parsed
            config.apply(to: &parsed)
            console.quiet = parsed.has(GlobalOptions.quiet)
            console.verbose = parsed.has(GlobalOptions.verbose)
            let fromEnvironment = environment["ADCACHE_DIR"].flatMap { $0.isEmpty ? nil : PathText.absolute($0) }
            let dir =
                cacheDirGiven ?? fromEnvironment ?? config.value(GlobalOptions.cacheDir.long)
                ?? AdCache.Configuration.defaultDirectory(environment: environment)
            let directoryOrigin =
                cacheDirGiven != nil
                ? "command line"
                : fromEnvironment != nil
                    ? "environment"
                    : config.settings.last { $0.key == GlobalOptions.cacheDir.long }?.origin ?? "default"
            cacheDirectory = dir
            // A bad key fails every command, as any bad configuration does; a launch reads none.
            let feedKeys = command.spec.name == "next" ? [] : try config.feedKeys()
            let context = Context(
                console: console, directory: dir, environment: environment, config: config,
                directoryOrigin: directoryOrigin, commandLine: onCommandLine, feedKeys: feedKeys)
            return try command.run(parsed, context: context).rawValue
        } catch let e as UsageError {
            console.error(e.message, hint: e.hint)
            return ExitCode.usage.rawValue
        } catch let e as AdCacheError {
            console.error(e.message, hint: Self.hint(for: e, directory: cacheDirectory))
            return ExitCode(e).rawValue
        } catch {
            console.error("internal error: \(error)")
            return ExitCode.software.rawValue
        }
    }
}

/// `adcache help [COMMAND]`.
enum HelpCommand: Command {
    static let name = "help"
    static let spec = CommandSpec(
        name: name,
        abstract: "Show help for a command.",
        arguments: [("<command>?", "The command to explain.")]
    )

    static func run(_ args: ParsedArguments, context: Context) throws -> ExitCode {
        try args.noPositionals(allowed: 1)
        guard let name = args.positionals.first else {
            context.console.out(Help.text(for: CLI.root, subcommands: CLI.specs))
            return .success
        }
        guard let command = CLI.commands.first(where: { $0.spec.name == name }) else {
            let guess = ArgumentParser.nearest(name, among: CLI.specs.map { $0.name })
            throw UsageError(
                message: "unknown command '\(name)'",
                hint: guess.map { "did you mean '\($0)'?" } ?? "see 'adcache --help'")
        }
        context.console.out(Help.text(for: command.spec))
        return .success
    }
}

/// Help text in swift-argument-parser's layout.
enum Help {
    static func text(for spec: CommandSpec, subcommands: [CommandSpec] = []) -> String {
        var lines: [String] = []
        lines.append("OVERVIEW: \(spec.abstract)")
        if let d = spec.discussion { lines += ["", wrap(d, indent: 0)] }
        lines.append("")
        let name = spec.name.isEmpty ? "adcache" : "adcache \(spec.name)"
        var usage = "USAGE: \(name)"
        if spec.name.isEmpty {
            usage += " [--cache-dir <dir>] [-q] [-v] <command> [<options>]"
        } else {
            if !spec.options.isEmpty { usage += " [<options>]" }
            for (arg, _) in spec.arguments {
                usage += arg.hasSuffix("?") ? " [\(arg.dropLast())]" : " \(arg)"
            }
        }
        lines.append(usage)
        if !spec.arguments.isEmpty, !spec.name.isEmpty {
            lines += ["", "ARGUMENTS:"]
            for (arg, help) in spec.arguments {
                lines.append(row(String(arg.replacing("?", with: "")), help))
            }
        }
        lines += ["", "OPTIONS:"]
        for o in spec.optionSpecs + GlobalOptions.specs {
            var label = o.short.map { "-\($0), " } ?? ""
            label += "--\(o.long)"
            if let v = o.value { label += " \(v)" }
            lines.append(row(label, o.help))
        }
        if !subcommands.isEmpty {
            lines += ["", "SUBCOMMANDS:"]
            for s in subcommands { lines.append(row(s.name, s.abstract)) }
            lines += ["", "  See 'adcache help <subcommand>' for detailed help."]
        }
        return lines.joined(separator: "\n")
    }

    static func row(_ label: String, _ help: String) -> String {
        let pad = 26
        let head = "  " + label
        let body = wrap(help, indent: pad)
        if head.count < pad {
            return head + String(repeating: " ", count: pad - head.count) + body.dropFirst(pad)
        }
        return head + "\n" + body
    }

    static func wrap(_ text: String, indent: Int, width: Int = 80) -> String {
        var lines: [String] = []
        var line = String(repeating: " ", count: indent)
        for word in text.split(separator: " ") {
            if line.count + word.count + 1 > width, line.count > indent {
                lines.append(line)
                line = String(repeating: " ", count: indent)
            }
            if line.count > indent { line += " " }
            line += word
        }
        lines.append(line)
        return lines.joined(separator: "\n")
    }
}

extension CLI {
    /// The line after an error that says what to do, where there is one: a cache shared
    /// through a group that this user is not a member of.
    static func hint(for error: AdCacheError, directory: String?) -> String? {
        guard case .cacheUnwritable(let message) = error, message.contains("Permission denied"), let directory
        else { return nil }
        var st = stat()
        guard stat(directory, &st) == 0, st.st_mode & 0o020 != 0, st.st_gid != getegid() else { return nil }
        let group = getgrgid(st.st_gid).map { String(cString: $0.pointee.gr_name) } ?? String(st.st_gid)
        let user = getpwuid(geteuid()).map { String(cString: $0.pointee.pw_name) } ?? "this user"
        return
            "the cache is shared through group '\(group)': add \(user) to it (sudo adduser \(user) \(group)), then log in again"
    }
}
