import AdCacheKit
import Foundation
import TestSupport
import Testing

/// SPEC §9: configuration files, their precedence and their errors.
@Suite struct ConfigTests {
    @Test func settingsComeFromTheFileThenTheEnvironmentThenTheCommandLine() throws {
        let s = Sandbox(); defer { s.remove() }
        let file = s.dir.write(
            "adcache.conf",
            """
            # a fleet's settings
            cache-dir = from-file
            parallel = 8

            header = X-One: 1
            header = X-Two: 2
            """)
        let shown = Adcache.call(["--config", file, "config", "--show-origin"])
        #expect(shown.status == 0, "\(shown.stderr)")
        #expect(shown.lines.contains("file:\(file):2\tcache-dir = \(s.dir.path)/from-file"), "\(shown.stdout)")
        #expect(shown.lines.contains("file:\(file):3\tparallel = 8"))
        #expect(shown.lines.contains("default\tretries = 2"))
        #expect(shown.lines.filter { $0.contains("header = ") }.count == 2)
        #expect(shown.lines == shown.lines.sorted { $0.split(separator: "\t")[1] < $1.split(separator: "\t")[1] })
        let env = Adcache.call(["--config", file, "config", "--show-origin"], environment: ["ADCACHE_DIR": "/env"])
        #expect(env.lines.contains("environment\tcache-dir = /env"))
        let cli = Adcache.call(
            ["--config", file, "--cache-dir", "/cli", "config", "--show-origin"], environment: ["ADCACHE_DIR": "/env"])
        #expect(cli.lines.contains("command line\tcache-dir = /cli"))
        // ADCACHE_CONFIG acts as --config; /dev/null reads nothing.
        let viaEnv = Adcache.call(["config"], environment: ["ADCACHE_CONFIG": file])
        #expect(viaEnv.lines.contains("parallel = 8"))
        let none = Adcache.call(["config"], environment: ["ADCACHE_CONFIG": "/dev/null"])
        #expect(none.lines.contains("parallel = 4"))
    }

    /// A broken file fails every command the same way: 64, naming file:line — except a
    /// launch (`next`), which warns and goes on without the line (SPEC §9, v3).
    @Test(arguments: ["list", "prune", "fetch", "clear", "config"])
    func aBrokenFileIsAUsageErrorNamingFileAndLine(command: String) throws {
        let s = Sandbox(); defer { s.remove() }
        let unknown = s.dir.write("unknown.conf", "# ok\n\nparalel = 3\n")
        let r = Adcache.call(["--config", unknown, command])
        #expect(r.status == 64)
        #expect(r.stderr == "adcache: error: \(unknown):3: unknown key 'paralel' (did you mean 'parallel'?)\n")
        let bad = s.dir.write("bad.conf", "retries = 99\n")
        let b = Adcache.call(["--config", bad, command])
        #expect(b.status == 64)
        #expect(b.stderr == "adcache: error: \(bad):1: 'retries' needs a whole number from 0 to 20 (got '99')\n")
        let flag = s.dir.write("flag.conf", "no-progress = maybe\n")
        #expect(
            Adcache.call(["--config", flag, command]).stderr.contains("\(flag):1: 'no-progress' needs true or false"))
        let header = s.dir.write("header.conf", "header = no colon here\n")
        let h = Adcache.call(["--config", header, command])
        #expect(h.status == 64 && h.stderr.hasPrefix("adcache: error: \(header):1: "), "\(h.stderr)")
        #expect(!Disk.exists(s.cache))
    }

    /// A typo in /etc/adcache.conf never costs a splash: `next` warns naming file:line and
    /// goes on without that line (the rest of the file still applies).
    @Test func aTypoNeverStopsALaunch() throws {
        let s = Sandbox(); defer { s.remove() }
        let feed = s.dir.write("feed.json", #"[{"id":"a","url":"a.jpg"}]"#)
        _ = s.dir.write("a.jpg", Media.jpeg())
        #expect(Adcache.call(["--cache-dir", s.cache, "fetch", feed]).status == 0)
        let conf = s.dir.write("typo.conf", "devic-id = kiosk-17\ncache-dir = \(s.cache)\n")
        let r = Adcache.call(["--config", conf, "next"])
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stdout.hasPrefix(s.cache + "/assets/"), "the cache-dir line still applies: \(r.stdout)")
        #expect(
            r.stderr == "adcache: warning: \(conf):1: unknown key 'devic-id' (did you mean 'device-id'?); ignored\n")
        #expect(Adcache.call(["--config", conf, "list"]).status == 64, "every other command stops")
    }

    /// A file written on Windows (CRLF) reads as its lines; options of a single run are no
    /// settings (`events = true` once made every plain `clear` delete the billing data);
    /// a relative feed is the file's, made absolute.
    @Test func crlfRunOnlyKeysAndARelativeFeed() throws {
        let s = Sandbox(); defer { s.remove() }
        let crlf = s.dir.write("crlf.conf", "parallel = 8\r\nretries = 3\r\n")
        let shown = Adcache.call(["--config", crlf, "config"])
        #expect(shown.status == 0, "\(shown.stderr)")
        #expect(shown.lines.contains("parallel = 8") && shown.lines.contains("retries = 3"), "\(shown.stdout)")
        for key in ["peek", "events", "at", "dry-run", "json", "render", "choice"] {
            let f = s.dir.write("\(key).conf", "\(key) = true\n")
            let r = Adcache.call(["--config", f, "clear"])
            #expect(r.status == 64, "\(key)")
            #expect(r.stderr.contains("\(f):1: '\(key)' is an option of one run, not a setting"), "\(r.stderr)")
        }
        let ftp = s.dir.write("ftp.conf", "feed = ftp://example.com/feed.json\n")
        #expect(
            Adcache.call(["--config", ftp, "fetch"]).stderr.contains("\(ftp):1: 'feed' needs an http or https URL"))
        _ = s.dir.write("a.jpg", Media.jpeg())
        _ = s.dir.write("feed.json", #"[{"id":"a","url":"a.jpg"}]"#)
        let rel = s.dir.write("rel.conf", "feed = feed.json\ncache-dir = \(s.cache)\n")
        let fetch = Adcache.run(["--config", rel, "fetch"], cwd: "/")
        #expect(fetch.status == 0, "the feed is the configuration file's neighbour: \(fetch.stderr)")
        // A relative feed on the command line is remembered absolute: cron's bare fetch,
        // run from another directory, repeats it.
        let other = s.dir.path + "/other-cache"
        #expect(Adcache.run(["--cache-dir", other, "fetch", "feed.json"], cwd: s.dir.path).status == 0)
        let bare = Adcache.run(["--cache-dir", other, "fetch"], cwd: "/")
        #expect(bare.status == 0, "\(bare.stderr)")
    }

    /// The configured feed and headers reach fetch; headers from the file and the command
    /// line are all sent; a bare fetch uses the configured feed.
    @Test func fetchTakesTheConfiguredFeedAndEveryHeader() throws {
        let s = Sandbox(); defer { s.remove() }
        let jpeg = Media.jpeg()
        let server = try LoopbackServer { r in
            r.path == "/feed.json" ? .text(200, #"[{"id":"a","url":"a.jpg"}]"#) : .file(jpeg, for: r)
        }
        defer { server.stop() }
        let file = s.dir.write(
            "adcache.conf", "feed = \(server.url("/feed.json"))\nheader = X-File: f\nno-progress = true\n")
        let r = Adcache.call(["--config", file, "--cache-dir", s.cache, "fetch", "--header", "X-Cli: c"])
        #expect(r.status == 0, "\(r.stderr)")
        let asked = try #require(server.requests(to: "/feed.json").first)
        #expect(asked.header("X-File") == "f" && asked.header("X-Cli") == "c")
    }
}
