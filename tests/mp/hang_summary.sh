#!/bin/sh
# The hang report end to end: 4 ranks run allreduces (mp_fault_loop) and rank 2 stops
# calling. The other ranks time out (CHORUS_TIMEOUT=3); each writes its "chorus-hang:"
# line (lib/core/hang.h), and chorusrun's summary must name rank 2, and only rank 2, as
# the one that never arrived. Run twice: over shm with the ring forced (its reports say
# whom each rank waits for) and with --hang-report, where chorusrun also asks every rank
# for its state with SIGUSR1, so rank 2 reports itself idle.
#   sh tests/mp/hang_summary.sh            (BUILD=build by default)
set -u
BUILD=${BUILD:-build}
RUN="$BUILD/bin/chorusrun"
PROG="$BUILD/tests/mp_fault_loop"
[ -x "$RUN" ] && [ -x "$PROG" ] || { echo "missing $RUN or $PROG (run make)"; exit 1; }
TMP=$(mktemp -d "${TMPDIR:-/tmp}/chorus-hang.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT
unset CHORUS_UNIQUE_ID CHORUS_RANK CHORUS_WORLD_SIZE CHORUS_HANG_REPORT 2>/dev/null
failed=0

# check NAME OUTFILE: the summary names rank 2 alone, and the timed-out ranks' lines are
# there.
check() {
    name=$1 out=$2
    line=$(grep "chorusrun: never arrived at allreduce #" "$out")
    if [ -z "$line" ]; then
        echo "FAIL $name: no hang summary"; failed=1; return
    fi
    case "$line" in
    *": rank 2") ;;
    *) echo "FAIL $name: wrong suspects: $line"; failed=1; return ;;
    esac
    for r in 0 1 3; do
        grep -q "^\[$r\] chorus-hang: rank=$r nranks=4 .*state=timeout op=allreduce" "$out" || {
            echo "FAIL $name: rank $r wrote no timeout report"; failed=1; return
        }
    done
    echo "ok $name: $line"
}

# --linger 1: a rank that timed out keeps its connections a second longer, so a peer whose
# deadline falls a few ms later times out too (and reports) instead of seeing it leave.
CHORUS_TIMEOUT=3 CHORUS_ALGO=ring timeout -k 5 60 "$RUN" -n 4 -- "$PROG" --count 4096 \
    --idle-rank 2 --idle-seconds 30 --linger 1 >"$TMP/ring.out" 2>&1
grep -q "waiting=recv:" "$TMP/ring.out" || { echo "FAIL ring: no pending transfer named"; failed=1; }
check "shm ring" "$TMP/ring.out"

CHORUS_TIMEOUT=3 timeout -k 5 60 "$RUN" -n 4 --hang-report -- "$PROG" --count 4096 \
    --idle-rank 2 --idle-seconds 30 --linger 1 >"$TMP/signal.out" 2>&1
check "--hang-report" "$TMP/signal.out"
if grep -q "^\[2\] chorus-hang: rank=2 nranks=4 .*state=idle" "$TMP/signal.out" &&
    grep -q "chorusrun:   rank 2: idle, last completed #" "$TMP/signal.out"; then
    echo "ok --hang-report: rank 2 reported itself idle"
else
    echo "FAIL --hang-report: rank 2 did not report itself idle"; failed=1
fi
if [ "$failed" -ne 0 ]; then
    echo "--- ring run"; cat "$TMP/ring.out"
    echo "--- --hang-report run"; cat "$TMP/signal.out"
fi
exit "$failed"
