#!/bin/sh
# What the call signatures cost: the same small allreduce with and without them
# (CHORUS_CHECK_CALLS=1 and 0), in alternating rounds of one run, so that the machine's
# drift hits both alike. Prints every round and the median of each, and their ratio.
#
#   sh bench/sig_cost.sh [-n RANKS] [-t tcp|shm|auto] [-b BYTES] [-r ROUNDS] [-i ITERS]
#
# Defaults: 2 ranks over tcp, 8 bytes, 7 rounds of 20000 calls each (issue 18: within 10%).
set -u
BUILD=${BUILD:-build}
RANKS=2 TP=tcp BYTES=8 ROUNDS=7 ITERS=20000
while getopts n:t:b:r:i: opt; do
    case $opt in
    n) RANKS=$OPTARG ;;
    t) TP=$OPTARG ;;
    b) BYTES=$OPTARG ;;
    r) ROUNDS=$OPTARG ;;
    i) ITERS=$OPTARG ;;
    *) sed -n '2,9p' "$0"; exit 2 ;;
    esac
done
RUN="$BUILD/bin/chorusrun" BENCH="$BUILD/bin/chorus-bench"
[ -x "$RUN" ] && [ -x "$BENCH" ] || { echo "missing $RUN or $BENCH (run make)"; exit 1; }
OUT=$(mktemp -d "${TMPDIR:-/tmp}/chorus-sig.XXXXXX") || exit 1
trap 'rm -rf "$OUT"' EXIT

# one MODE: the out-of-place time (us) of one chorus-bench run, or nothing on failure.
one() {
    CHORUS_CHECK_CALLS=$1 "$RUN" -n "$RANKS" -q -- "$BENCH" allreduce -b "$BYTES" -e "$BYTES" \
        --transport "$TP" -n "$ITERS" -c 1 2>&1 |
        awk -v b="$BYTES" '$1 == b && $2 ~ /^[0-9]+$/ { print $6; exit }'
}

echo "# allreduce of $BYTES B, $RANKS ranks, transport $TP, $ITERS calls per round"
echo "# round  signed(us)  unsigned(us)"
for r in $(seq 1 "$ROUNDS"); do
    a=$(one 1) b=$(one 0)
    [ -n "$a" ] && [ -n "$b" ] || { echo "round $r: a run failed"; exit 1; }
    echo "$a" >>"$OUT/signed"
    echo "$b" >>"$OUT/unsigned"
    printf "%7d  %10s  %12s\n" "$r" "$a" "$b"
done
median() { sort -n "$1" | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
ms=$(median "$OUT/signed") mu=$(median "$OUT/unsigned")
awk -v s="$ms" -v u="$mu" 'BEGIN { printf "median: signed %.2f us, unsigned %.2f us, signed/unsigned %.3f\n", s, u, s / u }'
