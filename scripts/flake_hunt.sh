#!/usr/bin/env bash
# scripts/flake_hunt.sh: runs Meson suites again and again, with CPU burners beside them, to find
# tests that fail only sometimes (a flaky test is a defect of the suite, never a retry).
#
#   scripts/flake_hunt.sh [--build DIR] [--runs N] [--load K] [--lanes] [--no-suite S]... [SUITE...]
#
#   --build DIR  the build directory (default build-ci; configured as scripts/test.sh configures
#                it when missing, and brought up to date either way)
#   --runs N     how many times every chosen test runs (default 5)
#   --load K     K processes burning a CPU each beside the tests (default 0)
#   --no-suite S leave out the tests of suite S (repeatable; meson test --no-suite)
#   --lanes      run each time as scripts/test.sh does: in lanes by server (scripts/test_lanes.sh),
#                so that two tests sharing a database server or RabbitMQ never run at once; every
#                test but the --no-suite ones (no SUITE then). Without it, one `meson test
#                --num-processes 2`: right for tests that need no server, not for those that do.
#   SUITE...     Meson suites (meson test --suite); all when none is named
#
# The servers the chosen tests need (the suites named after a server of scripts/services/:
# postgresql, mysql, amqp) are started as scripts/test.sh starts them (scripts/services.sh, a directory of their own, stopped at the end)
# unless their OUTBOX_TEST_* address is already set (with --lanes, a second set beside them, as
# scripts/test.sh does); OUTBOX_REQUIRE_SERVICES=1, so a test whose
# server is missing fails. Each run is one `meson test` over the chosen suites: tests marked not
# parallel still run alone in it. Prints a table per test (runs, failures, slowest time), the
# end of the output of every failed run, and last the line
#     flake hunt: T tests, R runs, F failed
# (T tests, each run R times, F failed runs in all). Exits non-zero when anything failed.
# Logs stay in DIR/meson-logs/flake-hunt/.
#
# Examples: every test that needs no server, 10 times beside two burners; every test, in lanes:
#   scripts/flake_hunt.sh --runs 10 --load 2 --no-suite postgresql --no-suite mysql --no-suite amqp
#   scripts/flake_hunt.sh --runs 5 --lanes

set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

build="build-ci"
runs=5
load=0
lanes=0
suites=()
excluded=()
while (($#)); do
    case $1 in
        --build) build=$2; shift 2 ;;
        --runs) runs=$2; shift 2 ;;
        --load) load=$2; shift 2 ;;
        --no-suite) excluded+=("$2"); shift 2 ;;
        --lanes) lanes=1; shift ;;
        -h|--help) sed -n '2,30p' "$0"; exit 0 ;;
        --*) echo "flake_hunt: unknown option $1" >&2; exit 2 ;;
        *) suites+=("$1"); shift ;;
    esac
done
[[ $runs =~ ^[1-9][0-9]*$ ]] || { echo "flake_hunt: --runs must be a positive number" >&2; exit 2; }
[[ $load =~ ^[0-9]+$ ]] || { echo "flake_hunt: --load must be a number" >&2; exit 2; }
if ((lanes)) && ((${#suites[@]} > 0)); then
    echo "flake_hunt: --lanes runs every suite but the --no-suite ones; name no SUITE" >&2
    exit 2
fi

export CI=${CI:-true} LANG=${LANG:-C.UTF-8} BOOST_TEST_COLOR_OUTPUT=no OUTBOX_REQUIRE_SERVICES=1
export ASAN_OPTIONS=${ASAN_OPTIONS:-halt_on_error=1:abort_on_error=1:detect_leaks=1:print_summary=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:abort_on_error=1:print_stacktrace=1:print_summary=1}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$PWD/scripts/lsan.supp:print_suppressions=0}

burners=()
svc_dir=""
svc2_dir=""
finish() {
    local rc=$?
    set +e
    for pid in "${burners[@]}"; do kill "$pid" 2>/dev/null; done
    for pid in "${burners[@]}"; do wait "$pid" 2>/dev/null; done
    for d in "$svc_dir" "$svc2_dir"; do
        [[ -n $d ]] || continue
        scripts/services.sh stop "$d"
        rm -rf "$d"
    done
    exit "$rc"
}
trap finish EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if [[ ! -f $build/build.ninja ]]; then
    echo "flake_hunt: configuring $build (as scripts/test.sh does)"
    meson setup "$build" -Dwerror=true -Doptimization=2 -Ddebug=false -Dbench=true \
        -Dconsumer_tests=true -Dtest_optimization=0 --prefix="$PWD/$build/prefix"
fi
ninja -C "$build" >/dev/null

suite_args=()
for s in "${suites[@]}"; do suite_args+=(--suite "$s"); done
for s in "${excluded[@]}"; do suite_args+=(--no-suite "$s"); done

# The servers the chosen tests need: from Meson's list of tests and their suites, a server's
# suite being its name (scripts/test_groups.py --servers: the files of scripts/services/).
servers=$(python3 scripts/test_groups.py --servers)
mapfile -t needed < <(meson introspect --tests "$build" | python3 -c '
import json, sys
servers = set(sys.argv[1].split())
chosen = {a for a in sys.argv[2:] if not a.startswith("-")}
left_out = {a[1:] for a in sys.argv[2:] if a.startswith("-")}
need = set()
for t in json.load(sys.stdin):
    suites = {s.split(":")[-1] for s in t["suite"]}
    if (chosen and not (suites & chosen)) or suites & left_out:
        continue
    need |= suites & servers
print("\n".join(sorted(need)))' "$servers" "${suites[@]}" "${excluded[@]/#/-}")
start=()
for s in "${needed[@]}"; do
    # Started unless its address is set already: OUTBOX_TEST_<NAME> (scripts/services/common.sh).
    address=OUTBOX_TEST_${s^^}
    [[ -n ${!address:-} ]] || start+=("$s")
done
if ((${#start[@]} > 0)); then
    svc_dir=$(mktemp -d /tmp/outbox-hunt.XXXXXX)
    scripts/services.sh start "$svc_dir" "${start[@]}"
    # shellcheck source=/dev/null
    . "$svc_dir/env.sh"
    # In lanes, a second set as scripts/test.sh starts it (OUTBOX_CI_SERVER_SETS=1: none).
    if ((lanes)) && [[ ${OUTBOX_CI_SERVER_SETS:-2} == 2 && -z ${OUTBOX_SECOND_SERVICES_DIR:-} ]]; then
        svc2_dir=$(mktemp -d /tmp/outbox-hunt2.XXXXXX)
        OUTBOX_SERVICES_SET=2 scripts/services.sh start "$svc2_dir" "${start[@]}"
        export OUTBOX_SECOND_SERVICES_DIR=$svc2_dir
    fi
fi

for ((i = 0; i < load; i++)); do
    (while :; do :; done) &
    burners+=($!)
done

logs=$build/meson-logs/flake-hunt
rm -rf "$logs"
mkdir -p "$logs"
echo "flake_hunt: ${suites[*]:-every suite}${excluded:+ but ${excluded[*]}}, $runs runs, $load CPU burners${start:+, servers: ${start[*]}}"
# shellcheck source=scripts/test_lanes.sh
. scripts/test_lanes.sh
for ((r = 1; r <= runs; r++)); do
    rc=0
    if ((lanes)); then
        testlogs=()
        meson_failed=0
        # suite_args holds --no-suite pairs only here (--lanes takes no SUITE)
        run_tests "$build" "${suite_args[@]}" >"$logs/run-$r.out" 2>&1
        rc=$meson_failed
        for f in "${testlogs[@]}"; do
            [[ -e $f ]] && mv "$f" "$logs/run-$r-$(basename "$f")"
        done
    else
        meson test -C "$build" --no-rebuild --num-processes 2 --logbase "flake-hunt/run-$r" \
            "${suite_args[@]}" >"$logs/run-$r.out" 2>&1 || rc=$?
    fi
    printf 'run %d of %d: meson test exited %d (%s)\n' "$r" "$runs" "$rc" \
        "$(grep -E '^(Ok|Fail|Timeout):' "$logs/run-$r.out" | tr -s ' ' | awk '{a[$1]+=$2} END {for (k in a) printf "%s %d ", k, a[k]}')"
done

python3 - "$logs" "$runs" <<'EOF'
import json, pathlib, sys
logs, runs = pathlib.Path(sys.argv[1]), int(sys.argv[2])
tests = {}
failed_runs = []
for r in range(1, runs + 1):
    files = sorted(logs.glob(f"run-{r}.json")) + sorted(logs.glob(f"run-{r}-*.json"))
    if not files:
        failed_runs.append(("meson test", r, "no test log (meson test could not run)"))
        continue
    for line in (l for f in files for l in f.read_text().splitlines()):
        t = json.loads(line)
        row = tests.setdefault(t["name"], {"runs": 0, "failed": 0, "slowest": 0.0})
        row["runs"] += 1
        row["slowest"] = max(row["slowest"], t["duration"])
        if t["result"] not in ("OK", "EXPECTEDFAIL", "SKIP"):
            row["failed"] += 1
            out = (t.get("stdout") or "") + (t.get("stderr") or "")
            failed_runs.append((t["name"], r, t["result"] + "\n" + "\n".join(out.splitlines()[-30:])))
print(f"\n| test | runs | failed | slowest s |\n|---|---|---|---|")
for name in sorted(tests, key=lambda n: (-tests[n]["failed"], n)):
    row = tests[name]
    print(f"| {name} | {row['runs']} | {row['failed']} | {row['slowest']:.1f} |")
for name, r, text in failed_runs:
    print(f"\n----- {name}, run {r} -----\n{text}")
failed = sum(row["failed"] for row in tests.values()) + sum(1 for f in failed_runs if f[0] == "meson test")
print(f"\nflake hunt: {len(tests)} tests, {runs} runs, {failed} failed")
sys.exit(1 if failed else 0)
EOF
