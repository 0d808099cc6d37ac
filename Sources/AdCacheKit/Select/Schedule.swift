/// When in the local week an ad may be shown (SPEC §2 `hours`, `days`): wall-clock windows
/// `[start, end)` in minutes of the day (an end at or before the start crosses midnight and
/// belongs to the day it starts on), on some weekdays.
struct Schedule: Equatable, Sendable {
    struct Window: Equatable, Sendable {
        var start: Int   // 0...1439
        var end: Int   // 0...1440 (0: until midnight, after a start later in the day)
        var crossesMidnight: Bool { end <= start }
    }

    /// Empty: the whole day.
    var windows: [Window] = []
    /// Bit `n` for weekday `n` (0 Sunday … 6 Saturday, as `tm_wday`); nil: every day.
    var days: UInt8?

    static let dayNames = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"]

    var isAlways: Bool { windows.isEmpty && days == nil }

    /// `"HH:MM-HH:MM"` (00:00 to 24:00), or nil.
    static func window(_ text: String) -> Window? {
        let parts = text.split(separator: "-", omittingEmptySubsequences: false)
        guard parts.count == 2, let start = minute(parts[0]), let end = minute(parts[1]),
            start < 1440, start != end
        else { return nil }
        return Window(start: start, end: end)
    }

    private static func minute(_ s: Substring) -> Int? {
        let b = Array(s.utf8)
        guard b.count == 5, b[2] == UInt8(ascii: ":"),
            let h = Int(String(s.prefix(2))), let m = Int(String(s.suffix(2))),
            b[0..<2].allSatisfy({ $0 >= 48 && $0 <= 57 }), b[3..<5].allSatisfy({ $0 >= 48 && $0 <= 57 }),
            (0...24).contains(h), (0...59).contains(m), h < 24 || m == 0
        else { return nil }
        return h * 60 + m
    }

    /// `"mon"` … `"sun"`, any case, or nil.
    static func day(_ text: String) -> Int? {
        dayNames.firstIndex(of: text.lowercased())
    }

    /// A feed's or the index's `hours`: nil unless every one is a window (and there is one).
    static func windows(_ texts: [String]) -> [Window]? {
        let windows = texts.compactMap(window)
        return !texts.isEmpty && windows.count == texts.count ? windows : nil
    }

    /// A feed's or the index's `days` as a weekday mask: nil unless every one is a day.
    static func dayMask(_ texts: [String]) -> UInt8? {
        let days = texts.compactMap(day)
        guard !texts.isEmpty, days.count == texts.count else { return nil }
        return days.reduce(UInt8(0)) { $0 | (1 << UInt8($1)) }
    }

    /// Whether `local` (a wall-clock minute on a weekday) is inside.
    func allows(_ local: LocalTime) -> Bool {
        func dayAllowed(_ d: Int) -> Bool { days.map { $0 & (1 << UInt8((d + 7) % 7)) != 0 } ?? true }
        if windows.isEmpty { return dayAllowed(local.weekday) }
        for w in windows {
            if w.crossesMidnight {
                if local.minute >= w.start && dayAllowed(local.weekday) { return true }
                if local.minute < w.end && dayAllowed(local.weekday - 1) { return true }
            } else if local.minute >= w.start && local.minute < w.end && dayAllowed(local.weekday) {
                return true
            }
        }
        return false
    }

    /// The index's form: `["22:00-02:00"]`, `["fri", "sat"]`.
    var hoursText: [String]? {
        windows.isEmpty ? nil : windows.map { Self.text($0.start) + "-" + Self.text($0.end) }
    }

    var daysText: [String]? {
        days.map { mask in (0..<7).filter { mask & (1 << UInt8($0)) != 0 }.map { Self.dayNames[$0] } }
    }

    private static func text(_ minute: Int) -> String {
        let h = minute / 60
        let m = minute % 60
        return (h < 10 ? "0" : "") + "\(h):" + (m < 10 ? "0" : "") + "\(m)"
    }
}

/// A moment as the device's wall clock shows it (libc's localtime_r and `TZ`).
struct LocalTime: Equatable, Sendable {
    /// Days since 1970-01-01 in the local zone.
    var day: Int
    /// Minutes since local midnight.
    var minute: Int
    /// 0 Sunday … 6 Saturday.
    var weekday: Int
}
