#!/usr/bin/env bash
# scripts/services.sh: throwaway PostgreSQL, MariaDB, RabbitMQ and NATS (JetStream) servers for
# outbox's tests.
#
#   scripts/services.sh install
#       apt-get installs the server packages (Debian 12: PostgreSQL 15, MariaDB 10.11,
#       RabbitMQ 3.10, nats-server 2.9). Needs root (or sudo).
#
#   scripts/services.sh start DIR [postgresql] [mysql] [amqp] [nats]
#       Starts the named servers (all of them when none is named), in parallel, each with its own
#       data directory under DIR, listening on 127.0.0.1 only, on non-default ports. Writes
#       DIR/env.sh with the OUTBOX_TEST_* connection strings the tests read, and the pid of
#       every process it started to DIR/pids/<name>.pid.
#
#   scripts/services.sh stop DIR
#       Stops what `start` started in DIR (and only that), by pid. Safe to run twice, or on a
#       DIR whose servers already died.
#
#   scripts/services.sh restart DIR postgresql|nats [DOWN_SECONDS] [--immediate]
#       Restarts the PostgreSQL (or NATS) server that `start` started in DIR: stops it by its pid (fast
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
#   OUTBOX_NATS_PORT (24222, nats-server with JetStream)
#   OUTBOX_NATS_TLS_PORT (24223, a second nats-server: TLS required, user/password or NKey)
#   OUTBOX_NATS_CREDS_PORT (24224, a third: an operator's users, .creds files)
# or run another set of servers beside the first with OUTBOX_SERVICES_SET=N (2-9): every port
# above (default or given) + 20 * (N - 1).
#
# For rabbitmqctl against the test node: (. DIR/rabbitmq/ctl-env.sh && rabbitmqctl list_queues)
#
# The RabbitMQ node also listens with TLS (amqps) on OUTBOX_AMQPS_PORT, with certificates made
# at start by openssl in DIR/rabbitmq/tls (see make_tls_files): a test CA, a server certificate
# for the name "localhost" only, client certificates from that CA and from an unrelated one.
# The TLS nats-server has the same kind of files in DIR/nats/tls, with NKeys and .creds files
# for it and the creds server (scripts/services/nats_keys.py, with python3-cryptography).
#
# Layout: this file is the commands; scripts/services/common.sh the helpers and the registry
# every server fills; scripts/services/<name>.sh one server each (its ports, packages, start,
# stop, env.sh lines). A new server is a new file there, nothing else: every file of that
# folder but common.sh is a server, found below.

# shellcheck source-path=SCRIPTDIR # the files of scripts/services/, sourced below
set -euo pipefail

readonly PROG=${0##*/}
SERVICES_LIB=$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/services
readonly SERVICES_LIB

# shellcheck source=services/common.sh
. "$SERVICES_LIB/common.sh"

# Every service this script knows, in the order they are reported (and their files sourced):
# the two database servers first, as they always were, then the others by name.
ALL_SERVICES=()
for name in postgresql mysql "$SERVICES_LIB"/*.sh; do
    name=${name##*/}
    name=${name%.sh}
    [[ $name != common && -e $SERVICES_LIB/$name.sh && " ${ALL_SERVICES[*]} " != *" $name "* ]] ||
        continue
    # The name is the suffix of the file's functions (start_<name>, ...).
    [[ $name =~ ^[a-z][a-z0-9_]*$ ]] ||
        die "$SERVICES_LIB/$name.sh: a server's file is named [a-z][a-z0-9_]*.sh"
    ALL_SERVICES+=("$name")
done
readonly ALL_SERVICES
((${#ALL_SERVICES[@]} > 0)) || die "no server file in $SERVICES_LIB"
for name in "${ALL_SERVICES[@]}"; do
    # shellcheck source=/dev/null # each of scripts/services/*.sh, checked on its own
    . "$SERVICES_LIB/$name.sh"
done
unset name
readonly SERVER_PACKAGES PID_NAMES PID_COMMS DATA_DIRS ALIASES

# The servers that `restart` supports: those with a restart_<name>.
restartable() {
    local name
    for name in "${ALL_SERVICES[@]}"; do
        if declare -F "restart_$name" >/dev/null; then printf '%s\n' "$name"; fi
    done
}

# Joins its arguments as a list in words: "a", "a or b", "a, b or c".
either() {
    local text=$1
    shift
    while (($# > 1)); do
        text+=", $1"
        shift
    done
    if (($# == 1)); then text+=" or $1"; fi
    printf '%s' "$text"
}

usage() {
    local start restart
    start=$(printf ' [%s]' "${ALL_SERVICES[@]}")
    restart=$(restartable | paste -sd'|' -)
    cat >&2 <<EOF
usage: $PROG install
       $PROG start DIR$start
       $PROG stop DIR
       $PROG restart DIR $restart [DOWN_SECONDS] [--immediate]
EOF
    exit 2
}

# ---------------------------------------------------------------------------------------------
# install
# ---------------------------------------------------------------------------------------------

cmd_install() {
    local sudo=() missing=() pkg name rc=0
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
    for name in "${ALL_SERVICES[@]}"; do
        "${name}_installed"
    done
    log "install: done"
}

# ---------------------------------------------------------------------------------------------
# start: each server's start_<name> runs in its own background subshell. Each prints one
# "ready" line on stdout, sends the noise of its setup commands to $LOGS/<name>.log, and on
# failure prints the reason and the relevant log tails on stderr and exits non-zero.
# ---------------------------------------------------------------------------------------------

cmd_start() {
    (($# >= 1)) || usage
    local t0 name pid failed=() services=() seen=" "
    t0=$(now_us)
    DIR=$1
    shift

    # Which servers: the named ones (a few aliases accepted), else all.
    for name in "$@"; do
        [[ -n ${ALIASES[$name]:-} ]] ||
            die "start: unknown service '$name' (expected $(either "${ALL_SERVICES[@]}"))"
        name=${ALIASES[$name]}
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
        for name in "${PID_NAMES[@]}"; do
            pid=$(read_pid "$name") || continue
            # shellcheck disable=SC2086 # PID_COMMS holds several words on purpose
            if is_ours "$pid" ${PID_COMMS[$name]}; then
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

    # Check every port before starting anything.
    for name in "${services[@]}"; do
        "${name}_ports"
    done

    # A throwaway area: whatever an earlier, stopped run left there goes.
    rm -rf "$PIDS" "$LOGS" "$DIR/env.sh" "$DIR/restart"
    for name in "${services[@]}"; do
        rm -rf "${DIR:?}/${DATA_DIRS[$name]}"
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
            "${name}_env"
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
    local server=${ALIASES[$name]:-}
    if [[ -z $server ]] || ! declare -F "restart_$server" >/dev/null; then
        local supported
        mapfile -t supported < <(restartable)
        die "restart: unknown or unsupported service '$name' (supported: $(either "${supported[@]}"))"
    fi
    "restart_$server" "$down" "$sig"
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
