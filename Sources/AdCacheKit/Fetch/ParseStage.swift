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

/// A feed format. The parse stage reads the verified bytes with the first format that claims
/// them: JSON today; VAST plugs in here as a second format.
protocol FeedFormat: Sendable {
    /// True when `bytes` are of this format (the last format claims whatever is left).
    func claims(_ bytes: [UInt8]) -> Bool
    func parse(_ bytes: [UInt8], baseURL: URL) throws -> Feed
}

/// SPEC §2's JSON feed.
struct JSONFeedFormat: FeedFormat {
    func claims(_ bytes: [UInt8]) -> Bool { true }
    func parse(_ bytes: [UInt8], baseURL: URL) throws -> Feed { try FeedParser(baseURL: baseURL).parse(bytes) }
}

/// The parse stage of a fetch.
extension Fetcher {
    static let formats: [any FeedFormat] = [JSONFeedFormat()]

    /// The ads of the feed's answer; after a 304, the ads the index holds, to refresh their
    /// assets.
    func parseStage(_ download: FeedDownload, feedText: String, before: CacheIndex) throws -> Feed {
        guard let bytes = download.body else {
            return Feed(
                ads: before.ads.filter { $0.state != .withdrawn }.map(\.feedAd), warnings: [],
                reportUrl: before.reportUrl)
        }
        let format = Self.formats.first { $0.claims(bytes) } ?? JSONFeedFormat()
        do {
            return try format.parse(bytes, baseURL: download.finalURL)
        } catch let e as AdCacheError {
            throw e.with(message: "the feed \(feedText) is not a valid feed: \(e.message)")
        }
    }
}
