/// Number formatting without Foundation's `String(format:)`, which sets up locale machinery
/// on first use: `next` formats a time and a nonce on every recorded show.
package enum Format {
    /// `value` in `radix`, left-padded with zeros to `width` digits (lowercase letters).
    package static func padded<T: BinaryInteger>(_ value: T, width: Int, radix: Int = 10) -> String {
        let digits = String(value, radix: radix)
        return digits.count >= width ? digits : String(repeating: "0", count: width - digits.count) + digits
    }

    /// `%XX`: a byte for a URL.
    static func percent(_ byte: UInt8) -> String {
        "%" + padded(byte, width: 2, radix: 16).uppercased()
    }

    /// A fixed number of decimals, rounded (`1.5` for 1.46 with one decimal).
    static func decimals(_ v: Double, _ places: Int) -> String {
        var scale = 1.0
        for _ in 0..<places { scale *= 10 }
        let scaled = Int64((abs(v) * scale).rounded())
        let whole = scaled / Int64(scale)
        let fraction = padded(scaled % Int64(scale), width: places)
        return (v < 0 && scaled != 0 ? "-" : "") + "\(whole)" + (places > 0 ? "." + fraction : "")
    }

    /// A span of seconds as a person reads it: `45 s`, `12 min`, `5 h`, `3 days`.
    package static func duration(_ seconds: Double) -> String {
        guard seconds.isFinite else { return "ever" }
        let s = Int64(clamping: Int(seconds.rounded(.down)))
        if s < 120 { return "\(s) s" }
        if s < 7200 { return "\(s / 60) min" }
        if s < 2 * 86400 { return "\(s / 3600) h" }
        return "\(s / 86400) days"
    }
}
