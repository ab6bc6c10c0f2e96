#!/usr/bin/env bash
# docs/getting-started.md's "Run it" block (the sh block after `<!-- run: ... -->`), run as a
# reader runs it, in a fresh directory with place_order, ship_orders and `outbox` on the PATH,
# against the test servers: the variables of step 3 point at them, and the relay's metrics
# port is one below the ephemeral range (the PostgreSQL port + 4032; one per server set).
# Then it checks what the page says happened: order 42 shipped once, the event published and
# marked so, the relay stopped with exit 0 after publishing it.
#   getting_started_test.sh PAGE OUTBOX_TOOL PLACE_ORDER SHIP_ORDERS
set -euo pipefail
page=$1 tool=$2 place_order=$3 ship_orders=$4
pg=${OUTBOX_TEST_POSTGRESQL:-} amqp=${OUTBOX_TEST_AMQP:-}
if [[ -z $pg || -z $amqp ]]; then
    echo "getting_started: OUTBOX_TEST_POSTGRESQL and OUTBOX_TEST_AMQP are needed" >&2
    [[ ${OUTBOX_REQUIRE_SERVICES:-} == 1 ]] && exit 1
    exit 77
fi

block=$(awk '/^<!-- run: tests\/tools\/getting_started_test.sh -->$/ { mark = 1; next }
             mark && /^```sh$/ { inside = 1; next }
             inside && /^```$/ { exit }
             inside { print }' "$page")
[[ -n $block ]] || { echo "FAIL: no run block in $page" >&2; exit 1; }

declare -A kw
for pair in $pg; do kw[${pair%%=*}]=${pair#*=}; done
port=$((kw[port] + 4032))
dir=$(mktemp -d /tmp/outbox-getting-started.XXXXXX)
schema=getting_started_$$
group=""
cleanup() {
    if [[ -n $group ]]; then kill -KILL -- "-$group" 2>/dev/null || true; fi
    psql "$pg" -qc "DROP SCHEMA IF EXISTS $schema CASCADE" >/dev/null 2>&1 || true
    rm -rf "$dir"
}
trap cleanup EXIT

mkdir "$dir/bin"
ln -s "$tool" "$dir/bin/outbox"
ln -s "$place_order" "$dir/place_order"
ln -s "$ship_orders" "$dir/ship_orders"
# A schema of the run's own: PGOPTIONS reaches every libpq connection of the block. The queue is
# the broker's: a run killed before it drained leaves its event there, so start without it.
psql "$pg" -qc "CREATE SCHEMA $schema"
export PGOPTIONS="-csearch_path=$schema"
if [[ -n ${OUTBOX_SERVICES_DIR:-} && -f $OUTBOX_SERVICES_DIR/rabbitmq/ctl-env.sh ]]; then
    # shellcheck source=/dev/null
    (. "$OUTBOX_SERVICES_DIR/rabbitmq/ctl-env.sh" && rabbitmqctl -q delete_queue shipping) \
        >/dev/null 2>&1 || true
fi

script="set -euo pipefail
STORE='postgresql://${kw[user]}:${kw[password]}@${kw[host]}:${kw[port]}/${kw[dbname]}'
CONNINFO='$pg'
BROKER='$amqp'
outbox migrate --store \"\$STORE\"
${block//127.0.0.1:9464/127.0.0.1:$port}"
# Its own process group, so that a failed step leaves no relay or consumer behind.
cd "$dir"
set +e
PATH="$dir/bin:$PATH" setsid bash -c "$script" >"$dir/out" 2>"$dir/err" </dev/null &
group=$!
wait_s=0
while kill -0 "$group" 2>/dev/null && ((wait_s < 120)); do sleep 1; wait_s=$((wait_s + 1)); done
if kill -0 "$group" 2>/dev/null; then
    echo "FAIL: the block did not end within 120 s" >&2
    rc=124
else
    wait "$group"
    rc=$?
    group=""
fi
set -e
cat "$dir/out"
fail() {
    echo "FAIL: $*" >&2
    echo "--- stderr" >&2
    cat "$dir/err" >&2
    exit 1
}
((rc == 0)) || fail "the block exited $rc"
grep -qx "shipping order 42" "$dir/out" || fail "no 'shipping order 42'"
grep -qx "applied 1, duplicates skipped 0" "$dir/out" || fail "ship_orders did not apply one"
grep -q "stopped: published 1," "$dir/err" || fail "the relay did not stop after publishing 1"
shipped=$(psql "$pg" -Atc "SELECT string_agg(order_id, ',') FROM $schema.shipments")
[[ $shipped == 42 ]] || fail "shipments: '$shipped', not 42"
pending=$(psql "$pg" -Atc "SELECT count(*) FROM $schema.outbox WHERE state <> 1")
[[ $pending == 0 ]] || fail "$pending events not published"
echo "getting_started: ok (order 42 shipped once; the relay published 1 and stopped)"
