import CCurl

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// libcurl's functions, looked up once with dlopen/dlsym when the first transfer needs them
/// (`adcache next` never does, and so never pays for loading libcurl and its dependencies).
/// `curl_global_init` runs right after the lookup.
struct CurlAPI: @unchecked Sendable {
    typealias Handle = UnsafeMutableRawPointer
    let setopt: UnsafeMutableRawPointer
    let getinfo: UnsafeMutableRawPointer
    let multiSetopt: UnsafeMutableRawPointer
    let versionInfo: @convention(c) (CURLversion) -> UnsafeMutablePointer<curl_version_info_data>?
    let easyInit: @convention(c) () -> Handle?
    let easyCleanup: @convention(c) (Handle?) -> Void
    let easyStrerror: @convention(c) (CURLcode) -> UnsafePointer<CChar>?
    let easyPause: @convention(c) (Handle?, Int32) -> CURLcode
    let slistAppend:
        @convention(c) (UnsafeMutablePointer<curl_slist>?, UnsafePointer<CChar>?) -> UnsafeMutablePointer<curl_slist>?
    let slistFreeAll: @convention(c) (UnsafeMutablePointer<curl_slist>?) -> Void
    let multiInit: @convention(c) () -> Handle?
    let multiCleanup: @convention(c) (Handle?) -> CURLMcode
    let multiAdd: @convention(c) (Handle?, Handle?) -> CURLMcode
    let multiRemove: @convention(c) (Handle?, Handle?) -> CURLMcode
    let multiPerform: @convention(c) (Handle?, UnsafeMutablePointer<Int32>?) -> CURLMcode
    let multiPoll:
        @convention(c) (Handle?, UnsafeMutablePointer<curl_waitfd>?, UInt32, Int32, UnsafeMutablePointer<Int32>?) ->
            CURLMcode
    let multiInfoRead: @convention(c) (Handle?, UnsafeMutablePointer<Int32>?) -> UnsafeMutablePointer<CURLMsg>?
    let getdate: @convention(c) (UnsafePointer<CChar>?, UnsafePointer<time_t>?) -> time_t

    #if os(macOS)
        static let libraryNames = ["libcurl.4.dylib", "libcurl.dylib"]
    #else
        /// OpenSSL's build (Debian's libcurl4), else GnuTLS's (libcurl3-gnutls), else any.
        static let libraryNames = ["libcurl.so.4", "libcurl-gnutls.so.4", "libcurl.so"]
    #endif

    /// The loaded library, or why it could not be loaded.
    static let shared: Result<CurlAPI, AdCacheError> = {
        var lastError = "not found"
        for name in libraryNames {
            guard let lib = dlopen(name, RTLD_NOW | RTLD_LOCAL) else {
                lastError = dlerror().map { String(cString: $0) } ?? "not found"
                continue
            }
            do {
                let api = try CurlAPI(lib)
                try api.checkVersion()
                let globalInit: @convention(c) (Int) -> CURLcode = try symbol(lib, "curl_global_init")
                guard globalInit(Int(CURL_GLOBAL_ALL)) == CURLE_OK else {
                    return .failure(.libraryMissing("curl_global_init failed"))
                }
                return .success(api)
            } catch let e as AdCacheError {
                return .failure(e)
            } catch {
                return .failure(.libraryMissing("\(error)"))
            }
        }
        return .failure(
            .libraryMissing(
                "cannot load libcurl (\(libraryNames[0]) or \(libraryNames[1])): \(lastError); install the Debian package libcurl4 (or libcurl3-gnutls)"
            ))
    }()

    private init(_ lib: UnsafeMutableRawPointer) throws {
        setopt = try Self.raw(lib, "curl_easy_setopt")
        getinfo = try Self.raw(lib, "curl_easy_getinfo")
        multiSetopt = try Self.raw(lib, "curl_multi_setopt")
        versionInfo = try Self.symbol(lib, "curl_version_info")
        easyInit = try Self.symbol(lib, "curl_easy_init")
        easyCleanup = try Self.symbol(lib, "curl_easy_cleanup")
        easyStrerror = try Self.symbol(lib, "curl_easy_strerror")
        easyPause = try Self.symbol(lib, "curl_easy_pause")
        slistAppend = try Self.symbol(lib, "curl_slist_append")
        slistFreeAll = try Self.symbol(lib, "curl_slist_free_all")
        multiInit = try Self.symbol(lib, "curl_multi_init")
        multiCleanup = try Self.symbol(lib, "curl_multi_cleanup")
        multiAdd = try Self.symbol(lib, "curl_multi_add_handle")
        multiRemove = try Self.symbol(lib, "curl_multi_remove_handle")
        multiPerform = try Self.symbol(lib, "curl_multi_perform")
        multiPoll = try Self.symbol(lib, "curl_multi_poll")
        multiInfoRead = try Self.symbol(lib, "curl_multi_info_read")
        getdate = try Self.symbol(lib, "curl_getdate")
    }

    /// An HTTP date (`Date`, `Last-Modified`) as Unix seconds, parsed by libcurl (which reads
    /// the obsolete forms too); nil when it is not a date.
    func parseDate(_ text: String) -> Double? {
        let t = text.withCString { getdate($0, nil) }
        return t == -1 ? nil : Double(t)
    }

    private static func raw(_ lib: UnsafeMutableRawPointer, _ name: String) throws -> UnsafeMutableRawPointer {
        guard let p = dlsym(lib, name) else {
            throw AdCacheError.libraryMissing(
                "libcurl lacks \(name) (version 7.68 or later is needed: Debian package libcurl4)")
        }
        return p
    }

    private static func symbol<T>(_ lib: UnsafeMutableRawPointer, _ name: String) throws -> T {
        unsafeBitCast(try raw(lib, name), to: T.self)
    }

    /// The oldest libcurl whose protocol and redirect restrictions adcache relies on
    /// (Ubuntu 20.04, Debian 11): 7.68.0.
    static let minimumVersion: UInt32 = 0x07_44_00

    /// Refuses a libcurl older than `minimumVersion`.
    func checkVersion() throws {
        guard let info = versionInfo(adc_version_now()) else { return }
        try Self.check(versionNumber: info.pointee.version_num, text: version)
    }

    static func check(versionNumber: UInt32, text: String) throws {
        guard versionNumber >= minimumVersion else {
            throw AdCacheError.libraryMissing(
                "libcurl \(text) is too old (7.68 or later is needed); install a newer libcurl4 (or libcurl3-gnutls)")
        }
    }

    /// "7.88.1".
    var version: String {
        guard let info = versionInfo(adc_version_now()), let v = info.pointee.version else { return "unknown" }
        return String(cString: v)
    }
}

/// The default User-Agent: `adcache/<version> libcurl/<version>`.
func defaultUserAgent() -> String {
    let curl = (try? CurlAPI.shared.get())?.version ?? "unknown"
    return "adcache/\(AdCacheVersion.string) libcurl/\(curl)"
}

enum AdCacheVersion {
    static let string = "0.1.0"
}
