#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// The names of files in `assets/` (SPEC §3, §6): `<sha256 of the URL>.<ext>`, or
/// `<sha256 of the URL>-<version>.<ext>`. Nothing else read from the index is ever opened or
/// deleted, whatever user adcache runs as: a hostile or corrupt index cannot name a path
/// outside the cache (`../../etc/passwd`), nor a file of the cache that is not an asset.
enum AssetName {
    /// The name a new download of `url` takes: versioned, so that it never replaces the
    /// file the committed index names (a crash before the commit leaves the old version
    /// showing); the fetch unlinks the old file after the commit.
    static func make(url: String, format: MediaFormat, version: String = newVersion()) throws -> String {
        try SHA256Hasher.hex(url) + "-" + version + "." + format.fileExtension
    }

    /// 12 characters of [0-9a-z]: the time in milliseconds and 4 random ones.
    static func newVersion() -> String {
        let ms = String(UInt64(max(0, Date().timeIntervalSince1970 * 1000)), radix: 36)
        let random = (0..<4).map { _ in String(Int.random(in: 0..<36), radix: 36) }.joined()
        return String((ms + random).suffix(16))
    }

    /// True for `<64 lowercase hex>[-<1–16 of [0-9a-z]>].<1–8 of [0-9a-z]>` and nothing else.
    static func isValid(_ name: String) -> Bool {
        var name = name   // a native string's bytes in place (a launch checks each record's file)
        return name.withUTF8(isValid)
    }

    private static func isValid(_ b: UnsafeBufferPointer<UInt8>) -> Bool {
        guard b.count >= 66, b.count <= 64 + 17 + 9 else { return false }
        func alnum(_ c: UInt8) -> Bool { c &- 48 < 10 || c &- 97 < 26 }
        // The 64 hex digits eight at a time: every byte below 0x80 and in 0-9 or a-f.
        let ones: UInt64 = 0x0101_0101_0101_0101
        let highs = ones &* 0x80
        for word in 0..<8 {
            let x = UnsafeRawPointer(b.baseAddress! + word * 8).loadUnaligned(as: UInt64.self)
            guard x & highs == 0 else { return false }
            let digit = (x &+ ones &* (0x80 - 0x30)) & ~(x &+ ones &* (0x7F - 0x39))
            let letter = (x &+ ones &* (0x80 - 0x61)) & ~(x &+ ones &* (0x7F - 0x66))
            guard (digit | letter) & highs == highs else { return false }
        }
        var i = 64
        if b[i] == UInt8(ascii: "-") {
            let start = i + 1
            i = start
            while i < b.count, alnum(b[i]) { i += 1 }
            guard (1...16).contains(i - start) else { return false }
        }
        guard i < b.count, b[i] == UInt8(ascii: ".") else { return false }
        let ext = i + 1
        guard (1...8).contains(b.count - ext) else { return false }
        for k in ext..<b.count where !alnum(b[k]) { return false }
        return true
    }

    /// The URL hash a valid name starts with.
    static func urlHash(_ name: String) -> String { String(name.prefix(64)) }
}
