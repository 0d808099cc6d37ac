#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// The one JSON writer: straight into bytes, keys in the order given, pretty (an indent per
/// level, `"key": value`) or compact, or pretty with compact parts (`flat`). The index, `next --json`, `list --json` and the reports
/// are all written with it.
struct JSONWriter {
    var out: [UInt8] = []
    /// Spaces per level; nil is compact (one line).
    private let indentWidth: Int?
    private var level = 0
    private var first = [true]
    /// Inside `flat`: from this level down, no newlines and no space after a colon.
    private var flatBelow = Int.max

    init(indent: Int? = 2, capacity: Int = 256) {
        indentWidth = indent
        out.reserveCapacity(capacity)
    }

    var text: String { String(decoding: out, as: UTF8.self) }

    /// Writes what `body` writes (one value) on the current line, compact: the index puts
    /// each record on a line of its own, so it stays readable and reads fast.
    mutating func flat(_ body: (inout JSONWriter) -> Void) {
        let outer = flatBelow
        flatBelow = min(flatBelow, level)
        body(&self)
        flatBelow = outer
    }

    private var pretty: Bool { indentWidth != nil && level < flatBelow }

    private mutating func newline() {
        guard let indentWidth, level < flatBelow else { return }
        out.append(0x0A)
        for _ in 0..<(level * indentWidth) { out.append(0x20) }
    }

    mutating func beginObject() { open(UInt8(ascii: "{")) }
    mutating func beginArray() { open(UInt8(ascii: "[")) }
    mutating func endObject() { close(UInt8(ascii: "}")) }
    mutating func endArray() { close(UInt8(ascii: "]")) }

    private mutating func open(_ c: UInt8) {
        out.append(c)
        level += 1
        first.append(true)
    }

    private mutating func close(_ c: UInt8) {
        level -= 1
        if !first.removeLast() { newline() }
        out.append(c)
    }

    /// Starts a key's value (in an object) or an element (in an array, with key nil).
    mutating func key(_ k: String?) {
        if first[first.count - 1] { first[first.count - 1] = false } else { out.append(UInt8(ascii: ",")) }
        newline()
        if let k {
            string(k)
            out.append(UInt8(ascii: ":"))
            if pretty { out.append(0x20) }
        }
    }

    mutating func null() { raw("null") }
    mutating func bool(_ b: Bool) { raw(b ? "true" : "false") }
    mutating func int(_ i: Int64) { raw(String(i)) }

    /// Whole numbers without a fraction; anything not finite is null.
    mutating func number(_ d: Double) {
        guard d.isFinite else { return null() }
        raw(d == d.rounded() && abs(d) < 1e15 ? String(Int64(d)) : String(d))
    }

    mutating func string(_ s: String) {
        out.append(UInt8(ascii: "\""))
        // Most strings (ids, URLs, hashes) need no escape: copy them whole, checked over their
        // bytes in place (a fold writes a few per record: 10,000 records, 60,000 strings).
        let copied = s.utf8.withContiguousStorageIfAvailable { bytes -> Bool in
            for b in bytes where b < 0x20 || b == UInt8(ascii: "\"") || b == UInt8(ascii: "\\") { return false }
            out.append(contentsOf: bytes)
            return true
        }
        if copied == true {
            out.append(UInt8(ascii: "\""))
            return
        }
        for b in s.utf8 {
            switch b {
            case UInt8(ascii: "\""): out.append(contentsOf: [0x5C, b])
            case UInt8(ascii: "\\"): out.append(contentsOf: [0x5C, b])
            case 0x0A: out.append(contentsOf: [0x5C, UInt8(ascii: "n")])
            case 0x0D: out.append(contentsOf: [0x5C, UInt8(ascii: "r")])
            case 0x09: out.append(contentsOf: [0x5C, UInt8(ascii: "t")])
            case ..<0x20:
                let hex = Array("0123456789abcdef".utf8)
                out.append(contentsOf: Array("\\u00".utf8) + [hex[Int(b >> 4)], hex[Int(b & 0xF)]])
            default: out.append(b)
            }
        }
        out.append(UInt8(ascii: "\""))
    }

    mutating func raw(_ s: String) { out.append(contentsOf: s.utf8) }

    mutating func value(_ v: JSONValue) {
        switch v {
        case .null: null()
        case .bool(let b): bool(b)
        case .int(let i): int(i)
        case .double(let d): number(d)
        case .string(let s): string(s)
        case .array(let a):
            beginArray()
            for e in a { key(nil); value(e) }
            endArray()
        case .object(let o):
            beginObject()
            for k in o.keys.sorted() { key(k); value(o[k]!) }
            endObject()
        }
    }

    // Index fields: absent values are omitted.
    mutating func field(_ k: String, _ v: String?) { if let v { key(k); string(v) } }
    mutating func field(_ k: String, _ v: Int64?) { if let v { key(k); int(v) } }
    mutating func field(_ k: String, _ v: Int?) { if let v { key(k); int(Int64(v)) } }
    mutating func field(_ k: String, _ v: Double?) { if let v, v.isFinite { key(k); number(v) } }
    mutating func field(_ k: String, _ v: JSONValue?) { if let v { key(k); value(v) } }
    mutating func field(_ k: String, _ v: [String]?) {
        guard let v else { return }
        key(k)
        beginArray()
        for e in v {
            key(nil)
            string(e)
        }
        endArray()
    }
}

/// A JSON document with explicit nulls and keys in the order given (the machine interface of
/// `next --json`, `list --json` and the reports), rendered by `JSONWriter`.
package indirect enum JSONOut: Sendable {
    case null
    case bool(Bool)
    case int(Int64)
    case string(String)
    case array([JSONOut])
    case object([(String, JSONOut)])
    case raw(JSONValue)

    package static func string(_ s: String?) -> JSONOut { s.map { .string($0) } ?? .null }
    package static func int(_ i: Int64?) -> JSONOut { i.map { .int($0) } ?? .null }
    package static func time(_ t: Date?) -> JSONOut {
        t.map { .string(Time.format($0.timeIntervalSince1970)) } ?? .null
    }

    /// Pretty with `indent` spaces per level, or compact on one line.
    package func render(indent: Int? = nil) -> String {
        var w = JSONWriter(indent: indent)
        write(&w)
        return w.text
    }

    private func write(_ w: inout JSONWriter) {
        switch self {
        case .null: w.null()
        case .bool(let b): w.bool(b)
        case .int(let i): w.int(i)
        case .string(let s): w.string(s)
        case .array(let a):
            w.beginArray()
            for v in a { w.key(nil); v.write(&w) }
            w.endArray()
        case .object(let pairs):
            w.beginObject()
            for (k, v) in pairs { w.key(k); v.write(&w) }
            w.endObject()
        case .raw(let value): w.value(value)
        }
    }
}
