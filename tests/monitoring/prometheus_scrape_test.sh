#!/usr/bin/env bash
# A real Prometheus server scrapes outbox: `outbox relay` publishes a SQLite outbox of three
# events to a Kafka mock cluster (tools/kafka_mock_cluster: no server to set up), and a
# Prometheus of the test's own (a free loopback port, its own config and data directory,
# scrape and rule evaluation every second, the shipped rules loaded) scrapes its /metrics.
# Passes when, within 25 s of the start:
#   - Prometheus's query API shows each target up (up == 1) with its metric above 0
#     (outbox_relay_published_total for the relay);
#   - /api/v1/rules lists the shipped groups, and every rule has been evaluated without error
#     (a query that fails only on real series, such as many-to-many matching, shows here);
#   - no alert fires over this healthy relay (those without a `for` would at once), once
#     each target has been scraped 3 times and the rules evaluated after that;
#   - every query of the Grafana dashboard evaluates without error (its variables set to
#     match everything);
# and then each target, stopped by SIGTERM, exits 0 (the relay having published the three
# events).
#   prometheus_scrape_test.sh PROMETHEUS|"" OUTBOX_TOOL KAFKA_MOCK_CLUSTER RULES DASHBOARD CONSUMER
# Without prometheus (Debian's package): 77 (SKIP), 1 under OUTBOX_REQUIRE_SERVICES=1.
# Every process it starts is stopped by pid, and its directory removed, on any exit (meson's
# timeout ends the test's process group, these processes with it).
set -euo pipefail
prometheus=$1 tool=$2 mock_cluster=$3 rules=$4 dashboard=$5 consumer=$6
if [[ -z $prometheus ]]; then
    if [[ ${OUTBOX_REQUIRE_SERVICES:-} == 1 ]]; then echo "prometheus is not installed: FAIL" >&2; exit 1; fi
    echo "prometheus is not installed (Debian: prometheus): SKIP" >&2
    exit 77
fi
readonly budget=25 # seconds, for the whole test up to the stops
dir=$(mktemp -d)
pids=()
ok=0
cleanup() {
    local pid
    for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    if ((!ok)); then
        for log in "$dir"/*.log; do
            [[ -e $log ]] && { echo "--- $log (last lines)"; tail -n 15 "$log"; } >&2
        done
    fi
    rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
# shellcheck source=tests/support/wait_until.sh
. "$(dirname "${BASH_SOURCE[0]}")/../support/wait_until.sh"
fail() {
    echo "prometheus_scrape: $*" >&2
    exit 1
}
left() { echo $((budget - SECONDS > 1 ? budget - SECONDS : 1)); }
free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Prometheus's HTTP API, read with Python's standard library (api.py BASE COMMAND ...):
#   up JOB METRIC      the target of JOB is up and METRIC{job=JOB} > 0
#   rules GROUP...     the groups are loaded, every rule evaluated, none with an error
#   scraped            each outbox target scraped 3 times; prints the last scrape's time
#   evaluated T        every rule group evaluated after T
#   quiet              no alert is firing
#   dashboard FILE     every query of the dashboard evaluates without error
cat >"$dir/api.py" <<'EOF'
import datetime, json, sys, urllib.parse, urllib.request

base, command, args = sys.argv[1], sys.argv[2], sys.argv[3:]

def get(path, **params):
    url = base + path + ("?" + urllib.parse.urlencode(params) if params else "")
    try:
        with urllib.request.urlopen(url, timeout=3) as r:
            return json.load(r)
    except urllib.error.HTTPError as e:  # a bad query: 400 with the error in the body
        return json.load(e)

def vector(expr):
    r = get("/api/v1/query", query=expr)
    if r.get("status") != "success":
        sys.exit(f"{expr}: {r.get('error')}")
    return r["data"]["result"]

if command == "up":
    job, metric = args
    sys.exit(0 if vector(f'up{{job="{job}"}} == 1') and vector(f'{metric}{{job="{job}"}} > 0')
             else 1)
elif command == "rules":
    groups = {g["name"]: g for g in get("/api/v1/rules")["data"]["groups"]}
    missing = [g for g in args if g not in groups]
    if missing:
        sys.exit(f"groups not loaded: {missing}")
    for g in groups.values():
        for rule in g["rules"]:
            if rule.get("health") != "ok":
                sys.exit(f"{g['name']}/{rule['name']}: health {rule.get('health')}: "
                         f"{rule.get('lastError', '')}")
    print(sum(len(g["rules"]) for g in groups.values()), "rules in", len(groups), "groups")
elif command == "scraped":
    if not vector('min(count_over_time(up{job=~"outbox.*"}[1m])) >= 3'):
        sys.exit("not 3 scrapes yet")
    print(vector('max(timestamp(up{job=~"outbox.*"}))')[0]["value"][1])
elif command == "evaluated":
    for g in get("/api/v1/rules")["data"]["groups"]:
        when = datetime.datetime.fromisoformat(g["lastEvaluation"][:26].rstrip("Z") + "+00:00")
        if when.timestamp() <= float(args[0]):
            sys.exit(f"{g['name']} not evaluated after {args[0]}")
elif command == "quiet":
    firing = [a["labels"]["alertname"] for a in get("/api/v1/alerts")["data"]["alerts"]
              if a["state"] == "firing"]
    if firing:
        sys.exit(f"alerts firing: {firing}")
elif command == "dashboard":
    dash = json.load(open(args[0]))
    panels, n = list(dash["panels"]), 0
    for p in panels:
        panels.extend(p.get("panels", []))
        for t in p.get("targets", []):
            expr = t["expr"]
            for var, value in (("$__rate_interval", "1m"), ("$job", "outbox.*"),
                               ("$instance", ".*"), ("$consumer", ".*")):
                expr = expr.replace(var, value)
            r = get("/api/v1/query", query=expr)
            if r.get("status") != "success":
                sys.exit(f"panel '{p['title']}': {expr}: {r.get('error')}")
            n += 1
    print(n, "dashboard queries evaluated")
else:
    sys.exit(f"unknown command {command}")
EOF

# --- the targets ----------------------------------------------------------------------------
# One line each: target JOB METRIC COMMAND... The command serves /metrics on @ADDR@ (a free
# loopback address the test picks, put in its arguments); the test waits until Prometheus
# has scraped METRIC{job="JOB"} > 0 from it with up == 1, and stops it (SIGTERM) at the end.
# Its stdout and stderr are $dir/JOB.out and $dir/JOB.log. An embedded consumer serving its
# metrics with the prometheus adapter (prometheus-cpp's Exposer) joins with one line, its
# program passed by meson, consuming the topic outbox.event.order at "$bootstrap":
#   target outbox-consumer outbox_consumer_applied_total "$consumer" "$bootstrap" @ADDR@
jobs=() metrics=() addresses=() target_pids=()
target() {
    local job=$1 metric=$2 address
    address=127.0.0.1:$(free_port)
    shift 2
    "${@//@ADDR@/$address}" >"$dir/$job.out" 2>"$dir/$job.log" &
    pids+=($!) target_pids+=($!)
    jobs+=("$job") metrics+=("$metric") addresses+=("$address")
}

"$mock_cluster" --brokers 1 --topic outbox.event.order:1 >"$dir/kafka.out" 2>"$dir/kafka.log" &
pids+=($!)
wait_until "$(left)" test -s "$dir/kafka.out" || fail "the Kafka mock cluster gave no address"
bootstrap=$(head -n 1 "$dir/kafka.out")

store="sqlite://$dir/outbox.db"
"$tool" migrate --store "$store" >/dev/null
python3 - "$dir/outbox.db" <<'EOF'
import json, sqlite3, sys, time
db = sqlite3.connect(sys.argv[1])
now = int(time.time() * 1000)
db.executemany(
    "INSERT INTO outbox (event_id, aggregate_type, aggregate_id, event_type, payload, created_at)"
    " VALUES (?, 'order', ?, 'order_placed', ?, ?)",
    [(f"01900000-0000-7000-8000-00000000000{i}", str(i), json.dumps({"id": i}), now)
     for i in (1, 2, 3)])
db.commit()
EOF

target outbox-relay outbox_relay_published_total \
    "$tool" relay --store "$store" --transport "kafka://$bootstrap?topic_pattern=outbox.event.{aggregate_type}" \
    --backlog-interval 1s --metrics-address @ADDR@
target outbox-consumer outbox_consumer_applied_total "$consumer" "$bootstrap" @ADDR@

# --- Prometheus -----------------------------------------------------------------------------
{
    printf 'global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n'
    printf 'rule_files:\n  - %s\n' "$rules"
    printf 'scrape_configs:\n'
    for i in "${!jobs[@]}"; do
        printf '  - job_name: %s\n    static_configs:\n      - targets: ["%s"]\n' \
            "${jobs[$i]}" "${addresses[$i]}"
    done
} >"$dir/prometheus.yml"
prometheus_address=127.0.0.1:$(free_port)
"$prometheus" --config.file="$dir/prometheus.yml" --storage.tsdb.path="$dir/data" \
    --web.listen-address="$prometheus_address" >"$dir/prometheus.out" 2>"$dir/prometheus.log" &
pids+=($!)
api() { python3 "$dir/api.py" "http://$prometheus_address" "$@"; }

for i in "${!jobs[@]}"; do
    wait_until "$(left)" api up "${jobs[$i]}" "${metrics[$i]}" 2>/dev/null ||
        fail "no ${metrics[$i]} > 0 with up == 1 from ${jobs[$i]} (${addresses[$i]}) within ${budget}s"
done
scraped=$SECONDS
# A rule's health is "unknown" until its first evaluation, a second at most.
wait_until "$(left)" api rules outbox-relay outbox-consumer outbox-targets >"$dir/rules.out" 2>&1 ||
    fail "rules: $(cat "$dir/rules.out")"
wait_until "$(left)" api scraped >"$dir/scraped.out" 2>"$dir/scraped.err" ||
    fail "$(tail -n 1 "$dir/scraped.err")"
wait_until "$(left)" api evaluated "$(tail -n 1 "$dir/scraped.out")" 2>"$dir/alerts.out" ||
    fail "$(tail -n 1 "$dir/alerts.out")"
api quiet >"$dir/alerts.out" 2>&1 || fail "$(cat "$dir/alerts.out")"
api dashboard "$dashboard" >"$dir/dashboard.out" 2>&1 || fail "dashboard: $(cat "$dir/dashboard.out")"

# --- stop, by pid ---------------------------------------------------------------------------
for i in "${!jobs[@]}"; do
    kill -TERM "${target_pids[$i]}"
    status=0
    wait "${target_pids[$i]}" || status=$?
    ((status == 0)) || fail "${jobs[$i]} exited $status after SIGTERM"
done
grep -q "stopped: published 3," "$dir/outbox-relay.log" || fail "the relay did not publish the 3 events"
grep -qx "applied 3" "$dir/outbox-consumer.out" || fail "the consumer did not apply the 3 events"
ok=1
echo "prometheus_scrape: scraped ${jobs[*]} (up, published) after ${scraped}s; $(cat "$dir/rules.out"), all ok, none firing; $(cat "$dir/dashboard.out"); ${SECONDS}s in all"
