#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// HTTP freshness (RFC 9111 §4.2), as a private cache reckons it: a response is fresh for
/// `max-age`, else `Expires` minus `Date`, less its `Age`; `s-maxage` is for shared caches
/// (§5.2.2.10) and is ignored; `no-store`, `no-cache` and `max-age=0` make it stale at once,
/// and there is no heuristic freshness.
enum Freshness {
    /// Until when (in `receivedAt`'s clock) a response with `headers` may be used without
    /// asking again, or nil: ask next time.
    static func until(_ headers: [String: String], receivedAt now: Double, parseDate: (String) -> Double?) -> Double? {
        let directives = (headers["cache-control"] ?? "").lowercased().split(separator: ",")
            .map { $0.trimmed() }
        if directives.contains(where: { $0 == "no-store" || $0.hasPrefix("no-cache") }) { return nil }
        func seconds(_ name: String) -> Double? {
            for d in directives where d.hasPrefix(name + "=") {
                return Double(d.dropFirst(name.count + 1).trimming { $0 == "\"" })
            }
            return nil
        }
        var lifetime: Double
        if let s = seconds("max-age") {
            lifetime = s
        } else if let expires = headers["expires"] {
            guard let e = parseDate(expires) else { return nil }   // an invalid Expires is in the past
            lifetime = e - (headers["date"].flatMap(parseDate) ?? now)
        } else {
            return nil
        }
        lifetime -= headers["age"].flatMap(Double.init) ?? 0
        guard lifetime.isFinite, lifetime > 0 else { return nil }
        return now + min(lifetime, 365 * 86400)
    }
}
