import AdCacheKit

/// `adcache completions bash|zsh|fish`: shell completion scripts, generated from the same
/// command specs as the help, so they never drift from the options the binary accepts.
enum CompletionsCommand: Command {
    static let name = "completions"
    static let spec = CommandSpec(
        name: name,
        abstract: "Print a shell completion script (bash, zsh or fish).",
        discussion:
            "bash: source <(adcache completions bash); zsh: adcache completions zsh > \"${fpath[1]}/_adcache\"; fish: adcache completions fish > ~/.config/fish/completions/adcache.fish",
        arguments: [("<shell>", "bash, zsh or fish.")]
    )

    static let shells = ["bash", "zsh", "fish"]

    static func run(_ args: ParsedArguments, context: Context) throws -> ExitCode {
        try args.noPositionals(allowed: 1)
        guard let shell = args.positionals.first else {
            throw args.usage("which shell? bash, zsh or fish")
        }
        switch shell {
        case "bash": context.console.out(bash())
        case "zsh": context.console.out(zsh())
        case "fish": context.console.out(fish())
        default:
            throw args.usage("unknown shell '\(shell)' (bash, zsh or fish)")
        }
        return .success
    }

    static var commands: [CommandSpec] { CLI.specs }

    /// What `event` takes first.
    static let eventTypes = AdEvent.allCases.map(\.rawValue).joined(separator: " ")

    static var allOptions: [OptionSpec] { commands.flatMap(\.optionSpecs) + GlobalOptions.specs }

    /// What follows an option in a shell: fixed words, a file or a directory, from its
    /// declaration.
    static func values(_ option: String) -> [String]? {
        guard case .choice(let words) = allOptions.first(where: { $0.long == option })?.kind else { return nil }
        return words
    }

    static func takesFile(_ option: String) -> Bool {
        if case .file = allOptions.first(where: { $0.long == option })?.kind { return true }
        return false
    }

    static func takesDirectory(_ option: String) -> Bool {
        if case .directory = allOptions.first(where: { $0.long == option })?.kind { return true }
        return false
    }

    /// Help text made safe inside the quotes and brackets of a completion script.
    static func clean(_ s: String) -> String {
        String(s.filter { !"[]:'\"\\$`".contains($0) }.prefix(70))
    }

    static func bash() -> String {
        let names = commands.map(\.name).joined(separator: " ")
        let valued = Set(allOptions.filter { $0.value != nil }.map(\.long))
        // What follows an option that takes a value: its fixed values, directories, files, or nothing.
        var valueCases = ""
        for name in valued.sorted() {
            let reply: String
            if let v = values(name) {
                reply = "COMPREPLY=($(compgen -W \"\(v.joined(separator: " "))\" -- \"$cur\")); "
            } else if takesDirectory(name) {
                reply = "COMPREPLY=($(compgen -d -- \"$cur\")); "
            } else if takesFile(name) {
                reply = "COMPREPLY=($(compgen -f -- \"$cur\")); "
            } else {
                reply = ""
            }
            valueCases += "        --\(name)) \(reply)return ;;\n"
        }
        var cases = ""
        for c in commands {
            let opts = (c.optionSpecs + GlobalOptions.specs).map { "--" + $0.long }.joined(separator: " ")
            var words = opts
            if c.name == "help" { words = names }
            if c.name == "completions" { words = shells.joined(separator: " ") }
            if c.name == "event" { words = eventTypes + " " + opts }
            cases += "        \(c.name)) words=\"\(words)\" ;;\n"
        }
        return """
            # bash completion for adcache (adcache completions bash)
            _adcache() {
                local cur prev cmd="" i words
                cur="${COMP_WORDS[COMP_CWORD]}"
                prev="${COMP_WORDS[COMP_CWORD-1]}"
                for ((i = 1; i < COMP_CWORD; i++)); do
                    case "${COMP_WORDS[i]}" in
                        --cache-dir|--config) ((i++)) ;;
                        -*) ;;
                        *) cmd="${COMP_WORDS[i]}"; break ;;
                    esac
                done
                case "$prev" in
            \(valueCases)    esac
                if [[ -z "$cmd" ]]; then
                    COMPREPLY=($(compgen -W "\(names) --cache-dir --quiet --verbose --help --version" -- "$cur"))
                    return
                fi
                case "$cmd" in
            \(cases)        *) return ;;
                esac
                COMPREPLY=($(compgen -W "$words" -- "$cur"))
            }
            complete -F _adcache adcache
            """
    }

    static func zsh() -> String {
        var out = """
            #compdef adcache
            # zsh completion for adcache (adcache completions zsh)
            _adcache() {
                local -a commands
                commands=(

            """
        for c in commands { out += "        '\(c.name):\(clean(c.abstract))'\n" }
        out += """
                )
                local i cmd=""
                for ((i = 2; i < CURRENT; i++)); do
                    case "${words[i]}" in
                        --cache-dir|--config) ((i++)) ;;
                        -*) ;;
                        *) cmd="${words[i]}"; break ;;
                    esac
                done
                if [[ -z "$cmd" ]]; then
                    _arguments '--cache-dir[The cache directory]:dir:_files -/' '(-q --quiet)'{-q,--quiet}'[Print nothing on stdout]' \\
                        '(-v --verbose)'{-v,--verbose}'[Say more on stderr]' '--version[Show the version]' '(-h --help)'{-h,--help}'[Show help]' \\
                        '*::command:->command'
                    _describe 'command' commands
                    return
                fi
                case "$cmd" in

            """
        for c in commands {
            var specs: [String] = []
            for o in c.optionSpecs + GlobalOptions.specs {
                var s = "'--\(o.long)[\(clean(o.help))]"
                if o.value != nil {
                    if let v = values(o.long) {
                        s += ":\(o.long):(\(v.joined(separator: " ")))"
                    } else if takesDirectory(o.long) {
                        s += ":dir:_files -/"
                    } else if takesFile(o.long) {
                        s += ":file:_files"
                    } else {
                        s += ":\(o.long): "
                    }
                }
                specs.append(s + "'")
            }
            if c.name == "help" { specs.append("'1:command:(\(commands.map(\.name).joined(separator: " ")))'") }
            if c.name == "completions" { specs.append("'1:shell:(\(shells.joined(separator: " ")))'") }
            if c.name == "fetch" { specs.append("'1:feed:_files'") }
            if c.name == "event" { specs.append("'1:type:(\(eventTypes))'") }
            out +=
                "        \(c.name)) _arguments \\\n            " + specs.joined(separator: " \\\n            ")
                + " ;;\n"
        }
        out += """
                esac
            }
            compdef _adcache adcache
            """
        return out
    }

    static func fish() -> String {
        var lines = ["# fish completion for adcache (adcache completions fish)", "complete -c adcache -f"]
        let names = commands.map(\.name).joined(separator: " ")
        for c in commands {
            lines.append("complete -c adcache -n '__fish_use_subcommand' -a \(c.name) -d '\(clean(c.abstract))'")
        }
        for o in GlobalOptions.specs {
            var l = "complete -c adcache -l \(o.long)"
            if let s = o.short { l += " -s \(s)" }
            if o.value != nil { l += takesDirectory(o.long) ? " -r -a '(__fish_complete_directories)'" : " -r" }
            lines.append(l + " -d '\(clean(o.help))'")
        }
        for c in commands {
            let cond = "-n '__fish_seen_subcommand_from \(c.name)'"
            for o in c.optionSpecs {
                var l = "complete -c adcache \(cond) -l \(o.long)"
                if o.value != nil {
                    if let v = values(o.long) {
                        l += " -x -a '\(v.joined(separator: " "))'"
                    } else if takesFile(o.long) {
                        l += " -r -F"
                    } else {
                        l += " -x"
                    }
                }
                lines.append(l + " -d '\(clean(o.help))'")
            }
            if c.name == "help" { lines.append("complete -c adcache \(cond) -a '\(names)'") }
            if c.name == "completions" {
                lines.append("complete -c adcache \(cond) -a '\(shells.joined(separator: " "))'")
            }
            if c.name == "fetch" { lines.append("complete -c adcache \(cond) -F") }
            if c.name == "event" { lines.append("complete -c adcache \(cond) -a '\(eventTypes)'") }
        }
        return lines.joined(separator: "\n")
    }
}
