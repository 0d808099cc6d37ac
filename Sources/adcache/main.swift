import AdCacheCLI
import CArgs

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

/// The arguments as the C runtime gave them (no /proc needed: a chroot during an image build
/// has none, and Swift's CommandLine reads /proc/self/cmdline there); Swift's if not had.
let arguments: [String] =
    adc_argc() > 0 ? (1..<adc_argc()).map { String(cString: adc_argv($0)) } : Array(CommandLine.arguments.dropFirst())
exit(CLI.run(arguments, environment: CLI.processEnvironment(), io: .standard))
