/// The stable machine interface: `next --json` and `list --json` objects (SPEC §4).
extension NextChoice {
    public var json: JSONOut {
        let r = record
        return .object([
            ("id", .string(r.id)),
            ("path", .string(path)),
            ("type", .string(r.type?.rawValue)),
            ("placement", .string(r.placement)),
            ("duration", .int(Int64(r.duration))),
            ("clickUrl", .string(r.clickUrl)),
            ("remainingShows", .int(remainingShows)),
            ("expires", .time(r.expires)),
            ("priority", .int(r.priority)),
            ("meta", r.meta.map { .raw($0) } ?? .null),
            ("fallback", .bool(false)),
        ])
    }

    /// The `--fallback FILE` answer when nothing is eligible.
    public static func fallbackJSON(path: String, placement: String) -> JSONOut {
        .object([
            ("id", .null),
            ("path", .string(path)),
            ("type", .string(MediaFormat.type(forExtension: (path as NSString).pathExtension)?.rawValue)),
            ("placement", .string(placement)),
            ("duration", .int(Int64(FeedAd.defaultDuration))),
            ("clickUrl", .null),
            ("remainingShows", .null),
            ("expires", .null),
            ("priority", .null),
            ("meta", .null),
            ("fallback", .bool(true)),
        ])
    }
}

/// One row of `list`.
public struct ListEntry: Sendable {
    public var record: AdRecord
    public var state: AdState
    public var path: String?

    public var json: JSONOut {
        let r = record
        return .object([
            ("id", .string(r.id)),
            ("url", .string(r.url)),
            ("type", .string(r.type?.rawValue)),
            ("placement", .string(r.placement)),
            ("state", .string(state.rawValue)),
            ("shows", .int(r.shows)),
            ("maxShows", .int(r.maxShows)),
            ("priority", .int(r.priority)),
            ("start", .time(r.start)),
            ("expires", .time(r.expires)),
            ("lastShown", .time(r.lastShown)),
            ("bytes", .int(r.file == nil ? nil : r.bytes)),
            ("path", .string(path)),
            ("error", .string(state == .failed ? r.error : nil)),
        ])
    }
}

extension CacheStore {
    /// The cache at a glance, as of `t`.
    public func listing(at t: Double, warn: WarningSink) throws -> [ListEntry] {
        guard exists else { return [] }
        return try load(warn: warn).ads.map { r in
            let present = filePresent(r)
            return ListEntry(record: r, state: r.displayState(at: t, filePresent: present),
                             path: r.file.map(assetPath))
        }
    }
}

import Foundation
