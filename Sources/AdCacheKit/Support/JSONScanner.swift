#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A small, strict, allocation-light JSON reader for the index, which `next` reads at every
/// app launch: Foundation's Codable decoding of a 10,000-ad index costs more than the whole
/// selection should. It reads values straight into the caller's types; anything malformed
/// (a torn or garbled file) throws.
struct JSONScanner {
    struct Malformed: Error {
        var offset: Int
        var what: String
    }

    private let bytes: UnsafeBufferPointer<UInt8>
    private(set) var i = 0
    private var depth = 0

    init(_ bytes: UnsafeBufferPointer<UInt8>) {
        self.bytes = bytes
    }

    func fail(_ what: String) -> Malformed { Malformed(offset: i, what: what) }

    mutating func skipSpace() {
        while i < bytes.count {
            switch bytes[i] {
            case 0x20, 0x0A, 0x0D, 0x09: i += 1
            default: return
            }
        }
    }

    mutating func peek() throws -> UInt8 {
        skipSpace()
        guard i < bytes.count else { throw fail("unexpected end") }
        return bytes[i]
    }

    mutating func expect(_ c: UInt8) throws {
        guard try peek() == c else { throw fail("expected '\(Character(Unicode.Scalar(c)))'") }
        i += 1
    }

    /// The end of the document: only white space may follow.
    mutating func finish() throws {
        skipSpace()
        guard i == bytes.count else { throw fail("trailing data") }
    }

    /// true for `null` (consumed).
    mutating func null() throws -> Bool {
        guard try peek() == UInt8(ascii: "n") else { return false }
        try literal("null")
        return true
    }

    private mutating func literal(_ word: StaticString) throws {
        let n = word.utf8CodeUnitCount
        guard i + n <= bytes.count else { throw fail("unexpected end") }
        for k in 0..<n where bytes[i + k] != word.utf8Start[k] { throw fail("bad literal") }
        i += n
    }

    /// Calls `body` with each key of an object; `body` must read the key's value.
    mutating func object(_ body: (inout JSONScanner, String) throws -> Void) throws {
        try members(key: { try $0.string() }, body)
    }

    /// The same for an object whose keys come from a known set (an index record, read 10,000
    /// times by a launch): each key is matched as bytes, no String made; nil for a key
    /// outside the set.
    mutating func object<Key>(_ keys: JSONKeyTable<Key>, _ body: (inout JSONScanner, Key?) throws -> Void) throws {
        try members(key: { try $0.key(in: keys) }, body)
    }

    private mutating func key<Key>(in keys: JSONKeyTable<Key>) throws -> Key? {
        if let plain = try plainString() { return keys.key(plain) }
        return Key(rawValue: try escapedString())
    }

    private mutating func members<K>(
        key readKey: (inout JSONScanner) throws -> K, _ body: (inout JSONScanner, K) throws -> Void
    ) throws {
        try expect(UInt8(ascii: "{"))
        depth += 1
        guard depth < 256 else { throw fail("nested too deeply") }
        if try peek() == UInt8(ascii: "}") { i += 1; depth -= 1; return }
        while true {
            let key = try readKey(&self)
            try expect(UInt8(ascii: ":"))
            try body(&self, key)
            let c = try peek()
            i += 1
            if c == UInt8(ascii: "}") { break }
            guard c == UInt8(ascii: ",") else { throw fail("expected ',' or '}'") }
        }
        depth -= 1
    }

    /// Calls `body` for each element of an array; `body` must read the element.
    mutating func array(_ body: (inout JSONScanner) throws -> Void) throws {
        try expect(UInt8(ascii: "["))
        depth += 1
        guard depth < 256 else { throw fail("nested too deeply") }
        if try peek() == UInt8(ascii: "]") { i += 1; depth -= 1; return }
        while true {
            try body(&self)
            let c = try peek()
            i += 1
            if c == UInt8(ascii: "]") { break }
            guard c == UInt8(ascii: ",") else { throw fail("expected ',' or ']'") }
        }
        depth -= 1
    }

    mutating func string() throws -> String {
        if let plain = try plainString() { return String(decoding: plain, as: UTF8.self) }
        return try escapedString()
    }

    /// The bytes of a string without escapes, read past its closing quote; nil for one with
    /// an escape, left at its first character for `escapedString`.
    private mutating func plainString() throws -> UnsafeBufferPointer<UInt8>? {
        try expect(UInt8(ascii: "\""))
        let start = i
        while i < bytes.count {
            let c = bytes[i]
            if c == UInt8(ascii: "\"") {
                i += 1
                return UnsafeBufferPointer(rebasing: bytes[start..<i - 1])
            }
            if c == UInt8(ascii: "\\") { i = start; return nil }
            if c < 0x20 { throw fail("control character in string") }
            i += 1
        }
        throw fail("unterminated string")
    }

    private mutating func escapedString() throws -> String {
        var out = [UInt8]()
        while i < bytes.count {
            let c = bytes[i]
            i += 1
            switch c {
            case UInt8(ascii: "\""):
                return String(decoding: out, as: UTF8.self)
            case UInt8(ascii: "\\"):
                guard i < bytes.count else { throw fail("unterminated string") }
                let e = bytes[i]
                i += 1
                switch e {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): out.append(e)
                case UInt8(ascii: "b"): out.append(0x08)
                case UInt8(ascii: "f"): out.append(0x0C)
                case UInt8(ascii: "n"): out.append(0x0A)
                case UInt8(ascii: "r"): out.append(0x0D)
                case UInt8(ascii: "t"): out.append(0x09)
                case UInt8(ascii: "u"):
                    var scalar = try hex4()
                    if (0xD800..<0xDC00).contains(scalar), i + 1 < bytes.count,
                        bytes[i] == UInt8(ascii: "\\"), bytes[i + 1] == UInt8(ascii: "u")
                    {
                        i += 2
                        let low = try hex4()
                        guard (0xDC00..<0xE000).contains(low) else { throw fail("bad surrogate pair") }
                        scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                    }
                    let u = Unicode.Scalar(scalar) ?? "\u{FFFD}"
                    out.append(contentsOf: Array(String(Character(u)).utf8))
                default: throw fail("bad escape")
                }
            default:
                if c < 0x20 { throw fail("control character in string") }
                out.append(c)
            }
        }
        throw fail("unterminated string")
    }

    private mutating func hex4() throws -> UInt32 {
        guard i + 4 <= bytes.count else { throw fail("bad \\u escape") }
        var v: UInt32 = 0
        for _ in 0..<4 {
            let c = bytes[i]
            i += 1
            v <<= 4
            switch c {
            case 48...57: v |= UInt32(c - 48)
            case 65...70: v |= UInt32(c - 55)
            case 97...102: v |= UInt32(c - 87)
            default: throw fail("bad \\u escape")
            }
        }
        return v
    }

    /// A number as written; integers keep full precision.
    mutating func number() throws -> JSONValue {
        skipSpace()
        let start = i
        var integral = true
        if i < bytes.count, bytes[i] == UInt8(ascii: "-") { i += 1 }
        let digitsStart = i
        while i < bytes.count {
            let c = bytes[i]
            if c >= 48 && c <= 57 { i += 1; continue }
            if c == UInt8(ascii: ".") || c == UInt8(ascii: "e") || c == UInt8(ascii: "E") || c == UInt8(ascii: "+")
                || c == UInt8(ascii: "-")
            {
                integral = false
                i += 1
                continue
            }
            break
        }
        guard i > digitsStart else { throw fail("expected a value") }
        if integral, i - digitsStart <= 18 {   // the common case, without a String
            var v: Int64 = 0
            for k in digitsStart..<i { v = v * 10 + Int64(bytes[k] - 48) }
            return .int(bytes[start] == UInt8(ascii: "-") ? -v : v)
        }
        let text = String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<i]), as: UTF8.self)
        if integral, let v = Int64(text) { return .int(v) }
        // 1e400 is well-formed JSON that no Double holds: the readers below refuse it.
        guard let d = Double(text) else { throw fail("bad number") }
        return .double(d)
    }

    mutating func int() throws -> Int64 {
        switch try number() {
        case .int(let v): return v
        case .double(let d) where d == d.rounded() && abs(d) < 9e15: return Int64(d)
        default: throw fail("expected an integer")
        }
    }

    mutating func double() throws -> Double {
        switch try number() {
        case .int(let v): return Double(v)
        case .double(let d) where d.isFinite: return d
        default: throw fail("expected a finite number")
        }
    }

    mutating func bool() throws -> Bool {
        switch try peek() {
        case UInt8(ascii: "t"): try literal("true"); return true
        case UInt8(ascii: "f"): try literal("false"); return false
        default: throw fail("expected true or false")
        }
    }

    /// Any value, kept (for `meta`).
    mutating func value() throws -> JSONValue {
        switch try peek() {
        case UInt8(ascii: "{"):
            var o: [String: JSONValue] = [:]
            try object { s, key in o[key] = try s.value() }
            return .object(o)
        case UInt8(ascii: "["):
            var a: [JSONValue] = []
            try array { s in a.append(try s.value()) }
            return .array(a)
        case UInt8(ascii: "\""): return .string(try string())
        case UInt8(ascii: "n"): try literal("null"); return .null
        case UInt8(ascii: "t"), UInt8(ascii: "f"): return .bool(try bool())
        default:
            let n = try number()
            if case .double(let d) = n, !d.isFinite { return .null }   // kept values stay JSON
            return n
        }
    }

    /// Reads and drops a value (a field this version does not know, or one the caller does
    /// not need): checked as strictly as `value()`, but nothing is built.
    mutating func skip() throws {
        switch try peek() {
        case UInt8(ascii: "{"):
            try object { s, _ in try s.skip() }
        case UInt8(ascii: "["):
            try array { s in try s.skip() }
        case UInt8(ascii: "\""):
            let open = i
            i += 1
            while i < bytes.count {
                let c = bytes[i]
                if c == UInt8(ascii: "\"") { i += 1; return }
                if c == UInt8(ascii: "\\") {   // an escape: the full reader checks it
                    i = open
                    _ = try string()
                    return
                }
                if c < 0x20 { throw fail("control character in string") }
                i += 1
            }
            throw fail("unterminated string")
        case UInt8(ascii: "n"): try literal("null")
        case UInt8(ascii: "t"), UInt8(ascii: "f"): _ = try bool()
        default: _ = try number()
        }
    }

    /// Where the scanner is (a byte offset), after any white space.
    mutating func position() -> Int {
        skipSpace()
        return i
    }

    /// Reads a value with `read`. When the value is well-formed JSON that `read` refuses (a
    /// string where a number belongs, a number out of range), skips it and returns nil;
    /// malformed JSON still throws.
    mutating func lenient<T>(_ read: (inout JSONScanner) throws -> T) throws -> T? {
        let mark = self
        do {
            return try read(&self)
        } catch is Malformed {
            self = mark
            try skip()
            return nil
        }
    }

    /// An array of strings.
    mutating func strings() throws -> [String] {
        var out: [String] = []
        try array { s in out.append(try s.string()) }
        return out
    }

    // Optional readers: null is nil.
    mutating func optString() throws -> String? { try null() ? nil : string() }
    mutating func optInt() throws -> Int64? { try null() ? nil : int() }
    mutating func optDouble() throws -> Double? { try null() ? nil : double() }
}

/// The keys of an object read often: the names in one buffer, grouped by length, so a key
/// is compared (as bytes) only with the names as long as it, and nothing is retained or
/// released on the way (a record of a 10,000-ad index has 30 keys).
final class JSONKeyTable<Key: RawRepresentable & CaseIterable & Sendable>: @unchecked Sendable
where Key.RawValue == String {
    /// Every name, one after the other; `entries` in order of length; the entries of
    /// length n are `entries[start[n]..<start[n + 1]]`.
    private let names: UnsafeMutableBufferPointer<UInt8>
    private let entries: [(offset: Int, key: Key)]
    private let start: [Int]

    init() {
        let all = Key.allCases.map { (name: Array($0.rawValue.utf8), key: $0) }.sorted { $0.name.count < $1.name.count }
        names = .allocate(capacity: max(1, all.reduce(0) { $0 + $1.name.count }))
        var entries = [(offset: Int, key: Key)]()
        var start = [Int]()
        var offset = 0
        for (name, key) in all {
            while start.count <= name.count { start.append(entries.count) }
            _ = UnsafeMutableBufferPointer(rebasing: names[offset..<offset + name.count]).initialize(from: name)
            entries.append((offset, key))
            offset += name.count
        }
        start.append(entries.count)
        self.entries = entries
        self.start = start
    }

    deinit { names.deallocate() }

    func key(_ bytes: UnsafeBufferPointer<UInt8>) -> Key? {
        let n = bytes.count
        guard n + 1 < start.count, let base = bytes.baseAddress else { return nil }
        for e in entries[start[n]..<start[n + 1]] where memcmp(names.baseAddress! + e.offset, base, n) == 0 {
            return e.key
        }
        return nil
    }
}
