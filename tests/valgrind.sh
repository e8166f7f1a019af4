#!/bin/sh
# Runs a 4-rank allreduce job (mp_coll_matrix, a few dtypes and counts) with every rank
# under valgrind memcheck, once over shared memory and once over TCP, and reports each
# rank: errors and definitely / indirectly lost memory fail. Skipped without valgrind.
#
#   BUILD=build sh tests/valgrind.sh
set -u
BUILD=${BUILD:-build}
command -v valgrind >/dev/null 2>&1 || { echo "skipped: valgrind not installed"; exit 77; }
CHORUSRUN="$BUILD/bin/chorusrun"
MATRIX="$BUILD/tests/mp_coll_matrix"
[ -x "$CHORUSRUN" ] && [ -x "$MATRIX" ] || { echo "missing $CHORUSRUN or $MATRIX (run make)"; exit 1; }
unset CHORUS_UNIQUE_ID CHORUS_RANK CHORUS_WORLD_SIZE CHORUS_ALGO 2>/dev/null
TMP=$(mktemp -d "${TMPDIR:-/tmp}/chorus-valgrind.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT
trap 'exit 1' INT TERM HUP
# Under valgrind every step is ~50x slower: give waits room, and stop spinning early.
export CHORUS_TIMEOUT=120 CHORUS_SPIN_US=1 CHORUS_YIELD_US=100
N=4
failed=0
for tp in shm tcp; do
    echo "== $N ranks, CHORUS_TRANSPORT=$tp"
    CHORUS_TRANSPORT=$tp "$CHORUSRUN" -n $N --timeout 280 -- \
        valgrind --quiet --leak-check=full --errors-for-leak-kinds=definite,indirect \
        --show-leak-kinds=definite,indirect --error-exitcode=1 --track-fds=no \
        --log-file="$TMP/vg.$tp.%q{CHORUS_RANK}.log" \
        "$MATRIX" --colls all --dtypes int32,float32,bfloat16 \
        --ops sum,max --counts 0,1,7,1000 --large 0 >"$TMP/out.$tp" 2>&1
    rc=$?
    tail -n 3 "$TMP/out.$tp"
    [ $rc -eq 0 ] || { echo "job over $tp exited with status $rc"; failed=1; }
    r=0
    while [ $r -lt $N ]; do
        log="$TMP/vg.$tp.$r.log"
        if [ ! -f "$log" ]; then
            echo "rank $r: no valgrind log"; failed=1
        elif grep -q 'ERROR SUMMARY: [1-9]\|definitely lost\|indirectly lost\|Invalid\|uninitialised' "$log"; then
            echo "rank $r: valgrind found problems:"; sed 's/^/    /' "$log" | head -n 60; failed=1
        else
            echo "rank $r: clean"
        fi
        r=$((r + 1))
    done
done
[ $failed -eq 0 ] && echo "valgrind: all ranks clean"
exit $failed
