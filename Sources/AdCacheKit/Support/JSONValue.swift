#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// Any JSON value, as `JSONScanner` reads it, so that `meta` passes through (numbers and
/// strings as given; an object's keys in no particular order).
public enum JSONValue: Equatable, Sendable {
    /// `null`.
    case null
    /// `true` or `false`.
    case bool(Bool)
    /// A number written without a fraction or an exponent that fits in 64 bits.
    case int(Int64)
    /// Any other number.
    case double(Double)
    /// A string, its escapes decoded.
    case string(String)
    /// An array, in order.
    case array([JSONValue])
    /// An object: its keys and values.
    case object([String: JSONValue])

    subscript(key: String) -> JSONValue? {
        if case .object(let o) = self { return o[key] }
        return nil
    }

    var objectValue: [String: JSONValue]? {
        if case .object(let o) = self { return o }
        return nil
    }

    var arrayValue: [JSONValue]? {
        if case .array(let a) = self { return a }
        return nil
    }

    var stringValue: String? {
        if case .string(let s) = self { return s }
        return nil
    }

    /// An integer, also when it comes as a string of digits (some servers send `"3"`).
    var integerValue: Int64? {
        switch self {
        case .int(let i): return i
        case .double(let d) where d == d.rounded() && abs(d) < 9e15: return Int64(d)
        case .string(let s):
            let t = s.trimmed()
            guard !t.isEmpty, t.count <= 18 else { return nil }
            var digits = Substring(t)
            let negative = digits.first == "-"
            if negative { digits = digits.dropFirst() }
            guard !digits.isEmpty, digits.allSatisfy({ $0.isASCII && $0.isNumber }) else { return nil }
            return Int64(digits).map { negative ? -$0 : $0 }
        default: return nil
        }
    }

    /// A short description of the JSON type, for warnings.
    var typeName: String {
        switch self {
        case .null: return "null"
        case .bool: return "a boolean"
        case .int, .double: return "a number"
        case .string: return "a string"
        case .array: return "an array"
        case .object: return "an object"
        }
    }

    /// Parses JSON bytes; the error says why in one line.
    /// Parses a whole document (a feed, a server's answer) with `JSONScanner`: Codable's
    /// decoder would instantiate its generic machinery at run time, milliseconds of every
    /// fetch.
    static func parse(_ bytes: [UInt8]) throws -> JSONValue {
        // A UTF-8 byte order mark is allowed before a feed, as JSONDecoder allowed it.
        let start = bytes.starts(with: [0xEF, 0xBB, 0xBF]) ? 3 : 0
        guard String(validating: bytes[start...], as: UTF8.self) != nil else {
            throw AdCacheError.notAFeed("not valid JSON: it is not UTF-8")
        }
        return try bytes.withUnsafeBufferPointer { all in
            var s = JSONScanner(UnsafeBufferPointer(rebasing: all[start...]))
            do {
                let value = try s.value()
                try s.finish()
                return value
            } catch let e as JSONScanner.Malformed {
                throw AdCacheError.notAFeed("not valid JSON: \(e.what) at byte \(e.offset + start)")
            }
        }
    }
}
