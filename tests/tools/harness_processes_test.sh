#!/usr/bin/env bash
# The fault harness's own processes, as a test runner sees them:
#  1. an orchestrator killed with SIGKILL leaves no process behind (its writer, relays and
#     consumers, and on Kafka the run's mock cluster, all end with it), on SQLite x ZeroMQ and
#     on SQLite x Kafka;
#  2. a Kafka mock broker whose port is taken when it goes down (--take-kafka-port) fails the
#     run with exit 1 and a message that says so, within seconds, not an abort or a hang, and
#     leaves no process behind either.
#   harness_processes_test.sh FAULT_HARNESS
set -euo pipefail
harness=$1
top=$(mktemp -d /tmp/outbox-harness-test.XXXXXX)
orchestrator=""
cleanup() {
    [[ -n $orchestrator ]] && kill -KILL "$orchestrator" 2>/dev/null
    # Whatever a failed check left: only processes of this test's runs (their --dir is in $top).
    for pid in $(run_pids "$top"); do kill -KILL "$pid" 2>/dev/null || true; done
    rm -rf "$top"
}
trap cleanup EXIT

fail() {
    echo "FAIL: $*" >&2
    for f in "$top"/*.err; do [[ -s $f ]] && { echo "--- $f" >&2; tail -n 30 "$f" >&2; }; done
    exit 1
}

# The live processes (zombies are gone: pid 1 here may never reap them) whose command line
# mentions $1 (a run directory: letters, digits, dots and slashes; the dots escaped for pgrep).
# One pgrep, not a grep per process of the machine: that took seconds a call on a loaded one.
run_pids() {
    local pid state
    for pid in $(pgrep -f -- "${1//./\\.}"); do
        [[ $pid == "$$" || $pid == "$BASHPID" ]] && continue
        state=$(sed 's/.*) //' "/proc/$pid/stat" 2>/dev/null | cut -d' ' -f1) || continue
        [[ $state == [ZX] || -z $state ]] || echo "$pid"
    done
}

# shellcheck source=tests/support/wait_until.sh
. "$(dirname "${BASH_SOURCE[0]}")/../support/wait_until.sh"
# Whether run dir $1 has at least $2 live processes; whether it has none.
has_parts() { (($(run_pids "$1" | wc -l) >= $2)); }
none_left() { [[ -z $(run_pids "$1") ]]; }

# 1. SIGKILL. A long run (the writer paces 100,000 events at 200/s), no faults of its own.
for transport in zeromq kafka; do
    run=$top/kill-$transport
    # parts: writer, relay, consumer (Kafka: two consumers and the mock cluster)
    want=3
    [[ $transport == kafka ]] && want=5
    "$harness" --store sqlite --transport "$transport" --events 100000 --rate 200 \
        --relay-kills 0 --consumer-kills 0 --dir "$run" >"$top/kill-$transport.out" \
        2>"$top/kill-$transport.err" &
    orchestrator=$!
    # Its children name the run's directory on their command lines (the orchestrator too).
    wait_until 60 has_parts "$run" $((want + 1)) ||
        fail "$transport: the run's $want parts did not start: $(run_pids "$run" | wc -l) processes"
    kill -KILL "$orchestrator"
    wait "$orchestrator" 2>/dev/null || true
    orchestrator=""
    if ! wait_until 10 none_left "$run"; then
        ps -o pid,ppid,stat,args -p "$(run_pids "$run" | paste -sd,)" >&2 || true
        fail "$transport: processes of the run outlived the orchestrator killed with SIGKILL"
    fi
    echo "sqlite x $transport: orchestrator killed, its $want parts gone"
done

# 2. A broker's port taken as it goes down: exit 1, the reason, no abort, nothing left.
run=$top/port
start=$SECONDS
rc=0
"$harness" --store sqlite --transport kafka --events 600 --relay-kills 0 --consumer-kills 0 \
    --broker-outages 1 --take-kafka-port --dir "$run" >"$top/port.out" 2>"$top/port.err" || rc=$?
took=$((SECONDS - start))
((rc == 1)) || fail "--take-kafka-port: exit $rc, expected 1 (the harness failed)"
grep -q 'Kafka mock cluster' "$top/port.err" ||
    fail "--take-kafka-port: the error does not name the Kafka mock cluster"
grep -q 'cannot bind its port again' "$top/port.err" ||
    fail "--take-kafka-port: the error does not say why the cluster ended"
wait_until 10 none_left "$run" || fail "--take-kafka-port: processes of the run outlived it"
echo "sqlite x kafka, a broker's port taken: exit 1 in ${took} s, with the reason:"
grep 'fault_harness: ' "$top/port.err" | tail -n 3
