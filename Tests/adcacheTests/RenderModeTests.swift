import Foundation
import TestSupport
import Testing

/// SPEC §8 v4 *An impression is a render*: with `next --render` (or `impression = render`) a
/// show is recorded at once — caps, rotation, `stats` shows — but its impression is queued
/// only when the launcher confirms it with `adcache event impression ID --show TOKEN`; a show
/// never confirmed within `render-timeout` is `unrendered` and never billed. Through the built
/// binary, against a tracker server on 127.0.0.1.
@Suite struct RenderModeTests {
    final class Rig: @unchecked Sendable {
        let dir = TempDir()
        let server: LoopbackServer
        let conf: String
        var cache: String { dir.path + "/cache" }

        init(settings: String = "", vast: Bool = false) throws {
            let base = Locked("")
            server = try LoopbackServer { r in
                let b = base.value
                switch r.path {
                case "/feed.json":
                    return .text(
                        200,
                        #"{"ads":[{"id":"a","url":"a.jpg","maxShows":5,"tracking":{"impression":["\#(b)/imp?ad=[ADID]"]}},{"id":"b","url":"b.png","priority":-1}]}"#
                    )
                case "/tag.xml":
                    return .text(
                        200,
                        VASTTests.inline(b, id: "v").replacingOccurrences(
                            of: "<Duration>",
                            with:
                                "<TrackingEvents><Tracking event=\"start\">\(b)/vstart</Tracking></TrackingEvents><Duration>"
                        ))
                case "/a.jpg": return .file(Media.jpeg(), for: r)
                case "/b.png": return .file(Media.png(), for: r)
                case "/v.mp4": return .file(Media.mp4(), for: r)
                default: return .text(204, "")
                }
            }
            base.value = server.url("")
            conf = dir.write("adcache.conf", settings)
            let fetch = run(["fetch", "--no-progress", "--no-report", server.url(vast ? "/tag.xml" : "/feed.json")])
            try #require(fetch.status == 0, "\(fetch.stderr)")
        }

        func run(_ args: [String]) -> Run {
            Adcache.run(["--config", conf, "--cache-dir", cache] + args)
        }

        func hits(_ prefix: String) -> Int { server.log.filter { $0.path.hasPrefix(prefix) }.count }

        func day(_ id: String) throws -> [String: Any] {
            let stats = try jsonObject(run(["stats", "--json"]).stdout)
            return (stats["days"] as? [[String: Any]])?.first { $0["id"] as? String == id } ?? [:]
        }

        func remove() {
            server.stop()
            dir.remove()
        }
    }

    @Test func onlyAConfirmedShowIsBilledAndOnlyOnce() throws {
        let rig = try Rig()
        defer { rig.remove() }
        let next = rig.run(["next", "--render", "--json"])
        #expect(next.status == 0, "\(next.stderr)")
        let shown = try jsonObject(next.stdout)
        let token = try #require(shown["show"] as? String)
        #expect(shown["id"] as? String == "a")
        #expect(rig.run(["report"]).status == 0)
        #expect(rig.hits("/imp") == 0, "no impression before the confirmation")
        #expect(try rig.day("a")["shows"] as? Int == 1, "the show counts at once")
        #expect(try rig.day("a")["impressions"] as? Int == 0)

        let confirm = rig.run(["event", "impression", "a", "--show", token])
        #expect(confirm.status == 0, "\(confirm.stderr)")
        #expect(rig.run(["report"]).status == 0)
        #expect(rig.hits("/imp") == 1, "exactly one after it")
        #expect(try rig.day("a")["impressions"] as? Int == 1)

        let again = rig.run(["event", "impression", "a", "--show", token])
        #expect(again.status == 0)
        #expect(again.stderr.contains("confirmed already"), "\(again.stderr)")
        #expect(rig.run(["report"]).status == 0)
        #expect(rig.hits("/imp") == 1, "a second confirmation queues nothing")
        // The show counted for the cap: 4 left of 5.
        let peek = try jsonObject(rig.run(["next", "--peek", "--json"]).stdout)
        #expect(peek["remainingShows"] as? Int == 4)
        #expect(peek["show"] is NSNull, "a peek records no show")
    }

    @Test func aTokenThatNamesNoAwaitingShowIs65() throws {
        let rig = try Rig()
        defer { rig.remove() }
        let token = try #require(try jsonObject(rig.run(["next", "--render", "--json"]).stdout)["show"] as? String)
        #expect(rig.run(["event", "impression", "a", "--show", "nosuchshow"]).status == 65)
        #expect(rig.run(["event", "impression", "b", "--show", token]).status == 65, "another ad's show")
        #expect(rig.run(["event", "impression", "a"]).status == 64, "impression without --show")
        #expect(rig.run(["event", "click", "a", "--show", token]).status == 64)
        #expect(rig.run(["next", "--render", "--choice"]).status == 64)
        #expect(rig.run(["report"]).status == 0)
        #expect(rig.hits("/imp") == 0)
    }

    /// Not confirmed within `render-timeout`: `unrendered`, never billed; a late confirmation
    /// is 65. A show the launcher chose still counts for the caps.
    @Test func aShowNeverConfirmedIsUnrendered() throws {
        let rig = try Rig(settings: "impression = render\nrender-timeout = 60\n")
        defer { rig.remove() }
        let hourAgo = String(Int(Date().timeIntervalSince1970) - 3600)
        let old = try jsonObject(rig.run(["next", "--json", "--at", hourAgo]).stdout)
        let token = try #require(old["show"] as? String)
        let late = rig.run(["event", "impression", "a", "--show", token])
        #expect(late.status == 65, "\(late.stderr)")
        #expect(late.stderr.contains("render-timeout"), "\(late.stderr)")
        #expect(rig.run(["report"]).status == 0)
        #expect(rig.hits("/imp") == 0)
        let day = try rig.day("a")
        #expect(
            day["shows"] as? Int == 1 && day["unrendered"] as? Int == 1 && day["impressions"] as? Int == 0, "\(day)")
        // `--choice` on the command line wins over the configuration.
        #expect(rig.run(["next", "--choice"]).status == 0)
        #expect(rig.run(["report"]).status == 0)
        #expect(rig.hits("/imp") == 1)
    }

    /// A show a fold already counted unrendered — also one whose fold was cut short right
    /// after it wrote the queue — is never billed by a late confirmation: one rule decides,
    /// the fold's, on the real clock.
    @Test func aShowCountedUnrenderedIsNeverBilled() throws {
        let rig = try Rig(settings: "render-timeout = 60\n")
        defer { rig.remove() }
        let hourAgo = String(Int(Date().timeIntervalSince1970) - 3600)
        let token = try #require(
            try jsonObject(rig.run(["next", "--render", "--json", "--at", hourAgo]).stdout)["show"] as? String)
        let cut = Adcache.run(
            ["--config", rig.conf, "--cache-dir", rig.cache, "report"],
            environment: ["ADCACHE_CRASH_AT": "fold.afterEvents"])
        #expect(cut.status == 222, "\(cut.stderr)")
        let late = rig.run(["event", "impression", "a", "--show", token, "--at", hourAgo])
        #expect(late.status == 65, "the preview's clock does not reopen it: \(late.stderr)")
        #expect(rig.run(["report"]).status == 0)
        #expect(rig.hits("/imp") == 0)
        let day = try rig.day("a")
        #expect(day["unrendered"] as? Int == 1 && day["impressions"] as? Int == 0, "\(day)")
    }

    /// A VAST video's `start` waits for the confirmation too, and is counted with it.
    @Test func aVASTStartWaitsForTheConfirmation() throws {
        let rig = try Rig(vast: true)
        defer { rig.remove() }
        let token = try #require(try jsonObject(rig.run(["next", "--render", "--json"]).stdout)["show"] as? String)
        #expect(rig.run(["report"]).status == 0)
        #expect(rig.hits("/vstart") == 0 && rig.hits("/imp-v") == 0)
        #expect(try rig.day("v")["starts"] as? Int == 0)
        #expect(rig.run(["event", "impression", "v", "--show", token]).status == 0)
        #expect(rig.run(["report"]).status == 0)
        #expect(rig.hits("/vstart") == 1 && rig.hits("/imp-v") == 1)
        #expect(try rig.day("v")["starts"] as? Int == 1)
    }
}
