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

// minisign's formats and its verification (SPEC §11), through libcrypto: Ed25519 by
// `EVP_PKEY_new_raw_public_key` and one-shot `EVP_DigestVerify` (OpenSSL 1.1.1 and 3.x), and
// BLAKE2b-512 (`EVP_blake2b512`) for the prehashed `ED` form. No cryptography of our own.
// The building block of signed feeds; the fetch's verify stage (Fetch/VerifyStage.swift) is
// where it plugs in.

/// A minisign public key: the base64 line of a `minisign.pub` (`Ed`, the key id, 32 bytes).
struct MinisignKey: Equatable, Sendable {
    /// The key id as minisign stores it (8 bytes, little-endian).
    var keyID: [UInt8]
    var publicKey: [UInt8]

    /// The id as minisign prints it: hexadecimal, upper case (`43F354C83FB5B7B6`).
    var id: String { MinisignKey.hexID(keyID) }

    /// As minisign's `%PRIX64`: no leading zeros (`83D494FB7935F42`, not `083D…`).
    static func hexID(_ bytes: [UInt8]) -> String {
        let hex = hexString(bytes.reversed()).uppercased().drop { $0 == "0" }
        return hex.isEmpty ? "0" : String(hex)
    }

    /// From the base64 line, or a whole `.pub` file (its untrusted comment line is skipped).
    init(_ text: String) throws {
        let lines = text.split(whereSeparator: \.isNewline).map { $0.trimmed() }.filter { !$0.isEmpty }
        guard let line = lines.last(where: { !$0.hasPrefix("untrusted comment:") }),
            let raw = Data(base64Encoded: line).map(Array.init), raw.count == 42, raw[0] == 0x45, raw[1] == 0x64
        else {
            throw AdCacheError.invalidRequest("not a minisign public key (the base64 line of a minisign.pub)")
        }
        keyID = Array(raw[2..<10])
        publicKey = Array(raw[10..<42])
    }
}

/// A `.minisig` file: the signature line (algorithm, key id, 64 bytes), the trusted comment
/// and its global signature (over the signature and the comment).
struct MinisignSignature: Equatable, Sendable {
    /// `Ed` (over the bytes) or `ED` (over their BLAKE2b-512, minisign's default).
    var prehashed: Bool
    var keyID: [UInt8]
    var signature: [UInt8]
    var trustedComment: String
    var globalSignature: [UInt8]

    var keyIDText: String { MinisignKey.hexID(keyID) }

    init(_ bytes: [UInt8]) throws {
        func bad(_ what: String) -> AdCacheError { .refused(.signatureInvalid, "feed signature: \(what)") }
        guard bytes.count <= 16384 else { throw bad("the signature file is too large") }
        let lines = String(decoding: bytes, as: UTF8.self).split(omittingEmptySubsequences: false) {
            $0 == "\n" || $0 == "\r\n"
        }
        guard lines.count >= 4, lines[0].hasPrefix("untrusted comment:"),
            let raw = Data(base64Encoded: String(lines[1].trimmed())).map(Array.init), raw.count == 74
        else { throw bad("not a minisign signature file") }
        switch (raw[0], raw[1]) {
        case (0x45, 0x64): prehashed = false   // "Ed"
        case (0x45, 0x44): prehashed = true   // "ED"
        default: throw bad("an unknown signature algorithm")
        }
        keyID = Array(raw[2..<10])
        signature = Array(raw[10..<74])
        let prefix = "trusted comment: "
        guard lines[2].hasPrefix(prefix) else { throw bad("no trusted comment") }
        trustedComment = String(lines[2].dropFirst(prefix.count))
        guard let global = Data(base64Encoded: String(lines[3].trimmed())).map(Array.init), global.count == 64 else {
            throw bad("the trusted comment's signature cannot be read")
        }
        globalSignature = global
    }

    /// Checks this signature of `message` by `key`: the key ids match, the signature
    /// verifies (over the BLAKE2b-512 of the bytes when prehashed), and so does the trusted
    /// comment's. Throws a one-line reason otherwise.
    func verify(_ message: [UInt8], with key: MinisignKey) throws {
        guard keyID == key.keyID else {
            throw AdCacheError.refused(.unknownKey, "feed signature: made by key \(keyIDText), not by key \(key.id)")
        }
        let api = try SigningAPI.shared.get()
        let signed = prehashed ? try api.blake2b512(message) : message
        guard try api.verifyEd25519(signature: signature, message: signed, publicKey: key.publicKey) else {
            throw AdCacheError.refused(
                .signatureInvalid, "feed signature: does not verify with key \(key.id) (the feed was changed?)")
        }
        guard
            try api.verifyEd25519(
                signature: globalSignature, message: signature + Array(trustedComment.utf8), publicKey: key.publicKey)
        else {
            throw AdCacheError.refused(
                .signatureInvalid, "feed signature: the trusted comment does not verify with key \(key.id)")
        }
    }
}

/// libcrypto's EVP functions that verification needs, looked up once by the first check
/// (`next` never loads them).
struct SigningAPI: @unchecked Sendable {
    typealias NewRawPublicKey = @convention(c) (Int32, OpaquePointer?, UnsafePointer<UInt8>?, Int) -> OpaquePointer?
    typealias FreeKey = @convention(c) (OpaquePointer?) -> Void
    typealias NewContext = @convention(c) () -> OpaquePointer?
    typealias FreeContext = @convention(c) (OpaquePointer?) -> Void
    typealias VerifyInit =
        @convention(c) (
            OpaquePointer?, UnsafeMutablePointer<OpaquePointer?>?, OpaquePointer?, OpaquePointer?, OpaquePointer?
        ) -> Int32
    typealias Verify = @convention(c) (OpaquePointer?, UnsafePointer<UInt8>?, Int, UnsafePointer<UInt8>?, Int) -> Int32
    typealias Digest =
        @convention(c) (
            UnsafeRawPointer?, Int, UnsafeMutablePointer<UInt8>?, UnsafeMutablePointer<UInt32>?, OpaquePointer?,
            OpaquePointer?
        ) -> Int32
    typealias Blake = @convention(c) () -> OpaquePointer?

    let newRawPublicKey: NewRawPublicKey
    let freeKey: FreeKey
    let newContext: NewContext
    let freeContext: FreeContext
    let verifyInit: VerifyInit
    let verify: Verify
    let digest: Digest
    let blake2b512: Blake

    /// `EVP_PKEY_ED25519` (`NID_ED25519`).
    static let ed25519: Int32 = 1087

    static let shared: Result<SigningAPI, AdCacheError> = {
        for name in CryptoAPI.libraryNames {
            guard let lib = dlopen(name, RTLD_NOW | RTLD_LOCAL) else { continue }
            func symbol<T>(_ s: String) -> T? { dlsym(lib, s).map { unsafeBitCast($0, to: T.self) } }
            if let a: NewRawPublicKey = symbol("EVP_PKEY_new_raw_public_key"), let b: FreeKey = symbol("EVP_PKEY_free"),
                let c: NewContext = symbol("EVP_MD_CTX_new"), let d: FreeContext = symbol("EVP_MD_CTX_free"),
                let e: VerifyInit = symbol("EVP_DigestVerifyInit"), let f: Verify = symbol("EVP_DigestVerify"),
                let g: Digest = symbol("EVP_Digest"), let h: Blake = symbol("EVP_blake2b512")
            {
                return .success(
                    SigningAPI(
                        newRawPublicKey: a, freeKey: b, newContext: c, freeContext: d, verifyInit: e, verify: f,
                        digest: g, blake2b512: h))
            }
        }
        return .failure(
            .libraryMissing(
                "cannot load libcrypto 1.1.1 or later with Ed25519 (\(CryptoAPI.libraryNames[0])); install the Debian package libssl3"
            ))
    }()

    /// True when `signature` is `publicKey`'s Ed25519 signature of `message`.
    func verifyEd25519(signature: [UInt8], message: [UInt8], publicKey: [UInt8]) throws -> Bool {
        guard signature.count == 64, publicKey.count == 32 else { return false }
        guard let key = publicKey.withUnsafeBufferPointer({ newRawPublicKey(Self.ed25519, nil, $0.baseAddress, 32) })
        else { throw AdCacheError.libraryMissing("libcrypto cannot make an Ed25519 key") }
        defer { freeKey(key) }
        guard let context = newContext() else { throw AdCacheError.libraryMissing("libcrypto: out of memory") }
        defer { freeContext(context) }
        guard verifyInit(context, nil, nil, nil, key) == 1 else {
            throw AdCacheError.libraryMissing("libcrypto cannot verify Ed25519 signatures")
        }
        let ok = signature.withUnsafeBufferPointer { s in
            message.withUnsafeBufferPointer { m in verify(context, s.baseAddress, 64, m.baseAddress, m.count) }
        }
        return ok == 1
    }

    /// BLAKE2b-512 of `bytes` (RFC 7693).
    func blake2b512(_ bytes: [UInt8]) throws -> [UInt8] {
        var out = [UInt8](repeating: 0, count: 64)
        var length: UInt32 = 0
        let ok = bytes.withUnsafeBytes { b in digest(b.baseAddress, b.count, &out, &length, blake2b512(), nil) }
        guard ok == 1, length == 64 else { throw AdCacheError.libraryMissing("libcrypto has no BLAKE2b-512") }
        return out
    }
}

/// A key a feed must be signed by (SPEC §11), and where it was configured: `feed-key` in a
/// file (`file:PATH:LINE`) or a `.pub` file of `feed-keys-dir` (its path).
public struct FeedKey: Equatable, Sendable {
    let key: MinisignKey
    /// Where the key was configured, as `config --show-origin` says it.
    public var origin: String

    /// The key id as minisign prints it: hexadecimal, upper case.
    public var id: String { key.id }

    /// From the base64 line of a `minisign.pub` (or the whole file). Throws `invalidRequest`.
    public init(_ text: String, origin: String) throws {
        key = try MinisignKey(text)
        self.origin = origin
    }

    /// The keys of every `*.pub` file in `directory`, by file name. A file that does not hold
    /// a minisign public key throws `invalidRequest` naming it; a directory that does not
    /// exist holds no key.
    public static func keys(inDirectory directory: String) throws -> [FeedKey] {
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: directory) else {
            var st = stat()
            if stat(directory, &st) == 0 {
                throw AdCacheError.invalidRequest("cannot read the keys directory \(directory)")
            }
            return []
        }
        return try names.filter { $0.hasSuffix(".pub") && !$0.hasPrefix(".") }.sorted().map { name in
            let path = PathText.join(directory, name)
            let text: String
            do {
                text = String(decoding: try FileIO.read(path, limit: 64 << 10), as: UTF8.self)
            } catch let e as AdCacheError {
                throw AdCacheError.invalidRequest("\(path): \(e.message)")
            }
            do {
                return try FeedKey(text, origin: path)
            } catch let e as AdCacheError {
                throw AdCacheError.invalidRequest("\(path): \(e.message)")
            }
        }
    }
}
