import Foundation
import TestSupport
import Testing

@testable import AdCacheKit

@Suite struct MediaTests {
    @Test func sniffsEveryAcceptedFormat() {
        #expect(MediaFormat.sniff([0xFF, 0xD8, 0xFF, 0xE0]) == .jpeg)
        #expect(MediaFormat.sniff([0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]) == .png)
        #expect(MediaFormat.sniff(Array("GIF89a..".utf8)) == .gif)
        #expect(MediaFormat.sniff(Array("RIFF\0\0\0\0WEBPVP8 ".utf8)) == .webp)
        #expect(MediaFormat.sniff([0, 0, 0, 0x18] + Array("ftypisom".utf8)) == .mp4)
        #expect(MediaFormat.sniff([0, 0, 0, 0x14] + Array("ftypqt  ".utf8)) == .mov)
        #expect(MediaFormat.sniff([0x1A, 0x45, 0xDF, 0xA3, 0x01]) == .webm)
        #expect(MediaFormat.sniff(Array("<!DOCTYPE html>".utf8)) == nil)
        #expect(MediaFormat.sniff([]) == nil)
    }

    @Test func sha256OfKnownInput() throws {
        #expect(try SHA256Hasher.hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
    }
}

@Suite struct DigestTests {
    /// FIPS 180-2's known answers, and one digest fed in uneven pieces.
    @Test func sha256MatchesTheStandardsKnownAnswers() throws {
        #expect(try SHA256Hasher.hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        #expect(try SHA256Hasher.hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        let million = [UInt8](repeating: UInt8(ascii: "a"), count: 1_000_000)
        let h = try SHA256Hasher()
        var offset = 0
        var step = 1
        while offset < million.count {
            let end = min(million.count, offset + step)
            million[offset..<end].withUnsafeBytes { h.update($0) }
            offset = end
            step = step * 3 + 7
        }
        #expect(h.finalizeHex() == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0")
    }
}
