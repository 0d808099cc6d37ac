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

/// The feed stage of a fetch: the feed's answer (or none while it is fresh), its redirects
/// and freshness, and the server's time — a value, applied only once the answer is accepted
/// (AcceptStage).
extension Fetcher {
    /// What the run asks for: FEED as given (or remembered), where it is, and what the index
    /// remembers of it.
    struct FeedRequest {
        var feedText: String
        var source: FeedLocation
        /// The index's record of this feed (nil for another feed).
        var previous: FeedSource?
    }

    func feedRequest(_ before: CacheIndex) throws -> FeedRequest {
        // A remembered `-` (a signed feed read from standard input keeps its validUntil
        // there) is no feed a bare fetch can read again.
        guard let feedText = options.feed ?? before.feed.flatMap({ $0.url == "-" ? nil : $0.url }) else {
            throw AdCacheError.invalidRequest("no FEED given and no earlier successful fetch to repeat")
        }
        return FeedRequest(
            feedText: feedText, source: try FeedLocation(feedText),
            previous: before.feed?.url == feedText ? before.feed : nil)
    }

    struct FeedDownload {
        /// nil when the server said 304.
        var body: [UInt8]?
        var finalURL: URL
        var etag: String?
        var lastModified: String?
        /// The server's `Date` (Unix seconds) and the device's clock when the answer came.
        var serverDate: Double?
        var receivedAt: Double?
        /// Until when the answer is fresh.
        var freshUntil: Double?
        /// The feed's signature, fetched right after it when a key is configured (SPEC §11).
        var signature: SignatureDownload?
        /// The last verified feed and signature, which a 304 of either stands for.
        var stored: (feed: [UInt8], signature: [UInt8])?
    }

    /// The feed's transfer. With `--header`, redirects are followed here rather than by
    /// libcurl (which keeps custom headers across hosts): the headers go only to the feed's
    /// own origin (scheme, host and port), never to a CDN it redirects to (SPEC §4).
    /// `what` names the transfer in errors; `refusal` turns a failure into an error of its own
    /// (a missing signature is a refusal, not a network fault).
    func fetchFeed(
        _ first: TransferRequest, what: String = "the feed", refusal: (TransferError) -> AdCacheError? = { _ in nil }
    ) throws -> TransferResponse {
        var request = first
        request.followRedirects = options.headers.isEmpty
        let origin = Self.origin(first.url)
        var settings = options.settings
        settings.retryAfterEndsAttempts = true
        for _ in 0...options.settings.maxRedirects {
            var response = TransferResponse()
            TransferEngine(settings: settings).run([request]) { _, r in response = r }
            if !request.followRedirects, (300...399).contains(response.status), response.status != 304,
                let location = response.headers["location"]
            {
                guard let next = URL(string: location, relativeTo: URL(string: request.url))?.absoluteURL,
                    ["http", "https"].contains(next.scheme?.lowercased() ?? "")
                else {
                    throw AdCacheError.feedUnreachable(
                        .init("cannot fetch \(what) \(first.url): refused: a redirect to \(location)", kind: .redirect))
                }
                request.url = next.absoluteString
                request.headers = Self.origin(request.url) == origin ? first.headers : []
                continue
            }
            if let error = response.error {
                if case .libcurlRefused(let why) = error { throw AdCacheError.libraryMissing(why) }
                if let refused = refusal(error) { throw refused }
                // Told to wait (SPEC §12): remembered for the next runs, at most a day.
                if case .httpStatus(let status) = error, [429, 503].contains(status), let after = response.retryAfter,
                    let origin = Self.origin(response.effectiveURL.isEmpty ? request.url : response.effectiveURL)
                {
                    throw FeedUnreachable(
                        error: .feedUnreachable(error.failure("cannot fetch \(what) \(first.url): \(error)")),
                        retryAfter: RetryAfter(origin: origin, until: now() + min(after, RetryAfter.cap)))
                }
                throw AdCacheError.feedUnreachable(error.failure("cannot fetch \(what) \(first.url): \(error)"))
            }
            if response.effectiveURL.isEmpty { response.effectiveURL = request.url }
            return response
        }
        throw AdCacheError.feedUnreachable(
            .init("cannot fetch \(what) \(first.url): too many redirects", kind: .redirect))
    }

    /// scheme://host:port, lowercased, with the default port made explicit.
    static func origin(_ url: String) -> String? {
        guard let u = URL(string: url), let scheme = u.scheme?.lowercased(), let host = u.host?.lowercased() else {
            return nil
        }
        return "\(scheme)://\(host):\(u.port ?? (scheme == "https" ? 443 : 80))"
    }

    /// Until when an answer is fresh, on this run's (corrected) clock.
    func freshUntil(_ headers: [String: String]) -> Double? {
        Freshness.until(headers, receivedAt: now()) { try? CurlAPI.shared.get().parseDate($0) }
    }

    /// 90 → "2 minutes", 172800 → "2 days", as a person says it.
    static func span(_ seconds: Double) -> String {
        let (n, unit): (Int, String)
        switch seconds {
        case ..<5400: (n, unit) = (Int((seconds / 60).rounded()), "minute")
        case ..<(36 * 3600): (n, unit) = (Int((seconds / 3600).rounded()), "hour")
        case ..<(548 * 86400): (n, unit) = (Int((seconds / 86400).rounded()), "day")
        default: (n, unit) = (Int((seconds / (365.25 * 86400)).rounded()), "year")
        }
        return "\(n) \(unit)\(n == 1 ? "" : "s")"
    }

    /// The feed's answer (or none, while it is fresh), on the cache's clock. With a feed key,
    /// the feed is asked conditionally (or not at all while fresh) only when the last verified
    /// pair is at hand, and its signature is fetched right after it.
    func feedStep(_ request: FeedRequest, _ before: CacheIndex) throws -> FeedDownload {
        let source = request.source
        if case .remote(let url) = source, let wait = before.retryAfter {
            let t = now()
            let origins = [Self.origin(url), request.previous?.finalUrl.flatMap(Self.origin)]
            if t < wait.until, wait.until - t <= RetryAfter.cap, origins.contains(wait.origin) {
                throw ToldToWait(until: wait.until)
            }
        }
        let stored = signing ? storedSignedFeed(before, previous: request.previous) : nil
        // Ads from VAST documents, and the feed's bytes that lead to them not at hand (a cache
        // an older adcache wrote, `feed.vast` lost): asked whole once, so that a 304 never
        // freezes what the feed wraps (SPEC §10 *Wrapped documents stay fresh*).
        let wrapsLost =
            before.ads.contains { $0.vast != nil && $0.state != .withdrawn }
            && keptVASTFeed(digest: request.previous?.sha256) == nil
        let previous = (signing && stored == nil) || wrapsLost ? nil : request.previous
        var download: FeedDownload
        if !options.revalidate, let previous, let fresh = previous.freshUntil, now() < fresh, !before.ads.isEmpty {
            // Still fresh (RFC 9111): not asked at all; the ads we have are refreshed as after a 304.
            download = FeedDownload(
                body: nil, finalURL: previous.finalUrl.flatMap(URL.init(string:)) ?? URL(fileURLWithPath: "/"),
                etag: previous.etag, lastModified: previous.lastModified, freshUntil: fresh)
        } else {
            download = try downloadFeed(source, previous: previous, hasAds: !before.ads.isEmpty)
            if signing { download.signature = try signatureStep(source, previous: previous) }
        }
        download.stored = stored
        return download
    }

    func downloadFeed(_ source: FeedLocation, previous: FeedSource?, hasAds: Bool) throws -> FeedDownload {
        switch source {
        case .standardInput:
            let bytes = options.feedContent ?? []
            guard Int64(bytes.count) <= options.maxFeedSize else {
                throw AdCacheError.feedUnreachable(
                    .init(
                        "cannot read the feed: standard input is larger than the limit of \(options.maxFeedSize) bytes",
                        kind: .tooLarge))
            }
            return FeedDownload(body: bytes, finalURL: FeedParser.standardInputBase)
        case .local(let path):
            let bytes: [UInt8]
            do {
                bytes = try FileIO.read(path, limit: options.maxFeedSize)
            } catch let e as AdCacheError {
                throw AdCacheError.feedUnreachable(
                    .init("cannot read the feed: \(e.message)", kind: .file, transient: true))
            }
            return FeedDownload(body: bytes, finalURL: URL(fileURLWithPath: path))
        case .remote(let url):
            var request = TransferRequest(url: url, destination: .memory, maxBytes: options.maxFeedSize)
            request.headers = options.headers
            request.acceptCompressed = true
            if hasAds, let previous {
                request.ifNoneMatch = previous.etag
                request.ifModifiedSince = previous.lastModified
            }
            let response = try fetchFeed(request)
            let finalURL = URL(string: response.effectiveURL) ?? URL(string: url)!
            let receivedAt = clock.deviceNow()
            // The server's time: its Date plus the Age of a cached answer (a CDN's copy is not
            // a clock error, SPEC §6).
            let age = response.headers["age"].flatMap(Double.init).map { max(0, min($0, 365 * 86400)) } ?? 0
            let serverDate = response.headers["date"].flatMap { try? CurlAPI.shared.get().parseDate($0) }.map {
                $0 + age
            }
            let fresh = freshUntil(response.headers)
            if response.notModified {
                return FeedDownload(
                    body: nil, finalURL: previous?.finalUrl.flatMap(URL.init(string:)) ?? finalURL,
                    etag: response.headers["etag"] ?? previous?.etag,
                    lastModified: response.headers["last-modified"] ?? previous?.lastModified,
                    serverDate: serverDate, receivedAt: receivedAt, freshUntil: fresh)
            }
            return FeedDownload(
                body: response.body, finalURL: finalURL,
                etag: response.headers["etag"], lastModified: response.headers["last-modified"],
                serverDate: serverDate, receivedAt: receivedAt, freshUntil: fresh)
        }
    }
}

/// A run inside the time a feed server asked for no requests before (SPEC §12).
struct ToldToWait: Error {
    var until: Double
}

/// A feed that could not be fetched, and the server's "not before" when it said one (429,
/// 503 with `Retry-After`): remembered even though the feed failed (SPEC §12).
struct FeedUnreachable: Error {
    var error: AdCacheError
    var retryAfter: RetryAfter?
}

/// FEED on the command line: an http/https URL, a `file:` URL, or a local path.
enum FeedLocation {
    case remote(String)
    case local(String)
    /// `-`: the feed's bytes come with the options (the command line reads standard input).
    case standardInput

    init(_ text: String) throws {
        let lower = text.lowercased()
        if text == "-" {
            self = .standardInput
        } else if lower.hasPrefix("http://") || lower.hasPrefix("https://") {
            guard let u = URL(string: text), u.host?.isEmpty == false else {
                throw AdCacheError.invalidRequest("FEED '\(text)' is not a valid URL")
            }
            self = .remote(text)
        } else if lower.hasPrefix("file:") {
            guard let u = URL(string: text), u.isFileURL else {
                throw AdCacheError.invalidRequest("FEED '\(text)' is not a valid file: URL")
            }
            self = .local(u.path)
        } else if let r = text.firstRange(of: "://"), !text[..<r.lowerBound].contains("/") {
            throw AdCacheError.invalidRequest("FEED '\(text)': only http, https and file: feeds are supported")
        } else {
            self = .local(PathText.absolute(text))
        }
    }
}

extension FeedLocation {
    var isStandardInput: Bool {
        if case .standardInput = self { return true }
        return false
    }
}
