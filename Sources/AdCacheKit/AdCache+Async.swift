#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The `async` forms of the calls that take long (SPEC §1 v4): overloads of the same names
/// (`try await cache.fetch(options)`), each run on a thread of its own — never blocking the
/// concurrency pool a launch's task needs — and honouring task cancellation as the command
/// line honours SIGINT: what finished is committed, and the call ends early.
extension AdCache {
    /// `fetch`, for a `Task`. Cancelled, it stops its transfers, commits what finished and
    /// returns the report with `interrupted` set; cancelled before there was anything to
    /// commit (while the feed was read), it throws `CancellationError`.
    public func fetch(
        _ options: FetchOptions = FetchOptions(), progress: (@Sendable (FetchProgress) -> Void)? = nil
    ) async throws -> FetchReport {
        let flag = CancellationFlag()
        var options = options
        let asked = options.transfer.isCancelled
        options.transfer.isCancelled = { flag.isSet || asked?() == true }
        let run = options
        return try await Self.onItsOwnThread(cancelling: flag) { try self.fetch(run, progress: progress) }
    }

    /// `report`, for a `Task`. Cancelled, it stops its deliveries; what was delivered is
    /// recorded, the rest stays queued, and it returns what it did (or throws
    /// `CancellationError` when it had not begun).
    public func report(_ options: ReportOptions = ReportOptions()) async throws -> ReportResult {
        let flag = CancellationFlag()
        var options = options
        let asked = options.transfer.isCancelled
        options.transfer.isCancelled = { flag.isSet || asked?() == true }
        let run = options
        return try await Self.onItsOwnThread(cancelling: flag) { try self.report(run) }
    }

    /// `verify`, for a `Task`. Cancelled, it stops before the next file; what it found is
    /// set aside and reported, with `cancelled` set.
    public func verify() async throws -> VerifyReport {
        let flag = CancellationFlag()
        return try await Self.onItsOwnThread(cancelling: flag) {
            try self.store.verify(warn: self.configuration.diagnostics) { flag.isSet }
        }
    }

    /// Runs `body` on a new thread; cancellation sets `flag`. A failure the cancellation caused
    /// (a transfer stopped) becomes `CancellationError`; any other error stays itself.
    static func onItsOwnThread<T: Sendable>(
        cancelling flag: CancellationFlag, _ body: @escaping @Sendable () throws -> T
    ) async throws -> T {
        try Task.checkCancellation()
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, Error>) in
                let failed = startThread {
                    do {
                        continuation.resume(returning: try body())
                    } catch let e as AdCacheError where flag.isSet && e.failure?.kind == .stopped {
                        continuation.resume(throwing: CancellationError())   // stopped by the cancellation
                    } catch {
                        continuation.resume(throwing: error)   // a full disk stays a full disk
                    }
                }
                if failed != 0 {
                    continuation.resume(throwing: AdCacheError.io("cannot start a thread: \(FileIO.errnoText(failed))"))
                }
            }
        } onCancel: {
            flag.set()
        }
    }
}

/// Set once, read from any thread.
final class CancellationFlag: @unchecked Sendable {
    private let lock = Lock()
    private var value = false
    var isSet: Bool { lock.lock(); defer { lock.unlock() }; return value }
    func set() { lock.lock(); value = true; lock.unlock() }
}

/// Starts a detached POSIX thread (8 MiB of stack) running `body`; 0, or pthread_create's
/// error when none could be made.
private func startThread(_ body: @escaping @Sendable () -> Void) -> Int32 {
    let box = Unmanaged.passRetained(ThreadBody(body)).toOpaque()
    var attributes = pthread_attr_t()
    pthread_attr_init(&attributes)
    defer { pthread_attr_destroy(&attributes) }
    pthread_attr_setstacksize(&attributes, 8 << 20)
    pthread_attr_setdetachstate(&attributes, Int32(PTHREAD_CREATE_DETACHED))
    var thread = pthread_t()
    let made = pthread_create(
        &thread, &attributes,
        { raw in
            guard let raw else { return nil }
            Unmanaged<ThreadBody>.fromOpaque(raw).takeRetainedValue().body()
            return nil
        }, box)
    if made != 0 { Unmanaged<ThreadBody>.fromOpaque(box).release() }
    return made
}

/// What a thread of `startThread` runs.
private final class ThreadBody: @unchecked Sendable {
    let body: @Sendable () -> Void
    init(_ body: @escaping @Sendable () -> Void) { self.body = body }
}
