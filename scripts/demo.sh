#!/usr/bin/env bash
# scripts/demo.sh: the embedded demo (SQLite + ZeroMQ, no server: the demo process runs the
# writer and the relay and starts its consumer as a second process), from a fresh Debian 12
# machine (as root, or with sudo). Installs what it needs, builds `order_demo` in build-demo and
# runs it; arguments are passed on (e.g. --orders 50000, --chaos, --durable).
# Ends with: orders=N events_published=N applied=N duplicates_skipped=D dead_lettered=0 lost=0
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

packages=(meson ninja-build pkg-config g++ python3 libsoci-dev nlohmann-json3-dev libsqlite3-dev
    libzmq3-dev cppzmq-dev)
missing=()
for pkg in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'ok installed' || missing+=("$pkg")
done
if ((${#missing[@]} > 0)); then
    sudo=()
    if ((EUID != 0)) && command -v sudo >/dev/null 2>&1; then sudo=(sudo); fi
    echo "installing: ${missing[*]}" >&2
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q >&2
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >&2
fi

if [[ ! -f build-demo/build.ninja ]]; then
    meson setup build-demo --buildtype=release -Dtests=disabled -Dbench=false -Dzeromq=enabled >&2
fi
ninja -C build-demo examples/order_demo >&2
exec ./build-demo/examples/order_demo "$@"
