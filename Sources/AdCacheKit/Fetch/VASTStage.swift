#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// A JSON feed's `"vast": URL` ad (SPEC §10): the ads of that VAST document, each taking the
/// fields the JSON ad gives.
struct VASTTag: Sendable {
    /// Where its ads go among the feed's (`list` shows ads in feed order).
    var position: Int
    var url: String
    /// The JSON ad's `id`: a prefix, `<id>/<vast ad id>`.
    var idPrefix: String?
    /// The JSON ad's fields as parsed (priority, placement, caps, weight, schedule, start,
    /// expires, sha256).
    var template: FeedAd
}

/// An error a VAST document asks to be told of: its URLs, called with `[ERRORCODE]`.
struct VASTErrorReport: Sendable, Equatable {
    var id: String
    var urls: [String]
    var code: VASTCode
    /// The media file's URL, for `[ASSETURI]`.
    var assetURI: String?
}

/// The VAST stage of a fetch: a root VAST feed's ads, and those its wrappers and a JSON feed's
/// `"vast"` tags lead to, fetched level by level with the transfer engine, within a budget of
/// its own (SPEC §10 *Bounded effort*): each distinct document URL fetched and parsed once a
/// run (every wrapper naming it shares the answer), at most `maxDocuments` documents, at most
/// `maxAdsPerDocument` ads from one wrapped document, no parse after the deadline.
extension Fetcher {
    /// A VAST document still to fetch.
    struct VASTTask {
        var url: String
        /// The wrappers fetched on the way to it (their trackers and `Error` URLs).
        var chain: [VASTWrapper]
        var seen: Set<String>
        /// The JSON feed's tag it belongs to, nil under a root VAST feed.
        var tag: Int?
        /// False: only the document's first ad (a wrapper without `allowMultipleAds`).
        var takeAll: Bool
    }

    struct VASTResult {
        var ads: [(tag: Int?, ad: FeedAd)] = []
        var warnings: [Diagnostic] = []
        var errors: [VASTErrorReport] = []
        /// Wrapped documents that could not be fetched for now (the run's exit is 75).
        var transientFailures = 0
        /// The documents read this run, kept for the next run's conditional requests.
        var documents: [String: VASTDocumentCopy] = [:]
        /// The chains followed (a wrapper's document to read for one chain), each once: a
        /// chain the same as one followed already (the same document, wrappers and tag)
        /// would give the same ads again.
        var chains: Set<ChainKey> = []
        /// Chains not followed: past the run's budget, or past the deadline.
        var overBudget = 0
        var pastDeadline = 0
    }

    /// What makes two chains the same: the document, the wrappers on the way, the tag.
    struct ChainKey: Hashable {
        var url: String
        var chain: [VASTWrapper]
        var tag: Int?
        var takeAll: Bool
    }

    static let maxWrappers = 5
    /// Wrapped documents a run reads at most; a wrapper beyond them is error 302.
    static let maxDocuments = 64
    /// Ads taken at most from one wrapped document (a root document is bounded by its size).
    static let maxAdsPerDocument = 100
    /// Chains a run follows at most: as many ads as 64 documents of 100 can give. Wrappers
    /// that fan out (each document naming the next many times over, each with trackers of
    /// its own) would otherwise multiply the work by their count at every level, whatever
    /// the number of requests.
    static let maxChains = maxDocuments * maxAdsPerDocument

    /// The feed's VAST ads resolved and put in place (SPEC §10); returns the documents read,
    /// for the next run.
    func vastStage(_ feed: inout Feed, _ request: FeedRequest, signedRoot: Bool, before: CacheIndex) -> [String:
        VASTDocumentCopy]
    {
        guard feed.hasVAST else { return [:] }
        let result = resolveVAST(
            root: feed.vastRoot, feedURL: request.feedText, tags: feed.vastTags, signed: signedRoot,
            kept: Self.loadVASTDocuments(store))
        placeVASTAds(result, tags: feed.vastTags, into: &feed)
        return result.documents
    }

    /// The ads of `root` (a root VAST feed) and of `tags`, every wrapper resolved. `kept`: the
    /// documents of the last run, asked for conditionally (not at all while fresh by their own
    /// answer's `Cache-Control`/`Expires`, unless `--revalidate`).
    func resolveVAST(
        root: VASTDocument?, feedURL: String, tags: [VASTTag], signed: Bool, kept: [String: VASTDocumentCopy]
    ) -> VASTResult {
        var result = VASTResult()
        var pending: [VASTTask] = tags.enumerated().map { i, tag in
            VASTTask(url: tag.url, chain: [], seen: [tag.url], tag: i, takeAll: true)
        }
        if let root {
            take(
                root, from: VASTTask(url: feedURL, chain: [], seen: [feedURL], tag: nil, takeAll: true),
                signedRoot: signed, &result, &pending)
        }
        /// Each distinct URL's answer this run: a document, or why there is none.
        var read: [String: Result<VASTDocument, VASTFailure>] = [:]
        while !pending.isEmpty, options.transfer.isCancelled?() != true {
            let batch = pending
            pending = []
            var wanted: [String] = []
            for task in batch where read[task.url] == nil && !wanted.contains(task.url) {
                guard read.count + wanted.count < Self.maxDocuments else { break }
                wanted.append(task.url)
            }
            for (url, answer) in readVASTDocuments(wanted, kept: kept, &result) { read[url] = answer }
            for task in batch {
                // The deadline bounds the chains as it bounds the transfers and the parse.
                if let deadline = options.settings.deadline, monotonicNow() >= deadline {
                    result.pastDeadline += 1
                    continue
                }
                guard let answer = read[task.url] else {
                    fail(task, .wrapperLimit, "more than \(Self.maxDocuments) wrapped documents in one run", &result)
                    continue
                }
                switch answer {
                case .success(let doc): take(doc, from: task, signedRoot: false, &result, &pending)
                case .failure(let failure):
                    if failure.transient { result.transientFailures += 1 }
                    fail(task, failure.code, failure.reason, &result)
                }
            }
        }
        // One warning each for what was not followed, not one a chain (there may be many).
        if result.overBudget > 0 {
            result.warnings.append(
                Diagnostic(
                    .feed,
                    "VAST: \(result.overBudget) wrapper chains past the run's \(Self.maxChains) were not followed (error 302)"
                ))
        }
        if result.pastDeadline > 0 {
            result.transientFailures += 1
            result.warnings.append(
                Diagnostic(
                    .feed,
                    "VAST: \(result.pastDeadline) wrapper chains were not resolved before the deadline (error 301)"))
        }
        return result
    }

    /// Fetches `urls` (in parallel, conditionally) and parses each answer once.
    private func readVASTDocuments(
        _ urls: [String], kept: [String: VASTDocumentCopy], _ result: inout VASTResult
    ) -> [String: Result<VASTDocument, VASTFailure>] {
        let t = now()
        let fresh = urls.filter { url in
            guard !options.revalidate, let copy = kept[url], let until = copy.freshUntil else { return false }
            return t < until
        }
        let asked = urls.filter { !fresh.contains($0) }
        let requests = asked.map { url -> TransferRequest in
            var r = TransferRequest(url: url, destination: .memory, maxBytes: options.maxFeedSize)
            r.acceptCompressed = true
            // Conditional, with the validators of the copy kept from an earlier run.
            r.ifNoneMatch = kept[url]?.etag
            r.ifModifiedSince = kept[url]?.lastModified
            return r
        }
        var responses = [TransferResponse](repeating: TransferResponse(), count: asked.count)
        if !requests.isEmpty {
            TransferEngine(settings: options.settings).run(requests) { i, r in responses[i] = r }
        }
        var bodies: [(String, [UInt8])] = []
        for url in fresh {
            result.documents[url] = kept[url]
            bodies.append((url, kept[url]!.body))
        }
        var out: [String: Result<VASTDocument, VASTFailure>] = [:]
        for (url, response) in zip(asked, responses) {
            var response = response
            if response.notModified, let copy = kept[url] {
                response.body = copy.body
                response.error = nil
            }
            if let copy = keepVASTDocument(url, response, kept: kept) { result.documents[url] = copy }
            if let error = response.error {
                let timeout = [.timedOut, .stalled, .deadline].contains(error)
                out[url] = .failure(
                    VASTFailure(
                        timeout ? .wrapperTimeout : .wrapper, "cannot fetch it: \(error)", transient: error.isTransient)
                )
                continue
            }
            bodies.append((url, response.body))
        }
        for (url, body) in bodies {
            // The deadline bounds the parse as it bounds the transfers.
            if let deadline = options.settings.deadline, monotonicNow() >= deadline {
                out[url] = .failure(VASTFailure(.wrapperTimeout, "not read before the deadline", transient: true))
                continue
            }
            do {
                out[url] = .success(try VASTDocument.read(body, deadline: options.settings.deadline))
            } catch {
                out[url] = .failure(
                    VASTFailure(
                        error.code == .undefined ? .xmlParse : error.code, error.reason, transient: error.transient))
            }
        }
        return out
    }

    /// The ads of one document; its wrappers become tasks of the next level.
    private func take(
        _ doc: VASTDocument, from task: VASTTask, signedRoot: Bool, _ result: inout VASTResult,
        _ pending: inout [VASTTask]
    ) {
        let chainErrors = task.chain.flatMap(\.trackers.error)
        result.warnings += doc.warnings.map { Diagnostic(.feed, $0) }
        if doc.entries.isEmpty {
            // No ad: the root's Error (and every wrapper's) is told 303.
            let urls = chainErrors + doc.rootErrors
            if !urls.isEmpty {
                result.errors.append(VASTErrorReport(id: task.chain.last?.id ?? task.url, urls: urls, code: .noAds))
            }
            if !task.chain.isEmpty {
                result.warnings.append(Diagnostic(.feed, "VAST tag \(task.url): no ad (error 303)"))
            }
            return
        }
        var wrappers = VASTTrackers()
        for w in task.chain { wrappers.add(w.trackers) }
        var entries = task.takeAll ? doc.entries : Array(doc.entries.prefix(1))
        let wrapped = !task.chain.isEmpty || task.tag != nil
        if wrapped, entries.count > Self.maxAdsPerDocument {
            result.warnings.append(
                Diagnostic(
                    .feed,
                    "VAST tag \(task.url): only its first \(Self.maxAdsPerDocument) ads are taken (it has \(entries.count))"
                ))
            entries = Array(entries.prefix(Self.maxAdsPerDocument))
        }
        for entry in entries {
            switch entry {
            case .inline(let id, let inline):
                do {
                    let made = try VASTDocument.ad(
                        inline, id: id, wrappers: wrappers, options: options.vast, now: now(),
                        maxAssetSize: options.maxAssetSize)
                    result.ads.append((task.tag, made.ad))
                    result.warnings += made.warnings.map { Diagnostic(.feed, ad: id, $0) }
                } catch {
                    let name = id ?? inline.child("AdServingId")?.text.nilIfEmpty ?? "#\(result.ads.count + 1)"
                    result.warnings.append(
                        Diagnostic(
                            .feed, ad: id, "skipping VAST ad '\(name)': \(error.reason) (error \(error.code.rawValue))")
                    )
                    let own = inline.children("Error").compactMap { VASTDocument.webURL($0.text) }
                    let urls = chainErrors + own
                    if !urls.isEmpty { result.errors.append(VASTErrorReport(id: name, urls: urls, code: error.code)) }
                }
            case .wrapper(let w):
                let name = w.id ?? w.tagURI ?? task.url
                if signedRoot {
                    result.warnings.append(
                        Diagnostic(
                            .feed, ad: w.id,
                            "skipping VAST wrapper '\(name)': a signed feed's wrapped documents are not signed"))
                    continue
                }
                let chain = task.chain + [w]
                let next = VASTTask(
                    url: w.tagURI ?? "", chain: chain, seen: task.seen, tag: task.tag, takeAll: w.allowMultipleAds)
                guard let uri = w.tagURI else {
                    fail(next, .wrapper, "its VASTAdTagURI is not an http or https URL", &result)
                    continue
                }
                if let last = task.chain.last, !last.followAdditionalWrappers {
                    fail(next, .wrapperLimit, "a wrapper that allows no further wrapper led to another", &result)
                } else if chain.count > Self.maxWrappers {
                    fail(next, .wrapperLimit, "more than \(Self.maxWrappers) wrappers lead to it", &result)
                } else if task.seen.contains(uri) {
                    fail(next, .wrapperLimit, "its wrappers loop (\(uri) again)", &result)
                } else {
                    var n = next
                    n.seen.insert(uri)
                    let key = ChainKey(url: uri, chain: chain, tag: task.tag, takeAll: n.takeAll)
                    guard !result.chains.contains(key) else { continue }   // the same ads again
                    guard result.chains.count < Self.maxChains else {
                        result.overBudget += 1
                        continue
                    }
                    result.chains.insert(key)
                    pending.append(n)
                }
            }
        }
    }

    /// The ads under `task` fail: one warning, and its wrappers' `Error` URLs told `code`.
    private func fail(_ task: VASTTask, _ code: VASTCode, _ reason: String, _ result: inout VASTResult) {
        let id = task.chain.last?.id ?? task.url
        result.warnings.append(
            Diagnostic(
                .feed, ad: task.chain.last?.id,
                "skipping the ads of VAST tag \(task.url): \(reason) (error \(code.rawValue))"))
        let urls = task.chain.flatMap(\.trackers.error)
        if !urls.isEmpty { result.errors.append(VASTErrorReport(id: id, urls: urls, code: code)) }
    }

    /// `feed` with the VAST ads in place: a tag's ads where the tag stood (each taking the
    /// JSON ad's fields), a root feed's in order; a repeated id skipped with a warning.
    func placeVASTAds(_ result: VASTResult, tags: [VASTTag], into feed: inout Feed) {
        var byTag: [Int: [FeedAd]] = [:]
        var rootAds: [FeedAd] = []
        for (tag, ad) in result.ads {
            guard let tag else {
                rootAds.append(ad)
                continue
            }
            var a = ad
            let t = tags[tag].template
            if let prefix = tags[tag].idPrefix { a.id = "\(prefix)/\(a.id)" }
            a.priority = t.priority
            a.placement = t.placement
            a.maxShows = t.maxShows
            a.maxShowsPerDay = t.maxShowsPerDay
            a.minInterval = t.minInterval
            a.weight = t.weight
            a.schedule = t.schedule
            a.rollout = t.rollout
            a.start = t.start
            if let e = t.expires { a.expires = min(e, a.expires ?? e) }
            if let sha = t.sha256 { a.sha256 = sha }
            byTag[tag, default: []].append(a)
        }
        var ads: [FeedAd] = []
        var position = 0
        for (i, tag) in tags.enumerated() {
            ads += feed.ads[position..<min(tag.position, feed.ads.count)]
            position = tag.position
            ads += byTag[i] ?? []
        }
        ads += feed.ads[min(position, feed.ads.count)...]
        ads += rootAds
        var seen = Set<String>()
        var repeated: [String] = []
        feed.ads = ads.filter { ad in
            guard seen.insert(ad.id).inserted else {
                repeated.append(ad.id)
                return false
            }
            return true
        }
        // One warning an ad, but one in all past a few (chains of wrappers may bring the same
        // ad back thousands of times).
        for id in repeated.prefix(repeated.count > 5 ? 0 : 5) {
            feed.warnings.append(
                Diagnostic(.feed, ad: id, "skipping ad '\(id)': its id is used by an earlier ad in the feed"))
        }
        if repeated.count > 5 {
            feed.warnings.append(
                Diagnostic(
                    .feed,
                    "skipping \(repeated.count) ads whose ids are used by earlier ads in the feed (first: '\(repeated[0])')"
                ))
        }
        feed.warnings += result.warnings
        feed.vastErrors = result.errors
        feed.vastTransientFailures = result.transientFailures
    }
}

extension Fetcher {
    /// The VAST error a media file's failure is (SPEC §10), as the check stage typed it: 401 a
    /// 404, 402 a timeout, 405 content that is not what its type says, 400 any other failure
    /// for good; nil for a transient failure (it is retried) or one not tried this run (a
    /// back-off waits).
    static func vastCode(_ r: AssetResult) -> VASTCode? {
        guard r.outcome == .failed, !r.waiting, r.ioError == nil, !r.noSpace else { return nil }
        return r.mediaError
    }

    /// Queues, once the feed is committed, what VAST asks to be told (SPEC §10): the errors
    /// of the documents and ads this run skipped, of media files that failed (each rendition
    /// tried, `renditionErrors`, and the last), and `notUsed` for an ad withdrawn without ever
    /// having been shown. A failure to queue is a warning.
    func queueVASTReports(
        _ feed: Feed, results: [String: AssetResult], before: CacheIndex, renditionErrors: [VASTErrorReport]
    ) {
        guard let pop = proofOfPlay else { return }
        let t = now()
        var records = feed.vastErrors.map {
            pop.errorRecord(id: $0.id, urls: $0.urls, code: $0.code.rawValue, assetURI: nil, at: t)
        }
        records += renditionErrors.map {
            pop.errorRecord(id: $0.id, urls: $0.urls, code: $0.code.rawValue, assetURI: $0.assetURI, at: t)
        }
        for ad in feed.ads where ad.vast != nil {
            guard let r = results[ad.id], let code = Self.vastCode(r), let urls = ad.tracking["error"], !urls.isEmpty
            else { continue }
            records.append(pop.errorRecord(id: ad.id, urls: urls, code: code.rawValue, assetURI: ad.url, at: t))
        }
        let listed = Set(feed.ads.map(\.id))
        for r in before.ads where r.vast != nil && r.state != .withdrawn && !listed.contains(r.id) {
            records += Self.notUsed(r, pop, at: t)
        }
        store.queue(records, what: "VAST errors", warn: warn)
    }

    /// An ad's `notUsed` record, when it has `notUsed` trackers and was never shown.
    static func notUsed(_ r: AdRecord, _ pop: AdCache.ProofOfPlay, at t: Double) -> [JournalRecord] {
        guard r.owesNotUsed else { return [] }
        return [pop.record("notUsed", of: r, at: t, reportUrl: nil)]
    }
}

extension AdRecord {
    /// Never shown, and with `notUsed` trackers to tell when it goes unshown (SPEC §10).
    var owesNotUsed: Bool { shows == 0 && lastShown == nil && !(tracking["notUsed"] ?? []).isEmpty }
}

/// The wrapped VAST documents of the last run, kept with their validators so that the next
/// run asks for them conditionally (SPEC §10 *Wrappers*): `vast.documents` in the cache.
struct VASTDocumentCopy: Sendable {
    var etag: String?
    var lastModified: String?
    var body: [UInt8]
    /// Until when the answer is fresh by its own `Cache-Control`/`Expires` (not asked before).
    var freshUntil: Double?
}

extension Fetcher {
    /// The copy to keep of a document that answered 200 or 304 with a validator or a freshness.
    func keepVASTDocument(_ url: String, _ response: TransferResponse, kept: [String: VASTDocumentCopy])
        -> VASTDocumentCopy?
    {
        guard response.error == nil, !response.body.isEmpty else { return nil }
        let etag = response.headers["etag"] ?? (response.notModified ? kept[url]?.etag : nil)
        let lastModified =
            response.headers["last-modified"] ?? (response.notModified ? kept[url]?.lastModified : nil)
        let fresh = freshUntil(response.headers)
        guard etag != nil || lastModified != nil || fresh != nil,
            String(validating: response.body, as: UTF8.self) != nil
        else { return nil }
        return VASTDocumentCopy(etag: etag, lastModified: lastModified, body: response.body, freshUntil: fresh)
    }

    /// `vast.documents` as the last commit wrote it (nothing when absent or damaged).
    static func loadVASTDocuments(_ store: CacheStore) -> [String: VASTDocumentCopy] {
        guard let bytes = try? store.vastDocumentsFile.read(limit: 64 << 20),
            let json = try? JSONValue.parse(bytes), let object = json.objectValue
        else { return [:] }
        var out: [String: VASTDocumentCopy] = [:]
        for (url, value) in object {
            guard let o = value.objectValue, let body = o["body"]?.stringValue else { continue }
            let fresh = o["freshUntil"]?.integerValue.map(Double.init).flatMap { Time.isSupported($0) ? $0 : nil }
            out[url] = VASTDocumentCopy(
                etag: o["etag"]?.stringValue, lastModified: o["lastModified"]?.stringValue, body: Array(body.utf8),
                freshUntil: fresh)
        }
        return out
    }

    /// After the commit: the documents this run read (those no feed leads to any more go), and
    /// the feed's own bytes when its ads come from VAST (`feed.vast`), which a 304 of the feed
    /// reads again so that what it wraps stays fresh. A failure only costs the next run its
    /// conditional requests.
    func saveVASTDocuments(_ documents: [String: VASTDocumentCopy], feedBytes: [UInt8]?) {
        if let feedBytes {
            if (try? store.vastFeedFile.read(limit: options.maxFeedSize)) != feedBytes {
                try? store.vastFeedFile.writeAtomically(feedBytes)
            }
        } else if store.vastFeedFile.exists {
            store.vastFeedFile.remove()
        }
        guard !documents.isEmpty else {
            if store.vastDocumentsFile.exists { store.vastDocumentsFile.remove() }
            return
        }
        var w = JSONWriter(indent: nil, capacity: 4096)
        w.beginObject()
        for (url, copy) in documents.sorted(by: { $0.key < $1.key }) {
            w.key(url)
            w.beginObject()
            w.field("body", String(decoding: copy.body, as: UTF8.self))
            w.field("etag", copy.etag)
            w.field("lastModified", copy.lastModified)
            if let fresh = copy.freshUntil, Time.isSupported(fresh) { w.field("freshUntil", Int64(fresh)) }
            w.endObject()
        }
        w.endObject()
        try? store.vastDocumentsFile.writeAtomically(w.out)
    }

    /// The bytes of the last feed whose ads came from VAST, when they are the feed `digest` names.
    func keptVASTFeed(digest: String?) -> [UInt8]? {
        guard let digest, let bytes = try? store.vastFeedFile.read(limit: options.maxFeedSize),
            (try? SHA256Hasher.hex(bytes: bytes)) == digest
        else { return nil }
        return bytes
    }
}

extension CacheStore {
    var vastDocumentsFile: CacheFile { dir.file("vast.documents") }
    var vastFeedFile: CacheFile { dir.file("feed.vast") }
}
