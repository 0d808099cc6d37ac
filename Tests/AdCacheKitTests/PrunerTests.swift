import Foundation
import TestSupport
import Testing

@testable import AdCacheKit

#if canImport(Glibc)
    import Glibc
#endif

@Suite struct PrunerTests {
    let now = 1_803_859_200.0

    /// Dates a file `seconds` in the past.
    static func age(_ path: String, by seconds: Int) {
        let t = timespec(tv_sec: Int(Date().timeIntervalSince1970) - seconds, tv_nsec: 0)
        var times = [t, t]
        utimensat(AT_FDCWD, path, &times, 0)
    }

    func prune(_ f: CacheFixture, maxSize: Int64? = nil, dryRun: Bool = false) throws -> PruneReport {
        try f.cache(at: now).prune(PruneOptions(maxSize: maxSize, dryRun: dryRun))
    }

    /// Every file in `assets/` dated `seconds` back: past the grace (SPEC §6) for what the
    /// index no longer names.
    static func ageAssets(_ f: CacheFixture, by seconds: Int = 3600) {
        for name in Disk.list(f.store.assetsDirectory) { age(f.store.assetPath(name), by: seconds) }
    }

    @Test func removesExpiredWithdrawnAndOrphansKeepsExhaustedRecord() throws {
        let f = try CacheFixture(); defer { f.remove() }
        let expired = f.ready("expired") { $0.expires = now - 1 }
        let withdrawn = f.ready("withdrawn") { $0.state = .withdrawn }
        let exhausted = f.ready("exhausted") {
            $0.maxShows = 2; $0.shows = 2
        }
        let keep = f.ready("keep")
        try f.save([expired, withdrawn, exhausted, keep])
        let orphan = String(repeating: "a", count: 64) + "-1.png"
        FileManager.default.createFile(atPath: f.store.assetPath(orphan), contents: Data(Media.png(50)))
        Self.age(f.store.assetPath(orphan), by: 3600)
        // One superseded within the last ten minutes stays: a launch may have printed it.
        let recent = String(repeating: "c", count: 64) + "-2.png"
        FileManager.default.createFile(atPath: f.store.assetPath(recent), contents: Data(Media.png(50)))
        // Not an asset's name: never deleted from assets/ (SPEC §6), whatever it is.
        FileManager.default.createFile(atPath: f.store.assetPath("notes.txt"), contents: Data([1]))
        FileManager.default.createFile(
            atPath: f.store.partialDirectory + "/\(String(repeating: "0", count: 64)).part", contents: Data([1, 2, 3]))
        // A resumable download of a new version of the ad that keeps its file.
        let resumable = try SHA256Hasher.hex(keep.url) + ".part"
        FileManager.default.createFile(atPath: f.store.partialDirectory + "/" + resumable, contents: Data([4]))

        let report = try prune(f)
        #expect(Set(report.removed.map(\.reason)) == ["expired", "withdrawn", "exhausted", "orphan", "partial"])
        // The files of the records that went stay 10 minutes: a launch may have printed them
        // just before (the expiry, the last show, the withdrawal) (SPEC §6 v4).
        #expect(report.bytesFreed == 50 + 3)
        #expect(
            Set(report.removed.compactMap(\.heldFile)) == [expired.file!, withdrawn.file!, exhausted.file!],
            "\(report.removed)")
        let ids = try f.index().ads.map(\.id)
        #expect(ids == ["exhausted", "keep"])
        #expect(try f.index().ads[0].file == nil && f.index().ads[0].shows == 2)
        #expect(
            Set(Disk.list(f.store.assetsDirectory))
                == [keep.file!, "notes.txt", recent, expired.file!, withdrawn.file!, exhausted.file!])
        #expect(Disk.list(f.store.partialDirectory) == [resumable], "a new version of a kept ad's asset stays")
        // Past the grace, the next prune deletes them (no record names them now).
        Self.ageAssets(f)
        let later = try prune(f)
        #expect(later.bytesFreed == 100 * 3 + 50, "\(later.removed)")
        #expect(Set(Disk.list(f.store.assetsDirectory)) == [keep.file!, "notes.txt"])
    }

    /// A file whose ad expired, was used up or withdrawn more than 10 minutes ago is deleted
    /// at once; one a launch may have printed in the last 10 minutes stays, however the index
    /// stopped naming it.
    @Test func theGraceCountsFromWhenALaunchMayHaveShownIt() throws {
        let f = try CacheFixture(); defer { f.remove() }
        let expiredLongAgo = f.ready("old") { $0.expires = now - 3600 }
        let usedUpLongAgo = f.ready("used") {
            $0.maxShows = 1; $0.shows = 1; $0.lastShown = now - 3600
        }
        let usedUpJustNow = f.ready("just") {
            $0.maxShows = 1; $0.shows = 1; $0.lastShown = now - 60
        }
        try f.save([expiredLongAgo, usedUpLongAgo, usedUpJustNow])
        Self.ageAssets(f)   // downloaded long ago (a file dated lately is kept by its date)
        let report = try prune(f)
        #expect(Set(report.removed.compactMap(\.file)) == [expiredLongAgo.file!, usedUpLongAgo.file!])
        #expect(report.removed.compactMap(\.heldFile) == [usedUpJustNow.file!])
        #expect(Disk.list(f.store.assetsDirectory) == [usedUpJustNow.file!])
    }

    @Test func sharedFileStaysWhileAnAdUsesIt() throws {
        let f = try CacheFixture(); defer { f.remove() }
        let a = f.ready("a") { $0.expires = now - 1 }
        var b = f.ready("b")
        b.url = a.url; b.file = a.file
        try f.save([a, b])
        _ = try prune(f)
        #expect(Disk.exists(f.store.assetPath(a.file!)))
        #expect(try f.index().ads.map(\.id) == ["b"])
    }

    @Test func dryRunRemovesNothing() throws {
        let f = try CacheFixture(); defer { f.remove() }
        try f.save([f.ready("expired") { $0.expires = now - 1 }, f.ready("keep")])
        let before = try Data(contentsOf: URL(fileURLWithPath: f.store.indexPath))
        let report = try prune(f, maxSize: 0, dryRun: true)
        #expect(report.removed.count == 2)
        #expect(try Data(contentsOf: URL(fileURLWithPath: f.store.indexPath)) == before)
        #expect(Disk.list(f.store.assetsDirectory).count == 2)
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
        #expect(report.removed.allSatisfy { $0.heldFile != nil }, "an evicted file stays for the grace")
        #expect(report.bytesKept == 5000)
        Self.ageAssets(f)
        #expect(try prune(f, maxSize: 2000).bytesKept == 2000)
        let index = try f.index()
        #expect(index.ads.filter { $0.file != nil }.map(\.id) == ["p9", "p5-recent"])
        // Evicted ads keep their records (and shows), waiting for the next fetch.
        #expect(index.ads.count == 5)
        #expect(index.ads.first { $0.id == "p5-old" }?.state == .pending)
    }

    /// The field defect: two ads share one URL; evicting the worse one deleted the file the
    /// priority-10 ad shows. A file ranks as the best ad using it.
    @Test func aFileSharedWithABetterAdIsNeverEvictedForAWorseOne() throws {
        let f = try CacheFixture()
        defer { f.remove() }
        let top = f.ready("top", priority: 10)
        var low = f.ready("low", priority: 1)
        Disk.remove(f.store.assetPath(low.file!))
        low.url = top.url
        low.file = top.file
        let mid = f.ready("mid", priority: 5)
        let later = f.ready("later", priority: 0) { $0.start = now + 3600 }   // scheduled: ranked like ready
        try f.save([low, top, mid, later])
        let report = try prune(f, maxSize: 100)
        #expect(report.removed.filter { $0.reason == "evicted" }.map(\.id) == ["later", "mid"])
        let index = try f.index()
        #expect(index.ads.first { $0.id == "top" }?.state == .ready)
        #expect(index.ads.first { $0.id == "low" }?.state == .ready)
        Self.ageAssets(f)
        _ = try prune(f, maxSize: 100)
        #expect(Disk.list(f.store.assetsDirectory) == [top.file!])
        #expect(try f.cache(at: now).shown()?.id == "top")
    }

    /// While the index is being recovered (moved aside, or taken from the previous
    /// generation), files it does not name may be the lost records': none is an orphan.
    @Test func noOrphanSweepWhileTheIndexIsRecovered() throws {
        let f = try CacheFixture()
        defer { f.remove() }
        try f.save([f.ready("a"), f.ready("b")])
        FileManager.default.createFile(atPath: f.store.indexPath, contents: Data("{\"version\": 1, \"ads\": [{".utf8))
        let report = try prune(f)
        #expect(!report.removed.contains { $0.reason == "orphan" })
        #expect(Disk.list(f.store.assetsDirectory).count == 2)
        // Nor with no index at all (lost): the next fetch reuses the files.
        for name in Disk.list(f.store.directory) where name.hasPrefix("index.json") {
            Disk.remove(f.store.directory + "/" + name)
        }
        #expect(try prune(f).removed.isEmpty)
        #expect(Disk.list(f.store.assetsDirectory).count == 2)
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
        #expect(Disk.exists(f.store.assetPath("just-downloaded.jpg")))
        #expect(Disk.exists(f.store.partialDirectory + "/x.part"))
    }

    @Test func clearRemovesEverythingButTheDirectory() throws {
        let f = try CacheFixture(); defer { f.remove() }
        try f.save([f.ready("a"), f.ready("b")])
        #expect(try f.cache(at: now).clear() == 2)
        #expect(Disk.exists(f.store.directory))
        #expect(!Disk.exists(f.store.indexPath))
        #expect(Disk.list(f.store.assetsDirectory).isEmpty)
    }
}
