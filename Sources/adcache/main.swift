import AdCacheCLI
import Foundation

exit(CLI.run(Array(CommandLine.arguments.dropFirst()), environment: ProcessInfo.processInfo.environment, io: .standard))
