import CCrypto

/// Incremental SHA-256 through OpenSSL's EVP interface.
public final class SHA256Hasher {
    private let context: OpaquePointer

    public init() {
        context = EVP_MD_CTX_new()
        EVP_DigestInit_ex(context, EVP_sha256(), nil)
    }

    deinit { EVP_MD_CTX_free(context) }

    public func update(_ bytes: UnsafeRawBufferPointer) {
        guard let base = bytes.baseAddress, bytes.count > 0 else { return }
        EVP_DigestUpdate(context, base, bytes.count)
    }

    public func update<S: Sequence>(_ bytes: S) where S.Element == UInt8 {
        let array = Array(bytes)
        array.withUnsafeBytes { update($0) }
    }

    /// The digest as 64 lowercase hex digits. The hasher cannot be used afterwards.
    public func finalizeHex() -> String {
        var digest = [UInt8](repeating: 0, count: 32)
        var length: UInt32 = 0
        EVP_DigestFinal_ex(context, &digest, &length)
        return hexString(digest)
    }

    public static func hex(_ string: String) -> String {
        let h = SHA256Hasher()
        h.update(Array(string.utf8))
        return h.finalizeHex()
    }

    /// The SHA-256 of a file's contents, read in blocks; nil when it cannot be read.
    public static func hex(ofFile path: String) -> String? {
        let h = SHA256Hasher()
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
