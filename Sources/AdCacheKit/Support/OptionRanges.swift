/// The ranges of the options, written once: the library checks them (`validate`) and the
/// command line declares its options with them (its own messages, checked first).
package enum OptionRanges {
    /// Seconds: `--timeout`.
    package static let timeout: ClosedRange<Double> = 0.001...86400
    /// Seconds: `--deadline`.
    package static let deadline: ClosedRange<Double> = 0.001...31_536_000
    package static let parallel: ClosedRange<Int> = 1...64
    package static let retries: ClosedRange<Int> = 0...20
    /// Seconds: `--jitter`.
    package static let jitter: ClosedRange<Double> = 0...86400
    package static let maxEvents: ClosedRange<Int> = 1...10_000_000
    /// Days: `--max-event-age`.
    package static let maxEventAge: ClosedRange<Int> = 1...365
}

extension TransferSettings {
    /// The ranges an app could get wrong (fetch and report alike); the command line checks
    /// them first, with its own messages.
    func validate(deadline: Double?) throws {
        func check(_ ok: Bool, _ what: String) throws {
            if !ok { throw AdCacheError.invalidRequest(what) }
        }
        let r = OptionRanges.self
        try check(r.timeout.contains(timeout), "the timeout must be 0.001 to 86400 seconds")
        try check(deadline.map(r.deadline.contains) ?? true, "the deadline must be 0.001 to 31536000 seconds")
        try check(r.parallel.contains(parallel), "parallel transfers must be 1 to 64")
        try check(r.retries.contains(retries), "retries must be 0 to 20")
    }
}
