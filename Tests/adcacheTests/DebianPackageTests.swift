import Foundation
import TestSupport
import Testing

@testable import AdCacheKit

/// SPEC §9: `make deb` from a clean clone builds what it needs (the release binary, once in
/// this run) and writes a package with the binary, the manual, the completions, the
/// configuration as a conffile, the systemd units and maintainer scripts.
@Suite(.serialized) struct DebianPackageTests {
    static let canBuild =
        FileManager.default.isExecutableFile(atPath: "/usr/bin/dpkg-deb")
        && FileManager.default.fileExists(atPath: packageRoot + "/.git")

    @Test(.enabled(if: canBuild, "needs dpkg-deb and a git checkout"), .timeLimit(.minutes(20)))
    func makeDebBuildsAPackageFromACleanClone() throws {
        let dir = TempDir()
        defer { dir.remove() }
        let clone = dir.path + "/clone"
        #expect(sh("/usr/bin/git", ["clone", "-q", packageRoot, clone]).status == 0)
        // Uncommitted work of the checkout under test goes along, so the package is of this tree.
        for path in ["Sources", "Tests", "man", "contrib", "packaging", "scripts", "Makefile", "Package.swift"] {
            _ = sh("/bin/cp", ["-a", packageRoot + "/" + path, clone + "/"])
        }
        let make = sh(
            "/usr/bin/make", ["-s", "deb"], env: ["PATH": "/opt/swift/usr/bin:/usr/bin:/bin:/usr/sbin:/sbin"],
            cwd: clone)
        #expect(make.status == 0, "\(make.stderr)")
        let deb = try #require(make.stdout.split(separator: "\n").last.map(String.init))
        #expect(deb.hasPrefix(clone + "/adcache_") && deb.hasSuffix(".deb") && Disk.exists(deb))

        let info = sh("/usr/bin/dpkg-deb", ["-I", deb])
        for field in [
            "Package: adcache", "Version: \(AdCacheVersion.string)", "Depends: libc6 (>= 2.",
            "libcurl4 (>= 7.68) | libcurl3-gnutls (>= 7.68)", "libssl3 | libssl1.1", "libxml2, adduser",
        ] {
            #expect(info.stdout.contains(field), "\(field)")
        }
        #expect(
            sh("/usr/bin/dpkg-deb", ["-f", deb, "Architecture"]).stdout.trimmingCharacters(in: .whitespacesAndNewlines)
                == sh("/usr/bin/dpkg", ["--print-architecture"]).stdout.trimmingCharacters(in: .whitespacesAndNewlines))
        let contents = sh("/usr/bin/dpkg-deb", ["-c", deb]).stdout
        for file in [
            "./usr/bin/adcache", "./usr/bin/adcache-launcher", "./usr/share/man/man1/adcache.1.gz",
            "./usr/share/bash-completion/completions/adcache", "./usr/share/zsh/vendor-completions/_adcache",
            "./usr/share/fish/vendor_completions.d/adcache.fish", "./etc/adcache.conf", "./etc/adcache/keys.d/",
            "./lib/systemd/system/adcache-fetch.service", "./lib/systemd/system/adcache-fetch.timer",
            "./lib/systemd/system/adcache-verify.service", "./lib/systemd/system/adcache-verify.timer",
            "./usr/share/doc/adcache/copyright", "./usr/share/adcache/adcache-mpv.lua",
        ] {
            #expect(contents.contains(" \(file)\n"), "\(file)")
        }
        let control = dir.path + "/control"
        #expect(sh("/usr/bin/dpkg-deb", ["-e", deb, control]).status == 0)
        #expect(try String(contentsOfFile: control + "/conffiles", encoding: .utf8) == "/etc/adcache.conf\n")
        let postinst = try String(contentsOfFile: control + "/postinst", encoding: .utf8)
        #expect(postinst.contains("adduser --system") && postinst.contains("-m 2775 /var/cache/adcache"))
        #expect(postinst.contains("install -d -o adcache -g adcache -m 0755 /var/lib/adcache"), "the ledger's")
        #expect(postinst.contains("for timer in adcache-fetch.timer adcache-verify.timer"))
        #expect(postinst.contains("deb-systemd-helper enable \"$timer\""))
        #expect(!postinst.contains("systemctl enable"), "enabled by its symlinks, systemd running or not")
        #expect(
            try String(contentsOfFile: control + "/prerm", encoding: .utf8).contains(
                "deb-systemd-invoke stop adcache-fetch.timer"))
        // The timer is enabled in an image built where systemd does not run: the postinst's
        // enablement, run into a root of its own (DPKG_ROOT), leaves the symlink there.
        let image = dir.path + "/image"
        let unitDir = image + "/lib/systemd/system"
        try FileManager.default.createDirectory(atPath: unitDir, withIntermediateDirectories: true)
        _ = sh("/bin/cp", [packageRoot + "/contrib/systemd/adcache-fetch.timer", unitDir + "/"])
        _ = sh("/bin/cp", [packageRoot + "/contrib/systemd/adcache-fetch.service", unitDir + "/"])
        let enable = sh(
            "/usr/bin/deb-systemd-helper", ["enable", "adcache-fetch.timer"],
            env: ["DPKG_ROOT": image, "PATH": "/usr/bin:/bin", "DPKG_MAINTSCRIPT_PACKAGE": "adcache"])
        #expect(enable.status == 0, "\(enable.stderr)")
        #expect(
            Disk.isLink(image + "/etc/systemd/system/timers.target.wants/adcache-fetch.timer"),
            "the enablement symlink: \(enable.stderr)")
        #expect(try String(contentsOfFile: control + "/postrm", encoding: .utf8).contains("rm -rf /var/cache/adcache"))
        for script in ["postinst", "prerm", "postrm"] {
            #expect(sh("/bin/sh", ["-n", control + "/" + script]).status == 0, "\(script) parses")
        }
        // The packaged binary runs, with the packaged configuration.
        let extracted = dir.path + "/root"
        #expect(sh("/usr/bin/dpkg-deb", ["-x", deb, extracted]).status == 0)
        // The glibc it needs is the newest its symbols name — no packed relocations by default,
        // so a package built on Debian 12 (symbols up to 2.34) installs on Ubuntu 22.04 (2.35).
        let symbols = sh("/usr/bin/objdump", ["-T", extracted + "/usr/bin/adcache"]).stdout
        let versions = symbols.components(separatedBy: "GLIBC_").dropFirst().compactMap { part -> [Int]? in
            let v = part.prefix { $0.isNumber || $0 == "." }.split(separator: ".").compactMap { Int($0) }
            return v.isEmpty ? nil : v
        }
        let newest = try #require(versions.max { $0.lexicographicallyPrecedes($1) })
        let newestText = newest.map(String.init).joined(separator: ".")
        #expect(info.stdout.contains("libc6 (>= \(newestText))"), "Depends names \(newestText): \(info.stdout)")
        #expect(newest.lexicographicallyPrecedes([2, 36]), "no glibc 2.36 needed: \(newestText)")
        // SPEC §7's footprint: the binary ≤ 16 MB, the package ≤ 6 MB (no ICU tables: the
        // library needs only FoundationEssentials).
        let binarySize = Disk.size(extracted + "/usr/bin/adcache") ?? .max
        let debSize = Disk.size(deb) ?? .max
        print("packaged binary: \(binarySize) bytes; .deb: \(debSize) bytes")
        #expect(binarySize <= 16_000_000, "the packaged binary is \(binarySize) bytes")
        #expect(debSize <= 6_000_000, "the package is \(debSize) bytes")
        let version = sh(extracted + "/usr/bin/adcache", ["--version"])
        #expect(version.stdout.hasPrefix("adcache \(AdCacheVersion.string)"))
        let config = sh(extracted + "/usr/bin/adcache", ["--config", extracted + "/etc/adcache.conf", "config"])
        #expect(config.stdout.contains("cache-dir = /var/cache/adcache"), "\(config.stderr)")
        // ...and does the main job: the release link (lld, functions in packaging/adcache.order)
        // keeps every piece of Swift metadata a run looks up.
        let cache = dir.path + "/cache"
        let packaged = extracted + "/usr/bin/adcache"
        let fetch = sh(packaged, ["--cache-dir", cache, "fetch", "--no-progress", packageRoot + "/Examples/feed.json"])
        #expect(fetch.status == 0, "\(fetch.stderr)")
        let next = sh(packaged, ["--cache-dir", cache, "next", "--json"])
        #expect(next.status == 0 && next.stdout.contains("\"path\""), "\(next.stdout) \(next.stderr)")
        #expect(sh(packaged, ["--cache-dir", cache, "list"]).stdout.contains("spring-sale"))
        // lintian: no errors.
        if FileManager.default.isExecutableFile(atPath: "/usr/bin/lintian") {
            let lint = sh("/usr/bin/lintian", ["--tag-display-limit", "0", deb])
            let errors = lint.stdout.split(separator: "\n").filter { $0.hasPrefix("E: ") }
            #expect(errors.isEmpty, "\(errors)")
            print("lintian on the package:\n" + lint.stdout)
        }
    }
}
