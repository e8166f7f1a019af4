#!/bin/sh
# The hierarchical allreduce (CHORUS_ALGO=hier) on emulated clusters (tests/cluster/cluster.sh):
#
# 1. every collective x dtype x op (mp_coll_matrix; hier runs the allreduces, the other
#    collectives fall back to their default algorithms) on 2 hosts x 2 ranks, placed by
#    block, and on 4 hosts x 2 ranks placed cyclically (host r % 4: a host's ranks are not
#    contiguous), checking that every rank mixed the transports (1 shm peer, the rest tcp);
# 2. that hier crosses the network as a hierarchy should: an allreduce of S = 16 MiB
#    (float32, in place and out of place: two calls) on 4 hosts x 2 cyclic ranks must move
#    2 (H - 1) / H S per call over each host's veth each way, 2 x 1.5 S = 3 S in all, at
#    most 5% more (headers) plus 1 MiB (bootstrap, result hashes). A flat ring on this
#    placement would cross a link at every hop (7 S); the intra-host phases go over shared
#    memory, so the loopback must carry less than S / 8.
# Skipped (77) without network namespaces.
set -u
BUILD=${BUILD:-build}
HERE=$(dirname "$0")
PROG="$BUILD/tests/mp_coll_matrix"
[ -x "$PROG" ] || { echo "missing $PROG (run make)"; exit 1; }
unset CHORUS_TRANSPORT CHORUS_DEBUG_FILE CHORUS_CHUNK_SIZE 2>/dev/null
export CHORUS_TIMEOUT=${CHORUS_TIMEOUT:-30}
# The INFO log carries the "peers: X shm, Y tcp" line and the algorithm of every size class.
export CHORUS_DEBUG=info
export CHORUS_ALGO=hier
TMP=$(mktemp -d "${TMPDIR:-/tmp}/chorus-cluster-hier.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT
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

# matrix_case LABEL HOSTS RPH PLACEMENT [matrix options]
matrix_case() {
    label=$1 hosts=$2 rph=$3 placement=$4
    shift 4
    n=$((hosts * rph))
    t0=$(date +%s)
    sh "$HERE/cluster.sh" --hosts "$hosts" --ranks-per-host "$rph" --placement "$placement" \
        --timeout 100 -- "$PROG" "$@" >"$TMP/log" 2>&1
    rc=$?
    if [ "$rc" -eq 77 ]; then part_skip "$label" "$TMP/log"; return; fi
    RAN=$((RAN + 1))
    summary=$(grep '\[host0 r0\] mp_coll_matrix: algo=hier .* passed, 0 failed' "$TMP/log")
    peers="peers: $((rph - 1)) shm, $((n - rph)) tcp"
    mixed=$(grep -c "ready: rank [0-9]* of $n on $hosts host(s); $peers" "$TMP/log")
    ran=$(grep -c 'allreduce of [0-9]* bytes .*: hier (CHORUS_ALGO)' "$TMP/log")
    if [ "$rc" -ne 0 ] || [ -z "$summary" ] || [ "$mixed" -ne "$n" ] || [ "$ran" -eq 0 ]; then
        echo "FAIL $label: cluster exit $rc, $mixed of $n ranks with the expected peers," \
            "$ran hier allreduce log lines"
        grep -v ' core: .* bytes (class ' "$TMP/log" | tail -n 40
        FAILED=1
        return
    fi
    echo "ok   $label ($(($(date +%s) - t0)) s): ${summary#*mp_coll_matrix: }"
}

matrix_case "2x2 block, every collective, algo=hier" 2 2 block
matrix_case "4x2 cyclic, every collective, algo=hier" 4 2 cyclic --large 0 \
    --large-colls allreduce

# ---- Bytes on the wire ----
S=16777216
sh "$HERE/cluster.sh" --hosts 4 --ranks-per-host 2 --placement cyclic --timeout 100 \
    --stats "$TMP/stats" -- "$PROG" --colls allreduce --dtypes float32 --ops sum \
    --counts $((S / 4)) --large 0 >"$TMP/log" 2>&1
rc=$?
if [ "$rc" -eq 77 ]; then
    part_skip "4x2 cyclic traffic" "$TMP/log"
elif [ "$rc" -ne 0 ] || ! grep -q '\[host0 r0\] mp_coll_matrix: .* 2 passed, 0 failed' "$TMP/log" ||
    ! grep -q "allreduce of $S bytes .*: hier" "$TMP/log"; then
    echo "FAIL 4x2 cyclic traffic: cluster exit $rc, or not 2 exact hier allreduces of $S bytes"
    grep -v ' core: .* bytes (class ' "$TMP/log" | tail -n 30
    FAILED=1
else
    RAN=$((RAN + 1))
    echo "per-host link counters, 4x2 cyclic, 2 hier allreduces of $S bytes" \
        "(expected at least $((3 * S)) bytes each way):"
    if awk -v s="$S" '
        { tx = $3; rx = $4; lo = $8; want = 2 * 2 * 3 / 4 * s; max = want * 1.05 + 1048576
          printf "  host%s veth tx %d rx %d (%.4f and %.4f of expected); loopback %d\n", $2,
                 tx, rx, tx / want, rx / want, lo
          if (tx < want || rx < want) { print "  host" $2 ": less than expected crossed"; bad = 1 }
          if (tx > max || rx > max) { print "  host" $2 ": more than expected crossed"; bad = 1 }
          if (lo >= s / 8) { print "  host" $2 ": intra-host traffic went over loopback TCP"
                             bad = 1 }
          n++ }
        END { exit bad || n != 4 }' "$TMP/stats"; then
        echo "ok   4x2 cyclic: each host's link carried 2 (H-1)/H S per call, intra-host on shm"
    else
        echo "FAIL 4x2 cyclic: link counters out of range"
        FAILED=1
    fi
fi

[ "$FAILED" -eq 0 ] || { echo "cluster hier: FAILED"; exit 1; }
[ "$RAN" -gt 0 ] || { echo "$SKIP_WHY"; exit 77; }
echo "cluster hier: exact on 2x2 block and 4x2 cyclic hosts; one crossing per host pair hop"
