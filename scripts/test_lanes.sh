#!/usr/bin/env bash
# scripts/test_lanes.sh: runs the tests of a build in lanes by the servers they use, so that two
# tests sharing a server never run at once. Sourced by scripts/test.sh and scripts/flake_hunt.sh;
# run_tests adds each group's log to the array `testlogs` and sets `meson_failed=1` when a
# group's meson test failed (both the caller's).
#
# With OUTBOX_SECOND_SERVICES_DIR naming a second set of servers (scripts/services.sh start,
# other ports), the groups are spread over both sets, in six lanes instead of three.

# One group of the tests of build DIR (scripts/test_groups.py: by the servers they use), in the
# background-safe form: its own log (meson-logs/NAME.json), its output in meson-logs/NAME.out
# and its exit code in NAME.rc. SET is the servers it uses: 1, those of the environment; 2,
# those of OUTBOX_SECOND_SERVICES_DIR (its env.sh). With LOCK=amqp it runs holding that set's
# RabbitMQ lock (flock): at most one group using a RabbitMQ node at a time, whatever lane it is
# in. Usage:
#   run_group DIR NAME JOBS LOCK SET [meson test args...]
# (the excluded suites come from run_tests' exclusions, its local `excluded`).
run_group() {
    local dir=$1 name=$2 jobs=$3 lock=$4 set=$5 rc=0
    shift 5
    local list
    if ! list=$(python3 scripts/test_groups.py "$dir" "$name" "${excluded[@]}" 2>&1); then
        echo "error: cannot list the tests of group $name: $list" >"$dir/meson-logs/$name.out"
        echo 1 >"$dir/meson-logs/$name.rc"
        return
    fi
    local -a names
    mapfile -t names <<<"$list"
    [[ -n $list ]] || names=()
    if ((${#names[@]} == 0)); then  # no test: meson test would run them all
        echo "no test in group $name" >"$dir/meson-logs/$name.out"
        echo 0 >"$dir/meson-logs/$name.rc"
        return
    fi
    local -a run=(meson test -C "$dir" --no-rebuild --print-errorlogs --num-processes "$jobs"
        --logbase "$name" "$@" "${names[@]}")
    if [[ $lock == amqp ]]; then
        run=(flock "$dir/meson-logs/amqp-$set.lock" "${run[@]}")
    fi
    if [[ $set == 2 ]]; then
        # shellcheck source=/dev/null
        (. "$OUTBOX_SECOND_SERVICES_DIR/env.sh" && "${run[@]}") >"$dir/meson-logs/$name.out" 2>&1 ||
            rc=$?
    else
        "${run[@]}" >"$dir/meson-logs/$name.out" 2>&1 || rc=$?
    fi
    echo "$rc" >"$dir/meson-logs/$name.rc"
}

# Prints a group's output and records its log and exit code. Usage: collect_group DIR NAME
collect_group() {
    local dir=$1 name=$2 rc
    cat "$dir/meson-logs/$name.out"
    rc=$(cat "$dir/meson-logs/$name.rc" 2>/dev/null || echo 1)
    echo "meson test ($dir, $name) exited $rc"
    ((rc == 0)) || meson_failed=1
    if ((rc != 0)) || [[ -e $dir/meson-logs/$name.json ]]; then
        testlogs+=("$dir/meson-logs/$name.json")
    fi
}

# Runs the tests of build DIR in lanes side by side. Two tests that share a database server
# never run at once (they see each other's outbox rows, notifications and replication slots),
# nor two that use one RabbitMQ node (its fault tests restart the node: the amqp lock). With one
# set of servers, three lanes:
#   1. PostgreSQL: its tests, those that restart its server (pg_restart), then those that also
#      use RabbitMQ;
#   2. MariaDB: its tests, then those that also use RabbitMQ;
#   3. RabbitMQ without a database server, then the tests that use no server (SQLite files,
#      ZeroMQ sockets, Kafka mock clusters of their own), two at a time.
# With a second set (OUTBOX_SECOND_SERVICES_DIR), six: PostgreSQL and MariaDB of set 1, each
# alone; set 2's PostgreSQL restarts and RabbitMQ pairs; set 2's MariaDB and RabbitMQ pairs; set
# 1's RabbitMQ alone; and the tests that use no server. Within a group, a test marked not
# parallel still runs alone. Arguments: `--no-suite S` pairs exclude suites, the rest goes to
# meson test. Usage: run_tests DIR [args...]
run_tests() {
    local dir=$1 g
    shift
    local -a excluded=()  # read by run_group (bash scoping: the callee sees it)
    local -a args=()
    while (($# > 0)); do
        if [[ $1 == --no-suite ]]; then
            excluded+=(--no-suite "$2")
            shift 2
        else
            args+=("$1")
            shift
        fi
    done
    local -r groups=(postgresql pg_restart pg_restart_amqp postgresql_amqp mysql mysql_amqp amqp local)
    for g in "${groups[@]}"; do
        rm -f "$dir/meson-logs/$g".{json,out,rc}
    done
    local -a lanes=()
    if [[ -n ${OUTBOX_SECOND_SERVICES_DIR:-} ]]; then
        run_group "$dir" postgresql 1 - 1 "${args[@]}" &
        lanes+=($!)
        run_group "$dir" mysql 1 - 1 "${args[@]}" &
        lanes+=($!)
        (
            run_group "$dir" pg_restart 1 - 2 "${args[@]}"
            run_group "$dir" pg_restart_amqp 1 amqp 2 "${args[@]}"
            run_group "$dir" postgresql_amqp 1 amqp 2 "${args[@]}"
        ) &
        lanes+=($!)
        run_group "$dir" mysql_amqp 1 amqp 2 "${args[@]}" &
        lanes+=($!)
        run_group "$dir" amqp 1 amqp 1 "${args[@]}" &
        lanes+=($!)
        run_group "$dir" local 2 - - "${args[@]}" &
        lanes+=($!)
    else
        (
            run_group "$dir" postgresql 1 - 1 "${args[@]}"
            run_group "$dir" pg_restart 1 - 1 "${args[@]}"
            run_group "$dir" pg_restart_amqp 1 amqp 1 "${args[@]}"
            run_group "$dir" postgresql_amqp 1 amqp 1 "${args[@]}"
        ) &
        lanes+=($!)
        (
            run_group "$dir" mysql 1 - 1 "${args[@]}"
            run_group "$dir" mysql_amqp 1 amqp 1 "${args[@]}"
        ) &
        lanes+=($!)
        (
            run_group "$dir" amqp 1 amqp 1 "${args[@]}"
            run_group "$dir" local 2 - - "${args[@]}"
        ) &
        lanes+=($!)
    fi
    wait "${lanes[@]}" || true
    for g in "${groups[@]}"; do collect_group "$dir" "$g"; done
}
