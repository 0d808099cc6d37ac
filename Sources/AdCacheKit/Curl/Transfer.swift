import CCurl

/// What one HTTP (or local `file:`) transfer asks for. Built by the fetch layer; carried out
/// by `TransferEngine`, the only code that talks to libcurl.
struct TransferRequest: Sendable {
    enum Destination: Sendable {
        /// Kept in memory (the feed), at most `maxBytes`.
        case memory
        /// Streamed to a partial download (an asset in `partial/`), which an interrupted
        /// transfer leaves for the next one to resume.
        case file(PartialDownload)
        /// Read and dropped (a tracker's pixel, a report's answer).
        case discard
    }

    var url: String
    var destination: Destination
    var maxBytes: Int64
    /// An answer that announces a longer body than this (its `Content-Length`) is abandoned
    /// before the body, as `.tooLarge` of this limit: what is left of a day's budget (SPEC
    /// §12). A body whose length nobody announced is held to `maxBytes` only.
    var maxAnnouncedBytes: Int64?
    var headers: [String] = []
    var ifNoneMatch: String?
    var ifModifiedSince: String?
    /// `http,https`, or `file` for the assets of a local feed.
    var allowFile = false
    /// Ask for gzip/deflate (the feed; never assets, whose bytes are hashed as sent).
    var acceptCompressed = false
    /// Follow redirects (up to `maxRedirects`); the feed with custom headers follows them
    /// itself, to drop the headers at another origin.
    var followRedirects = true
    /// POST these bytes (with a `Content-Type` in `headers`) instead of a GET.
    var postBody: [UInt8]?

    init(url: String, destination: Destination, maxBytes: Int64) {
        self.url = url
        self.destination = destination
        self.maxBytes = maxBytes
    }
}

/// Settings every transfer of a run shares.
struct TransferSettings: Sendable {
    /// Seconds: the connect time, and the longest stretch without a byte.
    var timeout: Double = 30
    /// `--limit-rate`: the run's one budget, shared by every transfer that copies these
    /// settings (`RateLimiter`); nil is no limit, and no cost.
    var rateLimiter: RateLimiter?
    /// Polled while transfers run: true stops them all (SIGINT, SIGTERM), as the deadline does.
    var isCancelled: (@Sendable () -> Bool)?
    /// Tests: make libcurl refuse this option, as an old one would.
    var refuseOption: CURLoption?
    /// Nil is `adcache/<version> libcurl/<version>`.
    var userAgent: String?
    var caFile: String?
    /// Every request through this HTTP proxy (`CURLOPT_PROXY`); nil leaves libcurl's
    /// `http_proxy`/`https_proxy`/`no_proxy` to apply (SPEC §12).
    var proxy: String?
    /// Hosts that bypass the proxy (`CURLOPT_NOPROXY`); with `proxy` set and this nil, none
    /// does (the environment's `no_proxy` is ignored).
    var noProxy: String?
    var maxRedirects = 5
    /// A transfer slower than `stallBytesPerSecond` for `stallSeconds` is abandoned.
    var stallBytesPerSecond = 1024
    var stallSeconds = 30
    var parallel = 4
    var retries = 2
    /// The first back-off, doubled on each retry, with jitter.
    var retryBaseDelay: Double = 1
    /// The longest single wait before a retry (SPEC §4: five minutes): the back-off stops
    /// growing there, and a longer `Retry-After` ends the transfer's attempts for this run.
    var maxWait: Double = 300
    /// A `Retry-After` ends the attempts at once (the feed's: the index remembers it for the
    /// next runs instead, SPEC §12).
    var retryAfterEndsAttempts = false
    /// On the monotonic clock (`monotonicNow()`); nil is no deadline.
    var deadline: Double?

    init() {}
}

/// What every transfer of one call shares — `FetchOptions.transfer` and
/// `ReportOptions.transfer` alike (SPEC §1 v4).
public struct TransferOptions: Sendable {
    /// The settings the engine runs with (the public ones below, and knobs of its own).
    var settings = TransferSettings()

    /// The connect time, and the longest stretch without a byte, per transfer (seconds,
    /// 0.001 to 86400; default 30).
    public var timeout: Double {
        get { settings.timeout }
        set { settings.timeout = newValue }
    }
    /// Stop the whole call this many seconds after it starts (0.001 to 31536000): what
    /// finished is kept, the rest waits for the next call. Nil: no deadline.
    public var deadline: Double?
    /// Transfers at once, 1 to 64 (default 4).
    public var parallel: Int {
        get { settings.parallel }
        set { settings.parallel = newValue }
    }
    /// Retries of a transient failure, 0 to 20 (default 2).
    public var retries: Int {
        get { settings.retries }
        set { settings.retries = newValue }
    }
    /// The User-Agent of every request; nil is `AdCache.userAgent`.
    public var userAgent: String? {
        get { settings.userAgent }
        set { settings.userAgent = newValue }
    }
    /// Trust the CA certificates in this file instead of the system's.
    public var caFile: String? {
        get { settings.caFile }
        set { settings.caFile = newValue }
    }
    /// Every request through this HTTP proxy (as curl's `--proxy`); nil leaves the
    /// environment's `http_proxy`, `https_proxy` and `no_proxy` to apply (SPEC §12).
    public var proxy: String? {
        get { settings.proxy }
        set { settings.proxy = newValue }
    }
    /// Hosts, comma-separated, that bypass the proxy (as curl's `--noproxy`).
    public var noProxy: String? {
        get { settings.noProxy }
        set { settings.noProxy = newValue }
    }
    /// Polled while the transfers run: true stops them (as SIGINT does in the command line)
    /// — partial files are kept, what finished is committed. The `async` calls set it from
    /// task cancellation.
    public var isCancelled: (@Sendable () -> Bool)? {
        get { settings.isCancelled }
        set { settings.isCancelled = newValue }
    }

    /// The defaults.
    public init() {}

    func validate() throws { try settings.validate(deadline: deadline) }
}

/// Why a transfer failed, in the few cases a person can act on.
enum TransferError: Error, Equatable, Sendable, CustomStringConvertible {
    case couldNotResolve(String)
    case couldNotConnect(String)
    /// The proxy the transfer goes through could not be reached (SPEC §12): its URL, and why.
    case proxyUnreachable(String)
    case timedOut
    case stalled
    case tls(String)
    case httpStatus(Int)
    case tooLarge(Int64)
    case truncated
    case tooManyRedirects
    /// A URL libcurl refuses to parse (a port above 65535, a host that is no host).
    case malformedURL(String)
    case refusedScheme(String)
    case writeFailed(String, errno: Int32)
    case deadline
    /// Stopped by a signal.
    case interrupted
    /// libcurl refused an option the transfer needs.
    case libcurlRefused(String)
    /// A libcurl failure with no case of its own: its code, the OS's errno
    /// (`CURLINFO_OS_ERRNO`, 0 when none) and its message.
    case libcurl(code: Int32, osErrno: Int32, String)
    /// The server answered, but not as the protocol allows (an unexpected range).
    case oddReply(String)
    /// A local feed's asset that is not there (as a 404 is).
    case fileNotFound(String)
    /// A local problem before any transfer (libcurl could not start).
    case other(String)

    var description: String {
        switch self {
        case .couldNotResolve(let h): return "could not resolve host \(h)"
        case .couldNotConnect(let t): return "could not connect: \(t)"
        case .proxyUnreachable(let t): return "cannot reach the proxy \(t)"
        case .timedOut: return "timed out"
        case .stalled: return "stalled (under 1 KiB/s for too long)"
        case .tls(let t): return "TLS failure: \(t)"
        case .httpStatus(let s): return "HTTP \(s)"
        case .tooLarge(let limit): return "larger than the limit of \(ByteSize.human(limit))"
        case .truncated: return "the body is shorter than announced (connection closed early)"
        case .tooManyRedirects: return "too many redirects (a loop, or more than 5)"
        case .malformedURL(let t): return "malformed URL: \(t)"
        case .refusedScheme(let t): return "refused: \(t)"
        case .writeFailed(let t, _): return "cannot write: \(t)"
        case .deadline: return "abandoned at the deadline"
        case .interrupted: return "interrupted"
        case .libcurlRefused(let t): return t
        case .libcurl(let code, let osErrno, let t):
            return osErrno == 0 ? "\(t) (curl error \(code))" : "\(t) (curl error \(code), errno \(osErrno))"
        case .oddReply(let t): return t
        case .fileNotFound(let t): return "cannot read the file: \(t)"
        case .other(let t): return t
        }
    }

    /// What a failure means for the delivery or the asset (SPEC §4, §5, §8).
    enum Disposition: Sendable, Equatable {
        /// Try again: the next run, or after a back-off within this one.
        case transient
        /// The server's answer refuses it for good: a 4xx other than 408 and 429, a body
        /// over the cap, a redirect out of the web.
        case permanent
        /// Not the network's doing: the disk, the deadline, a signal, this libcurl.
        case local
    }

    /// The one failure table, shared by fetch and report: only an answer — or a URL no answer
    /// can change: malformed, or redirected in a loop or more than 5 times (SPEC §4) — refuses
    /// for good. TLS (a device clock in 1970 sees every certificate as not yet valid), every
    /// other libcurl failure that is not an answer, and odd replies are transient.
    var disposition: Disposition {
        switch self {
        case .httpStatus(let s): return (400...499).contains(s) && s != 408 && s != 429 ? .permanent : .transient
        case .tooLarge, .refusedScheme, .fileNotFound, .tooManyRedirects, .malformedURL: return .permanent
        case .writeFailed, .deadline, .interrupted, .libcurlRefused, .other: return .local
        case .couldNotResolve, .couldNotConnect, .proxyUnreachable, .timedOut, .stalled, .tls, .truncated, .libcurl,
            .oddReply:
            return .transient
        }
    }

    /// Worth another try (`disposition` is transient).
    var isTransient: Bool { disposition == .transient }

    /// The public value of this failure (SPEC §1 v4), with `message` for a person.
    func failure(_ message: String) -> AdCacheError.Failure {
        var f = AdCacheError.Failure(message, kind: kind, transient: isTransient)
        if case .httpStatus(let status) = self { f.httpStatus = status }
        if case .libcurl(let code, _, _) = self { f.curlCode = Int(code) }
        return f
    }

    private var kind: AdCacheError.Failure.Kind {
        switch self {
        case .httpStatus: return .http
        case .couldNotResolve: return .resolve
        case .couldNotConnect: return .connect
        case .proxyUnreachable: return .proxy
        case .tls: return .tls
        case .timedOut, .stalled: return .timeout
        case .tooLarge: return .tooLarge
        case .truncated: return .truncated
        case .tooManyRedirects: return .redirect
        case .malformedURL, .refusedScheme: return .badURL
        case .fileNotFound: return .file
        case .libcurl, .oddReply: return .network
        case .deadline, .interrupted: return .stopped
        case .writeFailed, .libcurlRefused, .other: return .other
        }
    }
}

/// What came back.
struct TransferResponse: Sendable {
    /// HTTP status of the final response (200 for a local file).
    var status = 0
    /// Headers of the final response, names lowercased.
    var headers: [String: String] = [:]
    var effectiveURL: String = ""
    /// The body, for `.memory` transfers.
    var body: [UInt8] = []
    /// For `.file` transfers: the whole file's length, SHA-256 and first bytes (including a
    /// resumed prefix).
    var fileBytes: Int64 = 0
    var fileSha256: String?
    var fileHead: [UInt8] = []
    /// True when the body continued an earlier partial file (206).
    var resumed = false
    /// Body bytes received in this run.
    var bytesReceived: Int64 = 0
    /// The server's `Retry-After`, in seconds from now (libcurl parses both forms).
    var retryAfter: Double?
    var attempts = 0
    var error: TransferError?

    var notModified: Bool { status == 304 }
}
