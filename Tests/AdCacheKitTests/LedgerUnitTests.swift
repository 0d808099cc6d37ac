import Foundation
import TestSupport
import Testing

@testable import AdCacheKit

/// SPEC §14's building blocks: BLAKE2b, the device key's files, the ledger's append and cut.
@Suite struct LedgerUnitTests {
    @Test func blake2bIsLibcryptos() throws {
        let api = try SigningAPI.shared.get()
        for n in [0, 1, 127, 128, 129, 256, 1000] {
            let data = (0..<n).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) }
            #expect(Blake2b.hash(data, length: 64) == (try api.blake2b512(data)), "\(n) bytes")
        }
        // RFC 7693 Appendix A: BLAKE2b-512("abc") begins BA 80 A5 3F.
        #expect(Blake2b.hash(Array("abc".utf8), length: 64).prefix(4) == [0xBA, 0x80, 0xA5, 0x3F])
    }

    @Test func aDeviceKeyReadsBackAndSignsAsMinisignVerifies() throws {
        let key = try DeviceKey.generate()
        let again = try DeviceKey(secretKeyFile: key.secretKeyFile)
        #expect(again.keyID == key.keyID && again.publicKey == key.publicKey && again.seed == key.seed)
        let message = Array("a ledger line\n".utf8)
        let sig = try MinisignSignature(
            Array(try key.signatureFile(of: message, trustedComment: "adcache ledger x").utf8))
        try sig.verify(message, with: try MinisignKey(key.publicKeyFile))
        #expect(throws: AdCacheError.self) {
            try sig.verify(message + [0x0A], with: try MinisignKey(key.publicKeyFile))
        }
    }

    static func entry(_ at: Double, _ nonce: String) -> LedgerEntry {
        LedgerEntry(at: at, id: "a", event: "show", nonce: nonce)
    }

    static func lines(_ path: String) throws -> [LedgerLine] {
        try FileIO.read(path).split(separator: 0x0A).map { try #require(LedgerLine(Array($0))) }
    }

    @Test func anAppendSkipsWhatTheLedgerHoldsAndRepairsATornLine() throws {
        let dir = TempDir()
        defer { dir.remove() }
        let ledger = Ledger(directory: dir.path + "/ledger")
        let now = 2_000_000_000.0
        try ledger.append([Self.entry(now, "n1"), Self.entry(now, "n2")], now: now)
        // A fold cut short after its append folds the same records again, and more.
        try ledger.append([Self.entry(now, "n1"), Self.entry(now, "n2"), Self.entry(now, "n3")], now: now)
        // A torn line: never part of the chain.
        let fd = open(ledger.path, O_WRONLY | O_APPEND)
        _ = write(fd, "{\"seq\":4,\"at", 12)
        close(fd)
        try ledger.append([Self.entry(now, "n3"), Self.entry(now, "n4")], now: now)
        let read = try Self.lines(ledger.path)
        #expect(read.map(\.nonce) == ["n1", "n2", "n3", "n4"])
        #expect(read.map(\.seq) == [1, 2, 3, 4])
        #expect(read[0].prev == LedgerLine.genesis)
        let bytes = try FileIO.read(ledger.path)
        let raw = bytes.split(separator: 0x0A)
        for i in 1..<raw.count { #expect(read[i].prev == (try SHA256Hasher.hex(bytes: Array(raw[i - 1])))) }
    }

    @Test func linesOlderThanNinetyDaysAreCutFromTheFront() throws {
        let dir = TempDir()
        defer { dir.remove() }
        let ledger = Ledger(directory: dir.path)
        let day = 86400.0, now = 2_000_000_000.0
        try ledger.append((0..<10).map { Self.entry(now - Double(100 - $0) * day, "old\($0)") }, now: now - 100 * day)
        try ledger.append([Self.entry(now - 50 * day, "mid")], now: now - 50 * day)
        let before = try Self.lines(ledger.path)
        try ledger.append([Self.entry(now, "new")], now: now)
        let after = try Self.lines(ledger.path)
        #expect(after.map(\.nonce) == ["mid", "new"], "cut to 90 days")
        #expect(after[0].seq == 11 && after[0].prev == before[10].prev, "the first kept line keeps its seq and prev")
        // Only once the first line is 97 days old: no rewrite for a day's lines.
        try ledger.append([Self.entry(now + 30 * day, "later")], now: now + 30 * day)
        #expect(try Self.lines(ledger.path).count == 3)
    }
}
