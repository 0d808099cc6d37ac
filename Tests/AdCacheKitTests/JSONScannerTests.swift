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
