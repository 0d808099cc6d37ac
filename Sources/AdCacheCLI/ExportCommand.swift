import AdCacheKit

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// `adcache export` (SPEC §14): the ledger, signed by the device key, for an auditor.
enum ExportCommand: Command {
    static let output = Option.file(
        "output", "Write the ledger's lines to this file, and its minisign signature to FILE.minisig.")
    static let since = Option.time("since", "Export from the first line dated at or after this time.")
    static let until = Option.time("until", "Export to the last line dated at or before this time.")
    static let verify = Option.file(
        "verify", "Check an export: its signature (FILE.minisig) and its chain; name the first line that breaks it.")
    static let key = Option.file("key", "With --verify: the public key file to check with (default: device.pub).")
    static let publicKey = Flag("public-key", "Print the device's public key file (minisign's format).")

    static let name = "export"
    static let spec = CommandSpec(
        name: name,
        abstract: "Export the ledger of shows and events, signed by the device key, or check an export.",
        discussion:
            "The ledger (in ledger-dir) records every show and event as it leaves the journal, each line chained to the one before. 'adcache export --output FILE' writes the lines from --since to --until (default: all kept) and FILE.minisig, which 'minisign -Vm FILE -p device.pub' verifies; the key pair is made the first time. '--verify FILE' checks the signature and every seq and prev: exit 0, or 65 naming the first line that breaks the chain.",
        options: [output, since, until, verify, key, publicKey]
    )

    static func run(_ args: ParsedArguments, context: Context) throws -> ExitCode {
        try args.noPositionals()
        let console = context.console
        let cache = context.cache()
        let modes = [args.values[output.long] != nil, args.values[verify.long] != nil, args.has(publicKey)].filter {
            $0
        }.count
        guard modes == 1 else {
            throw args.usage(
                modes == 0
                    ? "'--output', '--verify' or '--public-key' is required"
                    : "'--output', '--verify' and '--public-key' cannot go together")
        }
        if args.has(publicKey) {
            console.io.stdout.write(try cache.devicePublicKey())
            return .success
        }
        if let file = try args.get(verify) {
            let checked = try cache.verifyExport(PathText.absolute(file), publicKey: try args.get(key))
            if !console.quiet {
                console.out(
                    "\(file): \(checked.lines) line\(checked.lines == 1 ? "" : "s") (seq \(checked.firstSeq) to \(checked.lastSeq)), chain and signature good (key \(checked.keyId))"
                )
                console.out("trusted comment: \(checked.trustedComment)")
            }
            return .success
        }
        if args.values[key.long] != nil { throw args.usage("'--key' goes with '--verify'") }
        let file = try args.get(output)!
        let exported = try cache.exportLedger(
            AdCache.ExportOptions(
                output: PathText.absolute(file), since: try args.get(since), until: try args.get(until)))
        if !console.quiet {
            console.out(
                "exported \(exported.lines) line\(exported.lines == 1 ? "" : "s") (seq \(exported.firstSeq) to \(exported.lastSeq)) to \(file), signed in \(file).minisig by key \(exported.keyId)"
            )
        }
        return .success
    }
}
