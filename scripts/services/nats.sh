# shellcheck shell=bash
# scripts/services/nats.sh: the NATS server of scripts/services.sh, JetStream on (see common.sh
# for what a server file defines). Its config, JetStream store and log are in DIR/nats; clients
# log in with a user and password; `restart` stops and starts it on the same store for the fault
# tests (streams, consumers and messages survive, as on a real server). Two small ones beside it
# (a nats-server has one client listener, and one authorization scheme) for the adapter's
# credential tests: nats-tls requires TLS on the next port and takes the same user and password
# or an NKey; nats-creds, on the port after, trusts an operator and takes its account's users
# (.creds files: JWT and seed).

NATS_PORT=$(set_port OUTBOX_NATS_PORT 24222)
readonly NATS_PORT
NATS_TLS_PORT=$(set_port OUTBOX_NATS_TLS_PORT 24223)
readonly NATS_TLS_PORT
NATS_CREDS_PORT=$(set_port OUTBOX_NATS_CREDS_PORT 24224)
readonly NATS_CREDS_PORT
# Distinctive, so that tests can check it never shows in error texts.
readonly NATS_PASS=nats-secret-7f3a

# openssl makes the TLS certificates, python3-cryptography the NKeys and JWTs (Ed25519).
SERVER_PACKAGES+=(nats-server openssl python3-cryptography)
PID_NAMES+=(nats nats-tls nats-creds)
PID_COMMS+=([nats]=nats-server [nats-tls]=nats-server [nats-creds]=nats-server)
DATA_DIRS+=([nats]=nats)
ALIASES+=([nats]=nats [jetstream]=nats)

nats_installed() {
    find_prog nats-server >/dev/null || die "install: nats-server not found"
}

nats_ports() {
    require_free_port "$NATS_PORT" "nats"
    require_free_port "$NATS_TLS_PORT" "nats (TLS)"
    require_free_port "$NATS_CREDS_PORT" "nats (creds)"
}

nats_env() {
    export_line OUTBOX_TEST_NATS "nats://$DB_USER:$NATS_PASS@127.0.0.1:$NATS_PORT"
    # TLS only; its certificate names "localhost". The directory holds the files of
    # make_tls_files, two NKeys (user.* accepted, other.* unknown) and two .creds files (user.creds
    # accepted by nats-creds, rogue.creds of an account its operator never signed): nats_keys.py.
    export_line OUTBOX_TEST_NATS_TLS "tls://localhost:$NATS_TLS_PORT"
    export_line OUTBOX_TEST_NATS_TLS_DIR "$DIR/nats/tls"
    export_line OUTBOX_TEST_NATS_CREDS "nats://127.0.0.1:$NATS_CREDS_PORT"
}

# Starts nats-server on DIR/nats/NAME.conf (NAME: server, tls or creds), waits until it accepts
# connections and writes its pid file (nats, nats-tls, nats-creds); on failure shows the log and
# dies with MESSAGE. Usage: nats_launch MESSAGE [NAME]
nats_launch() {
    local name=${2:-server} server base=$DIR/nats log=$LOGS/nats.log pid port tries=300
    # The port of the config (a restart may run without the set's OUTBOX_SERVICES_SET).
    port=$(sed -n 's/^listen: 127\.0\.0\.1:\([0-9]*\)$/\1/p' "$base/$name.conf")
    [[ -n $port ]] || die "nats: no listen port in $base/$name.conf"
    server=$(find_prog nats-server) || die "nats: nats-server not installed (run: $0 install)"
    # setsid: its own session (see start_mysql); the config names DIR, which is_ours checks.
    setsid "$server" -c "$base/$name.conf" </dev/null >>"$log" 2>&1 &
    pid=$!
    if [[ $name == server ]]; then write_pid nats "$pid"; else write_pid "nats-$name" "$pid"; fi
    # Ready once the log says so (JetStream recovered its streams) and the port accepts.
    until grep -q "Server is ready" "$base/$name.log" 2>/dev/null && port_accepts "$port"; do
        if ! is_alive "$pid" || ((tries-- <= 0)); then
            show_tail "$log" "$base/$name.log"
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
    start_nats_credentials
    echo "nats: ready on 127.0.0.1:$NATS_PORT (pid $(read_pid nats)), TLS on $NATS_TLS_PORT" \
        "(pid $(read_pid nats-tls)), creds on $NATS_CREDS_PORT (pid $(read_pid nats-creds))" \
        "in $(elapsed_since "$t0") s"
}

# The TLS server (a JetStream store of its own) and the operator's server; their certificates,
# NKeys and JWTs in DIR/nats/tls.
start_nats_credentials() {
    local base=$DIR/nats log=$LOGS/nats.log keys=$SERVICES_LIB/nats_keys.py
    mkdir -p "$base/jetstream-tls"
    command -v openssl >/dev/null 2>&1 || die "nats: openssl not found (run: $0 install)"
    if ! { make_tls_files "$base/tls" && python3 -B "$keys" nkey "$base/tls" user &&
        python3 -B "$keys" nkey "$base/tls" other && python3 -B "$keys" creds "$base/tls"; } \
        >>"$log" 2>&1; then
        show_tail "$log"
        die "nats: could not make the TLS certificates, NKeys or JWTs (python3-cryptography?)"
    fi
    cat >"$base/tls.conf" <<EOF
# Written by $PROG for outbox's TLS and NKey tests.
listen: 127.0.0.1:$NATS_TLS_PORT
pid_file: "$base/nats-tls.pid"
log_file: "$base/tls.log"
jetstream {
  store_dir: "$base/jetstream-tls"
}
tls {
  cert_file: "$base/tls/server.pem"
  key_file: "$base/tls/server.key"
}
authorization {
  users: [
    { user: "$DB_USER", password: "$NATS_PASS" }
    { nkey: "$(cat "$base/tls/user.pub")" }
  ]
}
EOF
    nats_launch "nats: the TLS server did not start" tls
    cat >"$base/creds.conf" <<EOF
# Written by $PROG for outbox's .creds tests: an operator's users only, no JetStream.
listen: 127.0.0.1:$NATS_CREDS_PORT
pid_file: "$base/nats-creds.pid"
log_file: "$base/creds.log"
operator: "$base/tls/operator.jwt"
resolver: MEMORY
resolver_preload: {
  $(cat "$base/tls/account.pub"): "$(cat "$base/tls/account.jwt")"
}
EOF
    nats_launch "nats: the creds server did not start" creds
}

stop_nats() {
    local name pid stopped=
    for name in nats-creds nats-tls nats; do
        pid=$(read_pid "$name") || continue
        # SIGTERM: nats-server shuts down cleanly (JetStream flushes its store).
        terminate_pid "$name" "$pid" 30 nats-server
        rm -f "$PIDS/$name.pid"
        stopped=1
    done
    [[ -z $stopped ]] || echo "nats: stopped"
}

# Usage: restart_nats DOWN_SECONDS SIGNAL (INT: a clean stop; QUIT: SIGKILL, like a crash).
# The main server only (the credential servers are not part of the fault tests).
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
