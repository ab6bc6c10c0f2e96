#!/usr/bin/env bash
# tools/kafka_mock_cluster as a user runs it: started in the background, its bootstrap address
# read from its first line, kcat producing to and consuming from it, an outage by SIGUSR1 and
# SIGUSR2, then SIGTERM ends it with status 0.
#   mock_cluster_tool_test.sh TOOL
set -euo pipefail
tool=$1
if ! command -v kcat >/dev/null 2>&1; then
    if [[ ${OUTBOX_REQUIRE_SERVICES:-} == 1 ]]; then echo "kcat is not installed: FAIL" >&2; exit 1; fi
    echo "kcat is not installed: SKIP" >&2
    exit 77
fi
dir=$(mktemp -d)
pid=""
cleanup() {
    [[ -n $pid ]] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    rm -rf "$dir"
}
trap cleanup EXIT
# A loaded machine starts the cluster and logs its outage late: waits are by the clock, 60 s.
# shellcheck source=tests/support/wait_until.sh
. "$(dirname "${BASH_SOURCE[0]}")/../support/wait_until.sh"
"$tool" --brokers 1 --topic demo:1 >"$dir/addr" 2>"$dir/log" &
pid=$!
wait_until 60 test -s "$dir/addr" || true
addr=$(head -n 1 "$dir/addr")
[[ $addr =~ ^127\.0\.0\.1:[0-9]+$ ]] || { echo "no bootstrap address: '$addr'" >&2; exit 1; }

# A produce request that kcat sent again on a loaded machine (its answer came late) put a
# second copy in the partition once (k1, k2, k1, k2): Kafka is at least once. kcat produces
# idempotently, and the read back counts each record once, in the order it first came.
printf 'k1:one\nk2:two\n' | kcat -b "$addr" -P -t demo -K: -X enable.idempotence=true
read_back() { kcat -b "$addr" -C -t demo -o beginning -e -q -f '%k=%s\n' | awk '!seen[$0]++'; }
got=$(read_back)
[[ $got == $'k1=one\nk2=two' ]] || { echo "read back: '$got'" >&2; exit 1; }

kill -USR1 "$pid"
wait_until 60 grep -q 'every broker down' "$dir/log" || { echo "no outage logged" >&2; exit 1; }
if timeout 10 kcat -b "$addr" -L -m 2 >/dev/null 2>&1; then echo "the cluster answered while down" >&2; exit 1; fi
kill -USR2 "$pid"
wait_until 60 grep -q 'every broker up' "$dir/log" || { echo "no end of outage logged" >&2; exit 1; }
got=$(read_back)
[[ $got == $'k1=one\nk2=two' ]] || { echo "read back after the outage: '$got'" >&2; exit 1; }

kill -TERM "$pid"
status=0
wait "$pid" || status=$?
pid=""
[[ $status == 0 ]] || { echo "exit status $status after SIGTERM" >&2; exit 1; }
echo "kafka_mock_cluster: served kcat at $addr, an outage and back, ended on SIGTERM"
