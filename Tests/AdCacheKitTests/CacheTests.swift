import Foundation
import Testing
import TestSupport
@testable import AdCacheKit

@Suite struct IndexStoreTests {
    @Test func saveAndLoadRoundTrip() throws {
        let f = try CacheFixture(); defer { f.remove() }
        var ad = f.ready("a \"quoted\"\n\tünïcödé 🎉 \u{1}") {
            $0.meta = .object(["n": .int(1), "s": .string("x\\y"), "a": .array([.null, .bool(true), .double(1.5), .object([:])])])
            $0.clickUrl = "https://e.com/?a=1&b=/"
        }
        ad.shows = 3
        ad.fileMtime = 1_796_075_623_923_755_404   // 19 digits: nanoseconds
        ad.start = 1_803_859_200.25
        ad.expires = 1_803_859_260
        ad.maxShows = 9; ad.maxShowsPerDay = 2; ad.minInterval = 60
        ad.lastShown = 1_803_859_201.5; ad.lastShowSeq = 7; ad.showDay = 20_877; ad.showsOnDay = 1
        ad.etag = "W/\"x\""; ad.lastModified = "Mon, 02 Nov 2026 10:00:00 GMT"; ad.sha256 = String(repeating: "a", count: 64)
        ad.error = "HTTP 503"
        let plain = f.ready("b")
        try f.save([ad, plain])
        #expect(try f.index().ads == [ad, plain])
        // Human-readable and versioned, no temporary left behind.
        let text = try String(contentsOfFile: f.store.indexPath, encoding: .utf8)
        #expect(text.contains("\"version\": 1"))
        #expect(FileIO.list(f.store.directory).filter { $0.contains("tmp") }.isEmpty)
    }

    @Test(arguments: ["{ not json", "", "{\"version\":1,\"ads\":[{\"id\":3}]", "{\"version\":1,\"ads\":[{\"id\":\"a\",\"url\":\"u\",\"placem"])
    func unreadableIndexIsMovedAsideWithAWarning(content: String) throws {
        let f = try CacheFixture(); defer { f.remove() }
        FileManager.default.createFile(atPath: f.store.indexPath, contents: Data(content.utf8))
        var warnings: [String] = []
        let index = try f.store.load { warnings.append($0.message) }
        #expect(index.ads.isEmpty)
        #expect(warnings.count == 1)
        #expect(warnings[0].contains("moved it aside"))
        #expect(!FileIO.exists(f.store.indexPath))
        let aside = FileIO.list(f.store.directory).filter { $0.hasPrefix("index.json.corrupt-") }
        #expect(aside.count == 1)
        #expect(try String(contentsOfFile: f.store.directory + "/" + aside[0], encoding: .utf8) == content)
    }

    @Test func newerIndexVersionIsRefusedNotDestroyed() throws {
        let f = try CacheFixture(); defer { f.remove() }
        FileManager.default.createFile(atPath: f.store.indexPath, contents: Data(#"{"version":2,"ads":[],"showSeq":0}"#.utf8))
        #expect(throws: AdCacheError.self) { try f.store.load(warn: { _ in }) }
        #expect(FileIO.exists(f.store.indexPath))
    }

    @Test func indexLockTimesOutWithBusy() throws {
        let f = try CacheFixture(); defer { f.remove() }
        f.store.lockTimeout = 0.2
        let other = CacheStore(directory: f.store.directory)
        other.lockTimeout = 0.2
        // flock locks belong to the open file description: a second open in this process
        // contends like another process would.
        try f.store.withIndexLock {
            do {
                try other.withIndexLock { }
                Issue.record("the second lock should not be granted")
            } catch let e as AdCacheError {
                #expect(e == .busy("the cache is busy (index.lock is held); try again"))
            }
        }
    }

    @Test func secondFetchLockIsRefusedWithThePID() throws {
        let f = try CacheFixture(); defer { f.remove() }
        let held = try f.store.acquireFetchLock()
        #expect(f.store.fetchIsRunning())
        do {
            _ = try f.store.acquireFetchLock()
            Issue.record("the second fetch lock should not be granted")
        } catch let e as AdCacheError {
            #expect(e == .busy("another fetch is running (pid \(getpid())); try again later"))
        }
        held.unlock()
        #expect(!f.store.fetchIsRunning())
    }

    @Test func defaultDirectory() {
        #expect(CacheStore.defaultDirectory(environment: ["ADCACHE_DIR": "/a", "XDG_CACHE_HOME": "/x", "HOME": "/h"]) == "/a")
        #expect(CacheStore.defaultDirectory(environment: ["XDG_CACHE_HOME": "/x", "HOME": "/h"]) == "/x/adcache")
        #expect(CacheStore.defaultDirectory(environment: ["HOME": "/h"]) == "/h/.cache/adcache")
        #expect(CacheStore.defaultDirectory(environment: ["ADCACHE_DIR": "", "HOME": "/h"]) == "/h/.cache/adcache")
    }
}

@Suite struct PrunerTests {
    let now = 1_803_859_200.0

    func prune(_ f: CacheFixture, maxSize: Int64? = nil, dryRun: Bool = false) throws -> PruneReport {
        try f.cache(at: now).prune(PruneOptions(maxSize: maxSize, dryRun: dryRun))
    }

    @Test func removesExpiredWithdrawnAndOrphansKeepsExhaustedRecord() throws {
        let f = try CacheFixture(); defer { f.remove() }
        let expired = f.ready("expired") { $0.expires = now - 1 }
        let withdrawn = f.ready("withdrawn") { $0.state = .withdrawn }
        let exhausted = f.ready("exhausted") { $0.maxShows = 2; $0.shows = 2 }
        let keep = f.ready("keep")
        try f.save([expired, withdrawn, exhausted, keep])
        FileManager.default.createFile(atPath: f.store.assetPath("orphan.png"), contents: Data(Media.png(50)))
        FileManager.default.createFile(atPath: f.store.partialDirectory + "/\(String(repeating: "0", count: 64)).part", contents: Data([1, 2, 3]))

        let report = try prune(f)
        #expect(Set(report.removed.map(\.reason)) == ["expired", "withdrawn", "exhausted", "orphan", "partial"])
        #expect(report.bytesFreed == 100 * 3 + 50 + 3)
        let ids = try f.index().ads.map(\.id)
        #expect(ids == ["exhausted", "keep"])
        #expect(try f.index().ads[0].file == nil && f.index().ads[0].shows == 2)
        #expect(FileIO.list(f.store.assetsDirectory) == [keep.file!])
        #expect(FileIO.list(f.store.partialDirectory).isEmpty)
    }

    @Test func sharedFileStaysWhileAnAdUsesIt() throws {
        let f = try CacheFixture(); defer { f.remove() }
        let a = f.ready("a") { $0.expires = now - 1 }
        var b = f.ready("b")
        b.url = a.url; b.file = a.file
        try f.save([a, b])
        _ = try prune(f)
        #expect(FileIO.exists(f.store.assetPath(a.file!)))
        #expect(try f.index().ads.map(\.id) == ["b"])
    }

    @Test func dryRunRemovesNothing() throws {
        let f = try CacheFixture(); defer { f.remove() }
        try f.save([f.ready("expired") { $0.expires = now - 1 }, f.ready("keep")])
        let before = try Data(contentsOf: URL(fileURLWithPath: f.store.indexPath))
        let report = try prune(f, maxSize: 0, dryRun: true)
        #expect(report.removed.count == 2)
        #expect(try Data(contentsOf: URL(fileURLWithPath: f.store.indexPath)) == before)
        #expect(FileIO.list(f.store.assetsDirectory).count == 2)
    }

    @Test func evictsLowestPriorityThenSoonestExpiryThenLeastRecentlyShown() throws {
        let f = try CacheFixture(); defer { f.remove() }
        try f.save([
            f.ready("p9", priority: 9, bytes: 1000),
            f.ready("p1-late", priority: 1, bytes: 1000) { $0.expires = now + 9000 },
            f.ready("p1-soon", priority: 1, bytes: 1000) { $0.expires = now + 100 },
            f.ready("p5-recent", priority: 5, bytes: 1000) { $0.lastShowSeq = 9 },
            f.ready("p5-old", priority: 5, bytes: 1000) { $0.lastShowSeq = 2 },
        ])
        let report = try prune(f, maxSize: 2000)
        #expect(report.removed.map(\.id) == ["p1-soon", "p1-late", "p5-old"])
        #expect(report.bytesKept == 2000)
        let index = try f.index()
        #expect(index.ads.filter { $0.file != nil }.map(\.id) == ["p9", "p5-recent"])
        // Evicted ads keep their records (and shows), waiting for the next fetch.
        #expect(index.ads.count == 5)
        #expect(index.ads.first { $0.id == "p5-old" }?.state == .pending)
    }

    @Test func sizeLimitAdmitsExactlySize() throws {
        let f = try CacheFixture(); defer { f.remove() }
        try f.save([f.ready("a", bytes: 1024), f.ready("b", bytes: 1024)])
        #expect(try prune(f, maxSize: 2048).removed.isEmpty)
        #expect(try prune(f, maxSize: 2047).removed.count == 1)
    }

    @Test func leavesAssetsAndPartialsAloneWhileAFetchRuns() throws {
        let f = try CacheFixture(); defer { f.remove() }
        try f.save([f.ready("a")])
        FileManager.default.createFile(atPath: f.store.assetPath("just-downloaded.jpg"), contents: Data(Media.jpeg(10)))
        FileManager.default.createFile(atPath: f.store.partialDirectory + "/x.part", contents: Data([1]))
        let lock = try f.store.acquireFetchLock()
        defer { lock.unlock() }
        #expect(try prune(f).removed.isEmpty)
        #expect(FileIO.exists(f.store.assetPath("just-downloaded.jpg")))
        #expect(FileIO.exists(f.store.partialDirectory + "/x.part"))
    }

    @Test func clearRemovesEverythingButTheDirectory() throws {
        let f = try CacheFixture(); defer { f.remove() }
        try f.save([f.ready("a"), f.ready("b")])
        #expect(try f.cache(at: now).clear() == 2)
        #expect(FileIO.exists(f.store.directory))
        #expect(!FileIO.exists(f.store.indexPath))
        #expect(FileIO.list(f.store.assetsDirectory).isEmpty)
    }
}

@Suite struct PartialDownloadTests {
    @Test func resumesOnlyAFileWhoseVersionIsKnown() throws {
        let dir = TempDir(); defer { dir.remove() }
        let p = PartialDownload(path: dir.file("x.part"))
        #expect(p.resumePoint() == nil)   // nothing there
        let fd = p.openFresh(validator: "\"v1\"")
        #expect(fd >= 0)
        _ = [UInt8](repeating: 7, count: 100).withUnsafeBytes { FileIO.writeAll(fd, $0) }
        close(fd)
        #expect(p.resumePoint()?.offset == 100)
        #expect(p.resumePoint()?.validator == "\"v1\"")
        // A response without a validator cannot be resumed, and is not kept after a failure.
        close(p.openFresh(validator: nil))
        #expect(p.resumePoint() == nil && !p.isResumable)
        p.keepIfResumable()
        #expect(!FileIO.exists(p.path))
    }

    @Test func commitMovesTheFileAndForgetsTheValidator() throws {
        let dir = TempDir(); defer { dir.remove() }
        let p = PartialDownload(path: dir.file("y.part"))
        close(p.openFresh(validator: "W"))
        p.keepIfResumable()
        #expect(FileIO.exists(p.path) && p.isResumable)
        #expect(p.commit(to: dir.file("final.jpg")))
        #expect(FileIO.exists(dir.file("final.jpg")) && !FileIO.exists(p.path) && !FileIO.exists(p.validatorPath))
        #expect(!p.commit(to: dir.file("again.jpg")))
        close(p.openFresh(validator: "W"))
        p.discard()
        #expect(FileIO.list(dir.path) == ["final.jpg"])
    }
}
