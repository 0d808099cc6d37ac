#!/bin/sh
# Installs what building and testing adcache needs, when it is missing (Debian/Ubuntu).
# Usage: scripts/deps.sh [extra-package ...]
set -eu
need="libcurl4-openssl-dev libssl-dev libxml2-dev pkg-config $*"
missing=""
for p in $need; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
if ! command -v apt-get >/dev/null 2>&1; then
    echo "adcache: please install:$missing" >&2
    exit 1
fi
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "installing:$missing" >&2
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq $missing >/dev/null
