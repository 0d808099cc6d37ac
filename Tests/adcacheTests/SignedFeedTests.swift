import Foundation
import TestSupport
import Testing

let minisignInstalled = FileManager.default.isExecutableFile(atPath: "/usr/bin/minisign")

/// SPEC §11: signed feeds, signed as publishers sign them, with Debian's `minisign` (keys
/// made in the test; no private key is committed), checked by the command line as a fleet
/// runs it. Every refusal leaves the cache byte-identical.
@Suite(.enabled(if: minisignInstalled, "minisign is not installed (make test installs it)"))
struct SignedFeedTests {
    static let minisign = "/usr/bin/minisign"

    /// A publisher's key pair, made with `minisign -G`.
    struct Publisher {
        let dir: TempDir
        let name: String
        var publicFile: String { dir.file("\(name).pub") }
        var secretFile: String { dir.file("\(name).sec") }

        init(_ name: String, in dir: TempDir) throws {
            self.dir = dir
            self.name = name
            let made = runProgram(minisign, ["-G", "-W", "-p", dir.file("\(name).pub"), "-s", dir.file("\(name).sec")])
            try #require(made.status == 0, "\(made.stderr)")
        }

        /// The base64 line of the `.pub` file, as `feed-key` takes it.
        var publicLine: String {
            (try? String(contentsOfFile: publicFile, encoding: .utf8))?.split(separator: "\n").last.map(String.init)
                ?? ""
        }

        /// The id minisign prints, from its `.pub` file's comment.
        var id: String {
            let text = (try? String(contentsOfFile: publicFile, encoding: .utf8)) ?? ""
            return text.split(separator: "\n").first.map { String($0.split(separator: " ").last ?? "") } ?? ""
        }

        /// The `.minisig` of `bytes` (`legacy`: the `Ed` form, `-l`).
        func sign(_ bytes: [UInt8], comment: String = "adcache feed", legacy: Bool = false) throws -> [UInt8] {
            let message = dir.write("message-\(UUID().uuidString)", bytes)
            defer { _ = Disk.remove(message); _ = Disk.remove(message + ".minisig") }
            let r = runProgram(
                minisign, ["-S", "-s", secretFile, "-m", message, "-t", comment] + (legacy ? ["-l"] : []))
            try #require(r.status == 0, "\(r.stderr)")
            return Array(try Data(contentsOf: URL(fileURLWithPath: message + ".minisig")))
        }
    }

    static let jpeg = Media.jpeg()

    /// A feed with one ad (with its `sha256`) and, unless nil, a serial and a validUntil.
    static func feed(serial: Int? = 5, validUntil: Double? = Date().timeIntervalSince1970 + 86400, extra: String = "")
        -> [UInt8]
    {
        var top = ""
        if let serial { top += #""serial":\#(serial),"# }
        if let validUntil { top += #""validUntil":\#(Int(validUntil)),"# }
        return Array(
            #"{\#(top)"ads":[{"id":"a","url":"a.jpg","sha256":"\#(Media.sha256(jpeg))"\#(extra)}]}"#.utf8)
    }

    /// What the feed server serves: the feed and its signature, with ETags, changeable.
    final class Served: @unchecked Sendable {
        private let lock = NSLock()
        private var _feed: [UInt8] = []
        private var _signature: [UInt8]? = []
        var signatureStatus = 200
        var date: String?
        var feed: [UInt8] {
            get { lock.lock(); defer { lock.unlock() }; return _feed }
            set { lock.lock(); _feed = newValue; lock.unlock() }
        }
        /// nil: 404.
        var signature: [UInt8]? {
            get { lock.lock(); defer { lock.unlock() }; return _signature }
            set { lock.lock(); _signature = newValue; lock.unlock() }
        }

        func respond(_ r: LoopbackServer.Request) -> LoopbackServer.Response {
            var response: LoopbackServer.Response
            switch r.path {
            case "/feed.json":
                let body = feed
                response = .file(body, for: r, etag: "\"\(Media.sha256(body).prefix(12))\"", lastModified: nil)
            case "/feed.json.minisig":
                guard signatureStatus == 200 else { return .text(signatureStatus, "no") }
                guard let body = signature else { return .text(404, "not found") }
                response = .file(body, for: r, etag: "\"\(Media.sha256(body).prefix(12))\"", lastModified: nil)
            case "/a.jpg":
                response = .file(SignedFeedTests.jpeg, for: r, etag: "\"a\"")
            case "/imp":   // a tracker that is down: its events stay queued
                return .text(503, "later")
            default:
                return .text(404, "not found")
            }
            if let date { response.headers.append(("Date", date)) }
            return response
        }
    }

    /// A sandbox with a configuration naming `keys` and a server serving `served`.
    struct Fleet {
        let s = Sandbox()
        let served = Served()
        let server: LoopbackServer
        var conf: String

        init(keys: [Publisher], keysDir: String? = nil) throws {
            let served = served
            server = try LoopbackServer { served.respond($0) }
            var text = keys.map { "feed-key = \($0.publicLine)\n" }.joined()
            if let keysDir { text += "feed-keys-dir = \(keysDir)\n" }
            conf = s.dir.write("adcache.conf", text)
        }

        var feedURL: String { server.url("/feed.json") }

        func run(_ args: [String], stdin: [UInt8] = []) -> Run {
            Adcache.call(["--config", conf, "--cache-dir", s.cache] + args, stdin: stdin)
        }

        func fetch() -> Run { run(["fetch", "--no-progress", feedURL]) }

        /// Serves `feed` with its signature by `publisher`.
        func serve(_ feed: [UInt8], signedBy publisher: Publisher) throws {
            served.feed = feed
            served.signature = try publisher.sign(feed)
        }

        /// The cache's regular files, by path, with their bytes.
        /// Every file but `fetch.last`, the run's record for `status`, which a refused run
        /// writes too (SPEC §3).
        func snapshot() throws -> [String: [UInt8]] {
            var out: [String: [UInt8]] = [:]
            for path in try FileManager.default.subpathsOfDirectory(atPath: s.cache) where path != "fetch.last" {
                var st = stat()
                guard lstat(s.cache + "/" + path, &st) == 0, (st.st_mode & S_IFMT) == S_IFREG else { continue }
                out[path] = Array(try Data(contentsOf: URL(fileURLWithPath: s.cache + "/" + path)))
            }
            return out
        }

        func stop() {
            server.stop()
            s.remove()
        }
    }

    @Test func aFeedSignedByAConfiguredKeyIsAccepted() throws {
        let keys = TempDir(); defer { keys.remove() }
        let publisher = try Publisher("publisher", in: keys)
        let fleet = try Fleet(keys: [publisher]); defer { fleet.stop() }
        fleet.served.feed = Self.feed()
        fleet.served.signature = try publisher.sign(fleet.served.feed)
        let r = fleet.fetch()
        #expect(r.status == 0, "\(r.stderr)")
        #expect(fleet.run(["list"]).lines[1].hasPrefix("a   image  ready"), "\(fleet.run(["list"]).stdout)")
        #expect(fleet.run(["next"]).stdout.hasPrefix(fleet.s.cache + "/assets/"))
        // The signature was asked for right after the feed, before any asset.
        let paths = fleet.server.log.map(\.path)
        #expect(paths == ["/feed.json", "/feed.json.minisig", "/a.jpg"], "\(paths)")
        // `config` names the key by the id minisign prints, and where it was configured.
        let config = fleet.run(["config", "--show-origin"])
        #expect(config.lines.contains("file:\(fleet.conf):1\tfeed-key = \(publisher.id)"), "\(config.stdout)")
        #expect(
            (1...16).contains(publisher.id.count) && !publisher.id.hasPrefix("0"),
            "as minisign prints it: \(publisher.id)")
    }

    /// One byte of the feed, of the signature or of the trusted comment changed; a key that is
    /// not configured; no signature; a signature server that fails for now. Each is refused
    /// with its exit code and a message that says what was wrong, and the cache stays
    /// byte-identical (the ads of the last accepted feed still show).
    @Test(arguments: ["feed", "signature", "comment", "other key", "missing", "unavailable", "legacy tampered"])
    func everyRefusalLeavesTheCacheByteIdentical(_ what: String) throws {
        let keys = TempDir(); defer { keys.remove() }
        let publisher = try Publisher("publisher", in: keys)
        let stranger = try Publisher("stranger", in: keys)
        let fleet = try Fleet(keys: [publisher]); defer { fleet.stop() }
        fleet.served.feed = Self.feed(serial: 1)
        fleet.served.signature = try publisher.sign(fleet.served.feed)
        #expect(fleet.fetch().status == 0)
        #expect(fleet.run(["next"]).status == 0)
        #expect(fleet.run(["prune"]).status == 0)   // the show folded: the report step has nothing to do
        let before = try fleet.snapshot()

        var feed = Self.feed(serial: 2, extra: #","priority":9"#)
        var signature = try publisher.sign(feed, legacy: what == "legacy tampered")
        var expected: (status: Int32, message: String)
        switch what {
        case "feed", "legacy tampered":
            let i = feed.firstIndex(of: UInt8(ascii: "9"))!
            feed[i] = UInt8(ascii: "8")
            expected = (65, "feed signature: does not verify with key \(publisher.id) (the feed was changed?)")
        case "signature":
            var lines = String(decoding: signature, as: UTF8.self).split(separator: "\n").map(String.init)
            var raw = [UInt8](Data(base64Encoded: lines[1])!)
            raw[40] ^= 0x01
            lines[1] = Data(raw).base64EncodedString()
            signature = Array((lines.joined(separator: "\n") + "\n").utf8)
            expected = (65, "feed signature: does not verify with key \(publisher.id) (the feed was changed?)")
        case "comment":
            signature = Array(
                String(decoding: signature, as: UTF8.self).replacing("adcache feed", with: "adcache feee").utf8)
            expected = (65, "feed signature: the trusted comment does not verify with key \(publisher.id)")
        case "other key":
            signature = try stranger.sign(feed)
            expected = (
                65,
                "feed signature: made by key \(stranger.id), which is not configured (configured: \(publisher.id))"
            )
        case "missing":
            expected = (65, "feed signature: missing (\(fleet.feedURL).minisig answered 404)")
        default:
            expected = (69, "cannot fetch the feed's signature \(fleet.feedURL).minisig: HTTP 503")
        }
        fleet.served.feed = feed
        fleet.served.signature = what == "missing" ? nil : signature
        if what == "unavailable" { fleet.served.signatureStatus = 503 }
        let r = fleet.fetch()
        #expect(r.status == expected.status, "\(r.stderr)")
        #expect(r.stderr.hasPrefix("adcache: error: \(expected.message)"), "\(r.stderr)")
        #expect(r.stderr.split(separator: "\n").count == 1, "one line: \(r.stderr)")
        #expect(try fleet.snapshot() == before, "a refused feed changes nothing")
        #expect(fleet.server.requests(to: "/a.jpg").count == 1, "no asset is asked for")
        // …but `status` says so: the run's record names its exit and its error.
        let status = try jsonObject(fleet.run(["status", "--json"]).stdout)
        let last = try #require(status["lastFetch"] as? [String: Any])
        #expect(last["exit"] as? Int == Int(expected.status))
        #expect(last["error"] as? String == expected.message, "\(last)")
    }

    /// A new key is rolled out before the old one is retired: while both are configured
    /// (one as `feed-key`, one in `feed-keys-dir`), a feed signed by either is accepted;
    /// once the old key is gone, a feed it signed is refused.
    @Test func keyRotation() throws {
        let keys = TempDir(); defer { keys.remove() }
        let old = try Publisher("old", in: keys)
        let new = try Publisher("new", in: keys)
        let keysDir = TempDir(); defer { keysDir.remove() }
        let installed = keysDir.file("new.pub")   // only the public key goes to the device
        try FileManager.default.copyItem(atPath: new.publicFile, toPath: installed)
        let fleet = try Fleet(keys: [old], keysDir: keysDir.path); defer { fleet.stop() }
        let config = fleet.run(["config", "--show-origin"])
        #expect(config.lines.contains("file:\(fleet.conf):1\tfeed-key = \(old.id)"), "\(config.stdout)")
        #expect(config.lines.contains("\(installed)\tfeed-key = \(new.id)"), "\(config.stdout)")
        #expect(config.lines.contains("file:\(fleet.conf):2\tfeed-keys-dir = \(keysDir.path)"), "\(config.stdout)")

        fleet.served.feed = Self.feed(serial: 1)
        fleet.served.signature = try old.sign(fleet.served.feed)
        #expect(fleet.fetch().status == 0)
        // The publisher moves to the new key.
        fleet.served.feed = Self.feed(serial: 2)
        fleet.served.signature = try new.sign(fleet.served.feed)
        let r = fleet.fetch()
        #expect(r.status == 0, "\(r.stderr)")
        // The old key retired: a feed it signs is refused.
        let retired = try Fleet(keys: [], keysDir: keysDir.path); defer { retired.stop() }
        retired.served.feed = Self.feed(serial: 3)
        retired.served.signature = try old.sign(retired.served.feed)
        let refused = retired.fetch()
        #expect(refused.status == 65)
        #expect(refused.stderr.contains("made by key \(old.id), which is not configured (configured: \(new.id))"))
    }

    /// Rollback: serial 5, then 4 (refused), then 5 with other bytes (refused), then 5 as
    /// accepted (fine) and 6 (accepted). The last serial survives `clear`.
    @Test func rollbackIsRefused() throws {
        let keys = TempDir(); defer { keys.remove() }
        let publisher = try Publisher("publisher", in: keys)
        let fleet = try Fleet(keys: [publisher]); defer { fleet.stop() }
        func serve(_ feed: [UInt8]) throws { try fleet.serve(feed, signedBy: publisher) }
        let five = Self.feed(serial: 5)
        try serve(five)
        #expect(fleet.fetch().status == 0)
        let accepted = try fleet.snapshot()

        try serve(Self.feed(serial: 4))
        var r = fleet.fetch()
        #expect(r.status == 65)
        #expect(
            r.stderr
                == "adcache: error: signed feed refused: rollback: its serial 4 is lower than the last accepted, 5\n")
        #expect(try fleet.snapshot() == accepted)

        try serve(Self.feed(serial: 5, extra: #","priority":3"#))
        r = fleet.fetch()
        #expect(r.status == 65)
        #expect(r.stderr.contains("rollback: serial 5 was accepted before with other content"), "\(r.stderr)")
        #expect(try fleet.snapshot() == accepted)

        try serve(five)   // the same bytes again: not a rollback
        #expect(fleet.fetch().status == 0)
        try serve(Self.feed(serial: 6))
        #expect(fleet.fetch().status == 0)

        // The serial belongs to the cache: `clear` keeps it.
        #expect(fleet.run(["clear"]).status == 0)
        #expect(fleet.run(["list"]).lines.count <= 1)
        try serve(five)
        r = fleet.fetch()
        #expect(r.status == 65, "\(r.stderr)")
        #expect(r.stderr.contains("lower than the last accepted, 6"))
        try serve(Self.feed(serial: 7))
        #expect(fleet.fetch().status == 0)
    }

    /// SPEC §6 v4 *Decide, then act*: a replayed old feed, validly signed, served with a `Date`
    /// a year ahead is refused as a rollback — and its clock never judges the queue: the
    /// billing events waiting for a tracker that is down stay pending (version 3 adopted the
    /// clock first, and its report step dropped them as a year old).
    @Test func aReplayedFeedWithAFutureDateKeepsTheQueuePending() throws {
        let keys = TempDir(); defer { keys.remove() }
        let publisher = try Publisher("publisher", in: keys)
        let fleet = try Fleet(keys: [publisher]); defer { fleet.stop() }
        let tracking = #","tracking":{"impression":["\#(fleet.server.url("/imp"))"]}"#
        func serve(_ feed: [UInt8]) throws { try fleet.serve(feed, signedBy: publisher) }
        let old = Self.feed(serial: 4, validUntil: Date().timeIntervalSince1970 + 3 * 365 * 86400, extra: tracking)
        try serve(Self.feed(serial: 5, extra: tracking))
        #expect(fleet.fetch().status == 0)
        #expect(fleet.run(["next"]).status == 0)
        #expect(fleet.run(["next"]).status == 0)
        // Queued (the report step of the next fetch folds them), and still pending: the
        // tracker is down.
        #expect(fleet.run(["fetch", "--no-progress", "--retries", "0", fleet.feedURL]).status == 0)
        func pending() throws -> Int? {
            let stats = try JSONSerialization.jsonObject(with: Data(fleet.run(["stats", "--json"]).stdout.utf8))
            return ((stats as? [String: Any])?["queue"] as? [String: Any])?["pending"] as? Int
        }
        #expect(try pending() == 2)
        let accepted = try fleet.snapshot()

        try serve(old)
        fleet.served.date = httpDate(Date().timeIntervalSince1970 + 365 * 86400)
        let r = fleet.run(["fetch", "--no-progress", "--retries", "0", fleet.feedURL])
        #expect(r.status == 65, "\(r.stderr)")
        #expect(r.stderr.contains("rollback"), "\(r.stderr)")
        #expect(!r.stderr.contains("device clock"), "a refused answer's clock is not even announced: \(r.stderr)")
        #expect(try pending() == 2, "the queue is judged on the clock the cache trusted")
        // The report step folded the shows into the index; nothing else of the answer is there.
        let index = String(decoding: try fleet.snapshot()["index.json"] ?? [], as: UTF8.self)
        #expect(!index.contains("clockOffset"), "no clock offset recorded")
        #expect(index.contains(#""serial": 5"#), "the accepted feed stands")
        #expect(try fleet.snapshot()["feed.signed"] == accepted["feed.signed"])
    }

    /// An answer that does not parse, with a `Date` a year ahead, changes no clock either.
    @Test func anUnparseableAnswerWithAWrongDateChangesNoClock() throws {
        let fleet = try Fleet(keys: []); defer { fleet.stop() }
        fleet.served.feed = Self.feed(serial: nil, validUntil: nil)
        #expect(fleet.fetch().status == 0)
        let accepted = try fleet.snapshot()
        fleet.served.feed = Array("<html><body>Service moved</body></html>".utf8)
        fleet.served.date = httpDate(Date().timeIntervalSince1970 + 365 * 86400)
        let r = fleet.fetch()
        #expect(r.status == 65, "\(r.stderr)")
        #expect(!r.stderr.contains("device clock"), "\(r.stderr)")
        #expect(try fleet.snapshot() == accepted)
    }

    /// A `.minisig` over the 16 KiB a signature can be is a refused signature (65), not a
    /// network fault (69).
    @Test func anOversizedSignatureIsRefused() throws {
        let keys = TempDir(); defer { keys.remove() }
        let publisher = try Publisher("publisher", in: keys)
        let fleet = try Fleet(keys: [publisher]); defer { fleet.stop() }
        fleet.served.feed = Self.feed()
        fleet.served.signature = try publisher.sign(fleet.served.feed) + [UInt8](repeating: 0x0A, count: 17 << 10)
        let r = fleet.fetch()
        #expect(r.status == 65, "\(r.stderr)")
        #expect(r.stderr.hasPrefix("adcache: error: feed signature: "), "\(r.stderr)")
        #expect(!Disk.exists(fleet.s.cache + "/index.json"))
    }

    /// The last accepted serial is kept apart from the index: `clear` meeting an index that
    /// cannot be read (and no older generation) still refuses an older feed.
    @Test func theLastSerialSurvivesClearWithAnUnreadableIndex() throws {
        let keys = TempDir(); defer { keys.remove() }
        let publisher = try Publisher("publisher", in: keys)
        let fleet = try Fleet(keys: [publisher]); defer { fleet.stop() }
        func serve(_ feed: [UInt8]) throws { try fleet.serve(feed, signedBy: publisher) }
        try serve(Self.feed(serial: 6))
        #expect(fleet.fetch().status == 0)
        try Data("{ not json".utf8).write(to: URL(fileURLWithPath: fleet.s.cache + "/index.json"))
        _ = Disk.remove(fleet.s.cache + "/index.json.old")
        #expect(fleet.run(["clear"]).status == 0)
        try serve(Self.feed(serial: 5))
        let r = fleet.fetch()
        #expect(r.status == 65, "\(r.stderr)")
        #expect(r.stderr.contains("lower than the last accepted, 6"), "\(r.stderr)")
        try serve(Self.feed(serial: 7))
        #expect(fleet.fetch().status == 0)
    }

    /// An index recovered from its previous generation (`index.json.old`, serial 5) does not
    /// let the feed of serial 5 back in once serial 6 was accepted: the serial kept apart
    /// knows better.
    @Test func aRecoveredOlderIndexDoesNotReopenARollback() throws {
        let keys = TempDir(); defer { keys.remove() }
        let publisher = try Publisher("publisher", in: keys)
        let fleet = try Fleet(keys: [publisher]); defer { fleet.stop() }
        func serve(_ feed: [UInt8]) throws { try fleet.serve(feed, signedBy: publisher) }
        let five = Self.feed(serial: 5)
        try serve(five)
        #expect(fleet.fetch().status == 0)
        try serve(Self.feed(serial: 6, extra: #","priority":2"#))
        #expect(fleet.fetch().status == 0)
        try Data("{ not json".utf8).write(to: URL(fileURLWithPath: fleet.s.cache + "/index.json"))
        try serve(five)
        let r = fleet.fetch()
        #expect(r.status == 65, "\(r.stderr)")
        #expect(r.stderr.contains("rollback"), "\(r.stderr)")
    }

    /// Freeze: a feed whose validUntil has passed is refused, by the device clock and by the
    /// feed server's `Date` (a device clock behind); a feed accepted earlier stops showing
    /// its ads once its validUntil passes (`list`: expired), and `prune` keeps their files
    /// for a newer signed feed.
    @Test func anExpiredFeedIsRefusedAndAFrozenOneShowsNothing() throws {
        let keys = TempDir(); defer { keys.remove() }
        let publisher = try Publisher("publisher", in: keys)
        let fleet = try Fleet(keys: [publisher]); defer { fleet.stop() }
        let now = Date().timeIntervalSince1970
        fleet.served.feed = Self.feed(serial: 1, validUntil: now - 60)
        fleet.served.signature = try publisher.sign(fleet.served.feed)
        var r = fleet.fetch()
        #expect(r.status == 65)
        #expect(r.stderr.hasPrefix("adcache: error: signed feed refused: expired feed: its validUntil "), "\(r.stderr)")
        #expect(!Disk.exists(fleet.s.cache + "/index.json"))

        // Valid for a day by the device clock; the server says two days have passed.
        fleet.served.feed = Self.feed(serial: 2, validUntil: now + 86400)
        fleet.served.signature = try publisher.sign(fleet.served.feed)
        fleet.served.date = httpDate(now + 2 * 86400)
        r = fleet.fetch()
        #expect(r.status == 65, "\(r.stderr)")
        #expect(r.stderr.contains("expired feed"), "\(r.stderr)")
        #expect(!Disk.exists(fleet.s.cache + "/index.json"), "nothing recorded, not even a clock offset")

        fleet.served.date = nil
        r = fleet.fetch()
        #expect(r.status == 0, "\(r.stderr)")
        let later = Self.rfc3339(now + 2 * 86400)
        let next = fleet.run(["next", "--peek", "--at", later])
        #expect(next.stdout.isEmpty && next.status == 1, "\(next.stdout)")
        #expect(fleet.run(["list", "--at", later]).lines[1].hasPrefix("a   image  expired"))
        #expect(fleet.run(["list"]).lines[1].hasPrefix("a   image  ready"))
        #expect(fleet.run(["prune", "--at", later]).status == 0)
        #expect(fleet.run(["next", "--peek"]).status == 0, "the file is kept for a newer feed")
    }

    /// A 304 of both keeps the last verified pair; a new signature over a feed that answered
    /// 304 (the publisher re-signed it with a new key) is checked against the stored bytes.
    @Test func notModifiedFeedsAndSignatures() throws {
        let keys = TempDir(); defer { keys.remove() }
        let publisher = try Publisher("publisher", in: keys)
        let second = try Publisher("second", in: keys)
        let fleet = try Fleet(keys: [publisher, second]); defer { fleet.stop() }
        fleet.served.feed = Self.feed(serial: 1)
        fleet.served.signature = try publisher.sign(fleet.served.feed)
        #expect(fleet.fetch().status == 0)
        var r = fleet.fetch()
        #expect(r.status == 0, "\(r.stderr)")
        // Both asked conditionally (the asset, whose sha256 the feed gives, needs no request).
        let asked = fleet.server.log.suffix(2)
        #expect(asked.map(\.path) == ["/feed.json", "/feed.json.minisig"], "\(fleet.server.log.map(\.path))")
        #expect(asked.allSatisfy { $0.header("If-None-Match") != nil }, "both conditional")

        fleet.served.signature = try second.sign(fleet.served.feed)
        r = fleet.fetch()
        #expect(r.status == 0, "\(r.stderr)")
        #expect(fleet.server.log.suffix(2).first?.header("If-None-Match") != nil, "the feed answered 304")
        // The index keeps the signature that verified it now.
        let index = try String(contentsOfFile: fleet.s.cache + "/index.json", encoding: .utf8)
        #expect(index.contains("\"keyId\": \"\(second.id)\""), "\(index)")

        // The stored pair is checked again with the keys as configured now: the first key
        // retired, the pair signed by the second still stands (both answer 304) ...
        let secondOnly = fleet.s.dir.write("second.conf", "feed-key = \(second.publicLine)\n")
        r = Adcache.call(["--config", secondOnly, "--cache-dir", fleet.s.cache, "fetch", fleet.feedURL])
        #expect(r.status == 0, "\(r.stderr)")
        // ... and a new signature by the retired key over the same bytes is refused.
        fleet.served.signature = try publisher.sign(fleet.served.feed)
        let before = try fleet.snapshot()
        r = Adcache.call(["--config", secondOnly, "--cache-dir", fleet.s.cache, "fetch", fleet.feedURL])
        #expect(r.status == 65)
        #expect(r.stderr.contains("made by key \(publisher.id), which is not configured"), "\(r.stderr)")
        #expect(try fleet.snapshot() == before)
    }

    /// Local feeds: `FILE.minisig` beside the file; standard input needs `--signature FILE`.
    @Test func localFeedsAndStandardInput() throws {
        let keys = TempDir(); defer { keys.remove() }
        let publisher = try Publisher("publisher", in: keys)
        let fleet = try Fleet(keys: [publisher]); defer { fleet.stop() }
        _ = fleet.s.dir.write("a.jpg", Self.jpeg)
        let feed = Self.feed(serial: 1)
        let path = fleet.s.dir.write("feed.json", feed)
        var r = fleet.run(["fetch", path])
        #expect(r.status == 65)
        #expect(r.stderr == "adcache: error: feed signature: missing (no \(path).minisig)\n")
        _ = fleet.s.dir.write("feed.json.minisig", try publisher.sign(feed))
        r = fleet.run(["fetch", path])
        #expect(r.status == 0, "\(r.stderr)")

        let stdinFeed = Array(
            #"{"serial":2,"validUntil":\#(Int(Date().timeIntervalSince1970 + 3600)),"ads":[{"id":"b","url":"\#(fleet.server.url("/a.jpg"))","sha256":"\#(Media.sha256(Self.jpeg))"}]}"#
                .utf8)
        r = fleet.run(["fetch", "-"], stdin: stdinFeed)
        #expect(r.status == 64)
        #expect(r.stderr.contains("needs its signature (--signature FILE)"), "\(r.stderr)")
        let sig = fleet.s.dir.write("stdin.minisig", try publisher.sign(stdinFeed))
        r = fleet.run(["fetch", "-", "--signature", sig], stdin: stdinFeed + [0x20])
        #expect(r.status == 65, "one byte more: \(r.stderr)")
        r = fleet.run(["fetch", "-", "--signature", sig], stdin: stdinFeed)
        #expect(r.status == 0, "\(r.stderr)")
        #expect(fleet.run(["list"]).lines[1].hasPrefix("b "))
        // A bare fetch does not read standard input again, signed or not.
        let bare = Sandbox(); defer { bare.remove() }
        let b = Adcache.call(
            ["--config", fleet.conf, "--cache-dir", bare.cache, "fetch", "-", "--signature", sig], stdin: stdinFeed)
        #expect(b.status == 0, "\(b.stderr)")
        let again = Adcache.call(["--config", fleet.conf, "--cache-dir", bare.cache, "fetch"])
        #expect(again.status == 64 && again.stderr.contains("no FEED given"), "\(again.stderr)")
        // Without a key, --signature has nothing to check it with.
        let unsigned = Sandbox(); defer { unsigned.remove() }
        let u = Adcache.call(
            ["--config", "/dev/null", "--cache-dir", unsigned.cache, "fetch", "-", "--signature", sig],
            stdin: stdinFeed)
        #expect(u.status == 64 && u.stderr.contains("no feed key is configured"), "\(u.stderr)")
    }

    /// In a signed feed every ad needs `sha256`: without it, the ad is skipped with a
    /// warning (the signature would not cover the bytes shown).
    @Test func anAdWithoutItsDigestIsSkipped() throws {
        let keys = TempDir(); defer { keys.remove() }
        let publisher = try Publisher("publisher", in: keys)
        let fleet = try Fleet(keys: [publisher]); defer { fleet.stop() }
        let until = Int(Date().timeIntervalSince1970 + 3600)
        fleet.served.feed = Array(
            #"{"serial":1,"validUntil":\#(until),"ads":[{"id":"a","url":"a.jpg","sha256":"\#(Media.sha256(Self.jpeg))"},{"id":"b","url":"a.jpg?b"}]}"#
                .utf8)
        fleet.served.signature = try publisher.sign(fleet.served.feed)
        let r = fleet.fetch()
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stderr.contains("warning: skipping ad 'b': a signed feed's ad needs \"sha256\""), "\(r.stderr)")
        #expect(fleet.run(["list"]).lines.count == 2)
        // No serial or validUntil: refused.
        fleet.served.feed = Array(#"{"ads":[]}"#.utf8)
        fleet.served.signature = try publisher.sign(fleet.served.feed)
        let bare = fleet.fetch()
        #expect(bare.status == 65)
        #expect(bare.stderr.contains("it has no top-level \"serial\""), "\(bare.stderr)")
    }

    /// A key that does not parse is exit 64 naming file:line (a `.pub` file of the keys
    /// directory: naming the file), for every command but a launch; a mistyped keys
    /// directory too (it must not turn the checks off).
    @Test(arguments: ["list", "fetch", "prune", "config"])
    func aBadKeyIsAUsageError(_ command: String) throws {
        let s = Sandbox(); defer { s.remove() }
        let conf = s.dir.write("adcache.conf", "# keys\nfeed-key = RWQnotakey\n")
        var r = Adcache.call(["--config", conf, "--cache-dir", s.cache, command])
        #expect(r.status == 64)
        #expect(
            r.stderr
                == "adcache: error: \(conf):2: 'feed-key' is not a minisign public key (the base64 line of a minisign.pub)\n"
        )
        let dir = TempDir(); defer { dir.remove() }
        let bad = dir.write("broken.pub", "untrusted comment: nothing\nAAAA\n")
        let dirConf = s.dir.write("dir.conf", "feed-keys-dir = \(dir.path)\n")
        r = Adcache.call(["--config", dirConf, "--cache-dir", s.cache, command])
        #expect(r.status == 64)
        #expect(r.stderr.hasPrefix("adcache: error: \(bad): not a minisign public key"), "\(r.stderr)")
        let typo = s.dir.write("typo.conf", "feed-keys-dir = /etc/adcache/no-such-keys.d\n")
        r = Adcache.call(["--config", typo, "--cache-dir", s.cache, command])
        #expect(r.status == 64)
        #expect(r.stderr.contains("\(typo):1: 'feed-keys-dir': no directory"), "\(r.stderr)")
        // A launch reads no key: it never fails for one.
        #expect(Adcache.call(["--config", conf, "--cache-dir", s.cache, "next"]).status == 1)
    }

    /// The stored feed is written and read through the cache's directory handle: links
    /// planted at `feed.signed` and its temporary are replaced or refused, never followed.
    @Test func linksAtTheStoredFeedAreNeverFollowed() throws {
        let keys = TempDir(); defer { keys.remove() }
        let publisher = try Publisher("publisher", in: keys)
        let fleet = try Fleet(keys: [publisher]); defer { fleet.stop() }
        fleet.served.feed = Self.feed(serial: 1)
        fleet.served.signature = try publisher.sign(fleet.served.feed)
        #expect(fleet.fetch().status == 0)
        let outside = TempDir(); defer { outside.remove() }
        let victim = Array("root:x:0:0:root:/root:/bin/bash\n".utf8)
        for name in ["feed.signed", "feed.signed.tmp"] {
            _ = outside.write(name, victim)
            _ = Disk.remove(fleet.s.cache + "/" + name)
            #expect(symlink(outside.file(name), fleet.s.cache + "/" + name) == 0)
        }
        // A 304 with a link as the stored feed: no verified pair, so the feed is asked whole.
        var r = fleet.fetch()
        #expect(r.status == 0, "\(r.stderr)")
        #expect(!Disk.isLink(fleet.s.cache + "/feed.signed"))
        fleet.served.feed = Self.feed(serial: 2)
        fleet.served.signature = try publisher.sign(fleet.served.feed)
        r = fleet.fetch()
        #expect(r.status == 0, "\(r.stderr)")
        #expect(fleet.run(["clear"]).status == 0)
        for name in ["feed.signed", "feed.signed.tmp"] {
            #expect(FileManager.default.contents(atPath: outside.file(name)).map(Array.init) == victim, "\(name)")
        }
    }

    static func rfc3339(_ t: Double) -> String { String(Int(t)) }
}
