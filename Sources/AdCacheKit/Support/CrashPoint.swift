#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Named steps where a test build ends the process at once, as a crash or `kill -9` would
/// there (the way SQLite's crash tests work): `ADCACHE_CRASH_AT=fold.afterEvents adcache
/// prune` exits with status 222 right after the fold's event queue is durable. Tests crash at
/// each step and check the cache's invariants, instead of hoping a timed kill lands between
/// two steps. `name#N` crashes at the Nth time the step is reached. A release build has no
/// crash points.
enum CrashPoint {
    static let status: Int32 = 222

    #if DEBUG
        private static let armed: (name: String, count: Int)? = {
            guard let value = getenv("ADCACHE_CRASH_AT").map({ String(cString: $0) }), !value.isEmpty else {
                return nil
            }
            let parts = value.split(separator: "#", maxSplits: 1)
            return (String(parts[0]), parts.count == 2 ? Int(parts[1]) ?? 1 : 1)
        }()
        nonisolated(unsafe) private static var reached = 0
    #endif

    /// Ends the process here when the test environment names this step.
    @inline(__always)
    static func reach(_ name: @autoclosure () -> String) {
        #if DEBUG
            guard let armed, armed.name == name() else { return }
            reached += 1
            if reached >= armed.count { _exit(status) }
        #endif
    }
}
