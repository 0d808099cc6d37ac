import Foundation
import Testing

@testable import AdCacheKit

@Suite struct JSONKeyTableTests {
    enum Key: String, CaseIterable, Sendable { case a, id, url, ab, shows, showsOnDay }

    /// Keys are matched as bytes against the names of their length; an escaped key is
    /// decoded first, an unknown one (of a known length or not) is nil.
    @Test func keysAreMatchedExactly() throws {
        let text = #"{"id":1,"url":2,"ab":3,"a":4,"shows":5,"showsOnDay":6,"\u0069d":7,"ix":8,"":9,"showsOnDays":10}"#
        let bytes = Array(text.utf8)
        var seen: [String] = []
        try bytes.withUnsafeBufferPointer { buffer in
            var s = JSONScanner(buffer)
            try s.object(JSONKeyTable<Key>()) { s, key in
                seen.append("\(key?.rawValue ?? "nil")=\(try s.int())")
            }
            try s.finish()
        }
        #expect(
            seen == ["id=1", "url=2", "ab=3", "a=4", "shows=5", "showsOnDay=6", "id=7", "nil=8", "nil=9", "nil=10"])
    }
}

@Suite struct JSONScannerFastPathTests {
    enum Crowded: String, CaseIterable, Sendable {
        // One length, first and last byte: every name lands in the same slot and is probed past.
        case axa, aya, aza, aba, aca, ada, b, bb, bbb
    }

    func scan<T>(_ text: [UInt8], _ read: (inout JSONScanner) throws -> T) throws -> T {
        try text.withUnsafeBufferPointer { buffer in
            var s = JSONScanner(buffer)
            let value = try read(&s)
            try s.finish()
            return value
        }
    }

    @Test func namesThatShareASlotAreStillTold() throws {
        let text = Array(#"{"aza":1,"axa":2,"aba":3,"ada":4,"aea":5,"bbb":6,"b":7,"bb":8,"aya":9,"aca":10}"#.utf8)
        var seen: [String] = []
        try scan(text) { s in
            try s.object(JSONKeyTable<Crowded>()) { s, key in seen.append("\(key?.rawValue ?? "nil")=\(try s.int())") }
        }
        #expect(seen == ["aza=1", "axa=2", "aba=3", "ada=4", "nil=5", "bbb=6", "b=7", "bb=8", "aya=9", "aca=10"])
    }

    /// Strings are read eight bytes at a time: a quote, a backslash or a control byte at
    /// every offset of strings of every length up to 40 is found where a byte-wise reader
    /// finds it, and bytes of 0x7F and above pass.
    @Test func everyStopIsFoundAtEveryOffset() throws {
        for length in 0...40 {
            for offset in 0..<max(1, length) {
                for stop: UInt8 in [0x22, 0x5C, 0x00, 0x01, 0x0A, 0x1F, 0x20, 0x21, 0x5B, 0x5D, 0x7F, 0x80, 0xC3, 0xFF]
                {
                    var body = [UInt8](repeating: UInt8(ascii: "a"), count: length)
                    if length > 0 { body[offset] = stop }
                    let text = [0x22] + body + [0x22]
                    let result = Result { try scan(text) { try $0.string() } }
                    let prefix = Array(body.prefix(length > 0 ? offset : 0))
                    switch stop {
                    case 0x22 where length > 0:   // the string ends there: trailing data
                        #expect(throws: JSONScanner.Malformed.self) { try result.get() }
                        #expect(
                            try scan([0x22] + prefix + [0x22]) { try $0.string() }
                                == String(decoding: prefix, as: UTF8.self))
                    case 0x5C where length > 0:   // an escape: "\a" is not one
                        #expect(throws: JSONScanner.Malformed.self, "\(length) \(offset)") { try result.get() }
                    case 0x00..<0x20 where length > 0:
                        #expect(throws: JSONScanner.Malformed.self, "\(length) \(offset) \(stop)") { try result.get() }
                    default:
                        #expect(
                            try result.get() == String(decoding: body, as: UTF8.self), "\(length) \(offset) \(stop)")
                    }
                }
            }
        }
    }

    /// Escapes anywhere in a long string still decode (the fast path hands them over).
    @Test func escapesPastTheFirstWordDecode() throws {
        let text = Array(#""abcdefghijklmnop\"q\\r\u00e9s\nend""#.utf8)
        #expect(try scan(text) { try $0.string() } == "abcdefghijklmnop\"q\\r\u{e9}s\nend")
    }

    /// Integers are read in place up to Int64's bounds; beyond, or with a fraction or an
    /// exponent, the general reader takes them as before.
    @Test func integersAtTheirBounds() throws {
        func int(_ t: String) throws -> Int64 { try scan(Array(t.utf8)) { try $0.int() } }
        func double(_ t: String) throws -> Double { try scan(Array(t.utf8)) { try $0.double() } }
        #expect(try int("1796184791566389205") == 1_796_184_791_566_389_205)
        #expect(try int("9223372036854775807") == .max)
        #expect(try int("-9223372036854775807") == -.max)
        #expect(try int("-9223372036854775808") == .min)
        #expect(try int(" 0 ") == 0)
        #expect(try int("-0") == 0)
        #expect(try int("12e3") == 12000)
        #expect(try int("2.0") == 2)
        #expect(throws: JSONScanner.Malformed.self) { try int("9223372036854775808") }
        #expect(throws: JSONScanner.Malformed.self) { try int("1.5") }
        #expect(throws: JSONScanner.Malformed.self) { try int("-") }
        #expect(try double("9223372036854775808") == 9_223_372_036_854_775_808.0)
        #expect(try double("1.25") == 1.25)
        #expect(try double("-3") == -3)
    }
}
