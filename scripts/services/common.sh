# shellcheck shell=bash disable=SC2034 # its settings and registry are read by the other files
# scripts/services/common.sh: what every server of scripts/services.sh shares: the credentials,
# the set's port shift, the registry each server file fills, and the process and port helpers.
#
# A server file (scripts/services/<name>.sh, sourced by scripts/services.sh) defines
#   start_<name>     starts it (in a background subshell: prints one "ready" line or dies)
#   stop_<name>      stops it by its pid files; silent when it was not started
#   <name>_ports     require_free_port for each port it will listen on
#   <name>_env       the export lines of env.sh for it
#   <name>_installed dies when `install` did not provide it
#   restart_<name>   (optional) restart DOWN_SECONDS SIGNAL, for the fault tests
# and registers itself below: its packages, its pid files, its data directory, its aliases.
# services.sh finds the file by itself; <name> is also the Meson suite of the tests that use the
# server (scripts/test_groups.py keeps two of them from running at once, a new server's under a
# lock of its own; scripts/flake_hunt.sh starts the server for them unless OUTBOX_TEST_<NAME>,
# upper case, is set: the first line <name>_env writes).

# Credentials and database name the tests use (see the OUTBOX_TEST_* strings in env.sh).
readonly DB_NAME=outbox_test
readonly DB_USER=outbox
readonly DB_PASS=outbox

# Set N of servers (OUTBOX_SERVICES_SET, 1-9) has every port + 20 * (N - 1), the given ones
# too, so that several sets run side by side (scripts/test.sh runs two) whatever the base. Set
# 9's ports stay below the ephemeral range and clear of every other server's.
readonly SET=${OUTBOX_SERVICES_SET:-1}
[[ $SET =~ ^[1-9]$ ]] || { echo "${0##*/}: OUTBOX_SERVICES_SET must be 1-9, not '$SET'" >&2; exit 2; }
readonly SHIFT=$((20 * (SET - 1)))

# Prints the port of environment variable $1 (default $2) in this set; exits 2 on a value that
# is not a number. Usage: PORT=$(set_port OUTBOX_X_PORT 12345); readonly PORT
set_port() {
    local v=$1
    [[ ${!v:-0} =~ ^[0-9]+$ ]] || { echo "${0##*/}: $v must be a port number, not '${!v}'" >&2; exit 2; }
    printf '%s\n' "$((${!v:-$2} + SHIFT))"
}

# The registry the server files fill (in the order they are sourced).
SERVER_PACKAGES=()       # Debian packages that `install` provides
PID_NAMES=()             # pid files under DIR/pids, each DIR/pids/<name>.pid
declare -A PID_COMMS=()  # pid file name -> command names its process may have (see is_ours)
declare -A DATA_DIRS=()  # server -> its directory under DIR
declare -A ALIASES=()    # name accepted on the command line -> server

# ---------------------------------------------------------------------------------------------
# Small helpers
# ---------------------------------------------------------------------------------------------

log() { printf '%s: %s\n' "$PROG" "$*" >&2; }
die() { log "error: $*"; exit 1; }

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

# Writes the TLS files of a test server (RabbitMQ, the TLS nats-server) into directory $1 (EC P-256 keys, PKCS#8; valid
# 30 days; about 0.1 s):
#   ca.pem                          the test CA (the server trusts client certificates from it)
#   server.pem, server.key          the server's certificate: DNS name "localhost" only, so
#                                   connecting to 127.0.0.1 fails hostname verification
#   client.pem, client.key          a client certificate from the test CA
#   client-encrypted.key            client.key under a passphrase ("outbox")
#   other-ca.pem                    an unrelated CA (a client trusting only it refuses the server)
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
    # Readable by the server whatever user it runs as (these are throwaway test keys).
    for name in "$d"/*; do chmod 644 "$name" || return 1; done
}
