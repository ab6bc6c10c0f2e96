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
# those of OUTBOX_SECOND_SERVICES_DIR (its env.sh). LOCKS (- for none) are servers, joined by
# commas, whose lock in that set (flock) it runs holding: at most one group using such a server
# (RabbitMQ) at a time, whatever lane it is in; taken in the order given, which is the same
# (sorted) for every group, so two groups cannot each hold the lock the other waits for. Usage:
#   run_group DIR NAME JOBS LOCKS SET [meson test args...]
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
    if [[ $lock != - ]]; then
        local -a servers
        local i
        IFS=, read -ra servers <<<"$lock"
        for ((i = ${#servers[@]} - 1; i >= 0; i--)); do
            run=(flock "$dir/meson-logs/${servers[i]}-$set.lock" "${run[@]}")
        done
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

# Runs the tests of build DIR in lanes side by side, as scripts/test_groups.py --lanes plans
# them. Two tests that share a database server never run at once (they see each other's outbox
# rows, notifications and replication slots), nor two that use one RabbitMQ node (its fault
# tests restart the node: the amqp lock) or any other server of scripts/services/ but the two
# databases (each its lock). With one set of servers, three lanes:
#   1. PostgreSQL: its tests, those that restart its server (pg_restart), then those that also
#      use RabbitMQ;
#   2. MariaDB: its tests, then those that also use RabbitMQ;
#   3. RabbitMQ without a database server, then the tests that use no server (SQLite files,
#      ZeroMQ sockets, Kafka mock clusters of their own), two at a time.
# With a second set (OUTBOX_SECOND_SERVICES_DIR), six: PostgreSQL and MariaDB of set 1, each
# alone; set 2's PostgreSQL restarts and RabbitMQ pairs; set 2's MariaDB and RabbitMQ pairs; set
# 1's RabbitMQ alone; and the tests that use no server. A server added later takes RabbitMQ's
# place beside it (its groups after RabbitMQ's in the same lanes, under its own lock). Within a
# group, a test marked not parallel still runs alone. Arguments: `--no-suite S` pairs exclude
# suites, the rest goes to meson test. Usage: run_tests DIR [args...]
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
    local sets=1 plan
    [[ -z ${OUTBOX_SECOND_SERVICES_DIR:-} ]] || sets=2
    if ! plan=$(python3 scripts/test_groups.py --lanes "$dir" "$sets" 2>&1); then
        echo "error: cannot plan the lanes of $dir: $plan"
        # shellcheck disable=SC2034 # the caller's (see the head of this file)
        meson_failed=1
        return
    fi
    # The plan: a line per group, LANE GROUP JOBS LOCKS SET, in the order the logs are collected.
    local -a lane_of=() groups=() jobs=() locks=() set_of=()
    local lane group j lock server_set
    while read -r lane group j lock server_set; do
        lane_of+=("$lane") groups+=("$group") jobs+=("$j") locks+=("$lock") set_of+=("$server_set")
    done <<<"$plan"
    for g in "${groups[@]}"; do
        rm -f "$dir/meson-logs/$g".{json,out,rc}
    done
    # Each lane in the background, its groups one after the other.
    local -a lanes=()
    local l i last
    last=$(printf '%s\n' "${lane_of[@]}" | sort -n | tail -n 1)
    for ((l = 1; l <= last; l++)); do
        (
            for i in "${!groups[@]}"; do
                ((lane_of[i] == l)) || continue
                run_group "$dir" "${groups[i]}" "${jobs[i]}" "${locks[i]}" "${set_of[i]}" \
                    "${args[@]}"
            done
        ) &
        lanes+=($!)
    done
    wait "${lanes[@]}" || true
    for g in "${groups[@]}"; do collect_group "$dir" "$g"; done
}
