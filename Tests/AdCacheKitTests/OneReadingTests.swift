import Foundation
import TestSupport
import Testing

@testable import AdCacheKit

/// SPEC §6 v4 *One reading of a record*: every command reads an index record, and a journal
/// line, by the same rules — a launch (the selection read, which keeps only what the choice
/// needs) never shows, records or bills what `list` (the whole read) drops.
@Suite struct OneReadingTests {
    /// Values of every JSON type, and numbers a reader refuses.
    static let damages = [
        "7", "-1", "1e400", "1.5", "\"x\"", "\"\"", "true", "null", "[]", "[1]", "[\"x\",2]", "{}", "{\"a\":1}",
        "{\"impression\":[3]}", "{\"impression\":\"x\"}", "{\"impression\":[\"https://t.example/i\"]}",
    ]

    /// Random indexes, one value of one record replaced by a value of any type (or a field
    /// added): the selection read keeps exactly the records the whole read keeps.
    @Test func theSelectionReadDropsWhatTheWholeReadDrops() throws {
        var rng = SplitMix(seed: 0x0DE_AD)
        let keys = AdRecord.Decoded.Field.allCases.map(\.rawValue)
        var dropped = 0
        for round in 0..<600 {
            let index = SelectionDigestTests.randomIndex(1 + Int(rng.next() % 12), &rng)
            var json = try #require(
                try JSONSerialization.jsonObject(with: Data(try IndexCoder.encode(index))) as? [String: Any])
            var ads = try #require(json["ads"] as? [[String: Any]])
            let victim = Int(rng.next() % UInt64(ads.count))
            let key = keys[Int(rng.next() % UInt64(keys.count))]
            let damage = Self.damages[Int(rng.next() % UInt64(Self.damages.count))]
            ads[victim][key] = "@@DAMAGE@@"
            json["ads"] = ads
            let text = String(decoding: try JSONSerialization.data(withJSONObject: json), as: UTF8.self)
                .replacingOccurrences(of: "\"@@DAMAGE@@\"", with: damage)
            let bytes = Array(text.utf8)
            let whole = try IndexCoder.decode(bytes)
            let selection = try IndexCoder.decode(bytes, forSelection: true)
            #expect(
                whole.index.ads.map(\.id) == selection.index.ads.map(\.id),
                "round \(round): \(key) = \(damage): whole \(whole.index.ads.map(\.id)), selection \(selection.index.ads.map(\.id))"
            )
            if whole.index.ads.count < ads.count { dropped += 1 }
        }
        #expect(dropped > 100, "the damage dropped records often enough to mean something: \(dropped)")
    }

    /// A journal line is a record for every reader or for none: the launch's and the fold's
    /// (which keeps the trackers) agree, whatever the line's `trackers` hold.
    @Test func everyReaderTakesTheSameJournalLines() throws {
        let base = JournalRecord(event: "impression", id: "a", at: 1_800_000_000, day: 20_833, nonce: "n1")
        var seq = base
        seq.seq = 3
        let template = String(decoding: seq.line(), as: UTF8.self).trimmingCharacters(in: .newlines)
        for damage in Self.damages {
            let line = Array(template.dropLast().appending(",\"trackers\":\(damage)}").utf8)
            let light = line.withUnsafeBufferPointer { JournalRecord(line: $0, deliveries: false) }
            let full = line.withUnsafeBufferPointer { JournalRecord(line: $0, deliveries: true) }
            #expect((light == nil) == (full == nil), "trackers \(damage)")
        }
    }

    /// A line that replays the last folded record (its nonce, at its line number) in the
    /// journal that came after the fold is not the fold's mark: the shows before it count.
    @Test func aReplayedMarkHidesNoShow() throws {
        let dir = TempDir(); defer { dir.remove() }
        let journal = Journal(in: CacheDirectory(path: dir.path))
        func show(_ nonce: String, at line: Int) -> [UInt8] {
            var r = JournalRecord(event: "impression", id: "a", at: 1_800_000_000, day: 20_833, nonce: nonce)
            r.seq = Int64(line + 1)
            return r.line()
        }
        // A fold took the old journal's lines 0-2: its mark is the third.
        _ = dir.write("journal", show("n0", at: 0) + show("n1", at: 1) + show("n2", at: 2))
        let mark = JournalMark(after: try #require(try journal.read(warn: { _ in }).last))
        // The journal after the fold: two shows, then the old third line copied at line 2.
        _ = dir.write("journal", show("x0", at: 0) + show("x1", at: 1) + show("n2", at: 2))
        let unread = JournalMark.unread(try journal.read(warn: { _ in }), after: mark)
        #expect(unread.map(\.nonce) == ["x0", "x1"], "\(unread.map(\.nonce))")
        // The mark itself, in its own file, still marks (nothing after it is unread).
        _ = dir.write("journal", show("n0", at: 0) + show("n1", at: 1) + show("n2", at: 2) + show("y", at: 3))
        #expect(JournalMark.unread(try journal.read(warn: { _ in }), after: mark).map(\.nonce) == ["y"])
        // Written and read back; a mark written before prefixes were kept reads by number.
        let legacy = JournalMark(nonce: mark.nonce, line: mark.line)
        #expect(JournalMark(text: mark.text) == mark && JournalMark(text: legacy.text) == legacy)
    }
}
