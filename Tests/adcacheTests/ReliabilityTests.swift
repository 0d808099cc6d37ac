import Foundation
import TestSupport
import Testing

@testable import AdCacheKit

#if canImport(Glibc)
    import Glibc
#endif

/// SPEC §6: every guarantee, provoked.
@Suite(.serialized) struct ReliabilityTests {
    /// A server with `count` assets, each dripped slowly enough for a kill to land mid-transfer.
    /// `bump()` publishes a new version of every asset (new bytes, ETags and feed digests).
    final class SlowAssets: @unchecked Sendable {
        var server: LoopbackServer!
        let count: Int, size: Int
        private var generation = 0
        private var memo: [Int: [UInt8]] = [:]
        private let lock = NSLock()

        init(count: Int, size: Int, chunk: Int = 16_384, pause: Double = 0.02) throws {
            self.count = count
            self.size = size
            server = try LoopbackServer { [weak self] r in
                guard let self else { return .text(503, "gone") }
                let gen = self.currentGeneration
                if r.path == "/feed.json" { return .text(200, self.feed(gen), contentType: "application/json") }
                guard r.path.hasPrefix("/a/"), let i = Int(r.path.dropFirst(3)), i < count else {
                    return .text(404, "no")
                }
                var resp = LoopbackServer.Response.file(self.body(i, gen), for: r, etag: "\"g\(gen)-\(i)\"")
                resp.dripChunk = chunk
                resp.dripPause = pause
                return resp
            }
        }

        var currentGeneration: Int { lock.lock(); defer { lock.unlock() }; return generation }
        func bump() { lock.lock(); generation += 1; lock.unlock() }

        func body(_ i: Int, _ gen: Int) -> [UInt8] {
            lock.lock(); defer { lock.unlock() }
            if let b = memo[gen * 1000 + i] { return b }
            let seed = UInt8(truncatingIfNeeded: gen * 16 + i + 1)
            let b = i % 2 == 0 ? Media.jpeg(size, seed: seed) : Media.mp4(size, seed: seed)
            memo[gen * 1000 + i] = b
            return b
        }

        /// Every version of asset `i` served so far.
        func versions(_ i: Int) -> [[UInt8]] {
            (0...currentGeneration).map { body(i, $0) }
        }

        func feed(_ gen: Int) -> String {
            var ads: [String] = []
            for i in 0..<count {
                let sha = i % 3 == 0 ? #","sha256":"\#(Media.sha256(body(i, gen)))""# : ""
                ads.append(#"{"id":"ad\#(i)","url":"/a/\#(i)"\#(sha)}"#)
            }
            return "[" + ads.joined(separator: ",") + "]"
        }
    }

    /// Checks what SPEC §6 promises of a cache at rest: the index parses, every ready ad's
    /// file is complete and validated, nothing is left that could pile up.
    func checkInvariants(_ cache: String, _ assets: SlowAssets, _ context: String) throws {
        let store = CacheStore(directory: cache)
        var warnings: [String] = []
        let index = try store.load { warnings.append($0.message) }
        #expect(warnings.isEmpty, "\(context): \(warnings)")
        // A new version never replaces the committed file (it takes a new name, switched at
        // the commit): whatever the moment of the crash, a ready record's file is there, as
        // committed (SPEC §3). Version 1 left 76 of 230 such ads missing.
        for r in index.ads where r.state == .ready {
            #expect(store.filePresent(r), "\(context): \(r.id) is ready but its file is not as committed")
            let file = try #require(r.file, "\(context): ready without a file")
            let bytes = try FileIO.read(store.assetPath(file))
            #expect(Int64(bytes.count) == r.bytes, "\(context): \(r.id) size")
            #expect(Media.sha256(bytes) == r.fileSha256, "\(context): \(r.id) digest")
            let i = Int(r.url.split(separator: "/").last!)!
            #expect(assets.versions(i).contains(bytes), "\(context): \(r.id) content")
        }
        let stray = Disk.list(cache).filter {
            $0.hasPrefix("index.json.") && !["index.json.tmp", "index.json.old"].contains($0)
        }
        #expect(stray.isEmpty, "\(context): \(stray)")
        #expect(Disk.list(cache + "/partial").count <= 2 * assets.count)
    }

    func spawn(_ args: [String]) throws -> Process {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: Adcache.binary)
        p.arguments = args
        p.standardOutput = FileHandle.nullDevice
        p.standardError = FileHandle.nullDevice
        p.environment = ["PATH": "/usr/bin:/bin", "HOME": "/nonexistent"]
        try p.run()
        return p
    }

    @Test func killNineAtAnyInstantLeavesAUsableCache() throws {
        let dir = TempDir(); defer { dir.remove() }
        let cache = dir.path + "/cache"
        let assets = try SlowAssets(count: 6, size: 160_000)
        defer { assets.server.stop() }
        var kills = 0
        var i = 0
        while kills < 20 && i < 80 {
            defer { i += 1 }
            let p = try spawn([
                "--cache-dir", cache, "fetch", "--no-progress", "--parallel", "3", assets.server.url("/feed.json"),
            ])
            usleep(useconds_t(20_000 + (i * 37_000) % 700_000))   // varied moments, 20 to 720 ms in
            if p.isRunning {
                kill(p.processIdentifier, SIGKILL)
                kills += 1
            }
            p.waitUntilExit()
            try checkInvariants(cache, assets, "after kill \(i)")
            if i % 2 == 1 { assets.bump() }   // new versions now and then: more to download, more to kill
        }
        #expect(kills == 20)
        print("kill -9 of fetch: \(kills) kills in \(i) runs, cache usable after each")
        // Whether one of those kills left a download past the 64 KiB a resume distrusts
        // depends on the machine's speed: one more kill, once a download (of new versions) is
        // known to be that far along, so that the next run has one to resume.
        assets.bump()
        let p = try spawn([
            "--cache-dir", cache, "fetch", "--no-progress", "--parallel", "3", assets.server.url("/feed.json"),
        ])
        var along = false
        for _ in 0..<1_000 where p.isRunning && !along {
            let names = Disk.list(cache + "/partial")
            along = names.contains { name in
                var st = stat()
                return name.hasSuffix(".part") && names.contains(name + ".validator")
                    && stat(cache + "/partial/" + name, &st) == 0 && st.st_size > 100_000
            }
            if !along { usleep(5_000) }
        }
        kill(p.processIdentifier, SIGKILL)
        p.waitUntilExit()
        #expect(along, "a download was caught past 100 KB")
        try checkInvariants(cache, assets, "after the last kill")
        // And the next undisturbed run finishes the job, resuming what was left.
        let r = Adcache.run(["--cache-dir", cache, "fetch", "--no-progress", assets.server.url("/feed.json")])
        #expect(r.status == 0, "\(r.stderr)")
        let index = try CacheStore(directory: cache).load(warn: { _ in })
        #expect(index.ads.count == 6 && index.ads.allSatisfy { $0.state == .ready })
        try checkInvariants(cache, assets, "after the final fetch")
        let gen = assets.currentGeneration
        for r in index.ads {
            let i = Int(r.url.split(separator: "/").last!)!
            #expect(try FileIO.read(CacheStore(directory: cache).assetPath(r.file!)) == assets.body(i, gen))
        }
        #expect(assets.server.log.contains { $0.header("Range") != nil }, "some download was resumed")
    }

    /// Every ready record in the index names its file, as committed: what `list` calls ready
    /// is there (SPEC §6). Returns how many were ready.
    @discardableResult
    func checkReadyFilesPresent(_ cache: String, _ context: String) throws -> Int {
        let store = CacheStore(directory: cache)
        let index = try store.load(warn: { _ in })
        let ready = index.ads.filter { $0.state == .ready }
        for r in ready { #expect(store.filePresent(r), "\(context): \(r.id) is ready without its file") }
        return ready.count
    }

    /// A cache of `count` ready ads (ten share a file two by two), made without the network.
    func makeCache(_ cache: String, count: Int) throws {
        let store = CacheStore(directory: cache)
        try store.prepare()
        var index = CacheIndex()
        for i in 0..<count {
            var ad = FeedAd(id: "ad\(i)", url: "https://cdn.example.com/\(i < 10 ? i / 2 : i).jpg")
            ad.priority = Int64(i % 7)
            ad.expires = i % 5 == 0 ? 1_000_000_000 : nil   // every fifth has expired
            var r = AdRecord(ad: ad)
            r.state = .ready
            r.file = try AssetName.make(url: ad.url, format: .jpeg, version: "v1")
            let path = store.assetPath(r.file!)
            if !Disk.exists(path) {
                FileManager.default.createFile(atPath: path, contents: Data(Media.jpeg(4096 + i)))
            }
            let stamp = try #require(Disk.stamp(path))
            (r.bytes, r.fileMtime) = (stamp.size, stamp.mtime)
            index.ads.append(r)
        }
        try store.save(index)
    }

    /// kill -9 of `prune --max-size` and of `clear` at varied moments: after each, every ad
    /// the index calls ready has its file (version 1 left 24 of 100 without). The deletions
    /// take a millisecond or two at the end of a run, so the moment of each kill is bisected
    /// towards them: before the index changed, move later; after the last file went, move
    /// earlier. "Mid-way" counts the kills that landed after some files were deleted and
    /// before the last.
    @Test(arguments: [["prune", "--max-size", "100K"], ["clear"]])
    func killNineOfPruneOrClearNeverLeavesAReadyAdWithoutItsFile(command: [String]) throws {
        let dir = Disk.exists("/dev/shm") ? TempDir(under: "/dev/shm") : TempDir()   // fsync is not what is tested
        defer { dir.remove() }
        let cache = dir.path + "/cache"
        let assetsDir = cache + "/assets"
        let ads = 300
        try makeCache(cache, count: ads)
        let initial = Disk.list(assetsDir).count
        let started = monotonicNow()
        #expect(Adcache.run(["--cache-dir", cache] + command).status == 0)
        let duration = monotonicNow() - started
        let final = Disk.list(assetsDir).count
        var (early, late) = (0.0, duration * 1.5)
        var kills = 0
        var midway = 0
        var runs = 0
        while runs < 24 || (midway < 2 && runs < 80) {   // until the window was hit twice
            let i = runs
            runs += 1
            try makeCache(cache, count: ads)
            let p = try spawn(["--cache-dir", cache] + command)
            let moment = (early + late) / 2
            usleep(useconds_t(moment * 1_000_000))
            if p.isRunning {
                kill(p.processIdentifier, SIGKILL)
                kills += 1
            }
            p.waitUntilExit()
            let left = Disk.list(assetsDir).count
            if left >= initial {
                early = moment   // nothing deleted yet
            } else if left <= final {
                late = moment   // all done
            } else {
                midway += 1
                (early, late) = (moment * 0.97, moment * 1.03)
            }
            if late - early < 0.0005 { (early, late) = (max(0, early - 0.002), late + 0.002) }
            try checkReadyFilesPresent(cache, "\(command[0]) killed in run \(i)")
            // What a crash leaves is orphans, which the next prune sweeps.
            #expect(Adcache.run(["--cache-dir", cache, "prune"]).status == 0)
            try checkReadyFilesPresent(cache, "prune after run \(i)")
        }
        print(
            "kill -9 of \(command[0]): \(kills) kills in \(runs) runs (undisturbed: \(Int(duration * 1000)) ms), \(midway) mid-way through the deletions; every ready ad kept its file"
        )
    }

    /// `prune` while fetches run: a fetch never loses a download it is about to commit. Each
    /// round publishes new versions (new files moved into assets/ before the commit), starts
    /// a prune of a large index and the fetch together, then prunes in a loop while the fetch
    /// runs. The window is hit when a prune runs while such an uncommitted file is there.
    @Test func pruneDuringFetchNeverLosesADownload() throws {
        let dir = TempDir()
        defer { dir.remove() }
        let cache = dir.path + "/cache"
        let assets = try SlowAssets(count: 6, size: 60_000, chunk: 30_000, pause: 0.01)
        defer { assets.server.stop() }
        let store = CacheStore(directory: cache)
        #expect(Adcache.run(["--cache-dir", cache, "fetch", assets.server.url("/feed.json")]).status == 0)
        var windowsHit = 0
        var prunes = 0
        var fetchesRefused = 0
        let rounds = 12
        for round in 0..<rounds {
            assets.bump()
            let first = try spawn(["--cache-dir", cache, "prune"])
            let fetch = try spawn(["--cache-dir", cache, "fetch", "--no-progress", assets.server.url("/feed.json")])
            first.waitUntilExit()
            while fetch.isRunning {
                // An uncommitted download: in assets/, named by no record.
                let named = Set((try? store.load(warn: { _ in }))?.ads.compactMap(\.file) ?? [])
                let pending = Disk.list(store.assetsDirectory).contains { !named.contains($0) }
                _ = Adcache.run(["--cache-dir", cache, "prune"])
                if pending && fetch.isRunning { windowsHit += 1 }
                prunes += 1
            }
            fetch.waitUntilExit()
            if fetch.terminationStatus == 75 {   // the first prune held the fetch lock
                fetchesRefused += 1
                continue
            }
            #expect(fetch.terminationStatus == 0, "round \(round)")
            let ready = try checkReadyFilesPresent(cache, "after round \(round)")
            #expect(ready == 6, "round \(round): every ad ready with its new version")
        }
        print(
            "prune during fetch: \(rounds) rounds, \(prunes) prunes while a fetch ran, \(windowsHit) of them with a download waiting for its commit; \(fetchesRefused) fetches found a prune holding the fetch lock (exit 75)"
        )
    }

    /// SIGINT and SIGTERM: transfers stop, partial files are kept, what finished is
    /// committed, one line says so, and the exit code is 130 or 143 (version 1: silent 130).
    @Test(arguments: [(SIGINT, Int32(130)), (SIGTERM, Int32(143))])
    func aSignalStopsTheFetchKeepingWhatFinished(sig: Int32, code: Int32) throws {
        let dir = TempDir()
        defer { dir.remove() }
        let cache = dir.path + "/cache"
        let quick = Media.jpeg(2000)
        let slow = Media.mp4(400_000)
        let server = try LoopbackServer { r in
            switch r.path {
            case "/feed.json":
                return .text(
                    200, #"[{"id":"quick","url":"q.jpg"},{"id":"s1","url":"s1.mp4"},{"id":"s2","url":"s2.mp4"}]"#)
            case "/q.jpg": return .file(quick, for: r, etag: "\"q\"")
            default:
                var resp = LoopbackServer.Response.file(slow, for: r, etag: "\"s\"")
                resp.dripChunk = 50_000
                resp.dripPause = 0.5   // four seconds each
                return resp
            }
        }
        defer { server.stop() }
        let p = Process()
        p.executableURL = URL(fileURLWithPath: Adcache.binary)
        p.arguments = ["--cache-dir", cache, "fetch", "--no-progress", server.url("/feed.json")]
        let err = Pipe()
        p.standardError = err
        p.standardOutput = FileHandle.nullDevice
        try p.run()
        // The quick asset is in within a second; the slow ones take four.
        usleep(1_200_000)
        kill(p.processIdentifier, sig)
        p.waitUntilExit()
        let stderr = String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        #expect(p.terminationStatus == code, "\(stderr)")
        #expect(stderr == "adcache: interrupted: 2 downloads kept for the next run\n", "\(stderr)")
        let index = try CacheStore(directory: cache).load(warn: { _ in })
        #expect(index.ads.first { $0.id == "quick" }?.state == .ready, "what finished is committed")
        #expect(index.ads.filter { $0.state == .pending }.count == 2)
        // The next run resumes them.
        let again = Adcache.run(["--cache-dir", cache, "fetch", server.url("/feed.json")])
        #expect(again.status == 0, "\(again.stderr)")
        #expect(again.stdout == "3 ads: 3 ready (2 resumed, 1 unchanged)\n")
    }

    @Test func aPassedDeadlineWarnsEvenWhenQuiet() throws {
        let dir = TempDir()
        defer { dir.remove() }
        let slow = Media.mp4(400_000)
        let server = try LoopbackServer { r in
            if r.path == "/feed.json" { return .text(200, #"[{"id":"s","url":"s.mp4"}]"#) }
            return .slowFile(slow, for: r, etag: "\"s\"")
        }
        defer { server.stop() }
        let r = Adcache.run([
            "--cache-dir", dir.path + "/cache", "fetch", "-q", "--deadline", "1", server.url("/feed.json"),
        ])
        #expect(r.status == 75)
        #expect(r.stdout.isEmpty)
        #expect(r.stderr == "adcache: warning: the deadline passed: 1 download kept for the next run\n", "\(r.stderr)")
    }

    @Test func showsRecordedDuringAFetchAreNeverLost() throws {
        let dir = TempDir(); defer { dir.remove() }
        let cache = dir.path + "/cache"
        let assets = try SlowAssets(count: 4, size: 300_000, chunk: 8192, pause: 0.03)
        defer { assets.server.stop() }
        // A first fetch makes ads ready.
        #expect(Adcache.run(["--cache-dir", cache, "fetch", assets.server.url("/feed.json")]).status == 0)
        // Invalidate the cached files' validators so the next fetch downloads everything again, slowly.
        let store = CacheStore(directory: cache)
        try store.update(warn: { _ in }) { index in
            for i in index.ads.indices {
                index.ads[i].etag = nil; index.ads[i].lastModified = nil; index.ads[i].sha256 = nil
            }
        }
        let fetch = try spawn([
            "--cache-dir", cache, "fetch", "--no-progress", "--parallel", "1", assets.server.url("/feed.json"),
        ])
        var shown = 0, during = 0, busy = 0
        while fetch.isRunning || during < 5 {
            let r = Adcache.run(["--cache-dir", cache, "next"])
            if r.status == 0 { shown += 1; if fetch.isRunning { during += 1 } }
            if r.status == 75 { busy += 1 }
            if !fetch.isRunning && during >= 5 { break }
            if shown > 400 { break }
        }
        fetch.waitUntilExit()
        #expect(fetch.terminationStatus == 0)
        #expect(during >= 5, "next ran while the fetch ran")
        #expect(busy == 0, "next never waits on a fetch's network I/O")
        let total = try store.load(warn: { _ in }).ads.reduce(0) { $0 + $1.shows }
        #expect(total == Int64(shown))
        print("next during fetch: \(shown) shows recorded (\(during) while the fetch ran), \(total) counted")
    }

    /// A launch never fails for want of disk: on a full disk and on a read-only cache,
    /// `next` prints its choice, warns `show not recorded`, and exits 0 (version 1: 74).
    @Test(.enabled(if: SmallDisk.canMount, "mounting a small tmpfs needs root (CI runs as root)"))
    func nextOnAFullOrReadOnlyCacheStillShowsItsChoice() throws {
        let dir = TempDir()
        defer { dir.remove() }
        let mountPoint = dir.path + "/small"
        try SmallDisk.mount(mountPoint, size: "1m")
        defer { SmallDisk.unmount(mountPoint) }
        let cache = mountPoint + "/cache"
        #expect(Adcache.run(["--cache-dir", cache, "fetch", packageRoot + "/Examples/feed.json"]).status == 0)
        let store = CacheStore(directory: cache)
        let shows = { try store.load(warn: { _ in }).ads.reduce(Int64(0)) { $0 + $1.shows } }

        // Full: a filler takes every free block.
        _ = runProgram("/bin/dd", ["if=/dev/zero", "of=\(mountPoint)/filler", "bs=4096"])
        let full = Adcache.run(["--cache-dir", cache, "next"])
        #expect(full.status == 0, "\(full.stderr)")
        #expect(full.stdout.hasPrefix(cache + "/assets/"))
        #expect(full.stderr.hasPrefix("adcache: warning: show not recorded: "), "\(full.stderr)")
        #expect(full.stderr.contains("No space left on device"))
        #expect(try shows() == 0)
        Disk.remove(mountPoint + "/filler")

        // Read-only.
        #expect(SmallDisk.remount(mountPoint, readOnly: true))
        let ro = Adcache.run(["--cache-dir", cache, "next", "--json"])
        #expect(SmallDisk.remount(mountPoint, readOnly: false))
        #expect(ro.status == 0, "\(ro.stderr)")
        #expect(ro.stdout.contains(#""remainingShows""#))
        #expect(ro.stderr.hasPrefix("adcache: warning: show not recorded: "), "\(ro.stderr)")
        #expect(try shows() == 0)

        // Writable again: the show is recorded.
        #expect(Adcache.run(["--cache-dir", cache, "next"]).stderr.isEmpty)
        #expect(try shows() == 1)
    }

    /// SPEC §6 (v3): `prune` frees space on a full disk. What needs no write (superseded
    /// files past their grace) goes first; the fold it cannot write waits, with a warning;
    /// no show is lost. (Version 2 exited 74 and freed nothing: it folded first.)
    @Test(.enabled(if: SmallDisk.canMount, "mounting a small tmpfs needs root (CI runs as root)"))
    func pruneFreesSpaceOnAFullDisk() throws {
        let dir = TempDir()
        defer { dir.remove() }
        let mountPoint = dir.path + "/small"
        try SmallDisk.mount(mountPoint, size: "1m")
        defer { SmallDisk.unmount(mountPoint) }
        let cache = mountPoint + "/cache"
        let c = ["--cache-dir", cache]
        for n in 1...3 { _ = dir.write("\(n).jpg", Media.jpeg(60_000, seed: UInt8(n))) }
        let feed = dir.write("feed.json", #"[{"id":"a","url":"1.jpg"},{"id":"b","url":"2.jpg"}]"#)
        #expect(Adcache.run(c + ["fetch", feed]).status == 0)
        _ = dir.write("feed.json", #"[{"id":"a","url":"3.jpg"},{"id":"b","url":"2.jpg"}]"#)
        #expect(Adcache.run(c + ["fetch", feed]).status == 0)   // a's first file is superseded
        for _ in 0..<3 { #expect(Adcache.run(c + ["next"]).status == 0) }   // shows in the journal
        let old = timespec(tv_sec: Int(Date().timeIntervalSince1970) - 3600, tv_nsec: 0)
        let current = Set(try CacheStore(directory: cache).load(warn: { _ in }).ads.compactMap(\.file))
        for name in Disk.list(cache + "/assets") where !current.contains(name) {
            var times = [old, old]
            utimensat(AT_FDCWD, cache + "/assets/" + name, &times, 0)
        }
        _ = runProgram("/bin/dd", ["if=/dev/zero", "of=\(mountPoint)/filler", "bs=4096"])
        func free() -> UInt64 {
            var s = statvfs()
            return statvfs(mountPoint, &s) == 0 ? UInt64(s.f_bavail) * UInt64(s.f_frsize) : 0
        }
        #expect(free() < 8192, "the disk is full")
        let prune = Adcache.run(c + ["prune", "--max-size", "0"])
        #expect(prune.status == 0, "\(prune.stderr)")
        #expect(free() >= 60_000, "space was freed: \(free())")
        Disk.remove(mountPoint + "/filler")
        let stats = Adcache.run(c + ["stats", "--json"])
        #expect(stats.stdout.contains(#""shows":2"#) || stats.stdout.contains(#""shows": 2"#), "\(stats.stdout)")
        #expect(Adcache.run(c + ["prune"]).status == 0)
        #expect(!Disk.exists(cache + "/journal") || Disk.size(cache + "/journal") == 0, "folded once there was room")
    }

    @Test(.enabled(if: SmallDisk.canMount, "mounting a small tmpfs needs root (CI runs as root)"))
    func diskFullIs74AndKeepsTheOldCache() throws {
        let dir = TempDir(); defer { dir.remove() }
        let mountPoint = dir.path + "/small"
        try SmallDisk.mount(mountPoint, size: "512k")
        defer { SmallDisk.unmount(mountPoint) }
        let cache = mountPoint + "/cache"
        let small = Media.jpeg(50_000), big = Media.mp4(2_000_000)
        let withBig = Flag()
        let server = try LoopbackServer { r in
            switch r.path {
            case "/feed.json":
                return .text(
                    200,
                    withBig.isSet
                        ? #"[{"id":"small","url":"s.jpg"},{"id":"big","url":"b.mp4"}]"#
                        : #"[{"id":"small","url":"s.jpg"}]"#)
            case "/s.jpg": return .file(small, for: r, etag: "\"s\"")
            case "/b.mp4": return .file(big, for: r, etag: "\"b\"")
            default: return .text(404, "no")
            }
        }
        defer { server.stop() }
        #expect(Adcache.run(["--cache-dir", cache, "fetch", server.url("/feed.json")]).status == 0)
        let store = CacheStore(directory: cache)
        let before = try store.load(warn: { _ in })
        let assetsBefore = Disk.list(store.assetsDirectory)
        withBig.set()
        // SPEC §6 (v3): an asset that does not fit is a transient failure of that asset (75),
        // never of the run; 74 is for the index, the journal and the queue.
        let r = Adcache.run(["--cache-dir", cache, "fetch", server.url("/feed.json")])
        #expect(r.status == 75, "\(r.stderr)")
        #expect(r.stderr.contains("did not fit on the disk") && r.stderr.contains("No space left on device"))
        #expect(!r.stderr.contains("adcache: error:"), "\(r.stderr)")
        let after = try store.load(warn: { _ in })
        #expect(after.ads.first { $0.id == "small" } == before.ads.first { $0.id == "small" })
        #expect(Disk.list(store.assetsDirectory) == assetsBefore)
        #expect(try FileIO.read(store.assetPath(assetsBefore[0])) == small)
        #expect(Disk.list(store.partialDirectory).isEmpty)
        #expect(Adcache.run(["--cache-dir", cache, "next"]).status == 0)
    }

    /// Three small ads and one that cannot fit, fetched at once: whatever the big one took
    /// from the small ones while they ran together, the run tries those again one at a
    /// time, smallest first, and commits them; the big one is transient (75).
    @Test(.enabled(if: SmallDisk.canMount, "mounting a small tmpfs needs root (CI runs as root)"))
    func aDiskTooSmallForOneAdStillTakesTheOthers() throws {
        let dir = TempDir(); defer { dir.remove() }
        let mountPoint = dir.path + "/small"
        try SmallDisk.mount(mountPoint, size: "400k")
        defer { SmallDisk.unmount(mountPoint) }
        let cache = mountPoint + "/cache"
        let smalls = (0..<3).map { Media.jpeg(70_000, seed: UInt8($0 + 1)) }
        let big = Media.mp4(3_000_000)
        let server = try LoopbackServer { r in
            switch r.path {
            case "/feed.json":
                return .text(
                    200,
                    #"[{"id":"big","url":"b.mp4"},{"id":"s0","url":"s0.jpg"},{"id":"s1","url":"s1.jpg"},{"id":"s2","url":"s2.jpg"}]"#
                )
            case "/b.mp4":   // most of the disk at once, then the rest two seconds later
                var big = LoopbackServer.Response.file(big, for: r, etag: "\"b\"")
                big.dripChunk = 380_000
                big.dripPause = 2
                return big
            case "/s0.jpg", "/s1.jpg", "/s2.jpg":   // while the big one holds that room
                var small = LoopbackServer.Response.file(smalls[Int(String(r.path.dropFirst(2).prefix(1)))!], for: r)
                small.delay = 0.5
                return small
            default: return .text(404, "no")
            }
        }
        defer { server.stop() }
        let c = ["--cache-dir", cache]
        for run in 0..<2 {
            let r = Adcache.run(c + ["fetch", "--no-report", "--parallel", "4", server.url("/feed.json")])
            #expect(r.status == 75, "run \(run): \(r.stderr)")
            #expect(r.stdout.contains("4 ads: 3 ready"), "run \(run): \(r.stdout) \(r.stderr)")
            let list = Adcache.run(c + ["list", "--json"])
            let ads = try #require(
                try JSONSerialization.jsonObject(with: Data(list.stdout.utf8)) as? [[String: Any]])
            let ready = ads.filter { $0["state"] as? String == "ready" }.compactMap { $0["id"] as? String }
            #expect(ready.sorted() == ["s0", "s1", "s2"], "run \(run): \(list.stdout)")
        }
        #expect(Disk.list(cache + "/partial").isEmpty, "no partial of the big one is left taking the space")
        #expect(server.requests(to: "/b.mp4").count == 2, "once a run: the free space cannot hold it")
    }

    /// An asset smaller than one 128 KiB chunk is written once, when its transfer ends: a
    /// full disk then fails that last write, and the fetch says so as for a big one (75,
    /// the asset not committed, no partial file left).
    @Test(.enabled(if: SmallDisk.canMount, "mounting a small tmpfs needs root (CI runs as root)"))
    func aSmallAssetThatDoesNotFitFailsAtItsOneWrite() throws {
        let dir = TempDir(); defer { dir.remove() }
        let mountPoint = dir.path + "/small"
        try SmallDisk.mount(mountPoint, size: "256k")
        defer { SmallDisk.unmount(mountPoint) }
        let cache = mountPoint + "/cache"
        let image = Media.jpeg(100_000)
        let server = try LoopbackServer { r in
            r.path == "/feed.json" ? .text(200, #"[{"id":"a","url":"a.jpg"}]"#) : .file(image, for: r)
        }
        defer { server.stop() }
        // What is left of the disk is less than the image, more than the index needs.
        try FileManager.default.createDirectory(atPath: cache, withIntermediateDirectories: true)
        let filler = [UInt8](repeating: 7, count: 256 * 1024)
        let fd = open(mountPoint + "/filler", O_WRONLY | O_CREAT, 0o644)
        _ = filler.withUnsafeBytes { write(fd, $0.baseAddress, 200 * 1024) }
        close(fd)
        let r = Adcache.run(["--cache-dir", cache, "fetch", "--retries", "0", server.url("/feed.json")])
        #expect(r.status == 75, "\(r.stderr)")
        #expect(r.stderr.contains("No space left on device"), "\(r.stderr)")
        let store = CacheStore(directory: cache)
        #expect(Disk.list(store.assetsDirectory).isEmpty)
        #expect(Disk.list(store.partialDirectory).isEmpty)
    }

    @Test func hostileIDsAndURLsNeverBecomePaths() throws {
        let dir = TempDir(); defer { dir.remove() }
        let cache = dir.path + "/sub/cache"
        let jpeg = Media.jpeg()
        let server = try LoopbackServer { r in
            if r.path == "/feed.json" {
                return .text(
                    200,
                    #"""
                    [{"id":"../../../escape","url":"/../../x.jpg"},
                     {"id":"/etc/passwd","url":"/a.jpg?name=../../../../tmp/owned.jpg"},
                     {"id":"nul\u0000byte","url":"/%2e%2e/%2e%2e/y.jpg"},
                     {"id":"local","url":"file:///etc/hostname"},
                     {"id":"js","url":"javascript:alert(1)"}]
                    """#)
            }
            return .file(jpeg, for: r)
        }
        defer { server.stop() }
        let r = Adcache.run(["--cache-dir", cache, "fetch", server.url("/feed.json")])
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stdout == "3 ads: 3 ready (3 downloaded)\n")
        #expect(r.stderr.contains("skipping ad 'local'") && r.stderr.contains("skipping ad 'js'"))
        // Only hash-named files inside the cache; nothing beside it.
        #expect(Disk.list(dir.path) == ["sub"])
        #expect(Disk.list(dir.path + "/sub") == ["cache"])
        let names = Disk.list(cache + "/assets")
        #expect(names.count == 3)
        #expect(
            names.allSatisfy { AssetName.isValid($0) && $0.hasSuffix(".jpg") && $0.prefix(64).allSatisfy(\.isHexDigit) }
        )
        let list = Adcache.run(["--cache-dir", cache, "list", "--json"])
        #expect(list.stdout.contains(#""id": "nul\u0000byte""#))
    }

    /// The defect found in the field: run as root, `prune` deleted /etc/passwd because a
    /// record's "file" named it. Here the victim is a file beside the cache.
    @Test func anIndexNamingAPathOutsideTheCacheDeletesNothing() throws {
        let dir = TempDir(); defer { dir.remove() }
        let cache = dir.path + "/cache"
        let victim = dir.write("passwd", "root:x:0:0:root:/root:/bin/bash\n")
        #expect(Adcache.run(["--cache-dir", cache, "fetch", packageRoot + "/Examples/feed.json"]).status == 0)
        var text = try String(contentsOfFile: cache + "/index.json", encoding: .utf8)
        let names = text.components(separatedBy: "\"file\":\"").dropFirst().map { String($0.prefix { $0 != "\"" }) }
        #expect(names.count == 3)
        let hostile = ["../../../../../../../../" + victim, victim, "../../passwd"]
        for (name, bad) in zip(names, hostile) {
            text = text.replacingOccurrences(
                of: "\"file\":\"\(name)\"", with: "\"file\":\"\(bad.replacingOccurrences(of: "/", with: "\\/"))\"")
        }
        FileManager.default.createFile(atPath: cache + "/index.json", contents: Data(text.utf8))

        let list = Adcache.run(["--cache-dir", cache, "list", "--json"])
        #expect(list.status == 0)
        #expect(list.stderr.components(separatedBy: "loses its file").count == 4, "\(list.stderr)")
        #expect(!list.stdout.contains(victim))
        #expect(Adcache.run(["--cache-dir", cache, "next"]).status == 1, "no ad has a file it may use")
        let prune = Adcache.run(["--cache-dir", cache, "prune", "--max-size", "0"])
        #expect(prune.status == 0, "\(prune.stderr)")
        #expect(Disk.exists(victim))
        #expect(try String(contentsOfFile: victim, encoding: .utf8).hasPrefix("root:"))
        // The asset files are orphans now: they stay for the grace a printed path has (ten
        // minutes), then go; a fetch gets the ads back.
        #expect(Disk.list(cache + "/assets").count == 3)
        let old = timespec(tv_sec: Int(Date().timeIntervalSince1970) - 3600, tv_nsec: 0)
        for name in Disk.list(cache + "/assets") {
            var times = [old, old]
            utimensat(AT_FDCWD, cache + "/assets/" + name, &times, 0)
        }
        #expect(Adcache.run(["--cache-dir", cache, "prune"]).status == 0)
        #expect(Disk.list(cache + "/assets").isEmpty)
        #expect(
            Adcache.run(["--cache-dir", cache, "fetch", packageRoot + "/Examples/feed.json"]).stdout
                == "3 ads: 3 ready (3 downloaded)\n")
    }

    @Test func garbageAndTruncatedIndexAreRecovered() throws {
        let dir = TempDir(); defer { dir.remove() }
        let cache = dir.path + "/cache"
        let feed = packageRoot + "/Examples/feed.json"
        #expect(Adcache.run(["--cache-dir", cache, "fetch", feed]).status == 0)
        let full = try FileIO.read(cache + "/index.json")
        for damaged in [Array(full.prefix(full.count / 2)), Array("garbage\u{0}\u{1}".utf8), []] {
            FileManager.default.createFile(atPath: cache + "/index.json", contents: Data(damaged))
            let next = Adcache.run(["--cache-dir", cache, "next"])
            #expect(next.status == 1, "nothing known: nothing shown, no crash")
            #expect(next.stderr.hasPrefix("adcache: warning: index.json could not be read"))
            let fetch = Adcache.run(["--cache-dir", cache, "fetch"].dropLast(0) + [feed])
            #expect(fetch.status == 0)
            #expect(fetch.stdout == "3 ads: 3 ready (3 unchanged)\n", "rebuilt from the files already there")
        }
        #expect(Disk.list(cache).filter { $0.hasPrefix("index.json.corrupt-") }.count >= 1)
    }
}

final class Flag: @unchecked Sendable {
    private var value = false
    private let lock = NSLock()
    var isSet: Bool { lock.lock(); defer { lock.unlock() }; return value }
    func set() { lock.lock(); value = true; lock.unlock() }
}

/// A tiny tmpfs for full-disk and read-only tests (root only).
enum SmallDisk {
    /// Root, and a tmpfs mounts here (a container may forbid it).
    static let canMount: Bool = {
        guard getuid() == 0 else { return false }
        let probe = TempDir()
        defer { probe.remove() }
        guard (try? mount(probe.path, size: "64k")) != nil else { return false }
        unmount(probe.path)
        return true
    }()

    static func mount(_ point: String, size: String, options: String = "") throws {
        try FileManager.default.createDirectory(atPath: point, withIntermediateDirectories: true)
        let r = runProgram("/bin/mount", ["-t", "tmpfs", "-o", "size=\(size)" + options, "tmpfs", point])
        guard r.status == 0 else {
            throw CocoaError(.fileWriteUnknown, userInfo: [NSLocalizedDescriptionKey: r.stderr])
        }
    }

    static func remount(_ point: String, readOnly: Bool) -> Bool {
        runProgram("/bin/mount", ["-o", readOnly ? "remount,ro" : "remount,rw", point]).status == 0
    }

    static func unmount(_ point: String) {
        _ = runProgram("/bin/umount", [point])
    }
}
