#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// A splash-ad cache: the one type an app (or the `adcache` command line) uses.
///
/// ```swift
/// let cache = AdCache(.init(directory: AdCache.Configuration.defaultDirectory()))
/// _ = try cache.fetch(FetchOptions(feed: "https://ads.example.com/splash.json"))   // from a background job
/// if case .show(let ad) = try cache.next() { showSplash(ad.path, seconds: ad.duration) }
/// ```
///
/// One instance may be shared (it is `Sendable` and immutable): a background `fetch` and a
/// launch's `next` run at once, each with its own timeouts. The long calls (`fetch`, `report`,
/// `verify`) also have `async` forms that honour task cancellation. Errors are
/// `AdCacheError`s. Warnings go to the configuration's `diagnostics`; time comes from its
/// `clock`, so a test (or a preview "as of" some date) uses the same path as production.
/// `next`, `list`, `status` and `prune` never touch the network.
///
/// The calls, each beside what it takes and returns:
/// - `fetch` — Fetch/FetchCall.swift (`FetchOptions`, `TransferOptions`, `FetchReport`);
///   `check` — Fetch/FeedCheck.swift; `async` forms — AdCache+Async.swift
/// - `next`, `why` — Select/NextCall.swift, Select/Why.swift; `status` — Select/Status.swift
/// - `event`, `confirmImpression`, `reportProgress`, `report`, `stats` —
///   Events/ProofOfPlayCalls.swift; `export` — Ledger/Export.swift
/// - `prune`, `verify`, `list`, `clear` — Cache/CacheCalls.swift
public final class AdCache: Sendable {
    /// Where "now" comes from.
    public enum Clock: Sendable {
        /// A device clock, corrected by the offset the last fetch measured against the feed
        /// server's `Date` header when they differed by more than five minutes (SPEC §6).
        /// `bootClock`: the device clock is the system's, so the boot clock tells when it was
        /// stepped since the offset was measured (`ClockSync`); a clock of a test's making
        /// has none.
        case device(@Sendable () -> Date, bootClock: Bool = false)
        /// Exactly this time, taken as given (`--at`: previews and tests).
        case fixed(Date)

        /// The system clock, corrected.
        public static var system: Clock { .device({ Date() }, bootClock: true) }
    }

    /// Where the cache lives, how it reads the time, where warnings go, and proof of play's
    /// settings: all an instance needs, fixed when it is made.
    public struct Configuration: Sendable {
        /// The cache directory; created by the first fetch.
        public var directory: String
        /// Now. Expiry, schedules and the dates of shows are read from it.
        public var clock: Clock
        /// Where warnings go.
        public var diagnostics: @Sendable (Diagnostic) -> Void
        /// Device id, report URL and the queue's bounds (SPEC §8).
        public var proofOfPlay: ProofOfPlay

        /// A configuration for the cache in `directory` (not created here): the system clock,
        /// proof of play's defaults, and warnings dropped unless `diagnostics` takes them.
        public init(
            directory: String, clock: Clock = .system, proofOfPlay: ProofOfPlay = ProofOfPlay(),
            diagnostics: @escaping @Sendable (Diagnostic) -> Void = { _ in }
        ) {
            self.directory = directory
            self.clock = clock
            self.proofOfPlay = proofOfPlay
            self.diagnostics = diagnostics
        }

        /// `$ADCACHE_DIR`, else `$XDG_CACHE_HOME/adcache`, else `~/.cache/adcache` (SPEC §3).
        public static func defaultDirectory(environment: [String: String] = ProcessInfo.processInfo.environment)
            -> String
        {
            CacheStore.defaultDirectory(environment: environment)
        }
    }

    /// What this instance was made with; it never changes.
    public let configuration: Configuration
    let store: CacheStore

    /// A cache over `configuration.directory`. Touches neither the disk nor the network: the
    /// directory is created by the first fetch, and libcurl and libcrypto load on first use.
    public init(_ configuration: Configuration) {
        self.configuration = configuration
        store = CacheStore(
            directory: configuration.directory, warn: configuration.diagnostics,
            ledger: configuration.proofOfPlay.ledgerDirectory.map(Ledger.init))
    }

    var moment: Moment {
        switch configuration.clock {
        case .device(let read, let boot): return .device(read().timeIntervalSince1970, bootClock: boot)
        case .fixed(let date): return .given(date.timeIntervalSince1970)
        }
    }

    /// Now as the cache reckons it: the clock, corrected by the offset the last fetch measured
    /// against the feed server (a `fixed` clock as given).
    public func now() -> Date {
        let index = (try? store.load(warn: { _ in })) ?? CacheIndex()
        return Date(timeIntervalSince1970: moment.resolve(index))
    }

    /// This version of adcache.
    public static let version = AdCacheVersion.string

    /// The SHA-256 of `bytes` as a feed's `sha256` names it (64 lowercase hex digits), through
    /// libcrypto; throws `libraryMissing` without it.
    public static func sha256(_ bytes: [UInt8]) throws -> String {
        let h = try SHA256Hasher()
        h.update(bytes)
        return h.finalizeHex()
    }

    /// The default User-Agent: `adcache/<version> libcurl/<version>` (loads libcurl).
    public static var userAgent: String { defaultUserAgent() }

    /// A time as the feed and the command line write it: RFC 3339 with a zone offset, or
    /// integer Unix seconds (milliseconds from 100000000000 up). Nil for anything else.
    package static func parseTime(_ text: String) -> Date? {
        Time.parse(text).map { Date(timeIntervalSince1970: $0) }
    }

    /// RFC 3339 in local time with its offset, whole seconds.
    package static func formatLocalTime(_ date: Date) -> String {
        Time.formatLocal(date.timeIntervalSince1970)
    }

    /// RFC 3339 in UTC, as adcache prints times.
    package static func formatTime(_ date: Date) -> String {
        Time.format(date.timeIntervalSince1970)
    }
}
