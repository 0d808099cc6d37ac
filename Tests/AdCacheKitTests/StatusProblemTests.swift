import Foundation
import Testing

@testable import AdCacheKit

/// SPEC §13's problems at their edges, on values (the command-line tests provoke each one on a
/// real cache; a signature already expired cannot be fetched, so its edge is here).
@Suite struct StatusProblemTests {
    static let now: Double = 1_800_000_000

    static func names(_ s: Status, freeShare: Double? = 0.5, staleAfter: Double = 86400) -> [String] {
        var options = StatusOptions()
        options.staleAfter = staleAfter
        var index = CacheIndex()
        index.ads = [AdRecord(ad: FeedAd(id: "a", url: "https://x/a.jpg"))]
        return AdCache.problems(s, index: index, now: now, options: options, freeShare: freeShare).map(\.name)
    }

    static var healthy: Status {
        var s = Status(cacheDirectory: "/c")
        s.ads = [(.ready, 1)]
        s.lastFetch = .init(at: Date(timeIntervalSince1970: now - 60), exit: 0, error: nil, feed: "f")
        s.lastSuccess = (Date(timeIntervalSince1970: now - 60), "f")
        return s
    }

    @Test func eachEdge() {
        #expect(Self.names(Self.healthy).isEmpty)
        var s = Self.healthy
        s.lastSuccess = (Date(timeIntervalSince1970: Self.now - 86400), "f")
        #expect(Self.names(s).isEmpty, "exactly stale-after is not stale yet")
        s.lastSuccess = (Date(timeIntervalSince1970: Self.now - 86401), "f")
        #expect(Self.names(s) == ["stale"])
        #expect(Self.names(s, staleAfter: 31_536_000).isEmpty)

        s = Self.healthy
        s.signed = .init(keyId: "K", serial: 1, validUntil: Date(timeIntervalSince1970: Self.now + 86401))
        #expect(Self.names(s).isEmpty)
        s.signed?.validUntil = Date(timeIntervalSince1970: Self.now + 86400)
        #expect(Self.names(s) == ["signature-expiring"])
        s.signed?.validUntil = Date(timeIntervalSince1970: Self.now)
        #expect(Self.names(s) == ["signature-expired"])

        s = Self.healthy
        s.clockOffset = 300
        #expect(Self.names(s).isEmpty)
        s.clockOffset = -301
        #expect(Self.names(s) == ["clock-offset"])

        s = Self.healthy
        s.oldestPending = Date(timeIntervalSince1970: Self.now - 86400)
        #expect(Self.names(s).isEmpty)
        s.oldestPending = Date(timeIntervalSince1970: Self.now - 86401)
        #expect(Self.names(s) == ["queue-stuck"])

        #expect(Self.names(Self.healthy, freeShare: 0.05).isEmpty)
        #expect(Self.names(Self.healthy, freeShare: 0.0499) == ["disk-low"])
        #expect(Self.names(Self.healthy, freeShare: nil).isEmpty, "unknown is no problem")

        s = Self.healthy
        s.lastFetch?.exit = 75
        s.ads = [(.pending, 1)]
        s.droppedLastDay = 1
        s.lastSuccess = nil
        #expect(Self.names(s) == ["never-fetched", "failing", "nothing-ready", "events-dropped"])
    }

    /// Dropped deliveries are counted by hour and forgotten after a day for `status`, kept in
    /// the totals forever.
    @Test func droppedInTheLastDay() throws {
        var log = EventLog()
        log.noteDropped(3, at: Self.now - 86400 - 3600)
        log.noteDropped(2, at: Self.now - 60)
        #expect(log.droppedInDay(before: Self.now) == 2)
        let again = try EventLog.decode(log.encode())
        #expect(again.droppedInDay(before: Self.now) == 2)
        #expect(again.droppedRecent == log.droppedRecent)
        log.noteDropped(Int64.max, at: Self.now)
        #expect(log.droppedInDay(before: Self.now) == Int64.max, "saturates")
    }
}
