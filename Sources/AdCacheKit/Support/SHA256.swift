import CCrypto

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// libcrypto's EVP digest functions, looked up once with dlopen/dlsym by the first digest.
struct CryptoAPI: @unchecked Sendable {
    let newContext: @convention(c) () -> OpaquePointer?
    let freeContext: @convention(c) (OpaquePointer?) -> Void
    let sha256: @convention(c) () -> OpaquePointer?
    let digestInit: @convention(c) (OpaquePointer?, OpaquePointer?, OpaquePointer?) -> Int32
    let digestUpdate: @convention(c) (OpaquePointer?, UnsafeRawPointer?, Int) -> Int32
    let digestFinal:
        @convention(c) (OpaquePointer?, UnsafeMutablePointer<UInt8>?, UnsafeMutablePointer<UInt32>?) -> Int32

    #if os(macOS)
        static let libraryNames = ["libcrypto.3.dylib", "libcrypto.dylib"]
    #else
        /// OpenSSL 3 (Debian 12), else 1.1 (Debian 11, Ubuntu 20.04), else any.
        static let libraryNames = ["libcrypto.so.3", "libcrypto.so.1.1", "libcrypto.so"]
    #endif

    /// The loaded library, or why it could not be loaded (SPEC §6: AdCacheKit never ends
    /// the process; the error reaches the caller as `libraryMissing`).
    static let shared: Result<CryptoAPI, AdCacheError> = {
        for name in libraryNames {
            guard let lib = dlopen(name, RTLD_NOW | RTLD_LOCAL) else { continue }
            func symbol<T>(_ s: String) -> T? { dlsym(lib, s).map { unsafeBitCast($0, to: T.self) } }
            if let a: @convention(c) () -> OpaquePointer? = symbol("EVP_MD_CTX_new"),
                let b: @convention(c) (OpaquePointer?) -> Void = symbol("EVP_MD_CTX_free"),
                let c: @convention(c) () -> OpaquePointer? = symbol("EVP_sha256"),
                let d: @convention(c) (OpaquePointer?, OpaquePointer?, OpaquePointer?) -> Int32 = symbol(
                    "EVP_DigestInit_ex"),
                let e: @convention(c) (OpaquePointer?, UnsafeRawPointer?, Int) -> Int32 = symbol("EVP_DigestUpdate"),
                let f:
                    @convention(c) (OpaquePointer?, UnsafeMutablePointer<UInt8>?, UnsafeMutablePointer<UInt32>?) ->
                        Int32 = symbol("EVP_DigestFinal_ex")
            {
                return .success(
                    CryptoAPI(newContext: a, freeContext: b, sha256: c, digestInit: d, digestUpdate: e, digestFinal: f))
            }
        }
        return .failure(
            .libraryMissing(
                "cannot load libcrypto (\(libraryNames[0]) or \(libraryNames[1])); install the Debian package libssl3 (or libssl1.1)"
            ))
    }()
}

/// Incremental SHA-256 through OpenSSL's EVP interface.
final class SHA256Hasher {
    private let api: CryptoAPI
    private let context: OpaquePointer?

    /// Throws `libraryMissing` when libcrypto cannot be loaded.
    init() throws {
        api = try CryptoAPI.shared.get()
        context = api.newContext()
        _ = api.digestInit(context, api.sha256(), nil)
    }

    deinit { api.freeContext(context) }

    func update(_ bytes: UnsafeRawBufferPointer) {
        guard let base = bytes.baseAddress, bytes.count > 0 else { return }
        _ = api.digestUpdate(context, base, bytes.count)
    }

    func update<S: Sequence>(_ bytes: S) where S.Element == UInt8 {
        let array = Array(bytes)
        array.withUnsafeBytes { update($0) }
    }

    /// The digest as 64 lowercase hex digits. The hasher cannot be used afterwards.
    func finalizeHex() -> String {
        var digest = [UInt8](repeating: 0, count: 32)
        var length: UInt32 = 0
        _ = api.digestFinal(context, &digest, &length)
        return hexString(digest)
    }

    static func hex(bytes: [UInt8]) throws -> String {
        let h = try SHA256Hasher()
        h.update(bytes)
        return h.finalizeHex()
    }

    static func hex(_ string: String) throws -> String {
        let h = try SHA256Hasher()
        h.update(Array(string.utf8))
        return h.finalizeHex()
    }

    /// The SHA-256 of a file's contents, read in blocks; nil when it cannot be read.
    static func hex(ofFile path: String) -> String? {
        guard let h = try? SHA256Hasher() else { return nil }
        return (try? FileIO.forEachBlock(ofFile: path) { h.update($0) }) == nil ? nil : h.finalizeHex()
    }
}

private let hexDigits = Array("0123456789abcdef".utf8)

func hexString(_ bytes: [UInt8]) -> String {
    var out = [UInt8]()
    out.reserveCapacity(bytes.count * 2)
    for b in bytes {
        out.append(hexDigits[Int(b >> 4)])
        out.append(hexDigits[Int(b & 0xF)])
    }
    return String(decoding: out, as: UTF8.self)
}
