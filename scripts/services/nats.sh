# shellcheck shell=bash
# scripts/services/nats.sh: the NATS server of scripts/services.sh, JetStream on (see common.sh
# for what a server file defines). Its config, JetStream store and log are in DIR/nats; clients
# log in with a user and password; `restart` stops and starts it on the same store for the fault
# tests (streams, consumers and messages survive, as on a real server).

NATS_PORT=$(set_port OUTBOX_NATS_PORT 24222)
readonly NATS_PORT
# Distinctive, so that tests can check it never shows in error texts.
readonly NATS_PASS=nats-secret-7f3a

SERVER_PACKAGES+=(nats-server)
PID_NAMES+=(nats)
PID_COMMS+=([nats]=nats-server)
DATA_DIRS+=([nats]=nats)
ALIASES+=([nats]=nats [jetstream]=nats)

nats_installed() {
    find_prog nats-server >/dev/null || die "install: nats-server not found"
}

nats_ports() {
    require_free_port "$NATS_PORT" "nats"
}

nats_env() {
    export_line OUTBOX_TEST_NATS "nats://$DB_USER:$NATS_PASS@127.0.0.1:$NATS_PORT"
}

# Starts nats-server on DIR/nats/server.conf, waits until it accepts connections and writes
# its pid file; on failure shows the log and dies with MESSAGE. Usage: nats_launch MESSAGE
nats_launch() {
    local server base=$DIR/nats log=$LOGS/nats.log pid port tries=300
    # The port of the config (a restart may run without the set's OUTBOX_SERVICES_SET).
    port=$(sed -n 's/^listen: 127\.0\.0\.1:\([0-9]*\)$/\1/p' "$base/server.conf")
    [[ -n $port ]] || die "nats: no listen port in $base/server.conf"
    server=$(find_prog nats-server) || die "nats: nats-server not installed (run: $0 install)"
    # setsid: its own session (see start_mysql); the config names DIR, which is_ours checks.
    setsid "$server" -c "$base/server.conf" </dev/null >>"$log" 2>&1 &
    pid=$!
    write_pid nats "$pid"
    # Ready once the log says so (JetStream recovered its streams) and the port accepts.
    until grep -q "Server is ready" "$base/server.log" 2>/dev/null && port_accepts "$port"; do
        if ! is_alive "$pid" || ((tries-- <= 0)); then
            show_tail "$log" "$base/server.log"
            die "$1"
        fi
        sleep 0.1
    done
}

start_nats() {
    local t0 base=$DIR/nats
    t0=$(now_us)
    mkdir -p "$base/jetstream"
    # Loopback only, our port, JetStream with its store here, no monitoring or cluster port.
    cat >"$base/server.conf" <<EOF
# Written by $PROG for outbox's tests.
listen: 127.0.0.1:$NATS_PORT
pid_file: "$base/nats.pid"
log_file: "$base/server.log"
jetstream {
  store_dir: "$base/jetstream"
}
authorization {
  user: "$DB_USER"
  password: "$NATS_PASS"
}
EOF
    nats_launch "nats: server did not start"
    echo "nats: ready on 127.0.0.1:$NATS_PORT (pid $(read_pid nats)) in $(elapsed_since "$t0") s"
}

stop_nats() {
    local pid
    pid=$(read_pid nats) || return 0
    # SIGTERM: nats-server shuts down cleanly (JetStream flushes its store).
    terminate_pid nats "$pid" 30 nats-server
    rm -f "$PIDS/nats.pid"
    echo "nats: stopped"
}

# Usage: restart_nats DOWN_SECONDS SIGNAL (INT: a clean stop; QUIT: SIGKILL, like a crash).
restart_nats() {
    local down=$1 sig=$2 pid t0
    t0=$(now_us)
    pid=$(read_pid nats) || die "restart: no nats was started in $DIR"
    is_ours "$pid" nats-server || die "restart: nats pid $pid is not running (or no longer ours)"
    [[ $sig == QUIT ]] && sig=KILL
    kill "-$sig" "$pid" 2>/dev/null || true
    if ! wait_gone "$pid" 30; then
        log "restart: nats pid $pid still running 30 s after SIG$sig"
        terminate_pid nats "$pid" 10 nats-server
    fi
    rm -f "$PIDS/nats.pid"
    # A fresh log, so that "Server is ready" is this start's.
    mv -f "$DIR/nats/server.log" "$DIR/nats/server.log.1" 2>/dev/null || true
    sleep "$down"
    nats_launch "restart: nats did not start again"
    echo "nats: restarted (SIG$sig, down ${down} s) (pid $(read_pid nats)) in $(elapsed_since "$t0") s"
}
