#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// The clock a fetch stage runs on (SPEC §6 *Clock trust*): the device clock, corrected by an
/// offset measured against a feed server and the boot clock of that measurement. A value: the
/// feed's answer measures a new one, which is adopted only when the answer is accepted.
struct FetchClock {
    let source: AdCache.Clock
    /// The feed server's clock minus the device's, when they differ by more than `tolerance`.
    let offset: Double?
    /// Where `offset` was measured, on the boot clock.
    let sync: ClockSync?

    static let tolerance: Double = 300

    func now() -> Double {
        switch source {
        case .device(let read, let boot):
            return ClockSync.corrected(read().timeIntervalSince1970, offset: offset, sync: sync, bootClock: boot)
        case .fixed(let date): return date.timeIntervalSince1970
        }
    }

    /// The device clock as it reads, uncorrected: what the server's time is measured against.
    func deviceNow() -> Double {
        switch source {
        case .device(let read, _): return read().timeIntervalSince1970
        case .fixed(let date): return date.timeIntervalSince1970
        }
    }

    /// The clock the cache trusts: the offset the last accepted answer measured.
    func trusting(_ index: CacheIndex) -> FetchClock {
        FetchClock(source: source, offset: index.clockOffset, sync: index.clockOffset == nil ? nil : index.clockSync)
    }

    /// The clock an answer measures: a device clock more than five minutes off the feed
    /// server's is corrected (with one warning to print if the answer is accepted); within
    /// them, the device clock as it reads. A local feed, or a fixed clock, measures nothing.
    func measured(by answer: Fetcher.FeedDownload) -> (clock: FetchClock, warning: Diagnostic?) {
        guard case .device = source, let server = answer.serverDate, let device = answer.receivedAt else {
            return (self, nil)
        }
        let offset = server - device
        guard abs(offset) > Self.tolerance else { return (FetchClock(source: source, offset: nil, sync: nil), nil) }
        let clock = FetchClock(
            source: source, offset: offset.rounded(), sync: BootClock.now().map { ClockSync(device: device, boot: $0) })
        let way = offset > 0 ? "behind" : "ahead of"
        let warning = Diagnostic(
            .clock, "the device clock is \(Fetcher.span(abs(offset))) \(way) the feed server's; using the server's time"
        )
        return (clock, warning)
    }
}

/// The acceptance stage of a fetch (SPEC §6 *Decide, then act*): the one place that decides
/// whether the feed's answer is taken — its signature, `serial` and `validUntil` (§11), that it
/// parses, and that it yields an ad when it lists any (§2) — on the clock that answer
/// measured. Nothing has acted on the answer before; a refusal leaves no clock, queue or
/// count changed, because none of those are made until the answer is accepted.
extension Fetcher {
    enum Acceptance {
        case accepted(AcceptedFeed)
        /// The error, and the feed's warnings (printed on every run that refuses it: nothing
        /// records that they were seen).
        case refused(AdCacheError, warnings: [Diagnostic])
    }

    /// An accepted answer: what the rest of the run acts on.
    struct AcceptedFeed {
        var feed: Feed
        /// The answer, its freshness on `clock`.
        var download: FeedDownload
        /// The trusted clock from now on, and its warning when it corrects the device's.
        var clock: FetchClock
        var clockWarning: Diagnostic?
        var verified: Verification?
        var signed: SignedFeed?
        /// The SHA-256 of the feed's bytes (after a 304, the last one's).
        var digest: String?
        /// The wrapped VAST documents this run read, for the next run's conditional requests.
        var vastDocuments: [String: VASTDocumentCopy]
        /// The feed's bytes when its ads come from VAST documents, so that a 304 of the feed
        /// still revalidates what it wraps (SPEC §10 *Wrapped documents stay fresh*).
        var vastFeedBytes: [UInt8]?
    }

    /// `device`: for `check`, this device's id as known (none is made).
    func acceptanceStage(_ answer: FeedDownload, _ request: FeedRequest, before: CacheIndex, device: String? = nil)
        -> Acceptance
    {
        let (clock, clockWarning) = self.clock.measured(by: answer)
        let judge = on(clock)
        var download = answer
        // Freshness on the clock this answer measured (a device clock days ahead must not keep
        // the feed "fresh" for those days).
        download.freshUntil = download.freshUntil.map { $0 + (clock.offset ?? 0) - (self.clock.offset ?? 0) }
        var warnings: [Diagnostic] = []
        do {
            let verified = try judge.verifyStage(download)
            let digest = download.body.flatMap { try? SHA256Hasher.hex(bytes: $0) } ?? request.previous?.sha256
            // After a 304 (or while fresh), the feed's bytes when its ads came from VAST: read
            // again, so that the documents it wraps are revalidated.
            let kept = download.body == nil ? keptVASTFeed(digest: digest) : nil
            var feed = try judge.parseStage(download.body ?? kept, download: download, request, before: before)
            warnings = feed.warnings
            let signed = try verified.map { try judge.signedRules(feed, $0, digest: digest, before: before) }
            if signed != nil { judge.signedTags(&feed) }
            let documents = judge.vastStage(&feed, request, signedRoot: signed != nil, before: before)
            if options.transfer.isCancelled?() == true, feed.hasVAST {
                // Cut short while its documents were read: what was not read would withdraw
                // their ads. Nothing changes (the signal's exit status wins, SPEC §5).
                throw AdCacheError.stoppedForNow("interrupted while reading the feed's VAST documents; nothing changed")
            }
            if signed != nil, download.body != nil || kept != nil { judge.signedAds(&feed) }
            if download.body != nil || kept != nil { judge.rolloutStage(&feed, device: device) }
            warnings = feed.warnings
            try Self.requireUsableAd(feed, request.feedText)
            return .accepted(
                AcceptedFeed(
                    feed: feed, download: download, clock: clock, clockWarning: clockWarning, verified: verified,
                    signed: signed, digest: digest, vastDocuments: documents,
                    vastFeedBytes: feed.hasVAST ? (download.body ?? kept) : nil))
        } catch let e as AdCacheError {
            return .refused(e, warnings: warnings)
        } catch {
            return .refused(.notAFeed("the feed \(request.feedText) was refused: \(error)"), warnings: warnings)
        }
    }

    /// No feed blanks a fleet (SPEC §2): a feed that lists ads of which none can be used is
    /// refused whole — 65, or 75 when a wrapped VAST document failed for a transient reason.
    /// An empty list still withdraws everything.
    static func requireUsableAd(_ feed: Feed, _ feedText: String) throws {
        guard feed.listed > 0, feed.ads.isEmpty, feed.rolledOut.isEmpty else { return }
        let first = feed.warnings.first { $0.message.hasPrefix("skipping ") }.map {
            "; first: " + $0.message.dropFirst("skipping ".count)
        }
        let message = "no ad of the feed \(feedText) can be used (\(feed.listed) skipped\(first ?? ""))"
        let transient = feed.vastTransientFailures > 0
        let failure = AdCacheError.Failure(message, kind: .content, transient: transient, refusal: .noUsableAd)
        throw transient ? AdCacheError.tryAgainLater(failure) : AdCacheError.feedInvalid(failure)
    }
}

/// Staged rollouts (SPEC §2 v4 `rollout`, §13): a device takes an ad when the first 8 bytes of
/// SHA-256(`<device id>` + "\n" + `<ad id>`), read as a big-endian unsigned integer, modulo
/// 100, are less than its `rollout` — so an ad server can predict which devices take it, and
/// raising the percentage only adds devices. An ad this device does not take is as if the
/// feed did not list it (not downloaded; withdrawn if it was cached).
extension Fetcher {
    /// `device`: this device's id when the caller knows it (`check`, which makes none; empty:
    /// it has none yet); else the cache's (made once when there is none).
    func rolloutStage(_ feed: inout Feed, device known: String? = nil) {
        guard feed.ads.contains(where: { $0.rollout != nil }),
            let device = known ?? (try? store.deviceId(proofOfPlay))
        else { return }
        var left: [FeedAd] = []
        feed.ads.removeAll { ad in
            // No id (`check` on a device that has none yet): this device takes none.
            guard let rollout = ad.rollout, device.isEmpty || !Self.takes(device: device, ad: ad.id, rollout: rollout)
            else {
                return false
            }
            left.append(ad)
            return true
        }
        feed.rolledOut += left
    }

    /// SPEC §2's rule, exactly.
    static func takes(device: String, ad: String, rollout: Int64) -> Bool {
        rolloutValue(device: device, ad: ad).map { $0 < rollout } ?? true
    }

    /// The device's value for ad `ad`, 0 to 99: it takes the ad when this is under `rollout`.
    static func rolloutValue(device: String, ad: String) -> Int64? {
        guard let hex = try? SHA256Hasher.hex(bytes: Array((device + "\n" + ad).utf8)),
            let n = UInt64(hex.prefix(16), radix: 16)
        else { return nil }
        return Int64(n % 100)
    }
}

extension CacheStore {
    /// `device.id`: the id a device without `device-id` or `/etc/machine-id` made once, kept
    /// (as `signed.serial` is) by `clear`.
    var deviceIdFile: CacheFile { dir.file("device.id") }

    /// The device's id for staged rollouts: the configured `device-id`, else
    /// `/etc/machine-id`, else one made once and kept in the cache (SPEC §13).
    func deviceId(_ pop: AdCache.ProofOfPlay?) throws -> String {
        if let id = knownDeviceId(pop) { return id }
        var random = [UInt8](repeating: 0, count: 16)
        for i in random.indices { random[i] = UInt8.random(in: 0...255) }
        let id = hexString(random)
        try deviceIdFile.writeAtomically(Array((id + "\n").utf8))
        return id
    }

    /// The device's id when it has one already: nil for a device that has none of the three
    /// (`check` makes none).
    func knownDeviceId(_ pop: AdCache.ProofOfPlay?) -> String? {
        if let id = pop?.deviceId, !id.isEmpty { return id }
        if let bytes = try? FileIO.read("/etc/machine-id", limit: 4096) {
            let id = String(decoding: bytes, as: UTF8.self).trimmedWithNewlines()
            if !id.isEmpty { return id }
        }
        if let bytes = try? deviceIdFile.read(limit: 4096) {
            let id = String(decoding: bytes, as: UTF8.self).trimmedWithNewlines()
            if !id.isEmpty { return id }
        }
        return nil
    }
}
