// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "adcache",
    products: [
        .executable(name: "adcache", targets: ["adcache"]),
        .library(name: "AdCacheKit", targets: ["AdCacheKit"]),
    ],
    targets: [
        // libcurl's headers; the library itself is dlopen'ed by the first transfer (see
        // Sources/AdCacheKit/Curl/CurlAPI.swift), so that `next` never loads it. Hence
        // no pkg-config here: pkg-config would link it.
        .systemLibrary(
            name: "CCurl",
            providers: [.apt(["libcurl4-openssl-dev"])]
        ),
        // OpenSSL's headers; libcrypto is dlopen'ed by the first SHA-256, likewise.
        .systemLibrary(
            name: "CCrypto",
            providers: [.apt(["libssl-dev"])]
        ),
        // libxml2 for VAST feeds (SPEC §10): dlopen'ed by the first XML feed, likewise. The
        // shim declares the few parts of libxml2's ABI it reads (Sources/CXML/libxml2_abi.h):
        // no include path of ours, no unsafe flag (a package depends on AdCacheKit by
        // version), nothing linked (pkg-config would link libxml2 into every launch).
        .target(name: "CXML"),
        .target(name: "AdCacheKit", dependencies: ["CCurl", "CCrypto", "CXML"], exclude: ["README.md"]),
        // The command line as a function (`CLI.run`), so that tests run it in-process.
        .target(name: "AdCacheCLI", dependencies: ["AdCacheKit"]),
        // The arguments from the C runtime, not /proc (a chroot without it, SPEC §6).
        .target(name: "CArgs"),
        .executableTarget(name: "adcache", dependencies: ["AdCacheCLI", "CArgs"]),
        .target(name: "TestSupport", dependencies: ["AdCacheKit", "AdCacheCLI"], path: "Tests/TestSupport"),
        .testTarget(name: "AdCacheKitTests", dependencies: ["AdCacheKit", "TestSupport"]),
        .testTarget(
            name: "adcacheTests", dependencies: ["adcache", "AdCacheCLI", "AdCacheKit", "TestSupport"],
            exclude: ["Fixtures"]),
    ],
    swiftLanguageModes: [.v6]
)
