#!/bin/sh
# chorus-bench -R (issue 38), every figure it adds:
#   1. on 2 and 3 ranks, allreduce (one-shot and two-shot sizes) and allgather with -R 1 give
#      0 wrong elements, and "# Registered memory" says calls read every peer in place (more
#      than 0), while the same run with -R 0 prints no such line;
#   2. the bound of each row is what the printed memory bandwidth allows for the path's
#      reads and writes (recomputed here from the printed M with the table of
#      bench/README.md, "Registered memory"), and the fraction is busbw / bound;
#   3. -R 1 with -G is refused; --json records options.registered 1.
set -u
BUILD=${BUILD:-build}
RUN="$BUILD/bin/chorusrun"
BENCH="$BUILD/bin/chorus-bench"
[ -x "$RUN" ] && [ -x "$BENCH" ] || { echo "missing $RUN or $BENCH (run make)"; exit 1; }
unset CHORUS_UNIQUE_ID CHORUS_RANK CHORUS_WORLD_SIZE CHORUS_LOCAL_RANK CHORUS_LOCAL_SIZE \
    CHORUS_ROOT CHORUS_ALGO CHORUS_TRANSPORT CHORUS_ARENA CHORUS_WIN_ONESHOT_MAX 2>/dev/null
export CHORUS_TIMEOUT=${CHORUS_TIMEOUT:-30}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/chorus-bench-reg.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT
trap 'exit 1' INT TERM HUP
FAILED=0

fail() {
    echo "FAIL: $*"
    FAILED=1
}

# check_bounds OUT N: every bound line of OUT against the table (factor: nccl-tests').
check_bounds() {
    awk -v n="$2" '
        /Memory bandwidth/ { for (i = 1; i <= NF; i++) if ($i == "reads") m = $(i - 3) }
        /# The bound it sets/ { inb = 1; next }
        inb && $3 ~ /^[a-z_]+$/ && $4 ~ /^[0-9]+$/ {
            coll = $3; size = $4; busbw = $5; bound = $6; frac = $7
            if (coll == "allreduce") {
                lim = n > 4 ? 262144 * 4 / n : 262144
                per = (n == 2 || size <= lim) ? n * (n + 1) : 3 * n - 1
                factor = 2 * (n - 1) / n
            } else if (coll == "reduce_scatter") { per = n + 1; factor = (n - 1) / n }
            else if (coll == "broadcast") { per = 2 * n; factor = 1 }
            else { per = 2 * n; factor = (n - 1) / n }
            want = factor * m / per
            rows++
            if (bound < want * 0.97 - 0.02 || bound > want * 1.03 + 0.02) {
                printf "row %s %s: bound %s, the table gives %.3f (M %s GB/s)\n", coll, size,
                    bound, want, m
                bad = 1
            }
            if (frac < busbw / bound - 0.02 || frac > busbw / bound + 0.02) {
                printf "row %s %s: fraction %s, busbw / bound is %.3f\n", coll, size, frac,
                    busbw / bound
                bad = 1
            }
        }
        END {
            if (m == "") { print "no memory bandwidth line"; bad = 1 }
            if (rows == 0) { print "no bound rows"; bad = 1 }
            exit bad
        }' "$1"
}

for n in 2 3; do
    for coll in allreduce allgather; do
        out="$TMP/$coll.$n"
        # 128 KiB (one-shot on any n), 1 MiB (two-shot from 3 ranks).
        if ! "$RUN" -n "$n" --timeout 120 -- "$BENCH" "$coll" -b 128K -e 1M -f 8 -n 20 -w 2 \
            -c 1 -R 1 >"$out" 2>&1; then
            fail "$coll n=$n -R 1 failed"
            tail -n 20 "$out"
            continue
        fi
        grep -q "Out of bounds values : 0 OK" "$out" || fail "$coll n=$n -R 1: wrong values"
        calls=$(sed -n 's/.*Registered memory *: rank 0: \([0-9]*\) calls.*/\1/p' "$out")
        [ -n "$calls" ] && [ "$calls" -gt 0 ] ||
            fail "$coll n=$n -R 1: no call read its peers' buffers in place (${calls:-no line})"
        grep -q "registered (-R 1)" "$out" || fail "$coll n=$n: the header does not say -R 1"
        check_bounds "$out" "$n" || fail "$coll n=$n: the bound or fraction is not the model's"
    done
    out="$TMP/plain.$n"
    "$RUN" -n "$n" --timeout 120 -- "$BENCH" allreduce -b 128K -e 128K -n 5 -w 1 -R 0 \
        >"$out" 2>&1 || fail "allreduce n=$n -R 0 failed"
    ! grep -q "Registered memory\|Memory bandwidth" "$out" || fail "-R 0 printed -R figures"
done
if "$BENCH" allreduce -R 1 -G >"$TMP/g" 2>&1; then
    fail "-R 1 with -G was accepted"
else
    grep -q "cannot be registered" "$TMP/g" || fail "-R 1 -G: $(cat "$TMP/g")"
fi
"$RUN" -n 2 --timeout 120 -- "$BENCH" allgather -b 64K -e 64K -n 5 -w 1 -R 1 \
    --json "$TMP/r.json" >"$TMP/j" 2>&1 || fail "--json -R 1 failed"
python3 -c 'import json, sys; d = json.load(open(sys.argv[1]))
sys.exit(0 if d["metadata"]["options"]["registered"] == 1 else 1)' "$TMP/r.json" ||
    fail "the JSON does not record options.registered 1"
[ "$FAILED" -eq 0 ] || exit 1
echo "bench_registered: -R runs read peers in place, and every bound is the model's"
