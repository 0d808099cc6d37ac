import Foundation
import TestSupport
import Testing

@testable import AdCacheKit

@Suite struct SelectionTests {
    let now = 1_803_859_200.0

    func pick(_ f: CacheFixture, _ options: NextOptions = NextOptions(), at t: Double? = nil) throws -> String? {
        try f.cache(at: t ?? now).shown(options)?.id
    }

    @Test func highestPriorityWins() throws {
        let f = try CacheFixture(); defer { f.remove() }
        try f.save([f.ready("low", priority: 1), f.ready("high", priority: 9), f.ready("mid", priority: 5)])
        #expect(try pick(f) == "high")
    }

    @Test func equalAdsRotateStrictlyEvenWithinOneSecond() throws {
        let f = try CacheFixture(); defer { f.remove() }
        try f.save([f.ready("c"), f.ready("a"), f.ready("b")])
        var seen: [String] = []
        for _ in 0..<6 { seen.append(try #require(try pick(f))) }   // all at the same instant
        #expect(seen == ["a", "b", "c", "a", "b", "c"])
    }

    @Test func soonestExpiryBreaksTiesThenID() throws {
        let f = try CacheFixture(); defer { f.remove() }
        try f.save([
            f.ready("late") { $0.expires = 1_900_000_000 }, f.ready("soon") { $0.expires = 1_850_000_000 },
            f.ready("never"),
        ])
        var peek = NextOptions(); peek.peek = true
        #expect(try pick(f, peek) == "soon")
    }

    @Test func recordsExactlyOneShowAndPeekRecordsNone() throws {
        let f = try CacheFixture(); defer { f.remove() }
        try f.save([f.ready("a") { $0.maxShows = 2 }])
        var peek = NextOptions(); peek.peek = true
        let peeked = try #require(try f.cache(at: now).shown(peek))
        #expect(peeked.remainingShows == 2)
        #expect(try f.index().ads[0].shows == 0)
        let shown = try #require(try f.cache(at: now).shown())
        #expect(shown.remainingShows == 1)
        #expect(try f.index().ads[0].shows == 1)
        #expect(try f.index().ads[0].lastShown == now)
        #expect(try pick(f) == "a")
        #expect(try pick(f) == nil)   // exhausted
        #expect(try f.index().ads[0].shows == 2)
    }

    @Test func startAndExpiryWindow() throws {
        let f = try CacheFixture(); defer { f.remove() }
        try f.save([
            f.ready("window") {
                $0.start = 1_803_859_200; $0.expires = 1_803_859_260
            }
        ])
        var peek = NextOptions(); peek.peek = true
        #expect(try pick(f, peek, at: now - 1) == nil)
        #expect(try pick(f, peek, at: now) == "window")
        #expect(try pick(f, peek, at: now + 59.9) == "window")
        #expect(try pick(f, peek, at: now + 60) == nil)
    }

    @Test func dailyCapResetsOnTheNextLocalDay() throws {
        let f = try CacheFixture(); defer { f.remove() }
        try f.save([f.ready("capped", priority: 5) { $0.maxShowsPerDay = 2 }, f.ready("other")])
        #expect(try pick(f, at: now + 10) == "capped")
        #expect(try pick(f, at: now + 20) == "capped")
        #expect(try pick(f, at: now + 30) == "other")
        #expect(try pick(f, at: now + 86400 + 10) == "capped")
    }

    @Test func minIntervalBetweenShows() throws {
        let f = try CacheFixture(); defer { f.remove() }
        try f.save([f.ready("a") { $0.minInterval = 3600 }])
        #expect(try pick(f, at: now) == "a")
        #expect(try pick(f, at: now + 3599) == nil)
        #expect(try pick(f, at: now + 3600) == "a")
    }

    @Test func clockJumpingBackNeitherFailsNorRevivesExpiredAds() throws {
        let f = try CacheFixture(); defer { f.remove() }
        try f.save([
            f.ready("a") {
                $0.minInterval = 600; $0.expires = 1_803_859_300
            }
        ])
        #expect(try pick(f, at: now) == "a")
        // The clock jumps back a year: the last show is far "in the future"; still counted.
        #expect(try pick(f, at: now - 86400 * 365) == "a")
        #expect(try f.index().ads[0].shows == 2)
        // Forward past expiry: never shown again.
        #expect(try pick(f, at: now + 86400 * 365) == nil)
    }

    @Test func typeAndPlacementFilter() throws {
        let f = try CacheFixture(); defer { f.remove() }
        try f.save([
            f.ready("img", priority: 9), f.ready("vid") { $0.type = .video },
            f.ready("banner", priority: 10) { $0.placement = "banner" },
        ])
        var o = NextOptions(); o.peek = true
        #expect(try pick(f, o) == "img")
        o.type = .video
        #expect(try pick(f, o) == "vid")
        o.type = nil; o.placement = "banner"
        #expect(try pick(f, o) == "banner")
        o.placement = "interstitial"
        #expect(try pick(f, o) == nil)
    }

    @Test func cooldownAppliesToPeekToo() throws {
        let f = try CacheFixture(); defer { f.remove() }
        try f.save([f.ready("a"), f.ready("b")])
        #expect(try pick(f, at: now) == "a")
        var o = NextOptions(); o.cooldown = 30
        #expect(try pick(f, o, at: now + 10) == nil)
        o.peek = true
        #expect(try pick(f, o, at: now + 10) == nil)
        #expect(try pick(f, o, at: now + 31) == "b")
    }

    @Test func missingOrWrongSizeFileIsSkippedNotFatal() throws {
        let f = try CacheFixture(); defer { f.remove() }
        let gone = f.ready("gone", priority: 9)
        let wrong = f.ready("wrong", priority: 8) { $0.bytes = 5 }
        try f.save([gone, wrong, f.ready("ok")])
        Disk.remove(f.store.assetPath(gone.file!))
        #expect(try pick(f) == "ok")
        let states = try f.cache(at: now).list().map(\.state)
        #expect(states == [.missing, .missing, .ready])
    }

    @Test func withdrawnPendingAndFailedAreNeverShown() throws {
        let f = try CacheFixture(); defer { f.remove() }
        try f.save([
            f.ready("w") { $0.state = .withdrawn }, f.ready("p") { $0.state = .pending },
            f.ready("x") { $0.state = .failed },
        ])
        #expect(try pick(f) == nil)
    }

    @Test func emptyOrAbsentCacheHasNothingToShow() throws {
        let dir = TempDir(); defer { dir.remove() }
        let store = CacheStore(directory: dir.path + "/none")
        #expect(try AdCache(.init(directory: store.directory)).shown() == nil)
        #expect(!Disk.exists(dir.path + "/none"))   // next creates nothing
    }

    @Test func listStates() throws {
        let f = try CacheFixture(); defer { f.remove() }
        try f.save([
            f.ready("ready"),
            f.ready("scheduled") { $0.start = 1_803_859_300 },
            f.ready("expired") { $0.expires = 1_803_859_100 },
            f.ready("exhausted") {
                $0.maxShows = 1; $0.shows = 1
            },
            f.ready("withdrawn") { $0.state = .withdrawn },
            f.ready("pending") {
                $0.state = .pending; $0.file = nil
            },
            f.ready("failed") {
                $0.state = .failed; $0.file = nil; $0.error = "HTTP 404"
            },
            f.ready("resting") {
                $0.maxShowsPerDay = 1; $0.showDay = Time.localDay(now); $0.showsOnDay = 1
            },
        ])
        let entries = try f.cache(at: now).list()
        #expect(entries.map(\.state.rawValue) == entries.map(\.id))
        #expect(ListedAd.json(entries).contains(#""error": "HTTP 404""#))
    }

    /// `list` and `next` agree: every ad `list` calls ready is one `next` may show, and no
    /// other (the rule lives in one place).
    @Test func listAndNextAgreeOnWhatIsReady() throws {
        let f = try CacheFixture(); defer { f.remove() }
        try f.save([
            f.ready("capped") {
                $0.maxShowsPerDay = 2; $0.showDay = Time.localDay(now); $0.showsOnDay = 2
            },
            f.ready("interval") {
                $0.minInterval = 600; $0.lastShown = now - 60
            },
            f.ready("later") { $0.start = now + 10 },
            f.ready("ok-a") {
                $0.minInterval = 600; $0.lastShown = now - 601
            },
            f.ready("ok-b") {
                $0.maxShowsPerDay = 2; $0.showDay = Time.localDay(now) - 1; $0.showsOnDay = 2
            },
        ])
        let listed = try f.cache(at: now).list()
        #expect(listed.filter { $0.state == .resting }.map(\.id) == ["capped", "interval"])
        let ready = Set(listed.filter { $0.state == .ready }.map(\.id))
        var shown = Set<String>()
        for _ in 0..<4 {
            if let ad = try f.cache(at: now).shown(NextOptions(peek: true)) { shown.insert(ad.id) };
            _ = try f.cache(at: now).shown()
        }
        #expect(ready == ["ok-a", "ok-b"])
        #expect(shown.isSubset(of: ready) && !shown.isEmpty)
    }
}

/// The choice is made without sorting the eligible ads (`SelectionPolicy.choose`): over
/// random indexes and random missing files it is the choice a stable sort by priority and
/// `prefers` gives, as it was made before.
@Suite struct ChoiceWithoutSortTests {
    /// The choice as a sort makes it: highest priority first, `prefers` within; the first
    /// present of a group of equal weights, else the rotation over the present ones in order.
    static func reference(
        _ index: CacheIndex, at t: Double, options: NextOptions, filePresent: (AdRecord) -> Bool
    ) -> Int? {
        let local = Time.local(t)
        let eligible = index.ads.indices.filter {
            SelectionPolicy.isEligible(index.ads[$0], at: t, local: local, options: options)
        }.sorted { a, b in
            let pa = index.ads[a].priority, pb = index.ads[b].priority
            return pa != pb ? pa > pb : SelectionPolicy.prefers(index.ads[a], index.ads[b])
        }
        var start = 0
        while start < eligible.count {
            let priority = index.ads[eligible[start]].priority
            var end = start
            while end < eligible.count, index.ads[eligible[end]].priority == priority { end += 1 }
            let group = Array(eligible[start..<end])
            start = end
            let weight = index.ads[group[0]].weight
            if group.allSatisfy({ index.ads[$0].weight == weight }) {
                if let i = group.first(where: { filePresent(index.ads[$0]) }) { return i }
            } else {
                let present = group.filter { filePresent(index.ads[$0]) }
                if !present.isEmpty {   // the most credit, the first in order on a tie
                    let (i, _) = SelectionPolicy.rotate(index, present, key: options.rotationKey)
                    return i
                }
            }
        }
        return nil
    }

    @Test func theChoiceIsTheSortedOne() {
        var rng = SystemRandomNumberGenerator()
        let t = 1_803_859_200.0
        var chosen = Set<Int?>()
        for round in 0..<400 {
            var index = CacheIndex()
            let count = Int.random(in: 1...40, using: &rng)
            for n in 0..<count {
                var r = AdRecord(ad: FeedAd(id: String(format: "ad-%03d", (n * 37 + round) % 1000), url: "u\(n)"))
                r.state = .ready
                r.type = .image
                r.file = String(repeating: "a", count: 64) + ".jpg"
                r.priority = Int64.random(in: 0...2, using: &rng)
                r.weight = round % 3 == 0 ? Int64.random(in: 1...3, using: &rng) : 1
                r.lastShowSeq = Bool.random(using: &rng) ? nil : Int64.random(in: 0...5, using: &rng)
                r.expires = Bool.random(using: &rng) ? nil : t + Double(Int.random(in: 1...4, using: &rng))
                index.ads.append(r)
            }
            // Missing files: none, a few, or most (past the eight the first pass checks).
            let missingShare = [0, 30, 90][round % 3]
            let missing = Set(
                index.ads.indices.filter { _ in Int.random(in: 0..<100, using: &rng) < missingShare }
                    .map { index.ads[$0].id })
            let present: (AdRecord) -> Bool = { !missing.contains($0.id) }
            let got = SelectionPolicy.choose(in: index, at: t, options: NextOptions(), filePresent: present)?.position
            let want = Self.reference(index, at: t, options: NextOptions(), filePresent: present)
            #expect(got == want, "round \(round)")
            chosen.insert(got)
        }
        #expect(chosen.contains(nil) && chosen.count > 10, "both outcomes and many positions")
    }
}
