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

/// The verify stage of a fetch (SPEC §11). With a feed key configured, the feed's exact bytes
/// must carry a minisign signature by one of the keys — checked before they are parsed — and,
/// once parsed, a `serial` that does not go back and a `validUntil` still ahead. Every
/// refusal is exit 65 and leaves the cache as it was. With no key, feeds are not checked.
extension Fetcher {
    /// A feed and the signature that verified it.
    struct Verification {
        /// The key that verified it, as minisign prints its id.
        var keyId: String
        /// The bytes verified: the answer's, or after a 304 the last accepted feed's.
        var feed: [UInt8]
        var signature: [UInt8]
    }

    var signing: Bool { !options.feedKeys.isEmpty }

    /// The last accepted signed feed and its signature, when `feed.signed` still holds the
    /// bytes the index says and they are the feed `previous` describes: only then may the
    /// feed and its signature be asked for conditionally (a 304 means "those bytes").
    func storedSignedFeed(_ index: CacheIndex, previous: FeedSource?) -> (feed: [UInt8], signature: [UInt8])? {
        guard let signed = index.signed, let previous, previous.sha256 == signed.sha256,
            let bytes = try? store.signedFeedFile.read(limit: options.maxFeedSize),
            (try? SHA256Hasher.hex(bytes: bytes)) == signed.sha256
        else { return nil }
        return (bytes, Array(signed.signature.utf8))
    }

    /// The feed's signature: `--signature FILE`, else `FEED.minisig` for a local feed, else
    /// the feed URL's path with `.minisig` appended, fetched right after the feed (the same
    /// rules; conditional when the last verified pair is at hand). A missing signature is a
    /// refusal (65); one that cannot be fetched now, a transient failure (69).
    func signatureStep(_ source: FeedLocation, previous: FeedSource?) throws -> SignatureDownload {
        let limit: Int64 = 16 << 10
        func local(_ path: String) throws -> SignatureDownload {
            var st = stat()
            if stat(path, &st) != 0, errno == ENOENT {
                throw AdCacheError.refused(.signatureMissing, "feed signature: missing (no \(path))")
            }
            do {
                return SignatureDownload(body: try FileIO.read(path, limit: limit))
            } catch let e as AdCacheError {
                throw AdCacheError.refused(.signatureMissing, "feed signature: \(e.message)")
            }
        }
        if let file = options.signatureFile { return try local(file) }
        switch source {
        case .standardInput:
            throw AdCacheError.invalidRequest("a feed from standard input needs its signature (--signature FILE)")
        case .local(let path):
            return try local(path + ".minisig")
        case .remote(let url):
            let signatureURL = Self.signatureURL(url)
            var request = TransferRequest(url: signatureURL, destination: .memory, maxBytes: limit)
            request.headers = options.headers
            request.ifNoneMatch = previous?.signatureEtag
            request.ifModifiedSince = previous?.signatureLastModified
            let response = try fetchFeed(request, what: "the feed's signature") { error in
                switch error {
                case .httpStatus(let status) where [404, 410].contains(status):
                    return AdCacheError.refused(
                        .signatureMissing, "feed signature: missing (\(signatureURL) answered \(status))")
                case .tooLarge:   // no signature is that large: a refusal, not a network fault
                    return AdCacheError.refused(.signatureInvalid, "feed signature: \(signatureURL) is \(error)")
                default: return nil
                }
            }
            return SignatureDownload(
                body: response.notModified ? nil : response.body,
                etag: response.headers["etag"] ?? (response.notModified ? previous?.signatureEtag : nil),
                lastModified: response.headers["last-modified"]
                    ?? (response.notModified ? previous?.signatureLastModified : nil))
        }
    }

    /// `https://host/feed.json?x=1` → `https://host/feed.json.minisig?x=1`.
    static func signatureURL(_ url: String) -> String {
        let cut = url.firstIndex { $0 == "?" || $0 == "#" } ?? url.endIndex
        return url[..<cut] + ".minisig" + url[cut...]
    }

    /// Checks the signature of the feed's bytes (the answer's, or after a 304 the stored
    /// ones) with the configured keys, before anything parses them. Nil with no key.
    func verifyStage(_ download: FeedDownload) throws -> Verification? {
        guard signing else { return nil }
        let stored = download.stored
        guard let feed = download.body ?? stored?.feed,
            let signatureBytes = download.signature?.body ?? stored?.signature
        else { throw AdCacheError.refused(.signatureMissing, "feed signature: no signature to check the feed against") }
        let signature = try MinisignSignature(signatureBytes)
        guard let key = options.feedKeys.first(where: { $0.key.keyID == signature.keyID }) else {
            let configured = options.feedKeys.map(\.id).joined(separator: ", ")
            throw AdCacheError.refused(
                .unknownKey,
                "feed signature: made by key \(signature.keyIDText), which is not configured (configured: \(configured))"
            )
        }
        try signature.verify(feed, with: key.key)
        return Verification(keyId: key.id, feed: feed, signature: signatureBytes)
    }

    /// The rules of a signed feed once parsed: a `serial` and a `validUntil`; no rollback (a
    /// lower serial, or the same with other bytes, than the last accepted — as the index says,
    /// or the copy kept apart from it); not expired — on the clock the answer measured.
    /// Returns what the index keeps of the feed.
    func signedRules(_ feed: Feed, _ verified: Verification, digest: String?, before: CacheIndex) throws
        -> SignedFeed
    {
        let digest = try digest ?? SHA256Hasher.hex(bytes: verified.feed)
        var signed: SignedFeed
        let kept = store.keptSignedSerial()
        if let last = before.signed, last.sha256 == digest {
            // The bytes last accepted (a 304, or the same feed again): the serial stands —
            // unless a newer one was accepted since (an index recovered from an older
            // generation: the copy kept apart knows better).
            if let kept, kept.serial > last.serial {
                throw AdCacheError.refused(
                    .rollback,
                    "signed feed refused: rollback: its serial \(last.serial) is lower than the last accepted, \(kept.serial)"
                )
            }
            signed = last
        } else {
            guard let serial = feed.serial else {
                throw AdCacheError.refused(
                    .expired, "signed feed refused: it has no top-level \"serial\" (a whole number ≥ 1)")
            }
            guard let validUntil = feed.validUntil else {
                throw AdCacheError.refused(.expired, "signed feed refused: it has no top-level \"validUntil\" (a time)")
            }
            // The last accepted serial: the index's, or the copy kept apart (an index lost or
            // cleared keeps it, SPEC §11).
            let lasts = [before.signed.map { ($0.serial, $0.sha256) }, kept].compactMap { $0 }
            for (lastSerial, lastDigest) in lasts {
                if serial < lastSerial {
                    throw AdCacheError.refused(
                        .rollback,
                        "signed feed refused: rollback: its serial \(serial) is lower than the last accepted, \(lastSerial)"
                    )
                }
                if serial == lastSerial, lastDigest != digest {
                    throw AdCacheError.refused(
                        .rollback,
                        "signed feed refused: rollback: serial \(serial) was accepted before with other content")
                }
            }
            signed = SignedFeed(
                keyId: verified.keyId, serial: serial, validUntil: validUntil, sha256: digest, signature: "")
        }
        signed.keyId = verified.keyId
        signed.signature = String(decoding: verified.signature, as: UTF8.self)
        let t = now()
        guard signed.validUntil > t else {
            throw AdCacheError.refused(
                .expired,
                "signed feed refused: expired feed: its validUntil \(Time.format(signed.validUntil)) has passed (now \(Time.format(t)))"
            )
        }
        return signed
    }

    /// A signed JSON feed's `"vast"` tags need their `sha256` (SPEC §11): one without is
    /// skipped with a warning before its document is fetched (a third party's document, not
    /// signed: nothing of it is read, and no error of it queued).
    func signedTags(_ feed: inout Feed) {
        feed.vastTags.removeAll { tag in
            guard tag.template.sha256 == nil else { return false }
            let name = tag.idPrefix.map { "ad '\($0)'" } ?? "the VAST tag \(tag.url)"
            feed.warnings.append(
                Diagnostic(.feed, ad: tag.idPrefix, "skipping \(name): a signed feed's ad needs \"sha256\""))
            return true
        }
    }

    /// A signed JSON feed's ads, and its `"vast"` tags, need their `sha256` (the signature then
    /// covers the bytes shown): one without is skipped with a warning. A signed VAST feed's
    /// InLine ads cover their media files by URL only (VAST has no digest).
    func signedAds(_ feed: inout Feed) {
        guard !feed.isVAST else { return }
        feed.ads.removeAll { ad in
            guard ad.sha256 == nil else { return false }
            feed.warnings.append(
                Diagnostic(.feed, ad: ad.id, "skipping ad '\(ad.id)': a signed feed's ad needs \"sha256\""))
            return true
        }
    }
}

extension Fetcher {
    /// The signature's answer; nil body when the server said 304.
    struct SignatureDownload {
        var body: [UInt8]?
        var etag: String?
        var lastModified: String?
    }
}

/// The last accepted signed serial, kept apart from the index (`signed.serial`: the serial and
/// the SHA-256 of its feed), so that an index that cannot be read — and `clear`, which keeps
/// the file — never lets an older signed feed back in (SPEC §11).
extension CacheStore {
    var signedSerialFile: CacheFile { dir.file("signed.serial") }

    func keptSignedSerial() -> (serial: Int64, sha256: String)? {
        guard let bytes = try? signedSerialFile.read(limit: 4096) else { return nil }
        let parts = String(decoding: bytes, as: UTF8.self).split(whereSeparator: \.isWhitespace)
        guard parts.count == 2, let serial = Int64(parts[0]), serial >= 1, parts[1].count == 64 else { return nil }
        return (serial, String(parts[1]))
    }

    /// Records `signed` when it is newer than what is kept; a failure costs only the copy.
    func keepSignedSerial(_ signed: SignedFeed) {
        if let kept = keptSignedSerial(), kept.serial == signed.serial, kept.sha256 == signed.sha256 { return }
        if let kept = keptSignedSerial(), kept.serial > signed.serial { return }
        try? signedSerialFile.writeAtomically(Array("\(signed.serial) \(signed.sha256)\n".utf8))
    }
}
