import Foundation
import TestSupport
import Testing

/// SPEC §1 v4, issue 38: an app's package depends on AdCacheKit **by version** — a clone of
/// this checkout tagged 0.1.0, `exact: "0.1.0"` — and builds in Swift 6 language mode (SwiftPM
/// refuses a by-version dependency with unsafe flags). Its program shares one `AdCache`
/// between a `Task` fetching from a slow loopback server and launches (each within its
/// second), cancels the fetch and finds the cache usable, and switches over the error enum's
/// cases for a 404 feed, an unreachable host and a refused signature.
@Suite(
    .enabled(if: available("/usr/bin/git"), "git is needed (make test installs it)"),
    .timeLimit(.minutes(20)))
struct ConsumerPackageTests {
    static let program = #"""
        import AdCacheKit
        import Foundation

        let a = CommandLine.arguments
        let (dir, good, slow, missing, dead, forged, key) = (a[1], a[2], a[3], a[4], a[5], a[6], a[7])
        let cache = AdCache(AdCache.Configuration(directory: dir, diagnostics: { _ in }))

        let first = try await cache.fetch(FetchOptions(feed: good))
        print("first: \(first.ads.count) ads, complete \(first.isComplete)")

        // One instance, two tasks: a fetch that waits on a slow feed server, and launches.
        var slowOptions = FetchOptions(feed: slow)
        slowOptions.transfer.retries = 0
        let fetching = Task { try await cache.fetch(slowOptions) }
        try await Task.sleep(for: .milliseconds(500))
        var slowest = Duration.zero
        for _ in 0..<5 {
            let launch = Task.detached { () throws -> (NextResult, Duration) in
                let clock = ContinuousClock()
                let start = clock.now
                let result = try cache.next()
                return (result, clock.now - start)
            }
            let (result, took) = try await launch.value
            slowest = max(slowest, took)
            guard case .show = result else { print("launch: nothing to show"); exit(1) }
        }
        print("launches: \(slowest < .seconds(1) ? "within a second" : "slow: \(slowest)")")
        fetching.cancel()
        switch await fetching.result {
        case .success(let report): print("cancelled fetch: report, interrupted \(report.interrupted)")
        case .failure(let error): print("cancelled fetch: \(error is CancellationError ? "CancellationError" : "\(error)")")
        }
        if case .show(let ad) = try cache.next(NextOptions(peek: true)), FileManager.default.fileExists(atPath: ad.path) {
            print("usable: \(ad.id)")
        }
        let verified = try await cache.verify()
        print("verify: \(verified.isHealthy ? "healthy" : "damaged")")

        // What a program branches on: the cases and their values, never the text.
        func attempt(_ name: String, _ options: FetchOptions) async {
            do {
                _ = try await cache.fetch(options)
                print("\(name): fetched")
            } catch let error as AdCacheError {
                switch error {
                case .feedUnreachable(let f):
                    print("\(name): unreachable, kind \(f.kind), http \(f.httpStatus.map(String.init) ?? "none"), transient \(f.transient)")
                case .feedInvalid(let f):
                    print("\(name): refused, kind \(f.kind), refusal \(f.refusal.map { "\($0)" } ?? "none")")
                case .tryAgainLater(let f):
                    print("\(name): later, transient \(f.transient)")
                case .invalidRequest, .cacheUnwritable, .io, .busy, .libraryMissing, .unknownAd, .exportInvalid:
                    print("\(name): other: \(error.message)")
                }
            } catch {
                print("\(name): not an AdCacheError: \(error)")
            }
        }
        var quick = FetchOptions(feed: missing)
        quick.transfer.retries = 0
        await attempt("404", quick)
        quick = FetchOptions(feed: dead)
        quick.transfer.retries = 0
        await attempt("dead", quick)
        var signed = FetchOptions(feed: forged)
        signed.feedKeys = [try FeedKey(key, origin: "the app")]
        await attempt("forged", signed)
        """#

    static let manifest = #"""
        // swift-tools-version:6.0
        import PackageDescription

        let package = Package(
            name: "Consumer",
            platforms: [.macOS(.v13)],
            dependencies: [.package(url: "REPO", exact: "0.1.0")],
            targets: [
                .executableTarget(name: "Consumer", dependencies: [.product(name: "AdCacheKit", package: "adcache")])
            ],
            swiftLanguageModes: [.v6]
        )
        """#

    @Test func anAppDependsOnAdCacheKitByVersion() throws {
        let dir = TempDir(); defer { dir.remove() }
        // The checkout under test, uncommitted work included, as a repository tagged 0.1.0.
        let repo = dir.path + "/adcache"
        #expect(sh("/usr/bin/git", ["clone", "-q", packageRoot, repo]).status == 0)
        for path in ["Sources", "Package.swift"] {
            _ = sh("/bin/rm", ["-rf", repo + "/" + path])
            _ = sh("/bin/cp", ["-a", packageRoot + "/" + path, repo + "/"])
        }
        let git = ["-C", repo, "-c", "user.name=test", "-c", "user.email=test@localhost"]
        #expect(sh("/usr/bin/git", git + ["add", "-A"]).status == 0)
        _ = sh("/usr/bin/git", git + ["commit", "-q", "-m", "the tree under test"])
        #expect(sh("/usr/bin/git", git + ["tag", "0.1.0"]).status == 0)

        let consumer = dir.path + "/consumer"
        try FileManager.default.createDirectory(
            atPath: consumer + "/Sources/Consumer", withIntermediateDirectories: true)
        _ = dir.write("consumer/Package.swift", Self.manifest.replacingOccurrences(of: "REPO", with: "file://" + repo))
        _ = dir.write("consumer/Sources/Consumer/main.swift", Self.program)
        // The toolchain that runs these tests (sh's PATH has /opt/swift/usr/bin, where CI's is).
        // The build also writes every module's symbol graph, AdCacheKit's as an app sees it.
        let graphs = dir.path + "/symbol-graphs"
        try FileManager.default.createDirectory(atPath: graphs, withIntermediateDirectories: true)
        let graphFlags = ["-emit-symbol-graph", "-emit-symbol-graph-dir", graphs].flatMap { ["-Xswiftc", $0] }
        let build = sh("/usr/bin/env", ["swift", "build"] + graphFlags, env: ["HOME": dir.path], cwd: consumer)
        try #require(build.status == 0, "\(build.stdout.suffix(3000))\(build.stderr.suffix(3000))")

        // Every public declaration of AdCacheKit has a doc comment (SPEC §1 v4), and there are
        // as many as the README says.
        let surface = try Self.publicSymbols(AdCacheKitIn: graphs)
        let undocumented = surface.filter { !$0.documented }.map(\.name)
        print("AdCacheKit: \(surface.count) public symbols, \(undocumented.count) without a doc comment")
        #expect(undocumented.isEmpty, "no doc comment:\n\(undocumented.joined(separator: "\n"))")
        #expect(surface.count == 427, "the README gives the count (348 declarations, 79 enum cases): update it")

        // The servers: a good feed (and its assets), a slow one, a 404, a forged signature.
        let key = try SignedFeedTests.Publisher("pub", in: dir)
        let jpeg = Media.jpeg()
        let server = try LoopbackServer { r in
            switch r.path {
            case "/good.json":
                return .text(200, #"[{"id":"a","url":"/a.jpg"}]"#, contentType: "application/json")
            case "/a.jpg": return .file(jpeg, for: r, etag: "\"a\"")
            case "/slow.json":
                var slow = LoopbackServer.Response.text(200, "[]", contentType: "application/json")
                slow.delay = 20
                return slow
            case "/forged.json": return .text(200, #"{"serial":1,"validUntil":4102444800,"ads":[]}"#)
            case "/forged.json.minisig":
                return .text(200, String(decoding: (try? key.sign(Array("another feed".utf8))) ?? [], as: UTF8.self))
            default: return .text(404, "not found")
            }
        }
        defer { server.stop() }
        let run = sh(
            consumer + "/.build/debug/Consumer",
            [
                dir.path + "/cache", server.url("/good.json"), server.url("/slow.json"), server.url("/missing.json"),
                "http://127.0.0.1:\(freeLoopbackPort())/feed.json", server.url("/forged.json"), key.publicLine,
            ])
        #expect(run.status == 0, "\(run.stderr)")
        let lines = run.stdout.split(separator: "\n").map(String.init)
        #expect(
            lines == [
                "first: 1 ads, complete true",
                "launches: within a second",
                "cancelled fetch: CancellationError",
                "usable: a",
                "verify: healthy",
                "404: unreachable, kind http, http 404, transient false",
                "dead: unreachable, kind connect, http none, transient true",
                "forged: refused, kind signature, refusal signatureInvalid",
            ], "\(run.stdout)\(run.stderr)")
    }

    /// The public and open symbols declared in Sources/AdCacheKit, from the symbol graphs in
    /// `directory` (`AdCacheKit.symbols.json`, and `AdCacheKit@<Module>.symbols.json` for
    /// extensions of other modules' types), each named `kind path (file:line)`. Symbols with no
    /// location in those sources (a protocol's default implementation) are not ours.
    static func publicSymbols(AdCacheKitIn directory: String) throws -> [(name: String, documented: Bool)] {
        let files = try FileManager.default.contentsOfDirectory(atPath: directory).filter {
            ($0.hasPrefix("AdCacheKit.") || $0.hasPrefix("AdCacheKit@")) && $0.hasSuffix(".symbols.json")
        }
        #expect(files.contains("AdCacheKit.symbols.json"), "no symbol graph in \(directory)")
        var symbols: [(name: String, documented: Bool)] = []
        for file in files.sorted() {
            let data = try Data(contentsOf: URL(fileURLWithPath: directory + "/" + file))
            let graph = try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
            for symbol in try #require(graph["symbols"] as? [[String: Any]]) {
                guard let access = symbol["accessLevel"] as? String, access == "public" || access == "open",
                    let location = symbol["location"] as? [String: Any], let uri = location["uri"] as? String,
                    let source = uri.range(of: "/Sources/AdCacheKit/")
                else { continue }
                let kind = (symbol["kind"] as? [String: Any])?["identifier"] as? String ?? "?"
                let path = (symbol["pathComponents"] as? [String] ?? []).joined(separator: ".")
                let line = ((location["position"] as? [String: Any])?["line"] as? Int ?? -1) + 1
                let name = "\(kind) \(path) (\(uri[source.upperBound...]):\(line))"
                symbols.append((name, symbol["docComment"] != nil))
            }
        }
        return symbols
    }
}
