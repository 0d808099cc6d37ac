import Foundation
import TestSupport
import Testing

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
        "fetch", "next", "event", "report", "stats", "prune", "list", "why", "verify", "clear", "help", "completions",
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
}
