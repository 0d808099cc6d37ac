import AdCacheCLI
import Foundation
import TestSupport
import Testing

/// SPEC §12 v4 *The journal's priorities*: when standard error is the systemd journal
/// (`$JOURNAL_STREAM` names its device and inode), an error line (and its hint) starts with
/// `<3>`, a warning with `<4>`, any other line with `<6>`; elsewhere nothing changes.
@Suite struct JournalPriorityTests {
    /// The built binary's standard error into a file, `JOURNAL_STREAM` naming that file (or
    /// not); what it wrote.
    static func stderr(_ args: [String], journal: Bool) throws -> String {
        let dir = TempDir(); defer { dir.remove() }
        let path = dir.write("stderr", "")
        let handle = try #require(FileHandle(forWritingAtPath: path))
        var st = stat()
        #expect(fstat(handle.fileDescriptor, &st) == 0)
        let p = Process()
        p.executableURL = URL(fileURLWithPath: Adcache.binary)
        p.arguments = ["--cache-dir", dir.path + "/cache", "--config", "/dev/null"] + args
        var env = ["PATH": "/usr/bin:/bin", "HOME": dir.path]
        if journal { env["JOURNAL_STREAM"] = "\(st.st_dev):\(st.st_ino)" }
        p.environment = env
        p.standardError = handle
        p.standardOutput = FileHandle.nullDevice
        try p.run()
        p.waitUntilExit()
        try handle.close()
        return try String(contentsOfFile: path, encoding: .utf8)
    }

    @Test func everyLineCarriesItsPriorityUnderTheJournal() throws {
        let error = try Self.stderr(["fetch", "--parallel", "x"], journal: true)
        let lines = error.split(separator: "\n")
        #expect(lines.count == 2 && lines.allSatisfy { $0.hasPrefix("<3>") }, "an error and its hint: \(error)")
        #expect(lines.first?.hasPrefix("<3>adcache: error: ") == true, "\(error)")
        let warning = try Self.stderr(["next", "--fallback", "/nonexistent/splash.png"], journal: true)
        #expect(warning.hasPrefix("<4>adcache: warning: the fallback "), "\(warning)")
        let verbose = try Self.stderr(["-v", "fetch", "/nonexistent/feed.json"], journal: true)
        #expect(
            verbose.split(separator: "\n").allSatisfy {
                $0.hasPrefix("<3>") || $0.hasPrefix("<4>") || $0.hasPrefix("<6>")
            },
            "\(verbose)")
        // Not the journal (JOURNAL_STREAM absent, or naming another file): unchanged.
        let plain = try Self.stderr(["fetch", "--parallel", "x"], journal: false)
        #expect(plain.hasPrefix("adcache: error: "), "\(plain)")
        #expect(!CommandOutput.isJournal(2, journalStream: "1:2"), "another stream")
    }
}
