import Foundation
import TestSupport
import Testing

@testable import AdCacheKit

/// SPEC §11's building block: minisign keys and signatures, verified through libcrypto.
@Suite struct MinisignTests {
    static func bytes(_ hex: String) -> [UInt8] {
        var out: [UInt8] = []
        var i = hex.startIndex
        while i < hex.endIndex {
            let j = hex.index(i, offsetBy: 2)
            out.append(UInt8(hex[i..<j], radix: 16)!)
            i = j
        }
        return out
    }

    static let minisign = "/usr/bin/minisign"
    static let hasMinisign = FileManager.default.isExecutableFile(atPath: minisign)

    /// RFC 8032 §7.1, tests 1 and 2 (the empty message and one byte), and the same
    /// signatures with one bit flipped.
    /// Key ids as minisign prints them (`%PRIX64`): upper case, no leading zeros — one key
    /// in sixteen has one, and a padded id would not match what the publisher sees.
    @Test func keyIdsAsMinisignPrintsThem() {
        #expect(MinisignKey.hexID([0x42, 0xF4, 0x35, 0x79, 0xFB, 0x94, 0xD4, 0x03]) == "3D494FB7935F442")
        #expect(MinisignKey.hexID([0xB6, 0xB7, 0xB5, 0x3F, 0xC8, 0x54, 0xF3, 0x43]) == "43F354C83FB5B7B6")
        #expect(MinisignKey.hexID([0, 0, 0, 0, 0, 0, 0, 0]) == "0")
    }

    @Test func ed25519KnownAnswers() throws {
        let api = try SigningAPI.shared.get()
        let cases: [(pk: String, message: String, sig: String)] = [
            (
                "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a", "",
                "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b"
            ),
            (
                "3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c", "72",
                "92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da085ac1e43e15996e458f3613d0f11d8c387b2eaeb4302aeeb00d291612bb0c00"
            ),
        ]
        for c in cases {
            let pk = Self.bytes(c.pk), message = Self.bytes(c.message)
            var sig = Self.bytes(c.sig)
            #expect(try api.verifyEd25519(signature: sig, message: message, publicKey: pk))
            sig[5] ^= 0x01
            #expect(try !api.verifyEd25519(signature: sig, message: message, publicKey: pk))
            #expect(try !api.verifyEd25519(signature: Self.bytes(c.sig), message: message + [0], publicKey: pk))
        }
    }

    /// RFC 7693 Appendix A: BLAKE2b-512 of "abc".
    @Test func blake2b512KnownAnswer() throws {
        let digest = try SigningAPI.shared.get().blake2b512(Array("abc".utf8))
        #expect(
            digest
                == Self.bytes(
                    "ba80a53f981c4d0d6a2797b69f12f6e94c212f14685ac4b74b12bb6fdbffa2d17d87c5392aab792dc252d5de4533cc9518d38aa8dbf1925ab92386edd4009923"
                ))
    }

    /// A key pair and a feed signed as a publisher does, with Debian's minisign (prehashed,
    /// its default, and the legacy form).
    struct Signed {
        let dir = TempDir()
        var pub: String { dir.path + "/k.pub" }
        var feed: String { dir.path + "/feed.json" }
        var sig: String { feed + ".minisig" }

        init(legacy: Bool = false, comment: String = "serial 1") throws {
            let made = runProgram(MinisignTests.minisign, ["-G", "-W", "-p", pub, "-s", dir.path + "/k.sec"])
            try #require(made.status == 0, "\(made.stderr)")
            _ = dir.write("feed.json", Array(#"{"ads":[{"id":"a","url":"a.jpg"}]}"#.utf8))
            let signed = runProgram(
                MinisignTests.minisign,
                ["-S", "-s", dir.path + "/k.sec", "-m", feed, "-t", comment] + (legacy ? ["-l"] : []))
            try #require(signed.status == 0, "\(signed.stderr)")
        }

        func key() throws -> MinisignKey { try MinisignKey(String(decoding: try FileIO.read(pub), as: UTF8.self)) }
        func signature() throws -> MinisignSignature { try MinisignSignature(try FileIO.read(sig)) }
        func message() throws -> [UInt8] { try FileIO.read(feed) }
    }

    @Test(.enabled(if: hasMinisign, "minisign is not installed (make test installs it)"), arguments: [false, true])
    func aFeedSignedWithMinisignVerifies(legacy: Bool) throws {
        let s = try Signed(legacy: legacy)
        defer { s.dir.remove() }
        let key = try s.key(), signature = try s.signature()
        #expect(signature.prehashed == !legacy)
        #expect(signature.trustedComment == "serial 1")
        // The key id as minisign prints it.
        let pubText = String(decoding: try FileIO.read(s.pub), as: UTF8.self)
        #expect(pubText.contains("minisign public key \(key.id)"), "\(pubText)")
        try signature.verify(try s.message(), with: key)
    }

    /// One byte of the feed, of the signature or of the trusted comment changed, or another
    /// key: refused, with a reason that says which.
    @Test(.enabled(if: hasMinisign, "minisign is not installed (make test installs it)"))
    func anyTamperingIsRefused() throws {
        let s = try Signed()
        defer { s.dir.remove() }
        let key = try s.key(), signature = try s.signature()
        var feed = try s.message()
        feed[3] ^= 0x20
        #expect(throws: AdCacheError.self) { try signature.verify(feed, with: key) }
        do {
            try signature.verify(feed, with: key)
        } catch let e as AdCacheError {
            #expect(e.message.hasPrefix("feed signature: does not verify with key \(key.id)"), "\(e.message)")
        }
        var bad = signature
        bad.signature[10] ^= 0x01
        #expect(throws: AdCacheError.self) { try bad.verify(try s.message(), with: key) }
        var comment = signature
        comment.trustedComment = "serial 9"
        do {
            try comment.verify(try s.message(), with: key)
            Issue.record("a changed trusted comment verified")
        } catch let e as AdCacheError {
            #expect(e.message.contains("trusted comment"), "\(e.message)")
        }
        let other = try Signed()
        defer { other.dir.remove() }
        do {
            try signature.verify(try s.message(), with: try other.key())
            Issue.record("a signature verified with another key")
        } catch let e as AdCacheError {
            #expect(e.message == "feed signature: made by key \(key.id), not by key \(try other.key().id)")
        }
    }

    /// Thousands of mutated signature files and keys: each is read or refused, never a
    /// crash, and none verifies.
    @Test(.enabled(if: hasMinisign, "minisign is not installed (make test installs it)"))
    func mutatedSignatureFilesNeverCrashNorVerify() throws {
        let s = try Signed()
        defer { s.dir.remove() }
        let key = try s.key(), message = try s.message()
        let original = try FileIO.read(s.sig)
        var rng = SplitMix(seed: 0xAD_CAC4E)
        var read = 0, refused = 0
        for _ in 0..<3000 {
            var bytes = original
            for _ in 0...Int(rng.next() % 3) {
                switch rng.next() % 4 {
                case 0 where !bytes.isEmpty:
                    bytes[Int(rng.next() % UInt64(bytes.count))] ^= UInt8(1 << (rng.next() % 8))
                case 1: bytes = Array(bytes.prefix(Int(rng.next() % UInt64(bytes.count + 1))))
                case 2: bytes.insert(UInt8(rng.next() % 256), at: Int(rng.next() % UInt64(bytes.count + 1)))
                default:
                    if !bytes.isEmpty { bytes.remove(at: Int(rng.next() % UInt64(bytes.count))) }
                }
            }
            guard bytes != original else { continue }
            guard let signature = try? MinisignSignature(bytes) else {
                refused += 1
                continue
            }
            read += 1
            // A mutation that leaves the signed parts as they were still verifies (a changed
            // untrusted comment, a line end); any other must not.
            let same =
                (try? MinisignSignature(original)).map {
                    $0.signature == signature.signature && $0.keyID == signature.keyID
                        && $0.trustedComment == signature.trustedComment && $0.prehashed == signature.prehashed
                        && $0.globalSignature == signature.globalSignature
                } ?? false
            let verified = (try? signature.verify(message, with: key)) != nil
            #expect(verified == same, "\(String(decoding: bytes, as: UTF8.self))")
        }
        print("minisig fuzz: 3000 mutations, \(read) read, \(refused) refused")
        #expect(refused > 0 && read > 0)
    }

    @Test func keysThatAreNotKeysAreRefused() {
        for text in [
            "", "RWS", "untrusted comment: x\n", "RUS2t7U/yFTzQ/6Czk/ZoZ+RqkoLgNQ9nfpAyESfW5gQZUk4mmKlWtq8ReKMyLXX",
        ] {
            #expect(throws: AdCacheError.self) { try MinisignKey(text) }
        }
        #expect(
            (try? MinisignKey(
                "untrusted comment: minisign public key 43F354C83FB5B7B6\nRWS2t7U/yFTzQwm8XSqq0vOMvrbnBTGZHVwWpVQCTZC9j69y02QeacMU\n"
            ))?.id
                == "43F354C83FB5B7B6")
    }
}
