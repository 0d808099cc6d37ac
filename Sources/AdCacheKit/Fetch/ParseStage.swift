#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// The parse stage of a fetch: the verified bytes as a JSON feed (SPEC §2) or, when they
/// start with `<`, a VAST document (SPEC §10). The documents it leads to are the VAST stage's.
extension Fetcher {
    /// True when `bytes` (after a BOM and white space) start with `<`: XML, read as VAST.
    static func isXML(_ bytes: [UInt8]) -> Bool {
        var i = bytes.starts(with: [0xEF, 0xBB, 0xBF]) ? 3 : 0
        while i < bytes.count, [0x20, 0x09, 0x0A, 0x0D].contains(bytes[i]) { i += 1 }
        return i < bytes.count && bytes[i] == UInt8(ascii: "<")
    }

    /// The ads of the feed's bytes; with none (a 304, or a feed still fresh), the ads the index
    /// holds, to refresh their assets.
    func parseStage(_ bytes: [UInt8]?, download: FeedDownload, _ request: FeedRequest, before: CacheIndex) throws
        -> Feed
    {
        guard let bytes else {
            return Feed(
                ads: before.ads.filter { $0.state != .withdrawn }.map(\.feedAd), warnings: [],
                reportUrl: before.reportUrl)
        }
        let feedText = request.feedText
        func invalid(_ why: String) -> AdCacheError { .notAFeed("the feed \(feedText) is not a valid feed: \(why)") }
        guard Self.isXML(bytes) else {
            do {
                return try FeedParser(baseURL: download.finalURL).parse(bytes)
            } catch let e as AdCacheError {
                throw e.with(message: "the feed \(feedText) is not a valid feed: \(e.message)")
            }
        }
        let root: VASTDocument
        do {
            root = try VASTDocument.read(bytes, deadline: options.settings.deadline)
        } catch {
            if error.libraryMissing { throw AdCacheError.libraryMissing(error.reason) }
            if error.transient {   // the deadline: not the feed's fault; nothing changed
                throw AdCacheError.stoppedForNow("the feed \(feedText) was not read before the deadline")
            }
            throw invalid(error.reason)
        }
        var feed = Feed(ads: [], warnings: [], reportUrl: nil)
        feed.isVAST = true
        feed.vastRoot = root
        feed.listed = root.entries.count
        feed.serial = root.serial
        feed.validUntil = root.validUntil
        return feed
    }
}
