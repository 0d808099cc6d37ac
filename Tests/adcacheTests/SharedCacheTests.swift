import Foundation
import TestSupport
import Testing

@testable import AdCacheKit

#if canImport(Glibc)
    import Glibc
#endif

/// SPEC §3 and §9: a cache shared through a group. One user fetches, others run `next` and
/// `list` and record shows; everything adcache creates in a setgid cache directory is
/// group-readable and group-writable whatever the umask, and takes the directory's group.
@Suite(.serialized) struct SharedCacheTests {
    static let canSwitchUsers = Adcache.canSwitchUsers
    let group: gid_t = 47_011
    let fetcher: uid_t = 47_001
    let member: uid_t = 47_002
    let stranger: uid_t = 47_003

    func runAs(_ uid: uid_t, groups: [gid_t], _ args: [String]) -> Run { Adcache.runAs(uid, groups: groups, args) }

    @Test(.enabled(if: canSwitchUsers, "switching users needs root and setpriv (CI runs as root)"))
    func aFetcherAndAnAppUserShareOneCache() throws {
        let dir = TempDir()
        defer { dir.remove() }
        chmod(dir.path, 0o755)
        let cache = dir.path + "/cache"
        #expect(mkdir(cache, 0o755) == 0)
        #expect(chown(cache, 0, group) == 0 && chmod(cache, 0o2775) == 0)
        // Served over HTTP as the fetcher would be (a local feed's files would need to be
        // readable by the test's other users too).
        let jpeg = Media.jpeg()
        let server = try LoopbackServer { r in
            r.path == "/feed.json" ? .text(200, #"[{"id":"a","url":"a.jpg","maxShows":5}]"#) : .file(jpeg, for: r)
        }
        defer { server.stop() }
        let fetch = runAs(fetcher, groups: [group], ["--cache-dir", cache, "fetch", server.url("/feed.json")])
        try #require(fetch.status == 0, "\(fetch.stderr)")
        // Everything created is group-writable with the directory's group, despite umask 022.
        for path in try FileManager.default.subpathsOfDirectory(atPath: cache) {
            var st = stat()
            #expect(stat(cache + "/" + path, &st) == 0)
            #expect(st.st_gid == group, "\(path) has the group")
            #expect(
                st.st_mode & 0o060 == 0o060, "\(path) is group-readable and -writable: \(String(st.st_mode, radix: 8))")
        }
        // Another member shows and records, and lists.
        let next = runAs(member, groups: [group], ["--cache-dir", cache, "next"])
        #expect(next.status == 0 && next.stderr.isEmpty, "\(next.stderr)")
        #expect(next.stdout.hasPrefix(cache + "/assets/"))
        #expect(runAs(member, groups: [group], ["--cache-dir", cache, "list"]).stdout.contains("1/5"))
        // The fetcher fetches again over what the member wrote.
        #expect(runAs(fetcher, groups: [group], ["--cache-dir", cache, "fetch"]).status == 0)
        #expect(try CacheStore(directory: cache).load(warn: { _ in }).ads.first?.shows == 1)
        // A user outside the group: the choice, a clean warning, never a crash.
        let outside = runAs(stranger, groups: [], ["--cache-dir", cache, "next"])
        #expect(outside.status == 0, "\(outside.stderr)")
        #expect(outside.stderr.hasPrefix("adcache: warning: show not recorded: "), "\(outside.stderr)")
        // Its fetch cannot write: 73, with the way in.
        let denied = runAs(stranger, groups: [], ["--cache-dir", cache, "fetch"])
        #expect(denied.status == 73, "\(denied.stderr)")
        #expect(denied.stderr.contains("\nthe cache is shared through group"), "\(denied.stderr)")
        #expect(denied.stderr.contains("(sudo adduser "), "\(denied.stderr)")
        #expect(try CacheStore(directory: cache).load(warn: { _ in }).ads.first?.shows == 1)
    }

    /// SPEC §14: only the fetching user writes the ledger and reads the device key. A
    /// member's fold leaves the journal to the fetcher (nothing reaches the queue that the
    /// ledger lacks); the member can read the ledger and check an export.
    @Test(.enabled(if: canSwitchUsers, "switching users needs root and setpriv (CI runs as root)"))
    func aGroupMemberCannotWriteTheLedgerNorReadTheKey() throws {
        let dir = TempDir()
        defer { dir.remove() }
        chmod(dir.path, 0o755)
        let cache = dir.path + "/cache", ledgerDir = dir.path + "/lib"
        #expect(mkdir(cache, 0o755) == 0 && chown(cache, 0, group) == 0 && chmod(cache, 0o2775) == 0)
        #expect(mkdir(ledgerDir, 0o755) == 0 && chown(ledgerDir, fetcher, group) == 0)   // as postinst makes it
        let config = dir.write("adcache.conf", "ledger-dir = \(ledgerDir)\nreport-url = http://127.0.0.1:9/pop\n")
        chmod(config, 0o644)
        let jpeg = Media.jpeg()
        let server = try LoopbackServer { r in
            r.path == "/feed.json" ? .text(200, #"[{"id":"a","url":"a.jpg"}]"#) : .file(jpeg, for: r)
        }
        defer { server.stop() }
        func run(_ uid: uid_t, _ args: [String]) -> Run {
            runAs(uid, groups: [group], ["--config", config, "--cache-dir", cache] + args)
        }
        try #require(run(fetcher, ["fetch", server.url("/feed.json")]).status == 0)
        #expect(run(fetcher, ["prune"]).status == 0)
        for _ in 0..<2 { #expect(run(member, ["next"]).status == 0) }
        // The member's fold: nothing into the queue, a warning, the journal kept.
        let pruned = run(member, ["prune"])
        #expect(pruned.status == 0, "\(pruned.stderr)")
        #expect(
            pruned.stderr.contains("wait in the journal") && pruned.stderr.contains("not writable"), "\(pruned.stderr)")
        let ledger = ledgerDir + "/ledger.jsonl"
        let before = (try? String(contentsOfFile: ledger, encoding: .utf8)) ?? ""
        #expect(before.isEmpty, "the member appended nothing")
        let events = try? String(contentsOfFile: cache + "/events.json", encoding: .utf8)
        #expect(events?.contains("\"nonce\"") != true, "nothing queued that the ledger lacks")
        // The fetcher's fold takes them.
        #expect(run(fetcher, ["prune"]).status == 0)
        let lines = try String(contentsOfFile: ledger, encoding: .utf8).split(separator: "\n")
        #expect(lines.count == 4, "two shows and their impressions: \(lines)")
        let appended = Adcache.runProgramAs(member, groups: [group], "/bin/sh", ["-c", "echo '{}' >> \(ledger)"])
        #expect(appended.status != 0, "a member cannot write the ledger")
        #expect(try String(contentsOfFile: ledger, encoding: .utf8).split(separator: "\n").count == 4)
        // The key: the fetcher's alone.
        let out = dir.path + "/out"
        #expect(mkdir(out, 0o755) == 0 && chown(out, fetcher, group) == 0)
        let file = out + "/export.jsonl"
        #expect(run(fetcher, ["export", "--output", file]).status == 0)
        var st = stat()
        #expect(stat(ledgerDir + "/device.key", &st) == 0 && st.st_uid == fetcher && st.st_mode & 0o777 == 0o600)
        let read = Adcache.runProgramAs(member, groups: [group], "/bin/cat", [ledgerDir + "/device.key"])
        #expect(read.status != 0 && read.stdout.isEmpty, "a member cannot read the secret key")
        #expect(run(member, ["export", "--output", dir.path + "/mine.jsonl"]).status != 0)
        #expect(runAs(member, groups: [group], ["--config", config, "export", "--verify", file]).status == 0)
    }
}
