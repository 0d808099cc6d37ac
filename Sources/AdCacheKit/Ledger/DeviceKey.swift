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

/// libcrypto's functions that making a key and signing need, beside `SigningAPI`'s: an
/// Ed25519 key from 32 random bytes (`RAND_bytes`, `EVP_PKEY_new_raw_private_key`), its
/// public half, and one-shot `EVP_DigestSign` (OpenSSL 1.1.1 and 3.x). Looked up by the
/// first export.
struct SignerAPI: @unchecked Sendable {
    typealias NewRawPrivateKey = @convention(c) (Int32, OpaquePointer?, UnsafePointer<UInt8>?, Int) -> OpaquePointer?
    typealias RawPublicKey =
        @convention(c) (OpaquePointer?, UnsafeMutablePointer<UInt8>?, UnsafeMutablePointer<Int>?)
        -> Int32
    typealias Sign =
        @convention(c) (
            OpaquePointer?, UnsafeMutablePointer<UInt8>?, UnsafeMutablePointer<Int>?, UnsafePointer<UInt8>?, Int
        )
        -> Int32
    typealias RandomBytes = @convention(c) (UnsafeMutablePointer<UInt8>?, Int32) -> Int32

    let newRawPrivateKey: NewRawPrivateKey
    let rawPublicKey: RawPublicKey
    let signInit: SigningAPI.VerifyInit
    let sign: Sign
    let randomBytes: RandomBytes
    let base: SigningAPI

    static let shared: Result<SignerAPI, AdCacheError> = {
        let base: SigningAPI
        switch SigningAPI.shared {
        case .success(let b): base = b
        case .failure(let e): return .failure(e)
        }
        for name in CryptoAPI.libraryNames {
            guard let lib = dlopen(name, RTLD_NOW | RTLD_LOCAL) else { continue }
            func symbol<T>(_ s: String) -> T? { dlsym(lib, s).map { unsafeBitCast($0, to: T.self) } }
            if let a: NewRawPrivateKey = symbol("EVP_PKEY_new_raw_private_key"),
                let b: RawPublicKey = symbol("EVP_PKEY_get_raw_public_key"),
                let c: SigningAPI.VerifyInit = symbol("EVP_DigestSignInit"), let d: Sign = symbol("EVP_DigestSign"),
                let e: RandomBytes = symbol("RAND_bytes")
            {
                return .success(
                    SignerAPI(newRawPrivateKey: a, rawPublicKey: b, signInit: c, sign: d, randomBytes: e, base: base))
            }
        }
        return .failure(
            .libraryMissing(
                "cannot load libcrypto 1.1.1 or later with Ed25519 signing (\(CryptoAPI.libraryNames[0])); install the Debian package libssl3"
            ))
    }()

    /// `count` bytes from libcrypto's generator.
    func random(_ count: Int) throws -> [UInt8] {
        var out = [UInt8](repeating: 0, count: count)
        guard randomBytes(&out, Int32(count)) == 1 else {
            throw AdCacheError.libraryMissing("libcrypto has no random bytes to give")
        }
        return out
    }

    /// The Ed25519 public key of the 32-byte `seed`.
    func publicKey(seed: [UInt8]) throws -> [UInt8] {
        let key = try privateKey(seed)
        defer { base.freeKey(key) }
        var out = [UInt8](repeating: 0, count: 32)
        var length = 32
        guard rawPublicKey(key, &out, &length) == 1, length == 32 else {
            throw AdCacheError.libraryMissing("libcrypto cannot derive an Ed25519 public key")
        }
        return out
    }

    /// The Ed25519 signature of `message` by the key of `seed`.
    func signEd25519(_ message: [UInt8], seed: [UInt8]) throws -> [UInt8] {
        let key = try privateKey(seed)
        defer { base.freeKey(key) }
        guard let context = base.newContext() else { throw AdCacheError.libraryMissing("libcrypto: out of memory") }
        defer { base.freeContext(context) }
        guard signInit(context, nil, nil, nil, key) == 1 else {
            throw AdCacheError.libraryMissing("libcrypto cannot make Ed25519 signatures")
        }
        var out = [UInt8](repeating: 0, count: 64)
        var length = 64
        let ok = message.withUnsafeBufferPointer { m in sign(context, &out, &length, m.baseAddress, m.count) }
        guard ok == 1, length == 64 else { throw AdCacheError.libraryMissing("libcrypto could not sign") }
        return out
    }

    private func privateKey(_ seed: [UInt8]) throws -> OpaquePointer {
        guard seed.count == 32,
            let key = seed.withUnsafeBufferPointer({ newRawPrivateKey(SigningAPI.ed25519, nil, $0.baseAddress, 32) })
        else { throw AdCacheError.libraryMissing("libcrypto cannot make an Ed25519 key") }
        return key
    }
}

/// BLAKE2b (RFC 7693) with an output length of our choosing: minisign's secret key file
/// carries a BLAKE2b-256 checksum, which libcrypto 3.0 cannot compute (its BLAKE2b is
/// 512 bits only). A checksum, not a signature: the tests check it against libcrypto's
/// BLAKE2b-512 and against minisign signing with the key file.
enum Blake2b {
    private static let iv: [UInt64] = [
        0x6a09_e667_f3bc_c908, 0xbb67_ae85_84ca_a73b, 0x3c6e_f372_fe94_f82b, 0xa54f_f53a_5f1d_36f1,
        0x510e_527f_ade6_82d1, 0x9b05_688c_2b3e_6c1f, 0x1f83_d9ab_fb41_bd6b, 0x5be0_cd19_137e_2179,
    ]
    private static let sigma: [[Int]] = [
        [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15],
        [14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3],
        [11, 8, 12, 0, 5, 2, 15, 13, 10, 14, 3, 6, 7, 1, 9, 4],
        [7, 9, 3, 1, 13, 12, 11, 14, 2, 6, 5, 10, 4, 0, 15, 8],
        [9, 0, 5, 7, 2, 4, 10, 15, 14, 1, 11, 12, 6, 8, 3, 13],
        [2, 12, 6, 10, 0, 11, 8, 3, 4, 13, 7, 5, 15, 14, 1, 9],
        [12, 5, 1, 15, 14, 13, 4, 10, 0, 7, 6, 3, 9, 2, 8, 11],
        [13, 11, 7, 14, 12, 1, 3, 9, 5, 0, 15, 4, 8, 6, 2, 10],
        [6, 15, 14, 9, 11, 3, 0, 8, 12, 2, 13, 7, 1, 4, 10, 5],
        [10, 2, 8, 4, 7, 6, 1, 5, 15, 11, 9, 14, 3, 12, 13, 0],
    ]

    /// The unkeyed BLAKE2b of `data`, `length` bytes long (1 to 64).
    static func hash(_ data: [UInt8], length: Int) -> [UInt8] {
        precondition((1...64).contains(length))
        var h = iv
        h[0] ^= 0x0101_0000 ^ UInt64(length)
        var counter: UInt64 = 0
        var offset = 0
        while data.count - offset > 128 {
            counter += 128
            compress(&h, data[offset..<(offset + 128)], counter: counter, last: false)
            offset += 128
        }
        var block = [UInt8](repeating: 0, count: 128)
        let rest = data.count - offset
        for i in 0..<rest { block[i] = data[offset + i] }
        counter += UInt64(rest)
        compress(&h, block[...], counter: counter, last: true)
        var out: [UInt8] = []
        for word in h { for i in 0..<8 { out.append(UInt8(truncatingIfNeeded: word >> (8 * UInt64(i)))) } }
        return Array(out.prefix(length))
    }

    private static func compress(_ h: inout [UInt64], _ block: ArraySlice<UInt8>, counter: UInt64, last: Bool) {
        var m = [UInt64](repeating: 0, count: 16)
        let base = block.startIndex
        for i in 0..<16 {
            var w: UInt64 = 0
            for j in 0..<8 { w |= UInt64(block[base + 8 * i + j]) << (8 * UInt64(j)) }
            m[i] = w
        }
        var v = h + iv
        v[12] ^= counter
        if last { v[14] = ~v[14] }
        func g(_ a: Int, _ b: Int, _ c: Int, _ d: Int, _ x: UInt64, _ y: UInt64) {
            v[a] = v[a] &+ v[b] &+ x
            v[d] = (v[d] ^ v[a]).rotatedRight(32)
            v[c] = v[c] &+ v[d]
            v[b] = (v[b] ^ v[c]).rotatedRight(24)
            v[a] = v[a] &+ v[b] &+ y
            v[d] = (v[d] ^ v[a]).rotatedRight(16)
            v[c] = v[c] &+ v[d]
            v[b] = (v[b] ^ v[c]).rotatedRight(63)
        }
        for round in 0..<12 {
            let s = sigma[round % 10]
            g(0, 4, 8, 12, m[s[0]], m[s[1]])
            g(1, 5, 9, 13, m[s[2]], m[s[3]])
            g(2, 6, 10, 14, m[s[4]], m[s[5]])
            g(3, 7, 11, 15, m[s[6]], m[s[7]])
            g(0, 5, 10, 15, m[s[8]], m[s[9]])
            g(1, 6, 11, 12, m[s[10]], m[s[11]])
            g(2, 7, 8, 13, m[s[12]], m[s[13]])
            g(3, 4, 9, 14, m[s[14]], m[s[15]])
        }
        for i in 0..<8 { h[i] ^= v[i] ^ v[i + 8] }
    }
}

extension UInt64 {
    fileprivate func rotatedRight(_ n: UInt64) -> UInt64 { (self >> n) | (self << (64 - n)) }
}

/// The device key (SPEC §14): an Ed25519 key pair in minisign's formats — the secret key
/// file as `minisign -G -W` writes it (not encrypted: the device signs unattended), mode
/// 0600, and `device.pub` beside it — that signs exports so that `minisign -Vm` checks them.
struct DeviceKey {
    var keyID: [UInt8]
    /// The 32-byte seed (minisign's secret key is the seed, then the public key).
    var seed: [UInt8]
    var publicKey: [UInt8]

    var id: String { MinisignKey.hexID(keyID) }

    /// The key id as minisign's public key comment prints it (`%016PRIX64`).
    var paddedID: String { hexString(keyID.reversed()).uppercased() }

    /// `minisign.pub`'s two lines.
    var publicKeyFile: String {
        "untrusted comment: minisign public key \(paddedID)\n"
            + Data([0x45, 0x64] + keyID + publicKey).base64EncodedString() + "\n"
    }

    /// The secret key file: `Ed`, no KDF (`\0\0`), `B2`, an empty salt and limits, then the
    /// key id, the secret key and its BLAKE2b-256 checksum (over `Ed`, the id and the key).
    var secretKeyFile: String {
        let sk = seed + publicKey
        let checksum = Blake2b.hash([0x45, 0x64] + keyID + sk, length: 32)
        let raw: [UInt8] =
            [0x45, 0x64, 0, 0, 0x42, 0x32] + [UInt8](repeating: 0, count: 48) + keyID + sk + checksum
        return "untrusted comment: adcache device secret key\n" + Data(raw).base64EncodedString() + "\n"
    }

    /// A new key pair.
    static func generate() throws -> DeviceKey {
        let api = try SignerAPI.shared.get()
        let seed = try api.random(32)
        return DeviceKey(keyID: try api.random(8), seed: seed, publicKey: try api.publicKey(seed: seed))
    }

    /// From a secret key file minisign could read without a password. Throws a one-line reason.
    init(secretKeyFile text: String) throws {
        let lines = text.split(whereSeparator: \.isNewline).map { $0.trimmed() }.filter { !$0.isEmpty }
        guard let line = lines.last(where: { !$0.hasPrefix("untrusted comment:") }),
            let raw = Data(base64Encoded: line).map(Array.init), raw.count == 158, raw[0] == 0x45, raw[1] == 0x64,
            raw[4] == 0x42, raw[5] == 0x32
        else { throw AdCacheError.invalidRequest("not a minisign secret key") }
        guard raw[2] == 0, raw[3] == 0 else {
            throw AdCacheError.invalidRequest("the secret key is encrypted with a password (adcache signs unattended)")
        }
        let keyID = Array(raw[54..<62])
        let sk = Array(raw[62..<126])
        guard Blake2b.hash([0x45, 0x64] + keyID + sk, length: 32) == Array(raw[126..<158]) else {
            throw AdCacheError.invalidRequest("the secret key's checksum is wrong (a damaged file?)")
        }
        self.init(keyID: keyID, seed: Array(sk[0..<32]), publicKey: Array(sk[32..<64]))
        guard try SignerAPI.shared.get().publicKey(seed: seed) == publicKey else {
            throw AdCacheError.invalidRequest("the secret key does not hold its own public key")
        }
    }

    init(keyID: [UInt8], seed: [UInt8], publicKey: [UInt8]) {
        self.keyID = keyID
        self.seed = seed
        self.publicKey = publicKey
    }

    /// minisign's `ED` signature file of `message`: Ed25519 over its BLAKE2b-512, and the
    /// global signature over that signature and `trustedComment`.
    func signatureFile(of message: [UInt8], trustedComment: String) throws -> String {
        let api = try SignerAPI.shared.get()
        let signature = try api.signEd25519(try api.base.blake2b512(message), seed: seed)
        let global = try api.signEd25519(signature + Array(trustedComment.utf8), seed: seed)
        return "untrusted comment: signature from adcache device key \(id)\n"
            + Data([0x45, 0x44] + keyID + signature).base64EncodedString() + "\n"
            + "trusted comment: \(trustedComment)\n" + Data(global).base64EncodedString() + "\n"
    }
}

extension DeviceKey {
    /// The secret key at `path` (`device.pub` beside it), made when there is none: the secret
    /// key created with O_EXCL, mode 0600, synced, before the public key is written. A key
    /// that others may read is refused (exit 64), as ssh refuses one.
    static func loadOrCreate(at path: String) throws -> DeviceKey {
        let publicPath = PathText.join(PathText.parent(path), "device.pub")
        var st = stat()
        if lstat(path, &st) == 0 {
            guard (st.st_mode & S_IFMT) == S_IFREG else {
                throw AdCacheError.invalidRequest("the device key \(path) is not a regular file")
            }
            guard st.st_mode & 0o077 == 0 else {
                throw AdCacheError.invalidRequest(
                    "the device key \(path) may be read by others (mode \(String(st.st_mode & 0o777, radix: 8))); chmod 600 it"
                )
            }
            let text: String
            do {
                text = String(decoding: try FileIO.read(path, limit: 64 << 10), as: UTF8.self)
            } catch let e as AdCacheError {
                throw AdCacheError.cacheUnwritable("cannot read the device key: \(e.message)")
            }
            let key: DeviceKey
            do {
                key = try DeviceKey(secretKeyFile: text)
            } catch let e as AdCacheError {
                throw AdCacheError.invalidRequest("the device key \(path): \(e.message)")
            }
            if !FileIO.exists(publicPath) { try write(key.publicKeyFile, to: publicPath, mode: 0o644) }
            return key
        }
        let key = try generate()
        let fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard fd >= 0 else {
            let e = errno
            if e == EEXIST { return try loadOrCreate(at: path) }   // another export made it first
            throw AdCacheError.cacheUnwritable("cannot create the device key \(path): \(FileIO.errnoText(e))")
        }
        giveToDirectoryOwner(fd, directory: PathText.parent(path))
        let bytes = Array(key.secretKeyFile.utf8)
        let failed = bytes.withUnsafeBytes { FileIO.writeAll(fd, $0) }
        guard failed == nil, fsync(fd) == 0 else {
            close(fd)
            unlink(path)
            throw FileIO.writeError("cannot write the device key \(path)", failed ?? errno)
        }
        close(fd)
        Ledger.syncDirectory(PathText.parent(path))
        try write(key.publicKeyFile, to: publicPath, mode: 0o644)
        return key
    }

    /// Writes `text` to `path` whole: a temporary, synced, renamed.
    static func write(_ text: String, to path: String, mode: mode_t) throws {
        let temporary = path + ".tmp"
        unlink(temporary)
        let fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode)
        guard fd >= 0 else { throw FileIO.writeError("cannot write \(path)") }
        giveToDirectoryOwner(fd, directory: PathText.parent(path))
        let failed = Array(text.utf8).withUnsafeBytes { FileIO.writeAll(fd, $0) }
        guard failed == nil, fsync(fd) == 0 else {
            close(fd)
            unlink(temporary)
            throw FileIO.writeError("cannot write \(path)", failed ?? errno)
        }
        fchmod(fd, mode)
        close(fd)
        guard rename(temporary, path) == 0 else {
            unlink(temporary)
            throw FileIO.writeError("cannot write \(path)")
        }
        Ledger.syncDirectory(PathText.parent(path))
    }
}
