import Foundation
import TestSupport
import Testing

@testable import AdCacheKit

/// Issue 23: the index record's fields come from one table (scripts/record-fields.py), which
/// generates the decoder's switch, the writer and `takeTexts`. These tests fail when the
/// generated file is out of date, or when a field is written but not read back (or read for
/// a selection but not brought back by `takeTexts`).
@Suite struct RecordSchemaTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().path

    @Test func theGeneratedFieldsAreUpToDate() {
        let r = runProgram("/usr/bin/python3", [Self.root + "/scripts/record-fields.py", "--check"])
        #expect(r.status == 0, "\(r.stderr)")
    }

    /// A record with every field set to something other than its default.
    static func full() -> AdRecord {
        var ad = FeedAd(id: "every-field", url: "https://cdn.example/a.mp4")
        ad.type = .video
        var r = AdRecord(ad: ad)
        r.placement = "lobby"
        r.state = .ready
        r.file = String(repeating: "a", count: 64) + ".mp4"
        r.bytes = 4096
        r.fileMtime = 1_800_000_000_123_456_789
        r.sha256 = String(repeating: "b", count: 64)
        r.fileSha256 = String(repeating: "c", count: 64)
        r.etag = "\"e\""
        r.lastModified = "Mon, 02 Nov 2026 10:00:00 GMT"
        r.start = 1_800_000_000
        r.expires = 1_900_000_000
        r.maxShows = 9
        r.maxShowsPerDay = 3
        r.minInterval = 60
        r.duration = 4
        r.priority = 7
        r.clickUrl = "https://example.com/"
        r.meta = .object(["k": .string("v")])
        r.shows = 2
        r.lastShown = 1_850_000_000
        r.lastShowSeq = 11
        r.showDay = 21_000
        r.showsOnDay = 1
        r.error = "HTTP 500"
        r.weight = 3
        r.picks = 5
        r.pickEpoch = 4
        r.tracking = ["impression": ["https://t.example/i"], "click": ["https://t.example/c"]]
        r.schedule.windows = Schedule.windows(["07:00-09:30"])!
        r.schedule.days = Schedule.dayMask(["fri", "sat"])
        r.vast = VASTFields(skipOffset: 2.5, adServingId: "srv", universalAdId: "Ad-ID 1")
        r.freshUntil = 1_860_000_000
        r.feedType = .video
        r.failures = 2
        r.failedFor = "key"
        r.retryAt = 1_870_000_000
        r.failedEtag = "\"f\""
        r.failedLastModified = "Tue, 03 Nov 2026 10:00:00 GMT"
        return r
    }

    @Test func everyFieldWrittenIsReadBack() throws {
        var index = CacheIndex()
        index.ads = [Self.full()]
        let bytes = try IndexCoder.encode(index)
        let whole = try IndexCoder.decode(bytes)
        #expect(whole.index.ads == index.ads, "a field the writer writes and the decoder does not read")
        func written(_ r: AdRecord) -> [UInt8] {
            var w = JSONWriter(indent: 2)
            r.write(&w)
            return w.out
        }
        #expect(written(whole.index.ads[0]) == written(index.ads[0]), "byte-identical when written again")
        // A selection read skips the texts; takeTexts brings every one of them back.
        var chosen = try #require(try IndexCoder.decode(bytes, forSelection: true).index.ads.first)
        #expect(chosen != index.ads[0], "the selection read skipped something")
        chosen.takeTexts(of: whole.index.ads[0])
        #expect(chosen == index.ads[0], "a field a selection read skips and takeTexts does not bring back")
    }

    /// Every field a feed's ad has is carried into the record and back (a 304 of the feed
    /// rebuilds the ads from the index): a field added to `FeedAd` but not to the table's
    /// `FROM_FEED` (or the rules of id, url and type) fails here. (`fileSize` is checked
    /// against the download, not kept.)
    @Test func whatTheFeedGivesIsCarriedBothWays() {
        var ad = FeedAd(id: "every-field", url: "https://cdn.example/a.mp4")
        ad.type = .video
        ad.start = 1_800_000_000
        ad.expires = 1_900_000_000
        ad.maxShows = 9
        ad.maxShowsPerDay = 3
        ad.minInterval = 60
        ad.duration = 4
        ad.priority = 7
        ad.placement = "lobby"
        ad.clickUrl = "https://example.com/"
        ad.sha256 = String(repeating: "b", count: 64)
        ad.meta = .object(["k": .string("v")])
        ad.weight = 3
        ad.schedule.windows = Schedule.windows(["07:00-09:30"])!
        ad.schedule.days = Schedule.dayMask(["fri"])
        ad.tracking = ["impression": ["https://t.example/i"]]
        ad.vast = VASTFields(skipOffset: 2.5, adServingId: "srv", universalAdId: "Ad-ID 1")
        #expect(AdRecord(ad: ad).feedAd == ad)
        var updated = AdRecord(ad: FeedAd(id: "every-field", url: ad.url))
        updated.update(from: ad)
        #expect(updated.feedAd == ad)
    }
}
