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
        var j = i
        defer { i = j }
        while j < bytes.count {
            switch bytes[j] {
            case 0x20, 0x0A, 0x0D, 0x09: j += 1
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

    /// A string value that names one of `keys`, matched as bytes (no String made); nil for
    /// any other string.
    mutating func name<Key>(in keys: JSONKeyTable<Key>) throws -> Key? { try key(in: keys) }

    private mutating func key<Key>(in keys: JSONKeyTable<Key>) throws -> Key? {
        if let plain = try plainString() { return keys.key(plain) }
        var name = try escapedString()
        return name.withUTF8 { keys.key($0) }
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
        skipSpace()
        let n = bytes.count
        guard i < n else { throw fail("unexpected end") }
        guard bytes[i] == UInt8(ascii: "\""), let base = bytes.baseAddress else { throw fail("expected '\"'") }
        let start = i + 1
        var j = start   // a local index: the loops keep it in a register
        // Eight bytes at a time up to the first that ends or escapes the string (or must not
        // be in it); that one is judged below.
        while j &+ 8 <= n {
            let m = Self.stringStops(UInt64(littleEndian: UnsafeRawPointer(base + j).loadUnaligned(as: UInt64.self)))
            if m != 0 {
                j &+= m.trailingZeroBitCount &>> 3
                break
            }
            j &+= 8
        }
        while j < n {
            let c = base[j]
            if c == UInt8(ascii: "\"") {
                i = j + 1
                return UnsafeBufferPointer(start: base + start, count: j - start)
            }
            if c == UInt8(ascii: "\\") {
                i = start
                return nil
            }
            if c < 0x20 {
                i = j
                throw fail("control character in string")
            }
            j += 1
        }
        i = j
        throw fail("unterminated string")
    }

    /// The high bit of each byte of `x` that is a quote, a backslash or below 0x20 (SWAR: a
    /// flag may be wrong only above the lowest true one, so the lowest flag is exact).
    @inline(__always) private static func stringStops(_ x: UInt64) -> UInt64 {
        let ones: UInt64 = 0x0101_0101_0101_0101
        let quote = x ^ (ones &* 0x22)
        let backslash = x ^ (ones &* 0x5C)
        let zeroQuote = (quote &- ones) & ~quote
        let zeroBackslash = (backslash &- ones) & ~backslash
        let control = (x &- ones &* 0x20) & ~x
        return (zeroQuote | zeroBackslash | control) & (ones &* 0x80)
    }

    private mutating func escapedString() throws -> String {
        String(decoding: try escapedBytes(keep: true), as: UTF8.self)
    }

    /// The bytes of a string with escapes, decoded (`keep`) or only checked as strictly.
    private mutating func escapedBytes(keep: Bool) throws -> [UInt8] {
        var out = [UInt8]()
        while i < bytes.count {
            let c = bytes[i]
            i += 1
            switch c {
            case UInt8(ascii: "\""):
                return out
            case UInt8(ascii: "\\"):
                guard i < bytes.count else { throw fail("unterminated string") }
                let e = bytes[i]
                i += 1
                switch e {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): if keep { out.append(e) }
                case UInt8(ascii: "b"): if keep { out.append(0x08) }
                case UInt8(ascii: "f"): if keep { out.append(0x0C) }
                case UInt8(ascii: "n"): if keep { out.append(0x0A) }
                case UInt8(ascii: "r"): if keep { out.append(0x0D) }
                case UInt8(ascii: "t"): if keep { out.append(0x09) }
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
                    if keep {
                        let u = Unicode.Scalar(scalar) ?? "\u{FFFD}"
                        out.append(contentsOf: Array(String(Character(u)).utf8))
                    }
                default: throw fail("bad escape")
                }
            default:
                if c < 0x20 { throw fail("control character in string") }
                if keep { out.append(c) }
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

    /// A plain integer (digits and an optional minus, within Int64) read in place; nil, with
    /// nothing consumed, for any other number (`number()` reads those).
    private mutating func plainInt() -> Int64? {
        skipSpace()
        var j = i
        let negative = j < bytes.count && bytes[j] == UInt8(ascii: "-")
        if negative { j += 1 }
        let digits = j
        var v: Int64 = 0
        while j < bytes.count {
            let c = bytes[j]
            guard c >= 48 && c <= 57 else { break }
            let (times10, o1) = v.multipliedReportingOverflow(by: 10)
            let (sum, o2) = times10.addingReportingOverflow(Int64(c &- 48))
            if o1 || o2 { return nil }
            v = sum
            j += 1
        }
        guard j > digits else { return nil }
        if j < bytes.count {
            switch bytes[j] {
            case UInt8(ascii: "."), UInt8(ascii: "e"), UInt8(ascii: "E"), UInt8(ascii: "+"), UInt8(ascii: "-"):
                return nil
            default: break
            }
        }
        i = j
        return negative ? -v : v
    }

    mutating func int() throws -> Int64 {
        if let v = plainInt() { return v }
        switch try number() {
        case .int(let v): return v
        case .double(let d) where d == d.rounded() && abs(d) < 9e15: return Int64(d)
        default: throw fail("expected an integer")
        }
    }

    mutating func double() throws -> Double {
        if let v = plainInt() { return Double(v) }
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
            try members(key: { try $0.skipString() }) { s, _ in try s.skip() }
        case UInt8(ascii: "["):
            try array { s in try s.skip() }
        case UInt8(ascii: "\""): try skipString()
        case UInt8(ascii: "n"): try literal("null")
        case UInt8(ascii: "t"), UInt8(ascii: "f"): _ = try bool()
        default: if plainInt() == nil { _ = try number() }
        }
    }

    /// A string checked and dropped: no String made, escapes checked in full.
    private mutating func skipString() throws {
        if try plainString() == nil { _ = try escapedBytes(keep: false) }
    }

    /// Where the scanner is (a byte offset), after any white space.
    mutating func position() -> Int {
        skipSpace()
        return i
    }

    /// Continues at `offset`, past a value whose bytes are known to be well-formed (the
    /// index's records, when the selection digest holds them).
    mutating func jump(to offset: Int) {
        i = min(max(offset, i), bytes.count)
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

    // Checks: the value is what the reader of that kind would take, nothing built (a
    // selection read of the index checks the fields it does not keep: SPEC §6 v4).
    mutating func checkString() throws { try skipString() }
    mutating func checkOptString() throws { if try !null() { try skipString() } }
    mutating func checkOptInt() throws { if try !null() { _ = try int() } }
    mutating func checkOptDouble() throws { if try !null() { _ = try double() } }
    mutating func checkStrings() throws { try array { s in try s.skipString() } }
    /// An object whose every value passes `value`.
    mutating func checkObject(_ value: (inout JSONScanner) throws -> Void) throws {
        try members(key: { try $0.skipString() }) { s, _ in try value(&s) }
    }

    // Optional readers: null is nil.
    mutating func optString() throws -> String? { try null() ? nil : string() }
    mutating func optInt() throws -> Int64? { try null() ? nil : int() }
    mutating func optDouble() throws -> Double? { try null() ? nil : double() }
}

/// The keys of an object read often: each name in a slot of a small open-addressed table,
/// found by its length and first and last bytes and then compared once (as bytes), so
/// nothing is retained or released on the way (a record of a 10,000-ad index has 30 keys).
/// The type has no constraints on `Key`: a launch that makes one checks no conformance.
final class JSONKeyTable<Key>: @unchecked Sendable {
    /// Every name, one after the other.
    private let names: UnsafeMutableBufferPointer<UInt8>
    /// Per slot: the name's offset in `names` and its length (0: an empty slot), and its key.
    private let slots: UnsafeMutableBufferPointer<(offset: Int32, count: Int32)>
    private let keys: UnsafeMutableBufferPointer<Key?>
    private static var size: Int { 256 }

    /// `names[k]` names `keys[k]` (two arrays, not one of tuples: a launch builds no tuple
    /// type's metadata for this).
    init(names: [String], keys given: [Key]) {
        precondition(names.count == given.count && names.count < Self.size / 2 && !names.contains(""))
        self.names = .allocate(capacity: names.reduce(0) { $0 + $1.utf8.count })
        slots = .allocate(capacity: Self.size)
        slots.initialize(repeating: (0, 0))
        keys = .allocate(capacity: Self.size)
        keys.initialize(repeating: nil)
        var offset = 0
        for k in names.indices {
            var name = names[k]
            let n = name.withUTF8 { utf8 in
                _ = UnsafeMutableBufferPointer(rebasing: self.names[offset..<offset + utf8.count]).initialize(
                    from: utf8)
                return utf8.count
            }
            var slot = Self.hash(n, self.names[offset], self.names[offset + n - 1])
            while slots[slot].count != 0 { slot = (slot + 1) & (Self.size - 1) }
            slots[slot] = (Int32(offset), Int32(n))
            keys[slot] = given[k]
            offset += n
        }
    }

    deinit {
        names.deallocate()
        slots.deallocate()
        keys.deinitialize()
        keys.deallocate()
    }

    @inline(__always) private static func hash(_ count: Int, _ first: UInt8, _ last: UInt8) -> Int {
        (count &* 97 &+ Int(first) &* 31 &+ Int(last)) & (size - 1)
    }

    /// Whether n bytes are the same: eight at a time, the tail by byte (keys are short; a
    /// call of memcmp costs more than the comparison).
    @inline(__always) private static func same(_ a: UnsafePointer<UInt8>, _ b: UnsafePointer<UInt8>, _ n: Int) -> Bool {
        var k = 0
        while k &+ 8 <= n {
            let wa = UnsafeRawPointer(a + k).loadUnaligned(as: UInt64.self)
            guard wa == UnsafeRawPointer(b + k).loadUnaligned(as: UInt64.self) else { return false }
            k &+= 8
        }
        while k < n {
            if a[k] != b[k] { return false }
            k &+= 1
        }
        return true
    }

    /// The key named by these bytes, or nil.
    func key(_ bytes: UnsafeBufferPointer<UInt8>) -> Key? {
        let n = bytes.count
        guard n > 0, let base = bytes.baseAddress else { return nil }
        var slot = Self.hash(n, base[0], base[n - 1])
        while true {
            let (offset, count) = slots[slot]
            if count == 0 { return nil }
            if Int(count) == n && Self.same(names.baseAddress! + Int(offset), base, n) { return keys[slot] }
            slot = (slot + 1) & (Self.size - 1)
        }
    }
}

extension JSONKeyTable where Key: RawRepresentable & CaseIterable, Key.RawValue == String {
    /// The table of every case, named by its raw value.
    convenience init() {
        let all = Array(Key.allCases)
        self.init(names: all.map(\.rawValue), keys: all)
    }
}
