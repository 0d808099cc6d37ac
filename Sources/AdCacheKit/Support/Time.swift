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

/// Times are Unix seconds (a Double, so milliseconds survive). This file reads the forms the
/// feed and the command line accept, and writes RFC 3339.
enum Time {
    /// Integers from this value up are milliseconds (SPEC §2).
    static let millisecondThreshold: Int64 = 100_000_000_000

    static func fromInteger(_ i: Int64) -> Double {
        i >= millisecondThreshold ? Double(i) / 1000 : Double(i)
    }

    /// The times adcache handles: the years 0000 to 9999 that RFC 3339 can write, with a day
    /// of slack each side for zone offsets. A feed or command-line time outside them is not
    /// a time; an index record holding one is dropped (SPEC §6).
    static let supported: ClosedRange<Double> = -62_167_305_600...253_402_387_199

    /// The local day numbers a record may carry (days since 1970; `supported`, with room).
    static let supportedDays: ClosedRange<Int> = -800_000...3_000_000

    /// True for a finite time in `supported`.
    static func isSupported(_ t: Double) -> Bool { supported.contains(t) }

    /// A feed or command-line time: an integer (seconds or milliseconds, also as a string of
    /// digits) or an RFC 3339 string with a zone offset; nil outside `supported`.
    static func parse(_ value: JSONValue) -> Double? {
        var t: Double?
        if let i = value.integerValue {
            t = fromInteger(i)
        } else if let s = value.stringValue {
            t = parseRFC3339(s)
        }
        return t.flatMap { isSupported($0) ? $0 : nil }
    }

    /// `t` brought into `supported` (NaN reads as 0): whatever a caller holds, the
    /// conversions to integers below cannot trap.
    static func clamped(_ t: Double) -> Double {
        t.isNaN ? 0 : min(max(t, supported.lowerBound), supported.upperBound)
    }

    static func parse(_ text: String) -> Double? {
        parse(.string(text))
    }

    /// RFC 3339: `YYYY-MM-DDTHH:MM:SS[.frac](Z|±HH:MM)`. `t` and a space are accepted for
    /// `T`, as RFC 3339 allows. A date-time without a zone is rejected.
    static func parseRFC3339(_ text: String) -> Double? {
        let b = Array(text.utf8)
        func num(_ from: Int, _ len: Int) -> Int? {
            guard from + len <= b.count else { return nil }
            var v = 0
            for i in from..<(from + len) {
                guard b[i] >= 48, b[i] <= 57 else { return nil }
                v = v * 10 + Int(b[i] - 48)
            }
            return v
        }
        guard b.count >= 20,
            let year = num(0, 4), b[4] == UInt8(ascii: "-"),
            let month = num(5, 2), b[7] == UInt8(ascii: "-"),
            let day = num(8, 2),
            [UInt8(ascii: "T"), UInt8(ascii: "t"), UInt8(ascii: " ")].contains(b[10]),
            let hour = num(11, 2), b[13] == UInt8(ascii: ":"),
            let minute = num(14, 2), b[16] == UInt8(ascii: ":"),
            let second = num(17, 2)
        else { return nil }
        guard (1...12).contains(month), day >= 1, day <= daysIn(month: month, year: year),
            hour < 24, minute < 60, second <= 60
        else { return nil }
        var i = 19
        var fraction = 0.0
        if i < b.count, b[i] == UInt8(ascii: ".") {
            i += 1
            var scale = 0.1
            let start = i
            while i < b.count, b[i] >= 48, b[i] <= 57 {
                fraction += Double(b[i] - 48) * scale
                scale /= 10
                i += 1
            }
            if i == start { return nil }
        }
        guard i < b.count else { return nil }
        var offset = 0
        switch b[i] {
        case UInt8(ascii: "Z"), UInt8(ascii: "z"):
            i += 1
        case UInt8(ascii: "+"), UInt8(ascii: "-"):
            guard let oh = num(i + 1, 2), i + 3 < b.count, b[i + 3] == UInt8(ascii: ":"),
                let om = num(i + 4, 2), oh < 24, om < 60
            else { return nil }
            offset = (oh * 60 + om) * 60 * (b[i] == UInt8(ascii: "-") ? -1 : 1)
            i += 6
        default:
            return nil
        }
        guard i == b.count else { return nil }
        let days = daysFromCivil(year: year, month: month, day: day)
        let secs = days * 86400 + hour * 3600 + minute * 60 + min(second, 59) - offset
        return Double(secs) + fraction
    }

    /// RFC 3339 in UTC, with milliseconds only when there are some.
    static func format(_ t: Double) -> String {
        let t = clamped(t)
        let whole = t.rounded(.down)
        let ms = Int(((t - whole) * 1000).rounded())
        return utc(whole, millis: ms > 0 && ms < 1000 ? ms : nil)
    }

    /// `YYYY-MM-DDTHH:MM:SS[.mmm]Z` of a whole second in `supported`, its bytes written in
    /// place (years 0000-9999; the day before year 0 as `-1-12-31…`): proof of play formats one a record (a fold of 10,000 events
    /// into the ledger, a report's batch), where string interpolation cost a sixth of the fold.
    static func utc(_ whole: Double, millis: Int?) -> String {
        let seconds = Int(whole)
        var days = seconds / 86400
        var rem = seconds % 86400
        if rem < 0 { rem += 86400; days -= 1 }
        let (y, m, d) = civilFromDays(days)
        guard (0...9999).contains(y) else {   // the day of room below year 0 (`supported`)
            let time = [rem / 3600, rem / 60 % 60, rem % 60].map { Format.padded($0, width: 2) }.joined(separator: ":")
            return "\(y)-\(Format.padded(m, width: 2))-\(Format.padded(d, width: 2))T\(time)"
                + (millis.map { "." + Format.padded($0, width: 3) } ?? "") + "Z"
        }
        let count = millis == nil ? 20 : 24
        return String(unsafeUninitializedCapacity: count) { out in
            func put(_ v: Int, _ width: Int, at i: Int) {
                var v = v
                for k in stride(from: i + width - 1, through: i, by: -1) {
                    out[k] = UInt8(ascii: "0") &+ UInt8(v % 10)
                    v /= 10
                }
            }
            put(y, 4, at: 0)
            out[4] = UInt8(ascii: "-")
            put(m, 2, at: 5)
            out[7] = UInt8(ascii: "-")
            put(d, 2, at: 8)
            out[10] = UInt8(ascii: "T")
            put(rem / 3600, 2, at: 11)
            out[13] = UInt8(ascii: ":")
            put(rem / 60 % 60, 2, at: 14)
            out[16] = UInt8(ascii: ":")
            put(rem % 60, 2, at: 17)
            if let millis {
                out[19] = UInt8(ascii: ".")
                put(millis, 3, at: 20)
            }
            out[count - 1] = UInt8(ascii: "Z")
            return count
        }
    }

    /// RFC 3339 in local time with its offset (`2026-12-02T09:30:00+08:00`), whole seconds.
    static func formatLocal(_ t: Double) -> String {
        var seconds = time_t(clamped(t).rounded(.down))
        var parts = tm()
        guard localtime_r(&seconds, &parts) != nil else { return format(t) }
        let offset = Int(parts.tm_gmtoff)
        let utc = format(Double(seconds) + Double(offset))   // the wall clock, spelled as UTC
        let sign = offset < 0 ? "-" : "+"
        let zone =
            "\(sign)\(Format.padded(abs(offset) / 3600, width: 2)):\(Format.padded(abs(offset) / 60 % 60, width: 2))"
        return String(utc.dropLast()) + zone
    }

    /// The local calendar day (days since 1970-01-01 in the device's time zone, `TZ`).
    /// Read through libc's localtime_r: Foundation's TimeZone.current would load ICU, which
    /// costs `next` more than everything else it does.
    static func localDay(_ t: Double) -> Int { local(t).day }

    /// The wall clock at `t`: local day, minute of the day and weekday.
    static func local(_ t: Double) -> LocalTime {
        let t = clamped(t)
        var seconds = time_t(t.rounded(.down))
        var parts = tm()
        guard localtime_r(&seconds, &parts) != nil else {
            let day = Int((t / 86400).rounded(.down))
            return LocalTime(day: day, minute: Int((t - Double(day) * 86400) / 60), weekday: (day % 7 + 11) % 7)
        }
        let day = Int(((t + Double(parts.tm_gmtoff)) / 86400).rounded(.down))
        return LocalTime(day: day, minute: Int(parts.tm_hour) * 60 + Int(parts.tm_min), weekday: Int(parts.tm_wday))
    }

    static func daysIn(month: Int, year: Int) -> Int {
        switch month {
        case 2: return (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 ? 29 : 28
        case 4, 6, 9, 11: return 30
        default: return 31
        }
    }

    // Howard Hinnant's days_from_civil / civil_from_days.
    static func daysFromCivil(year: Int, month: Int, day: Int) -> Int {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yoe = y - era * 400
        let mp = (month + 9) % 12
        let doy = (153 * mp + 2) / 5 + day - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        return era * 146097 + doe - 719468
    }

    static func civilFromDays(_ z0: Int) -> (Int, Int, Int) {
        let z = z0 + 719468
        let era = (z >= 0 ? z : z - 146096) / 146097
        let doe = z - era * 146097
        let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
        let mp = (5 * doy + 2) / 153
        let d = doy - (153 * mp + 2) / 5 + 1
        let m = mp < 10 ? mp + 3 : mp - 9
        return (yoe + era * 400 + (m <= 2 ? 1 : 0), m, d)
    }
}

/// Seconds on a clock that never jumps (for timeouts and deadlines, not for dates).
func monotonicNow() -> Double {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
}

/// The boot clock (`CLOCK_BOOTTIME`: seconds since boot, suspend included, never stepped by
/// NTP or a person) and the boot it belongs to (`/proc/sys/kernel/random/boot_id`).
struct BootClock: Equatable, Sendable {
    var bootId: String
    var seconds: Double

    /// Now; nil where the system has no such clock.
    static func now() -> BootClock? {
        #if os(Linux)
            var ts = timespec()
            guard let id = currentBootId, clock_gettime(CLOCK_BOOTTIME, &ts) == 0 else { return nil }
            return BootClock(bootId: id, seconds: Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9)
        #else
            return nil
        #endif
    }

    /// This boot's id, read once a process (a fetch asks the time for every asset).
    private static let currentBootId: String? = {
        guard let bytes = try? FileIO.read("/proc/sys/kernel/random/boot_id", limit: 64) else { return nil }
        let id = String(decoding: bytes, as: UTF8.self).trimmedWithNewlines()
        return id.isEmpty ? nil : id
    }()
}

/// Where the last clock measurement was made (SPEC §6): the device clock's reading and the
/// boot clock's. Until the machine reboots, the trusted time is the server's time then plus
/// the boot clock's elapsed time since — so a device clock that NTP steps after the
/// measurement (a box that booted in 1970, then synced) does not shift it by the offset.
struct ClockSync: Equatable, Sendable {
    var device: Double
    var boot: BootClock

    /// Now on the trusted clock, from a device clock reading `t` and a measured `offset`:
    /// `t + offset`, unless since this measurement, in this boot, the device clock was
    /// stepped by more than the tolerance (it no longer moves with the boot clock): then the
    /// server's time at the measurement plus the time elapsed since.
    func trusted(deviceNow t: Double, offset: Double, bootNow: BootClock? = BootClock.now()) -> Double {
        guard let b = bootNow, b.bootId == boot.bootId, b.seconds >= boot.seconds else { return t + offset }
        let elapsed = b.seconds - boot.seconds
        guard abs(t - (device + elapsed)) > Self.stepTolerance else { return t + offset }
        return device + offset + elapsed
    }

    static let stepTolerance: Double = 300

    /// The one rule for "now" (SPEC §6), for `fetch` and for every other command: the device
    /// clock `t`, corrected by the measured `offset` (none: as it reads), and by `sync` too
    /// when `t` is the system's clock (`bootClock`).
    static func corrected(_ t: Double, offset: Double?, sync: ClockSync?, bootClock: Bool) -> Double {
        guard let offset else { return t }
        guard bootClock, let sync else { return t + offset }
        return sync.trusted(deviceNow: t, offset: offset)
    }

    /// "<boot id> <boot seconds> <device seconds>", as the index stores it.
    var text: String { "\(boot.bootId) \(boot.seconds) \(device)" }

    init(device: Double, boot: BootClock) {
        self.device = device
        self.boot = boot
    }

    init?(text: String) {
        let parts = text.split(separator: " ")
        guard parts.count == 3, let b = Double(parts[1]), let d = Double(parts[2]), b >= 0, Time.isSupported(d),
            parts[0].count <= 64
        else { return nil }
        self.init(device: d, boot: BootClock(bootId: String(parts[0]), seconds: b))
    }
}
