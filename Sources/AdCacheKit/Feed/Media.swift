#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// Image or video: the two kinds of splash asset.
public enum AdType: String, Sendable, CaseIterable {
    /// A still image (JPEG, PNG, GIF, WebP), shown for the ad's countdown.
    case image
    /// A video (MP4, QuickTime, WebM).
    case video
}

/// The container formats adcache accepts, recognised by their first bytes.
package enum MediaFormat: String, Sendable {
    case jpeg, png, gif, webp, mp4, mov, webm

    var type: AdType {
        switch self {
        case .jpeg, .png, .gif, .webp: return .image
        case .mp4, .mov, .webm: return .video
        }
    }

    /// The extension of the cached file.
    var fileExtension: String {
        switch self {
        case .jpeg: return "jpg"
        default: return rawValue
        }
    }

    /// Recognises a format from a file's first bytes (16 are enough).
    static func sniff(_ b: [UInt8]) -> MediaFormat? {
        func at(_ offset: Int, _ s: [UInt8]) -> Bool {
            b.count >= offset + s.count && Array(b[offset..<(offset + s.count)]) == s
        }
        if at(0, [0xFF, 0xD8, 0xFF]) { return .jpeg }
        if at(0, [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]) { return .png }
        if at(0, Array("GIF87a".utf8)) || at(0, Array("GIF89a".utf8)) { return .gif }
        if at(0, Array("RIFF".utf8)) && at(8, Array("WEBP".utf8)) { return .webp }
        if at(4, Array("ftyp".utf8)) { return at(8, Array("qt  ".utf8)) ? .mov : .mp4 }
        if at(0, [0x1A, 0x45, 0xDF, 0xA3]) { return .webm }
        return nil
    }

    /// The type an extension names (`.jpg` → image), or nil.
    package static func type(forExtension ext: String) -> AdType? {
        switch ext.lowercased() {
        case "jpg", "jpeg", "png", "gif", "webp": return .image
        case "mp4", "m4v", "mov", "webm", "mkv": return .video
        default: return nil
        }
    }

    /// The type a Content-Type names (`image/png; q=1` → image), or nil.
    static func type(forContentType contentType: String) -> AdType? {
        let main =
            contentType.lowercased().split(separator: ";").first.map {
                $0.trimmed()
            } ?? ""
        if main.hasPrefix("image/") { return .image }
        if main.hasPrefix("video/") { return .video }
        return nil
    }
}
