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

extension AdCache {
    /// What `exportLedger` writes (SPEC §14).
    public struct ExportOptions: Sendable {
        /// The file to write; its signature goes to `output` + `.minisig`.
        public var output: String
        /// From the first line dated at or after this (nil: the first line kept).
        public var since: Date?
        /// To the last line dated at or before this (nil: the last line).
        public var until: Date?

        /// An export of the ledger's lines from `since` to `until` (inclusive) to `output`.
        public init(output: String, since: Date? = nil, until: Date? = nil) {
            self.output = output
            self.since = since
            self.until = until
        }
    }

    /// A signed export of the ledger: what `exportLedger` wrote, or what `verifyExport` found.
    public struct LedgerExport: Sendable, Equatable {
        /// The export's path.
        public var file: String
        /// Its minisign signature's path (`file.minisig`).
        public var signatureFile: String
        /// How many lines it holds.
        public var lines: Int
        /// The `seq` of its first and last lines.
        public var firstSeq: Int64
        /// The `seq` of its last line.
        public var lastSeq: Int64
        /// The device key's id, as minisign prints it.
        public var keyId: String
        /// The signature's trusted comment: the device id, the range, the first line's `prev`
        /// and the last line's hash.
        public var trustedComment: String
    }

    /// The ledger as configured (`ProofOfPlay.ledgerDirectory`), or why there is none.
    func configuredLedger() throws -> Ledger {
        guard let dir = configuration.proofOfPlay.ledgerDirectory, !dir.isEmpty else {
            throw AdCacheError.invalidRequest("no ledger: set ledger-dir")
        }
        return Ledger(directory: dir)
    }

    /// The device's secret key file: `device-key`, else `<ledger-dir>/device.key`.
    func deviceKeyPath() throws -> String {
        if let path = configuration.proofOfPlay.deviceKey, !path.isEmpty { return path }
        return PathText.join(try configuredLedger().directory, "device.key")
    }

    /// The device's public key file (`device.pub` beside the secret key), in minisign's
    /// format; the key pair is made the first time (SPEC §14).
    public func devicePublicKey() throws -> String {
        try configuredLedger().prepare()
        return try DeviceKey.loadOrCreate(at: try deviceKeyPath()).publicKeyFile
    }

    /// Writes the ledger's lines from `since` to `until` to `output`, and minisign's
    /// signature of it by the device key to `output.minisig` — whose trusted comment names
    /// the device, the range, the first line's `prev` and the last line's hash — so that
    /// `minisign -Vm FILE -p device.pub` verifies it. The lines are a stretch of the ledger
    /// without a gap: from the first dated at or after `since` to the last dated at or
    /// before `until` (a line a clock set back dated out of order stays in its place).
    /// Throws `invalidRequest` when no line is in the range.
    public func exportLedger(_ options: ExportOptions) throws -> LedgerExport {
        let ledger = try configuredLedger()
        try ledger.prepare()
        let key = try DeviceKey.loadOrCreate(at: try deviceKeyPath())
        let bytes = try ledger.read()
        var starts: [Int] = []   // each whole line's first byte; the lines end at the next start - 1
        var start = 0
        while start < bytes.count, let nl = bytes[start...].firstIndex(of: 0x0A) {
            starts.append(start)
            start = nl + 1
        }
        starts.append(start)   // the end of the last whole line, + 1
        let count = starts.count - 1
        func line(_ i: Int) -> LedgerLine? {
            bytes[starts[i]..<(starts[i + 1] - 1)].withUnsafeBufferPointer { LedgerLine($0) }
        }
        var first = 0
        var last = count - 1
        if let since = options.since?.timeIntervalSince1970 {
            first = (0..<count).first { line($0).map { $0.at >= since } ?? false } ?? count
        }
        if let until = options.until?.timeIntervalSince1970 {
            last = (0..<count).last { line($0).map { $0.at <= until } ?? false } ?? -1
        }
        let range =
            "since=\(options.since.map { Time.formatMillis($0.timeIntervalSince1970) } ?? "-") until=\(options.until.map { Time.formatMillis($0.timeIntervalSince1970) } ?? "-")"
        guard first <= last, let head = line(first), let tail = line(last) else {
            throw AdCacheError.invalidRequest(
                count == 0 ? "the ledger \(ledger.path) holds no line yet" : "the ledger holds no line in that range")
        }
        let content = Array(bytes[starts[first]..<starts[last + 1]])
        let lastHash = try SHA256Hasher.hex(bytes: Array(bytes[starts[last]..<(starts[last + 1] - 1)]))
        let device = store.knownDeviceId(configuration.proofOfPlay) ?? "-"
        let comment =
            "adcache ledger lines=\(last - first + 1) seq=\(head.seq)-\(tail.seq) \(range) prev=\(head.prev) last=\(lastHash) device=\(device)"
        let signature = try key.signatureFile(of: content, trustedComment: comment)
        try Self.writeWhole(content, to: options.output)
        try Self.writeWhole(Array(signature.utf8), to: options.output + ".minisig")
        return LedgerExport(
            file: options.output, signatureFile: options.output + ".minisig", lines: last - first + 1,
            firstSeq: head.seq, lastSeq: tail.seq, keyId: key.id, trustedComment: comment)
    }

    /// Checks an export: its signature (`file.minisig`) by `publicKey` (a minisign public key
    /// file; nil: the device's `device.pub`), and its chain — every `seq` one more than the
    /// line before, every `prev` the SHA-256 of the line before, the first `prev` and the
    /// last line's hash those the signature names. Throws `exportInvalid` naming the first
    /// line that breaks it (a line changed, missing, or out of order).
    public func verifyExport(_ file: String, publicKey: String? = nil) throws -> LedgerExport {
        func bad(_ m: String) -> AdCacheError { .exportInvalid("\(file): \(m)") }
        func read(_ path: String, limit: Int64) throws -> [UInt8] {
            do {
                return try FileIO.read(path, limit: limit)
            } catch let e as AdCacheError {
                throw AdCacheError.invalidRequest(e.message)
            }
        }
        let keyPath = try publicKey ?? PathText.join(PathText.parent(try deviceKeyPath()), "device.pub")
        let key: MinisignKey
        do {
            key = try MinisignKey(String(decoding: try read(keyPath, limit: 64 << 10), as: UTF8.self))
        } catch let e as AdCacheError {
            throw AdCacheError.invalidRequest("\(keyPath): \(e.message)")
        }
        let bytes = try read(file, limit: .max)
        let sig: MinisignSignature
        do {
            sig = try MinisignSignature(try read(file + ".minisig", limit: 16384))
        } catch AdCacheError.feedInvalid(let m) {
            throw bad(m.message.replacing("feed signature: ", with: "signature: "))
        }
        guard sig.keyID == key.keyID else { throw bad("signed by key \(sig.keyIDText), not by key \(key.id)") }
        guard sig.prehashed else { throw bad("not signed over its BLAKE2b-512 (ED)") }
        let api = try SigningAPI.shared.get()
        guard
            try api.verifyEd25519(
                signature: sig.globalSignature, message: sig.signature + Array(sig.trustedComment.utf8),
                publicKey: key.publicKey)
        else { throw bad("the trusted comment does not verify with key \(key.id)") }
        var named: [String: String] = [:]
        for word in sig.trustedComment.split(separator: " ") {
            let parts = word.split(separator: "=", maxSplits: 1)
            if parts.count == 2, named[String(parts[0])] == nil { named[String(parts[0])] = String(parts[1]) }
        }
        guard sig.trustedComment.hasPrefix("adcache ledger "), let firstPrev = named["prev"],
            let lastHash = named["last"], let count = named["lines"].flatMap(Int.init)
        else { throw bad("the trusted comment is not an adcache ledger export's") }
        // The lines, forward: each whole, read, numbered one after the other.
        var lines: [(bytes: ArraySlice<UInt8>, line: LedgerLine)] = []
        var start = 0
        while start < bytes.count {
            let n = lines.count + 1
            guard let nl = bytes[start...].firstIndex(of: 0x0A) else { throw bad("line \(n): cut short (no newline)") }
            let slice = bytes[start..<nl]
            guard let line = slice.withUnsafeBufferPointer({ LedgerLine($0) }) else {
                throw bad("line \(n): not a ledger line (changed?)")
            }
            lines.append((slice, line))
            start = nl + 1
        }
        let seqs = Set(lines.map(\.line.seq))
        for n in lines.indices.dropFirst() where lines[n].line.seq != lines[n - 1].line.seq + 1 {
            let (seq, before) = (lines[n].line.seq, lines[n - 1].line.seq)
            let why =
                seq > before + 1 && !seqs.contains(before + 1)
                ? "\(seq - before - 1 == 1 ? "a line is" : "lines are") missing before it"
                : "lines out of order or repeated"
            throw bad("line \(n + 1): seq \(seq) follows seq \(before) (\(why))")
        }
        guard let first = lines.first, let last = lines.last else { throw bad("no line") }
        guard first.line.prev == firstPrev else {
            throw bad(
                "line 1: its prev is not the one the signature names (the export does not begin where it was signed)")
        }
        // Backwards from the hash the signature names: each line's prev vouches for the line
        // before it, so the first hash that does not match names the line that was changed.
        var expected = lastHash
        for i in stride(from: lines.count - 1, through: 0, by: -1) {
            guard try SHA256Hasher.hex(bytes: Array(lines[i].bytes)) == expected else {
                throw bad(
                    "line \(i + 1): changed (its SHA-256 is not "
                        + (i == lines.count - 1 ? "the last hash the signature names" : "line \(i + 2)'s prev") + ")")
            }
            expected = lines[i].line.prev
        }
        guard lines.count == count else {
            throw bad("\(lines.count) lines, the signature names \(count) (lines added or removed at the end?)")
        }
        guard
            try api.verifyEd25519(
                signature: sig.signature, message: try api.blake2b512(bytes), publicKey: key.publicKey)
        else { throw bad("the signature does not verify with key \(key.id) (the file was changed)") }
        return LedgerExport(
            file: file, signatureFile: file + ".minisig", lines: lines.count, firstSeq: first.line.seq,
            lastSeq: last.line.seq, keyId: key.id, trustedComment: sig.trustedComment)
    }

    /// Writes `bytes` to `path` whole (a temporary beside it, synced, renamed), mode 0644.
    static func writeWhole(_ bytes: [UInt8], to path: String) throws {
        let temporary = path + ".tmp"
        unlink(temporary)
        let fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0o644)
        guard fd >= 0 else { throw AdCacheError.cacheUnwritable("cannot write \(path): \(FileIO.errnoText())") }
        let failed = bytes.withUnsafeBytes { FileIO.writeAll(fd, $0) }
        guard failed == nil, fsync(fd) == 0 else {
            close(fd)
            unlink(temporary)
            throw FileIO.writeError("cannot write \(path)", failed ?? errno)
        }
        close(fd)
        guard rename(temporary, path) == 0 else {
            unlink(temporary)
            throw FileIO.writeError("cannot write \(path)")
        }
    }
}
