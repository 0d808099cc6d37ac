import Foundation
import TestSupport
import Testing

@testable import AdCacheKit

@Suite struct TimeTests {
    @Test(arguments: [
        ("2027-03-01T00:00:00Z", 1803859200.0),
        ("2027-03-01T08:00:00+08:00", 1803859200.0),
        ("2027-02-28T19:00:00-05:00", 1803859200.0),
        ("2027-03-01t00:00:00.250z", 1803859200.25),
        ("2027-03-01 00:00:00Z", 1803859200.0),
        ("1803859200", 1803859200.0),
        ("1803859200000", 1803859200.0),
        ("1970-01-01T00:00:00Z", 0),
    ])
    func parses(text: String, expected: Double) {
        #expect(Time.parse(text) == expected)
    }

    @Test(arguments: [
        "2027-03-01T00:00:00", "2027-03-01", "2027-02-30T00:00:00Z", "2027-13-01T00:00:00Z",
        "2027-03-01T24:00:00Z", "2027-03-01T00:00:00+0800", "soon", "", "12:00", "2027-03-01T00:00:00Zjunk",
    ])
    func rejects(text: String) {
        #expect(Time.parse(text) == nil)
    }

    @Test func formatsRFC3339InUTC() {
        #expect(Time.format(1803859200) == "2027-03-01T00:00:00Z")
        #expect(Time.format(1803859200.5) == "2027-03-01T00:00:00.500Z")
        #expect(Time.format(-1) == "1969-12-31T23:59:59Z")
        #expect(Time.parse(Time.format(1234567890.125)) == 1234567890.125)
    }

    @Test func millisecondThreshold() {
        #expect(Time.fromInteger(99_999_999_999) == 99_999_999_999)
        #expect(Time.fromInteger(100_000_000_000) == 100_000_000)
    }

    @Test func sizes() {
        #expect(ByteSize.parse("0") == 0)
        #expect(ByteSize.parse("512") == 512)
        #expect(ByteSize.parse("200M") == 200 << 20)
        #expect(ByteSize.parse("1k") == 1024)
        #expect(ByteSize.parse("2G") == 2 << 30)
        // SPEC v2: a trailing B or iB, either case.
        #expect(ByteSize.parse("300MB") == 300 << 20)
        #expect(ByteSize.parse("300MiB") == 300 << 20)
        #expect(ByteSize.parse("10kb") == 10 << 10)
        #expect(ByteSize.parse("512B") == 512)
        for bad in ["", "M", "1.5M", "-1", "10T", "1 M", "99999999999999999G", "B", "5iB", "MiB", "10bb"] {
            #expect(ByteSize.parse(bad) == nil, "\(bad)")
        }
    }
}

@Suite struct FormatTests {
    /// The formatter writes its bytes in place: at the ends of the supported range, before
    /// 1970 and at every millisecond boundary it writes what glibc's gmtime/strftime say.
    @Test func utcTimesAtTheEdgesAreGmtimes() {
        func reference(_ whole: Int) -> String {
            var t = time_t(whole)
            var tm = tm()
            gmtime_r(&t, &tm)
            var buffer = [CChar](repeating: 0, count: 64)
            strftime(&buffer, 64, "%Y-%m-%dT%H:%M:%S", &tm)
            let text = String(cString: buffer)
            // glibc writes years before 1000 unpadded.
            let year = Int(tm.tm_year) + 1900
            return year < 1000 ? Format.padded(year, width: 4) + text.drop { $0 != "-" } : text
        }
        let edges: [Int] = [
            -62_167_219_200, Int(Time.supported.upperBound) - 1, -1, 0, 951_782_400, 4_107_542_399,
            -2_208_988_800, 1_803_859_200, 253_402_300_799,
        ]
        var generator = SystemRandomNumberGenerator()
        let random = (0..<500).map { _ in
            Int.random(in: -62_167_219_200..<Int(Time.supported.upperBound), using: &generator)
        }
        for whole in edges + random {
            #expect(Time.format(Double(whole)) == reference(whole) + "Z", "\(whole)")
            #expect(Time.formatMillis(Double(whole) + 0.999_9) == reference(whole) + ".999Z", "\(whole)")
            #expect(Time.format(Double(whole) + 0.5) == reference(whole) + ".500Z", "\(whole)")
        }
        #expect(Time.format(.nan) == "1970-01-01T00:00:00Z")
        #expect(Time.format(1e300) == reference(Int(Time.supported.upperBound)) + "Z")
        // The day of room before year 0 (-62,167,219,200 is 0000-01-01T00:00:00Z).
        #expect(Time.format(-1e300) == "-1-12-31T00:00:00Z")
    }

    @Test func numbersAsPrintfWouldWriteThem() {
        #expect(Format.padded(7, width: 3) == "007")
        #expect(Format.padded(12345, width: 3) == "12345")
        #expect(Format.padded(UInt64(0xAB), width: 16, radix: 16) == "00000000000000ab")
        #expect(Format.padded(UInt64.max, width: 16, radix: 16) == "ffffffffffffffff")
        #expect(Format.percent(0x2F) == "%2F" && Format.percent(0x0A) == "%0A")
        #expect(Format.decimals(1.46, 1) == "1.5" && Format.decimals(9.96, 1) == "10.0")
        #expect(Format.decimals(0.04, 1) == "0.0" && Format.decimals(-2.25, 1) == "-2.3")
        #expect(Time.formatMillis(1_796_000_000.25) == "2026-11-30T00:53:20.250Z")
        #expect(Time.formatMillis(0) == "1970-01-01T00:00:00.000Z")
        #expect(Time.formatDay(20788) == "2026-12-01" && Time.parseDay("2026-12-01") == 20788)
        #expect(Time.parseDay("2026-02-30") == nil && Time.parseDay("26-12-01") == nil)
    }
}
