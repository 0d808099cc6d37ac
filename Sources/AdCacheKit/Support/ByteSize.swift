#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// SIZE on the command line: bytes, optionally with K, M or G (powers of 1024), and a
/// trailing `B` or `iB` in either case (`300MB`, `300MiB`, `10kb`).
package enum ByteSize {
    package static func parse(_ text: String) -> Int64? {
        var digits = Substring(text)
        for unit in ["ib", "b"] where digits.count > unit.count && digits.lowercased().hasSuffix(unit) {
            let rest = digits.dropLast(unit.count)
            // "B" alone means bytes; "iB" needs a K, M or G before it.
            if unit == "b" || "kmgKMG".contains(rest.last ?? " ") {
                digits = rest
                break
            }
            return nil
        }
        var scale: Int64 = 1
        switch digits.last {
        case "k", "K": scale = 1 << 10
        case "m", "M": scale = 1 << 20
        case "g", "G": scale = 1 << 30
        default: break
        }
        if scale != 1 { digits = digits.dropLast() }
        guard !digits.isEmpty, digits.count <= 15, digits.allSatisfy({ $0.isASCII && $0.isNumber }),
            let v = Int64(digits)
        else { return nil }
        let (r, overflow) = v.multipliedReportingOverflow(by: scale)
        return overflow ? nil : r
    }

    /// 1536 → "1.5K", as `ls -h` does.
    package static func human(_ bytes: Int64) -> String {
        let units = ["B", "K", "M", "G", "T"]
        var v = Double(bytes)
        var u = 0
        while v >= 1024, u < units.count - 1 { v /= 1024; u += 1 }
        if u == 0 { return "\(bytes)B" }
        return v < 10 ? Format.decimals(v, 1) + units[u] : "\(Int(v.rounded()))\(units[u])"
    }
}
