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
}
