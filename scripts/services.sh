#!/usr/bin/env bash
# scripts/services.sh: throwaway PostgreSQL, MariaDB and RabbitMQ servers for outbox's tests.
#
#   scripts/services.sh install
#       apt-get installs the server packages (Debian 12: PostgreSQL 15, MariaDB 10.11,
#       RabbitMQ 3.10). Needs root (or sudo).
#
#   scripts/services.sh start DIR [postgresql] [mysql] [amqp]
#       Starts the named servers (all three when none is named), in parallel, each with its own
#       data directory under DIR, listening on 127.0.0.1 only, on non-default ports. Writes
#       DIR/env.sh with the OUTBOX_TEST_* connection strings the tests read, and the pid of
#       every process it started to DIR/pids/<name>.pid.
#
#   scripts/services.sh stop DIR
#       Stops what `start` started in DIR (and only that), by pid. Safe to run twice, or on a
#       DIR whose servers already died.
#
#   scripts/services.sh restart DIR postgresql [DOWN_SECONDS] [--immediate]
#       Restarts the PostgreSQL server that `start` started in DIR: stops it by its pid (fast
#       shutdown, SIGINT: sessions are cut and their transactions rolled back; --immediate:
#       SIGQUIT, no checkpoint, WAL recovery at the next start, like a crash), keeps it down
#       DOWN_SECONDS (0; decimals allowed), starts it again on the same data directory and port,
#       waits until it accepts connections and updates DIR/pids. For fault tests (the fault
#       harness's database restarts). `start` also writes DIR/restart, a short form of this
#       command for that DIR: DIR/restart postgresql [DOWN_SECONDS] [--immediate].
#
# Example:
#   scripts/services.sh start /tmp/outbox-svc && . /tmp/outbox-svc/env.sh
#   ... run the tests ...
#   scripts/services.sh stop /tmp/outbox-svc
#
# The ports default to values below Linux's ephemeral port range (32768-60999), so that an
# outgoing connection of some other program can never be holding them, and away from each
# server's usual ports (5432, 3306, 5672, 25672, 4369). Override them with the environment:
#   OUTBOX_PG_PORT (25432)  OUTBOX_MYSQL_PORT (23306)  OUTBOX_AMQP_PORT (27672)
#   OUTBOX_AMQPS_PORT (27671, RabbitMQ's TLS listener)
#   OUTBOX_AMQP_DIST_PORT (27673)  OUTBOX_EPMD_PORT (24369)
#   OUTBOX_AMQP_CTL_PORT_MIN..OUTBOX_AMQP_CTL_PORT_MAX (27674..27683, used by rabbitmqctl)
# or run another set of servers beside the first with OUTBOX_SERVICES_SET=N (2-5): every port
# above (default or given) + 20 * (N - 1).
#
# For rabbitmqctl against the test node: (. DIR/rabbitmq/ctl-env.sh && rabbitmqctl list_queues)
#
# The RabbitMQ node also listens with TLS (amqps) on OUTBOX_AMQPS_PORT, with certificates made
# at start by openssl in DIR/rabbitmq/tls (see make_tls_files): a test CA, a server certificate
# for the name "localhost" only, client certificates from that CA and from an unrelated one.

set -euo pipefail

readonly PROG=${0##*/}

# Credentials and database name the tests use (see the OUTBOX_TEST_* strings in env.sh).
readonly DB_NAME=outbox_test
readonly DB_USER=outbox
readonly DB_PASS=outbox
# The broker's password is distinctive, so that tests can check it never shows in error texts.
readonly AMQP_PASS=amqp-secret-d41c

# Set N of servers (OUTBOX_SERVICES_SET, 1-5) has every port + 20 * (N - 1), the given ones
# too, so that several sets run side by side (scripts/test.sh runs two) whatever the base.
readonly SET=${OUTBOX_SERVICES_SET:-1}
[[ $SET =~ ^[1-5]$ ]] || { echo "${0##*/}: OUTBOX_SERVICES_SET must be 1-5, not '$SET'" >&2; exit 2; }
readonly SHIFT=$((20 * (SET - 1)))
for v in OUTBOX_PG_PORT OUTBOX_MYSQL_PORT OUTBOX_AMQP_PORT OUTBOX_AMQPS_PORT OUTBOX_AMQP_DIST_PORT \
    OUTBOX_EPMD_PORT OUTBOX_AMQP_CTL_PORT_MIN OUTBOX_AMQP_CTL_PORT_MAX; do
    [[ ${!v:-0} =~ ^[0-9]+$ ]] || { echo "${0##*/}: $v must be a port number, not '${!v}'" >&2; exit 2; }
done
readonly PG_PORT=$((${OUTBOX_PG_PORT:-25432} + SHIFT))
readonly MYSQL_PORT=$((${OUTBOX_MYSQL_PORT:-23306} + SHIFT))
readonly AMQP_PORT=$((${OUTBOX_AMQP_PORT:-27672} + SHIFT))
readonly AMQPS_PORT=$((${OUTBOX_AMQPS_PORT:-27671} + SHIFT))
readonly AMQP_DIST_PORT=$((${OUTBOX_AMQP_DIST_PORT:-27673} + SHIFT))
readonly EPMD_PORT=$((${OUTBOX_EPMD_PORT:-24369} + SHIFT))
readonly AMQP_CTL_PORT_MIN=$((${OUTBOX_AMQP_CTL_PORT_MIN:-27674} + SHIFT))
readonly AMQP_CTL_PORT_MAX=$((${OUTBOX_AMQP_CTL_PORT_MAX:-27683} + SHIFT))

# Erlang node name of the test broker (the host part must resolve: localhost always does).
readonly AMQP_NODE=outbox_test@localhost

# Every service this script knows, in the order they are reported.
readonly ALL_SERVICES=(postgresql mysql amqp)

# Debian packages that `install` provides (clients come with the servers, listed for clarity).
# openssl makes the TLS certificates of the RabbitMQ node.
readonly SERVER_PACKAGES=(postgresql postgresql-client mariadb-server mariadb-client rabbitmq-server openssl)

# ---------------------------------------------------------------------------------------------
# Small helpers
# ---------------------------------------------------------------------------------------------

log() { printf '%s: %s\n' "$PROG" "$*" >&2; }
die() { log "error: $*"; exit 1; }

usage() {
    cat >&2 <<EOF
usage: $PROG install
       $PROG start DIR [postgresql] [mysql] [amqp]
       $PROG stop DIR
       $PROG restart DIR postgresql [DOWN_SECONDS] [--immediate]
EOF
    exit 2
}

# Microseconds since the epoch (bash 5's EPOCHREALTIME, with its decimal separator removed).
now_us() { printf '%s\n' "${EPOCHREALTIME//[!0-9]/}"; }

# Seconds elapsed since a now_us value, with one decimal: "1.3".
elapsed_since() {
    local tenths=$((($(now_us) - $1) / 100000))
    printf '%d.%d' $((tenths / 10)) $((tenths % 10))
}

# Runs a command as a system user (postgres, mysql) when we are root. A non-root caller runs
# everything as itself: the data directories are then its own.
as_user() {
    local user=$1
    shift
    if ((EUID == 0)); then
        runuser -u "$user" -- "$@"
    else
        "$@"
    fi
}

# Gives a directory tree to a system user (only meaningful, and only done, as root).
give_to() {
    if ((EUID == 0)); then
        chown -R "$1:" "$2"
    fi
}

# True when PID is a live process. A dead daemon whose parent is pid 1 may stay a zombie
# forever here (pid 1 does not reap orphans), so a zombie counts as gone: kill -0 alone would
# call it alive.
is_alive() {
    local pid=$1 stat rest
    [[ $pid =~ ^[0-9]+$ ]] || return 1
    stat=$(cat "/proc/$pid/stat" 2>/dev/null) || return 1
    # The command name, in parentheses, may contain spaces: the state follows the last ')'.
    rest=${stat##*) }
    [[ ${rest%% *} != [ZX] ]]
}

# True when PID is alive, its command name is one of the given names, and its command line or
# environment mentions $DIR (every server started here has DIR in its arguments or, for the
# RabbitMQ processes, in HOME). This is how `stop` makes sure a pid from a pid file still
# belongs to a process we started, not to a stranger that reused the number.
is_ours() {
    local pid=$1 comm name
    shift
    is_alive "$pid" || return 1
    comm=$(cat "/proc/$pid/comm" 2>/dev/null) || return 1
    for name in "$@"; do
        if [[ $comm == "$name" ]]; then
            grep -qaF -- "$DIR/" "/proc/$pid/cmdline" "/proc/$pid/environ" 2>/dev/null
            return
        fi
    done
    return 1
}

# Waits up to $2 seconds for PID to be gone; false if it is still alive then.
wait_gone() {
    local pid=$1 tries=$(($2 * 10))
    while is_alive "$pid"; do
        ((tries-- > 0)) || return 1
        sleep 0.1
    done
}

# Ends PID (if it is still one of ours, see is_ours) with SIGTERM, then SIGKILL after $3 s.
# Usage: terminate_pid LABEL PID TIMEOUT COMM...
terminate_pid() {
    local label=$1 pid=$2 timeout=$3
    shift 3
    is_alive "$pid" || return 0
    if ! is_ours "$pid" "$@"; then
        log "$label: pid $pid is no longer ours ($(cat "/proc/$pid/comm" 2>/dev/null)): left alone"
        return 0
    fi
    kill -TERM "$pid" 2>/dev/null || true
    if ! wait_gone "$pid" "$timeout"; then
        log "$label: pid $pid ignored SIGTERM for ${timeout}s: sending SIGKILL"
        kill -KILL "$pid" 2>/dev/null || true
        wait_gone "$pid" 10 || die "$label: pid $pid survived SIGKILL"
    fi
}

# True when something listens on TCP port $1 (on any address).
port_in_use() {
    if command -v ss >/dev/null 2>&1; then
        [[ -n $(ss -Hltn "sport = :$1" 2>/dev/null) ]]
    else
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
    fi
}

# True when a TCP connection to 127.0.0.1:$1 succeeds.
port_accepts() {
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

require_free_port() {
    local port=$1 what=$2
    if ! [[ $port =~ ^[0-9]+$ ]] || ((port < 1 || port > 65535)); then
        die "$what: bad port '$port'"
    fi
    if port_in_use "$port"; then
        log "$what: port $port is already in use:"
        ss -Hltnp "sport = :$port" >&2 2>/dev/null || true
        die "$what: port $port is taken; stop whatever holds it or choose another port (see the header of $0)"
    fi
}

# Prints the last lines of each existing file, for a failure report.
show_tail() {
    local f
    for f in "$@"; do
        [[ -s $f ]] || continue
        printf -- '----- last lines of %s -----\n' "$f" >&2
        tail -n 25 "$f" >&2
    done
}

# Prints "export NAME='VALUE'" (a single-quoted shell word; a ' inside becomes '\'').
export_line() {
    local q="'\\''"
    printf "export %s='%s'\n" "$1" "${2//\'/$q}"
}

# Writes a pid file (the number alone, so that `kill "$(cat F)"` works too).
write_pid() { printf '%s\n' "$2" >"$PIDS/$1.pid"; }
read_pid() { [[ -r $PIDS/$1.pid ]] && head -n 1 "$PIDS/$1.pid"; }

# Command names that each pid file may legitimately point to (see is_ours).
comms_for() {
    case $1 in
        postgresql) echo postgres ;;
        mysql) echo mariadbd mysqld ;;
        amqp) echo beam.smp beam ;;
        amqp-launcher) echo rabbitmq-server ;;
        epmd) echo epmd ;;
    esac
}

# ---------------------------------------------------------------------------------------------
# Finding the installed programs
# ---------------------------------------------------------------------------------------------

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

# First of the given program names that is installed (PATH plus the sbin directories, which a
# non-root PATH may lack).
find_prog() {
    local name d
    for name in "$@"; do
        for d in "" /usr/sbin/ /usr/bin/ /sbin/; do
            if [[ -z $d ]]; then
                command -v "$name" 2>/dev/null && return 0
            elif [[ -x $d$name ]]; then
                printf '%s\n' "$d$name"
                return 0
            fi
        done
    done
    return 1
}

find_epmd() {
    local c
    find_prog epmd && return 0
    for c in /usr/lib/erlang/bin/epmd /usr/lib/erlang/erts-*/bin/epmd; do
        [[ -x $c ]] && { printf '%s\n' "$c"; return 0; }
    done
    return 1
}

# The real RabbitMQ scripts, not the /usr/sbin wrappers (those switch to the rabbitmq user and
# reset HOME, which would lose our private environment).
readonly RMQ_BIN=/usr/lib/rabbitmq/bin

# ---------------------------------------------------------------------------------------------
# install
# ---------------------------------------------------------------------------------------------

cmd_install() {
    local sudo=() missing=() pkg rc=0
    if ((EUID != 0)); then
        command -v sudo >/dev/null 2>&1 || die "install needs root (or sudo)"
        sudo=(sudo)
    fi
    command -v apt-get >/dev/null 2>&1 || die "install needs apt-get (Debian/Ubuntu)"
    for pkg in "${SERVER_PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'ok installed' || missing+=("$pkg")
    done
    if ((${#missing[@]} == 0)); then
        log "install: ${SERVER_PACKAGES[*]} already installed"
        return 0
    fi
    log "install: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    "${sudo[@]}" apt-get update -q
    # The packages' maintainer scripts try to start system services; without an init system
    # that fails, which may make apt-get exit non-zero although the files are all in place.
    # So the exit code is not trusted: what is actually installed is checked below.
    "${sudo[@]}" apt-get install -y -q -o Dpkg::Options::=--force-confdef \
        -o Dpkg::Options::=--force-confold "${missing[@]}" || rc=$?
    if ((rc != 0)); then
        log "install: apt-get exited $rc (a failed attempt to start a system service is expected here); checking the result"
        "${sudo[@]}" dpkg --configure -a || true
    fi
    for pkg in "${missing[@]}"; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'ok installed' ||
            die "install: package $pkg is not installed"
    done
    find_pg_bindir >/dev/null || die "install: PostgreSQL server programs not found"
    find_prog mariadbd mysqld >/dev/null || die "install: mariadbd not found"
    [[ -x $RMQ_BIN/rabbitmq-server ]] || die "install: $RMQ_BIN/rabbitmq-server not found"
    log "install: done"
}

# ---------------------------------------------------------------------------------------------
# start: one function per server, each run in its own background subshell. Each prints one
# "ready" line on stdout, sends the noise of its setup commands to $LOGS/<name>.log, and on
# failure prints the reason and the relevant log tails on stderr and exits non-zero.
# ---------------------------------------------------------------------------------------------

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

start_mysql() {
    local t0 base=$DIR/mysql log=$LOGS/mysql.log mariadbd install_db admin client pid tries
    t0=$(now_us)
    mariadbd=$(find_prog mariadbd mysqld) || die "mysql: mariadbd not installed (run: $0 install)"
    install_db=$(find_prog mariadb-install-db mysql_install_db) || die "mysql: mariadb-install-db not found"
    admin=$(find_prog mariadb-admin mysqladmin) || die "mysql: mariadb-admin not found"
    client=$(find_prog mariadb mysql) || die "mysql: mariadb client not found"
    local cnf=$base/my.cnf err_log=$base/error.log sock=$base/mysqld.sock

    mkdir -p "$base/data" "$base/tmp"
    # Our own my.cnf, used with --defaults-file so that /etc/mysql (port 3306, /run/mysqld)
    # is never read. utf8mb4 as in MySQL 8 (MariaDB's built-in default is latin1). The redo log
    # is written at each commit and flushed once a second, not flushed at each commit, as the
    # PostgreSQL cluster runs without fsync: a test server does not need to survive a power cut
    # (the process may die: what was written survives it). Benchmarks that measure commits set
    # OUTBOX_MYSQL_FLUSH=1 (flush at every commit, the server's default).
    cat >"$cnf" <<EOF
# Written by $PROG for outbox's tests.
[client]
port = $MYSQL_PORT
socket = $sock

[mysqld]
datadir = $base/data
tmpdir = $base/tmp
socket = $sock
pid-file = $base/mysqld.pid
port = $MYSQL_PORT
bind-address = 127.0.0.1
skip-name-resolve
log-error = $err_log
character-set-server = utf8mb4
collation-server = utf8mb4_unicode_ci
max_connections = 200
innodb_flush_log_at_trx_commit = ${OUTBOX_MYSQL_FLUSH:-2}
EOF
    chmod 644 "$cnf"
    give_to mysql "$base"
    as_user mysql test -w "$base" ||
        die "mysql: user mysql cannot write $base: every parent of DIR must be searchable by others (use a directory under /tmp)"

    local user_opt=()
    ((EUID == 0)) && user_opt=(--user=mysql)
    if ! "$install_db" --defaults-file="$cnf" "${user_opt[@]}" --auth-root-authentication-method=normal \
        --skip-test-db >>"$log" 2>&1; then
        show_tail "$log" "$err_log"
        die "mysql: mariadb-install-db failed"
    fi

    # setsid: its own session, so a Ctrl-C meant for the caller does not reach the server. In a
    # non-interactive shell a background job is not a process group leader, so setsid does not
    # fork and $! is the server's own pid.
    setsid "$mariadbd" --defaults-file="$cnf" "${user_opt[@]}" </dev/null >>"$log" 2>&1 &
    pid=$!
    write_pid mysql "$pid"

    # Ready when it answers on TCP (ping succeeds even when access is denied).
    tries=600
    until "$admin" --defaults-file="$cnf" -uroot --protocol=tcp -h127.0.0.1 -P "$MYSQL_PORT" \
        --connect-timeout=2 ping >/dev/null 2>&1; do
        if ! is_alive "$pid" || ((tries-- <= 0)); then
            show_tail "$log" "$err_log"
            die "mysql: server did not start"
        fi
        sleep 0.1
    done

    if ! "$client" --defaults-file="$cnf" -uroot --protocol=socket >>"$log" 2>&1 <<EOF; then
CREATE DATABASE $DB_NAME CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci;
CREATE USER '$DB_USER'@'127.0.0.1' IDENTIFIED BY '$DB_PASS';
CREATE USER '$DB_USER'@'localhost' IDENTIFIED BY '$DB_PASS';
GRANT ALL PRIVILEGES ON *.* TO '$DB_USER'@'127.0.0.1';
GRANT ALL PRIVILEGES ON *.* TO '$DB_USER'@'localhost';
EOF
        show_tail "$log" "$err_log"
        die "mysql: could not create user and database"
    fi
    echo "mysql: ready on 127.0.0.1:$MYSQL_PORT (pid $pid) in $(elapsed_since "$t0") s"
}

# Writes the TLS files of the RabbitMQ node into directory $1 (EC P-256 keys, PKCS#8; valid
# 30 days; about 0.1 s):
#   ca.pem                          the test CA (the broker trusts client certificates from it)
#   server.pem, server.key          the broker's certificate: DNS name "localhost" only, so
#                                   connecting to 127.0.0.1 fails hostname verification
#   client.pem, client.key          a client certificate from the test CA
#   client-encrypted.key            client.key under a passphrase ("outbox")
#   other-ca.pem                    an unrelated CA (a client trusting only it refuses the broker)
#   other-client.pem, other-client.key   a client certificate from the unrelated CA (refused)
make_tls_files() {
    local d=$1 name
    mkdir -p "$d"
    (
        cd "$d"
        key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1"; }
        # A self-signed CA: make_ca NAME CN
        make_ca() {
            key "$1.key"
            openssl req -x509 -new -key "$1.key" -subj "/CN=$2" -days 30 -out "$1.pem" \
                -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign
        }
        # A leaf signed by a CA: make_leaf NAME CN CA EXTENSIONS
        make_leaf() {
            key "$1.key"
            openssl req -new -key "$1.key" -subj "/CN=$2" -out "$1.csr"
            printf '%s\n' "$4" >"$1.ext"
            openssl x509 -req -in "$1.csr" -CA "$3.pem" -CAkey "$3.key" -CAcreateserial -days 30 \
                -extfile "$1.ext" -out "$1.pem"
            rm -f "$1.csr" "$1.ext"
        }
        make_ca ca "outbox test CA"
        make_ca other-ca "outbox unrelated CA"
        make_leaf server localhost ca \
            $'basicConstraints=CA:FALSE\nsubjectAltName=DNS:localhost\nextendedKeyUsage=serverAuth'
        make_leaf client outbox-test-client ca $'basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth'
        make_leaf other-client outbox-rogue-client other-ca \
            $'basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth'
        openssl pkey -in client.key -aes256 -passout pass:outbox -out client-encrypted.key
        rm -f ./*.srl
    ) || return 1
    # (Called in a condition, so set -e is off in here: check that every file was made.)
    for name in ca.pem ca.key other-ca.pem other-ca.key server.pem server.key client.pem \
        client.key client-encrypted.key other-client.pem other-client.key; do
        [[ -s $d/$name ]] || { echo "make_tls_files: $d/$name was not made" >&2; return 1; }
    done
    # Readable by the broker whatever user it runs as (these are throwaway test keys).
    for name in "$d"/*; do chmod 644 "$name" || return 1; done
}

start_amqp() {
    local t0 base=$DIR/rabbitmq log=$LOGS/amqp.log epmd epmd_pid launcher_pid pid tries
    t0=$(now_us)
    [[ -x $RMQ_BIN/rabbitmq-server ]] || die "amqp: rabbitmq-server not installed (run: $0 install)"
    epmd=$(find_epmd) || die "amqp: epmd (Erlang) not found"

    mkdir -p "$base/home" "$base/mnesia" "$base/log"
    command -v openssl >/dev/null 2>&1 || die "amqp: openssl not found (run: $0 install)"
    if ! make_tls_files "$base/tls" >>"$log" 2>&1; then
        show_tail "$log"
        die "amqp: could not make the TLS certificates"
    fi
    # The node's private world, shared by the server and rabbitmqctl (see ctl-env.sh): its own
    # HOME for the Erlang cookie, config, data and log directories, node name and ports, and
    # its own epmd. inet_dist_use_interface binds the distribution port to loopback too
    # (without it the node listens on 0.0.0.0).
    local dist_args='-kernel inet_dist_use_interface {127,0,0,1}'
    {
        echo "# Environment of the RabbitMQ test node; written by $PROG."
        echo "# Usage: (. $base/ctl-env.sh && rabbitmqctl status)"
        printf 'export %s=%q\n' \
            HOME "$base/home" \
            RABBITMQ_NODENAME "$AMQP_NODE" \
            RABBITMQ_NODE_IP_ADDRESS 127.0.0.1 \
            RABBITMQ_NODE_PORT "$AMQP_PORT" \
            RABBITMQ_DIST_PORT "$AMQP_DIST_PORT" \
            RABBITMQ_CTL_DIST_PORT_MIN "$AMQP_CTL_PORT_MIN" \
            RABBITMQ_CTL_DIST_PORT_MAX "$AMQP_CTL_PORT_MAX" \
            ERL_EPMD_PORT "$EPMD_PORT" \
            ERL_EPMD_ADDRESS 127.0.0.1 \
            RABBITMQ_CONFIG_FILE "$base/rabbitmq.conf" \
            RABBITMQ_ADVANCED_CONFIG_FILE "$base/advanced.config" \
            RABBITMQ_ENABLED_PLUGINS_FILE "$base/enabled_plugins" \
            RABBITMQ_CONF_ENV_FILE "$base/rabbitmq-env.conf" \
            RABBITMQ_MNESIA_BASE "$base/mnesia" \
            RABBITMQ_LOG_BASE "$base/log" \
            RABBITMQ_PID_FILE "$base/rabbitmq.pid" \
            RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS "$dist_args" \
            RABBITMQ_CTL_ERL_ARGS "$dist_args" \
            ERL_CRASH_DUMP "$base/erl_crash.dump" \
            PATH "$RMQ_BIN:$PATH"
    } >"$base/ctl-env.sh"

    # The test user comes from the config file: faster than rabbitmqctl add_user (each
    # rabbitmqctl call boots an Erlang VM). guest stays loopback-only, as by default.
    cat >"$base/rabbitmq.conf" <<EOF
# Written by $PROG for outbox's tests.
listeners.tcp.1 = 127.0.0.1:$AMQP_PORT
listeners.ssl.1 = 127.0.0.1:$AMQPS_PORT
ssl_options.cacertfile = $base/tls/ca.pem
ssl_options.certfile = $base/tls/server.pem
ssl_options.keyfile = $base/tls/server.key
ssl_options.verify = verify_peer
ssl_options.fail_if_no_peer_cert = false
loopback_users.guest = true
default_vhost = /
default_user = $DB_USER
default_pass = $AMQP_PASS
default_user_tags.administrator = true
default_permissions.configure = .*
default_permissions.read = .*
default_permissions.write = .*
EOF
    echo '[].' >"$base/advanced.config"
    echo '[].' >"$base/enabled_plugins"
    : >"$base/rabbitmq-env.conf"
    # A random Erlang cookie; Erlang insists on it being readable by the owner only.
    od -An -N24 -tx1 /dev/urandom | tr -d ' \n' >"$base/home/.erlang.cookie"
    chmod 400 "$base/home/.erlang.cookie"

    # shellcheck source=/dev/null
    . "$base/ctl-env.sh"

    # Our own epmd, in the foreground of its own session (see start_mysql on setsid and $!),
    # so that its pid is known and `stop` can end it: epmd outlives the node.
    setsid "$epmd" -port "$EPMD_PORT" -address 127.0.0.1 </dev/null >>"$log" 2>&1 &
    epmd_pid=$!
    write_pid epmd "$epmd_pid"
    tries=100
    until port_accepts "$EPMD_PORT"; do
        if ! is_alive "$epmd_pid" || ((tries-- <= 0)); then
            show_tail "$log"
            die "amqp: epmd did not start on port $EPMD_PORT"
        fi
        sleep 0.05
    done

    setsid "$RMQ_BIN/rabbitmq-server" </dev/null >>"$log" 2>&1 &
    launcher_pid=$!
    write_pid amqp-launcher "$launcher_pid"

    # Ready when the node has written its pid file and its AMQP listener (started in the last
    # boot step, after the default user exists) accepts connections. Faster than
    # `rabbitmqctl wait`, which boots a VM of its own.
    tries=1200
    until [[ -s $RABBITMQ_PID_FILE ]] && port_accepts "$AMQP_PORT" && port_accepts "$AMQPS_PORT"; do
        if ! is_alive "$launcher_pid" || ((tries-- <= 0)); then
            [[ -s $RABBITMQ_PID_FILE ]] && write_pid amqp "$(head -n 1 "$RABBITMQ_PID_FILE")"
            show_tail "$log" "$base/log/$AMQP_NODE.log"
            die "amqp: server did not start"
        fi
        sleep 0.1
    done
    pid=$(head -n 1 "$RABBITMQ_PID_FILE")
    write_pid amqp "$pid"
    echo "amqp: ready on 127.0.0.1:$AMQP_PORT, TLS on $AMQPS_PORT (pid $pid, epmd pid $epmd_pid) in $(elapsed_since "$t0") s"
}

cmd_start() {
    (($# >= 1)) || usage
    local t0 name pid failed=() services=() seen=" "
    t0=$(now_us)
    DIR=$1
    shift

    # Which servers: the named ones (a few aliases accepted), else all.
    for name in "$@"; do
        case $name in
            postgresql | postgres | pg) name=postgresql ;;
            mysql | mariadb) name=mysql ;;
            amqp | rabbitmq) name=amqp ;;
            *) die "start: unknown service '$name' (expected postgresql, mysql or amqp)" ;;
        esac
        [[ $seen == *" $name "* ]] || services+=("$name")
        seen+="$name "
    done
    (($# > 0)) || services=("${ALL_SERVICES[@]}")

    mkdir -p "$DIR"
    DIR=$(cd "$DIR" && pwd -P)
    PIDS=$DIR/pids
    LOGS=$DIR/logs

    # Refuse to start over servers that are still running from an earlier start in DIR.
    if [[ -d $PIDS ]]; then
        for name in postgresql mysql amqp amqp-launcher epmd; do
            pid=$(read_pid "$name") || continue
            # shellcheck disable=SC2046 # comms_for prints several words on purpose
            if is_ours "$pid" $(comms_for "$name"); then
                die "start: $name from an earlier start is still running in $DIR (pid $pid): run '$0 stop $DIR' first"
            fi
        done
    fi

    # The servers run as postgres / mysql: they must be able to pass through DIR, which
    # mktemp -d makes 0700. Only the search bit is added, and only when it is missing.
    if ((EUID == 0)) && ! runuser -u nobody -- test -x "$DIR" 2>/dev/null; then
        log "start: making $DIR searchable by others (chmod a+x) for the postgres and mysql users"
        chmod a+x "$DIR"
    fi
    # Unix socket paths are limited to 107 bytes.
    local sock_path=$DIR/postgresql/.s.PGSQL.$PG_PORT
    ((${#sock_path} <= 107)) || die "start: DIR is too long for a Unix socket path ($sock_path): use a shorter one"

    # Check every port before starting anything.
    for name in "${services[@]}"; do
        case $name in
            postgresql) require_free_port "$PG_PORT" "postgresql" ;;
            mysql) require_free_port "$MYSQL_PORT" "mysql" ;;
            amqp)
                require_free_port "$AMQP_PORT" "amqp"
                require_free_port "$AMQPS_PORT" "amqp (TLS)"
                require_free_port "$AMQP_DIST_PORT" "amqp (Erlang distribution)"
                require_free_port "$EPMD_PORT" "amqp (epmd)"
                ;;
        esac
    done

    # A throwaway area: whatever an earlier, stopped run left there goes.
    rm -rf "$PIDS" "$LOGS" "$DIR/env.sh" "$DIR/restart"
    for name in "${services[@]}"; do
        case $name in
            postgresql) rm -rf "$DIR/postgresql" ;;
            mysql) rm -rf "$DIR/mysql" ;;
            amqp) rm -rf "$DIR/rabbitmq" ;;
        esac
    done
    mkdir -p "$PIDS" "$LOGS"

    # All servers boot at once (RabbitMQ's ~8 s dominates); each one's subshell reports.
    local -A jobs=()
    for name in "${services[@]}"; do
        "start_$name" &
        jobs[$name]=$!
    done
    for name in "${services[@]}"; do
        wait "${jobs[$name]}" || failed+=("$name")
    done

    if ((${#failed[@]} > 0)); then
        log "start: failed: ${failed[*]}; stopping what did start (logs are kept in $DIR)"
        cmd_stop "$DIR" || true
        exit 1
    fi

    # The connection strings the tests read (a test whose variable is unset skips, unless
    # OUTBOX_REQUIRE_SERVICES=1).
    {
        echo "# Written by $PROG start; stop with: $0 stop $DIR"
        export_line OUTBOX_SERVICES_DIR "$DIR"
        for name in "${services[@]}"; do
            case $name in
                postgresql)
                    export_line OUTBOX_TEST_POSTGRESQL \
                        "host=127.0.0.1 port=$PG_PORT dbname=$DB_NAME user=$DB_USER password=$DB_PASS" ;;
                mysql)
                    export_line OUTBOX_TEST_MYSQL \
                        "host=127.0.0.1 port=$MYSQL_PORT db=$DB_NAME user=$DB_USER password=$DB_PASS" ;;
                amqp)
                    # No trailing slash: "/" at the end would name the vhost "", not "/".
                    export_line OUTBOX_TEST_AMQP \
                        "amqp://$DB_USER:$AMQP_PASS@127.0.0.1:$AMQP_PORT"
                    # TLS: the server certificate names "localhost" (see make_tls_files).
                    export_line OUTBOX_TEST_AMQPS \
                        "amqps://$DB_USER:$AMQP_PASS@localhost:$AMQPS_PORT"
                    export_line OUTBOX_TEST_AMQP_TLS_DIR "$DIR/rabbitmq/tls" ;;
            esac
        done
    } >"$DIR/env.sh"
    # DIR/restart SERVICE [DOWN_SECONDS] [--immediate]: this script's restart for this DIR, so
    # that a fault test needs no path to the source tree (the fault harness's default).
    {
        echo "#!/bin/sh"
        echo "# Written by $PROG start: restarts a server of this directory (see $PROG restart)."
        printf 'exec %q restart %q "$@"\n' "$(cd "$(dirname "$0")" && pwd -P)/${0##*/}" "$DIR"
    } >"$DIR/restart"
    chmod 755 "$DIR/restart"
    echo "services: ${services[*]} ready in $(elapsed_since "$t0") s; environment in $DIR/env.sh"
}

# ---------------------------------------------------------------------------------------------
# stop
# ---------------------------------------------------------------------------------------------

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

stop_mysql() {
    local pid
    pid=$(read_pid mysql) || return 0
    # SIGTERM is mariadbd's normal shutdown request.
    terminate_pid mysql "$pid" 60 mariadbd mysqld
    rm -f "$PIDS/mysql.pid"
    echo "mysql: stopped"
}

stop_amqp() {
    local pid epmd_pid launcher_pid had=0
    if pid=$(read_pid amqp); then
        had=1
        if is_ours "$pid" beam.smp beam && [[ -r $DIR/rabbitmq/ctl-env.sh ]]; then
            # rabbitmqctl stop with the pid file waits until the VM has exited.
            (
                # shellcheck source=/dev/null
                . "$DIR/rabbitmq/ctl-env.sh"
                timeout 60 rabbitmqctl -n "$RABBITMQ_NODENAME" stop "$RABBITMQ_PID_FILE"
            ) >>"$LOGS/amqp.log" 2>&1 || true
        fi
        terminate_pid amqp "$pid" 30 beam.smp beam
        rm -f "$PIDS/amqp.pid"
    fi
    if launcher_pid=$(read_pid amqp-launcher); then
        had=1
        # The rabbitmq-server script ends with the VM; give it a moment, then end it.
        wait_gone "$launcher_pid" 5 || terminate_pid amqp "$launcher_pid" 10 rabbitmq-server
        rm -f "$PIDS/amqp-launcher.pid"
    fi
    # The private epmd outlives the node: end it by its pid.
    if epmd_pid=$(read_pid epmd); then
        had=1
        terminate_pid epmd "$epmd_pid" 10 epmd
        rm -f "$PIDS/epmd.pid"
    fi
    if ((had)); then echo "amqp: stopped"; fi
}

cmd_stop() {
    (($# == 1)) || usage
    local name rc=0
    DIR=$1
    if [[ ! -d $DIR/pids ]]; then
        log "stop: nothing was started in $DIR"
        return 0
    fi
    DIR=$(cd "$DIR" && pwd -P)
    PIDS=$DIR/pids
    LOGS=$DIR/logs
    mkdir -p "$LOGS"
    local pid_files=("$PIDS"/*.pid)
    if [[ ! -e ${pid_files[0]} ]]; then
        log "stop: nothing is running from $DIR"
        rm -f "$DIR/env.sh" "$DIR/restart"
        return 0
    fi

    local -A jobs=()
    for name in "${ALL_SERVICES[@]}"; do
        "stop_$name" &
        jobs[$name]=$!
    done
    for name in "${ALL_SERVICES[@]}"; do
        wait "${jobs[$name]}" || rc=1
    done
    rm -f "$DIR/env.sh" "$DIR/restart"
    return "$rc"
}

# ---------------------------------------------------------------------------------------------
# restart (fault tests): a server of DIR stopped by its pid and started again on its data
# ---------------------------------------------------------------------------------------------

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

cmd_restart() {
    (($# >= 2)) || usage
    local name down=0 sig=INT arg
    DIR=$1
    name=$2
    shift 2
    for arg in "$@"; do
        case $arg in
            --immediate) sig=QUIT ;;
            *)
                [[ $arg =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "restart: bad down time '$arg' (seconds)"
                down=$arg
                ;;
        esac
    done
    [[ -d $DIR/pids ]] || die "restart: nothing was started in $DIR"
    DIR=$(cd "$DIR" && pwd -P)
    PIDS=$DIR/pids
    LOGS=$DIR/logs
    mkdir -p "$LOGS"
    case $name in
        postgresql | postgres | pg) restart_postgresql "$down" "$sig" ;;
        *) die "restart: unknown or unsupported service '$name' (supported: postgresql)" ;;
    esac
}

# ---------------------------------------------------------------------------------------------

main() {
    (($# >= 1)) || usage
    local cmd=$1
    shift
    case $cmd in
        install) (($# == 0)) || usage; cmd_install ;;
        start) cmd_start "$@" ;;
        stop) cmd_stop "$@" ;;
        restart) cmd_restart "$@" ;;
        -h | --help | help) usage ;;
        *) usage ;;
    esac
}

main "$@"
