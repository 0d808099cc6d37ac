import AdCacheKit

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// Configuration files (SPEC §9): `/etc/adcache.conf`, then `$XDG_CONFIG_HOME/adcache/config`
/// (else `~/.config/adcache/config`); `--config FILE` (or `ADCACHE_CONFIG`) reads FILE instead
/// of both. Lines `key = value`, `#` comments; the keys are the long option names of the
/// commands, read and checked through the same declarations as the command line.
struct Config {
    /// One `key = value`, and where it came from.
    struct Setting {
        var key: String
        var value: String
        /// `file:PATH:LINE`.
        var origin: String
    }

    /// In precedence order, last wins (for `header`: all are sent).
    var settings: [Setting] = []

    static let systemFile = "/etc/adcache.conf"

    /// Keys that are no command's option (`feed` is fetch's argument; the device id and the
    /// report URL are settings of the cache), read as text.
    /// `feed-key` (repeatable) and `feed-keys-dir` say which keys feeds must be signed by
    /// (SPEC §11).
    static let extraKeys: [String: ValueKind] = [
        "feed": .text, "device-id": .text, "report-url": .text, "feed-key": .text, "feed-keys-dir": .directory,
        "screen": .text, "max-bitrate": .text, "media-types": .text, "limit-ad-tracking": .text,
        "impression": .text, "render-timeout": .text, "ledger-dir": .directory, "device-key": .file,
    ]

    /// Where the keys of signed feeds are when `feed-keys-dir` does not say (the Debian package
    /// creates it).
    static let defaultKeysDirectory = "/etc/adcache/keys.d"

    /// Every option any command declares, by long name (the first declaration of a name).
    static let declared: [String: any DeclaredOption] = {
        var all: [String: any DeclaredOption] = [:]
        for option in CLI.specs.flatMap(\.options) + GlobalOptions.all where all[option.spec.long] == nil {
            all[option.spec.long] = option
        }
        for name in ["help", "config"] + runOnly { all[name] = nil }   // not settings
        return all
    }()

    /// Options that say what one run does, never a standing setting (`events = true` once
    /// made every plain `clear` delete the billing data; `json = true` turned every
    /// `AD=$(adcache next)` launcher's path into JSON). Render mode's standing setting is
    /// `impression = render`, not the flags.
    static let runOnly = [
        "peek", "events", "at", "dry-run", "signature", "now", "json", "render", "choice", "output", "since", "until",
        "verify", "public-key",
    ]

    /// The files to read, in order: `--config`/`ADCACHE_CONFIG` alone, else the system's and
    /// the user's (those that exist).
    static func files(explicit: String?, environment: [String: String]) -> [String] {
        if let explicit { return [explicit] }
        var user: String?
        if let xdg = environment["XDG_CONFIG_HOME"], !xdg.isEmpty {
            user = xdg + "/adcache/config"
        } else if let home = environment["HOME"], !home.isEmpty {
            user = home + "/.config/adcache/config"
        }
        return [systemFile, user].compactMap { $0 }.filter(FileIO.exists)
    }

    /// Reads and checks every line of every file: an unknown key or a bad value is a usage
    /// error naming `file:line`, whatever the command (a broken file fails the same way
    /// everywhere).
    /// `lenient` (a launch, `next`): a line that cannot be read is said to `lenient` and
    /// left out instead — a launch never fails for a typo (SPEC §9).
    static func load(explicit: String?, environment: [String: String], lenient: ((String) -> Void)? = nil) throws
        -> Config
    {
        var config = Config()
        let explicit = explicit ?? environment["ADCACHE_CONFIG"].flatMap { $0.isEmpty ? nil : $0 }
        for path in files(explicit: explicit.map(PathText.absolute), environment: environment) {
            guard let data = try? FileIO.read(path, limit: 1 << 20) else {   // /dev/null too
                throw UsageError(message: "cannot read the configuration file \(path)")
            }
            let text = String(decoding: data, as: UTF8.self)
            // (A CR LF is one Character in Swift: split on every kind of line end.)
            for (n, raw) in text.split(omittingEmptySubsequences: false, whereSeparator: \.isNewline).enumerated() {
                // Whitespace and a CR (a file written on Windows) around a line are not part of it.
                let line = raw.trimmedWithNewlines()
                if line.isEmpty || line.hasPrefix("#") { continue }
                let at = "\(path):\(n + 1)"
                do {
                    config.settings.append(try setting(line, at: at, path: path))
                } catch let e as UsageError {
                    guard let lenient else { throw e }
                    lenient(e.message + "; ignored")
                }
            }
        }
        return config
    }

    /// One line, read and checked.
    private static func setting(_ line: String, at: String, path: String) throws -> Setting {
        guard let eq = line.firstIndex(of: "=") else {
            throw UsageError(message: "\(at): expected 'key = value' (got '\(line)')")
        }
        let key = line[..<eq].trimmed()
        var value = line[line.index(after: eq)...].trimmed()
        if let option = declared[key] {
            switch option.spec.kind {
            case .file, .directory:   // relative to the file that says it
                if !value.hasPrefix("/") {
                    value = PathText.join(PathText.parent(path), value)
                }
            default: break
            }
            do {
                try option.check(value)
            } catch let e as UsageError {
                throw UsageError(
                    message:
                        "\(at): \(e.message.replacing("option '--\(key)'", with: "'\(key)'"))")
            }
        } else if extraKeys[key] != nil {
            let lower = value.lowercased()
            let web = lower.hasPrefix("http://") || lower.hasPrefix("https://")
            if key == "feed-key" {
                do {
                    _ = try FeedKey(value, origin: "file:\(at)")
                } catch {
                    throw UsageError(
                        message: "\(at): 'feed-key' is not a minisign public key (the base64 line of a minisign.pub)")
                }
            }
            if key == "feed-keys-dir" {
                if value.isEmpty { throw UsageError(message: "\(at): 'feed-keys-dir' needs a directory") }
                if !value.hasPrefix("/") { value = PathText.join(PathText.parent(path), value) }
            }
            if key == "ledger-dir" || key == "device-key" {   // SPEC §14
                if value.isEmpty { throw UsageError(message: "\(at): '\(key)' needs a path") }
                if !value.hasPrefix("/") { value = PathText.join(PathText.parent(path), value) }
            }
            if let problem = Self.vastProblem(key, value) { throw UsageError(message: "\(at): \(problem)") }
            if key == "report-url", !web {
                throw UsageError(message: "\(at): 'report-url' needs an http or https URL (got '\(value)')")
            }
            if key == "feed" {
                if value.isEmpty { throw UsageError(message: "\(at): 'feed' needs a URL or a file") }
                if !web, value.contains("://"), !lower.hasPrefix("file://") {
                    throw UsageError(message: "\(at): 'feed' needs an http or https URL or a file (got '\(value)')")
                }
                if !value.contains("://"), !value.hasPrefix("/"), value != "-" {   // relative to the file
                    value = PathText.join(PathText.parent(path), value)
                }
            }
        } else if runOnly.contains(key) {
            throw UsageError(message: "\(at): '\(key)' is an option of one run, not a setting")
        } else {
            let guess = ArgumentParser.nearest(key, among: Array(declared.keys) + Array(extraKeys.keys))
            throw UsageError(
                message: "\(at): unknown key '\(key)'" + (guess.map { " (did you mean '\($0)'?)" } ?? ""))
        }
        return Setting(key: key, value: value, origin: "file:\(at)")
    }

    /// The directory of `.pub` keys: `feed-keys-dir`, else the default when it exists.
    var keysDirectory: (path: String, origin: String)? {
        if let s = settings.last(where: { $0.key == "feed-keys-dir" }) { return (s.value, s.origin) }
        var st = stat()
        return stat(Self.defaultKeysDirectory, &st) == 0 ? (Self.defaultKeysDirectory, "default") : nil
    }

    /// Every key feeds must be signed by: each `feed-key`, then the keys directory's `.pub`
    /// files. A `.pub` file that holds no key is a usage error naming it.
    func feedKeys() throws -> [FeedKey] {
        var keys = try settings.filter { $0.key == "feed-key" }.map { try FeedKey($0.value, origin: $0.origin) }
        if let dir = keysDirectory {
            // A mistyped directory must not turn the checks off.
            var st = stat()
            guard stat(dir.path, &st) == 0, (st.st_mode & S_IFMT) == S_IFDIR else {
                throw UsageError(message: "\(dir.origin.dropFirst(5)): 'feed-keys-dir': no directory \(dir.path)")
            }
            do {
                keys += try FeedKey.keys(inDirectory: dir.path)
            } catch let e as AdCacheError {
                throw UsageError(message: "\(e.message) (feed-keys-dir)")
            }
        }
        return keys
    }

    /// Why a VAST key's value is wrong (SPEC §10), or nil.
    static func vastProblem(_ key: String, _ value: String) -> String? {
        switch key {
        case "screen":
            return screenSize(value) == nil ? "'screen' needs WIDTHxHEIGHT, such as 1920x1080 (got '\(value)')" : nil
        case "max-bitrate":
            return Int(value).map { (1...1_000_000).contains($0) } == true
                ? nil : "'max-bitrate' needs kbit/s, a whole number from 1 to 1000000 (got '\(value)')"
        case "media-types":
            let types = value.split(separator: ",").map { $0.trimmed() }
            return !types.isEmpty && types.allSatisfy({ $0.hasPrefix("video/") && $0.count > 6 })
                ? nil
                : "'media-types' needs video types separated by commas, such as video/mp4,video/webm (got '\(value)')"
        case "limit-ad-tracking":
            return value == "true" || value == "false"
                ? nil : "'limit-ad-tracking' needs true or false (got '\(value)')"
        case "impression":   // SPEC §8: when an impression is queued
            return value == "render" || value == "choice"
                ? nil : "'impression' needs render or choice (got '\(value)')"
        case "render-timeout":
            return Self.renderTimeout(value) == nil
                ? "'render-timeout' needs seconds from 1 to 86400 (got '\(value)')" : nil
        default:
            return nil
        }
    }

    /// `render-timeout`: SEC (decimals and exponents too), 1 to 86400.
    static func renderTimeout(_ text: String) -> Double? {
        guard let s = Double(text.trimmed()), s.isFinite, (1...86400).contains(s) else { return nil }
        return s
    }

    static func screenSize(_ text: String) -> (width: Int, height: Int)? {
        let parts = text.lowercased().split(separator: "x")
        guard parts.count == 2, let w = Int(parts[0]), let h = Int(parts[1]), (1...100_000).contains(w),
            (1...100_000).contains(h)
        else { return nil }
        return (w, h)
    }

    /// The VAST settings (SPEC §10), defaults where the files say nothing.
    var vast: VASTOptions {
        var v = VASTOptions()
        if let s = value("screen").flatMap(Self.screenSize) { (v.screenWidth, v.screenHeight) = s }
        v.maxBitrate = value("max-bitrate").flatMap(Int.init)
        if let types = value("media-types") { v.mediaTypes = types.split(separator: ",").map { $0.trimmed() } }
        v.limitAdTracking = value("limit-ad-tracking") == "true"
        return v
    }

    /// The last value of `key`, or nil.
    func value(_ key: String) -> String? { settings.last { $0.key == key }?.value }

    /// Every value of `key`, in order.
    func values(_ key: String) -> [String] { settings.filter { $0.key == key }.map(\.value) }

    /// Fills in what the command line did not say, for the options `command` takes.
    func apply(to args: inout ParsedArguments) {
        for option in args.command.options + GlobalOptions.all {
            let key = option.spec.long
            let given = values(key)
            guard !given.isEmpty else { continue }
            if option.spec.value == nil {   // a flag: the command line wins when it says it
                if !args.flags.contains(key), given.last == "true" { args.flags.insert(key) }
            } else if option.spec.repeatable {
                args.values[key] = given + (args.values[key] ?? [])
            } else if args.values[key] == nil {
                args.values[key] = [given.last!]
            }
        }
    }
}

extension DeclaredOption {
    /// Reads `text` as a value of this option, throwing its usage error.
    func check(_ text: String) throws {
        if let option = self as? any ValueChecking {
            try option.checkValue(text)
        } else if text != "true" && text != "false" {
            throw UsageError(message: "option '--\(spec.long)' needs true or false (got '\(text)')")
        }
    }
}

protocol ValueChecking {
    func checkValue(_ text: String) throws
}

extension Option: ValueChecking {
    func checkValue(_ text: String) throws { _ = try read(text, spec) }
}
