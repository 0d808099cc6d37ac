import Foundation
import TestSupport
import Testing

@testable import AdCacheCLI

@Suite struct ManPageTests {
    let manPath = packageRoot + "/man/adcache.1"

    @Test func lintsClean() throws {
        let mandoc = ["/usr/bin/mandoc", "/usr/local/bin/mandoc"].first {
            FileManager.default.isExecutableFile(atPath: $0)
        }
        let path = try #require(mandoc, "mandoc is not installed: run 'make test', which installs it")
        let p = Process()
        p.executableURL = URL(fileURLWithPath: path)
        p.arguments = ["-T", "lint", "-W", "warning", manPath]
        let pipe = Pipe()
        p.standardOutput = pipe
        p.standardError = pipe
        try p.run()
        let out = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        p.waitUntilExit()
        #expect(p.terminationStatus == 0, "\(out)")
        #expect(out.isEmpty, "\(out)")
    }

    @Test(arguments: [
        "fetch", "next", "event", "report", "stats", "prune", "list", "why", "verify", "clear", "export", "help",
        "completions",
    ])
    func documentsEveryOptionOfTheCommand(command: String) throws {
        let man = try String(contentsOfFile: manPath, encoding: .utf8)
        #expect(man.contains(".Ss \(command)"), "no section for \(command)")
        let help = Adcache.call([command, "--help"]).stdout
        let options = help.split(separator: "\n").compactMap { line -> String? in
            let words = line.split(separator: " ")
            return words.first { $0.hasPrefix("--") }.map {
                String($0.dropFirst(2)).replacingOccurrences(of: ",", with: "")
            }
        }
        #expect(!options.isEmpty)
        for option in options {
            #expect(man.contains("Fl -\(option)"), "man page lacks --\(option) of \(command)")
        }
    }

    @Test func documentsEveryExitCode() throws {
        let man = try String(contentsOfFile: manPath, encoding: .utf8)
        for code in [0, 1, 64, 65, 69, 70, 73, 74, 75] {
            #expect(man.contains(".It \(code)\n"), "exit status \(code)")
        }
    }

    /// A launch passes the CLI only the variables `CLI.environmentNames` lists (read with
    /// getenv): every variable the sources read must be listed there, or it would silently
    /// never be set, and each is in the manual's ENVIRONMENT.
    @Test func documentsEveryEnvironmentVariableTheCommandLineReads() throws {
        let man = try String(contentsOfFile: manPath, encoding: .utf8)
        let section = try #require(
            man.components(separatedBy: ".Sh ENVIRONMENT\n").last?.components(separatedBy: ".Sh ").first)
        for name in CLI.environmentNames {
            #expect(section.contains(".It Ev \(name)\n"), "\(name) is not in ENVIRONMENT")
        }
        let sources = try FileManager.default.subpathsOfDirectory(atPath: packageRoot + "/Sources").filter {
            $0.hasSuffix(".swift")
        }
        var read = Set<String>()
        for file in sources {
            let text = try String(contentsOfFile: packageRoot + "/Sources/" + file, encoding: .utf8)
            for part in text.components(separatedBy: "environment[\"").dropFirst() {
                read.insert(String(part.prefix { $0 != "\"" }))
            }
        }
        #expect(read.count >= 5, "\(read)")
        #expect(
            read.subtracting(CLI.environmentNames).isEmpty,
            "read but not passed: \(read.subtracting(CLI.environmentNames))")
    }
}
