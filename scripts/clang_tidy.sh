#!/usr/bin/env bash
# scripts/clang_tidy.sh BUILD_DIR [CLANG_TIDY]: clang-tidy with .clang-tidy's checks over the
# core's unit tests (tests/unit/*.cpp) as BUILD_DIR compiles them (its compile_commands.json):
# the fewest of them that include every header of the core they include (below), and the
# findings in include/outbox/ count (HeaderFilterRegex), so this checks the core. Two files at a time. Exits 1 on any finding,
# 77 (skip) when BUILD_DIR does not compile those tests (-Dcore_tests=false). The meson test
# `clang_tidy` (suite lint) runs it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
build=${1:?usage: scripts/clang_tidy.sh BUILD_DIR [CLANG_TIDY]}
clang_tidy=${2:-clang-tidy}
db=$build/compile_commands.json
[[ -f $db ]] || { echo "clang_tidy: no $db" >&2; exit 1; }
# The files: the fewest of tests/unit/ whose includes (each one's `-M` output, as BUILD_DIR
# compiles it) together reach every header of include/outbox/ that any of them reaches, chosen
# greedily; clang-tidy over all of them found the same in those headers at seven times the CPU.
# OUTBOX_TIDY_ALL=1: every file (their own test code checked too).
mapfile -t files < <(OUTBOX_TIDY_ALL=${OUTBOX_TIDY_ALL:-0} python3 - "$db" <<'PY'
import json, os, shlex, subprocess, sys
units = {}
for e in json.load(open(sys.argv[1])):
    f = os.path.normpath(os.path.join(e['directory'], e['file']))
    if '/tests/unit/' in f and f.endswith('.cpp') and f not in units:
        units[f] = e
if os.environ['OUTBOX_TIDY_ALL'] == '1':
    print('\n'.join(units))
    sys.exit(0)
reach = {}
for f, e in units.items():
    args, keep, skip = shlex.split(e['command']) if 'command' in e else e['arguments'], [], False
    for a in args:
        if skip or a in ('-c', '-MD', '-MMD'):
            skip = False
            continue
        if a in ('-o', '-MQ', '-MF', '-MT'):
            skip = True
            continue
        keep.append(a)
    deps = subprocess.run(keep + ['-M'], cwd=e['directory'], capture_output=True, text=True,
                          check=True).stdout.replace('\\\n', ' ').split()[1:]
    reach[f] = {os.path.normpath(os.path.join(e['directory'], d)) for d in deps
                if '/include/outbox/' in d}
left = set().union(*reach.values()) if reach else set()
while left:
    best = max(sorted(reach), key=lambda k: len(reach[k] & left))
    print(best)
    left -= reach.pop(best)
PY
)
if ((${#files[@]} == 0)); then
    echo "clang_tidy: $build compiles none of tests/unit/ (-Dcore_tests=false?): skipped"
    exit 77
fi
echo "clang_tidy: ${#files[@]} files of $build"
# --quiet: only findings; a file's run fails on any (WarningsAsErrors '*'), and xargs then too.
out=$(printf '%s\0' "${files[@]}" | xargs -0 -n 1 -P 2 "$clang_tidy" --quiet -p "$build" 2>&1) &&
    rc=0 || rc=$?
grep -v '^[0-9]* warnings\? \(and [0-9]* errors\? \)\?generated\.$' <<<"$out" || true
if ((rc != 0)); then
    echo "clang_tidy: findings (above); fix them, or suppress one with NOLINT(check): reason" >&2
    exit 1
fi
echo "clang_tidy: no findings"
