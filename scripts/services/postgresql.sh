# shellcheck shell=bash
# scripts/services/postgresql.sh: the PostgreSQL server of scripts/services.sh (see
# common.sh for what a server file defines). Its cluster is DIR/postgresql/data, its socket
# in DIR/postgresql; `restart` stops and starts it on the same data for the fault tests.

PG_PORT=$(set_port OUTBOX_PG_PORT 25432)
readonly PG_PORT

SERVER_PACKAGES+=(postgresql postgresql-client)
PID_NAMES+=(postgresql)
PID_COMMS+=([postgresql]=postgres)
DATA_DIRS+=([postgresql]=postgresql)
ALIASES+=([postgresql]=postgresql [postgres]=postgresql [pg]=postgresql)

# PostgreSQL's server programs are not on PATH on Debian: prefer version 15, else the newest.
find_pg_bindir() {
    local d candidates=(/usr/lib/postgresql/15/bin)
    local others=(/usr/lib/postgresql/*/bin)
    # Newest version first (the glob sorts 10 < 9, so sort numerically by the version).
    mapfile -t others < <(printf '%s\n' "${others[@]}" | sort -t/ -k5,5nr)
    candidates+=("${others[@]}")
    for d in "${candidates[@]}"; do
        [[ -x $d/pg_ctl && -x $d/initdb ]] && { printf '%s\n' "$d"; return 0; }
    done
    return 1
}

postgresql_installed() {
    find_pg_bindir >/dev/null || die "install: PostgreSQL server programs not found"
}

postgresql_ports() {
    # Unix socket paths are limited to 107 bytes.
    local sock_path=$DIR/postgresql/.s.PGSQL.$PG_PORT
    ((${#sock_path} <= 107)) || die "start: DIR is too long for a Unix socket path ($sock_path): use a shorter one"
    require_free_port "$PG_PORT" "postgresql"
}

postgresql_env() {
    export_line OUTBOX_TEST_POSTGRESQL \
        "host=127.0.0.1 port=$PG_PORT dbname=$DB_NAME user=$DB_USER password=$DB_PASS"
}

# Starts the PostgreSQL server of data directory DATA (-w: waits until it accepts connections)
# and writes its pid file; on failure shows the logs and dies with MESSAGE.
# Usage: pg_start PGBIN DATA SERVER_LOG LOG MESSAGE
pg_start() {
    local pgbin=$1 data=$2 server_log=$3 log=$4
    if ! as_user postgres "$pgbin/pg_ctl" -D "$data" -l "$server_log" -w -t 60 start >>"$log" 2>&1; then
        [[ -r $data/postmaster.pid ]] && write_pid postgresql "$(head -n 1 "$data/postmaster.pid")"
        show_tail "$log" "$server_log"
        die "$5"
    fi
    write_pid postgresql "$(head -n 1 "$data/postmaster.pid")"
}

start_postgresql() {
    local t0 base=$DIR/postgresql pgbin log=$LOGS/postgresql.log pid
    t0=$(now_us)
    pgbin=$(find_pg_bindir) || die "postgresql: not installed (run: $0 install)"
    local data=$base/data server_log=$base/server.log

    mkdir -p "$base"
    give_to postgres "$base"
    as_user postgres test -w "$base" ||
        die "postgresql: user postgres cannot write $base: every parent of DIR must be searchable by others (use a directory under /tmp)"

    # Trust on the Unix socket (used below to create the role), passwords on TCP like a real
    # deployment; --no-sync because the cluster is thrown away anyway.
    if ! as_user postgres "$pgbin/initdb" -D "$data" -U postgres --auth-local=trust \
        --auth-host=scram-sha-256 -E UTF8 --locale=C.UTF-8 --no-sync >>"$log" 2>&1; then
        show_tail "$log"
        die "postgresql: initdb failed"
    fi

    # Loopback only, our port, the socket in our directory (not /var/run/postgresql), logical
    # decoding available, and no fsync: a test cluster does not need to survive a power cut.
    # Benchmarks that measure commits set OUTBOX_PG_FSYNC=on to get a durable server.
    cat >>"$data/postgresql.conf" <<EOF

# --- added by $PROG for outbox's tests ---
listen_addresses = '127.0.0.1'
port = $PG_PORT
unix_socket_directories = '$base'
max_connections = 200
# Logical decoding for the log-tailing relay's tests: a slot per test, dropped after it; a
# slot left behind by a test that crashed may keep at most 1 GB of WAL.
wal_level = logical
max_wal_senders = 20
max_replication_slots = 20
max_slot_wal_keep_size = 1GB
fsync = ${OUTBOX_PG_FSYNC:-off}
full_page_writes = ${OUTBOX_PG_FSYNC:-off}
EOF

    pg_start "$pgbin" "$data" "$server_log" "$log" "postgresql: server did not start"
    pid=$(read_pid postgresql)

    if ! "$pgbin/psql" -X -q -v ON_ERROR_STOP=1 -h "$base" -p "$PG_PORT" -U postgres -d postgres \
        >>"$log" 2>&1 <<EOF; then
CREATE ROLE $DB_USER LOGIN CREATEDB REPLICATION PASSWORD '$DB_PASS';
CREATE DATABASE $DB_NAME OWNER $DB_USER;
-- The log-tailing tests watch their walsender's progress (pg_stat_replication.sent_lsn).
GRANT pg_read_all_stats TO $DB_USER;
EOF
        show_tail "$log" "$server_log"
        die "postgresql: could not create role and database"
    fi
    echo "postgresql: ready on 127.0.0.1:$PG_PORT (pid $pid) in $(elapsed_since "$t0") s"
}

stop_postgresql() {
    local pid pgbin data=$DIR/postgresql/data
    pid=$(read_pid postgresql) || return 0
    if is_ours "$pid" postgres; then
        # Fast shutdown: disconnects clients, then waits for the postmaster to exit.
        if pgbin=$(find_pg_bindir) && [[ -r $data/postmaster.pid ]]; then
            as_user postgres "$pgbin/pg_ctl" -D "$data" -m fast -w -t 30 stop >>"$LOGS/postgresql.log" 2>&1 || true
        fi
        terminate_pid postgresql "$pid" 30 postgres
    fi
    rm -f "$PIDS/postgresql.pid"
    echo "postgresql: stopped"
}

# Usage: restart_postgresql DOWN_SECONDS SIGNAL (INT: fast shutdown, QUIT: immediate).
restart_postgresql() {
    local down=$1 sig=$2 pid pgbin t0 data=$DIR/postgresql/data
    local log=$LOGS/postgresql.log server_log=$DIR/postgresql/server.log
    t0=$(now_us)
    pgbin=$(find_pg_bindir) || die "restart: postgresql is not installed"
    pid=$(read_pid postgresql) || die "restart: no postgresql was started in $DIR"
    is_ours "$pid" postgres || die "restart: postgresql pid $pid is not running (or no longer ours)"
    # The signal is the shutdown mode (see PostgreSQL's "Shutting Down the Server"); a server
    # that has not exited after 30 s is ended like in stop.
    kill "-$sig" "$pid" 2>/dev/null || true
    if ! wait_gone "$pid" 30; then
        log "restart: postgresql pid $pid still running 30 s after SIG$sig"
        terminate_pid postgresql "$pid" 10 postgres
    fi
    rm -f "$PIDS/postgresql.pid"
    sleep "$down"
    pg_start "$pgbin" "$data" "$server_log" "$log" "restart: postgresql did not start again"
    pid=$(read_pid postgresql)
    echo "postgresql: restarted (SIG$sig, down ${down} s) on port $(sed -n 4p "$data/postmaster.pid") (pid $pid) in $(elapsed_since "$t0") s"
}
