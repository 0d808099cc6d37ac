/// The exit codes of SPEC §5, from sysexits.h.
public enum ExitCode: Int32, Sendable {
    case success = 0
    case nothingToShow = 1
    case usage = 64
    case dataError = 65
    case unavailable = 69
    case software = 70
    case cantCreate = 73
    case ioError = 74
    case tempFail = 75
}

/// Every failure a command can end with. Each case carries a message a person can act on;
/// the command line prints it as `adcache: error: <message>`.
public struct AdCacheError: Error, CustomStringConvertible, Equatable, Sendable {
    public var code: ExitCode
    public var message: String
    public var hint: String?

    public init(_ code: ExitCode, _ message: String, hint: String? = nil) {
        self.code = code
        self.message = message
        self.hint = hint
    }

    public var description: String { message }

    public static func usage(_ m: String, hint: String? = nil) -> AdCacheError { .init(.usage, m, hint: hint) }
    public static func badData(_ m: String) -> AdCacheError { .init(.dataError, m) }
    public static func unavailable(_ m: String) -> AdCacheError { .init(.unavailable, m) }
    public static func cantCreate(_ m: String) -> AdCacheError { .init(.cantCreate, m) }
    public static func io(_ m: String) -> AdCacheError { .init(.ioError, m) }
    public static func busy(_ m: String) -> AdCacheError { .init(.tempFail, m) }
}

/// Where warnings go. The command line prints them as `adcache: warning: …`.
public typealias WarningSink = (String) -> Void
