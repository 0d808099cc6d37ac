import Foundation

/// Writes JSON with explicit nulls and keys in the order given (the machine interface of
/// `next --json`, `list --json`, `prune --json`).
indirect enum JSONOut: Sendable {
    case null
    case bool(Bool)
    case int(Int64)
    case number(Double)
    case string(String)
    case array([JSONOut])
    case object([(String, JSONOut)])
    case raw(JSONValue)

    static func string(_ s: String?) -> JSONOut { s.map { .string($0) } ?? .null }
    static func int(_ i: Int64?) -> JSONOut { i.map { .int($0) } ?? .null }
    static func time(_ t: Date?) -> JSONOut { t.map { .string(Time.format($0.timeIntervalSince1970)) } ?? .null }

    func render(indent: Int? = nil) -> String {
        var out = ""
        write(&out, indent: indent, level: 0)
        return out
    }

    private func write(_ out: inout String, indent: Int?, level: Int) {
        func newline(_ l: Int) {
            if let indent { out += "\n" + String(repeating: " ", count: indent * l) }
        }
        switch self {
        case .null: out += "null"
        case .bool(let b): out += b ? "true" : "false"
        case .int(let i): out += String(i)
        case .number(let d): out += d.isFinite ? (d == d.rounded() && abs(d) < 1e15 ? String(Int64(d)) : String(d)) : "null"
        case .string(let s): JSONOut.escape(s, into: &out)
        case .array(let a):
            if a.isEmpty { out += "[]"; return }
            out += "["
            for (i, v) in a.enumerated() {
                if i > 0 { out += "," }
                newline(level + 1)
                v.write(&out, indent: indent, level: level + 1)
            }
            newline(level)
            out += "]"
        case .object(let pairs):
            if pairs.isEmpty { out += "{}"; return }
            out += "{"
            for (i, (k, v)) in pairs.enumerated() {
                if i > 0 { out += "," }
                newline(level + 1)
                JSONOut.escape(k, into: &out)
                out += indent == nil ? ":" : ": "
                v.write(&out, indent: indent, level: level + 1)
            }
            newline(level)
            out += "}"
        case .raw(let value):
            JSONOut(value).write(&out, indent: indent, level: level)
        }
    }

    init(_ v: JSONValue) {
        switch v {
        case .null: self = .null
        case .bool(let b): self = .bool(b)
        case .int(let i): self = .int(i)
        case .double(let d): self = .number(d)
        case .string(let s): self = .string(s)
        case .array(let a): self = .array(a.map(JSONOut.init))
        case .object(let o): self = .object(o.keys.sorted().map { ($0, JSONOut(o[$0]!)) })
        }
    }

    static func escape(_ s: String, into out: inout String) {
        out += "\""
        for u in s.unicodeScalars {
            switch u {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case _ where u.value < 0x20:
                let hex = String(u.value, radix: 16)
                out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
            default: out.unicodeScalars.append(u)
            }
        }
        out += "\""
    }
}
