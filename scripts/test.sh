#!/usr/bin/env bash
# scripts/test.sh: the whole test suite, from a fresh Debian 12 machine (run as root, or with
# sudo available). `.ci/run` runs exactly this.
#
#  1. installs the build packages and the servers (apt-get, only what is missing);
#  2. starts throwaway PostgreSQL, MariaDB, RabbitMQ and NATS servers (scripts/services.sh), two
#     sets of them on different ports (OUTBOX_CI_SERVER_SETS=1: one), while the project
#     builds, in build-ci (clang 14, -Dwerror=true, the tools at -O2, with the benchmarks and the consumer
#     projects of tests/consumers/, installed into build-ci/prefix);
#  3. runs the tests with OUTBOX_REQUIRE_SERVICES=1, so a test whose server is missing fails
#     instead of skipping;
#  4. builds, in the background while build-ci's tests run, the core alone (suite unit and
#     clang-tidy over the core: suite tidy; from the release tarball of `meson dist` when the
#     checkout is clean) under ThreadSanitizer (build-tsan; with OUTBOX_CI_SANITIZE=0 plain,
#     build-core), then, unless OUTBOX_CI_SANITIZE=0, build-asan (ASan + UBSan), and runs their
#     tests;
#  5. stops the servers and prints, as its very last line, the summary of every test log:
#         tests: N passed, M failed[, K skipped]
#     (scripts/test_summary.py). A build that fails counts as one failed test.
#
# Exits non-zero when a build failed, a test failed, or no test ran.

set -euo pipefail

# The repository root is the parent of this script's directory.
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# --- CI-friendly defaults (each can be overridden from the environment) ----------------------
export CI=${CI:-true}
export DEBIAN_FRONTEND=noninteractive
export LANG=${LANG:-C.UTF-8}
export TERM=${TERM:-dumb}
export PYTHONDONTWRITEBYTECODE=1
export PYTHONUNBUFFERED=1
export NINJA_STATUS=${NINJA_STATUS:-"[%f/%t %es] "}
# ccache: the cache survives between CI runs on the same machine. Meson looks for it only when CC
# and CXX are unset; the builds here name their compiler (clang 14), so they name it too.
export CCACHE_DIR=${CCACHE_DIR:-${HOME:-/root}/.cache/ccache}
export CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-2G}
export BOOST_TEST_COLOR_OUTPUT=${BOOST_TEST_COLOR_OUTPUT:-no}
# Sanitizer runs stop at the first report, with a stack trace (only the asan build uses them).
export ASAN_OPTIONS=${ASAN_OPTIONS:-halt_on_error=1:abort_on_error=1:detect_leaks=1:print_summary=1}
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:abort_on_error=1:second_deadlock_stack=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:abort_on_error=1:print_stacktrace=1:print_summary=1}
# A leak of SOCI's, not ours, suppressed (the file says which and why).
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$PWD/scripts/lsan.supp:print_suppressions=0}

readonly BUILD_DIR=build-ci
readonly ASAN_DIR=build-asan
readonly DIST_DIR=build-dist # the release tarball, unpacked: the core build's source in CI
# The build packages: the core's (compilers, Meson, Boost.Test, the tool's libraries, the checks)
# here, each adapter's in adapters/<name>/debian-packages and a test's in
# tests/<name>/debian-packages (one a line, # starts a comment). A line `PACKAGE if-missing
# COMMAND` installs PACKAGE only when COMMAND is not on the PATH: Node.js and npm for
# tests/interop/, which a machine may have from elsewhere (NodeSource's nodejs bundles npm, and
# Debian's npm package conflicts with it).
build_packages=(
    meson ninja-build pkg-config cmake g++ clang-14 libclang-rt-14-dev ccache python3 git clang-format
    libboost-test-dev nlohmann-json3-dev
    libcli11-dev libtomlplusplus-dev procps clang-tidy doxygen
    debhelper lintian autopkgtest help2man
    libboost-dev # debian/control's Build-Depends (the packages test); libboost-test-dev lacks it
)
for list in adapters/*/debian-packages tests/*/debian-packages; do
    while read -r pkg rest || [[ -n $pkg ]]; do
        [[ -n $pkg && $pkg != \#* ]] || continue
        if [[ $rest =~ ^if-missing[[:space:]]+([^[:space:]#]+)[[:space:]]*(#.*)?$ ]]; then
            command -v "${BASH_REMATCH[1]}" >/dev/null 2>&1 && continue
        elif [[ -n $rest && $rest != \#* ]]; then
            echo "error: $list: one package a line (or PACKAGE if-missing COMMAND), not '$pkg $rest'" >&2
            exit 1
        fi
        [[ " ${build_packages[*]} " == *" $pkg "* ]] || build_packages+=("$pkg")
    done <"$list"
done
readonly BUILD_PACKAGES=("${build_packages[@]}")

# CPU time the machine spent busy (every core: user, nice, system, irq, softirq, steal), in
# seconds since boot (/proc/stat counts in USER_HZ, 100 a second): the sections print it, so
# that a log shows where the CPU went.
cpu_busy() { awk '/^cpu / {print int(($2 + $3 + $4 + $7 + $8 + $9) / 100)}' /proc/stat; }
CPU_BUSY_AT_START=$(cpu_busy)
readonly CPU_BUSY_AT_START
section() {
    printf '\n=== %s (at %ds, %d CPU-s busy) ===\n' "$*" "$SECONDS" $(($(cpu_busy) - CPU_BUSY_AT_START))
}

# --- cleanup and the closing summary line ----------------------------------------------------
# Until the tests have run and been counted, the summary says one failure: whatever stops the
# script early (a failed install, build or service start) is reported as such.
summary="tests: 0 passed, 1 failed"
summary_rc=1
svc_dir=""
svc_job=""
svc2_dir=""
svc2_job=""
bg_job=""

# shellcheck disable=SC2317 # invoked by the EXIT trap, not unreachable
finish() {
    local rc=$?
    set +e
    trap - EXIT INT TERM
    # A background build still running (the script ended early): end it, its process group.
    if [[ -n $bg_job ]]; then
        kill -TERM -- "-$bg_job" 2>/dev/null
        wait "$bg_job" 2>/dev/null
    fi
    # A service start still in progress must finish before stop can see all its pids.
    [[ -z $svc_job ]] || wait "$svc_job" 2>/dev/null
    [[ -z $svc2_job ]] || wait "$svc2_job" 2>/dev/null
    local d
    for d in "$svc_dir" "$svc2_dir"; do
        [[ -n $d ]] || continue
        section "stopping services in $d"
        scripts/services.sh stop "$d"
        rm -rf "$d"
    done
    # The summary is the last line of the output, and a failure in it fails the run.
    echo "$summary"
    if ((rc == 0 && summary_rc != 0)); then
        rc=1
    fi
    exit "$rc"
}
trap finish EXIT
# Make an interrupted run clean up as well (bash runs the EXIT trap on exit, not on a signal).
trap 'exit 130' INT
trap 'exit 143' TERM

# --- 1. packages -----------------------------------------------------------------------------
section "packages"
sudo=()
if ((EUID != 0)) && command -v sudo >/dev/null 2>&1; then
    sudo=(sudo)
fi
missing=()
for pkg in "${BUILD_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'ok installed' || missing+=("$pkg")
done
if ((${#missing[@]} > 0)); then
    echo "installing: ${missing[*]}"
    "${sudo[@]}" apt-get update -q
    "${sudo[@]}" apt-get install -y -q "${missing[@]}"
else
    echo "build packages already installed"
fi
scripts/services.sh install

# --- 2. services (in the background) and the build -------------------------------------------
# A short path under /tmp: the servers' Unix sockets live in it (108-byte limit).
svc_dir=$(mktemp -d /tmp/outbox-ci.XXXXXX)
section "starting services in $svc_dir (in the background)"
scripts/services.sh start "$svc_dir" >"$svc_dir/start.log" 2>&1 &
svc_job=$!
# The second set: the tests run in six lanes instead of three (scripts/test_lanes.sh), each
# server's tests on one set only (set 2: its own ports, see scripts/services.sh).
if [[ ${OUTBOX_CI_SERVER_SETS:-2} == 2 ]]; then
    svc2_dir=$(mktemp -d /tmp/outbox-ci2.XXXXXX)
    section "starting a second set of services in $svc2_dir (in the background)"
    OUTBOX_SERVICES_SET=2 scripts/services.sh start "$svc2_dir" >"$svc2_dir/start.log" 2>&1 &
    svc2_job=$!
fi

# The compiler of the clang 14 builds (through ccache when there is one).
clang_env=(CC=clang-14 CXX=clang++-14)
command -v ccache >/dev/null && clang_env=("CC=ccache clang-14" "CXX=ccache clang++-14")

# Configures a fresh build directory with clang 14 and builds it. Usage: build DIR [meson options...]
build() {
    local dir=$1
    shift
    rm -rf "$dir"
    env "${clang_env[@]}" meson setup "$dir" -Dwerror=true "$@" && ninja -C "$dir"
}

section "build $BUILD_DIR"
# The benchmarks are off by default (users need not build them); CI builds them here, and the
# consumer projects (tests/consumers/), which install this build into a prefix inside it. The
# test executables, the examples and the benchmarks (run in their smoke mode) are compiled at
# -O0 (-Dtest_optimization=0: their -O2 compile was most of this build; see the root
# meson.build); the library runs at -O2 in the tools, the fault harness driving every adapter.
# No debug information (-Ddebug=false): it was a quarter of each test's compile time, and the
# sanitizer build, whose reports need it, has its own. The tests of the core alone (suite unit,
# e2e_memory_memory) are left to the sanitizer builds (-Dcore_tests=false): once, not twice. Every adapter is required
# (-Dauto_features=enabled): a library missing from its debian-packages is a configure error
# naming it, not an adapter left out with its tests while the run stays green. Compiled with
# clang 14: it compiled this build in half g++ 12's CPU time (the -O0 tests 2.2 times faster,
# the -O2 tools 1.2), and CI is bound by the two cores. g++ 12 compiles the outbox command, with
# every adapter, in the test debian_packages (with -Werror: meson.build).
if ! build "$BUILD_DIR" -Doptimization=2 -Ddebug=false -Dbench=true -Dauto_features=enabled \
    -Dconsumer_tests=true -Dpackage_tests=true -Dtest_optimization=0 -Dcore_tests=false \
    --prefix="$PWD/$BUILD_DIR/prefix"; then
    echo "error: the build in $BUILD_DIR failed" >&2
    exit 1
fi

# --- 2b. the other two builds, in the background while build-ci's tests run ----------------
# Those tests mostly wait (on servers, on faults and restarts), so the two cores are free for
# compiling: the core-only build build-tsan (no database or broker library: the core's own
# tests that run threads, which build-ci leaves out, under ThreadSanitizer, -Dcore_tests=threaded;
# it replaced a plain core build of g++, which cost about 300 CPU-s more and found nothing
# the g++ build-ci of then and build-tsan did not; the core's single-threaded tests, -Dcore_tests=single, build in
# build-asan: each core test is compiled once, under the sanitizer that can fail it) and the
# sanitizer build build-asan, one after the other, niced, each with its own log. -fno-sanitize=vptr: UBSan's vptr check needs the
# typeinfo of SOCI's backend classes, which Debian's libsoci does not export (link error
# "undefined typeinfo for soci::sqlite3_session_backend"). build-asan
# builds each adapter end to end once (paired with the in-memory store or transport) instead of
# the whole matrix, which build-ci runs: the sanitizers see every adapter's code, at a fraction
# of the compile time; it runs the fault harness on a cover of the pairs (each store, claim
# policy and transport once: -Dfault_pairs=each_once), build-ci on all of them; and it leaves
# the examples to build-ci (they drive the library as the e2e suites do); the outbox tool's
# three test files run once each, each on another store (the same option; build-ci runs all
# nine). (Sanitizers at -O2 would spare this build, but compile several times slower than the
# -O2 and -O0 builds together.) It is compiled with clang 14: with the sanitizers, clang compiled this project in
# half g++ 12's time (a test of the end-to-end matrix: 9.8 s against 19.5 s). Its debug information is
# line tables only (-gline-tables-only): enough for the reports' stack traces (function, file,
# line), and a tenth of each unit's compile time less than full -g.
sanitize=0
[[ ${OUTBOX_CI_SANITIZE:-1} == 1 ]] && sanitize=1
# The core-only build: build-tsan, under ThreadSanitizer; build-core without the sanitizers.
CORE_DIR=build-core
((sanitize)) && CORE_DIR=build-tsan
readonly CORE_DIR
rm -f build-core.rc build-tsan.rc "$ASAN_DIR.rc"
# The core build builds from the release tarball (`meson dist`) when the checkout is clean, as
# in CI: so every run shows that the tarball builds and passes the unit suite in a fresh
# directory. A working tree with changes builds from itself (the tarball would hold HEAD only).
# Made here, before any test: the consumer test consumer_meson_wrap writes the same file.
core_source=.
rm -rf "$DIST_DIR"
if [[ -d .git && -z $(git status --porcelain) ]] &&
    meson dist -C "$BUILD_DIR" --no-tests --formats xztar >"$DIST_DIR.log" 2>&1; then
    mkdir -p "$DIST_DIR" && tar -C "$DIST_DIR" -xf "$BUILD_DIR"/meson-dist/outbox-*.tar.xz &&
        core_source=$(echo "$DIST_DIR"/outbox-*)
fi
echo "$CORE_DIR builds from: $core_source"
set -m # the background job gets a process group of its own (finish ends it as a whole)
(
    set +e
    # The core alone (no database or broker library: suite unit, e2e_memory_memory and
    # clang-tidy over the core), from $core_source. Under ThreadSanitizer (the relay's pipeline
    # worker, the consumer's threads in the memory store's tests) with clang 14, line tables for
    # the reports; with OUTBOX_CI_SANITIZE=0, plain, with the default c++ (g++ 12 on Debian),
    # its tests at -O0 as in build-ci.
    rm -rf "$CORE_DIR"
    echo "$CORE_DIR: from the source in $core_source" >"$CORE_DIR.log"
    core_env=()
    core_args=(-Dwerror=true -Dauto_features=disabled -Dtests=enabled -Dexamples=false -Dbench=false)
    if ((sanitize)); then
        core_env=("${clang_env[@]}")
        core_args+=(--buildtype=debug -Db_sanitize=thread -Db_lundef=false -Dcpp_args=-gline-tables-only
            -Dcore_tests=threaded)
    else
        core_args+=(-Dtest_optimization=0 -Ddebug=false)
    fi
    env "${core_env[@]}" nice -n 10 meson setup "$CORE_DIR" "$core_source" "${core_args[@]}" \
        >>"$CORE_DIR.log" 2>&1 &&
        nice -n 10 ninja -C "$CORE_DIR" >>"$CORE_DIR.log" 2>&1
    echo $? >"$CORE_DIR.rc.part" && mv "$CORE_DIR.rc.part" "$CORE_DIR.rc" # whole, once seen
    if ((sanitize)); then
        rm -rf "$ASAN_DIR"
        env "${clang_env[@]}" nice -n 10 meson setup "$ASAN_DIR" -Dwerror=true \
            --buildtype=debug -De2e_pairs=with_memory -Dexamples=false \
            -Dfault_pairs=each_once -Dauto_features=enabled -Dcore_tests=single \
            -Db_sanitize=address,undefined -Db_lundef=false \
            -Dcpp_args='-fno-sanitize=vptr -gline-tables-only' \
            -Dcpp_link_args=-fno-sanitize=vptr >"$ASAN_DIR.log" 2>&1 &&
            nice -n 10 ninja -C "$ASAN_DIR" >>"$ASAN_DIR.log" 2>&1
        echo $? >"$ASAN_DIR.rc"
    fi
) &
bg_job=$!
set +m
section "building $CORE_DIR and $ASAN_DIR in the background (logs: $CORE_DIR.log, $ASAN_DIR.log)"

# Waits for a background `scripts/services.sh start` and shows its log; a start that failed
# ends the run. Usage: services_ready JOB DIR
services_ready() {
    local rc=0
    wait "$1" || rc=$?
    cat "$2/start.log"
    if ((rc != 0)); then
        echo "error: scripts/services.sh start $2 failed (exit $rc)" >&2
        exit 1
    fi
}
section "services"
services_ready "$svc_job" "$svc_dir"
svc_job=""
if [[ -n $svc2_job ]]; then
    services_ready "$svc2_job" "$svc2_dir"
    svc2_job=""
    export OUTBOX_SECOND_SERVICES_DIR=$svc2_dir
fi
# shellcheck source=/dev/null
. "$svc_dir/env.sh"
export OUTBOX_REQUIRE_SERVICES=1
env | grep '^OUTBOX_' | sort

# --- 3. tests ---------------------------------------------------------------------------------
testlogs=()
build_failures=0
meson_failed=0

# The lanes: run_tests DIR [--no-suite S]... [meson test args...] (scripts/test_lanes.sh).
# shellcheck source=scripts/test_lanes.sh
. scripts/test_lanes.sh

section "test $BUILD_DIR"
run_tests "$BUILD_DIR"

# --- 3b. the background builds, and their tests ----------------------------------------------
# The core build comes first: its tests run while build-asan still builds.
section "waiting for the background build of $CORE_DIR"
while [[ ! -e $CORE_DIR.rc ]] && kill -0 "$bg_job" 2>/dev/null; do sleep 1; done
# Prints DIR's build log and tells whether it built. Usage: built DIR
built() {
    local dir=$1
    section "build $dir (its log)"
    tail -n 40 "$dir.log"
    if [[ $(cat "$dir.rc" 2>/dev/null) != 0 ]]; then
        echo "error: the build in $dir failed (whole log: $dir.log)" >&2
        build_failures=$((build_failures + 1))
        return 1
    fi
}
if built "$CORE_DIR"; then
    # Boost.Test must not catch ThreadSanitizer's abort (see build-asan's tests below); the
    # formatting check (suite lint) ran in build-ci.
    section "test $CORE_DIR"
    BOOST_TEST_CATCH_SYSTEM_ERRORS=no run_tests "$CORE_DIR" --timeout-multiplier 3 --no-suite lint
fi
section "waiting for the background build of $ASAN_DIR"
bg_rc=0
wait "$bg_job" || bg_rc=$?
bg_job=""
if ((sanitize)) && built "$ASAN_DIR"; then
    # Boost.Test must not catch the sanitizers' abort: it reported the failure, carried on,
    # and the process then hung at exit until meson's timeout (900 s) killed it. The lint suite
    # (formatting) is the same in every build, and the planted-defect runs of the fault harness
    # test the harness, not the library: build-ci ran them.
    section "test $ASAN_DIR"
    BOOST_TEST_CATCH_SYSTEM_ERRORS=no run_tests "$ASAN_DIR" --timeout-multiplier 3 \
        --no-suite lint --no-suite tidy --no-suite faults_planted
fi
((bg_rc == 0)) || echo "note: the background build job exited $bg_rc"

# --- 4. summary (printed last, by finish) -----------------------------------------------------
section "summary"
summary_rc=0
summary=$(python3 scripts/test_summary.py --add-failed "$build_failures" "${testlogs[@]}") || summary_rc=$?
if ((meson_failed && summary_rc == 0)); then
    # meson test failed although every logged test passed (e.g. it could not run them all):
    # do not call that a success.
    echo "error: meson test failed although its log shows no failing test" >&2
    summary_rc=1
fi
exit "$summary_rc"
