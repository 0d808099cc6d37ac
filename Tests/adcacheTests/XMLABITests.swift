import Foundation
import TestSupport
import Testing

/// The shim declares the parts of libxml2's ABI it reads (Sources/CXML/libxml2_abi.h) instead
/// of compiling against libxml2's headers (issue 38: no include path, nothing linked). Here a
/// C program includes both, as Debian's libxml2-dev installs them, and every offset, size and
/// value the shim relies on must agree — a compile error names the first that does not.
@Suite(
    .enabled(
        if: available("/usr/bin/gcc") && FileManager.default.fileExists(atPath: "/usr/include/libxml2/libxml/parser.h"),
        "gcc and libxml2-dev are needed (make test installs them)"))
struct XMLABITests {
    static let program = #"""
        #include <stddef.h>
        #include <libxml/parser.h>
        #include <libxml/tree.h>
        #include <libxml/xmlerror.h>
        #include "libxml2_abi.h"

        #define SAME(real, mine, field) \
            _Static_assert(offsetof(real, field) == offsetof(struct mine, field), #real "." #field); \
            _Static_assert(sizeof(((real *)0)->field) == sizeof(((struct mine *)0)->field), #real "." #field " size")

        SAME(xmlNode, adc_xmlNode, type); SAME(xmlNode, adc_xmlNode, name); SAME(xmlNode, adc_xmlNode, children);
        SAME(xmlNode, adc_xmlNode, next); SAME(xmlNode, adc_xmlNode, content); SAME(xmlNode, adc_xmlNode, properties);
        SAME(xmlAttr, adc_xmlAttr, type); SAME(xmlAttr, adc_xmlAttr, name); SAME(xmlAttr, adc_xmlAttr, children);
        SAME(xmlAttr, adc_xmlAttr, next);
        SAME(xmlDoc, adc_xmlDoc, children); SAME(xmlDoc, adc_xmlDoc, intSubset); SAME(xmlDoc, adc_xmlDoc, extSubset);
        SAME(xmlError, adc_xmlError, message); SAME(xmlError, adc_xmlError, line); SAME(xmlError, adc_xmlError, level);
        _Static_assert(XML_ELEMENT_NODE == ADC_XML_ELEMENT_NODE, "element");
        _Static_assert(XML_TEXT_NODE == ADC_XML_TEXT_NODE, "text");
        _Static_assert(XML_PARSE_NOERROR == ADC_XML_PARSE_NOERROR, "NOERROR");
        _Static_assert(XML_PARSE_NOWARNING == ADC_XML_PARSE_NOWARNING, "NOWARNING");
        _Static_assert(XML_PARSE_NONET == ADC_XML_PARSE_NONET, "NONET");
        _Static_assert(XML_PARSE_NOCDATA == ADC_XML_PARSE_NOCDATA, "NOCDATA");
        _Static_assert(XML_PARSE_HUGE == ADC_XML_PARSE_HUGE, "HUGE");
        _Static_assert(sizeof(xmlExternalEntityLoader) == sizeof(adc_xmlExternalEntityLoader), "loader");
        int main(void) { return 0; }
        """#

    @Test func theShimsDeclarationsAreLibxml2s() throws {
        let dir = TempDir(); defer { dir.remove() }
        let source = dir.write("abi.c", Self.program)
        let cflags = runProgram("/usr/bin/pkg-config", ["--cflags", "libxml-2.0"]).stdout
            .split(separator: " ").map { String($0).trimmingCharacters(in: .whitespacesAndNewlines) }
            .filter { !$0.isEmpty }
        let r = runProgram(
            "/usr/bin/gcc",
            ["-std=c11", "-fsyntax-only"] + (cflags.isEmpty ? ["-I/usr/include/libxml2"] : cflags) + [
                "-I", packageRoot + "/Sources/CXML", source,
            ])
        #expect(r.status == 0, "\(r.stderr)")
    }

    /// Nothing links libxml2: the binary does not name it (a launch would load it, and ICU).
    @Test func theBinaryDoesNotLinkLibxml2() throws {
        let r = runProgram("/usr/bin/readelf", ["-d", Adcache.binary])
        try #require(r.status == 0, "\(r.stderr)")
        #expect(r.stdout.contains("(NEEDED)"), "\(r.stdout)")
        #expect(!r.stdout.contains("libxml2"), "\(r.stdout)")
        let manifest = try String(contentsOfFile: packageRoot + "/Package.swift", encoding: .utf8)
        #expect(!manifest.contains("unsafeFlags"), "a package with unsafe flags cannot be depended on by version")
    }
}
