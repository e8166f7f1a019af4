#!/bin/sh
# gloo-bench's rooted and irregular collectives as a test (bench/compare.sh's Gloo columns
# for gather, scatter, allgatherv and alltoallv): on 2 and 3 ranks, sizes 8 B - 64 KiB, each
# must run, check every row out of place and in place (peer.h's checks, as chorus-bench's)
# with no wrong value, and print a row per size. reduce_scatterv must say it is skipped.
# Gloo's times are measurements, never asserted here. Needs libgloo-dev and g++ (skips
# without them); builds gloo-bench if it is missing.
set -u
BUILD=${BUILD:-build}
GB="$BUILD/bin/gloo-bench"
[ -f /usr/include/gloo/allgatherv.h ] || { echo "skipped: no libgloo-dev (apt-get install libgloo-dev)"; exit 77; }
command -v "${CXX:-g++}" >/dev/null 2>&1 || { echo "skipped: no C++ compiler (apt-get install g++)"; exit 77; }
if [ ! -x "$GB" ]; then
    make --no-print-directory CHORUS_QUIET_CONFIG=1 BUILD="$BUILD" "$GB" >/dev/null || {
        echo "FAIL: building $GB"; exit 1; }
fi
TMP=$(mktemp -d "${TMPDIR:-/tmp}/chorus-gloo-bench.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT
FAILED=0
fail() { echo "FAIL: $*"; FAILED=1; }

for c in gather scatter allgatherv alltoallv; do
    for n in 2 3; do
        log="$TMP/$c-$n.log"
        GLOO_BENCH_TIMEOUT=60 timeout -k 5 120 sh bench/gloo/gloorun.sh -n "$n" "$GB" "$c" \
            -b 8 -e 64K -f 8 -n 5 -w 1 -c 1 >"$log" 2>&1
        rc=$?
        [ "$rc" -eq 0 ] || { fail "$c on $n ranks: exit $rc"; tail -n 20 "$log"; continue; }
        grep -q 'Out of bounds values : 0 OK' "$log" || fail "$c on $n ranks: wrong values"
        # One row per size (8 B .. 64 KiB by 8), each with 0 wrong in both placements
        # (columns 9 and 13; "-" where there is no in-place form: alltoallv).
        rows=$(awk '$1 ~ /^[0-9]+$/ && NF == 14 { n++
                        if ($9 != "0" || ($13 != "0" && $13 != "-")) bad++ }
                    END { print n + 0, bad + 0 }' "$log")
        set -- $rows
        [ "$1" -ge 5 ] || fail "$c on $n ranks: $1 rows, want at least 5"
        [ "$2" -eq 0 ] || fail "$c on $n ranks: $2 rows with wrong values"
        echo "$c on $n ranks: $1 rows, 0 wrong"
    done
done
sh bench/gloo/gloorun.sh -n 2 "$GB" reduce_scatterv -b 8 -e 64 >"$TMP/rsv.log" 2>&1
rc=$?
[ "$rc" -eq 77 ] && grep -q 'skipped: ' "$TMP/rsv.log" ||
    fail "reduce_scatterv: exit $rc, want 77 with a skipped line"
[ "$FAILED" -eq 0 ] && echo "ok gloo-bench gather scatter allgatherv alltoallv"
exit "$FAILED"
