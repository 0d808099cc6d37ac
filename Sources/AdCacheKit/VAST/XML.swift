import CXML

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// An element of an XML document, as VAST reading needs it: its name (without a namespace
/// prefix), attributes, the text directly inside it (text and CDATA, trimmed) and its child
/// elements, in document order.
struct XMLElement: Sendable {
    var name: String
    var attributes: [(name: String, value: String)] = []
    var text = ""
    var children: [XMLElement] = []

    func attribute(_ name: String) -> String? {
        attributes.first { $0.name == name }?.value.trimmed()
    }

    /// The first child element named `name`.
    func child(_ name: String) -> XMLElement? { children.first { $0.name == name } }

    /// Every child element named `name`.
    func children(_ name: String) -> [XMLElement] { children.filter { $0.name == name } }

    /// The child at the end of `path` (`["Creatives", "Creative"]`), each step the first match.
    func at(_ path: String...) -> XMLElement? {
        var node: XMLElement? = self
        for step in path { node = node?.child(step) }
        return node
    }

    /// Every element named `name` at any depth below this one, in document order.
    func descendants(_ name: String) -> [XMLElement] {
        var out: [XMLElement] = []
        for c in children {
            if c.name == name { out.append(c) }
            out += c.descendants(name)
        }
        return out
    }
}

/// XML through libxml2 (CXML), loaded by the first XML feed. The document is read with no
/// network, no DTD, no external entity and no XInclude, and no entity beyond XML's five is
/// expanded: a document with a DOCTYPE is refused before libxml2 sees it (SPEC §10).
enum XMLReader {
    enum Failure: Error, Equatable {
        /// Not well-formed XML, or not readable as such (the reason, one line).
        case notWellFormed(String)
        case doctype
        case libraryMissing(String)
        /// The caller's deadline passed before or while reading it.
        case deadline
    }

    /// Parses `bytes` after `prescan` has refused what libxml2 should not see. `deadline`
    /// (monotonic seconds, `monotonicNow()`): `.deadline` once it has passed.
    static func parse(_ bytes: [UInt8], deadline: Double? = nil) throws(Failure) -> XMLElement {
        if hasDoctype(bytes) { throw .doctype }
        guard bytes.count < Int32.max else { throw .notWellFormed("too large") }
        if let deadline, monotonicNow() >= deadline { throw .deadline }
        try prescan(bytes, deadline: deadline)
        var error = [CChar](repeating: 0, count: 512)
        var doctype: Int32 = 0
        let doc = bytes.withUnsafeBufferPointer { b in
            b.baseAddress!.withMemoryRebound(to: CChar.self, capacity: b.count) { p in
                adc_xml_parse(p, Int32(b.count), &doctype, &error, error.count)
            }
        }
        guard let doc else {
            if doctype != 0 { throw .doctype }
            let message = String(decoding: error.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
            if message.hasPrefix("cannot load libxml2") || message.hasPrefix("libxml2 lacks") {
                throw .libraryMissing(message)
            }
            throw .notWellFormed(message)
        }
        defer { adc_xml_free(doc) }
        guard let root = adc_xml_root(doc) else { throw .notWellFormed("no root element") }
        return tree(root)
    }

    /// At most this many attributes on one element, and elements this deep (SPEC §10 (v4)
    /// *Bounded effort*: libxml2 2.9 checks an element's attributes for duplicates in
    /// quadratic time, and its own depth limit is 2048 under `XML_PARSE_HUGE`).
    static let maxAttributes = 256
    static let maxDepth = 256

    /// The encodings in which every byte below 0x80 is the ASCII character, so that the bytes
    /// `prescan` reads are the markup libxml2 reads.
    static let asciiCompatible: Set<String> =
        Set(["utf-8", "utf8", "us-ascii", "ascii", "latin1", "latin-1"])
        .union((1...16).map { "iso-8859-\($0)" }).union((1250...1258).map { "windows-\($0)" })

    /// One pass over the bytes, before libxml2 sees them, that refuses what would make its
    /// work more than linear or take it past its guards: an element with more than
    /// `maxAttributes` attributes or deeper than `maxDepth`, a DOCTYPE (or any `<!`
    /// declaration) anywhere, and a document whose bytes are not its markup (a NUL byte,
    /// UTF-16, an encoding that is not ASCII-compatible). Comments, CDATA sections,
    /// processing instructions and quoted attribute values are skipped whole. O(n): every
    /// step moves forward. `deadline` is looked at every 64 KiB.
    static func prescan(_ bytes: [UInt8], deadline: Double? = nil) throws(Failure) {
        let failure: Failure? = bytes.withUnsafeBufferPointer { b -> Failure? in
            let n = b.count
            guard let base = b.baseAddress, n > 0 else { return .notWellFormed("an empty document") }
            if memchr(base, 0, n) != nil { return .notWellFormed("a NUL byte (only UTF-8 XML is read)") }
            var i = b.starts(with: [0xEF, 0xBB, 0xBF]) ? 3 : 0
            while i < n, b[i] == 0x20 || b[i] == 0x09 || b[i] == 0x0A || b[i] == 0x0D { i += 1 }
            guard i < n, b[i] == UInt8(ascii: "<") else {
                return .notWellFormed("it does not start with '<' (only UTF-8 XML is read)")
            }
            func at(_ j: Int, _ s: StaticString) -> Bool {
                let count = s.utf8CodeUnitCount
                guard j + count <= n else { return false }
                let p = s.utf8Start
                for k in 0..<count where b[j + k] != p[k] { return false }
                return true
            }
            /// The index just past the first `end` at or after `j` (or the end of the bytes).
            func past(_ end: StaticString, from j: Int) -> Int {
                let first = end.utf8Start[0]
                var k = j
                while k < n {
                    if b[k] == first, at(k, end) { return k + end.utf8CodeUnitCount }
                    k += 1
                }
                return n
            }
            var depth = 0
            var checkAt = 1 << 16
            var first = true
            while i < n {
                if i >= checkAt {
                    checkAt = i + (1 << 16)
                    if let deadline, monotonicNow() >= deadline { return .deadline }
                }
                guard b[i] == UInt8(ascii: "<") else {
                    i += 1
                    continue
                }
                defer { first = false }
                if at(i, "<!--") {
                    i = past("-->", from: i + 4)
                } else if at(i, "<![CDATA[") {
                    i = past("]]>", from: i + 9)
                } else if at(i, "<?") {
                    let end = past("?>", from: i + 2)
                    if first, at(i, "<?xml"), let encoding = declaredEncoding(Array(b[i..<min(end, i + 1024)])),
                        !asciiCompatible.contains(encoding.lowercased())
                    {
                        return .notWellFormed("its encoding \(encoding.prefix(40)) is not read (only UTF-8 XML)")
                    }
                    i = end
                } else if at(i, "<!") {
                    return .doctype
                } else if at(i, "</") {
                    depth = max(0, depth - 1)
                    i = past(">", from: i + 2)
                } else {
                    // A start tag: its attributes are counted by their `=`, quoted values skipped.
                    var attributes = 0
                    var empty = false
                    i += 1
                    while i < n {
                        let c = b[i]
                        if c == UInt8(ascii: "\"") || c == UInt8(ascii: "'") {
                            var k = i + 1
                            while k < n, b[k] != c { k += 1 }
                            i = k + 1
                        } else if c == UInt8(ascii: "=") {
                            attributes += 1
                            if attributes > maxAttributes {
                                return .notWellFormed("an element has more than \(maxAttributes) attributes")
                            }
                            i += 1
                        } else if c == UInt8(ascii: ">") {
                            empty = b[i - 1] == UInt8(ascii: "/")
                            i += 1
                            break
                        } else if c == UInt8(ascii: "<") {
                            break   // not well-formed: libxml2 says where
                        } else {
                            i += 1
                        }
                    }
                    if depth + 1 > maxDepth {
                        return .notWellFormed("elements nest more than \(maxDepth) deep")
                    }
                    if !empty { depth += 1 }
                }
            }
            return nil
        }
        if let failure { throw failure }
    }

    /// The `encoding` of an XML declaration (`<?xml version="1.0" encoding="UTF-8"?>`).
    static func declaredEncoding(_ d: [UInt8]) -> String? {
        let key = Array("encoding".utf8)
        guard let k = (0..<max(0, d.count - key.count)).first(where: { d[$0...].starts(with: key) }) else {
            return nil
        }
        var i = k + key.count
        func blanks() { while i < d.count, [0x20, 0x09, 0x0A, 0x0D].contains(d[i]) { i += 1 } }
        blanks()
        guard i < d.count, d[i] == UInt8(ascii: "=") else { return nil }
        i += 1
        blanks()
        guard i < d.count, d[i] == UInt8(ascii: "\"") || d[i] == UInt8(ascii: "'") else { return nil }
        let quote = d[i]
        return String(decoding: d[(i + 1)...].prefix { $0 != quote }, as: UTF8.self)
    }

    /// True when the prolog (before the root element) holds a DOCTYPE.
    static func hasDoctype(_ bytes: [UInt8]) -> Bool {
        var i = bytes.starts(with: [0xEF, 0xBB, 0xBF]) ? 3 : 0
        func starts(_ s: String) -> Bool { bytes[i...].starts(with: s.utf8) }
        func skip(past end: String) {
            let e = Array(end.utf8)
            while i < bytes.count, !bytes[i...].starts(with: e) { i += 1 }
            i = min(bytes.count, i + e.count)
        }
        while i < bytes.count {
            switch bytes[i] {
            case 0x20, 0x09, 0x0A, 0x0D: i += 1
            default:
                if starts("<?") {
                    skip(past: "?>")
                } else if starts("<!--") {
                    skip(past: "-->")
                } else {
                    return starts("<!DOCTYPE") || starts("<!doctype")
                }
            }
        }
        return false
    }

    /// The tree under `root`, built with a stack of its own rather than by recursion, so that
    /// no document's depth is the thread stack's.
    private static func tree(_ root: UnsafeMutableRawPointer) -> XMLElement {
        struct Frame {
            var element: XMLElement
            var next: UnsafeMutableRawPointer?
            var text = ""
        }
        var buffer = [CChar](repeating: 0, count: 256)
        func shell(_ node: UnsafeMutableRawPointer) -> Frame {
            var e = XMLElement(name: adc_xml_name(node).map { String(cString: $0) } ?? "")
            var attribute = adc_xml_first_attribute(node)
            while let a = attribute {
                var n = adc_xml_attribute_value(a, &buffer, buffer.count)
                if n > buffer.count {
                    buffer = [CChar](repeating: 0, count: n)
                    n = adc_xml_attribute_value(a, &buffer, buffer.count)
                }
                let value = String(decoding: buffer.prefix(n).map { UInt8(bitPattern: $0) }, as: UTF8.self)
                e.attributes.append((adc_xml_attribute_name(a).map { String(cString: $0) } ?? "", value))
                attribute = adc_xml_next_attribute(a)
            }
            return Frame(element: e, next: adc_xml_first_child(node))
        }
        var stack = [shell(root)]
        while true {
            let top = stack.count - 1
            if let c = stack[top].next {
                stack[top].next = adc_xml_next(c)
                switch adc_xml_type(c) {
                case 1: stack.append(shell(c))
                case 3, 4: if let s = adc_xml_content(c) { stack[top].text += String(cString: s) }
                default: break
                }
            } else {
                var done = stack.removeLast()
                done.element.text = done.text.trimmedWithNewlines()
                if stack.isEmpty { return done.element }
                stack[stack.count - 1].element.children.append(done.element)
            }
        }
    }
}
