import AdCacheCLI

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

exit(CLI.run(Array(CommandLine.arguments.dropFirst()), environment: CLI.processEnvironment(), io: .standard))
