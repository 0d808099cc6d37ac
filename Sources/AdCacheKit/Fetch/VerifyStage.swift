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

/// The verify stage of a fetch (SPEC §11): the feed's exact bytes are checked before they
/// are parsed, and a refusal leaves the cache as it was. With no signing key configured (as
/// today) every feed passes as it came; signed feeds plug in here.
protocol FeedVerifier: Sendable {
    /// The answer to hand to the parse stage, or a refusal (exit 65) or a transient failure.
    func verify(_ download: Fetcher.FeedDownload, feed: String) throws -> Fetcher.FeedDownload
}

/// No key configured: feeds are not checked.
struct UnsignedFeeds: FeedVerifier {
    func verify(_ download: Fetcher.FeedDownload, feed: String) throws -> Fetcher.FeedDownload { download }
}
