#!/usr/bin/env bash
# tests/consumers/consumer_test.sh MODE BUILD_ROOT PREFIX DATADIR MESON...
# One consumer test (tests/consumers/meson.build): installs the outbox build in BUILD_ROOT into
# its PREFIX (which must lie inside BUILD_ROOT; installing again is harmless), then builds the
# consumer project MODE (pkgconfig, meson_subproject, meson_wrap (the meson_subproject folder,
# fed the release tarball) or cmake: the folder of that name, with main.cpp) in BUILD_ROOT/consumers/MODE and runs its program. Any failure fails the test.
# OUTBOX_CONSUMER_CXX: the compiler command of the outbox build (e.g. "ccache c++").
set -euo pipefail

mode=$1 build_root=$2 prefix=$3 datadir=$4
shift 4
meson=("$@")
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source_root=$(cd "$here/../.." && pwd)
read -r -a cxx <<<"${OUTBOX_CONSUMER_CXX:-c++}"

case $prefix in
"$build_root"/*) ;;
*)
    echo "error: the prefix $prefix is not inside the build dir $build_root" >&2
    exit 1
    ;;
esac

unset DESTDIR # meson install would put the files under it
"${meson[@]}" install -C "$build_root" --no-rebuild --quiet

work=$build_root/consumers/$mode
rm -rf "$work"
mkdir -p "$work"
cp -R "$here/${mode/meson_wrap/meson_subproject}" "$work/src"
cp "$here/main.cpp" "$work/src/"
cd "$work"

case $mode in
pkgconfig)
    export PKG_CONFIG_PATH=$prefix/$datadir/pkgconfig
    echo "outbox-sqlite $(pkg-config --modversion outbox-sqlite):" \
        "$(pkg-config --cflags --libs outbox-sqlite)"
    (cd src && CXX="${cxx[*]}" ./build.sh)
    app=src/app
    ;;
meson_subproject)
    # The source tree as the subproject, as a git submodule or `meson subprojects download`
    # would put it (a symlink: Meson 1.0 follows it). Forced, so that an outbox installed on
    # this machine cannot stand in for it.
    ln -s "$source_root" src/subprojects/outbox
    CXX="${cxx[*]}" "${meson[@]}" setup build src --force-fallback-for=outbox-sqlite
    "${meson[@]}" compile -C build
    app=build/app
    ;;
meson_wrap)
    # The release tarball (`meson dist`, as scripts/package.sh makes it: committed files only)
    # from subprojects/packagecache/, offline, through the wrap-file scripts/make_wrap.sh
    # writes for it: what a project using a release does.
    "${meson[@]}" dist -C "$build_root" --no-tests --formats xztar --allow-dirty
    tarball=$(ls "$build_root"/meson-dist/outbox-*.tar.xz)
    mkdir -p src/subprojects/packagecache
    rm -f src/subprojects/outbox.wrap
    cp "$tarball" src/subprojects/packagecache/
    # A URL that cannot be reached: the tarball must come from the cache.
    "$source_root/scripts/make_wrap.sh" "$tarball" https://example.invalid/outbox \
        >src/subprojects/outbox.wrap
    CXX="${cxx[*]}" "${meson[@]}" setup build src --wrap-mode=nodownload \
        --force-fallback-for=outbox-sqlite
    grep -q "outbox source from cache" build/meson-logs/meson-log.txt || {
        echo "error: Meson did not take the tarball from the packagecache" >&2
        exit 1
    }
    "${meson[@]}" compile -C build
    app=build/app
    ;;
cmake)
    launcher=("${cxx[@]:0:${#cxx[@]}-1}")
    cmake -S src -B build -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_CXX_COMPILER="${cxx[-1]}" \
        -DCMAKE_CXX_COMPILER_LAUNCHER="$(IFS=';' && echo "${launcher[*]}")"
    cmake --build build
    app=build/app
    ;;
*)
    echo "error: unknown consumer $mode" >&2
    exit 1
    ;;
esac

"$app" "$work/orders.db"
