import Foundation
import TestSupport
import Testing

@testable import AdCacheKit

@Suite struct IndexStoreTests {
    @Test func saveAndLoadRoundTrip() throws {
        let f = try CacheFixture(); defer { f.remove() }
        var ad = f.ready("a \"quoted\"\n\tünïcödé 🎉 \u{1}") {
            $0.meta = .object([
                "n": .int(1), "s": .string("x\\y"), "a": .array([.null, .bool(true), .double(1.5), .object([:])]),
            ])
            $0.clickUrl = "https://e.com/?a=1&b=/"
        }
        ad.shows = 3
        ad.fileMtime = 1_796_075_623_923_755_404   // 19 digits: nanoseconds
        ad.start = 1_803_859_200.25
        ad.expires = 1_803_859_260
        ad.maxShows = 9; ad.maxShowsPerDay = 2; ad.minInterval = 60
        ad.lastShown = 1_803_859_201.5; ad.lastShowSeq = 7; ad.showDay = 20_877; ad.showsOnDay = 1
        ad.etag = "W/\"x\""; ad.lastModified = "Mon, 02 Nov 2026 10:00:00 GMT";
        ad.sha256 = String(repeating: "a", count: 64)
        ad.error = "HTTP 503"
        let plain = f.ready("b")
        try f.save([ad, plain])
        #expect(try f.index().ads == [ad, plain])
        // Human-readable and versioned, no temporary left behind.
        let text = try String(contentsOfFile: f.store.indexPath, encoding: .utf8)
        #expect(text.contains("\"version\": 1"))
        #expect(Disk.list(f.store.directory).filter { $0.contains("tmp") }.isEmpty)
    }

    @Test(arguments: [
        "{ not json", "", "{\"version\":1,\"ads\":[{\"id\":3}]",
        "{\"version\":1,\"ads\":[{\"id\":\"a\",\"url\":\"u\",\"placem",
    ])
    func unreadableIndexIsMovedAsideWithAWarning(content: String) throws {
        let f = try CacheFixture()
        defer { f.remove() }
        FileManager.default.createFile(atPath: f.store.indexPath, contents: Data(content.utf8))
        // A command that only reads changes nothing on disk.
        var warnings: [String] = []
        #expect(try f.store.load { warnings.append($0.message) }.ads.isEmpty)
        #expect(warnings.count == 1 && warnings[0].hasSuffix("the next fetch rebuilds it"), "\(warnings)")
        #expect(try String(contentsOfFile: f.store.indexPath, encoding: .utf8) == content)
        // One that writes moves it aside first.
        warnings = []
        try f.store.update(warn: { warnings.append($0.message) }) { $0.showSeq = 1 }
        #expect(warnings.count == 1)
        #expect(warnings[0].contains("moved it aside"))
        let aside = Disk.list(f.store.directory).filter { $0.hasPrefix("index.json.corrupt-") }
        #expect(aside.count == 1)
        #expect(try String(contentsOfFile: f.store.directory + "/" + aside[0], encoding: .utf8) == content)
        #expect(try f.index().showSeq == 1)
    }

    @Test func aCorruptIndexFallsBackToThePreviousGenerationKeepingShowCounts() throws {
        let f = try CacheFixture()
        defer { f.remove() }
        try f.save([f.ready("a") { $0.shows = 7 }])
        try f.save([f.ready("a") { $0.shows = 8 }])   // index.json.old now holds shows 7
        #expect(Disk.exists(f.store.oldIndexPath))
        FileManager.default.createFile(atPath: f.store.indexPath, contents: Data("{\"version\":1,\"ads\":[{\"id".utf8))
        let warnings = Collected()
        let listed = try f.cache(at: 1_803_859_200, warn: warnings.add).list()
        #expect(listed.map(\.shows) == [7], "the last change is lost, not the counts")
        #expect(warnings.messages.first?.hasSuffix("using index.json.old, the previous generation") == true)
        // A recording show carries on from the old generation, and leaves the torn index to
        // a command that holds the index lock (a launch holds only the journal's).
        _ = try f.cache(at: 1_803_859_200).shown()
        #expect(try f.index().ads.map(\.shows) == [8])
        #expect(Disk.list(f.store.directory).filter { $0.hasPrefix("index.json.corrupt-") }.isEmpty)
        _ = try f.cache(at: 1_803_859_200).prune()
        #expect(try f.index().ads.map(\.shows) == [8])
        // Two corruptions in one second keep both files.
        for text in ["garbage one", "garbage two"] {
            FileManager.default.createFile(atPath: f.store.indexPath, contents: Data(text.utf8))
            _ = try f.cache(at: 1_803_859_200).prune()
        }
        let aside = Disk.list(f.store.directory).filter { $0.hasPrefix("index.json.corrupt-") }
        #expect(aside.count == 3)
    }

    @Test func newerIndexVersionIsRefusedNotDestroyed() throws {
        let f = try CacheFixture(); defer { f.remove() }
        FileManager.default.createFile(
            atPath: f.store.indexPath, contents: Data(#"{"version":2,"ads":[],"showSeq":0}"#.utf8))
        #expect(throws: AdCacheError.self) { try f.store.load(warn: { _ in }) }
        #expect(Disk.exists(f.store.indexPath))
    }

    @Test func indexLockTimesOutWithBusy() throws {
        let f = try CacheFixture(); defer { f.remove() }
        let mine = CacheStore(directory: f.store.directory, lockTimeout: 0.2)
        let other = CacheStore(directory: f.store.directory, lockTimeout: 0.2)
        // flock locks belong to the open file description: a second open in this process
        // contends like another process would.
        try mine.withIndexLock {
            do {
                try other.withIndexLock {}
                Issue.record("the second lock should not be granted")
            } catch let e as AdCacheError {
                #expect(e == .busy("the cache is busy (index.lock is held); try again"))
            }
        }
    }

    @Test func secondFetchLockIsRefusedWithThePID() throws {
        let f = try CacheFixture(); defer { f.remove() }
        let held = try f.store.acquireFetchLock()
        do {
            _ = try f.store.acquireFetchLock()
            Issue.record("the second fetch lock should not be granted")
        } catch let e as AdCacheError {
            #expect(e == .busy("another fetch is running (pid \(getpid())); try again later"))
        }
        held.unlock()
        #expect(throws: Never.self, "free again once released") { try f.store.acquireFetchLock().unlock() }
    }

    @Test func defaultDirectory() {
        #expect(
            CacheStore.defaultDirectory(environment: ["ADCACHE_DIR": "/a", "XDG_CACHE_HOME": "/x", "HOME": "/h"])
                == "/a")
        #expect(CacheStore.defaultDirectory(environment: ["XDG_CACHE_HOME": "/x", "HOME": "/h"]) == "/x/adcache")
        #expect(CacheStore.defaultDirectory(environment: ["HOME": "/h"]) == "/h/.cache/adcache")
        #expect(CacheStore.defaultDirectory(environment: ["ADCACHE_DIR": "", "HOME": "/h"]) == "/h/.cache/adcache")
    }
}
