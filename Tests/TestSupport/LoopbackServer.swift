import AdCacheKit
import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A small HTTP/1.1 server on 127.0.0.1 for the tests: it binds port 0, reads the port back
/// with `getsockname`, logs every request, and answers through a handler that can produce
/// every fault the spec names (status codes, redirects, ETag/304, Range/206, delays,
/// truncated bodies, slow drips, dropped connections).
public final class LoopbackServer: @unchecked Sendable {
    public struct Request: Sendable {
        public var method: String
        public var path: String
        public var headers: [String: String]
        /// The request's body (a POST's), as Content-Length announced it.
        public var body: [UInt8] = []
        /// When it arrived (seconds on the monotonic clock).
        public var receivedAt: Double = {
            var ts = timespec()
            clock_gettime(CLOCK_MONOTONIC, &ts)
            return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
        }()

        public func header(_ name: String) -> String? { headers[name.lowercased()] }
    }

    public struct Response: Sendable {
        public var status: Int
        public var headers: [(String, String)] = []
        public var body: [UInt8] = []
        /// Seconds to wait before answering.
        public var delay: Double = 0
        /// Send only this many body bytes (the announced length stays), then close.
        public var truncateAfter: Int?
        /// Send the body this many bytes at a time, pausing `dripPause` between.
        public var dripChunk: Int?
        public var dripPause: Double = 0
        /// Close the connection without answering.
        public var dropConnection = false
        /// Omit Content-Length (close-delimited body).
        public var noContentLength = false

        public init(status: Int, headers: [(String, String)] = [], body: [UInt8] = []) {
            self.status = status
            self.headers = headers
            self.body = body
        }

        public static func text(_ status: Int, _ text: String, contentType: String = "text/plain") -> Response {
            Response(status: status, headers: [("Content-Type", contentType)], body: Array(text.utf8))
        }

        public static func redirect(_ location: String, status: Int = 302) -> Response {
            Response(status: status, headers: [("Location", location)])
        }

        /// Serves `body` as a static file server would: ETag and Last-Modified, 304 to a
        /// matching conditional request, 206 to a Range whose If-Range matches.
        public static func file(
            _ body: [UInt8], for request: Request, etag: String? = nil,
            lastModified: String? = "Mon, 02 Nov 2026 10:00:00 GMT",
            contentType: String = "application/octet-stream"
        ) -> Response {
            var headers: [(String, String)] = [("Content-Type", contentType), ("Accept-Ranges", "bytes")]
            if let etag { headers.append(("ETag", etag)) }
            if let lastModified { headers.append(("Last-Modified", lastModified)) }
            if let inm = request.header("If-None-Match"), let etag, inm == etag {
                return Response(status: 304, headers: headers)
            }
            if request.header("If-None-Match") == nil, let ims = request.header("If-Modified-Since"),
                ims == lastModified
            {
                return Response(status: 304, headers: headers)
            }
            if let range = request.header("Range"), range.hasPrefix("bytes="), range.hasSuffix("-"),
                let start = Int(range.dropFirst(6).dropLast())
            {
                let ifRange = request.header("If-Range")
                let matches = ifRange == nil || ifRange == etag || ifRange == lastModified
                if matches {
                    guard start < body.count else {
                        return Response(status: 416, headers: [("Content-Range", "bytes */\(body.count)")])
                    }
                    headers.append(("Content-Range", "bytes \(start)-\(body.count - 1)/\(body.count)"))
                    return Response(status: 206, headers: headers, body: Array(body[start...]))
                }
            }
            return Response(status: 200, headers: headers, body: body)
        }

        /// `file`, sent 100,000 bytes at a time with half a second between them: a slow
        /// link, for deadlines and resumed downloads.
        public static func slowFile(_ body: [UInt8], for request: Request, etag: String) -> Response {
            var response = file(body, for: request, etag: etag)
            response.dripChunk = 100_000
            response.dripPause = 0.5
            return response
        }
    }

    public let port: Int
    private let listener: Int32
    private let lock = NSLock()
    private var requests: [Request] = []
    private var stopped = false
    private let handler: @Sendable (Request) -> Response

    /// Listens on `port` (0: any free port, read back).
    public init(port wanted: Int = 0, handler: @escaping @Sendable (Request) -> Response) throws {
        self.handler = handler
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw POSIXError(.EIO) }
        var yes: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, socklen_t(MemoryLayout<Int32>.size))
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        addr.sin_port = UInt16(wanted).bigEndian
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, len) }
        }
        guard bound == 0, listen(fd, 128) == 0 else { close(fd); throw POSIXError(.EADDRINUSE) }
        _ = withUnsafeMutablePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &len) }
        }
        port = Int(UInt16(bigEndian: addr.sin_port))
        listener = fd
        let thread = Thread { [self] in acceptLoop() }
        thread.start()
    }

    deinit { stop() }

    public var baseURL: String { "http://127.0.0.1:\(port)" }
    public func url(_ path: String) -> String { baseURL + path }

    /// Every request so far, in arrival order.
    public var log: [Request] {
        lock.lock(); defer { lock.unlock() }
        return requests
    }

    public func requests(to path: String) -> [Request] { log.filter { $0.path == path } }

    public func stop() {
        lock.lock()
        let wasStopped = stopped
        stopped = true
        lock.unlock()
        guard !wasStopped else { return }
        shutdown(listener, Int32(SHUT_RDWR))
        close(listener)
    }

    private func acceptLoop() {
        while true {
            let client = accept(listener, nil, nil)
            if client < 0 {
                if errno == EINTR { continue }
                return
            }
            var one: Int32 = 1
            setsockopt(client, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
            let t = Thread { [self] in serve(client) }
            t.start()
        }
    }

    private func serve(_ fd: Int32) {
        defer { close(fd) }
        var data = [UInt8]()
        var buffer = [UInt8](repeating: 0, count: 4096)
        while !data.containsHeaderEnd {
            let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n <= 0 { return }
            data.append(contentsOf: buffer[0..<n])
            if data.count > 1 << 20 { return }
        }
        let head = String(decoding: data, as: UTF8.self).components(separatedBy: "\r\n\r\n")[0]
        var lines = head.components(separatedBy: "\r\n")
        let parts = lines.removeFirst().split(separator: " ")
        guard parts.count >= 2 else { return }
        var headers: [String: String] = [:]
        for line in lines {
            guard let colon = line.firstIndex(of: ":") else { continue }
            headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(
                in: .whitespaces)
        }
        var request = Request(method: String(parts[0]), path: String(parts[1]), headers: headers)
        if let length = headers["content-length"].flatMap(Int.init), length > 0, length < 1 << 26 {
            let headEnd = (data.firstRange(of: Array("\r\n\r\n".utf8))?.upperBound) ?? data.count
            var body = Array(data[headEnd...])
            while body.count < length {
                let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
                if n <= 0 { break }
                body.append(contentsOf: buffer[0..<n])
            }
            request.body = Array(body.prefix(length))
        }
        lock.lock()
        let isStopped = stopped
        if !isStopped { requests.append(request) }
        lock.unlock()
        if isStopped { return }   // a connection that raced with stop(): the test is over

        let response = handler(request)
        if response.delay > 0 { usleep(useconds_t(response.delay * 1_000_000)) }
        if response.dropConnection { return }
        var text = "HTTP/1.1 \(response.status) \(reason(response.status))\r\nConnection: close\r\n"
        for (k, v) in response.headers { text += "\(k): \(v)\r\n" }
        let hasBody = request.method != "HEAD" && response.status != 304 && response.status != 204
        if !response.noContentLength && response.status != 304 {
            text += "Content-Length: \(response.body.count)\r\n"
        }
        text += "\r\n"
        guard sendAll(fd, Array(text.utf8)) else { return }
        guard hasBody else { return }
        var body = response.body
        if let cut = response.truncateAfter { body = Array(body.prefix(cut)) }
        if let chunk = response.dripChunk {
            var offset = 0
            while offset < body.count {
                let end = min(body.count, offset + chunk)
                guard sendAll(fd, Array(body[offset..<end])) else { return }
                offset = end
                if response.dripPause > 0 { usleep(useconds_t(response.dripPause * 1_000_000)) }
            }
        } else {
            _ = sendAll(fd, body)
        }
    }

    private func sendAll(_ fd: Int32, _ bytes: [UInt8]) -> Bool {
        var offset = 0
        while offset < bytes.count {
            let n = bytes.withUnsafeBytes { send(fd, $0.baseAddress! + offset, $0.count - offset, Int32(MSG_NOSIGNAL)) }
            if n <= 0 { return false }
            offset += n
        }
        return true
    }

    private func reason(_ status: Int) -> String {
        switch status {
        case 200: return "OK"
        case 206: return "Partial Content"
        case 301: return "Moved Permanently"
        case 302: return "Found"
        case 304: return "Not Modified"
        case 404: return "Not Found"
        case 416: return "Range Not Satisfiable"
        case 429: return "Too Many Requests"
        case 500: return "Internal Server Error"
        case 503: return "Service Unavailable"
        default: return "Status"
        }
    }
}

private extension Array where Element == UInt8 {
    var containsHeaderEnd: Bool {
        guard count >= 4 else { return false }
        for i in 0...(count - 4) where self[i] == 13 && self[i + 1] == 10 && self[i + 2] == 13 && self[i + 3] == 10 {
            return true
        }
        return false
    }
}
