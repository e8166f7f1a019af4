#!/bin/sh
# chorus-bench sweep's scaling table with n=1 among the rank counts (issue 21): busbw is 0
# at n=1 by definition (its bus factor is (n-1)/n), so an efficiency relative to n=1 is a
# division by 0 and the table used to come out empty. The sweep over 1, 2 and 4 ranks of a
# small allreduce (1K-64K, 2 warm-up and 5 timed iterations: a second or two) must print an
# efficiency table whose header names n=2 as the reference, and whose rows have numbers for
# n=2 (exactly 1.000, the reference itself) and n=4, while n=1 has none.
set -u
BUILD=${BUILD:-build}
BENCH="$BUILD/bin/chorus-bench"
[ -x "$BENCH" ] && [ -x "$BUILD/bin/chorusrun" ] ||
    { echo "missing $BENCH or $BUILD/bin/chorusrun (run make)"; exit 1; }
unset CHORUS_UNIQUE_ID CHORUS_RANK CHORUS_WORLD_SIZE CHORUS_LOCAL_RANK CHORUS_LOCAL_SIZE \
    CHORUS_ROOT CHORUS_ALGO CHORUS_TRANSPORT 2>/dev/null
TMP=$(mktemp -d "${TMPDIR:-/tmp}/chorus-sweep-scaling.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT
trap 'exit 1' INT TERM HUP

timeout -k 5 60 "$BENCH" sweep --ranks 1,2,4 allreduce -b 1K -e 64K -f 4 -w 2 -n 5 \
    >"$TMP/out" 2>&1
rc=$?
cat "$TMP/out"
[ "$rc" -eq 0 ] || { echo "FAIL: the sweep exited $rc"; exit 1; }

# The efficiency table: its header line, the column line, then one row per size.
awk '
    /^# scaling efficiency:/ { header = $0; state = 1; next }
    # "#", "size", "(B)", then the labels; a row has the size, then the cells.
    state == 1 && /^#/ { for (i = 1; i <= NF; i++) if ($i ~ /^n=/) col[$i] = i - 2; state = 2; next }
    state == 2 && /^ *[0-9]/ {
        rows++
        n1 = $(col["n=1"]); n2 = $(col["n=2"]); n4 = $(col["n=4"])
        if (n1 != "-") { print "FAIL: n=1 has an efficiency (" n1 ") in: " $0; bad = 1 }
        if (n2 !~ /^[0-9.]+$/ || n2 + 0 != 1) { print "FAIL: n=2, the reference, is not 1.000 in: " $0; bad = 1 }
        if (n4 !~ /^[0-9.]+$/ || !(n4 + 0 > 0)) { print "FAIL: n=4 has no efficiency in: " $0; bad = 1 }
        next
    }
    state == 2 { state = 3 }
    END {
        if (header == "") { print "FAIL: no scaling efficiency table"; exit 1 }
        if (header !~ /reference n=2 \(n=1 has busbw 0 by definition\)/) {
            print "FAIL: the header does not name n=2 as the reference: " header; bad = 1
        }
        if (header ~ /reference n=1/) { print "FAIL: n=1 is the reference: " header; bad = 1 }
        if (rows != 3) { print "FAIL: " rows " efficiency rows, want 3"; bad = 1 }
        exit bad
    }' "$TMP/out" || exit 1
echo "sweep_scaling: ok (reference n=2; numbers for n=2 and n=4)"
