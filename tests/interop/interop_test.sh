#!/usr/bin/env bash
# The interop test: another implementation reads the trace context the relay put on the wire.
# interop_publish (publish.cpp) writes events with W3C trace contexts through the outbox writer
# and relays them to RabbitMQ (OUTBOX_TEST_AMQP) and to Kafka (OUTBOX_TEST_KAFKA, or a mock
# cluster in its process when that is unset or empty); consume.mjs reads them with amqplib and
# kafkajs and extracts each context with OpenTelemetry JS's W3CTraceContextPropagator. Every
# event must arrive on each transport with the trace id, span id, flags and tracestate set (and
# an event without a context with none). It also relays events in CloudEvents binary and
# structured mode; cloudevents.mjs reads them with the CloudEvents SDK, which must find them
# valid with the id, type, source, subject, time and data bytes the C++ side wrote.
#
# The npm packages (package-lock.json) are installed into NPM_DIR (in the build dir) with its own
# npm cache there, once: a later run whose lock file is unchanged installs nothing.
#   interop_test.sh PUBLISH_EXE SOURCE_DIR NPM_DIR
set -euo pipefail
publish=$1
src=$2
npm_dir=$3

# Missing prerequisites: a skip, or a failure under OUTBOX_REQUIRE_SERVICES=1 (CI).
missing() {
    if [[ ${OUTBOX_REQUIRE_SERVICES:-} == 1 ]]; then echo "$1: FAIL" >&2; exit 1; fi
    echo "$1: SKIP" >&2
    exit 77
}
[[ -n ${OUTBOX_TEST_AMQP:-} ]] || missing "OUTBOX_TEST_AMQP is not set (scripts/services.sh start DIR amqp)"
for cmd in node npm; do
    command -v "$cmd" >/dev/null 2>&1 ||
        missing "$cmd is not installed (Debian: apt-get install nodejs npm; scripts/test.sh installs them)"
done

# The packages: installed again only when the lock file changed (or an install did not finish).
mkdir -p "$npm_dir"
npm_dir=$(cd "$npm_dir" && pwd)
if ! cmp -s "$src/package-lock.json" "$npm_dir/package-lock.json" || [[ ! -f $npm_dir/installed ]]; then
    rm -f "$npm_dir/installed"
    cp "$src/package.json" "$src/package-lock.json" "$npm_dir/"
    echo "npm ci in $npm_dir"
    if ! (cd "$npm_dir" && npm ci --prefer-offline --no-audit --no-fund --loglevel=error \
        --cache "$npm_dir/cache") >&2; then
        echo "npm ci failed in $npm_dir (a first run downloads the packages from the npm registry)" >&2
        exit 1
    fi
    touch "$npm_dir/installed"
fi
# Beside its node_modules: Node resolves the imports from the script's own folder.
cp "$src/consume.mjs" "$src/cloudevents.mjs" "$npm_dir/"

tmp=$(mktemp -d)
pid=""
cleanup() {
    if [[ -n $pid ]]; then
        kill -TERM "$pid" 2>/dev/null
        wait "$pid" 2>/dev/null
    fi
    rm -rf "$tmp"
}
trap cleanup EXIT
# shellcheck source=tests/support/wait_until.sh
. "$src/../support/wait_until.sh"

"$publish" "$OUTBOX_TEST_AMQP" "${OUTBOX_TEST_KAFKA:-}" >"$tmp/published" 2>"$tmp/publish.log" &
pid=$!
ready() { grep -qx ready "$tmp/published" || ! kill -0 "$pid" 2>/dev/null; }
wait_until 120 ready || true
if ! grep -qx ready "$tmp/published"; then
    echo "interop_publish did not get ready:" >&2
    cat "$tmp/published" "$tmp/publish.log" >&2
    exit 1
fi
value() { awk -v k="$1" '$1 == k {print $2}' "$tmp/published"; }
grep '^expect ' "$tmp/published" | sed 's/^expect //' | sort >"$tmp/expected"
count=$(awk '$1 == "amqp"' "$tmp/expected" | wc -l)
kafka_count=$(awk '$1 == "kafka"' "$tmp/expected" | wc -l)
if ((count == 0 || count != kafka_count)); then
    echo "interop_publish expects $count AMQP and $kafka_count Kafka messages" >&2
    exit 1
fi

status=0
(cd "$npm_dir" && node consume.mjs "$OUTBOX_TEST_AMQP" "$(value amqp-queue)" \
    "$(value kafka-bootstrap)" "$(value kafka-topic)" "$count" 60) >"$tmp/consumed" || status=$?
# Kafka is at least once: a record the producer sent twice is read twice, the same.
grep '^got ' "$tmp/consumed" | sed 's/^got //' | sort -u >"$tmp/got" || true

# CloudEvents (both modes) read and validated by the CloudEvents SDK.
grep '^ce-expect ' "$tmp/published" | sed 's/^ce-expect //' | sort >"$tmp/ce-expected"
ce_count=$(awk '$1 == "amqp"' "$tmp/ce-expected" | wc -l)
if ((ce_count == 0 || ce_count != $(awk '$1 == "kafka"' "$tmp/ce-expected" | wc -l))); then
    echo "interop_publish expects unequal or no CloudEvents per transport" >&2
    status=1
fi
(cd "$npm_dir" && node cloudevents.mjs "$OUTBOX_TEST_AMQP" "$(value ce-amqp-queue)" \
    "$(value kafka-bootstrap)" "$(value ce-kafka-topic)" "$ce_count" 60) >"$tmp/ce-consumed" || status=$?
grep '^got ' "$tmp/ce-consumed" | sed 's/^got //' | sort -u >"$tmp/ce-got" || true

kill -TERM "$pid"
publish_status=0
wait "$pid" || publish_status=$?
pid=""

echo "expected (transport, event id, trace id, span id, flags, tracestate):"
cat "$tmp/expected"
if ! diff -u "$tmp/expected" "$tmp/got" >"$tmp/diff"; then
    echo "the Node.js reader extracted something else (- expected, + extracted):" >&2
    cat "$tmp/diff" >&2
    status=1
fi
echo "expected CloudEvents (transport, mode, id, type, source, subject, time, data):"
cat "$tmp/ce-expected"
if ! diff -u "$tmp/ce-expected" "$tmp/ce-got" >"$tmp/ce-diff"; then
    echo "the CloudEvents SDK read something else (- expected, + read):" >&2
    cat "$tmp/ce-diff" >&2
    status=1
fi
if ((publish_status != 0)); then
    echo "interop_publish ended with status $publish_status:" >&2
    cat "$tmp/publish.log" >&2
    status=1
fi
((status == 0)) || { echo "interop: FAILED (node exit or mismatch above)" >&2; exit 1; }
echo "interop: OpenTelemetry JS extracted the same trace context from every message, and the"
echo "CloudEvents SDK read valid, identical events in both modes, on RabbitMQ and Kafka"
