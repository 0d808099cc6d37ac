import CCurl

/// libcurl's process-wide state: `curl_global_init` runs once, lazily.
enum CurlGlobal {
    private static let initialized: Bool = {
        curl_global_init(Int(CURL_GLOBAL_ALL)) == CURLE_OK
    }()

    static func ensure() { _ = initialized }

    /// "7.88.1", for the default User-Agent.
    static let version: String = {
        guard let info = adc_version_info(), let v = info.pointee.version else { return "unknown" }
        return String(cString: v)
    }()
}

/// The default User-Agent: `adcache/<version> libcurl/<version>`.
public func defaultUserAgent() -> String {
    "adcache/\(AdCacheVersion.string) libcurl/\(CurlGlobal.version)"
}

public enum AdCacheVersion {
    public static let string = "0.1.0"
}
