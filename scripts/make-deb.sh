#!/bin/sh
# Builds adcache_<version>_<arch>.deb with dpkg-deb from the release binary (make release),
# the manual, the completions, /etc/adcache.conf (a conffile) and the systemd units, and
# prints its path. Run by `make deb`; needs dpkg-deb (and fakeroot when not root).
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
bin=.build/adcache
[ -x "$bin" ] || { echo "make-deb: $bin is missing; run make release" >&2; exit 1; }
version=$("$bin" --version | sed -n 's/^adcache \([^ ]*\).*/\1/p')
arch=$(dpkg --print-architecture)
out="$top/adcache_${version}_${arch}.deb"
root=$(mktemp -d)
chmod 755 "$root"
trap 'rm -rf "$root"' EXIT

install -Dm755 "$bin" "$root/usr/bin/adcache"
install -d "$root/usr/share/man/man1"
gzip -9n < man/adcache.1 > "$root/usr/share/man/man1/adcache.1.gz"
chmod 644 "$root/usr/share/man/man1/adcache.1.gz"
install -d "$root/usr/share/bash-completion/completions" "$root/usr/share/zsh/vendor-completions" \
    "$root/usr/share/fish/vendor_completions.d"
"$bin" completions bash > "$root/usr/share/bash-completion/completions/adcache"
"$bin" completions zsh > "$root/usr/share/zsh/vendor-completions/_adcache"
"$bin" completions fish > "$root/usr/share/fish/vendor_completions.d/adcache.fish"
install -Dm644 contrib/etc/adcache.conf "$root/etc/adcache.conf"
install -d -m755 "$root/etc/adcache/keys.d"   # the publishers' minisign keys (adcache(1), SIGNED FEEDS)
install -Dm644 contrib/systemd/adcache-fetch.service "$root/lib/systemd/system/adcache-fetch.service"
install -Dm644 contrib/systemd/adcache-fetch.timer "$root/lib/systemd/system/adcache-fetch.timer"
install -Dm644 contrib/systemd/adcache-verify.service "$root/lib/systemd/system/adcache-verify.service"
install -Dm644 contrib/systemd/adcache-verify.timer "$root/lib/systemd/system/adcache-verify.timer"
install -Dm755 contrib/adcache-launcher "$root/usr/bin/adcache-launcher"
install -Dm644 contrib/adcache-mpv.lua "$root/usr/share/adcache/adcache-mpv.lua"
install -Dm644 packaging/debian/copyright "$root/usr/share/doc/adcache/copyright"
sed "s/@VERSION@/$version/; s/@DATE@/$(date -R -u -d @${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)})/" \
    packaging/debian/changelog | gzip -9n > "$root/usr/share/doc/adcache/changelog.gz"
chmod 644 "$root/usr/share/doc/adcache/changelog.gz"

install -d "$root/DEBIAN"
size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
# The oldest glibc the binary runs on: the newest symbol version it needs, and 2.36 for
# packed relocations (what dpkg-shlibdeps would say of libc6).
glibc=$( { objdump -T "$bin" | sed -n 's/.*GLIBC_\([0-9][0-9.]*\).*/\1/p'
           readelf -V "$bin" | grep -q GLIBC_ABI_DT_RELR && echo 2.36; } | sort -uV | tail -1)
sed "s/@VERSION@/$version/; s/@ARCH@/$arch/; s/@SIZE@/$size/; s/@GLIBC@/$glibc/" packaging/debian/control \
    > "$root/DEBIAN/control"
echo /etc/adcache.conf > "$root/DEBIAN/conffiles"
for script in postinst prerm postrm; do install -m755 "packaging/debian/$script" "$root/DEBIAN/$script"; done

run=""
[ "$(id -u)" -eq 0 ] || run=fakeroot
$run dpkg-deb --root-owner-group -Zxz --build "$root" "$out" >/dev/null
echo "$out"
