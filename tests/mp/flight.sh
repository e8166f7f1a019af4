#!/bin/sh
# The flight recorder end to end (issue 39): 4 ranks run allreduces (mp_fault_loop) with
# CHORUS_FR_DIR set, and rank 2 goes wrong after 16 of them, three ways:
#   hang  it stops calling (stuck outside the library): the others time out in allreduce
#         #17 and write their records; chorusrun --hang-report sends SIGUSR1, on which
#         rank 2 writes its own;
#   kill  it is killed (signal 9): it leaves no record, the others fail in #17 and write;
#   segv  it crashes (signal 11): the recorder's handler writes its record first.
# In each, `chorus-trace fr DIR` must name rank 2 at #17, and only rank 2, the right way
# ("never reached it" or "left no record"), and the survivors' records must show #17
# failed with the expected status.
#   sh tests/mp/flight.sh            (BUILD=build by default)
set -u
BUILD=${BUILD:-build}
RUN="$BUILD/bin/chorusrun"
PROG="$BUILD/tests/mp_fault_loop"
TRACE="$BUILD/bin/chorus-trace"
[ -x "$RUN" ] && [ -x "$PROG" ] && [ -x "$TRACE" ] || {
    echo "missing $RUN, $PROG or $TRACE (run make)"; exit 1; }
TMP=$(mktemp -d "${TMPDIR:-/tmp}/chorus-flight.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT
unset CHORUS_UNIQUE_ID CHORUS_RANK CHORUS_WORLD_SIZE CHORUS_HANG_REPORT CHORUS_FR_ENTRIES \
    2>/dev/null
failed=0

# scenario NAME CULPRIT_TEXT RANK2_REASON SURVIVOR_STATUS CHORUSRUN_ARGS... -- PROG_ARGS...
scenario() {
    name=$1 want=$2 reason2=$3 status=$4
    shift 4
    dir=$TMP/$name
    mkdir -p "$dir"
    ra=
    while [ "$1" != "--" ]; do ra="$ra $1"; shift; done
    shift
    # shellcheck disable=SC2086
    CHORUS_FR_DIR=$dir CHORUS_TIMEOUT=2 timeout -k 5 60 "$RUN" -n 4 $ra -- "$PROG" \
        --count 4096 --idle-rank 2 --idle-after 16 "$@" >"$TMP/$name.out" 2>&1
    "$TRACE" fr "$dir" >"$TMP/$name.fr" 2>&1 || { echo "FAIL $name: chorus-trace fr failed"; failed=1; }
    culprits=$(grep '^culprit:' "$TMP/$name.fr")
    if [ "$culprits" != "culprit: rank 2 at #17: $want" ]; then
        echo "FAIL $name: expected 'culprit: rank 2 at #17: $want', got: ${culprits:-nothing}"
        failed=1
    else
        echo "ok $name: $culprits"
    fi
    grep -q "first operation not completed by every rank: allreduce #17 (count 4096 int32 sum)" \
        "$TMP/$name.fr" || { echo "FAIL $name: #17 not named with its signature"; failed=1; }
    for r in 0 1 3; do
        grep -Eq "^  rank $r \(.*\): failed after [0-9.]* s \(($status)\), algorithm " "$TMP/$name.fr" ||
            { echo "FAIL $name: rank $r's record does not show #17 failed ($status)"; failed=1; }
    done
    if [ -n "$reason2" ]; then
        grep -q "^  rank 2 (.*, record on $reason2): never reached it; its last call: allreduce #16 .*, done" \
            "$TMP/$name.fr" || { echo "FAIL $name: rank 2's record ($reason2) is not right"; failed=1; }
    fi
    # No temporary file left behind by the writers.
    if ls "$dir" | grep -q '\.tmp\.'; then echo "FAIL $name: a temporary record was left"; failed=1; fi
    if [ "$failed" -ne 0 ]; then
        echo "--- $name: chorus-trace fr"; cat "$TMP/$name.fr"
        echo "--- $name: the job"; tail -n 30 "$TMP/$name.out"
    fi
}

# hang: SIGUSR1 also ends rank 2's sleep, and it leaves; a survivor whose deadline comes a
# few ms after the first one's may see that first.
scenario hang "never reached it" SIGUSR1 "timeout|remote peer failure" --hang-report -- \
    --idle-seconds 30 --linger 1
scenario kill "left no record" "" "remote peer failure" --on-failure continue -- --die-signal 9
scenario segv "never reached it" "signal SIGSEGV" "remote peer failure" --on-failure continue -- \
    --die-signal 11

# The reader alone, on records written here: rank 1 called a broadcast as #5 where the
# others called an allreduce (a mismatch), and a file that is not a record is refused.
dir=$TMP/written
mkdir -p "$dir"
rec() { # RANK OP5 STATE5
    printf '{"chorus_flight_record": 1, "comm": "00000000000000aa", "rank": %d, "nranks": 3, "host": "h%d", "pid": 1, "reason": "timeout", "in_flight": 5, "newest": 5, "entries_kept": 256, "dumped_mono_ns": 9000000000, "dumped_wall_ns": 1, "entries": [\n' "$1" "$1"
    printf '{"seq": 4, "op": "allreduce", "count": 8, "dtype": "float32", "redop": "sum", "root": -1, "algo": "ring", "state": "done", "status": "success", "begin_ns": 1, "end_ns": 2},\n'
    printf '{"seq": 5, "op": "%s", "count": 8, "dtype": "float32", "redop": "sum", "root": -1, "algo": "ring", "state": "%s", "status": "timeout", "begin_ns": 3000000000, "end_ns": 0}\n]}\n' "$2" "$3"
}
rec 0 allreduce started >"$dir/chorus-fr.00000000000000aa.0.json"
rec 1 broadcast started >"$dir/chorus-fr.00000000000000aa.1.json"
rec 2 allreduce started >"$dir/chorus-fr.00000000000000aa.2.json"
"$TRACE" fr "$dir" >"$TMP/written.fr" 2>&1
if [ "$(grep '^culprit:' "$TMP/written.fr")" = "culprit: rank 1 at #5: called broadcast instead" ] &&
    grep -q "^  rank 0 (h0, record on timeout): started after 6.000 s (timeout), algorithm ring" \
        "$TMP/written.fr"; then
    echo "ok written records: rank 1 at #5 called broadcast instead"
else
    echo "FAIL written records:"; cat "$TMP/written.fr"; failed=1
fi
echo '{"chorus_flight_record": 2}' >"$dir/chorus-fr.00000000000000bb.0.json"
if "$TRACE" fr "$dir" >"$TMP/bad.fr" 2>&1 || ! grep -q "not a flight record of this version" "$TMP/bad.fr"; then
    echo "FAIL: a record of another version was not refused"; cat "$TMP/bad.fr"; failed=1
else
    echo "ok: a record of another version is refused"
fi
exit "$failed"
