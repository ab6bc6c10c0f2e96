# shellcheck shell=bash
# scripts/services/amqp.sh: the RabbitMQ node of scripts/services.sh (see common.sh for what a
# server file defines), with its own epmd, Erlang cookie and ports, and a TLS listener. Its
# files are in DIR/rabbitmq; DIR/rabbitmq/ctl-env.sh is the environment rabbitmqctl needs.

AMQP_PORT=$(set_port OUTBOX_AMQP_PORT 27672)
AMQPS_PORT=$(set_port OUTBOX_AMQPS_PORT 27671)
AMQP_DIST_PORT=$(set_port OUTBOX_AMQP_DIST_PORT 27673)
EPMD_PORT=$(set_port OUTBOX_EPMD_PORT 24369)
AMQP_CTL_PORT_MIN=$(set_port OUTBOX_AMQP_CTL_PORT_MIN 27674)
AMQP_CTL_PORT_MAX=$(set_port OUTBOX_AMQP_CTL_PORT_MAX 27683)
readonly AMQP_PORT AMQPS_PORT AMQP_DIST_PORT EPMD_PORT AMQP_CTL_PORT_MIN AMQP_CTL_PORT_MAX

# The broker's password is distinctive, so that tests can check it never shows in error texts.
readonly AMQP_PASS=amqp-secret-d41c
# Erlang node name of the test broker (the host part must resolve: localhost always does).
readonly AMQP_NODE=outbox_test@localhost
# The real RabbitMQ scripts, not the /usr/sbin wrappers (those switch to the rabbitmq user and
# reset HOME, which would lose our private environment).
readonly RMQ_BIN=/usr/lib/rabbitmq/bin

# openssl makes the TLS certificates of the node.
SERVER_PACKAGES+=(rabbitmq-server openssl)
PID_NAMES+=(amqp amqp-launcher epmd)
PID_COMMS+=([amqp]="beam.smp beam" [amqp-launcher]=rabbitmq-server [epmd]=epmd)
DATA_DIRS+=([amqp]=rabbitmq)
ALIASES+=([amqp]=amqp [rabbitmq]=amqp)

find_epmd() {
    local c
    find_prog epmd && return 0
    for c in /usr/lib/erlang/bin/epmd /usr/lib/erlang/erts-*/bin/epmd; do
        [[ -x $c ]] && { printf '%s\n' "$c"; return 0; }
    done
    return 1
}

amqp_installed() {
    [[ -x $RMQ_BIN/rabbitmq-server ]] || die "install: $RMQ_BIN/rabbitmq-server not found"
}

amqp_ports() {
    require_free_port "$AMQP_PORT" "amqp"
    require_free_port "$AMQPS_PORT" "amqp (TLS)"
    require_free_port "$AMQP_DIST_PORT" "amqp (Erlang distribution)"
    require_free_port "$EPMD_PORT" "amqp (epmd)"
}

amqp_env() {
    # No trailing slash: "/" at the end would name the vhost "", not "/".
    export_line OUTBOX_TEST_AMQP \
        "amqp://$DB_USER:$AMQP_PASS@127.0.0.1:$AMQP_PORT"
    # TLS: the server certificate names "localhost" (see make_tls_files).
    export_line OUTBOX_TEST_AMQPS \
        "amqps://$DB_USER:$AMQP_PASS@localhost:$AMQPS_PORT"
    export_line OUTBOX_TEST_AMQP_TLS_DIR "$DIR/rabbitmq/tls"
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

    # Our own epmd, in the foreground of its own session (see start_mysql, mysql.sh, on setsid
    # and $!), so that its pid is known and `stop` can end it: epmd outlives the node.
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
