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

// Small text, path and lock helpers of our own, so that the library needs only
// FoundationEssentials (no ICU tables: SPEC §7's footprint).

extension StringProtocol {
    /// Without leading and trailing blanks (spaces, tabs and the other Unicode spaces; not
    /// line breaks), as Foundation's `trimmingCharacters(in: .whitespaces)`.
    package func trimmed() -> String {
        trimming { $0.isWhitespace && !$0.isNewline }
    }

    /// Without leading and trailing blanks and line breaks (`.whitespacesAndNewlines`).
    package func trimmedWithNewlines() -> String {
        trimming(\.isWhitespace)
    }

    /// Without leading and trailing characters that `drop` says go.
    package func trimming(_ drop: (Character) -> Bool) -> String {
        guard let first = firstIndex(where: { !drop($0) }), let last = lastIndex(where: { !drop($0) }) else {
            return ""
        }
        return String(self[first...last])
    }
}

/// Path arithmetic on strings, as NSString's path methods do it.
package enum PathText {
    /// `a/b` from `a` and `b` (one slash between).
    package static func join(_ base: String, _ component: String) -> String {
        if base.isEmpty { return component }
        return base.hasSuffix("/") ? base + component : base + "/" + component
    }

    /// `path` as given when absolute, else against the working directory.
    package static func absolute(_ path: String) -> String {
        path.hasPrefix("/") ? path : join(FileManager.default.currentDirectoryPath, path)
    }

    /// The directory part: `/a` of `/a/b`, `/` of `/a`, empty for `a`.
    package static func parent(_ path: String) -> String {
        var p = Substring(path)
        while p.count > 1, p.hasSuffix("/") { p.removeLast() }
        guard let i = p.lastIndex(of: "/") else { return "" }
        return i == p.startIndex ? "/" : String(p[..<i])
    }

    /// The extension of the last component, without its dot (`jpg` of `/a/b.jpg`); empty
    /// when there is none (or the name begins with its only dot).
    package static func pathExtension(_ path: String) -> String {
        let name = path.split(separator: "/").last ?? ""
        guard let dot = name.lastIndex(of: "."), dot != name.startIndex else { return "" }
        return String(name[name.index(after: dot)...])
    }
}

/// A mutex (pthread), for the few values threads share.
package final class Lock: @unchecked Sendable {
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)

    package init() { pthread_mutex_init(mutex, nil) }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    package func lock() { pthread_mutex_lock(mutex) }
    package func unlock() { pthread_mutex_unlock(mutex) }

    package func withLock<T>(_ body: () throws -> T) rethrows -> T {
        lock()
        defer { unlock() }
        return try body()
    }
}

extension String {
    /// Left-aligned in `width` characters, padded with spaces (never cut).
    package func padded(to width: Int) -> String {
        count >= width ? self : self + String(repeating: " ", count: width - count)
    }
}
