import AdCacheKit
import Foundation
import TestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// SPEC §6 (v3): a member of a shared cache's group may replace any name in the cache by a
/// symbolic link; a more privileged user's run (root's cron, an admin's `sudo adcache
/// prune`) must never open, truncate, write or delete what the link points to.
@Suite(.serialized) struct HostileCacheTests {
    let group: gid_t = 47_021
    let member: uid_t = 47_022

    /// Every file adcache opens at the top of the cache.
    static let files = [
        "journal", "journal.folding", "journal.lock", "fetch.lock", "index.lock", "report.lock", "index.json",
        "index.json.old", "index.json.tmp",
        "index.json.old.tmp", "events.json", "events.json.tmp", "feed.signed", "feed.signed.tmp", "report.retry-after",
        "vast.documents", "vast.documents.tmp",
        "report.retry-after.tmp", "index.sel", "index.sel.tmp",
    ]

    struct Sentinels {
        let dir: TempDir
        var files: [String: [UInt8]] = [:]

        init() {
            dir = TempDir()
            chmod(dir.path, 0o755)
            for name in HostileCacheTests.files + [String(repeating: "a", count: 64) + "-1.jpg", "x.part"] {
                let bytes = Array("sentinel \(name): root:x:0:0:root:/root:/bin/bash\n".utf8)
                _ = dir.write(name, bytes)
                chmod(dir.file(name), 0o644)
                files[name] = bytes
            }
        }

        /// Every sentinel present with its bytes, and nothing added beside them.
        func check(after what: String) {
            #expect(Set(Disk.list(dir.path)) == Set(files.keys), "after \(what): \(Disk.list(dir.path))")
            for (name, bytes) in files {
                #expect(
                    FileManager.default.contents(atPath: dir.file(name)).map(Array.init) == bytes,
                    "after \(what): \(name) outside the cache was touched")
            }
        }
    }

    /// As the group member: every file name replaced by a link to its sentinel, and `assets`
    /// and `partial` by links to the sentinels' directory.
    func plant(_ cache: String, _ s: Sentinels, round: Int) -> Run {
        var script = "set -e; cd \"$0\"; "
        for name in Self.files { script += "ln -sfn '\(s.dir.file(name))' '\(name)'; " }
        for folder in ["assets", "partial"] {
            script += "if [ -d \(folder) ] && [ ! -L \(folder) ]; then mv \(folder) \(folder).moved\(round); fi; "
            script += "ln -sfn '\(s.dir.path)' \(folder); "
        }
        return Adcache.runProgramAs(member, groups: [group], "/bin/sh", ["-c", script, cache])
    }

    @Test(
        .enabled(
            if: Adcache.canSwitchUsers, "planting links as a group member needs root and setpriv (CI runs as root)"))
    func linksPlantedByAGroupMemberNeverLeadRootOutside() throws {
        let dir = TempDir()
        defer { dir.remove() }
        chmod(dir.path, 0o755)
        let cache = dir.path + "/cache"
        #expect(mkdir(cache, 0o755) == 0)
        #expect(chown(cache, 0, group) == 0 && chmod(cache, 0o2775) == 0)   // the fleet layout, no sticky bit
        let sentinels = Sentinels()
        defer { sentinels.dir.remove() }
        let jpeg = Media.jpeg()
        let server = try LoopbackServer { r in
            switch r.path {
            case "/feed.json":
                return .text(
                    200,
                    #"{"ads":[{"id":"a","url":"a.jpg","maxShows":50,"tracking":{"impression":["/imp"]}}],"reportUrl":"/pop"}"#
                )
            case "/imp", "/pop": return .text(204, "")
            default: return .file(jpeg, for: r)
            }
        }
        defer { server.stop() }
        let feed = server.url("/feed.json")
        let first = Adcache.run(["--cache-dir", cache, "fetch", feed])
        try #require(first.status == 0, "\(first.stderr)")
        // Root is told, once, that others can write the cache it works in.
        #expect(first.stderr.components(separatedBy: "the cache is writable by group").count == 2, "\(first.stderr)")
        #expect(Adcache.run(["--cache-dir", cache, "next"]).status == 0)

        let commands: [[String]] = [
            ["next"], ["next", "--peek"], ["list"], ["stats"], ["event", "click", "a"], ["report"], ["prune"],
            ["prune", "--max-size", "0"], ["fetch", feed], ["fetch"], ["next"], ["clear"],
        ]
        for (round, command) in commands.enumerated() {
            let planted = plant(cache, sentinels, round: round)
            try #require(planted.status == 0, "planting as uid \(member): \(planted.stderr)")
            let run = Adcache.run(["--cache-dir", cache] + command)
            let what = "adcache " + command.joined(separator: " ")
            // An exit code of SPEC §5, never a trap or a signal (a bare fetch: 64, the index that
            // remembered the feed was a link).
            #expect([0, 1, 64, 65, 69, 73, 74, 75].contains(run.status), "\(what): \(run.status) \(run.stderr)")
            sentinels.check(after: what)
        }

        // With the links gone, the cache works again.
        for name in Self.files + ["assets", "partial"] where Disk.isLink(cache + "/" + name) {
            Disk.remove(cache + "/" + name)
        }
        let again = Adcache.run(["--cache-dir", cache, "fetch", feed])
        #expect(again.status == 0, "\(again.stderr)")
        let next = Adcache.run(["--cache-dir", cache, "next"])
        #expect(next.status == 0 && next.stdout.hasPrefix(cache + "/assets/"), "\(next.stderr)")
        sentinels.check(after: "the last fetch")
    }

    /// SPEC §6 v4: a hard link a group member planted at a name root's run writes in place
    /// (the journal, a lock file, `events.delivered`) to a file of their own elsewhere: the
    /// file is never changed — not its bytes, not its mode (version 3 made it group-writable
    /// before it noticed the second link) — and the name is replaced.
    @Test(
        .enabled(
            if: Adcache.canSwitchUsers, "planting links as a group member needs root and setpriv (CI runs as root)"))
    func hardLinksPlantedByAGroupMemberAreNeverChanged() throws {
        let dir = TempDir()
        defer { dir.remove() }
        chmod(dir.path, 0o755)
        let cache = dir.path + "/cache"
        #expect(mkdir(cache, 0o755) == 0)
        #expect(chown(cache, 0, group) == 0 && chmod(cache, 0o2775) == 0)
        let outside = dir.path + "/member"
        #expect(mkdir(outside, 0o755) == 0 && chown(outside, member, group) == 0)
        let jpeg = Media.jpeg()
        let server = try LoopbackServer { r in
            r.path == "/feed.json"
                ? .text(200, #"{"ads":[{"id":"a","url":"a.jpg","tracking":{"impression":["/imp"]}}]}"#)
                : r.path == "/imp" ? .text(204, "") : .file(jpeg, for: r)
        }
        defer { server.stop() }
        try #require(Adcache.run(["--cache-dir", cache, "fetch", server.url("/feed.json")]).status == 0)
        let names = ["journal", "journal.lock", "index.lock", "report.lock", "events.delivered"]
        var script = "set -e; umask 022; "
        for name in names {
            script += "printf 'mine %s\\n' '\(name)' > '\(outside)/\(name)'; rm -f '\(cache)/\(name)'; "
            script += "ln '\(outside)/\(name)' '\(cache)/\(name)'; "
        }
        let planted = Adcache.runProgramAs(member, groups: [group], "/bin/sh", ["-c", script])
        try #require(planted.status == 0, "planting as uid \(member): \(planted.stderr)")
        for command in [["next"], ["event", "click", "a"], ["report"]] {
            let run = Adcache.run(["--cache-dir", cache] + command)
            #expect([0, 75].contains(run.status), "\(command): \(run.stderr)")
        }
        for name in names {
            var st = stat()
            #expect(stat(outside + "/" + name, &st) == 0)
            #expect(
                st.st_mode & 0o7777 == 0o644, "\(name) outside the cache: mode \(String(st.st_mode & 0o7777, radix: 8))"
            )
            #expect(
                (try? String(contentsOfFile: outside + "/" + name, encoding: .utf8)) == "mine \(name)\n",
                "\(name) outside the cache: its bytes")
        }
    }

    /// A fifo planted where a download resumes (`partial/<hash>.part`) or where the journal
    /// goes cannot make a run hang: nothing in the cache is opened so that it waits.
    @Test func aPlantedFifoNeverBlocksARun() throws {
        let dir = TempDir()
        defer { dir.remove() }
        let server = try LoopbackServer { r in
            r.path == "/feed.json" ? .text(200, #"[{"id":"a","url":"a.jpg"}]"#) : .file(Media.jpeg(3000), for: r)
        }
        defer { server.stop() }
        let cache = dir.path + "/cache"
        try FileManager.default.createDirectory(atPath: cache + "/partial", withIntermediateDirectories: true)
        let hash = try AdCache.sha256(Array(server.url("/a.jpg").utf8))
        #expect(mkfifo(cache + "/partial/\(hash).part", 0o644) == 0)
        #expect(mkfifo(cache + "/partial/\(hash).part.validator", 0o644) == 0)
        #expect(mkfifo(cache + "/journal", 0o644) == 0)
        for command in [["fetch", server.url("/feed.json")], ["next"], ["stats"], ["prune"]] {
            let r = runProgram("/usr/bin/timeout", ["20", Adcache.binary, "--cache-dir", cache] + command)
            #expect(r.status != 124, "\(command) hung on a fifo")
            #expect([0, 1, 75].contains(r.status), "\(command): \(r.status) \(r.stderr)")
        }
        #expect(Adcache.run(["--cache-dir", cache, "list"]).stdout.contains("ready"))
    }
}
