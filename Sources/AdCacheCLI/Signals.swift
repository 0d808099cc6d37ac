#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// SIGINT and SIGTERM during a fetch: noted here by the handler (the only thing a handler may
/// safely do), read by the fetch, which stops its transfers, keeps their partial files and
/// commits what finished (SPEC §4); the command then exits 130 or 143.
enum Signals {
    nonisolated(unsafe) private static var caught: sig_atomic_t = 0

    /// Installs the handlers (for the rest of the process).
    static func watch() {
        caught = 0
        var set = sigset_t()
        sigemptyset(&set)
        for sig in [SIGINT, SIGTERM] {
            signal(sig) { Signals.caught = $0 }
            sigaddset(&set, sig)
        }
        // A parent may have started us with them blocked (a service manager, a test runner).
        pthread_sigmask(SIG_UNBLOCK, &set, nil)
    }

    /// The default actions again, once the fetch is over (a process that runs the command
    /// line in-process, like the tests, keeps its Ctrl-C).
    static func restore() {
        for sig in [SIGINT, SIGTERM] { signal(sig, SIG_DFL) }
    }

    /// The signal caught since `watch`, or nil.
    static var received: Int32? { caught == 0 ? nil : Int32(caught) }

}
