import Foundation
import TestSupport
import Testing

@testable import AdCacheCLI
@testable import AdCacheKit

#if canImport(Glibc)
    import Glibc
#endif

@Suite struct ProgressTests {
    func server() throws -> LoopbackServer {
        try LoopbackServer { r in
            switch r.path {
            case "/feed.json": return .text(200, #"[{"id":"a","url":"a.jpg"},{"id":"b","url":"b.jpg"}]"#)
            default: return .file(Media.jpeg(20_000), for: r)
            }
        }
    }

    @Test func noProgressBarWhenStderrIsNotATerminal() throws {
        let s = Sandbox(); defer { s.remove() }
        let srv = try server(); defer { srv.stop() }
        let r = s.run(["fetch", srv.url("/feed.json")])
        #expect(r.status == 0)
        #expect(r.stderr.isEmpty)
    }

    /// --progress into a file or pipe: plain lines, one per finished asset, never control
    /// sequences (version 1 wrote `\r\e[K` into log files).
    @Test func progressIntoAFileIsPlainLines() throws {
        let s = Sandbox(); defer { s.remove() }
        let srv = try server(); defer { srv.stop() }
        let r = s.run(["fetch", "--progress", srv.url("/feed.json")])
        #expect(r.status == 0)
        #expect(!r.stderr.contains("\r") && !r.stderr.contains("\u{1B}"))
        let lines = r.stderr.split(separator: "\n")
        #expect(lines.count == 2, "\(r.stderr)")
        #expect(lines.allSatisfy { $0.hasPrefix("adcache: ") && $0.hasSuffix(" 20K") }, "\(r.stderr)")
        #expect(r.stdout == "2 ads: 2 ready (2 downloaded)\n")
        #expect(s.run(["fetch", "--progress", "--no-progress"]).status == 64)
    }

    /// On a terminal: bytes done of the total, percent, rate and time left.
    @Test func onATerminalTheBarCountsBytes() throws {
        let s = Sandbox(); defer { s.remove() }
        let srv = try server(); defer { srv.stop() }
        let r = Adcache.call(["--cache-dir", s.cache, "fetch", srv.url("/feed.json")], terminal: true)
        #expect(r.status == 0)
        #expect(r.stderr.contains("\r\u{1B}[K["), "\(r.stderr)")
        #expect(r.stderr.contains("39K/39K  100%"), "\(r.stderr)")
        let line = ProgressBar.line(
            FetchProgress(
                bytes: 60 << 20, totalBytes: 288 << 20, done: 0, total: 1, elapsed: 12, rate: Double(5 << 20),
                finished: nil))
        #expect(line == "[#####-------------------] 60M/288M  20%  5.0M/s  0:45 left")
    }
}

@Suite struct TimeoutTests {
    @Test func aSilentServerTimesOut() throws {
        let s = Sandbox(); defer { s.remove() }
        let srv = try LoopbackServer { r in
            if r.path == "/feed.json" { return .text(200, #"[{"id":"slow","url":"slow.jpg"}]"#) }
            var resp = LoopbackServer.Response.file(Media.jpeg(), for: r)
            resp.delay = 3
            return resp
        }
        defer { srv.stop() }
        let r = s.run(["fetch", "--timeout", "0.5", "--retries", "0", srv.url("/feed.json")])
        #expect(r.status == 75)
        #expect(r.stderr.contains("timed out"), "\(r.stderr)")
    }

    /// --limit-rate: one budget for the run, as curl's option (a lower bound only).
    @Test func limitRateSlowsTheRun() throws {
        let s = Sandbox(); defer { s.remove() }
        let body = Media.jpeg(3_000_000)
        let srv = try LoopbackServer { r in
            r.path == "/feed.json" ? .text(200, #"[{"id":"a","url":"a.jpg"}]"#) : .file(body, for: r)
        }
        defer { srv.stop() }
        let started = monotonicNow()
        let r = s.run(["fetch", "--limit-rate", "1MiB", srv.url("/feed.json")])
        #expect(r.status == 0, "\(r.stderr)")
        #expect(monotonicNow() - started > 1.5, "3 MB at 1 MiB/s")
        #expect(s.run(["fetch", "--limit-rate", "0"]).status == 64)
        #expect(
            s.run(["fetch", "--jitter", "90000"]).stderr.hasPrefix(
                "adcache: error: option '--jitter' needs a number of seconds from 0 to 86400"))
    }

    /// SPEC v2: --timeout is the longest stretch without a byte, not a cap on a transfer: a
    /// download that takes three times --timeout finishes while it keeps moving.
    @Test func aSlowButMovingDownloadFinishes() throws {
        let s = Sandbox(); defer { s.remove() }
        let body = Media.jpeg(40_000)
        let srv = try LoopbackServer { r in
            if r.path == "/feed.json" { return .text(200, #"[{"id":"slow","url":"slow.jpg"}]"#) }
            var resp = LoopbackServer.Response.file(body, for: r)
            resp.dripChunk = 4_000
            resp.dripPause = 0.4   // ten pauses: 4 s in all, never 2 s without a byte
            return resp
        }
        defer { srv.stop() }
        let started = monotonicNow()
        let r = s.run(["fetch", "--timeout", "2", "--retries", "0", srv.url("/feed.json")])
        #expect(r.status == 0, "\(r.stderr)")
        #expect(monotonicNow() - started > 3, "the download took longer than --timeout")
    }
}

/// TLS against a real TLS server (openssl s_server) on 127.0.0.1 with a self-signed
/// certificate: verified always, trusted only through --cacert.
@Suite(.serialized) struct TLSTests {
    func freePort() -> Int { freeLoopbackPort() }

    func openssl(_ args: [String], cwd: String) throws -> Process {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/openssl")
        p.arguments = args
        p.currentDirectoryURL = URL(fileURLWithPath: cwd)
        p.standardOutput = FileHandle.nullDevice
        p.standardError = FileHandle.nullDevice
        p.standardInput = FileHandle.nullDevice
        try p.run()
        return p
    }

    @Test(
        .enabled(
            if: FileManager.default.isExecutableFile(atPath: "/usr/bin/openssl"),
            "openssl is not installed (make test installs it)"))
    func selfSignedServerIsRefusedUnlessTrustedWithCacert() throws {
        let s = Sandbox(); defer { s.remove() }
        let www = s.dir.path + "/www"
        try FileManager.default.createDirectory(atPath: www, withIntermediateDirectories: true)
        let gen = try openssl(
            [
                "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "key.pem", "-out", "cert.pem",
                "-days", "2", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
            ], cwd: s.dir.path)
        gen.waitUntilExit()
        try #require(gen.terminationStatus == 0)
        s.dir.write("www/feed.json", #"[{"id":"tls","url":"a.jpg"}]"#)
        s.dir.write("www/a.jpg", Media.jpeg())
        let port = freePort()
        let server = try openssl(
            [
                "s_server", "-accept", "127.0.0.1:\(port)", "-cert", "../cert.pem", "-key", "../key.pem",
                "-WWW", "-quiet",
            ], cwd: www)
        defer { kill(server.processIdentifier, SIGKILL); server.waitUntilExit() }   // s_server ignores SIGTERM
        // Wait for it to listen.
        var ready = false
        for _ in 0..<50 where !ready {
            usleep(100_000)
            let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            var addr = sockaddr_in()
            addr.sin_family = sa_family_t(AF_INET)
            addr.sin_addr.s_addr = inet_addr("127.0.0.1")
            addr.sin_port = UInt16(port).bigEndian
            ready =
                withUnsafePointer(to: &addr) {
                    $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                        connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                    }
                } == 0
            close(fd)
        }
        try #require(ready, "openssl s_server did not start")
        let url = "https://127.0.0.1:\(port)/feed.json"

        let refused = s.run(["fetch", "--retries", "0", url])
        #expect(refused.status == 69)
        #expect(refused.stderr.contains("TLS failure"), "\(refused.stderr)")
        #expect(!Disk.exists(s.cache + "/index.json"))

        let trusted = s.run(["fetch", "--cacert", s.dir.path + "/cert.pem", url])
        #expect(trusted.status == 0, "\(trusted.stderr)")
        #expect(trusted.stdout == "1 ad: 1 ready (1 downloaded)\n")
    }
}
