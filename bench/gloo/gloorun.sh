#!/bin/sh
# Starts N local ranks of a Gloo program (bench/gloo/gloo-bench.cc) and waits for them:
#
#   bench/gloo/gloorun.sh -n 4 build/bin/gloo-bench allreduce -b 8 -e 64M -f 4
#
# Each rank gets GLOO_BENCH_RANK, GLOO_BENCH_SIZE and GLOO_BENCH_STORE, an empty
# directory made here for Gloo's FileStore rendezvous and removed at the end. Gloo's
# TCP transport binds 127.0.0.1. When a rank fails the others are stopped, so that a
# lost peer does not leave them waiting for Gloo's timeout. Exits with the first
# nonzero status of a rank, else 0.
set -u

usage() { echo "usage: $0 -n N PROGRAM [ARGS...]" >&2; exit 2; }

[ "${1:-}" = "-n" ] && [ $# -ge 3 ] || usage
n=$2
shift 2
case $n in ''|*[!0-9]*) usage ;; esac
[ "$n" -ge 1 ] || usage

store=$(mktemp -d "${TMPDIR:-/tmp}/gloorun.XXXXXX") || exit 1
pids=""
cleanup() {
    for p in $pids; do kill "$p" 2>/dev/null; done
    rm -rf "$store"
}
trap 'cleanup; exit 130' INT TERM

r=0
while [ "$r" -lt "$n" ]; do
    GLOO_BENCH_RANK=$r GLOO_BENCH_SIZE=$n GLOO_BENCH_STORE=$store "$@" &
    pids="$pids $!"
    r=$((r + 1))
done

# Reap the ranks as they end (polling, as POSIX sh has no "wait for any"); after the
# first failure stop the rest.
status=0
left=$pids
while [ -n "$left" ]; do
    still=""
    for p in $left; do
        if kill -0 "$p" 2>/dev/null; then
            still="$still $p"
            continue
        fi
        wait "$p"
        rc=$?
        if [ "$rc" -ne 0 ] && [ "$status" -eq 0 ]; then
            status=$rc
            echo "gloorun: a rank (pid $p) exited with status $rc; stopping the others" >&2
            for q in $left; do [ "$q" != "$p" ] && kill "$q" 2>/dev/null; done
        fi
    done
    left=$still
    [ -n "$left" ] && sleep 0.05
done
pids=""
cleanup
exit "$status"
