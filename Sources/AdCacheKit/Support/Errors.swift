/// What went wrong, as a case a caller can act on and a message a person can read. The
/// command line maps each case to an exit code (SPEC §5); the library never ends the process.
public enum AdCacheError: Error, Equatable, Sendable, CustomStringConvertible {
    /// The request itself cannot be carried out: no feed given and none remembered, a feed
    /// location that is not http, https or file:.
    case invalidRequest(String)
    /// The feed could not be fetched (network, HTTP error, unreadable file): nothing changed.
    case feedUnreachable(String)
    /// The feed was fetched but is not a feed: nothing changed.
    case feedInvalid(String)
    /// The cache directory cannot be created or written.
    case cacheUnwritable(String)
    /// Reading or writing the cache failed (disk full, an index that cannot be recovered).
    case io(String)
    /// Another fetch is running, or the index stayed locked: try again later.
    case busy(String)
    /// The feed was fetched but none of its ads can be used for now, because a wrapped VAST
    /// document could not be fetched for a transient reason: nothing changed; try again later.
    case tryAgainLater(String)
    /// libcurl or libcrypto cannot be loaded (or lacks what adcache needs).
    case libraryMissing(String)
    /// `event` named an ad the cache does not hold (in any state).
    case unknownAd(String)
    /// A ledger export does not verify (SPEC §14): a line changed, missing or out of order,
    /// or a signature that does not check. The message names the first line at fault.
    case exportInvalid(String)

    /// The message, one line.
    public var message: String {
        switch self {
        case .invalidRequest(let m), .feedUnreachable(let m), .feedInvalid(let m), .cacheUnwritable(let m),
            .io(let m), .busy(let m), .tryAgainLater(let m), .libraryMissing(let m), .unknownAd(let m),
            .exportInvalid(let m):
            return m
        }
    }

    public var description: String { message }

    /// The exit code the command line ends with (SPEC §5), also what `status` reports of a
    /// fetch that ended so.
    public var exitCode: Int32 {
        switch self {
        case .invalidRequest: return 64
        case .feedInvalid, .unknownAd, .exportInvalid: return 65
        case .feedUnreachable: return 69
        case .libraryMissing: return 70
        case .cacheUnwritable: return 73
        case .io: return 74
        case .busy, .tryAgainLater: return 75
        }
    }

    /// The same kind of error with another message.
    func with(message m: String) -> AdCacheError {
        switch self {
        case .invalidRequest: return .invalidRequest(m)
        case .feedUnreachable: return .feedUnreachable(m)
        case .feedInvalid: return .feedInvalid(m)
        case .cacheUnwritable: return .cacheUnwritable(m)
        case .io: return .io(m)
        case .busy: return .busy(m)
        case .tryAgainLater: return .tryAgainLater(m)
        case .libraryMissing: return .libraryMissing(m)
        case .unknownAd: return .unknownAd(m)
        case .exportInvalid: return .exportInvalid(m)
        }
    }
}

/// A warning: something adcache worked around and a person may want to know (an ad the feed
/// got wrong, a record of the index it had to drop). The command line prints the message as
/// `adcache: warning: …`; an app may log it.
public struct Diagnostic: Equatable, Sendable, CustomStringConvertible {
    public enum Kind: String, Sendable {
        /// The feed's content: an ad skipped, a field dropped or defaulted.
        case feed
        /// The index: moved aside, a record dropped or repaired.
        case index
        /// The cache directory: it does not exist, or a show could not be recorded in it.
        case cache
        /// The device clock disagrees with the feed server's.
        case clock
        /// A transfer: the deadline passed.
        case transfer
        /// Proof of play: a delivery dropped, the queue not delivered.
        case report
    }

    public var kind: Kind
    /// The ad it concerns, when there is one.
    public var adID: String?
    public var message: String

    public init(_ kind: Kind, ad adID: String? = nil, _ message: String) {
        self.kind = kind
        self.adID = adID
        self.message = message
    }

    public var description: String { message }
}

/// Where diagnostics go inside the library.
typealias WarningSink = (Diagnostic) -> Void
