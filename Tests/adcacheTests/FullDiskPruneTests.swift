import Foundation
import TestSupport
import Testing

@testable import AdCacheKit

#if canImport(Glibc)
    import Glibc
#endif

/// SPEC §6 (v4): `prune --max-size` gets space back on a full disk, "even when nothing can be
/// written first". Version 3 exited 74 and freed nothing: the index that stops naming the
/// evicted files could not be written, so it deleted none. Each test fills a real 2 MiB tmpfs
/// (three 300 KB ads and a filler), runs the built binary, and checks the cache SPEC §6
/// promises — at the end, and after a crash at each step.
@Suite(.serialized) struct FullDiskPruneTests {
    /// A full 2 MiB tmpfs whose cache holds three ready ads of 300 KB each.
    final class FullDisk {
        let dir = TempDir()
        var mountPoint: String { dir.path + "/small" }
        var cache: String { mountPoint + "/cache" }
        var c: [String] { ["--cache-dir", cache] }
        private(set) var assets: [String] = []

        /// `prepare` runs between the fetch and the filling (to take away the reserve, say).
        init(prepare: (String) -> Void = { _ in }) throws {
            try SmallDisk.mount(mountPoint, size: "2m")   // deinit unmounts it, also when this throws
            for n in 0..<3 { dir.write("\(n).jpg", Media.jpeg(300_000, seed: UInt8(n + 1))) }
            let feed = dir.write(
                "feed.json", #"[{"id":"a0","url":"0.jpg"},{"id":"a1","url":"1.jpg"},{"id":"a2","url":"2.jpg"}]"#)
            let fetch = Adcache.run(c + ["fetch", feed])
            try #require(fetch.status == 0, "\(fetch.stderr)")
            assets = Disk.list(cache + "/assets").filter(AssetName.isValid)
            try #require(assets.count == 3)
            prepare(cache)
            _ = runProgram("/bin/dd", ["if=/dev/zero", "of=\(mountPoint)/filler", "bs=4096"])
            try #require(free < 8192, "the disk is full")
        }

        deinit {
            SmallDisk.unmount(mountPoint)
            dir.remove()
        }

        var free: Int64 {
            var s = statvfs()
            return statvfs(mountPoint, &s) == 0 ? Int64(s.f_bavail) * Int64(s.f_frsize) : 0
        }

        /// Dates the files in assets/ an hour back (past the grace of files no record names).
        func age() {
            let old = timespec(tv_sec: Int(Date().timeIntervalSince1970) - 3600, tv_nsec: 0)
            for name in Disk.list(cache + "/assets") {
                var times = [old, old]
                utimensat(AT_FDCWD, cache + "/assets/" + name, &times, 0)
            }
        }

        func prune(crashAt point: String? = nil) -> Run {
            Adcache.run(c + ["prune", "--max-size", "0"], environment: point.map { ["ADCACHE_CRASH_AT": $0] } ?? [:])
        }

        /// The index as every command reads it (it must load: never torn, never lost).
        func index() throws -> CacheIndex { try CacheStore(directory: cache).load(warn: { _ in }) }

        /// The ids of ads whose index record names a file that is not there.
        func missing() throws -> [String] {
            try index().ads.filter { r in r.file.map { !Disk.exists(cache + "/assets/" + $0) } ?? false }.map(\.id)
        }

        /// Done: exit 0, the three files gone and their room free again, an index that names
        /// none of them (the ads pending, their records kept), and a reserve again.
        func expectFreed(_ r: Run, _ context: String = "") throws {
            #expect(r.status == 0, "\(context) \(r.stderr)")
            #expect(Disk.list(cache + "/assets").isEmpty, "\(Disk.list(cache + "/assets"))")
            #expect(free >= 800_000, "\(context) space was freed: \(free)")
            let ads = try index().ads
            #expect(ads.map(\.id).sorted() == ["a0", "a1", "a2"])
            #expect(ads.allSatisfy { $0.file == nil && $0.state == .pending }, "\(ads.map(\.state))")
            #expect((Disk.size(cache + "/reserve") ?? 0) >= 64 << 10, "the reserve is made again")
            #expect(Adcache.run(c + ["verify"]).status == 0)
        }
    }

    /// The reserve `fetch` made holds the new index: the files go after its commit, as always.
    @Test(.enabled(if: SmallDisk.canMount, "mounting a small tmpfs needs root (CI runs as root)"))
    func pruneMaxSizeFreesAFullDisk() throws {
        let disk = try FullDisk()
        #expect(Disk.size(disk.cache + "/reserve") == 64 << 10, "fetch made a reserve")
        func inode(_ name: String) -> UInt64? {
            var st = stat()
            return lstat(disk.cache + "/" + name, &st) == 0 ? UInt64(st.st_ino) : nil
        }
        let reserve = inode("reserve")
        let r = disk.prune()
        #expect(inode("index.json") == reserve, "the index was written into the reserve's blocks")
        try disk.expectFreed(r)
        #expect(r.stderr.isEmpty, "\(r.stderr)")
        #expect(r.stdout.contains("freed 879K"), "\(r.stdout)")
    }

    /// A cache with no reserve (an older adcache's, or one whose disk never had room for it):
    /// the evicted files go first, with a warning.
    @Test(.enabled(if: SmallDisk.canMount, "mounting a small tmpfs needs root (CI runs as root)"))
    func withoutAReserveTheEvictedFilesGoFirst() throws {
        let disk = try FullDisk { cache in
            for name in ["reserve", "index.sel", "index.json.old"] { Disk.remove(cache + "/" + name) }
        }
        let r = disk.prune()
        try disk.expectFreed(r)
        #expect(
            r.stderr
                == "adcache: warning: the disk is full and the cache has no reserve: deleted 3 files before writing the index that stops naming them\n"
        )
    }

    /// Killed at each step of the reserve's way: the index is the old one or the new one, and
    /// no record names a file that is gone; the next prune finishes the job (on a disk still
    /// full, at once; once a file has gone, the others wait out their ten minutes' grace).
    @Test(
        .enabled(if: SmallDisk.canMount, "mounting a small tmpfs needs root (CI runs as root)"),
        arguments: ["prune.reserveWritten", "prune.afterSave", "prune.afterDelete"])
    func aCrashOnTheReservesWayLeavesNoAdMissing(point: String) throws {
        let disk = try FullDisk()
        let crashed = disk.prune(crashAt: point)
        #expect(crashed.status == 222, "\(point): \(crashed.stderr)")
        #expect(try disk.missing().isEmpty, "\(point)")
        #expect(try disk.index().ads.count == 3)
        if point == "prune.afterDelete" {
            #expect(disk.free > 200_000, "no longer full")
            disk.age()
        }
        try disk.expectFreed(disk.prune(), "\(point), then again")
    }

    /// The last resort's one weakness, said in the manual: killed between its deletions and
    /// its commit, the ads whose files went read as missing — until the next fetch brings them
    /// back.
    @Test(.enabled(if: SmallDisk.canMount, "mounting a small tmpfs needs root (CI runs as root)"))
    func aCrashBeforeTheLastResortsCommitLeavesAdsMissingUntilTheNextFetch() throws {
        let disk = try FullDisk { cache in
            for name in ["reserve", "index.sel", "index.json.old"] { Disk.remove(cache + "/" + name) }
        }
        let crashed = disk.prune(crashAt: "prune.deletedFirst#2")
        #expect(crashed.status == 222, "\(crashed.stderr)")
        #expect(try disk.missing().count == 2)
        let list = Adcache.run(disk.c + ["list"])
        #expect(list.stdout.components(separatedBy: " missing ").count == 3, "\(list.stdout)")
        #expect(Adcache.run(disk.c + ["verify"]).status == 65)
        Disk.remove(disk.mountPoint + "/filler")
        let fetch = Adcache.run(disk.c + ["fetch"])
        #expect(fetch.status == 0, "\(fetch.stderr)")
        #expect(try disk.missing().isEmpty)
        #expect(Adcache.run(disk.c + ["verify"]).status == 0)
    }
}
