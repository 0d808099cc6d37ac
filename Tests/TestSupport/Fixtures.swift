import AdCacheCLI
import AdCacheKit
import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A fresh temporary directory; `remove()` it in a `defer`.
public struct TempDir: Sendable {
    public let path: String

    /// A directory under `base` (the system's temporary directory by default; `/dev/shm` makes
    /// fsync free for tests that write thousands of indexes).
    public init(under base: String = NSTemporaryDirectory()) {
        let base = base.hasSuffix("/") ? base : base + "/"
        var template = Array((base + "adcache-test-XXXXXX").utf8CString)
        let made = template.withUnsafeMutableBufferPointer { mkdtemp($0.baseAddress!) }
        path = made.map { String(cString: $0) } ?? NSTemporaryDirectory() + "adcache-test-\(UUID().uuidString)"
        try? FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    }

    public func remove() { try? FileManager.default.removeItem(atPath: path) }

    public func file(_ name: String) -> String { path + "/" + name }

    @discardableResult
    public func write(_ name: String, _ text: String) -> String {
        write(name, Array(text.utf8))
    }

    @discardableResult
    public func write(_ name: String, _ bytes: [UInt8]) -> String {
        let p = file(name)
        try? FileManager.default.createDirectory(
            atPath: (p as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        FileManager.default.createFile(atPath: p, contents: Data(bytes))
        return p
    }
}

/// Small valid media files (the first bytes are what adcache checks) and their digests.
public enum Media {
    public static func jpeg(_ size: Int = 2048, seed: UInt8 = 1) -> [UInt8] {
        [0xFF, 0xD8, 0xFF, 0xE0] + filler(size - 6, seed) + [0xFF, 0xD9]
    }

    public static func png(_ size: Int = 2048, seed: UInt8 = 2) -> [UInt8] {
        [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A] + filler(size - 8, seed)
    }

    public static func mp4(_ size: Int = 4096, seed: UInt8 = 3) -> [UInt8] {
        [0, 0, 0, 0x18] + Array("ftypisom".utf8) + filler(size - 12, seed)
    }

    public static let html = Array("<!DOCTYPE html><html><body>Welcome to the Wi-Fi portal</body></html>".utf8)

    static func filler(_ n: Int, _ seed: UInt8) -> [UInt8] {
        var x = UInt32(seed) &* 2654435761 | 1
        return (0..<max(0, n)).map { _ in
            x ^= x << 13; x ^= x >> 17; x ^= x << 5
            return UInt8(truncatingIfNeeded: x)
        }
    }

    public static func sha256(_ bytes: [UInt8]) -> String {
        (try? AdCache.sha256(bytes)) ?? "libcrypto missing"
    }
}

/// Runs the built `adcache` binary as a person would, capturing stdout, stderr and the exit
/// code separately.
public struct Run: Sendable {
    public var status: Int32
    public var stdout: String
    public var stderr: String

    public var lines: [String] { stdout.split(separator: "\n").map(String.init) }
}

public enum Adcache {
    /// The binary beside the test bundle (`.build/<config>/adcache`).
    public static var binary: String {
        var candidates: [String] = []
        let arg0 = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
        candidates.append(arg0.appendingPathComponent("adcache").path)
        let bundle = Bundle.main.bundleURL
        candidates.append(bundle.deletingLastPathComponent().appendingPathComponent("adcache").path)
        candidates.append(bundle.appendingPathComponent("adcache").path)
        for c in Bundle.allBundles.map({
            $0.bundleURL.deletingLastPathComponent().appendingPathComponent("adcache").path
        }) {
            candidates.append(c)
        }
        candidates.append(FileManager.default.currentDirectoryPath + "/.build/debug/adcache")
        return candidates.first { FileManager.default.isExecutableFile(atPath: $0) } ?? candidates[0]
    }

    /// Whether this test run may act as other users: root, with setpriv (CI runs as root).
    public static let canSwitchUsers =
        getuid() == 0 && FileManager.default.isExecutableFile(atPath: "/usr/bin/setpriv")

    /// A copy of the binary that every user can run: the build directory may lie where other
    /// users cannot enter (a clone under root's 0700 home, a `mktemp -d`). Nil when it cannot
    /// be made.
    public static let binaryForEveryone: String? = {
        let dir = "/tmp/adcache-tests-\(getpid())"
        mkdir(dir, 0o755)
        chmod(dir, 0o755)
        let copy = dir + "/adcache"
        try? FileManager.default.removeItem(atPath: copy)
        guard (try? FileManager.default.copyItem(atPath: binary, toPath: copy)) != nil, chmod(copy, 0o755) == 0
        else { return nil }
        return copy
    }()

    /// Runs the binary as `uid` (primary group the first of `groups`, supplementary `groups`),
    /// umask 022, through setpriv.
    public static func runAs(_ uid: uid_t, groups: [gid_t], _ args: [String]) -> Run {
        guard let binary = binaryForEveryone else {
            return Run(status: -1, stdout: "", stderr: "cannot copy the binary where other users can run it")
        }
        return runProgramAs(uid, groups: groups, "/bin/sh", ["-c", "umask 022; exec \"$0\" \"$@\"", binary] + args)
    }

    /// Runs any program as `uid` (as `runAs`).
    public static func runProgramAs(_ uid: uid_t, groups: [gid_t], _ program: String, _ args: [String]) -> Run {
        let ids = [
            "--reuid=\(uid)", "--regid=\(groups.first ?? uid)",
            groups.isEmpty ? "--clear-groups" : "--groups=\(groups.map(String.init).joined(separator: ","))",
        ]
        return runProgram("/usr/bin/setpriv", ids + [program] + args)
    }

    /// Runs `adcache args…` with `environment` added to a minimal one (HOME points into
    /// a scratch directory so that no real cache is touched).
    public static func run(_ args: [String], environment: [String: String] = [:], cwd: String? = nil) -> Run {
        runProgram(binary, args, environment: environment, cwd: cwd)
    }
}

/// Runs any program with a minimal environment plus `environment`, capturing stdout, stderr
/// and the exit code separately (through files, so that nothing blocks on a full pipe).
public func runProgram(_ path: String, _ args: [String], environment: [String: String] = [:], cwd: String? = nil) -> Run
{
    let scratch = TempDir()
    defer { scratch.remove() }
    let p = Process()
    p.executableURL = URL(fileURLWithPath: path)
    p.arguments = args
    var env = ["PATH": "/usr/bin:/bin", "HOME": scratch.path, "TZ": "UTC", "TERM": "xterm"]
    for (k, v) in environment { env[k] = v }
    p.environment = env
    if let cwd { p.currentDirectoryURL = URL(fileURLWithPath: cwd) }
    let outPath = scratch.file("stdout"), errPath = scratch.file("stderr")
    FileManager.default.createFile(atPath: outPath, contents: nil)
    FileManager.default.createFile(atPath: errPath, contents: nil)
    p.standardOutput = FileHandle(forWritingAtPath: outPath)
    p.standardError = FileHandle(forWritingAtPath: errPath)
    p.standardInput = FileHandle.nullDevice
    do { try p.run() } catch { return Run(status: -1, stdout: "", stderr: "cannot run \(path): \(error)") }
    p.waitUntilExit()
    let out = (try? String(contentsOfFile: outPath, encoding: .utf8)) ?? ""
    let err = (try? String(contentsOfFile: errPath, encoding: .utf8)) ?? ""
    return Run(status: p.terminationStatus, stdout: out, stderr: err)
}

extension Adcache {
    /// Runs the command line in this process (`CLI.run`), as `run` runs the binary: the same
    /// minimal environment, stdout and stderr captured separately, neither a terminal unless
    /// `terminal` says so. Fast: no process, no binary needed.
    public static func call(
        _ args: [String], environment: [String: String] = [:], terminal: Bool = false, stdin: [UInt8] = []
    ) -> Run {
        let scratch = TempDir()
        defer { scratch.remove() }
        var env = ["PATH": "/usr/bin:/bin", "HOME": scratch.path, "TZ": "UTC", "TERM": "xterm"]
        for (k, v) in environment { env[k] = v }
        let out = Captured(), err = Captured()
        let io = CommandIO(
            stdout: CommandOutput(isTerminal: terminal) { out.append($0) },
            stderr: CommandOutput(isTerminal: terminal) { err.append($0) }, readStandardInput: { stdin })
        let status = CLI.run(args, environment: env, io: io)
        return Run(status: status, stdout: out.text, stderr: err.text)
    }
}

/// Text written by a command, from whatever thread writes it.
final class Captured: @unchecked Sendable {
    private var parts: [String] = []
    private let lock = NSLock()

    func append(_ s: String) { lock.lock(); parts.append(s); lock.unlock() }
    var text: String { lock.lock(); defer { lock.unlock() }; return parts.joined() }
}

/// The tests' own look at files by path (the library reaches the cache only through its
/// `CacheDirectory` handle, SPEC §6).
public enum Disk {
    public static func exists(_ path: String) -> Bool {
        var st = stat()
        return lstat(path, &st) == 0
    }

    public static func isLink(_ path: String) -> Bool {
        var st = stat()
        return lstat(path, &st) == 0 && (st.st_mode & S_IFMT) == S_IFLNK
    }

    /// The names in a directory (not . or ..); empty when it does not exist.
    public static func list(_ dir: String) -> [String] {
        (try? FileManager.default.contentsOfDirectory(atPath: dir)) ?? []
    }

    /// The size of a regular file, or nil.
    public static func size(_ path: String) -> Int64? {
        var st = stat()
        guard stat(path, &st) == 0, (st.st_mode & S_IFMT) == S_IFREG else { return nil }
        return Int64(st.st_size)
    }

    /// A regular file's size and modification time (nanoseconds), or nil.
    public static func stamp(_ path: String) -> (size: Int64, mtime: Int64)? {
        var st = stat()
        guard stat(path, &st) == 0, (st.st_mode & S_IFMT) == S_IFREG else { return nil }
        let (ns, overflow) = Int64(st.st_mtim.tv_sec).multipliedReportingOverflow(by: 1_000_000_000)
        let mtime = overflow ? (st.st_mtim.tv_sec < 0 ? Int64.min : Int64.max) : ns &+ Int64(st.st_mtim.tv_nsec)
        return (Int64(st.st_size), mtime)
    }

    @discardableResult
    public static func remove(_ path: String) -> Bool {
        unlink(path) == 0
    }
}

/// A TCP port on 127.0.0.1 that was free a moment ago (for a server a test starts).
public func freeLoopbackPort() -> Int {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    defer { close(fd) }
    var addr = sockaddr_in()
    addr.sin_family = sa_family_t(AF_INET)
    addr.sin_addr.s_addr = inet_addr("127.0.0.1")
    var len = socklen_t(MemoryLayout<sockaddr_in>.size)
    _ = withUnsafePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, len) } }
    _ = withUnsafeMutablePointer(to: &addr) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &len) }
    }
    return Int(UInt16(bigEndian: addr.sin_port))
}

/// An HTTP-date (RFC 9110), as a server's `Date` or `Retry-After` says it.
public func httpDate(_ t: Double) -> String {
    let f = DateFormatter()
    f.locale = Locale(identifier: "en_US_POSIX")
    f.timeZone = TimeZone(identifier: "UTC")
    f.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
    return f.string(from: Date(timeIntervalSince1970: t))
}

/// A value a server's handler reads while the test changes it, or threads add to.
public final class Locked<Value>: @unchecked Sendable {
    private let lock = NSLock()
    private var stored: Value

    public init(_ value: Value) { stored = value }

    public var value: Value {
        get { lock.lock(); defer { lock.unlock() }; return stored }
        set { lock.lock(); stored = newValue; lock.unlock() }
    }

    /// A read-modify-write under the lock (`value.append` through the property would race).
    public func update(_ body: (inout Value) -> Void) { lock.lock(); body(&stored); lock.unlock() }
}
