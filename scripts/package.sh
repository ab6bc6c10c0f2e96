#!/usr/bin/env bash
# scripts/package.sh [--no-install-test] [OUT]
# Builds the release tarball and the Debian packages into OUT (default build-packages), checks
# them, and prints what each package holds:
#  1. `meson dist` of HEAD (xz, no tests: CI tests the tarball's tree apart) from a configure-only
#     build dir: OUT/outbox-VERSION.tar.xz, its .sha256sum, and OUT/outbox.wrap, the Meson
#     wrap file for it (scripts/make_wrap.sh);
#  2. the .debs, built by dpkg-buildpackage from that tarball's tree (not this checkout), so
#     that a file missing from the tarball fails here; DEB_BUILD_OPTIONS passes through (CI
#     sets noopt: the package build compiles the outbox command and nothing else);
#  3. lintian over the .changes: any error or warning fails (fix it, or override it in
#     debian/*.lintian-overrides with the reason), and its whole output is printed;
#  4. `dpkg -c` of each package;
#  5. unless --no-install-test: the autopkgtest (debian/tests/) with the null runner, which
#     installs the packages on THIS machine (root needed), runs the tests, and removes the
#     packages again when they were not installed before; then the same program built against
#     the packages unpacked into a scratch root (OUT/root) with pkg-config, and CMake's
#     find_package configured against it.
# OUTBOX_RELEASE_URL: where the release tarball will be published (the wrap file's source_url;
# a placeholder by default).
# OUTBOX_PACKAGE_ALLOW_DIRTY=1: package HEAD even when the working tree has uncommitted changes.
# Needs debhelper, lintian, autopkgtest, help2man and the build dependencies of debian/control
# (scripts/test.sh installs them). Exits non-zero on the first failure.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

install_test=1
if [[ ${1:-} == --no-install-test ]]; then
    install_test=0
    shift
fi
out=$(realpath -m "${1:-build-packages}")
rm -rf "$out"
mkdir -p "$out"
version=$(meson introspect --projectinfo meson.build 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["version"])')

echo "== 1. meson dist (outbox $version)"
meson setup "$out/dist-build" -Dtests=disabled -Dexamples=false -Dtools=false -Dbench=false \
    -Dauto_features=disabled -Dapi_docs=disabled >"$out/dist-setup.log"
# A release comes from a committed tree: uncommitted changes are an error, unless
# OUTBOX_PACKAGE_ALLOW_DIRTY=1 (the test debian_packages in a working tree: HEAD is packaged).
dirty=()
[[ ${OUTBOX_PACKAGE_ALLOW_DIRTY:-0} == 1 ]] && dirty=(--allow-dirty)
meson dist -C "$out/dist-build" --no-tests --formats xztar "${dirty[@]}"
tarball=outbox-$version.tar.xz
mv "$out/dist-build/meson-dist/$tarball" "$out/dist-build/meson-dist/$tarball.sha256sum" "$out/"
scripts/make_wrap.sh "$out/$tarball" "${OUTBOX_RELEASE_URL:-https://example.invalid/outbox/releases}" \
    >"$out/outbox.wrap"
cat "$out/outbox.wrap"

echo "== 2. dpkg-buildpackage (DEB_BUILD_OPTIONS=${DEB_BUILD_OPTIONS:-})"
tar -C "$out" -xf "$out/$tarball"
src=$out/outbox-$version
(cd "$src" && dpkg-buildpackage -b -us -uc) >"$out/dpkg-buildpackage.log" 2>&1 || {
    tail -n 60 "$out/dpkg-buildpackage.log"
    echo "error: dpkg-buildpackage failed (whole log: $out/dpkg-buildpackage.log)" >&2
    exit 1
}
changes=$(ls "$out"/outbox_*.changes)

echo "== 3. lintian"
lintian_rc=0
lintian --fail-on error,warning --info "$changes" || lintian_rc=$?
if ((lintian_rc != 0)); then
    echo "error: lintian found errors or warnings (exit $lintian_rc)" >&2
    exit 1
fi
echo "lintian: no errors, no warnings"

echo "== 4. the packages"
for deb in "$out"/*.deb; do
    echo "-- $(basename "$deb")"
    dpkg -c "$deb" | awk '{print $6}'
done

((install_test)) || exit 0

echo "== 5a. autopkgtest (null runner: on this machine)"
mapfile -t names < <(for deb in "$out"/*.deb; do dpkg-deb -f "$deb" Package; done)
preinstalled=()
for n in "${names[@]}"; do
    dpkg-query -W -f='${Status}' "$n" 2>/dev/null | grep -q "install ok installed" && preinstalled+=("$n")
done
remove_packages() {
    if ((${#preinstalled[@]} == 0)); then
        dpkg --purge "${names[@]}" >/dev/null 2>&1 || true
    fi
}
trap remove_packages EXIT
autopkgtest "$out"/*.deb "$src" -- null
remove_packages # before the scratch root: nothing of them left in /usr
trap - EXIT

echo "== 5b. a scratch root: the packages unpacked, the program built against them"
root=$out/root
for deb in "$out"/*.deb; do dpkg -x "$deb" "$root"; done
mkdir -p "$out/scratch"
cp tests/consumers/main.cpp tests/consumers/cmake/CMakeLists.txt "$out/scratch/"
# The unpacked .pc files moved with their prefix (theirs only: the system's, nlohmann_json and
# sqlite3, keep /usr).
sed -i "s|^prefix=/usr\$|prefix=$root/usr|" "$root"/usr/share/pkgconfig/outbox*.pc
# shellcheck disable=SC2046 # the flags are separate words
(cd "$out/scratch" && c++ -std=c++20 -o app-pc main.cpp \
    $(PKG_CONFIG_PATH=$root/usr/share/pkgconfig pkg-config --cflags --libs outbox-sqlite))
"$out/scratch/app-pc" "$out/scratch/pc.db"
# CMake finds the package there too (configure only: the autopkgtest built and ran the program
# with CMake against the installed packages already).
cmake -S "$out/scratch" -B "$out/scratch/build" -DCMAKE_PREFIX_PATH="$root/usr" >/dev/null
"$root/usr/bin/outbox" --version
echo "packages: ok ($out)"
