import Foundation
import TestSupport
import Testing

@testable import AdCacheKit

/// The package root, to reach Examples/ and man/.
let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    .deletingLastPathComponent().path

/// An isolated cache for one end-to-end test.
struct Sandbox {
    let dir = TempDir()
    var cache: String { dir.path + "/cache" }

    func run(_ args: [String], env: [String: String] = [:]) -> Run {
        Adcache.call(["--cache-dir", cache] + args, environment: env)
    }

    /// The same through the built binary (for what depends on the process: TZ, signals).
    func runBinary(_ args: [String], env: [String: String] = [:]) -> Run {
        Adcache.run(["--cache-dir", cache] + args, environment: env)
    }

    func remove() { dir.remove() }
}

func jsonObject(_ text: String) throws -> [String: Any] {
    try #require(try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any])
}

@Suite struct UsageTests {
    @Test func helpIsTheSameEverywhereAndGoesToStdout() {
        let a = Adcache.run(["help", "fetch"]), b = Adcache.run(["fetch", "--help"]), c = Adcache.run(["fetch", "-h"])
        #expect(a.status == 0 && b.status == 0 && c.status == 0)
        #expect(a.stdout == b.stdout && b.stdout == c.stdout)
        #expect(a.stderr.isEmpty)
        for section in [
            "OVERVIEW:", "USAGE: adcache fetch", "ARGUMENTS:", "OPTIONS:", "--parallel <n>", "--cache-dir <dir>",
        ] {
            #expect(a.stdout.contains(section), "\(section)")
        }
        let top = Adcache.run(["--help"])
        #expect(top.status == 0)
        #expect(top.stdout.contains("SUBCOMMANDS:"))
        for name in ["fetch", "next", "prune", "list", "clear", "help"] { #expect(top.stdout.contains("  \(name) ")) }
    }

    @Test func version() {
        let r = Adcache.run(["--version"])
        #expect(r.status == 0)
        #expect(r.stdout.hasPrefix("adcache \(AdCacheVersion.string)"))
    }

    @Test(
        arguments: [
            (["fecth"], "unknown command 'fecth'", "did you mean 'fetch'?"),
            (["fetch", "--paralel", "3"], "unknown option '--paralel' for 'fetch'", "did you mean '--parallel'?"),
            (["next", "--peak"], "unknown option '--peak' for 'next'", "did you mean '--peek'?"),
            (
                ["fetch", "--parallel", "0", "x"], "option '--parallel' needs a whole number from 1 to 64 (got '0')",
                "see 'adcache fetch --help'"
            ),
            (
                ["prune", "--max-size", "10X"],
                "option '--max-size' needs a size such as 500K, 100M or 2G, at most 8589934591G (got '10X')",
                "see 'adcache prune --help'"
            ),
            (
                ["next", "--at", "2027-03-01T00:00:00"], "option '--at' needs an RFC 3339 time with a zone",
                "see 'adcache next --help'"
            ),
            (
                ["next", "--type", "audio"], "option '--type' needs 'image' or 'video' (got 'audio')",
                "see 'adcache next --help'"
            ),
            (
                ["fetch", "--header", "NoColon", "x"], "option '--header' needs 'Name: value' (got 'NoColon')",
                "see 'adcache fetch --help'"
            ),
            (["fetch", "--timeout"], "option '--timeout' needs a value <sec>", "see 'adcache fetch --help'"),
            (["list", "extra"], "unexpected argument 'extra'", "see 'adcache list --help'"),
            ([], "no command given", "see 'adcache --help'"),
            (
                ["fetch", "gopher://x/feed"], "FEED 'gopher://x/feed': only http, https and file: feeds are supported",
                nil
            ),
        ] as [([String], String, String?)])
    func usageErrorsAreOneLinePlusAHint(args: [String], error: String, hint: String?) {
        let s = Sandbox(); defer { s.remove() }
        let r = s.run(args)
        #expect(r.status == 64)
        #expect(r.stdout.isEmpty)
        let lines = r.stderr.split(separator: "\n", omittingEmptySubsequences: false).dropLast().map(String.init)
        #expect(lines.first?.hasPrefix("adcache: error: \(error)") == true, "\(r.stderr)")
        #expect(lines.count == (hint == nil ? 1 : 2), "\(r.stderr)")
        if let hint { #expect(lines.last == hint) }
        #expect(!Disk.exists(s.cache))   // bad input changes nothing
    }

    @Test func optionsMayComeBeforeOrAfterTheCommandAndWithEquals() throws {
        let s = Sandbox(); defer { s.remove() }
        let r1 = Adcache.call(["-q", "--cache-dir=\(s.cache)", "fetch", packageRoot + "/Examples/feed.json"])
        #expect(r1.status == 0 && r1.stdout.isEmpty, "\(r1.stderr)")
        let r2 = Adcache.call(["list", "--cache-dir", s.cache, "--json"])
        #expect(try JSONSerialization.jsonObject(with: Data(r2.stdout.utf8)) is [Any])
    }
}

@Suite struct EndToEndTests {
    /// Serves Examples/ over HTTP, as an ad server would.
    func exampleServer() throws -> LoopbackServer {
        try LoopbackServer { r in
            let path = packageRoot + "/Examples" + r.path
            guard !r.path.contains(".."), let data = FileManager.default.contents(atPath: path) else {
                return .text(404, "no")
            }
            return .file(Array(data), for: r, etag: "\"\(data.count)\"")
        }
    }

    @Test func fetchListNextOnTheExampleFeedOverHTTP() throws {
        let s = Sandbox(); defer { s.remove() }
        let server = try exampleServer(); defer { server.stop() }
        let fetch = s.run(["fetch", "--no-progress", server.url("/feed.json")])
        #expect(fetch.status == 0, "\(fetch.stderr)")
        #expect(fetch.stdout == "3 ads: 3 ready (3 downloaded)\n")
        #expect(fetch.stderr.isEmpty)

        let list = s.run(["list"])
        #expect(list.status == 0)
        #expect(
            list.lines.first?.split(separator: " ").map(String.init) == [
                "ID", "TYPE", "STATE", "SHOWS", "STARTS", "EXPIRES", "SIZE",
            ])
        #expect(list.lines.count == 4)
        #expect(list.lines.filter { $0.contains(" ready ") }.count == 3)

        let next = s.run(["next", "--json"])
        #expect(next.status == 0)
        let obj = try jsonObject(next.stdout)
        #expect(
            Set(obj.keys) == [
                "id", "path", "type", "placement", "duration", "skipOffset", "startQueued", "clickUrl",
                "remainingShows",
                "expires", "priority", "meta", "fallback", "show", "progress",
            ])
        #expect(obj["skipOffset"] is NSNull, "null for an ad that is not a VAST video")
        #expect(obj["id"] as? String == "spring-sale")
        #expect(obj["remainingShows"] as? Int == 2)
        #expect(obj["duration"] as? Int == 4)
        #expect((obj["meta"] as? [String: Any])?["title"] as? String == "Spring sale")
        let path = try #require(obj["path"] as? String)
        #expect(path.hasPrefix(s.cache + "/assets/"))
        #expect(
            FileManager.default.contents(atPath: path)
                == FileManager.default.contents(atPath: packageRoot + "/Examples/assets/spring.jpg"))

        let plain = s.run(["next"])
        #expect(plain.status == 0)
        #expect(plain.lines.count == 1 && plain.lines[0].hasPrefix("/"))

        let listJSON = s.run(["list", "--json"])
        let entries = try #require(
            try JSONSerialization.jsonObject(with: Data(listJSON.stdout.utf8)) as? [[String: Any]])
        #expect(entries.count == 3)
        for e in entries {
            #expect(
                Set(e.keys) == [
                    "id", "url", "type", "placement", "state", "shows", "maxShows", "priority", "start", "expires",
                    "lastShown", "bytes", "path", "error",
                ])
        }
        #expect(entries.first?["shows"] as? Int == 2)

        // Nothing changed: a second fetch transfers no asset body.
        let again = s.run(["fetch", "--no-progress"])
        #expect(again.stdout == "3 ads: 3 ready (3 unchanged)\n")
        // spring.jpg has a sha256 that matches: not asked again.
        #expect(server.log.filter { $0.path.hasPrefix("/assets/") }.count == 3 + 2)
    }

    @Test func exampleFeedFromALocalPath() throws {
        let s = Sandbox(); defer { s.remove() }
        let r = s.run(["fetch", packageRoot + "/Examples/feed.json"])
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stdout == "3 ads: 3 ready (3 downloaded)\n")
        let again = s.run(["fetch"])
        #expect(again.stdout == "3 ads: 3 ready (3 unchanged)\n")
    }

    /// `fetch -` reads the feed from standard input; a relative asset URL has nothing to be
    /// resolved against and is skipped with a warning; a bare `fetch` does not read stdin again.
    @Test func aFeedFromStandardInput() throws {
        let s = Sandbox(); defer { s.remove() }
        let jpeg = Media.jpeg()
        let server = try LoopbackServer { r in .file(jpeg, for: r) }
        defer { server.stop() }
        let feed = #"[{"id":"abs","url":"\#(server.url("/a.jpg"))"},{"id":"rel","url":"b.jpg"}]"#
        let r = Adcache.call(["--cache-dir", s.cache, "fetch", "-"], stdin: Array(feed.utf8))
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stdout == "1 ad: 1 ready (1 downloaded)\n")
        #expect(
            r.stderr
                == "adcache: warning: skipping ad 'rel': its \"url\" is relative, and a feed read from standard input has no URL to resolve it against\n"
        )
        let again = s.run(["fetch"])
        #expect(again.status == 64, "nothing remembered to fetch again")
    }

    /// After `fetch -`, the remote feed fetched before answers 304 to its old validators: that
    /// must not keep standard input's ads (the remembered feed forgets its validators).
    @Test func aRemoteFeedAfterStandardInputIsReadWhole() throws {
        let s = Sandbox(); defer { s.remove() }
        let jpeg = Media.jpeg()
        let server = try LoopbackServer { r in
            guard r.path == "/feed.json" else { return .file(jpeg, for: r) }
            if r.header("If-None-Match") == "\"f1\"" { return LoopbackServer.Response(status: 304) }
            return LoopbackServer.Response(
                status: 200, headers: [("Content-Type", "application/json"), ("ETag", "\"f1\"")],
                body: Array(#"[{"id":"remote","url":"r.jpg"}]"#.utf8))
        }
        defer { server.stop() }
        #expect(s.run(["fetch", server.url("/feed.json")]).status == 0)
        let stdin = #"[{"id":"piped","url":"\#(server.url("/p.jpg"))"}]"#
        #expect(Adcache.call(["--cache-dir", s.cache, "fetch", "-"], stdin: Array(stdin.utf8)).status == 0)
        let bare = s.run(["fetch"])
        #expect(bare.status == 0, "\(bare.stderr)")
        let json = s.run(["list", "--json"]).stdout
        let ads = try #require(try JSONSerialization.jsonObject(with: Data(json.utf8)) as? [[String: Any]])
        let states = Dictionary(
            uniqueKeysWithValues: ads.map { ($0["id"] as? String ?? "", $0["state"] as? String ?? "") })
        #expect(states["remote"] == "ready", "\(states)")
        #expect(states["piped"] == "withdrawn", "\(states)")
    }

    @Test func nothingToShowIsExit1UnlessAFallbackIsGiven() throws {
        let s = Sandbox(); defer { s.remove() }
        let r = s.run(["next"])
        #expect(r.status == 1 && r.stdout.isEmpty && r.stderr.isEmpty)
        let image = s.dir.write("default.png", Media.png())
        // A relative FILE is made absolute against the working directory.
        let f = Adcache.run(["--cache-dir", s.cache, "next", "--fallback", "default.png"], cwd: s.dir.path)
        #expect(f.status == 0)
        #expect(f.stdout == image + "\n")
        let j = s.run(["next", "--json", "--fallback", image])
        let obj = try jsonObject(j.stdout)
        #expect(obj["id"] is NSNull)
        #expect(obj["fallback"] as? Bool == true)
        #expect(obj["path"] as? String == image)
        // A fallback that does not exist is not printed: a warning, then as if none was given.
        let missing = s.run(["next", "--fallback", "/opt/app/missing.png"])
        #expect(missing.status == 1 && missing.stdout.isEmpty)
        #expect(
            missing.stderr == "adcache: warning: the fallback /opt/app/missing.png does not exist; not showing it\n")
    }

    @Test func cooldownShowsNothingEvenWithAFallback() throws {
        let s = Sandbox(); defer { s.remove() }
        #expect(s.run(["fetch", packageRoot + "/Examples/feed.json"]).status == 0)
        #expect(s.run(["next", "--at", "2027-01-01T00:00:00Z"]).status == 0)
        let quick = s.run([
            "next", "--cooldown", "60", "--fallback", "/opt/default.png", "--at", "2027-01-01T00:00:30Z",
        ])
        #expect(quick.status == 1 && quick.stdout.isEmpty)
        let later = s.run([
            "next", "--cooldown", "60", "--fallback", "/opt/default.png", "--at", "2027-01-01T00:01:30Z",
        ])
        #expect(later.status == 0)
        #expect(later.stdout.hasPrefix(s.cache + "/assets/"))
    }

    @Test func badFeedIs65AndChangesNothing() throws {
        let s = Sandbox(); defer { s.remove() }
        #expect(s.run(["fetch", packageRoot + "/Examples/feed.json"]).status == 0)
        let before = try Data(contentsOf: URL(fileURLWithPath: s.cache + "/index.json"))
        let bad = s.dir.write("bad.json", "<html>Sign in to the Wi-Fi</html>")
        let r = s.run(["fetch", bad])
        #expect(r.status == 65)
        #expect(r.stdout.isEmpty)
        // Markup is read as XML (VAST, SPEC §10): a captive portal's page is not a VAST document.
        #expect(
            r.stderr.hasPrefix(
                "adcache: error: the feed \(bad) is not a valid feed: its root element is <html>, not <VAST>"))
        #expect(r.stderr.split(separator: "\n").count == 1)
        #expect(try Data(contentsOf: URL(fileURLWithPath: s.cache + "/index.json")) == before)
    }

    @Test func unreachableFeedIs69() throws {
        let s = Sandbox(); defer { s.remove() }
        let server = try LoopbackServer { _ in .text(200, "") }
        let url = server.url("/feed.json")
        server.stop()
        let r = s.run(["fetch", "--retries", "0", url])
        #expect(r.status == 69)
        #expect(r.stderr.hasPrefix("adcache: error: cannot fetch the feed \(url): could not connect"))
        let missing = s.run(["fetch", s.dir.path + "/nope.json"])
        #expect(missing.status == 69)
    }

    /// SPEC v2 §5: 65 when the only failures are for good (a 404 will not mend itself: cron
    /// and systemd must not hide it as "try later"), 75 when any is transient.
    @Test(arguments: [(["gone"], 65), (["busy"], 75), (["gone", "busy"], 75)] as [([String], Int32)])
    func failingAssetsExitBy65Or75(failing: [String], code: Int32) throws {
        let s = Sandbox(); defer { s.remove() }
        let jpeg = Media.jpeg()
        let feed = (["ok"] + failing).map { #"{"id":"\#($0)","url":"\#($0).jpg"}"# }.joined(separator: ",")
        let server = try LoopbackServer { r in
            switch r.path {
            case "/feed.json": return .text(200, "[\(feed)]")
            case "/ok.jpg": return .file(jpeg, for: r)
            case "/busy.jpg": return .text(503, "later")
            default: return .text(404, "no")
            }
        }
        defer { server.stop() }
        let r = s.run(["fetch", "--retries", "0", server.url("/feed.json")])
        #expect(r.status == code)
        #expect(r.stdout == "\(1 + failing.count) ads: 1 ready (1 downloaded), \(failing.count) failed\n")
        if failing.contains("gone") {
            #expect(r.stderr.contains("adcache: warning: ad 'gone' failed: \(server.url("/gone.jpg")): HTTP 404\n"))
        }
        let list = s.run(["list"])
        #expect(list.stdout.contains("failed"))
        #expect(s.run(["next"]).status == 0)
        let json = try jsonObject(s.run(["fetch", "--json", "--retries", "0", server.url("/feed.json")]).stdout)
        #expect(json["exitCode"] as? Int == Int(code))
    }

    @Test func skippedAdsWarnButDoNotChangeTheExitCode() throws {
        let s = Sandbox(); defer { s.remove() }
        let feed = s.dir.write(
            "feed.json",
            #"[{"id":"good","url":"\#(packageRoot)/Examples/assets/spring.jpg"},{"id":"bad","url":"ftp://x/y.jpg"}]"#)
        let r = s.run(["fetch", feed])
        #expect(r.status == 0)
        #expect(r.stderr == "adcache: warning: skipping ad 'bad': its \"url\" scheme 'ftp' is not http or https\n")
        #expect(r.stdout == "1 ad: 1 ready (1 downloaded)\n")
    }

    @Test func fetchJSONReport() throws {
        let s = Sandbox(); defer { s.remove() }
        let r = s.run(["fetch", "--json", packageRoot + "/Examples/feed.json"])
        let obj = try jsonObject(r.stdout)
        #expect(obj["feedStatus"] as? String == "downloaded")
        let ads = try #require(obj["ads"] as? [[String: Any]])
        #expect(ads.map { $0["outcome"] as? String } == ["downloaded", "downloaded", "downloaded"])
        #expect(ads.allSatisfy { ($0["bytes"] as? Int ?? 0) > 0 })
    }

    @Test func quietPrintsNothingOnStdout() {
        let s = Sandbox(); defer { s.remove() }
        #expect(s.run(["fetch", "-q", packageRoot + "/Examples/feed.json"]).stdout.isEmpty)
        #expect(s.run(["prune", "--quiet"]).stdout.isEmpty)
        #expect(s.run(["clear", "-q"]).stdout.isEmpty)
    }

    @Test func cacheDirectoryFromTheEnvironment() {
        let s = Sandbox(); defer { s.remove() }
        let r = Adcache.call(
            ["fetch", "-q", packageRoot + "/Examples/feed.json"],
            environment: ["ADCACHE_DIR": s.dir.path + "/env-cache"])
        #expect(r.status == 0)
        #expect(Disk.exists(s.dir.path + "/env-cache/index.json"))
        let x = Adcache.call(
            ["fetch", "-q", packageRoot + "/Examples/feed.json"], environment: ["XDG_CACHE_HOME": s.dir.path + "/xdg"])
        #expect(x.status == 0)
        #expect(Disk.exists(s.dir.path + "/xdg/adcache/index.json"))
    }

    @Test func unwritableCacheDirectoryIs73() {
        let s = Sandbox(); defer { s.remove() }
        let blocker = s.dir.write("file", "x")
        let r = Adcache.call(["--cache-dir", blocker + "/cache", "fetch", packageRoot + "/Examples/feed.json"])
        #expect(r.status == 73)
        #expect(r.stderr.hasPrefix("adcache: error: cannot create directory"))
    }

    @Test func secondFetchWhileOneRunsIs75AtOnce() throws {
        let s = Sandbox(); defer { s.remove() }
        let store = CacheStore(directory: s.cache)
        try store.prepare()
        let lock = try store.acquireFetchLock()
        defer { lock.unlock() }
        let r = s.run(["fetch", packageRoot + "/Examples/feed.json"])
        #expect(r.status == 75)
        #expect(r.stderr == "adcache: error: another fetch is running (pid \(getpid())); try again later\n")
    }

    @Test func pruneAndClear() throws {
        let s = Sandbox(); defer { s.remove() }
        #expect(s.run(["fetch", packageRoot + "/Examples/feed.json"]).status == 0)
        let dry = s.run(["prune", "--max-size", "0", "--dry-run"])
        #expect(dry.status == 0)
        #expect(dry.lines.filter { $0.hasPrefix("would remove ad '") && $0.contains("(evicted,") }.count == 3)
        #expect(dry.lines.last?.hasPrefix("would free ") == true)
        let later = s.run(["prune", "--at", "2100-01-01T00:00:00Z", "--json"])
        let obj = try jsonObject(later.stdout)
        let removed = try #require(obj["removed"] as? [[String: Any]])
        #expect(removed.map { $0["id"] as? String } == ["spring-sale"])
        #expect(removed.first?["reason"] as? String == "expired")
        let clear = s.run(["clear"])
        #expect(clear.stdout == "removed 3 files\n", "the expired ad's file stays for the grace; clear takes it")
        #expect(s.run(["list", "--json"]).stdout == "[]\n")
    }

    @Test func nextAtRecordsTheShowAtThatTime() throws {
        let s = Sandbox(); defer { s.remove() }
        #expect(s.run(["fetch", packageRoot + "/Examples/feed.json"]).status == 0)
        // Before spring-sale starts:
        #expect(s.run(["next", "--at", "2025-06-01T00:00:00Z", "--peek", "--json"]).stdout.contains("\"new-app\""))
        _ = s.run(["next", "--at", "2027-01-01T00:00:00+01:00"])
        let list = try #require(
            try JSONSerialization.jsonObject(with: Data(s.run(["list", "--json"]).stdout.utf8)) as? [[String: Any]])
        #expect(list[0]["lastShown"] as? String == "2026-12-31T23:00:00Z")
    }
}

/// The fetch summary and `list` say the same of an ad (issue 22, item 18).
@Suite struct SummaryAgreesWithListTests {
    @Test func aFailedNewVersionSaysTheOlderFileServesAndAWithdrawnAdWithoutOneDoesNot() throws {
        let dir = TempDir()
        defer { dir.remove() }
        final class Feed: @unchecked Sendable {
            private let lock = NSLock()
            private var text = #"[{"id":"a","url":"a1.jpg"},{"id":"b","url":"b.jpg"}]"#
            var value: String {
                get { lock.lock(); defer { lock.unlock() }; return text }
                set { lock.lock(); text = newValue; lock.unlock() }
            }
        }
        let feed = Feed()
        let server = try LoopbackServer { r in
            switch r.path {
            case "/feed.json": return .text(200, feed.value)
            case "/a1.jpg":   // then an error page in its place: the new version fails
                return feed.value.contains("b.jpg") ? .file(Media.jpeg(3000), for: r) : .text(200, "<html>oops</html>")
            default: return .text(404, "")
            }
        }
        defer { server.stop() }
        let c = ["--cache-dir", dir.path + "/cache"]
        let first = Adcache.run(c + ["fetch", "--no-report", server.url("/feed.json")])
        #expect(first.status == 65, "b failed for good: \(first.stderr)")
        // a's new version fails; b leaves the feed (withdrawn, never had a file).
        feed.value = #"[{"id":"a","url":"a1.jpg"}]"#
        let second = Adcache.run(c + ["fetch", "--no-report", "--revalidate"])
        #expect(second.stdout.contains("1 failed (an older file serves)"), "\(second.stdout)")
        let list = Adcache.run(c + ["list"])
        let lines = list.stdout.split(separator: "\n").map(String.init)
        let a = lines.first { $0.hasPrefix("  a: ") }
        #expect(a?.hasSuffix("(the older file still serves)") == true, "\(list.stdout)")
        let b = lines.first { $0.hasPrefix("  b: ") }
        #expect(b != nil && b?.contains("still serves") == false, "\(list.stdout)")
    }
}

/// SPEC §6 v4 *No /proc needed*: in a chroot during an image build there is no /proc; adcache
/// reads its arguments all the same (Swift's CommandLine reads /proc/self/cmdline on Linux;
/// adcache takes them from the C runtime). Run in a mount namespace whose /proc is empty.
@Suite struct NoProcTests {
    @Test(
        .enabled(
            if: getuid() == 0 && available("/usr/bin/unshare"),
            "a mount namespace needs root and unshare (CI runs as root)"))
    func everyCommandReadsItsArgumentsWithoutProc() throws {
        let s = Sandbox(); defer { s.remove() }
        let script = """
            mount -t tmpfs tmpfs /proc || exit 99
            test -e /proc/self/cmdline && exit 98
            "$0" --version || exit 1
            "$0" --cache-dir "$1" fetch --no-progress "$2" || exit 2
            "$0" --cache-dir "$1" next --json || exit 3
            """
        let r = runProgram(
            "/usr/bin/unshare",
            ["-m", "/bin/sh", "-c", script, Adcache.binary, s.cache, packageRoot + "/Examples/feed.json"])
        #expect(r.status == 0, "\(r.status): \(r.stdout) \(r.stderr)")
        #expect(r.stdout.hasPrefix("adcache "), "\(r.stdout)")
        #expect(r.stdout.contains("\"id\":\"spring-sale\""), "the launch chose, its arguments read: \(r.stdout)")
    }
}
