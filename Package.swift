// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "adcache",
    products: [
        .executable(name: "adcache", targets: ["adcache"]),
        .library(name: "AdCacheKit", targets: ["AdCacheKit"]),
    ],
    targets: [
        .systemLibrary(
            name: "CCurl",
            pkgConfig: "libcurl",
            providers: [.apt(["libcurl4-openssl-dev"])]
        ),
        .systemLibrary(
            name: "CCrypto",
            pkgConfig: "libcrypto",
            providers: [.apt(["libssl-dev"])]
        ),
        .target(name: "AdCacheKit", dependencies: ["CCurl", "CCrypto"]),
        .executableTarget(name: "adcache", dependencies: ["AdCacheKit"]),
        .target(name: "TestSupport", dependencies: ["AdCacheKit"], path: "Tests/TestSupport"),
        .testTarget(name: "AdCacheKitTests", dependencies: ["AdCacheKit", "TestSupport"]),
        .testTarget(name: "adcacheTests", dependencies: ["adcache", "AdCacheKit", "TestSupport"]),
    ],
    swiftLanguageModes: [.v6]
)
