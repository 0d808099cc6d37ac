import Foundation
import TestSupport
import Testing

@testable import AdCacheKit

/// SPEC v2 §2 `weight`, `hours`, `days`; §4 the choice and `resting`.
@Suite struct ScheduleTests {
    let now = 1_803_859_200.0   // 2027-03-01T00:00:00Z, a Monday (the tests run with TZ=UTC)

    func parse(_ ads: String) throws -> Feed {
        try FeedParser(baseURL: URL(string: "https://ads.example.com/feed.json")!).parse(Array(ads.utf8))
    }

    @Test func weightsHoursAndDaysAreReadAndBadOnesIgnoredWithAWarning() throws {
        let feed = try parse(
            #"""
            [{"id":"a","url":"a.jpg","weight":3,"hours":["07:00-09:30","22:00-02:00"],"days":["Mon","fri"]},
             {"id":"b","url":"b.jpg","weight":0,"hours":["7-9"],"days":["someday"]},
             {"id":"c","url":"c.jpg","weight":"1001","hours":"07:00-09:00","days":[]},
             {"id":"d","url":"d.jpg","hours":["00:00-24:00","23:00-00:00"]}]
            """#)
        #expect(feed.ads.map(\.id) == ["a", "b", "c", "d"], "a bad value never drops the ad")
        let a = feed.ads[0]
        #expect(a.weight == 3)
        #expect(a.schedule.hoursText == ["07:00-09:30", "22:00-02:00"])
        #expect(a.schedule.daysText == ["mon", "fri"])
        #expect(feed.ads[1].weight == 1 && feed.ads[1].schedule.isAlways)
        #expect(feed.ads[2].weight == 1 && feed.ads[2].schedule.isAlways)
        #expect(feed.ads[3].schedule.hoursText == ["00:00-24:00", "23:00-00:00"])
        let warned = feed.warnings.map(\.message)
        #expect(warned.count == 6, "\(warned)")
        #expect(warned.contains("ad 'b': ignoring \"weight\": it must be a whole number from 1 to 1000"))
        #expect(warned.contains("ad 'c': ignoring \"hours\": it must be a list of \"HH:MM-HH:MM\" windows"))
        #expect(warned.contains("ad 'b': ignoring \"days\": it must be a list of \"mon\" … \"sun\""))
        #expect(feed.warnings.allSatisfy { $0.adID != nil })
    }

    @Test func aWindowAcrossMidnightBelongsToTheDayItStartsOn() throws {
        let fridayNights = try #require(
            try parse(#"[{"url":"a.jpg","hours":["22:00-02:00"],"days":["fri"]}]"#).ads.first)
        let s = fridayNights.schedule
        func at(_ weekday: Int, _ h: Int, _ m: Int = 0) -> Bool {
            s.allows(LocalTime(day: 0, minute: h * 60 + m, weekday: weekday))
        }
        #expect(at(5, 22) && at(5, 23, 59) && at(6, 0) && at(6, 1, 59))   // Friday 22:00 to Saturday 02:00
        #expect(!at(5, 21, 59) && !at(6, 2) && !at(6, 22) && !at(0, 1) && !at(5, 1))
    }

    @Test func outsideItsHoursAnAdRestsAndListSaysUntilWhen() throws {
        let f = try CacheFixture()
        defer { f.remove() }
        var breakfast = f.ready("breakfast", priority: 5)
        breakfast.schedule.windows = [Schedule.window("07:00-09:00")!]
        let always = f.ready("always")
        try f.save([breakfast, always])
        // 06:30 UTC: resting until 07:00; the other ad shows.
        let early = f.cache(at: now + 6.5 * 3600)
        let listed = try early.list()
        #expect(listed.first { $0.id == "breakfast" }?.state == .resting)
        #expect(listed.first { $0.id == "breakfast" }?.restingUntil == Date(timeIntervalSince1970: now + 7 * 3600))
        #expect(try early.shown(NextOptions(peek: true))?.id == "always")
        // 07:30: inside, and its priority wins.
        #expect(try f.cache(at: now + 7.5 * 3600).shown(NextOptions(peek: true))?.id == "breakfast")
        // Weekends only: Monday 07:30 rests until Saturday 07:00.
        breakfast.schedule.days = 1 << 6 | 1 << 0
        try f.save([breakfast, always])
        let monday = try f.cache(at: now + 7.5 * 3600).list().first { $0.id == "breakfast" }
        #expect(monday?.state == .resting)
        #expect(monday?.restingUntil == Date(timeIntervalSince1970: now + 5 * 86400 + 7 * 3600))
    }

    /// 1,000 shows across three weighted ads: at every step each ad's count is within one show
    /// of its weighted share.
    @Test func weightedSharesHoldAtEveryStepOfAThousandShows() throws {
        let f = try CacheFixture(memory: true)
        defer { f.remove() }
        let weights: [String: Int64] = ["a": 5, "b": 3, "c": 2]
        try f.save(weights.keys.sorted().map { id in f.ready(id) { $0.weight = weights[id]! } })
        let cache = f.cache(at: now)
        var counts: [String: Int] = [:]
        var worst = 0.0
        for n in 1...1000 {
            let id = try #require(try cache.shown()?.id)
            counts[id, default: 0] += 1
            for (ad, w) in weights {
                let share = Double(n) * Double(w) / 10
                let off = abs(Double(counts[ad, default: 0]) - share)
                worst = max(worst, off)
                #expect(off < 1, "after \(n) shows \(ad) has \(counts[ad, default: 0]), share \(share)")
            }
        }
        #expect(counts == ["a": 500, "b": 300, "c": 200])
        #expect(try f.index().ads.map(\.shows).reduce(0, +) == 1000)
        print("weighted rotation: 1000 shows, largest distance from a share: \(worst)")
    }

    @Test func threeToOneGivesThreeAAndOneBInEveryFourShows() throws {
        let f = try CacheFixture()
        defer { f.remove() }
        try f.save([f.ready("a") { $0.weight = 3 }, f.ready("b")])
        let cache = f.cache(at: now)
        let shown = try (0..<12).map { _ in try #require(try cache.shown()?.id) }
        for start in stride(from: 0, to: 12, by: 4) {
            #expect(shown[start..<(start + 4)].filter { $0 == "a" }.count == 3, "\(shown)")
        }
        // Peeking shows what the next call would, and changes nothing.
        let peeked = try cache.shown(NextOptions(peek: true))?.id
        #expect(try cache.shown()?.id == peeked)
    }

    /// When an ad joins or leaves (capped, expired, withdrawn), the shares start over.
    @Test func theSharesStartOverWhenTheSetChanges() throws {
        let f = try CacheFixture()
        defer { f.remove() }
        try f.save([
            f.ready("a") { $0.weight = 2 },
            f.ready("b") {
                $0.weight = 1; $0.maxShows = 2
            },
        ])
        let cache = f.cache(at: now)
        let first = try (0..<6).map { _ in try #require(try cache.shown()?.id) }
        #expect(first.filter { $0 == "b" }.count == 2)
        #expect(
            try f.index().ads.first { $0.id == "b" }?.state(at: now, local: Time.local(now), filePresent: true)
                == .exhausted)
        // b is used up: a alone, then a new ad joins with its weight: a fresh rotation.
        var index = try f.index()
        index.ads.append(f.ready("c") { $0.weight = 2 })
        try f.store.save(index)
        let next = try (0..<4).map { _ in try #require(try cache.shown()?.id) }
        #expect(next.filter { $0 == "c" }.count == 2 && next.filter { $0 == "a" }.count == 2, "\(next)")
    }

    @Test func equalWeightsStillRotateStrictly() throws {
        let f = try CacheFixture()
        defer { f.remove() }
        try f.save([f.ready("c") { $0.weight = 4 }, f.ready("a") { $0.weight = 4 }, f.ready("b") { $0.weight = 4 }])
        let cache = f.cache(at: now)
        #expect(try (0..<6).map { _ in try cache.shown()?.id } == ["a", "b", "c", "a", "b", "c"])
        #expect(try f.index().ads.allSatisfy { $0.picks == nil }, "no rotation state for equal weights")
    }

    /// A clock set back never lifts a daily cap: a day before the last one counted counts as it.
    @Test func aClockSetBackDoesNotLiftTheDailyCap() throws {
        let f = try CacheFixture()
        defer { f.remove() }
        try f.save([f.ready("a") { $0.maxShowsPerDay = 1 }])
        #expect(try f.cache(at: now + 86400).shown()?.id == "a")
        #expect(try f.cache(at: now).shown() == nil, "yesterday, by a clock set back")
        #expect(try f.cache(at: now + 2 * 86400).shown()?.id == "a")
    }
}
