#!/bin/sh
# Every collective x dtype x op (mp_coll_matrix) on an emulated cluster of 4 hosts x 2 ranks
# (tests/cluster/cluster.sh): shared memory between the two ranks of a host, TCP over the
# veths and the bridge between hosts. Once per algorithm on free links, then once with
# capped links and one host four times slower than the others (a straggler link: the
# pipelines must wait for it, not lose or reorder data); then on 16 hosts x 1 and x 2.
# Also checks that every rank really mixed the transports: "peers: 1 shm, 6 tcp" on 4 x 2.
# Skipped (77) without netns; a case that could not run (no tc) prints a PART-SKIP line.
set -u
BUILD=${BUILD:-build}
HERE=$(dirname "$0")
PROG="$BUILD/tests/mp_coll_matrix"
[ -x "$PROG" ] || { echo "missing $PROG (run make)"; exit 1; }
unset CHORUS_TRANSPORT CHORUS_ALGO CHORUS_DEBUG_FILE 2>/dev/null
# A hang in the library becomes an error well before the cluster's own deadline.
export CHORUS_TIMEOUT=${CHORUS_TIMEOUT:-30}
# The INFO log carries the "peers: X shm, Y tcp" line of every rank.
export CHORUS_DEBUG=info
LOG=$(mktemp "${TMPDIR:-/tmp}/chorus-cluster-matrix.XXXXXX") || exit 1
trap 'rm -f "$LOG"' EXIT
FAILED=0
# part_skip PART LOG: cluster.sh could not run this part (77: no network namespaces, no tc
# for --rate); one PART-SKIP line says so with cluster.sh's reason, and the script skips as
# a whole (exit 77, that reason) only when no part ran at all.
RAN=0
SKIP_WHY=""
part_skip() {
    SKIP_WHY=$(grep -o 'skipped: .*' "$2" | tail -n 1)
    echo "PART-SKIP $1: ${SKIP_WHY:=skipped: (cluster.sh gave no reason)}"
}

# case LABEL [cluster options] -- matrix options (HOSTS x RPH ranks, 4 x 2 unless set)
HOSTS=4 RPH=2
case_run() {
    label=$1
    shift
    t0=$(date +%s)
    sh "$HERE/cluster.sh" --hosts "$HOSTS" --ranks-per-host "$RPH" --timeout 200 "$@" >"$LOG" 2>&1
    rc=$?
    if [ "$rc" -eq 77 ]; then
        part_skip "$label" "$LOG"
        return
    fi
    RAN=$((RAN + 1))
    n=$((HOSTS * RPH))
    summary=$(grep '\[host0 r0\] mp_coll_matrix: .* passed, 0 failed' "$LOG")
    mixed=$(grep -c "ready: rank [0-9]* of $n on $HOSTS host(s); peers: $((RPH - 1)) shm, $((n - RPH)) tcp" "$LOG")
    if [ "$rc" -ne 0 ] || [ -z "$summary" ] || [ "$mixed" -ne "$n" ]; then
        echo "FAIL $label: cluster exit $rc, $mixed of $n ranks with $((RPH - 1)) shm + $((n - RPH)) tcp peers"
        grep -v ' core: .* bytes (class ' "$LOG" | tail -n 40
        FAILED=1
        return
    fi
    echo "ok   $label ($(($(date +%s) - t0)) s): ${summary#*mp_coll_matrix: }"
}

for algo in auto ring tree rd hier; do
    case_run "4x2 free links, algo=$algo" -- "$PROG" --algo "$algo"
done
# Capped links, host 2 at a quarter of the others' rate. The large cases would take long
# at these rates, so only the standard counts.
case_run "4x2 links 400mbit, host 2 at 100mbit, algo=auto" \
    --rate 400mbit --rate-of 2=100mbit -- "$PROG" --large 0

# 16 hosts (issue 19): every collective over tcp between 16 network namespaces, and with a
# rank pair on each (32 ranks on this machine's cores, so only the standard counts).
HOSTS=16 RPH=1
case_run "16x1 free links, algo=auto" -- "$PROG" --large 0
HOSTS=16 RPH=2
case_run "16x2 free links, algo=auto" -- "$PROG" --large 0

[ "$FAILED" -eq 0 ] || exit 1
[ "$RAN" -gt 0 ] || { echo "$SKIP_WHY"; exit 77; }
echo "cluster matrix: every collective exact on 4 hosts x 2 ranks and 16 hosts x 1 and 2 (shm within, tcp between)"
