#!/bin/sh
# make order: writes packaging/adcache.order, the functions adcache's common commands run,
# launch first. `make release` has lld lay those functions out side by side, so that a
# process maps less of the code it merely sits beside (the kernel maps a binary 64 KiB at a
# time): a 1 GiB fetch maps 3.7 MB of the binary's code instead of 6.5 MB (the rest is in
# archive members lld cannot split, such as the stdlib's 1.6 MB .text). Names no longer in
# the binary are ignored, so a stale list costs memory, never correctness; regenerate it
# when the code has changed much (the peak-RSS rows of `make bench` tell).
#
# How: the release binary runs the commands below under valgrind's callgrind against a
# loopback server, and every function it entered is listed (mangled, as the linker sees
# it), those of `next` first, then `fetch`'s, then the rest's.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
scripts/deps.sh valgrind python3 >&2
bin=.build-static/release/adcache   # unstripped: symbols are what we want from it
[ -x "$bin" ] || { echo "make-order: $bin is missing; run make release" >&2; exit 1; }

w=$(mktemp -d /tmp/adcache-order.XXXXXX)
server=""
trap '[ -n "$server" ] && kill "$server" 2>/dev/null; rm -rf "$w"' EXIT
# Debian 12's valgrind (3.19) cannot read the toolchain's DWARF 5: a copy without the debug
# information, its symbols kept, is what runs.
objcopy --strip-debug "$bin" "$w/adcache"
bin=$w/adcache
mkdir -p "$w/www/assets"
cp Examples/assets/* "$w/www/assets/"
# A video past the size at which the digest moves to its own thread.
{ printf '\000\000\000\030ftypisom'; head -c 24M /dev/urandom; } > "$w/www/assets/big.mp4"
printf 'GIF89a' > "$w/www/pixel.gif"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
u="http://127.0.0.1:$port"
cat > "$w/www/feed.json" <<FEED
{ "version": 1, "reportUrl": "$u/report",
  "ads": [
    { "id": "spring", "url": "assets/spring.jpg", "priority": 10, "maxShows": 5,
      "tracking": { "impression": ["$u/pixel.gif?ad=[ADID]&t=[TIMESTAMP]&cb=[CACHEBUSTING]"],
                    "click": ["$u/pixel.gif?ev=[EVENT]"] } },
    { "id": "app", "url": "assets/new-app.png", "weight": 2, "hours": ["00:00-24:00"], "days": ["mon","tue","wed","thu","fri","sat","sun"] },
    { "id": "video", "type": "video", "url": "assets/big.mp4", "expires": "2099-01-01T00:00:00Z" }
  ] }
FEED
python3 bench/slow_server.py "$w/www" "$port" 0 & server=$!
for _ in $(seq 50); do (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.1; done

# train NAME ARGS...: one command under callgrind, its functions in $w/NAME.fns.
n=0
train() {
    name=$1; shift
    n=$((n + 1))
    valgrind --tool=callgrind --demangle=no --callgrind-out-file="$w/$n.$name.out" \
        "$bin" --cache-dir "$w/cache" "$@" >/dev/null 2>"$w/$n.$name.err" || true
    [ -s "$w/$n.$name.out" ] || { cat "$w/$n.$name.err" >&2; exit 1; }
    sed -n 's/^c\{0,1\}fn=([0-9]*) //p' "$w/$n.$name.out" >> "$w/$name.fns"
}
"$bin" --cache-dir "$w/cache" fetch -q --no-progress "$u/feed.json"
train next next --peek
train next next
train next next --json
train next next
train fetch fetch --no-progress "$u/feed.json"
rm -rf "$w/cache"
train fetch fetch --no-progress "$u/feed.json"
train rest list
train rest list --json
train rest event click spring
train rest report
train rest stats
train rest prune
train rest --help
train rest fetch --help
train rest clear
train rest fetch -q --no-progress Examples/feed.json

# Keep the names the binary defines as functions, each once: next's, then fetch's, then
# the rest's, each group sorted (callgrind lists them in no stable order; sorted, the file
# changes only where the code did).
nm --defined-only "$bin" | awk '$2 ~ /^[tTwW]$/ { print $3 }' | sort -u > "$w/defined"
for group in next fetch rest; do LC_ALL=C sort -u "$w/$group.fns"; done | awk '!seen[$0]++' > "$w/all"
awk 'NR == FNR { ok[$0] = 1; next } ok[$0]' "$w/defined" "$w/all" > packaging/adcache.order
echo "make-order: $(wc -l < packaging/adcache.order) functions in packaging/adcache.order" >&2
