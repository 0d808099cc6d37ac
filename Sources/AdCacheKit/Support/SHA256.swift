import CCrypto

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// libcrypto's SHA-256 functions, looked up once with dlopen/dlsym by the first digest.
///
/// The one-shot `SHA256_Init/Update/Final` interface, present in OpenSSL 1.1 and 3 alike
/// (deprecated in 3, not removed), rather than EVP: EVP in OpenSSL 3 initialises the
/// provider machinery, 2 MB of resident memory that a 1 GiB download gains nothing from.
struct CryptoAPI: @unchecked Sendable {
    let initialize: @convention(c) (UnsafeMutableRawPointer?) -> Int32
    let update: @convention(c) (UnsafeMutableRawPointer?, UnsafeRawPointer?, Int) -> Int32
    let final: @convention(c) (UnsafeMutablePointer<UInt8>?, UnsafeMutableRawPointer?) -> Int32

    /// Bytes for a `SHA256_CTX` (112 in OpenSSL 1.1 and 3), with room to spare.
    static let contextSize = 256

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
            if let a: @convention(c) (UnsafeMutableRawPointer?) -> Int32 = symbol("SHA256_Init"),
                let b: @convention(c) (UnsafeMutableRawPointer?, UnsafeRawPointer?, Int) -> Int32 = symbol(
                    "SHA256_Update"),
                let c: @convention(c) (UnsafeMutablePointer<UInt8>?, UnsafeMutableRawPointer?) -> Int32 = symbol(
                    "SHA256_Final")
            {
                return .success(CryptoAPI(initialize: a, update: b, final: c))
            }
        }
        return .failure(
            .libraryMissing(
                "cannot load libcrypto (\(libraryNames[0]) or \(libraryNames[1])); install the Debian package libssl3 (or libssl1.1)"
            ))
    }()
}

/// Incremental SHA-256 through OpenSSL's libcrypto. Used by one thread at a time: a download
/// hands it to its hashing queue and takes it back after `sync` (hence `@unchecked`).
final class SHA256Hasher: @unchecked Sendable {
    private let api: CryptoAPI
    private let context = UnsafeMutableRawPointer.allocate(byteCount: CryptoAPI.contextSize, alignment: 16)

    /// Throws `libraryMissing` when libcrypto cannot be loaded.
    init() throws {
        do {
            api = try CryptoAPI.shared.get()
        } catch {
            context.deallocate()
            throw error
        }
        _ = api.initialize(context)
    }

    deinit { context.deallocate() }

    func update(_ bytes: UnsafeRawBufferPointer) {
        guard let base = bytes.baseAddress, bytes.count > 0 else { return }
        _ = api.update(context, base, bytes.count)
    }

    func update<S: Sequence>(_ bytes: S) where S.Element == UInt8 {
        let array = Array(bytes)
        array.withUnsafeBytes { update($0) }
    }

    /// The digest as 64 lowercase hex digits. The hasher cannot be used afterwards.
    func finalizeHex() -> String {
        var digest = [UInt8](repeating: 0, count: 32)
        _ = api.final(&digest, context)
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
    /// (A file outside the cache: a local feed's asset.)
    static func hex(ofFile path: String) -> String? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        guard let h = try? SHA256Hasher() else { return nil }
        return (try? FileIO.forEachBlock(fd: fd, path: path) { h.update($0) }) == nil ? nil : h.finalizeHex()
    }

    /// The SHA-256 of a file of the cache; nil when it cannot be read.
    static func hex(of file: CacheFile) -> String? {
        guard let h = try? SHA256Hasher() else { return nil }
        return (try? file.forEachBlock { h.update($0) }) == nil ? nil : h.finalizeHex()
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
