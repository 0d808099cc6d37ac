import Foundation
import TestSupport
import Testing

@testable import AdCacheKit

/// Issue 24: `index.sel`, the selection digest, is a cache of the selection read of
/// `index.json` and nothing more. These tests fail when the digest gives a launch anything
/// other than what parsing the JSON gives, or when a digest that is not the digest of these
/// very bytes (stale, damaged, forged in part) is believed.
@Suite struct SelectionDigestTests {
    /// An index of `count` records with every kind of value the digest stores: absent and
    /// present optionals, schedules, VAST fields, escaped and non-ASCII texts, extremes.
    static func randomIndex(_ count: Int, _ rng: inout SplitMix) -> CacheIndex {
        func maybe<T>(_ v: @autoclosure () -> T) -> T? { rng.next() % 3 == 0 ? nil : v() }
        func int(_ range: ClosedRange<Int64>) -> Int64 {
            let width = UInt64(bitPattern: range.upperBound &- range.lowerBound)
            return range.lowerBound &+ Int64(bitPattern: width == .max ? rng.next() : rng.next() % (width + 1))
        }
        var index = CacheIndex()
        index.showSeq = 1_000
        index.lastShown = 1_800_000_000.25
        index.reportUrl = "https://r.example/pop"
        for n in 0..<count {
            var r =
                n == 0 ? RecordSchemaTests.full() : AdRecord(ad: FeedAd(id: "ad-\(n)", url: "https://c.example/\(n)"))
            r.id = ["ad-\(n)", "é-\(n)", "q\"\\-\(n)", String(repeating: "x", count: 40) + "\(n)"][Int(rng.next() % 4)]
            r.placement = ["splash", "lobby", "ü\u{7}", ""][Int(rng.next() % 4)]
            r.state = [.pending, .ready, .failed, .withdrawn][Int(rng.next() % 4)]
            r.type = maybe([AdType.image, .video][Int(rng.next() % 2)])
            r.feedType = maybe(.video)
            r.file = maybe(String(repeating: "0123456789abcdef", count: 4) + "-v\(n).jpg")
            r.bytes = maybe(int(0...Int64.max))
            r.fileMtime = maybe(int(Int64.min...Int64.max))
            r.start = maybe(Double(int(-62_000_000_000...250_000_000_000)) / 4)
            r.expires = maybe(1_900_000_000.5)
            r.maxShows = maybe(int(0...1_000))
            r.maxShowsPerDay = maybe(int(0...9))
            r.minInterval = maybe(int(0...86_400))
            r.vast = maybe(VASTFields(skipOffset: maybe(2.5), adServingId: maybe("srv"), universalAdId: maybe("id ✓")))
            let durations = r.vast == nil ? FeedAd.durationRange : FeedAd.vastDurationRange
            r.duration = Int(int(Int64(durations.lowerBound)...Int64(durations.upperBound)))
            r.priority = int(-5...100)
            r.shows = int(0...AdRecord.counts.upperBound)
            r.lastShown = maybe(1_850_000_000.125)
            r.lastShowSeq = maybe(int(0...1_000))
            r.showDay = maybe(Int(int(0...40_000)))
            r.showsOnDay = maybe(int(0...9))
            r.weight = int(1...1_000)
            r.picks = maybe(int(0...99))
            r.pickEpoch = maybe(int(0...99))
            r.failures = maybe(int(1...64))
            r.retryAt = maybe(1_870_000_000)
            r.freshUntil = maybe(1_860_000_000)
            r.schedule.windows =
                rng.next() % 2 == 0 ? [] : Schedule.windows(["07:00-09:30", "22:00-24:00", "23:00-01:00"])!
            r.schedule.days = maybe(UInt8(1 + rng.next() % 0x7F))
            index.ads.append(r)
        }
        return index
    }

    /// The selection read of `bytes` through the digest, when the digest is taken.
    static func throughDigest(_ bytes: [UInt8]) throws -> IndexCoder.Decoded? {
        let parsed = try IndexCoder.decode(bytes, forSelection: true)
        guard let digest = SelectionDigest.encode(parsed, of: bytes),
            let ads = bytes.withUnsafeBufferPointer({ SelectionDigest.decode(digest, of: $0) })
        else { return nil }
        return try IndexCoder.decode(bytes, forSelection: true, digest: ads)
    }

    static func spans(_ d: IndexCoder.Decoded) -> [Int] { d.ranges.flatMap { [$0.start, $0.end] } }

    @Test func theDigestGivesWhatParsingGives() throws {
        var rng = SplitMix(seed: 0x5E1)
        for round in 0..<200 {
            let bytes = try IndexCoder.encode(Self.randomIndex(Int(rng.next() % 30), &rng))
            let parsed = try IndexCoder.decode(bytes, forSelection: true)
            #expect(parsed.repairs.isEmpty, "round \(round): \(parsed.repairs.map(\.message))")
            let digested = try #require(try Self.throughDigest(bytes), "round \(round): the digest was refused")
            #expect(digested.index == parsed.index, "round \(round)")
            #expect(Self.spans(digested) == Self.spans(parsed), "round \(round)")
            #expect(digested.repairs.isEmpty && parsed.repairs.isEmpty)
            // The chosen record read whole from its span, as a launch completes it.
            for i in parsed.index.ads.indices {
                var a = parsed.index.ads[i]
                var b = digested.index.ads[i]
                CacheStore.Loaded(index: parsed.index, source: bytes, ranges: parsed.ranges).complete(&a, at: i)
                CacheStore.Loaded(index: digested.index, source: bytes, ranges: digested.ranges).complete(&b, at: i)
                #expect(a == b, "round \(round), record \(i)")
            }
        }
    }

    @Test func aDigestOfOtherBytesIsRefused() throws {
        var rng = SplitMix(seed: 0xD16)
        let bytes = try IndexCoder.encode(Self.randomIndex(5, &rng))
        let digest = try #require(SelectionDigest.encode(try IndexCoder.decode(bytes, forSelection: true), of: bytes))
        // Any one byte of the index changed, one added or one removed: not its digest.
        for at in stride(from: 0, to: bytes.count, by: 7) {
            var changed = bytes
            changed[at] ^= 0x01
            #expect(changed.withUnsafeBufferPointer { SelectionDigest.decode(digest, of: $0) } == nil, "byte \(at)")
        }
        #expect((bytes + [0x20]).withUnsafeBufferPointer { SelectionDigest.decode(digest, of: $0) } == nil)
        #expect(bytes.dropLast().withUnsafeBufferPointer { SelectionDigest.decode(digest, of: $0) } == nil)
        // Any one byte of the digest damaged, or the digest cut short: refused, never believed.
        for at in digest.indices {
            var damaged = digest
            damaged[at] ^= UInt8(1 << (at % 8))
            #expect(
                bytes.withUnsafeBufferPointer { SelectionDigest.decode(damaged, of: $0) } == nil, "digest byte \(at)")
        }
        for length in stride(from: 0, to: digest.count, by: 5) {
            let cut = Array(digest.prefix(length))
            #expect(bytes.withUnsafeBufferPointer { SelectionDigest.decode(cut, of: $0) } == nil, "cut at \(length)")
        }
        #expect(bytes.withUnsafeBufferPointer { SelectionDigest.decode(digest, of: $0) } != nil)
    }

    /// A digest forged to match the index (its hashes recomputed) still passes every check a
    /// parsed record passes: a file name that is not an asset's is never believed.
    @Test func aForgedDigestNamesNoFileOutsideTheAssets() throws {
        var index = CacheIndex()
        var r = AdRecord(ad: FeedAd(id: "a", url: "https://c.example/a"))
        r.state = .ready
        r.file = String(repeating: "a", count: 64) + ".jpg"
        index.ads = [r]
        let bytes = try IndexCoder.encode(index)
        var parsed = try IndexCoder.decode(bytes, forSelection: true)
        let honest = try #require(SelectionDigest.encode(parsed, of: bytes))
        #expect(bytes.withUnsafeBufferPointer { SelectionDigest.decode(honest, of: $0) }?.records.first?.file == r.file)
        for hostile in ["../../etc/passwd", "index.json", String(repeating: "a", count: 64) + "/x.jpg"] {
            parsed.index.ads[0].file = hostile
            let forged = try #require(SelectionDigest.encode(parsed, of: bytes))
            #expect(bytes.withUnsafeBufferPointer { SelectionDigest.decode(forged, of: $0) } == nil, "\(hostile)")
        }
        parsed.index.ads[0].file = r.file
        parsed.index.ads[0].shows = -1
        let negative = try #require(SelectionDigest.encode(parsed, of: bytes))
        #expect(bytes.withUnsafeBufferPointer { SelectionDigest.decode(negative, of: $0) } == nil)
    }

    /// An index the decoder had to repair gets no digest: the launch reads the JSON and says
    /// what it repaired, as before.
    @Test func aRepairedIndexGetsNoDigest() throws {
        var rng = SplitMix(seed: 7)
        var index = Self.randomIndex(3, &rng)
        index.ads[2].id = index.ads[1].id   // a second record with the same id is dropped
        let bytes = try IndexCoder.encode(index)
        let parsed = try IndexCoder.decode(bytes, forSelection: true)
        #expect(!parsed.repairs.isEmpty)
        #expect(SelectionDigest.encode(parsed, of: bytes) == nil)
    }
}

/// The digest in a cache directory: written with every index, used by a launch, and never
/// believed once the index it was written for has changed.
@Suite struct SelectionDigestFileTests {
    static let t = 1_803_859_200.0

    @Test func everySaveWritesTheDigestAndALaunchUsesIt() throws {
        let f = try CacheFixture()
        defer { f.remove() }
        try f.save([f.ready("a", priority: 1), f.ready("b", priority: 2)])
        let bytes = try f.store.indexFile.read()
        let ads = try #require(f.store.digest(of: bytes), "save wrote the digest of what it wrote")
        #expect(ads.records.map(\.id) == ["a", "b"])
        #expect(try f.cache(at: Self.t).shown(NextOptions(peek: true))?.id == "b")
        // Proof that a launch takes the records from the digest: one written for these bytes
        // but naming another order of priorities decides the choice.
        var decoded = try IndexCoder.decode(bytes, forSelection: true)
        decoded.index.ads[0].priority = 9
        try f.store.digestFile.writeAtomically(try #require(SelectionDigest.encode(decoded, of: bytes)))
        #expect(try f.cache(at: Self.t).shown(NextOptions(peek: true))?.id == "a")
        // list, why and prune read the JSON: the index as it is.
        #expect(try f.cache(at: Self.t).list().first { $0.id == "a" }?.priority == 1)
    }

    /// A save stamps `index.json` with a modification time of its own, and a launch that finds
    /// the file still so (the same inode, size and time to the nanosecond) reads only the
    /// digest, the bytes around the records, and the chosen record: shown whole.
    @Test func aLaunchReadsOnlyTheChosenRecordOfAStampedIndex() throws {
        let f = try CacheFixture()
        defer { f.remove() }
        try f.save([
            f.ready("a", priority: 1),
            f.ready("b", priority: 2) {
                $0.clickUrl = "https://click.example/b"
                $0.meta = .object(["title": .string("B")])
            },
        ])
        let decoded = try #require(f.store.readIndexByDigest(), "the stamped index is read through its digest")
        #expect(decoded.source.isEmpty && decoded.file != nil)
        // A recording launch reads the index before it takes the journal's lock, with each
        // record's place by id: built then, not under the lock (50 launches at once at 10,000
        // ads lost shows to the lock's timeout while each built it there).
        #expect(f.store.snapshotForSelection()?.decoded.positions == ["a": 0, "b": 1])
        let shown = try #require(try f.cache(at: Self.t).shown(NextOptions(peek: true)))
        #expect(shown.id == "b" && shown.clickUrl == "https://click.example/b")
        #expect(shown.meta == .object(["title": .string("B")]))
        // The one way past the stamp: the owner writing the file in place and setting its time
        // back to the stamp by hand. The launch then trusts the digest, as documented.
        var st = stat()
        try #require(stat(f.store.indexPath, &st) == 0)
        var text = try String(contentsOfFile: f.store.indexPath, encoding: .utf8)
        text = text.replacingOccurrences(of: #""priority":2"#, with: #""priority":0"#)
        try Data(text.utf8).write(to: URL(fileURLWithPath: f.store.indexPath))
        var times = [st.st_atim, st.st_mtim]
        try #require(utimensat(AT_FDCWD, f.store.indexPath, &times, 0) == 0)
        #expect(f.store.readIndexByDigest() != nil)
        #expect(try f.cache(at: Self.t).shown(NextOptions(peek: true))?.id == "b")
        // Any other write leaves the kernel's time: the digest is no longer taken for it.
        try Data(text.utf8).write(to: URL(fileURLWithPath: f.store.indexPath))
        #expect(f.store.readIndexByDigest() == nil)
        #expect(try f.cache(at: Self.t).shown(NextOptions(peek: true))?.id == "a")
    }

    /// An index changed by anything but a save (a hand edit, an older adcache, a copy from
    /// elsewhere): the digest no longer matches and the launch reads the JSON.
    @Test func aHandEditedIndexIsReadAsEdited() throws {
        let f = try CacheFixture()
        defer { f.remove() }
        try f.save([f.ready("a", priority: 1), f.ready("b", priority: 2)])
        #expect(try f.cache(at: Self.t).shown(NextOptions(peek: true))?.id == "b")
        // The same length, one digit changed, in place (the same file): b falls below a.
        var text = try String(contentsOfFile: f.store.indexPath, encoding: .utf8)
        let b = try #require(text.range(of: #""id":"b""#))
        let shows = try #require(text.range(of: #""priority":2"#, range: b.lowerBound..<text.endIndex))
        text.replaceSubrange(shows, with: #""priority":0"#)
        let fd = open(f.store.indexPath, O_WRONLY)
        try #require(fd >= 0)
        _ = Array(text.utf8).withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        close(fd)
        #expect(try f.cache(at: Self.t).shown(NextOptions(peek: true))?.id == "a")
        #expect(try f.cache(at: Self.t).shown()?.id == "a")
    }

    /// An index written by an adcache before the digest (or whose digest was lost): launches
    /// read the JSON; the next prune writes the digest without changing the index.
    @Test func pruneWritesAMissingDigest() throws {
        let f = try CacheFixture()
        defer { f.remove() }
        try f.save([f.ready("a")])
        #expect(f.store.digestFile.remove())
        let before = try f.store.indexFile.read()
        #expect(try f.cache(at: Self.t).shown(NextOptions(peek: true))?.id == "a")
        #expect(!f.store.digestFile.exists, "a launch writes no digest")
        _ = try f.cache(at: Self.t).prune()
        #expect(try f.store.indexFile.read() == before, "prune changed nothing else")
        #expect(f.store.digest(of: before) != nil)
        // A damaged digest is replaced the same way.
        var damaged = try f.store.digestFile.read()
        damaged[damaged.count - 1] ^= 0xFF
        try f.store.digestFile.writeAtomically(damaged)
        #expect(f.store.digest(of: before) == nil)
        #expect(try f.cache(at: Self.t).shown(NextOptions(peek: true))?.id == "a")
        _ = try f.cache(at: Self.t).prune()
        #expect(f.store.digest(of: before) != nil)
        #expect(f.store.readIndexByDigest() != nil)
        // A copy of the index (another file, its digest still right by the hash): read whole
        // and hashed, until a prune stamps it.
        let copy = f.store.indexPath + ".copy"
        try Data(before).write(to: URL(fileURLWithPath: copy))
        try #require(rename(copy, f.store.indexPath) == 0)
        #expect(f.store.readIndexByDigest() == nil)
        #expect(f.store.digest(of: before) != nil)
        _ = try f.cache(at: Self.t).prune()
        #expect(f.store.readIndexByDigest() != nil)
        // A digest that is current is left as it is.
        let written = f.store.digestFile.identity
        _ = try f.cache(at: Self.t).prune()
        #expect(f.store.digestFile.identity == written)
    }

    /// A digest that cannot be written (here its temporary's name is taken by a folder that
    /// cannot be removed; a full disk does the same): the save still succeeds, the old
    /// digest goes, and launches read the JSON.
    @Test func aDigestThatCannotBeWrittenLeavesNone() throws {
        let f = try CacheFixture()
        defer { f.remove() }
        try f.save([f.ready("a", priority: 1)])
        #expect(f.store.digestFile.exists)
        let blocker = f.store.directory + "/" + SelectionDigest.fileName + ".tmp"
        try #require(mkdir(blocker, 0o755) == 0 && mkdir(blocker + "/x", 0o755) == 0)
        try f.save([f.ready("a", priority: 1), f.ready("b", priority: 2)])
        #expect(!f.store.digestFile.exists, "the old digest is gone, not left beside the new index")
        #expect(try f.cache(at: Self.t).shown(NextOptions(peek: true))?.id == "b")
    }

    @Test func clearRemovesTheDigest() throws {
        let f = try CacheFixture()
        defer { f.remove() }
        try f.save([f.ready("a")])
        #expect(f.store.digestFile.exists)
        _ = try f.cache(at: Self.t).clear()
        #expect(!f.store.digestFile.exists)
        #expect(try f.cache(at: Self.t).shown(NextOptions(peek: true)) == nil)
    }
}

extension CacheStore {
    /// The records of `index.sel` when it is the digest of these bytes of `index.json`.
    func digest(of bytes: [UInt8]) -> SelectionDigest.Ads? {
        guard let digest = try? digestFile.read() else { return nil }
        return bytes.withUnsafeBufferPointer { SelectionDigest.decode(digest, of: $0) }
    }

    /// A launch's read of the index through its digest alone, as `readIndex` tries it.
    func readIndexByDigest() -> IndexCoder.Decoded? {
        (try? digestFile.read()).flatMap(readIndexByDigest)
    }
}
