#!/usr/bin/env python3
"""The index record's schema, in one table (issue 23), and the Swift it generates.

Each row is one field of an `index.json` record: its name, its kind, whether `next`'s choice
reads it (a selection read skips the others and `takeTexts` copies them back for the chosen
ad), and, for the kinds below that need it, the Swift that reads or writes it. From the table
this script writes Sources/AdCacheKit/Cache/RecordFields.swift: the decoder's key set and
switch, `AdRecord.write` (in the table's order: the index's bytes) and `takeTexts`. A switch
keeps the launch's decode as fast as the hand-written one was (a table of closures cost it
14-21% more instructions at 10,000 ads). Adding a field to the index is one row here, then
`make record-fields`; RecordSchemaTests fails while the generated file is out of date.

Kinds: `optString`, `optInt`, `optDouble` (a `var x: T?`), `int` (`Int64`), `string`, and
`custom` (the row gives the Swift to read, with `s` the scanner and `r` the record, returning
false for a value adcache never writes; and the Swift to write, with `w` the writer; and,
for a field `next`'s choice does not read, the Swift that checks its value without keeping
it).

One reading of a record (SPEC §6 v4): a selection read does not keep the fields the choice
does not need, but it checks each as the whole read would read it (a value of the wrong type
drops the record in both), so that `next` never shows what `list` drops.
"""
import os
import re
import subprocess
import sys

# name, kind, selection, read (custom), write (custom)
FIELDS = [
    ("bytes", "optInt", True),
    ("clickUrl", "optString", False),
    ("duration", "custom", True, "r.duration = Int(try s.int())", 'w.field("duration", duration)'),
    ("error", "optString", False),
    ("etag", "optString", False),
    ("expires", "optDouble", True),
    ("file", "optString", True),
    ("fileMtime", "optInt", True),
    ("failedEtag", "optString", False),
    ("failedFor", "optString", False),
    ("failedLastModified", "optString", False),
    ("failures", "optInt", True),
    ("feedType", "custom", True,
     "if try !s.null() {\n    guard let t = try s.name(in: AdType.names) else { return false }\n    r.feedType = t\n}",
     'w.field("feedType", feedType?.rawValue)'),
    ("fileSha256", "optString", False),
    ("freshUntil", "optDouble", True),
    ("hours", "custom", True,
     "guard let windows = Schedule.windows(try s.strings()) else { return false }\nr.schedule.windows = windows",
     'w.field("hours", schedule.hoursText)'),
    ("days", "custom", True,
     "guard let mask = Schedule.dayMask(try s.strings()) else { return false }\nr.schedule.days = mask",
     'w.field("days", schedule.daysText)'),
    ("id", "custom", True, "id = try s.string()", 'w.field("id", id)'),
    ("lastModified", "optString", False),
    ("lastShowSeq", "optInt", True),
    ("lastShown", "optDouble", True),
    ("maxShows", "optInt", True),
    ("maxShowsPerDay", "optInt", True),
    ("meta", "custom", False, "r.meta = try s.null() ? nil : s.value()", 'w.field("meta", meta)', "try s.skip()"),
    ("minInterval", "optInt", True),
    ("notUsedAt", "optDouble", False),
    ("pickEpoch", "optInt", True),
    ("picks", "optInt", True),
    ("placement", "string", True),
    ("priority", "int", True),
    ("retryAt", "optDouble", True),
    ("rollout", "optInt", False),
    ("sha256", "optString", False),
    ("showDay", "custom", True, "r.showDay = try s.optInt().map(Int.init)", 'w.field("showDay", showDay)'),
    ("shows", "int", True),
    ("showsOnDay", "optInt", True),
    ("start", "optDouble", True),
    ("state", "custom", True,
     "let mark = s\nstate = try s.name(in: RecordState.names)\nif state == nil {\n    s = mark\n    stateName = try s.string()\n} else {\n    stateName = nil\n}",
     'w.field("state", state.rawValue)'),
    ("tracking", "custom", False,
     "var tracking: [String: [String]] = [:]\ntry s.object { s, event in tracking[event] = try s.strings() }\nr.tracking = tracking",
     'if !tracking.isEmpty {\n    w.key("tracking")\n    w.beginObject()\n'
     '    for (event, urls) in tracking.sorted(by: { $0.key < $1.key }) { w.field(event, urls) }\n'
     '    w.endObject()\n}',
     "try s.checkObject { try $0.checkStrings() }"),
    ("type", "custom", True,
     "if try !s.null() {\n    guard let t = try s.name(in: AdType.names) else { return false }\n    r.type = t\n}",
     'w.field("type", type?.rawValue)'),
    ("url", "custom", False, "url = try s.string()", 'w.field("url", url)', 'try s.checkString()\nurl = ""'),
    ("vast", "custom", True,
     "var v = VASTFields()\ntry s.object { s, key in\n    switch key {\n"
     '    case "skipOffset": v.skipOffset = try s.optDouble()\n'
     '    case "adServingId": v.adServingId = try s.optString()\n'
     '    case "universalAdId": v.universalAdId = try s.optString()\n'
     "    default: try s.skip()\n    }\n}\nr.vast = v",
     'if let vast {\n    w.key("vast")\n    w.beginObject()\n    w.field("adServingId", vast.adServingId)\n'
     '    w.field("skipOffset", vast.skipOffset)\n    w.field("universalAdId", vast.universalAdId)\n'
     "    w.endObject()\n}"),
    ("weight", "custom", True, "r.weight = try s.int()", 'if weight != 1 { w.field("weight", weight) }'),
]

# The fields a feed gives and the record keeps as they are: `update(from:)` takes them from
# the feed's ad, `feedAd` gives them back (a 304 of the feed). (The rest of the carry-over —
# id, url, type — has rules of its own, written there.)
FROM_FEED = ["placement", "sha256", "start", "expires", "maxShows", "maxShowsPerDay", "minInterval", "duration",
             "priority", "clickUrl", "meta", "weight", "schedule", "tracking", "vast", "rollout"]

# Where a selection field lives in `AdRecord` when not under its own name, for the selection
# digest (`index.sel`, Cache/SelectionDigest.swift), which stores each record's selection
# fields in the table's order: `hours` and `days` are the schedule's.
DIGEST_PATHS = {"hours": "schedule.windows", "days": "schedule.days"}

READERS = {"optString": "s.optString()", "optInt": "s.optInt()", "optDouble": "s.optDouble()",
           "int": "s.int()", "string": "s.string()"}
# What a selection read checks of a field it does not keep: the same type, nothing built.
CHECKERS = {"optString": "try s.checkOptString()", "optInt": "try s.checkOptInt()",
            "optDouble": "try s.checkOptDouble()", "int": "_ = try s.int()", "string": "try s.checkString()"}


def indent(code, n):
    return "\n".join((" " * n + line) if line else line for line in code.split("\n"))


def generate():
    out = []
    out.append("// Generated by scripts/record-fields.py from its table of the index record's fields:")
    out.append("// do not edit here. Change the table, then run `make record-fields`.")
    out.append("")
    out.append("extension AdRecord.Decoded {")
    out.append("    /// The keys of a record, as `write` writes them.")
    out.append("    enum Field: String, CaseIterable, Sendable {")
    names = [f[0] for f in FIELDS]
    line = "        case"
    for i, n in enumerate(names):
        piece = " " + n + ("," if i < len(names) - 1 else "")
        if len(line) + len(piece) > 116:
            out.append(line.rstrip(","))
            line = "        case"
            piece = " " + n + ("," if i < len(names) - 1 else "")
        line += piece
    out.append(line)
    out.append("    }")
    out.append("    static let fields = JSONKeyTable<Field>()")
    out.append("")
    out.append("    /// Reads the value of `key` into `r` (`id`, `url` and the state: as given, for the")
    out.append("    /// decoder to judge: a known `state`, else the text of an unknown one in `stateName`);")
    out.append("    /// false for a value adcache never writes. A selection read checks, and does not keep,")
    out.append("    /// the fields `next`'s choice does not need (`url` then counts as present).")
    out.append("    @inline(__always)   // the launch's decode: as fast as a switch written in place")
    out.append("    static func read(")
    out.append("        _ key: Field, _ s: inout JSONScanner, into r: inout AdRecord, forSelection: Bool, id: inout String?,")
    out.append("        url: inout String?, state: inout RecordState?, stateName: inout String?")
    out.append("    ) throws -> Bool {")
    out.append("        switch key {")
    for f in FIELDS:
        name, kind, selection = f[0], f[1], f[2]
        out.append(f"        case .{name}:")
        if not selection:
            check = f[5] if kind == "custom" else CHECKERS[kind]
            out.append("            if forSelection {")
            out.append(indent(check, 16))
            out.append("                return true")
            out.append("            }")
        if kind == "custom":
            out.append(indent(f[3], 12))
        else:
            out.append(f"            r.{name} = try {READERS[kind]}")
    out.append("        }")
    out.append("        return true")
    out.append("    }")
    out.append("}")
    out.append("")
    out.append("extension AdRecord {")
    out.append("    /// One record as the index writes it, its fields in the table's order.")
    out.append("    func write(_ w: inout JSONWriter) {")
    out.append("        w.beginObject()")
    for f in FIELDS:
        name, kind = f[0], f[1]
        if kind == "custom":
            out.append(indent(f[4], 8))
        else:
            out.append(f'        w.field("{name}", {name})')
    out.append("        w.endObject()")
    out.append("    }")
    out.append("")
    def method(doc, signature, lines):
        out.extend("    /// " + line for line in doc)
        out.append(f"    {signature} {{")
        out.extend("        " + line for line in lines)
        out.append("    }")

    selection = [DIGEST_PATHS.get(f[0], f[0]) for f in FIELDS if f[2]]
    method(["The fields a selection read skips (`IndexCoder.decode(_:forSelection:)`), from the",
            "same record read whole."],
           "mutating func takeTexts(of whole: AdRecord)", [f"{f[0]} = whole.{f[0]}" for f in FIELDS if not f[2]])
    out.append("")
    method(["The fields the feed gives and the record keeps as they are (`update(from:)`)."],
           "mutating func takeFeedFields(of ad: FeedAd)", [f"{n} = ad.{n}" for n in FROM_FEED])
    out.append("")
    method(["The fields a selection read keeps, as the selection digest (`index.sel`) stores them."],
           "func writeSelection(_ w: inout DigestWriter)", [f"w.put({p})" for p in selection])
    out.append("")
    method(["Reads them back into `r` (which starts as `blank`); `d.failed` says when they ran short."],
           "static func readSelection(_ d: inout DigestReader, into r: inout AdRecord)",
           [f"d.get(&r.{p})" for p in selection])
    out.append("")
    method(["The same, given back to a feed's ad (`feedAd`)."],
           "func giveFeedFields(to ad: inout FeedAd)", [f"ad.{n} = {n}" for n in FROM_FEED])
    out.append("}")
    return "\n".join(out) + "\n"


def squeeze(text):
    """The code without its layout: swift format may lay the generated file out anew."""
    return re.sub(r"\s+", "", text)


if __name__ == "__main__":
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    target = os.path.join(root, "Sources/AdCacheKit/Cache/RecordFields.swift")
    text = generate()
    if "--check" in sys.argv:
        current = open(target).read() if os.path.exists(target) else ""
        if squeeze(current) != squeeze(text):
            print("RecordFields.swift is out of date: run `make record-fields`", file=sys.stderr)
            sys.exit(1)
    else:
        open(target, "w").write(text)
        swift = os.environ.get("SWIFT", "swift")
        subprocess.run([swift, "format", "format", "--in-place", target], check=False)
