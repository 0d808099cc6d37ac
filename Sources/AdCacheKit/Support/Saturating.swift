/// Arithmetic on counts read from disk: held at the type's bounds instead of trapping, so
/// that no damaged number in the index, the journal or the queue can crash a command
/// (SPEC §6). A count at its bound stays there; it never wraps to a small one.
extension FixedWidthInteger {
    func adding(_ b: Self) -> Self {
        let (r, overflow) = addingReportingOverflow(b)
        return overflow ? (b < 0 ? .min : .max) : r
    }

    func subtracting(_ b: Self) -> Self {
        let (r, overflow) = subtractingReportingOverflow(b)
        return overflow ? (b < 0 ? .max : .min) : r
    }

    func times(_ b: Self) -> Self {
        let (r, overflow) = multipliedReportingOverflow(by: b)
        return overflow ? ((self < 0) == (b < 0) ? .max : .min) : r
    }

    /// `self += b`, saturating.
    mutating func add(_ b: Self) { self = adding(b) }
}
