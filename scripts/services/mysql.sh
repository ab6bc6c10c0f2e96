# shellcheck shell=bash
# scripts/services/mysql.sh: the MariaDB server of scripts/services.sh (see common.sh for what
# a server file defines). Its own my.cnf, data and socket in DIR/mysql.

MYSQL_PORT=$(set_port OUTBOX_MYSQL_PORT 23306)
readonly MYSQL_PORT

SERVER_PACKAGES+=(mariadb-server mariadb-client)
PID_NAMES+=(mysql)
PID_COMMS+=([mysql]="mariadbd mysqld")
DATA_DIRS+=([mysql]=mysql)
ALIASES+=([mysql]=mysql [mariadb]=mysql)

mysql_installed() {
    find_prog mariadbd mysqld >/dev/null || die "install: mariadbd not found"
}

mysql_ports() {
    require_free_port "$MYSQL_PORT" "mysql"
}

mysql_env() {
    export_line OUTBOX_TEST_MYSQL \
        "host=127.0.0.1 port=$MYSQL_PORT db=$DB_NAME user=$DB_USER password=$DB_PASS"
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
GRANT ALL PRIVILEGES ON *.* TO '$DB_USER'@'127.0.0.1' WITH GRANT OPTION;
GRANT ALL PRIVILEGES ON *.* TO '$DB_USER'@'localhost' WITH GRANT OPTION;
EOF
        show_tail "$log" "$err_log"
        die "mysql: could not create user and database"
    fi
    echo "mysql: ready on 127.0.0.1:$MYSQL_PORT (pid $pid) in $(elapsed_since "$t0") s"
}

stop_mysql() {
    local pid
    pid=$(read_pid mysql) || return 0
    # SIGTERM is mariadbd's normal shutdown request.
    terminate_pid mysql "$pid" 60 mariadbd mysqld
    rm -f "$PIDS/mysql.pid"
    echo "mysql: stopped"
}
