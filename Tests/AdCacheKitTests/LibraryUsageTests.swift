import AdCacheKit   // not @testable: an app sees only the public API
import Foundation
import TestSupport
import Testing

/// The program README.md shows ("Using AdCacheKit from Swift"), run as a test so that it
/// keeps compiling and working against the public API alone.
@Suite struct LibraryUsageTests {
    static let examples = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("Examples").path

    /// README: a background job refreshes the cache; a launch asks what to show.
    func refreshThenLaunch(cacheDirectory: String, feed: String, log: @escaping @Sendable (String) -> Void) -> String? {
        let cache = AdCache(.init(directory: cacheDirectory, diagnostics: { log("warning: \($0.message)") }))

        // In a background job (it may take minutes; never on the launch path):
        do {
            let report = try cache.fetch(FetchOptions(feed: feed))
            log("\(report.ads.count) ads, \(report.count(.downloaded)) downloaded")   // "3 ads, 3 downloaded"
        } catch AdCacheError.feedUnreachable(let failure) where failure.transient {
            log("offline, keeping the cached ads: \(failure.message)")
        } catch AdCacheError.feedUnreachable(let failure) {
            log("the feed server refuses: HTTP \(failure.httpStatus ?? 0)")
        } catch {
            log("fetch failed: \(error)")
        }

        // At launch (instant, no network):
        do {
            switch try cache.next(NextOptions(type: .image)) {
            case .show(let ad):
                return ad.path   // show it for ad.duration seconds; ad.clickUrl on a tap
            case .nothingEligible, .coolingDown:
                return nil   // no splash this time
            }
        } catch {
            log("no splash: \(error)")   // e.g. .busy: the index stayed locked for a second
            return nil
        }
    }

    @Test func fetchThenNextThroughThePublicAPI() throws {
        let dir = TempDir()
        defer { dir.remove() }
        let lines = Lines()
        let path = refreshThenLaunch(
            cacheDirectory: dir.path + "/cache", feed: Self.examples + "/feed.json", log: lines.add)
        #expect(lines.all == ["3 ads, 3 downloaded"])
        let shown = try #require(path)
        #expect(shown.hasPrefix(dir.path + "/cache/assets/") && FileManager.default.fileExists(atPath: shown))
        // Offline: the feed cannot be read, the cache still answers.
        let offline = Lines()
        let again = refreshThenLaunch(
            cacheDirectory: dir.path + "/cache", feed: dir.path + "/gone.json", log: offline.add)
        #expect(offline.all.first?.hasPrefix("offline, keeping the cached ads: cannot read the feed") == true)
        #expect(again != nil)
    }
}

final class Lines: @unchecked Sendable {
    private var lines: [String] = []
    private let lock = NSLock()
    func add(_ s: String) {
        lock.lock()
        lines.append(s)
        lock.unlock()
    }
    var all: [String] {
        lock.lock()
        defer { lock.unlock() }
        return lines
    }
}
