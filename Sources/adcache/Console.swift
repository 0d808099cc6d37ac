#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import AdCacheKit

/// Where output goes: stdout for what was asked for, stderr for the rest.
struct Console {
    var quiet = false
    var verbose = false
    let environment: [String: String]

    var stderrIsTerminal: Bool { isatty(2) == 1 }
    var stdoutIsTerminal: Bool { isatty(1) == 1 }
    /// Colour only on a terminal and never with NO_COLOR set.
    var colorErrors: Bool { stderrIsTerminal && (environment["NO_COLOR"] ?? "").isEmpty && environment["TERM"] != "dumb" }
    var colorOutput: Bool { stdoutIsTerminal && (environment["NO_COLOR"] ?? "").isEmpty && environment["TERM"] != "dumb" }

    func out(_ line: String) {
        write(1, line + "\n")
    }

    func err(_ text: String) {
        write(2, text)
    }

    func warning(_ message: String) {
        let label = colorErrors ? "\u{1B}[33mwarning:\u{1B}[0m" : "warning:"
        write(2, "adcache: \(label) \(oneLine(message))\n")
    }

    func error(_ e: AdCacheError) {
        let label = colorErrors ? "\u{1B}[31merror:\u{1B}[0m" : "error:"
        var text = "adcache: \(label) \(oneLine(e.message))\n"
        if let hint = e.hint { text += hint + "\n" }
        write(2, text)
    }

    func note(_ message: String) {
        if verbose { write(2, "adcache: \(message)\n") }
    }

    /// Messages are one line, whatever a server or a file put in them.
    private func oneLine(_ s: String) -> String {
        String(s.map { $0.isNewline || $0 == "\t" ? " " : $0 })
    }

    private func write(_ fd: Int32, _ text: String) {
        var bytes = Array(text.utf8)
        var offset = 0
        while offset < bytes.count {
            let n = bytes.withUnsafeMutableBytes { Glibc.write(fd, $0.baseAddress! + offset, $0.count - offset) }
            if n < 0 { if errno == EINTR { continue }; return }
            offset += n
        }
    }
}
