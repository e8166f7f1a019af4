#!/bin/sh
# Proves that traffic between emulated hosts crosses their veths and that traffic within a
# host does not touch the network: a ring allreduce of S = 16 MiB (float32, in place and
# out of place: two calls, checked exactly by mp_coll_matrix) on 4 hosts x 2 ranks.
#
# With ranks placed by block (host h holds ranks 2h and 2h+1) the ring 0..7 crosses each
# host's link once per direction, and each rank sends 2 (n-1)/n S per call, n = 8 ranks.
# So every host's veth must carry at least 2 calls x 2 x 7/8 x S = 3.5 S each way; and at
# most 5% more (headers; the veths pass 64 KiB GSO packets) plus 1 MiB (bootstrap, result
# hashes): more would mean extra crossings. The ring's hop between the two ranks of a host
# goes over shared memory, so the host's loopback (where TCP between them would go) must
# carry less than S / 8. And every rank's INFO log must say "peers: 1 shm, 6 tcp".
set -u
BUILD=${BUILD:-build}
HERE=$(dirname "$0")
PROG="$BUILD/tests/mp_coll_matrix"
[ -x "$PROG" ] || { echo "missing $PROG (run make)"; exit 1; }
unset CHORUS_TRANSPORT CHORUS_DEBUG_FILE CHORUS_CHUNK_SIZE 2>/dev/null
export CHORUS_TIMEOUT=${CHORUS_TIMEOUT:-30}
export CHORUS_DEBUG=info
export CHORUS_ALGO=ring
S=16777216
TMP=$(mktemp -d "${TMPDIR:-/tmp}/chorus-crosses-veth.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT

sh "$HERE/cluster.sh" --hosts 4 --ranks-per-host 2 --timeout 100 --stats "$TMP/stats" -- \
    "$PROG" --colls allreduce --dtypes float32 --ops sum --counts $((S / 4)) --large 0 \
    >"$TMP/log" 2>&1
rc=$?
if [ "$rc" -eq 77 ]; then grep 'skipped:' "$TMP/log" | tail -n 1; exit 77; fi
fail() {
    echo "FAIL: $*"
    grep -v ' core: .* bytes (class ' "$TMP/log" | tail -n 30
    exit 1
}
[ "$rc" -eq 0 ] || fail "cluster exit status $rc"
grep -q '\[host0 r0\] mp_coll_matrix: .* 2 passed, 0 failed' "$TMP/log" ||
    fail "expected rank 0 to report 2 exact allreduces"
grep 'allreduce of 16777216 bytes .*: ring' "$TMP/log" | grep -q . ||
    fail "the 16 MiB allreduce did not run the ring algorithm"

# Transport per peer, from each rank's own log.
for r in 0 1 2 3 4 5 6 7; do
    line=$(grep "rank $r\] core: comm .* ready: rank $r of 8" "$TMP/log")
    echo "rank $r: ${line#*ready: }"
    echo "$line" | grep -q 'on 4 host(s); peers: 1 shm, 6 tcp$' ||
        fail "rank $r: expected 4 hosts, 1 shm peer (its host mate) and 6 tcp peers"
done

echo "per-host link counters during the run (expected at least $((7 * S / 2)) bytes each way):"
awk -v s="$S" '
    { tx = $3; rx = $4; lo = $8; want = 2 * 2 * 7 / 8 * s; max = want * 1.05 + 1048576
      printf "  host%s veth tx %d rx %d (%.4f and %.4f of expected), %d packets each way;" \
             " loopback %d\n", $2, tx, rx, tx / want, rx / want, $5, lo
      if (tx < want || rx < want) { print "  host" $2 ": less than expected crossed"; bad = 1 }
      if (tx > max || rx > max) { print "  host" $2 ": more than expected crossed"; bad = 1 }
      if (lo >= s / 8) { print "  host" $2 ": intra-host traffic went over loopback TCP"; bad = 1 }
      n++ }
    END { exit bad || n != 4 }' "$TMP/stats" || fail "link counters out of range"
echo "ring allreduce traffic crossed every host's veth; ranks of one host used shm"
