/// What went wrong, as a case a caller can act on and a message a person can read. The
/// command line maps each case to an exit code (SPEC §5, `exitCode`); the library never ends
/// the process. The cases about a feed carry a `Failure`: the HTTP status, whether trying
/// again may help, what kind of failure it was, the VAST error code, a refusal's reason
/// (SPEC §1 v4) — a program branches on those, never on the text.
public enum AdCacheError: Error, Equatable, Sendable, CustomStringConvertible {
    /// The request itself cannot be carried out: no feed given and none remembered, a feed
    /// location that is not http, https or file:.
    case invalidRequest(String)
    /// The feed could not be fetched (network, HTTP error, unreadable file): nothing changed.
    case feedUnreachable(Failure)
    /// The feed was fetched but is not a feed, or was refused (a signature, a rollback, no
    /// usable ad): nothing changed.
    case feedInvalid(Failure)
    /// The cache directory cannot be created or written.
    case cacheUnwritable(String)
    /// Reading or writing the cache failed (disk full, an index that cannot be recovered).
    case io(String)
    /// Another fetch is running, or the index stayed locked: try again later.
    case busy(String)
    /// The feed was fetched but none of its ads can be used for now, because a wrapped VAST
    /// document could not be fetched for a transient reason: nothing changed; try again later.
    case tryAgainLater(Failure)
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
        case .invalidRequest(let m), .cacheUnwritable(let m), .io(let m), .busy(let m), .libraryMissing(let m),
            .unknownAd(let m), .exportInvalid(let m):
            return m
        case .feedUnreachable(let f), .feedInvalid(let f), .tryAgainLater(let f):
            return f.message
        }
    }

    /// The feed's failure, for the cases that have one.
    public var failure: Failure? {
        switch self {
        case .feedUnreachable(let f), .feedInvalid(let f), .tryAgainLater(let f): return f
        default: return nil
        }
    }

    /// The message, one line (as `message`).
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

    /// Not a feed (not JSON or XML, not a feed's shape): `feedInvalid`, kind `content`.
    static func notAFeed(_ message: String) -> AdCacheError {
        .feedInvalid(Failure(message, kind: .content))
    }

    /// Nothing changed and the run stopped for now (the deadline, a cancellation):
    /// `tryAgainLater`, kind `stopped`, transient.
    static func stoppedForNow(_ message: String) -> AdCacheError {
        .tryAgainLater(Failure(message, kind: .stopped, transient: true))
    }

    /// A signed feed refused (SPEC §11): `feedInvalid`, kind `signature`, with its reason.
    static func refused(_ refusal: Failure.Refusal, _ message: String) -> AdCacheError {
        .feedInvalid(Failure(message, kind: .signature, refusal: refusal))
    }

    /// The same kind of error with another message.
    func with(message m: String) -> AdCacheError {
        switch self {
        case .invalidRequest: return .invalidRequest(m)
        case .feedUnreachable(var f): f.message = m; return .feedUnreachable(f)
        case .feedInvalid(var f): f.message = m; return .feedInvalid(f)
        case .cacheUnwritable: return .cacheUnwritable(m)
        case .io: return .io(m)
        case .busy: return .busy(m)
        case .tryAgainLater(var f): f.message = m; return .tryAgainLater(f)
        case .libraryMissing: return .libraryMissing(m)
        case .unknownAd: return .unknownAd(m)
        case .exportInvalid: return .exportInvalid(m)
        }
    }
}

extension AdCacheError {
    /// Why a feed, a document or an asset failed, as values (SPEC §1 v4). Made from a message
    /// alone (a string literal) it says only that; the transfer and the signed-feed rules fill in
    /// what they know.
    public struct Failure: Error, Equatable, Sendable, CustomStringConvertible, ExpressibleByStringInterpolation {
        /// What kind of failure.
        public enum Kind: String, Equatable, Sendable {
            /// The server answered with an HTTP error status (`httpStatus`).
            case http
            /// The host's name could not be resolved.
            case resolve
            /// No connection (refused, unreachable).
            case connect
            /// The proxy could not be reached.
            case proxy
            /// The TLS handshake or certificate check failed.
            case tls
            /// Timed out, or stalled.
            case timeout
            /// The body was over the size limit.
            case tooLarge
            /// The body was shorter than announced.
            case truncated
            /// Redirected in a loop, more than 5 times, or out of http and https.
            case redirect
            /// A URL that cannot be parsed or a scheme that is refused.
            case badURL
            /// A local file that cannot be read.
            case file
            /// Another libcurl failure (`curlCode`).
            case network
            /// The content is not what it must be (not a feed, not XML, a wrong type or digest).
            case content
            /// A signed feed was refused (`refusal`).
            case signature
            /// A VAST document said or caused a VAST error (`vastError`).
            case vast
            /// Stopped by the deadline or a cancellation.
            case stopped
            /// Anything else.
            case other
        }

        /// Why a signed feed (or a feed as a whole) was refused (SPEC §2, §11).
        public enum Refusal: String, Equatable, Sendable {
            /// No signature, or one that cannot be fetched or read.
            case signatureMissing
            /// It does not verify (the feed or the signature was changed).
            case signatureInvalid
            /// Made by a key that is not configured.
            case unknownKey
            /// A serial older than the last accepted, or the same serial with other bytes.
            case rollback
            /// Its `validUntil` has passed, or `serial`/`validUntil` are missing.
            case expired
            /// It lists ads of which none can be used.
            case noUsableAd
        }

        /// One line, for a person.
        public var message: String
        /// What kind of failure: what a program branches on first.
        public var kind: Kind
        /// The HTTP status of the answer, when there was one.
        public var httpStatus: Int?
        /// Trying again later may help (network, timeouts, 408, 429, 5xx…); false for a failure
        /// for good (another 4xx, invalid content, a refusal).
        public var transient: Bool
        /// libcurl's error code (`CURLcode`), for a failure libcurl reported.
        public var curlCode: Int?
        /// The VAST error code (SPEC §10), for a VAST failure.
        public var vastError: Int?
        /// Why a signed feed, or the feed as a whole, was refused.
        public var refusal: Refusal?

        /// A failure of `kind`.
        public init(
            _ message: String, kind: Kind = .other, httpStatus: Int? = nil, transient: Bool = false,
            curlCode: Int? = nil, vastError: Int? = nil, refusal: Refusal? = nil
        ) {
            self.message = message
            self.kind = kind
            self.httpStatus = httpStatus
            self.transient = transient
            self.curlCode = curlCode
            self.vastError = vastError
            self.refusal = refusal
        }

        /// A message alone: kind `other`, not transient.
        public init(stringLiteral value: String) { self.init(value) }
        /// A message alone, interpolated: kind `other`, not transient.
        public init(stringInterpolation: DefaultStringInterpolation) {
            self.init(String(stringInterpolation: stringInterpolation))
        }

        /// The message, one line (as `message`).
        public var description: String { message }
    }
}

/// A warning: something adcache worked around and a person may want to know (an ad the feed
/// got wrong, a record of the index it had to drop). The command line prints the message as
/// `adcache: warning: …`; an app may log it.
public struct Diagnostic: Equatable, Sendable, CustomStringConvertible {
    /// What the warning is about.
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

    /// What the warning is about.
    public var kind: Kind
    /// The ad it concerns, when there is one.
    public var adID: String?
    /// One line, for a person.
    public var message: String

    /// A warning of `kind` about ad `adID`, when there is one.
    public init(_ kind: Kind, ad adID: String? = nil, _ message: String) {
        self.kind = kind
        self.adID = adID
        self.message = message
    }

    /// The message (as `message`).
    public var description: String { message }
}

/// Where diagnostics go inside the library.
typealias WarningSink = (Diagnostic) -> Void
