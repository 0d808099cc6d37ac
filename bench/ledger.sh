#!/usr/bin/env bash
# SPEC §14's figures: what a fold that appends to the ledger writes per show (flash wear),
# at a ledger of no line and of 100,000, and `export` of 100,000 lines against sha256sum +
# minisign -S of the same file. Sourced by bench/run.sh; `bench/ledger.sh` runs it alone
# (with the release build, `swift build -c release --product adcache`).
if ! declare -F row >/dev/null; then
    set -euo pipefail
    cd "$(dirname "$0")/.."
    ADC=${ADC:-$PWD/.build/release/adcache}
    W=$(mktemp -d /tmp/adcache-bench.XXXXXX)
    trap 'rm -rf "$W"' EXIT
    row() { echo "| $1 | $2 | $3 | $4 | $5 | $6 |"; }
    ratio() { python3 -c "print(f'{$1/$2:.2f}')"; }
    met() { python3 -c "print('yes' if $1 <= $2 else 'NO')"; }
    ms() { python3 -c "print(f'{$1*1000:.1f} ms')"; }
fi

echo "== 14: the ledger" >&2
L=$W/ledger
mkdir -p "$L"
echo "ledger-dir = $L/data" >"$L/adcache.conf"
lc() { "$ADC" --config "$L/adcache.conf" --cache-dir "$L/c" "$@"; }
python3 bench/make_index.py "$L/c" 100
for lines in 0 100000; do
    rm -rf "$L/data"
    mkdir -p "$L/data"
    [ "$lines" = 0 ] || python3 bench/make_ledger.py "$L/data/ledger.jsonl" "$lines"
    lc prune -q
    shows=0
    for _ in $(seq 100); do lc next >/dev/null 2>&1 && shows=$((shows + 1)); done
    # One fold, traced: bytes handed to write(2) for files, and the storage the kernel
    # accounted (ru_oublock of strace and the fold it waited for).
    read -r wrote stored < <(python3 - "$ADC" --config "$L/adcache.conf" --cache-dir "$L/c" prune -q <<'PY'
import os, re, subprocess, sys, tempfile
log = tempfile.mktemp()
p = subprocess.Popen(["strace", "-f", "-qq", "-e", "trace=write,pwrite64,writev", "-o", log] + sys.argv[1:],
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
_, _, usage = os.wait4(p.pid, 0)
written = 0
for line in open(log):
    m = re.match(r"(?:\d+\s+)?(write|pwrite64|writev)\((\d+),.*= (\d+)$", line.strip())
    if m and int(m.group(2)) > 2:
        written += int(m.group(3))
os.unlink(log)
print(written, usage.ru_oublock * 512)
PY
)
    after=$(wc -l <"$L/data/ledger.jsonl")
    per=$((wrote / shows)) storage=$((stored / shows))
    row "fold of $shows shows into a ledger of $lines lines ($((after - lines)) appended): written per show, write(2) / storage" "$per B / $storage B" "" "" "≤ 64 KiB" "$(met "$(( per > storage ? per : storage ))" 65536)"
done

# export of 100,000 lines vs what an auditor's tools do with the same file.
python3 bench/make_ledger.py "$L/data/ledger.jsonl" 100000
minisign -G -W -f -p "$L/m.pub" -s "$L/m.key" >/dev/null
lc export --public-key >/dev/null
cp "$L/data/ledger.jsonl" "$L/same.jsonl"
hyperfine -N -w 2 -r 10 --export-json "$W/export.json" \
    "$ADC --config $L/adcache.conf --cache-dir $L/c export --output $L/export.jsonl" \
    "sh -c 'sha256sum $L/same.jsonl >/dev/null && minisign -S -s $L/m.key -m $L/same.jsonl -x $L/same.minisig'" \
    >/dev/null 2>&1
e=$(jq '.results[0].median' "$W/export.json") p=$(jq '.results[1].median' "$W/export.json")
row "export of 100,000 ledger lines vs sha256sum + minisign -S of the same file" "$(ms "$e")" "$(ms "$p")" "$(ratio "$e" "$p")" "≤ 2" "$(met "$(ratio "$e" "$p")" 2)"
