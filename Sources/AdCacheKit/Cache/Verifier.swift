#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// `adcache verify` (SPEC §4): what `verify` found.
public struct VerifyReport: Sendable {
    /// Files that passed.
    public var verified = 0
    /// Ads whose file had another size or SHA-256 (moved aside as `.bad-<time>`).
    public var damaged: [String] = []
    /// Ads whose file is not there.
    public var missing: [String] = []
    /// One line per problem, as a person reads it.
    public var problems: [String] = []
    /// Stopped early by a cancellation (the async `verify`): the files checked before it are
    /// reported (and set aside when damaged), the rest were not checked.
    public var cancelled = false

    /// Nothing damaged or missing.
    public var isHealthy: Bool { damaged.isEmpty && missing.isEmpty }
}

extension CacheStore {
    /// A damaged file's name once moved aside: `<name>.bad-<unix time>`.
    static func isSetAside(_ name: String) -> Bool {
        guard let r = name.firstRange(of: ".bad-") else { return false }
        return AssetName.isValid(String(name[..<r.lowerBound])) && !name[r.upperBound...].isEmpty
            && name[r.upperBound...].allSatisfy(\.isNumber)
    }

    /// Checks every file the index records against its size and SHA-256 (streamed), with no
    /// lock held; then, under the index lock, the records of the files that failed lose them
    /// (their ads are `missing` until a fetch downloads them again) and a damaged file is
    /// moved aside for inspection (`prune` removes it).
    /// `isCancelled`: asked before each file; once true, what was found so far is committed
    /// and the report returned with `cancelled` set.
    func verify(warn: WarningSink, isCancelled: (() -> Bool)? = nil) throws -> VerifyReport {
        var report = VerifyReport()
        guard exists else { return report }
        let index = try load(warn: warn)
        var verdicts: [String: Bool] = [:]   // file name → passed; each file hashed once
        var failed: [String: String] = [:]   // file name → why
        for r in index.ads {
            if isCancelled?() == true {
                report.cancelled = true
                break
            }
            guard let name = r.file, AssetName.isValid(name) else {
                // A file an earlier verify (or a lost file) took from the record: still missing
                // on every run until a fetch downloads it again (SPEC §4).
                // (Not one used up or expired: prune took its file on purpose, and no fetch
                // downloads it again.)
                if r.file == nil, ![.pending, .failed, .withdrawn].contains(r.state),
                    r.finished(at: Date().timeIntervalSince1970) == nil
                {
                    report.missing.append(r.id)
                    report.problems.append("ad '\(r.id)': its file is missing (the next fetch downloads it again)")
                }
                continue
            }
            if verdicts[name] == nil {
                let file = asset(name)
                if let size = file.size {
                    if let bytes = r.bytes, size != bytes {
                        failed[name] = "\(size) bytes, the index says \(bytes)"
                    } else if let digest = r.fileSha256, SHA256Hasher.hex(of: file) != digest {
                        failed[name] = "its SHA-256 is not the one recorded"
                    }
                } else {
                    failed[name] = "missing"
                }
                verdicts[name] = failed[name] == nil
                if failed[name] == nil { report.verified += 1 }
            }
            if let why = failed[name] {
                if why == "missing" {
                    report.missing.append(r.id)
                    report.problems.append("ad '\(r.id)': its file \(name) is missing")
                } else {
                    report.damaged.append(r.id)
                    report.problems.append("ad '\(r.id)': its file \(name) is damaged: \(why)")
                }
            }
        }
        guard !failed.isEmpty else { return report }
        let stamp = Int(Date().timeIntervalSince1970)
        try update(warn: warn) { index in
            for i in index.ads.indices {
                guard let name = index.ads[i].file, failed[name] != nil else { continue }
                index.ads[i].forgetFile()
            }
        }
        for (name, why) in failed where why != "missing" {
            _ = asset(name).rename(to: asset("\(name).bad-\(stamp)"))
        }
        dir.sync(.assets)
        return report
    }
}
