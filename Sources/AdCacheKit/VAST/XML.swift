import CXML

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
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
    }

    static func parse(_ bytes: [UInt8]) throws(Failure) -> XMLElement {
        if hasDoctype(bytes) { throw .doctype }
        guard bytes.count < Int32.max else { throw .notWellFormed("too large") }
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
        return element(root)
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

    private static func element(_ node: UnsafeMutableRawPointer) -> XMLElement {
        var e = XMLElement(name: adc_xml_name(node).map { String(cString: $0) } ?? "")
        var attribute = adc_xml_first_attribute(node)
        var buffer = [CChar](repeating: 0, count: 256)
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
        var text = ""
        var child = adc_xml_first_child(node)
        while let c = child {
            switch adc_xml_type(c) {
            case 1: e.children.append(element(c))
            case 3, 4: if let s = adc_xml_content(c) { text += String(cString: s) }
            default: break
            }
            child = adc_xml_next(c)
        }
        e.text = text.trimmedWithNewlines()
        return e
    }
}
