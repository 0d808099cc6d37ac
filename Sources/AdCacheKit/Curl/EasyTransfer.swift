import CCurl
import Dispatch

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// One attempt at one transfer: owns its `CURL *` easy handle, header list, error buffer and
/// output file, and frees them in `deinit`. Not Sendable: the engine's thread drives it.
final class EasyTransfer {
    let api: CurlAPI
    let handle: UnsafeMutableRawPointer
    let request: TransferRequest
    let index: Int
    let attempt: Int
    private var headerList: UnsafeMutablePointer<curl_slist>?
    private let errorBuffer = UnsafeMutablePointer<CChar>.allocate(capacity: Int(CURL_ERROR_SIZE) + 1)

    var response = TransferResponse()
    /// Set by a callback that aborts the transfer, so `finish` can say why.
    private var failure: TransferError?
    private var fd: Int32 = -1
    private var hasher: SHA256Hasher?
    /// Past `offloadHashAfter` bytes, the digest is computed on another thread while this one
    /// receives and writes (a big video: the hash no longer adds to the transfer's time).
    private var hashQueue: DispatchQueue?
    /// A file's bytes are gathered into chunks of `chunkSize` (libcurl hands over 16 KiB at
    /// a time), each written with one call. Past `offloadHashAfter`, the chunks go to the
    /// hashing thread `groupChunks` at a time (one hand-off per 512 KiB, not per chunk: each
    /// hand-off is two futex calls): `chunkCount` buffers make two groups, one filled and
    /// written while the other is hashed.
    private var chunks: [UnsafeMutableRawBufferPointer] = []
    private var chunk = 0
    private var chunkFill = 0
    /// The written chunks of the group being filled, not yet handed to the hashing thread.
    private var group: [UnsafeRawBufferPointer] = []
    /// Groups free for filling, besides the one being filled.
    private let freeGroups = DispatchSemaphore(value: EasyTransfer.chunkCount / EasyTransfer.groupChunks - 1)
    private var hashedInline: Int64 = 0
    static let offloadHashAfter: Int64 = 4 << 20
    static let chunkSize = 128 << 10
    static let groupChunks = 4
    static let chunkCount = 8
    private var resumeOffset: Int64 = 0
    private var bodyStarted = false
    /// Bytes of this attempt's file handed to the disk so far (`FileIO.startWriteback`).
    private var writebackFrom: Int64 = 0
    /// Bytes of this attempt's file written so far (the resumed part included).
    private var written: Int64 = 0
    static let writebackEvery: Int64 = 8 << 20
    private var writingBody = false
    /// Bytes received in this attempt (all bodies), for the progress line.
    private(set) var received: Int64 = 0
    /// The first option libcurl refused: the transfer must not run without it.
    private(set) var refusedOption: String?
    /// When the last byte (or the start) came, on the monotonic clock: `--timeout` is the
    /// longest stretch without one.
    private var lastByteAt = monotonicNow()
    private let idleTimeout: Double

    init?(api: CurlAPI, request: TransferRequest, index: Int, attempt: Int, settings: TransferSettings) {
        guard let h = api.easyInit() else { return nil }
        self.api = api
        handle = h
        self.request = request
        self.index = index
        self.attempt = attempt
        idleTimeout = settings.timeout
        errorBuffer.initialize(repeating: 0, count: Int(CURL_ERROR_SIZE) + 1)
        configure(settings)
    }

    deinit {
        hashQueue?.sync {}   // no chunk is still being read when its buffer goes
        for buffer in chunks { buffer.deallocate() }
        closeFile()
        api.easyCleanup(handle)
        if let headerList { api.slistFreeAll(headerList) }
        errorBuffer.deallocate()
    }

    /// Every option is checked (SPEC §6): the first that libcurl refuses is remembered, and
    /// the engine fails the transfer instead of running it without that option.
    private func checked(_ code: CURLcode, _ name: String) {
        guard code != CURLE_OK, refusedOption == nil else { return }
        let why = api.easyStrerror(code).map { String(cString: $0) } ?? "error \(code.rawValue)"
        refusedOption = "libcurl \(api.version) refused \(name): \(why)"
    }

    private func set(_ o: CURLoption, _ v: Int, _ name: String) {
        checked(rejected(o) ?? adc_easy_setopt_long(api.setopt, handle, o, v), name)
    }

    private func set(_ o: CURLoption, _ v: String, _ name: String) {
        checked(rejected(o) ?? adc_easy_setopt_string(api.setopt, handle, o, v), name)
    }

    /// Tests make libcurl refuse an option (`TransferSettings.refuseOption`).
    private var refuse: CURLoption?
    private func rejected(_ o: CURLoption) -> CURLcode? { o == refuse ? CURLE_UNKNOWN_OPTION : nil }

    /// `CURLOPT_PROTOCOLS` and `CURLOPT_REDIR_PROTOCOLS`: the bitmask forms every libcurl
    /// honours (the `_STR` forms exist only from 7.85, and an older one ignores them).
    static let protocolsOption = CURLoption(rawValue: 181)
    static let redirectProtocolsOption = CURLoption(rawValue: 182)

    /// The proxy configured for this transfer: what a connection failure names (else the
    /// environment's, looked up only then).
    private var proxy: String?

    private func configure(_ s: TransferSettings) {
        refuse = s.refuseOption
        proxy = s.proxy
        set(CURLOPT_URL, request.url, "CURLOPT_URL")
        set(CURLOPT_NOSIGNAL, 1, "CURLOPT_NOSIGNAL")
        set(CURLOPT_FOLLOWLOCATION, request.followRedirects ? 1 : 0, "CURLOPT_FOLLOWLOCATION")
        set(CURLOPT_MAXREDIRS, s.maxRedirects, "CURLOPT_MAXREDIRS")
        let web = Int(CURLPROTO_HTTP) | Int(CURLPROTO_HTTPS)
        set(Self.protocolsOption, request.allowFile ? Int(CURLPROTO_FILE) : web, "CURLOPT_PROTOCOLS")
        set(Self.redirectProtocolsOption, web, "CURLOPT_REDIR_PROTOCOLS")
        set(CURLOPT_SSL_VERIFYPEER, 1, "CURLOPT_SSL_VERIFYPEER")
        set(CURLOPT_SSL_VERIFYHOST, 2, "CURLOPT_SSL_VERIFYHOST")
        if let ca = s.caFile { set(CURLOPT_CAINFO, ca, "CURLOPT_CAINFO") }
        if let proxy = s.proxy {
            set(CURLOPT_PROXY, proxy, "CURLOPT_PROXY")
            set(CURLOPT_NOPROXY, s.noProxy ?? "", "CURLOPT_NOPROXY")   // "": no host bypasses it
        } else if let noProxy = s.noProxy {
            set(CURLOPT_NOPROXY, noProxy, "CURLOPT_NOPROXY")
        }
        set(CURLOPT_USERAGENT, s.userAgent ?? defaultUserAgent(), "CURLOPT_USERAGENT")
        // --timeout bounds the connection and the longest stretch without a byte (the
        // progress callback below), never a whole transfer: a big file on a slow link
        // finishes as long as it keeps moving.
        set(CURLOPT_CONNECTTIMEOUT_MS, Int(min(s.timeout, 86400) * 1000), "CURLOPT_CONNECTTIMEOUT_MS")
        set(CURLOPT_LOW_SPEED_LIMIT, s.stallBytesPerSecond, "CURLOPT_LOW_SPEED_LIMIT")
        set(CURLOPT_LOW_SPEED_TIME, s.stallSeconds, "CURLOPT_LOW_SPEED_TIME")
        checked(
            adc_easy_setopt_offt(api.setopt, handle, CURLOPT_MAXFILESIZE_LARGE, curl_off_t(request.maxBytes)),
            "CURLOPT_MAXFILESIZE_LARGE")
        checked(adc_easy_setopt_pointer(api.setopt, handle, CURLOPT_ERRORBUFFER, errorBuffer), "CURLOPT_ERRORBUFFER")
        if request.acceptCompressed { set(CURLOPT_ACCEPT_ENCODING, "", "CURLOPT_ACCEPT_ENCODING") }
        // A file gets a receive buffer as big as a chunk (libcurl's default is 16 KiB); under
        // --limit-rate every transfer gets the limiter's small one: the most a write callback
        // hands over, and so the most one piece can take the bucket into debt.
        if let limiter = s.rateLimiter {
            set(CURLOPT_BUFFERSIZE, limiter.chunk, "CURLOPT_BUFFERSIZE")
        } else if case .file = request.destination {
            set(CURLOPT_BUFFERSIZE, Self.chunkSize, "CURLOPT_BUFFERSIZE")
        }

        if let body = request.postBody {
            checked(
                adc_easy_setopt_offt(api.setopt, handle, CURLOPT_POSTFIELDSIZE_LARGE, curl_off_t(body.count)),
                "CURLOPT_POSTFIELDSIZE_LARGE")
            var copy = body
            copy.withUnsafeMutableBytes { raw in
                checked(
                    adc_easy_setopt_pointer(api.setopt, handle, CURLOPT_COPYPOSTFIELDS, raw.baseAddress),
                    "CURLOPT_COPYPOSTFIELDS")
            }
            // A redirected POST stays a POST with its body (libcurl turns one into a GET on
            // 301, 302 and 303 otherwise): a batch is delivered only where it arrives.
            set(CURLOPT_POSTREDIR, 7, "CURLOPT_POSTREDIR")   // CURL_REDIR_POST_ALL
        }
        var headers = request.headers
        if let etag = request.ifNoneMatch { headers.append("If-None-Match: \(etag)") }
        if let date = request.ifModifiedSince { headers.append("If-Modified-Since: \(date)") }
        if case .file(let partial) = request.destination, !request.allowFile, let resume = partial.resumePoint() {
            // Resume what an earlier attempt left, when we know which version it holds.
            resumeOffset = resume.offset
            set(CURLOPT_RANGE, "\(resume.offset)-", "CURLOPT_RANGE")
            headers.append("If-Range: \(resume.validator)")
        }
        for line in headers { headerList = api.slistAppend(headerList, line) }
        if headerList != nil {
            checked(adc_easy_setopt_slist(api.setopt, handle, CURLOPT_HTTPHEADER, headerList), "CURLOPT_HTTPHEADER")
        }

        let me = Unmanaged.passUnretained(self).toOpaque()
        checked(adc_easy_setopt_pointer(api.setopt, handle, CURLOPT_WRITEDATA, me), "CURLOPT_WRITEDATA")
        // Without a limit, the body goes straight to `bodyReceived`: no cost per piece.
        limiter = s.rateLimiter
        let write =
            limiter == nil
            ? adc_easy_setopt_data_callback(api.setopt, handle, CURLOPT_WRITEFUNCTION) {
                ptr, size, count, userdata in
                guard let userdata, let ptr else { return 0 }
                let t = Unmanaged<EasyTransfer>.fromOpaque(userdata).takeUnretainedValue()
                return t.bodyReceived(UnsafeRawBufferPointer(start: ptr, count: size * count))
            }
            : adc_easy_setopt_data_callback(api.setopt, handle, CURLOPT_WRITEFUNCTION) {
                ptr, size, count, userdata in
                guard let userdata, let ptr else { return 0 }
                let t = Unmanaged<EasyTransfer>.fromOpaque(userdata).takeUnretainedValue()
                return t.pacedBodyReceived(UnsafeRawBufferPointer(start: ptr, count: size * count))
            }
        checked(write, "CURLOPT_WRITEFUNCTION")
        checked(adc_easy_setopt_pointer(api.setopt, handle, CURLOPT_HEADERDATA, me), "CURLOPT_HEADERDATA")
        let header = adc_easy_setopt_data_callback(api.setopt, handle, CURLOPT_HEADERFUNCTION) {
            ptr, size, count, userdata in
            guard let userdata, let ptr else { return 0 }
            let t = Unmanaged<EasyTransfer>.fromOpaque(userdata).takeUnretainedValue()
            t.headerReceived(UnsafeRawBufferPointer(start: ptr, count: size * count))
            return size * count
        }
        checked(header, "CURLOPT_HEADERFUNCTION")
        checked(adc_easy_setopt_pointer(api.setopt, handle, CURLOPT_XFERINFODATA, me), "CURLOPT_XFERINFODATA")
        let progress = adc_easy_setopt_xferinfo_callback(api.setopt, handle, CURLOPT_XFERINFOFUNCTION) {
            userdata, _, _, _, _ in
            guard let userdata else { return 0 }
            return Unmanaged<EasyTransfer>.fromOpaque(userdata).takeUnretainedValue().idleCheck()
        }
        checked(progress, "CURLOPT_XFERINFOFUNCTION")
        set(CURLOPT_NOPROGRESS, 0, "CURLOPT_NOPROGRESS")
    }

    /// Called by libcurl about once a second and whenever data moves: aborts a transfer that
    /// went `--timeout` seconds without a byte (a pause of ours is not the server's silence).
    private func idleCheck() -> Int32 {
        guard !isPaused, monotonicNow() - lastByteAt > idleTimeout else { return 0 }
        failure = .timedOut
        return 1
    }

    // MARK: Pacing (--limit-rate)

    /// The run's shared budget, when it has one.
    private var limiter: RateLimiter?
    /// Paused by `pacedBodyReceived`: libcurl holds the piece until `resume()`.
    private(set) var isPaused = false

    /// The write callback under `--limit-rate`: the piece goes on only when the bucket allows
    /// it; otherwise libcurl keeps it, stops reading, and hands it over again after `resume()`.
    private func pacedBodyReceived(_ bytes: UnsafeRawBufferPointer) -> Int {
        if let limiter, !bytes.isEmpty, !limiter.take(bytes.count) {
            isPaused = true
            return Int(CURL_WRITEFUNC_PAUSE)
        }
        isPaused = false
        return bodyReceived(bytes)
    }

    /// Unpauses the transfer: libcurl hands the piece it kept to the write callback at once
    /// (which may pause it again). Not `CURLE_OK` when that callback failed the transfer.
    func resume() -> CURLcode {
        isPaused = false
        lastByteAt = monotonicNow()
        return api.easyPause(handle, 0)   // CURLPAUSE_CONT
    }

    // MARK: Callbacks

    private func headerReceived(_ line: UnsafeRawBufferPointer) {
        lastByteAt = monotonicNow()
        // Bytes, not Foundation strings: a report makes thousands of small requests.
        if line.starts(with: "HTTP/".utf8) {
            response.headers = [:]   // a new response (after a redirect or 100 Continue)
            return
        }
        guard let colon = line.firstIndex(of: UInt8(ascii: ":")) else { return }
        func isSpace(_ b: UInt8) -> Bool { b == 0x20 || b == 0x09 || b == 0x0D || b == 0x0A }
        var start = colon + 1
        var end = line.count
        while start < end, isSpace(line[start]) { start += 1 }
        while end > start, isSpace(line[end - 1]) { end -= 1 }
        let name = String(
            decoding: line[..<colon].lazy.map { (0x41...0x5A).contains($0) ? $0 | 0x20 : $0 }, as: UTF8.self)
        response.headers[name] = String(decoding: UnsafeRawBufferPointer(rebasing: line[start..<end]), as: UTF8.self)
    }

    private var statusCode: Int {
        var code = 0
        adc_easy_getinfo_long(api.getinfo, handle, CURLINFO_RESPONSE_CODE, &code)
        return request.allowFile && code == 0 ? 200 : code
    }

    private func bodyReceived(_ bytes: UnsafeRawBufferPointer) -> Int {
        lastByteAt = monotonicNow()
        received += Int64(bytes.count)
        if !bodyStarted {
            bodyStarted = true
            guard startBody() else { return 0 }
        }
        guard writingBody else { return bytes.count }   // an error page: read and dropped

        if case .discard = request.destination { return bytes.count }
        let total = (response.resumed ? resumeOffset : 0) + response.bytesReceived + Int64(bytes.count)
        if total > request.maxBytes {
            failure = .tooLarge(request.maxBytes)
            return 0
        }
        response.bytesReceived += Int64(bytes.count)
        switch request.destination {
        case .discard:
            break
        case .memory:
            response.body.append(contentsOf: bytes)
        case .file:
            if response.fileHead.count < 16 {
                response.fileHead.append(contentsOf: bytes.prefix(16 - response.fileHead.count))
            }
            var rest = bytes[...]
            while !rest.isEmpty {
                if chunkFill == Self.chunkSize, !flushChunk() { return 0 }
                let n = min(rest.count, Self.chunkSize - chunkFill)
                UnsafeMutableRawBufferPointer(rebasing: chunks[chunk][chunkFill..<chunkFill + n])
                    .copyMemory(from: UnsafeRawBufferPointer(rebasing: rest.prefix(n)))
                chunkFill += n
                rest = rest.dropFirst(n)
            }
        }
        return bytes.count
    }

    /// Writes the chunk gathered so far to the file and adds it to the digest; false, with
    /// `failure` set, when the write fails.
    private func flushChunk() -> Bool {
        guard fd >= 0, chunkFill > 0 else { return true }
        let bytes = UnsafeRawBufferPointer(rebasing: chunks[chunk][..<chunkFill])
        chunkFill = 0
        if let e = FileIO.writeAll(fd, bytes) {
            failure = .writeFailed(FileIO.errnoText(e), errno: e)
            return false
        }
        written += Int64(bytes.count)
        // Write behind: the final fsync then waits for seconds' worth, not the whole file.
        if written - writebackFrom >= Self.writebackEvery {
            FileIO.startWriteback(fd, offset: writebackFrom, length: written - writebackFrom)
            writebackFrom = written
        }
        hash(bytes)
        return true
    }

    /// At the first body byte: decide from the status whether this is the asset, its
    /// continuation, or an error page, and open the file accordingly.
    private func startBody() -> Bool {
        let status = statusCode
        writingBody = (200...299).contains(status)
        if writingBody, let most = request.maxAnnouncedBytes,
            let length = response.headers["content-length"].flatMap(Int64.init), length > most
        {
            failure = .tooLarge(most)   // none of its body taken, none counted
            return false
        }
        guard writingBody, case .file(let partial) = request.destination else { return true }
        if status == 206 && resumeOffset > 0 {
            // The continuation: it must start where our file ends.
            let range = response.headers["content-range"] ?? ""
            guard range.lowercased().hasPrefix("bytes \(resumeOffset)-") else {
                failure = .oddReply("the server sent an unexpected range (\(range.isEmpty ? "none" : range))")
                partial.discard()
                return false
            }
            response.resumed = true
            written = resumeOffset
            writebackFrom = resumeOffset
            fd = partial.openForAppend()
            hasher = newHasher()
            try? partial.file.forEachBlock { hasher?.update($0) }
            response.fileHead = partial.file.head(count: 16)
        } else {
            // Remember which version this file holds, so an interruption can resume it.
            fd = partial.openFresh(validator: resumeValidator())
            hasher = newHasher()
        }
        guard fd >= 0 else {
            let e = errno
            failure = .writeFailed("\(partial.path): \(FileIO.errnoText(e))", errno: e)
            return false
        }
        if chunks.isEmpty {
            chunks.append(UnsafeMutableRawBufferPointer.allocate(byteCount: Self.chunkSize, alignment: 64))
        }
        return true
    }

    /// Adds the current chunk to the digest: here for a small file; for a big one on
    /// `hashQueue`, a group at a time, which then owns the group's buffers until it has read
    /// them, while this thread fills the other group. (Inline, the chunk stays 0, so the
    /// first group starts at chunk 0.)
    private func hash(_ bytes: UnsafeRawBufferPointer) {
        guard let hasher else { return }
        guard hashQueue != nil else {
            hasher.update(bytes)
            hashedInline += Int64(bytes.count)
            if hashedInline >= Self.offloadHashAfter { hashQueue = DispatchQueue(label: "adcache.sha256") }
            return
        }
        group.append(bytes)
        chunk = (chunk + 1) % Self.chunkCount
        if group.count == Self.groupChunks { handOffGroup() }
        if chunk == chunks.count {
            chunks.append(UnsafeMutableRawBufferPointer.allocate(byteCount: Self.chunkSize, alignment: 64))
        }
    }

    /// Gives the group's chunks to the hashing thread, then waits until the other group is
    /// free. The queue reads groups in the order given, so the free one is the next in turn.
    private func handOffGroup() {
        guard let hashQueue, let hasher, !group.isEmpty else { return }
        nonisolated(unsafe) let pieces = group
        group = []
        hashQueue.async { [freeGroups] in
            for piece in pieces { hasher.update(piece) }
            freeGroups.signal()
        }
        freeGroups.wait()
    }

    /// A hasher, or the transfer fails saying why (the fetch loads libcrypto before any
    /// transfer starts, so this only fails if that check was skipped).
    private func newHasher() -> SHA256Hasher? {
        do {
            return try SHA256Hasher()
        } catch {
            failure = .other("\(error)")
            return nil
        }
    }

    /// What an earlier run left and this transfer continues (0 unless resumed).
    var resumedFrom: Int64 { response.resumed ? resumeOffset : 0 }

    /// The whole file's size once the answer announced it.
    var expectedSize: Int64? {
        guard let length = response.headers["content-length"].flatMap(Int64.init) else { return nil }
        return resumedFrom + length
    }

    /// The response of a transfer stopped from outside (deadline, signal): its file closed,
    /// its partial download left for the next run.
    func abandon(_ r: TransferResponse) -> TransferResponse {
        if failure == nil { _ = flushChunk() }
        closeFile()
        return r
    }

    /// A validator `If-Range` accepts: a strong ETag, else Last-Modified.
    private func resumeValidator() -> String? {
        if let etag = response.headers["etag"], !etag.hasPrefix("W/") { return etag }
        return response.headers["last-modified"]
    }

    private func closeFile() {
        if fd >= 0 { close(fd); fd = -1 }
    }

    // MARK: Completion

    /// The response once curl reports the transfer done with `code`.
    func finish(_ code: CURLcode) -> TransferResponse {
        response.status = statusCode
        response.attempts = attempt + 1
        var retryAfter: curl_off_t = 0
        if adc_easy_getinfo_offt(api.getinfo, handle, CURLINFO_RETRY_AFTER, &retryAfter) == CURLE_OK, retryAfter > 0 {
            response.retryAfter = Double(retryAfter)
        }
        var urlPointer: UnsafeMutablePointer<CChar>?
        adc_easy_getinfo_string(api.getinfo, handle, CURLINFO_EFFECTIVE_URL, &urlPointer)
        response.effectiveURL = urlPointer.map { String(cString: $0) } ?? request.url

        // No fsync here: it would stall every other transfer on this thread. The fetch makes
        // its downloads durable in one batch before the index names them.
        if failure == nil { _ = flushChunk() }
        closeFile()
        if let failure {
            response.error = failure
        } else if code != CURLE_OK {
            var osErrno = 0
            adc_easy_getinfo_long(api.getinfo, handle, CURLINFO_OS_ERRNO, &osErrno)
            response.error = Self.map(
                code, message: errorText(code), host: hostOf(request.url), limit: request.maxBytes,
                osErrno: Int32(truncatingIfNeeded: osErrno),
                proxy: [CURLE_COULDNT_CONNECT, CURLE_COULDNT_RESOLVE_PROXY].contains(code)
                    ? proxy ?? Self.environmentProxy(for: request.url) : nil)
        } else if response.status == 304 {
            response.error = nil
        } else if !(200...299).contains(response.status) {
            response.error = .httpStatus(response.status)
        }
        if response.error == nil, case .file(let partial) = request.destination, (200...299).contains(response.status) {
            if !bodyStarted {
                // An empty body: the file was never opened; make it exist, empty.
                let f = partial.openFresh(validator: nil)
                if f >= 0 { close(f) }
                hasher = newHasher()
            }
            response.fileBytes = (response.resumed ? resumeOffset : 0) + response.bytesReceived
            handOffGroup()
            hashQueue?.sync {}   // the digest has every byte
            response.fileSha256 = hasher?.finalizeHex()
        }
        return response
    }

    private func errorText(_ code: CURLcode) -> String {
        let text = String(cString: errorBuffer)
        return text.isEmpty
            ? api.easyStrerror(code).map { String(cString: $0) } ?? "libcurl error \(code.rawValue)" : text
    }

    private func hostOf(_ url: String) -> String { Self.hostOf(url) }

    static func hostOf(_ url: String) -> String {
        guard let r = url.firstRange(of: "://") else { return url }
        return String(url[r.upperBound...].prefix { $0 != "/" && $0 != ":" })
    }

    /// libcurl's proxy from the environment for `url` (as it reads it: `no_proxy` aside).
    static func environmentProxy(for url: String) -> String? {
        let https = url.lowercased().hasPrefix("https:")
        let names = (https ? ["https_proxy", "HTTPS_PROXY"] : ["http_proxy"]) + ["all_proxy", "ALL_PROXY"]
        for name in names {
            if let v = getenv(name), v.pointee != 0 { return String(cString: v) }
        }
        return nil
    }

    /// A failure as the one table sees it. `proxy`: the proxy the transfer went through, which
    /// a connection failure names (a dead site cache is not a dead ad server, SPEC §12).
    static func map(
        _ code: CURLcode, message: String, host: String, limit: Int64, osErrno: Int32 = 0, proxy: String? = nil
    ) -> TransferError {
        switch code {
        case CURLE_COULDNT_RESOLVE_PROXY: return .couldNotResolve("the proxy \(proxy.map(Self.hostOf) ?? host)")
        case CURLE_COULDNT_RESOLVE_HOST: return .couldNotResolve(host)
        case CURLE_COULDNT_CONNECT where proxy != nil:
            return .proxyUnreachable("\(proxy!): \(message)")
        case CURLE_COULDNT_CONNECT, CURLE_GOT_NOTHING, CURLE_RECV_ERROR, CURLE_SEND_ERROR:
            return .couldNotConnect(message)
        case CURLE_OPERATION_TIMEDOUT:
            return message.contains("too slow") ? .stalled : .timedOut
        case CURLE_SSL_CONNECT_ERROR, CURLE_PEER_FAILED_VERIFICATION, CURLE_SSL_CACERT_BADFILE,
            CURLE_SSL_CERTPROBLEM, CURLE_SSL_CIPHER, CURLE_SSL_ISSUER_ERROR:
            return .tls(message)
        case CURLE_TOO_MANY_REDIRECTS: return .tooManyRedirects
        case CURLE_URL_MALFORMAT: return .malformedURL(message)
        case CURLE_UNSUPPORTED_PROTOCOL: return .refusedScheme(message)
        case CURLE_FILESIZE_EXCEEDED: return .tooLarge(limit)
        case CURLE_PARTIAL_FILE: return .truncated
        case CURLE_FILE_COULDNT_READ_FILE: return .fileNotFound(message)
        default: return .libcurl(code: Int32(code.rawValue), osErrno: osErrno, message)
        }
    }
}
