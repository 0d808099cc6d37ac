import AdCacheKit

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// One output stream of the command line: where its text goes and whether a person watches
/// it (a terminal gets colour and a progress bar; a file or pipe never gets control codes).
public struct CommandOutput: Sendable {
    public var write: @Sendable (String) -> Void
    public var isTerminal: Bool
    /// The systemd journal (`$JOURNAL_STREAM` names it): each line then starts with its
    /// priority, `<3>` an error, `<4>` a warning, `<6>` the rest (sd-daemon(3), SPEC §12).
    public var isJournal: Bool

    public init(isTerminal: Bool, isJournal: Bool = false, write: @escaping @Sendable (String) -> Void) {
        self.isTerminal = isTerminal
        self.isJournal = isJournal
        self.write = write
    }

    /// True when `fd` is the stream `$JOURNAL_STREAM` names (`DEVICE:INODE`, systemd.exec(5)).
    public static func isJournal(_ fd: Int32, journalStream: String?) -> Bool {
        guard let parts = journalStream?.split(separator: ":"), parts.count == 2, let device = UInt64(parts[0]),
            let inode = UInt64(parts[1])
        else { return false }
        var st = stat()
        guard fstat(fd, &st) == 0 else { return false }
        return UInt64(st.st_dev) == device && UInt64(st.st_ino) == inode
    }

    /// A file descriptor of this process (1 or 2).
    public static func descriptor(_ fd: Int32, isJournal: Bool = false) -> CommandOutput {
        CommandOutput(isTerminal: isatty(fd) == 1, isJournal: isJournal) { text in
            var bytes = Array(text.utf8)
            var offset = 0
            while offset < bytes.count {
                let n = bytes.withUnsafeMutableBytes { systemWrite(fd, $0.baseAddress! + offset, $0.count - offset) }
                if n < 0 { if errno == EINTR { continue }; return }
                offset += n
            }
        }
    }
}

#if canImport(Glibc)
    private let systemWrite = Glibc.write
#else
    private let systemWrite = Darwin.write
#endif

/// Standard output and standard error, as `CLI.run` sees them.
public struct CommandIO: Sendable {
    public var stdout: CommandOutput
    public var stderr: CommandOutput
    /// All of standard input (for `fetch -`).
    public var readStandardInput: @Sendable () -> [UInt8]

    public init(
        stdout: CommandOutput, stderr: CommandOutput, readStandardInput: @escaping @Sendable () -> [UInt8] = { [] }
    ) {
        self.stdout = stdout
        self.stderr = stderr
        self.readStandardInput = readStandardInput
    }

    /// The process's own file descriptors 0, 1 and 2.
    public static var standard: CommandIO {
        let journal = CommandOutput.isJournal(2, journalStream: getenv("JOURNAL_STREAM").map { String(cString: $0) })
        return CommandIO(stdout: .descriptor(1), stderr: .descriptor(2, isJournal: journal)) {
            var bytes: [UInt8] = []
            var buffer = [UInt8](repeating: 0, count: 65536)
            while true {
                let n = buffer.withUnsafeMutableBytes { read(0, $0.baseAddress, $0.count) }
                if n < 0 && errno == EINTR { continue }
                guard n > 0 else { break }
                bytes += buffer[0..<n]
            }
            return bytes
        }
    }
}

/// Where output goes: stdout for what was asked for, stderr for the rest.
struct Console {
    var quiet = false
    var verbose = false
    let io: CommandIO
    let environment: [String: String]

    var stderrIsTerminal: Bool { io.stderr.isTerminal }
    var stdoutIsTerminal: Bool { io.stdout.isTerminal }
    /// Colour only on a terminal and never with NO_COLOR set.
    var colorErrors: Bool {
        stderrIsTerminal && (environment["NO_COLOR"] ?? "").isEmpty && environment["TERM"] != "dumb"
    }
    var colorOutput: Bool {
        stdoutIsTerminal && (environment["NO_COLOR"] ?? "").isEmpty && environment["TERM"] != "dumb"
    }

    func out(_ line: String) {
        io.stdout.write(line + "\n")
    }

    /// Lines for standard error; under the journal each starts with `priority` (sd-daemon(3)).
    func err(_ text: String, priority: Int = 6) {
        guard io.stderr.isJournal else { return io.stderr.write(text) }
        var out = ""
        for line in text.split(separator: "\n", omittingEmptySubsequences: false).dropLast(text.hasSuffix("\n") ? 1 : 0)
        {
            out += "<\(priority)>" + line + "\n"
        }
        io.stderr.write(out)
    }

    func warning(_ message: String) {
        let label = colorErrors ? "\u{1B}[33mwarning:\u{1B}[0m" : "warning:"
        err("adcache: \(label) \(oneLine(message))\n", priority: 4)
    }

    func error(_ message: String, hint: String? = nil) {
        let label = colorErrors ? "\u{1B}[31merror:\u{1B}[0m" : "error:"
        var text = "adcache: \(label) \(oneLine(message))\n"
        if let hint { text += hint + "\n" }
        err(text, priority: 3)
    }

    func note(_ message: String) {
        if verbose { err("adcache: \(oneLine(message))\n") }
    }

    /// Messages are one line, whatever a server or a file put in them, and show no
    /// control characters.
    private func oneLine(_ s: String) -> String {
        Console.visible(String(s.map { $0.isNewline || $0 == "\t" ? " " : $0 }))
    }

    /// `s` with every control character (C0, DEL, C1) written as `\x1b`-style escapes:
    /// text from a feed or a server cannot move the cursor, retitle or rewrite the
    /// operator's terminal (SPEC §5). `--json` output keeps exact strings instead.
    static func visible(_ s: String) -> String {
        guard s.unicodeScalars.contains(where: isControl) else { return s }
        var out = ""
        for u in s.unicodeScalars {
            if isControl(u) {
                out += u.value < 0x100 ? "\\x" + (u.value < 0x10 ? "0" : "") + String(u.value, radix: 16) : "?"
            } else {
                out.unicodeScalars.append(u)
            }
        }
        return out
    }

    private static func isControl(_ u: Unicode.Scalar) -> Bool {
        u.value < 0x20 || (0x7F...0x9F).contains(u.value)
    }
}
