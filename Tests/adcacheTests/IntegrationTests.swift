import Foundation
import TestSupport
import Testing

/// Runs a program (not adcache), as a person's shell would.
func sh(_ path: String, _ args: [String], env: [String: String] = [:], cwd: String? = nil) -> Run {
    var e = ["PATH": "/usr/local/bin:/usr/bin:/bin:/opt/swift/usr/bin"]
    for (k, v) in env { e[k] = v }
    return runProgram(path, args, environment: e, cwd: cwd)
}

func available(_ path: String) -> Bool { FileManager.default.isExecutableFile(atPath: path) }

@Suite struct InstallTests {
    @Test func makeInstallPutsEveryFileInPlaceAndUninstallRemovesThem() throws {
        let dir = TempDir(); defer { dir.remove() }
        let root = dir.path + "/root"
        let install = sh(
            "/usr/bin/make", ["-s", "install", "DESTDIR=\(root)", "PREFIX=/usr", "BIN=\(Adcache.binary)"],
            cwd: packageRoot)
        #expect(install.status == 0, "\(install.stderr)")
        let files = [
            "/usr/bin/adcache", "/usr/share/man/man1/adcache.1", "/usr/share/bash-completion/completions/adcache",
            "/usr/share/zsh/site-functions/_adcache", "/usr/share/fish/vendor_completions.d/adcache.fish",
        ]
        for f in files { #expect(FileManager.default.fileExists(atPath: root + f), "\(f)") }
        let version = sh(root + "/usr/bin/adcache", ["--version"])
        #expect(version.status == 0 && version.stdout.hasPrefix("adcache "))
        #expect(
            FileManager.default.contents(atPath: root + "/usr/share/man/man1/adcache.1")
                == FileManager.default.contents(atPath: packageRoot + "/man/adcache.1"))
        let uninstall = sh("/usr/bin/make", ["-s", "uninstall", "DESTDIR=\(root)", "PREFIX=/usr"], cwd: packageRoot)
        #expect(uninstall.status == 0)
        for f in files { #expect(!FileManager.default.fileExists(atPath: root + f), "\(f)") }
    }
}

@Suite struct MakefileTests {
    /// Every target the Makefile declares parses and has its recipe (a dry run runs nothing): a
    /// comment pasted into a recipe line once made `make format` a rule needing a file "4-space".
    @Test func everyDeclaredTargetHasARecipeMakeCanRead() throws {
        let makefile = try String(contentsOfFile: packageRoot + "/Makefile", encoding: .utf8)
        let phony = try #require(makefile.split(separator: "\n").first { $0.hasPrefix(".PHONY:") })
        let targets = phony.dropFirst(".PHONY:".count).split(separator: " ").map(String.init)
        #expect(targets.contains("format") && targets.contains("test") && targets.count >= 10)
        for target in targets {
            let dry = sh("/usr/bin/make", ["-n", target], cwd: packageRoot)
            #expect(dry.status == 0, "make -n \(target): \(dry.stderr)")
        }
    }
}

@Suite struct CompletionTests {
    func script(_ shell: String) throws -> String {
        let dir = TempDir()
        let r = Adcache.run(["completions", shell])
        #expect(r.status == 0)
        return dir.write("adcache.\(shell)", r.stdout)
    }

    @Test func bashCompletesCommandsOptionsAndValues() throws {
        let file = try script("bash")
        let probe = """
            source \(file) || exit 9
            complete -p adcache || exit 8
            COMP_WORDS=(adcache fe); COMP_CWORD=1; _adcache; echo "1:${COMPREPLY[*]}"
            COMP_WORDS=(adcache next --pe); COMP_CWORD=2; _adcache; echo "2:${COMPREPLY[*]}"
            COMP_WORDS=(adcache next --type ''); COMP_CWORD=3; _adcache; echo "3:${COMPREPLY[*]}"
            COMP_WORDS=(adcache --cache-dir /tmp/x fetch --par); COMP_CWORD=4; _adcache; echo "4:${COMPREPLY[*]}"
            COMP_WORDS=(adcache help ''); COMP_CWORD=2; _adcache; echo "5:${COMPREPLY[*]}"
            COMP_WORDS=(adcache event c); COMP_CWORD=2; _adcache; echo "6:${COMPREPLY[*]}"
            """
        let r = sh("/bin/bash", ["-c", probe])
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stderr.isEmpty, "\(r.stderr)")
        #expect(r.stdout.contains("1:fetch\n"))
        #expect(r.stdout.contains("2:--peek\n"))
        #expect(r.stdout.contains("3:image video\n"))
        #expect(r.stdout.contains("4:--parallel\n"))
        #expect(
            r.stdout.contains(
                "5:fetch next event report stats prune list why verify status check clear export config help completions\n"
            ))
        #expect(r.stdout.contains("6:click complete\n"))
    }

    @Test(
        .enabled(if: available("/usr/bin/zsh") || available("/bin/zsh"), "zsh is not installed (make test installs it)")
    )
    func zshScriptLoads() throws {
        let file = try script("zsh")
        let syntax = sh("/usr/bin/zsh", ["-n", file])
        #expect(syntax.status == 0, "\(syntax.stderr)")
        let load = sh(
            "/usr/bin/zsh",
            [
                "-c",
                "autoload -Uz compinit && compinit -u -d /tmp/zcd-$$ && source \(file) && print -r -- ${_comps[adcache]}",
            ])
        #expect(load.status == 0, "\(load.stderr)")
        #expect(load.stdout == "_adcache\n")
    }

    @Test(.enabled(if: available("/usr/bin/fish"), "fish is not installed (make test installs it)"))
    func fishScriptLoadsAndCompletesValues() throws {
        let file = try script("fish")
        let r = sh("/usr/bin/fish", ["-c", "source \(file); complete -C 'adcache next --type '"])
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stdout.contains("image") && r.stdout.contains("video"))
    }

    @Test func unknownShellIsAUsageError() {
        let r = Adcache.run(["completions", "tcsh"])
        #expect(r.status == 64)
        #expect(r.stderr.hasPrefix("adcache: error: unknown shell 'tcsh'"))
    }
}

@Suite struct ListOutputTests {
    /// A cache with one ad that started 2 h before `at` and expires 3 days after it.
    func cache(_ s: Sandbox) throws -> String {
        let feed = s.dir.write(
            "feed.json",
            """
            [{"id":"soon","url":"\(packageRoot)/Examples/assets/spring.jpg","start":"2027-03-01T06:00:00Z","expires":"2027-03-04T08:00:00Z","maxShows":3},
             {"id":"gone","url":"\(packageRoot)/Examples/assets/missing.jpg"}]
            """)
        let r = s.run(["fetch", feed])
        #expect(r.status == 65, "a missing file is a failure for good")
        return "2027-03-01T08:00:00Z"
    }

    @Test func alignedTableWithHumanSizesAndRelativeTimes() throws {
        let s = Sandbox(); defer { s.remove() }
        let at = try cache(s)
        let r = s.run(["list", "--at", at])
        #expect(r.status == 0)
        #expect(r.lines[0] == "ID    TYPE   STATE   SHOWS  STARTS   EXPIRES    SIZE")
        #expect(r.lines[1] == "soon  image  ready   0/3    2 h ago  in 3 days  5.0K")
        #expect(r.lines[2] == "gone  image  failed  0/∞    -        never         -")
        #expect(r.lines[3].hasPrefix("  gone: file://"))
        #expect(!r.stdout.contains("\u{1B}["))   // not a terminal: no colour
    }

    /// A refresh that failed while the older file still serves: `ready`, with the error, in
    /// the table and in --json (version 1 said `error: null`).
    @Test func anErrorShowsWhileTheOlderFileServes() throws {
        let s = Sandbox()
        defer { s.remove() }
        let failing = Flag()
        let jpeg = Media.jpeg()
        let server = try LoopbackServer { r in
            if r.path == "/feed.json" { return .text(200, #"[{"id":"a","url":"a.jpg"}]"#) }
            return failing.isSet ? .text(404, "gone") : .file(jpeg, for: r, etag: "\"1\"")
        }
        defer { server.stop() }
        #expect(s.run(["fetch", server.url("/feed.json")]).status == 0)
        failing.set()
        #expect(s.run(["fetch", server.url("/feed.json")]).status != 0)
        let table = s.run(["list"])
        #expect(table.lines[1].hasPrefix("a   image  ready"), "\(table.stdout)")
        #expect(table.lines[2] == "  a: \(server.url("/a.jpg")): HTTP 404 (the older file still serves)")
        let json = try #require(
            try JSONSerialization.jsonObject(with: Data(s.run(["list", "--json"]).stdout.utf8)) as? [[String: Any]])
        #expect(json[0]["state"] as? String == "ready")
        #expect((json[0]["error"] as? String)?.hasSuffix("HTTP 404") == true)
        #expect(try s.run(["next", "--json"]).stdout.contains(#""id":"a""#))
    }

    @Test func aMistypedCacheDirectoryIsAWarningNotAnEmptyTable() {
        let s = Sandbox()
        defer { s.remove() }
        let r = Adcache.call(["--cache-dir", s.dir.path + "/typo", "list"])
        #expect(r.status == 0)
        #expect(r.stderr == "adcache: warning: the cache directory \(s.dir.path)/typo does not exist\n")
        #expect(r.lines == ["ID  TYPE  STATE  SHOWS  STARTS  EXPIRES  SIZE"])
    }

    /// Feed text reaches a terminal with its control characters escaped: an id holding
    /// `ESC ] 0 ; … BEL` cannot retitle or rewrite the operator's terminal. --json keeps it.
    @Test func controlCharactersFromTheFeedAreEscaped() throws {
        let s = Sandbox()
        defer { s.remove() }
        let feed = s.dir.write(
            "feed.json",
            #"[{"id":"x\u001b]0;owned\u0007\u009b2J","url":"file://\#(packageRoot)/Examples/assets/spring.jpg"},"#
                + #"{"id":"bad\u001b[31m","url":"ftp://h/a.jpg"}]"#)
        let fetch = s.run(["fetch", feed])
        #expect(
            fetch.stderr
                == "adcache: warning: skipping ad 'bad\\x1b[31m': its \"url\" scheme 'ftp' is not http or https\n")
        let table = s.run(["list"])
        #expect(
            !table.stdout.unicodeScalars.contains { $0.value < 0x20 && $0 != "\n" || (0x7F...0x9F).contains($0.value) })
        #expect(table.lines[1].hasPrefix(#"x\x1b]0;owned\x07\x9b2J  image  ready"#), "\(table.stdout)")
        let prune = s.run(["prune", "--max-size", "0"])
        #expect(prune.lines[0].hasPrefix(#"removed ad 'x\x1b]0;owned\x07\x9b2J' (evicted"#), "\(prune.stdout)")
        let json = s.run(["list", "--json"])
        #expect(json.stdout.contains(#""id": "x\u001b]0;owned\u0007\#u{9B}2J""#), "\(json.stdout)")
    }

    @Test(.enabled(if: available("/usr/bin/script"), "script(1) is not installed (bsdutils; make test installs it)"))
    func colourOnlyOnATerminalAndNeverWithNO_COLOR() throws {
        let s = Sandbox(); defer { s.remove() }
        let at = try cache(s)
        let command = "\(Adcache.binary) --cache-dir \(s.cache) list --at \(at)"
        let tty = sh("/usr/bin/script", ["-qec", command, "/dev/null"])
        #expect(tty.stdout.contains("\u{1B}[32mready"), "\(tty.stdout)")
        #expect(tty.stdout.contains("\u{1B}[31mfailed"))
        let noColor = sh("/usr/bin/script", ["-qec", command, "/dev/null"], env: ["NO_COLOR": "1"])
        #expect(noColor.stdout.contains("ready"))
        #expect(!noColor.stdout.contains("\u{1B}["))
    }
}

@Suite struct ContribTests {
    @Test(
        .enabled(
            if: available("/usr/bin/systemd-analyze"), "systemd-analyze is not installed (make test installs systemd)"))
    func systemdUnitsVerify() throws {
        let dir = TempDir(); defer { dir.remove() }
        var paths: [String] = []
        for unit in ["adcache-fetch.service", "adcache-fetch.timer", "adcache-verify.service", "adcache-verify.timer"] {
            let text = try String(contentsOfFile: packageRoot + "/contrib/systemd/" + unit, encoding: .utf8)
            // The unit names the installed binary; point it at this build for the check.
            paths.append(dir.write(unit, text.replacingOccurrences(of: "/usr/bin/adcache", with: Adcache.binary)))
        }
        let r = sh("/usr/bin/systemd-analyze", ["verify", "--man=no"] + paths, env: ["SYSTEMD_LOG_LEVEL": "warning"])
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stderr.isEmpty, "\(r.stderr)")
        let service = try String(contentsOfFile: paths[0], encoding: .utf8)
        for directive in [
            "User=adcache", "Group=adcache", "UMask=0002", "CacheDirectoryMode=2775", "ProtectSystem=strict",
            "ReadWritePaths=/var/cache/adcache", "StateDirectory=adcache",   // the ledger (SPEC §14)
        ] {
            #expect(service.contains(directive), "\(directive)")
        }
        // Settings come from /etc/adcache.conf: no feed edited into the unit.
        #expect(!service.contains("http"), "no feed URL in the unit")
        let conf = try String(contentsOfFile: packageRoot + "/contrib/etc/adcache.conf", encoding: .utf8)
        #expect(conf.contains("cache-dir = /var/cache/adcache"))
        #expect(conf.contains("ledger-dir = /var/lib/adcache"), "every user's commands agree on the ledger")
        let checked = Adcache.call(["--config", packageRoot + "/contrib/etc/adcache.conf", "config"])
        #expect(checked.status == 0, "the shipped configuration is valid: \(checked.stderr)")
        // Persistent= only where a calendar gives it something to catch up on (SPEC §9 v4).
        for timer in [paths[1], paths[3]] {
            let text = try String(contentsOfFile: timer, encoding: .utf8)
            for directive in ["RandomizedDelaySec=", "Persistent=true", "OnCalendar="] {
                #expect(text.contains(directive), "\(timer): \(directive)")
            }
        }
        let verify = try String(contentsOfFile: paths[2], encoding: .utf8)
        #expect(verify.contains("verify") && verify.contains("PrivateNetwork=yes"), "no network for verify")
    }

    @Test func launcherShowsTheChosenAdForItsDurationOrTheDefault() throws {
        let s = Sandbox(); defer { s.remove() }
        #expect(s.run(["fetch", packageRoot + "/Examples/feed.json"]).status == 0)
        // A stand-in viewer and the binary on PATH; the launcher prints what it would run.
        let bin = s.dir.path + "/bin"
        try FileManager.default.createDirectory(atPath: bin, withIntermediateDirectories: true)
        s.dir.write("bin/mpv", "#!/bin/sh\necho mpv \"$@\"\n")
        chmod(bin + "/mpv", 0o755)
        try? FileManager.default.createSymbolicLink(atPath: bin + "/adcache", withDestinationPath: Adcache.binary)
        let cooldown = s.dir.write("cooldown.conf", "cooldown = 60\n")
        let env = ["PATH": "\(bin):/usr/bin:/bin", "ADCACHE_DIR": s.cache, "ADCACHE_CONFIG": cooldown]
        let r = sh(
            packageRoot + "/contrib/adcache-launcher", ["/opt/app/default.png", "/bin/echo", "app started"], env: env)
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stdout.contains("--image-display-duration=4"))   // spring-sale's duration
        #expect(r.stdout.contains(s.cache + "/assets/"))
        #expect(r.stdout.hasSuffix("app started\n"))
        // A relaunch within the configured cooldown shows nothing at all.
        let again = sh(
            packageRoot + "/contrib/adcache-launcher", ["/opt/app/default.png", "/bin/echo", "app"], env: env)
        #expect(again.stdout == "app\n", "\(again.stdout)")
        // The cache directory comes from the configuration, as for the fetch service.
        let other = Sandbox()
        defer { other.remove() }
        #expect(other.run(["fetch", packageRoot + "/Examples/feed.json"]).status == 0)
        let conf = other.dir.write("adcache.conf", "cache-dir = \(other.cache)\n")
        var viaConfig = env
        viaConfig["ADCACHE_DIR"] = nil
        viaConfig["ADCACHE_CONFIG"] = conf
        let configured = sh(packageRoot + "/contrib/adcache-launcher", ["/opt/app/default.png"], env: viaConfig)
        #expect(configured.stdout.contains(other.cache + "/assets/"), "\(configured.stdout) \(configured.stderr)")
    }

    /// SPEC v3 (§9) and the field: the launcher bills only what a viewer shows, plays a
    /// video to its end, passes on what `next` says, survives a typo and shows the default
    /// image when `next` cannot choose; its sed fallback (no jq) keeps an id with quotes.
    @Test func launcherBillsOnlyWhatItShows() throws {
        let s = Sandbox(); defer { s.remove() }
        let bin = s.dir.path + "/bin"
        try FileManager.default.createDirectory(atPath: bin, withIntermediateDirectories: true)
        try? FileManager.default.createSymbolicLink(atPath: bin + "/adcache", withDestinationPath: Adcache.binary)
        for tool in ["sed", "mktemp", "rm", "cat", "timeout", "dirname"] {
            try? FileManager.default.createSymbolicLink(
                atPath: bin + "/" + tool, withDestinationPath: "/usr/bin/" + tool)
        }
        _ = s.dir.write("a.jpg", Media.jpeg())
        _ = s.dir.write("v.mp4", Media.mp4())
        let feed = s.dir.write(
            "feed.json",
            #"[{"id":"say \"hi\"","url":"a.jpg","duration":4,"priority":5,"meta":{"path":"/evil"}},"#
                + #"{"id":"clip","url":"v.mp4","type":"video","duration":3,"placement":"video"}]"#)
        #expect(s.run(["fetch", feed]).status == 0)
        let launcher = packageRoot + "/contrib/adcache-launcher"
        // (Only the tools above: /bin is /usr/bin on Debian, where mpv may be installed.)
        let noViewers = ["PATH": bin, "ADCACHE_DIR": s.cache, "ADCACHE_LAUNCHER_DRY_RUN": "1"]
        // No viewer: nothing shown, and no show recorded (no impression billed).
        let none = sh(launcher, ["/opt/app/default.png", "/bin/echo", "app"], env: noViewers)
        #expect(none.stdout == "app\n" && none.stderr.contains("no viewer"), "\(none.stdout) \(none.stderr)")
        #expect(s.run(["list"]).stdout.contains("0/∞"), "no show recorded")
        #expect(!s.run(["stats"]).stdout.contains("say"), "nothing billed")

        s.dir.write("bin/mpv", "#!/bin/sh\necho mpv \"$@\"\n")
        chmod(bin + "/mpv", 0o755)
        // jq is not on this PATH: the sed fallback reads the id whole, and the path not from meta.
        let shown = sh(
            launcher, ["/opt/app/default.png", "/bin/sh", "-c", "echo \"id=$ADCACHE_AD_ID\""], env: noViewers)
        #expect(shown.stdout.contains("--image-display-duration=4 -- " + s.cache + "/assets/"), "\(shown.stdout)")
        #expect(shown.stdout.hasSuffix("id=say \"hi\"\n"), "\(shown.stdout)")
        // A typo in the configuration: next's warning is passed on, and the splash still shows.
        var typo = noViewers
        typo["ADCACHE_CONFIG"] = s.dir.write("typo.conf", "devic-id = k17\nplacement = video\n")
        let video = sh(launcher, ["/opt/app/default.png"], env: typo)
        #expect(video.stderr.contains("adcache-launcher: adcache: warning: "), "\(video.stderr)")
        #expect(
            video.stdout.contains(
                "mpv --fs --really-quiet --no-audio --script=\(packageRoot)/contrib/adcache-mpv.lua -- \(s.cache)/assets/"
            ),
            "the player's proof-of-play script: \(video.stdout)")
        #expect(!video.stdout.contains("--length"), "a video plays to its end")
        // next cannot run (a configuration file that is not there): the default image.
        var broken = noViewers
        broken["ADCACHE_CONFIG"] = s.dir.path + "/missing.conf"
        let fallback = sh(launcher, ["/opt/app/default.png"], env: broken)
        #expect(fallback.stdout.contains("-- /opt/app/default.png"), "\(fallback.stdout)")
        #expect(fallback.stderr.contains("adcache-launcher: adcache: error: "), "\(fallback.stderr)")
    }
}
