import Foundation
import TestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// SPEC §4, §5, §8 (v3): a TLS failure is transient. A tracker on https whose certificate
/// fails verification stays queued, an https asset with the same problem is exit 75 with no
/// back-off, and both go through as soon as the server presents a good certificate.
@Suite(.serialized) struct TLSFailureTests {
    static let tools =
        FileManager.default.isExecutableFile(atPath: "/usr/bin/openssl")
        && FileManager.default.isExecutableFile(atPath: "/usr/bin/python3")

    /// A CA of the test's own, a certificate for 127.0.0.1 it signed, and one it did not.
    struct Certificates {
        let dir: TempDir
        var ca: String { dir.file("ca.pem") }

        init() throws {
            dir = TempDir()
            _ = dir.write("san.ext", "subjectAltName=IP:127.0.0.1\n")
            let steps: [[String]] = [
                [
                    "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days",
                    "2",
                    "-subj", "/CN=adcache test CA",
                ],
                [
                    "req", "-newkey", "rsa:2048", "-nodes", "-keyout", "good.key", "-out", "good.csr", "-subj",
                    "/CN=127.0.0.1",
                ],
                [
                    "x509", "-req", "-in", "good.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-out",
                    "good.pem", "-days", "2", "-extfile", "san.ext",
                ],
                [
                    "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "bad.key", "-out", "bad.pem", "-days",
                    "2",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                ],
            ]
            for step in steps {
                let r = runProgram("/usr/bin/openssl", step, cwd: dir.path)
                try #require(r.status == 0, "openssl \(step[0]): \(r.stderr)")
            }
        }
    }

    /// Python's HTTPS server on 127.0.0.1 with one of the certificates: `/a.jpg` a JPEG,
    /// anything else 204; every request logged (method and path) to `log`.
    final class HTTPSServer {
        let process = Process()
        let log: String
        let port: Int

        static let script = #"""
            import http.server, ssl, sys
            cert, key, port, log, jpeg = sys.argv[1:6]
            body = open(jpeg, 'rb').read()
            class H(http.server.BaseHTTPRequestHandler):
                def answer(self):
                    with open(log, 'a') as f: f.write(self.command + ' ' + self.path + '\n')
                    data = body if self.path.startswith('/a.jpg') else b''
                    self.send_response(200 if data else 204)
                    self.send_header('Content-Type', 'image/jpeg')
                    self.send_header('Content-Length', str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                do_GET = answer
                do_POST = answer
                def log_message(self, *a): pass
            s = http.server.HTTPServer(('127.0.0.1', int(port)), H)
            c = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            c.load_cert_chain(cert, key)
            s.socket = c.wrap_socket(s.socket, server_side=True)
            print(s.server_address[1], flush=True)
            s.serve_forever()
            """#

        init(_ certs: Certificates, good: Bool, port: Int = 0, log: String, jpeg: String) throws {
            self.log = log
            let name = good ? "good" : "bad"
            _ = certs.dir.write("server.py", Self.script)
            process.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
            process.arguments = [
                certs.dir.file("server.py"), certs.dir.file("\(name).pem"), certs.dir.file("\(name).key"), String(port),
                log, jpeg,
            ]
            let out = Pipe()
            process.standardOutput = out
            process.standardError = FileHandle.nullDevice
            try process.run()
            let line = String(decoding: out.fileHandleForReading.availableData, as: UTF8.self)
            self.port = try #require(Int(line.trimmingCharacters(in: .whitespacesAndNewlines)), "the server's port")
        }

        func stop() {
            kill(process.processIdentifier, SIGKILL)   // a child may inherit a blocked SIGTERM
            process.waitUntilExit()
        }

        var requests: [String] {
            ((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").split(separator: "\n").map(String.init)
        }
    }

    @Test(.enabled(if: tools, "needs openssl and python3 (make test installs them)"))
    func aCertificateThatFailsIsTransientAndGoesThroughOnceFixed() throws {
        let certs = try Certificates()
        defer { certs.dir.remove() }
        let jpeg = certs.dir.write("a.jpg", Media.jpeg(5000))
        let log = certs.dir.file("requests.log")
        var https = try HTTPSServer(certs, good: false, log: log, jpeg: jpeg)
        let base = "https://127.0.0.1:\(https.port)"
        // The feed over plain HTTP: an ad shown from it whose tracker is on https, and an ad
        // whose asset is on https.
        let server = try LoopbackServer { r in
            r.path == "/feed.json"
                ? .text(
                    200,
                    #"{"ads":[{"id":"shown","url":"s.jpg","priority":5,"tracking":{"impression":["\#(base)/imp?a=[ADID]"]}},"#
                        + #"{"id":"tls","url":"\#(base)/a.jpg"}]}"#)
                : .file(Media.jpeg(3000, seed: 4), for: r)
        }
        defer { server.stop() }
        let dir = TempDir()
        defer { dir.remove() }
        let c = ["--cache-dir", dir.path + "/cache"]

        let first = Adcache.run(c + ["fetch", "--cacert", certs.ca, "--retries", "0", server.url("/feed.json")])
        #expect(first.status == 75, "a TLS failure is transient: \(first.stderr)")
        #expect(first.stderr.contains("TLS"), "\(first.stderr)")
        #expect(Adcache.run(c + ["next"]).stdout.contains("/assets/"))
        let report = Adcache.run(c + ["report", "--cacert", certs.ca, "--retries", "0"])
        #expect(report.status == 75, "the tracker stays queued: \(report.stderr)")
        #expect(report.stdout.contains("1 pending"), "\(report.stdout)")
        #expect(https.requests.isEmpty, "nothing got through the bad certificate")

        // The same server, now with the certificate the CA signed: at once, no back-off.
        let port = https.port
        https.stop()
        https = try HTTPSServer(certs, good: true, port: port, log: log, jpeg: jpeg)
        defer { https.stop() }
        let again = Adcache.run(c + ["fetch", "--cacert", certs.ca, "--retries", "0"])
        #expect(again.status == 0, "\(again.stderr)")
        #expect(https.requests.filter { $0 == "GET /a.jpg" }.count == 1, "\(https.requests)")
        #expect(https.requests.filter { $0.hasPrefix("GET /imp?") }.count == 1, "the fetch's report step delivered it")
        let stats = Adcache.run(c + ["stats"])
        #expect(stats.stdout.contains("0 pending"), "\(stats.stdout)")
    }
}
