# shellcheck shell=bash
# Sourced by the shell tests. wait_until SECONDS CMD [ARGS...]: runs CMD until it succeeds, for
# at most SECONDS by the clock (however long one try takes on a loaded machine), 0.1 s apart;
# returns 0 once it succeeded, 1 when the time ran out.
wait_until() {
    local -r end=$((SECONDS + $1))
    shift
    until "$@"; do
        ((SECONDS < end)) || return 1
        sleep 0.1
    done
}
