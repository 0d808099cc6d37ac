import Foundation
import TestSupport
import Testing

/// SPEC §12: what fleets need around the network — a server's `Retry-After` remembered
/// between runs, and a site cache (Squid) in front of the origin.
@Suite struct FleetTests {
    static func httpDate(_ t: Double) -> String { SignedFeedTests.httpDate(t) }

    /// 503 and 429, in seconds and as an HTTP-date: the run that is told exits 69 and
    /// remembers; the next run makes no request at all, warns with the time and exits 75;
    /// once the time has passed, a success clears it.
    @Test(arguments: [(503, "120"), (429, "date")])
    func aServerThatAsksToWaitIsLeftAlone(_ status: Int, _ after: String) throws {
        let answer = ProtectedStatus()
        let jpeg = Media.jpeg()
        let server = try LoopbackServer { r in
            if r.path == "/feed.json", let (code, header) = answer.value {
                return LoopbackServer.Response(
                    status: code, headers: [("Retry-After", header)], body: Array("busy".utf8))
            }
            if r.path == "/feed.json" { return .text(200, #"[{"id":"a","url":"a.jpg"}]"#) }
            return .file(jpeg, for: r, etag: "\"a\"")
        }
        defer { server.stop() }
        let s = Sandbox(); defer { s.remove() }
        #expect(s.run(["fetch", server.url("/feed.json")]).status == 0)
        let header = after == "date" ? Self.httpDate(Date().timeIntervalSince1970 + 120) : after
        answer.value = (status, header)
        var r = s.run(["fetch"])
        #expect(r.status == 69, "\(r.stderr)")
        let index = try String(contentsOfFile: s.cache + "/index.json", encoding: .utf8)
        #expect(index.contains("\"retryAfter\": \"http://127.0.0.1:\(server.port) "), "\(index)")
        let asked = server.requests(to: "/feed.json").count
        r = s.run(["fetch"])
        #expect(r.status == 75)
        #expect(r.stderr.hasPrefix("adcache: warning: the feed server asked for no requests before "), "\(r.stderr)")
        #expect(r.stdout.isEmpty)
        #expect(server.requests(to: "/feed.json").count == asked, "no request inside the wait")
        #expect(s.run(["fetch", "--revalidate"]).status == 75, "--revalidate does not override it")
        #expect(s.run(["next"]).status == 0, "the cached ad still shows")
        // Past the time (a run two minutes and a bit later): asked again; a success clears it.
        answer.value = nil
        try Self.shiftRetryAfter(s.cache, by: -200)
        r = s.run(["fetch"])
        #expect(r.status == 0, "\(r.stderr)")
        #expect(try !String(contentsOfFile: s.cache + "/index.json", encoding: .utf8).contains("retryAfter"))
    }

    /// At most a day is remembered; a time further ahead (a clock that jumped) is forgotten.
    @Test func theWaitIsCappedAtADay() throws {
        let asked = ProtectedStatus()
        asked.value = (503, "999999")
        let server = try LoopbackServer { r in
            if let (code, header) = asked.value {
                return LoopbackServer.Response(status: code, headers: [("Retry-After", header)], body: [])
            }
            return .text(200, "[]")
        }
        defer { server.stop() }
        let s = Sandbox(); defer { s.remove() }
        #expect(s.run(["fetch", server.url("/feed.json")]).status == 69)
        let index = try jsonObject(String(contentsOfFile: s.cache + "/index.json", encoding: .utf8))
        let until = try #require((index["retryAfter"] as? String)?.split(separator: " ").last.flatMap { Double($0) })
        #expect(abs(until - Date().timeIntervalSince1970 - 86400) < 60, "capped at 24 h: \(until)")
        // A remembered time more than a day ahead is forgotten: the run asks.
        try Self.shiftRetryAfter(s.cache, by: 7 * 86400)
        let before = server.log.count
        asked.value = nil
        #expect(s.run(["fetch", server.url("/feed.json")]).status == 0)
        #expect(server.log.count == before + 1)
    }

    /// Moves the remembered time (the tests do not sleep for it).
    static func shiftRetryAfter(_ cache: String, by seconds: Double) throws {
        let path = cache + "/index.json"
        var text = try String(contentsOfFile: path, encoding: .utf8)
        let regex = try NSRegularExpression(pattern: #""retryAfter": "(\S+) ([0-9]+)""#)
        let match = try #require(regex.firstMatch(in: text, range: NSRange(text.startIndex..., in: text)))
        let t = Double(text[Range(match.range(at: 2), in: text)!])! + seconds
        text.replaceSubrange(Range(match.range(at: 2), in: text)!, with: String(Int64(t)))
        try text.write(toFile: path, atomically: true, encoding: .utf8)
    }
}

/// A value the server's handler reads while the test changes it.
final class ProtectedStatus: @unchecked Sendable {
    private let lock = NSLock()
    private var _value: (Int, String)?
    var value: (Int, String)? {
        get { lock.lock(); defer { lock.unlock() }; return _value }
        set { lock.lock(); _value = newValue; lock.unlock() }
    }
}
