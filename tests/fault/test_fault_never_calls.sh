#!/bin/sh
# Acceptance 3 of issue 5: a rank that simply stops calling the collective (rank 2 of 4,
# alive, after two allreduces) makes every other rank fail with CHORUS_ERR_TIMEOUT at the
# deadline (CHORUS_TIMEOUT=3), and destroy then returns. Over shm (the shared arena: every
# rank waits on every other, so each message must name rank 2) and over tcp on loopback
# (the engine names the peers each rank waited for, which need not include rank 2: there
# the ranks that wait on it must name it, and chorusrun's hang summary must say it never
# arrived). Prints the time to detection, counted from the idle rank's last call.
set -u
BUILD=${BUILD:-build}
HERE=$(dirname "$0")
PROG="$BUILD/tests/mp_fault_loop"
RUN="$BUILD/bin/chorusrun"
[ -x "$PROG" ] && [ -x "$RUN" ] || { echo "missing $PROG or $RUN (run make)"; exit 1; }
. "$HERE/fault_lib.sh"

fault_start
IDLE=2
DEADLINE=3

# case LABEL EVERY ENV...: EVERY=1 when every rank's message must name the idle rank.
case_run() {
    label=$1 every=$2
    shift 2
    rm -f "$TMP"/*.pid
    env CHORUS_TIMEOUT=$DEADLINE "$@" "$RUN" -n 4 --timeout 40 -- \
        sh -c '"$0" "$@"; echo "rank $CHORUS_RANK exit $?"' \
        "$PROG" --count 65536 --pid-dir "$TMP" --idle-rank "$IDLE" \
        --idle-seconds $((DEADLINE + 4)) --linger 1 --seconds 30 >"$LOG" 2>&1 &
    RUNPID=$!
    if ! wait_pids "$TMP" 4 30; then
        fail "$label: the ranks did not start their loops"
        cat "$LOG"
        return
    fi
    # The idle rank wrote its pid file right before going idle: the deadline runs from
    # about then (the others wrote theirs at the same iteration).
    t_idle=$(stat -c %.3Y "$TMP/$IDLE.pid")
    wait "$RUNPID"
    rc=$?
    RUNPID=""
    echo "--- $label: rank $IDLE idle; chorusrun exit $rc"
    named=$IDLE
    [ "$every" -eq 1 ] || named=""
    for r in 0 1 3; do
        check_rank "$r" CHORUS_ERR_TIMEOUT "$named" "$t_idle" $((DEADLINE + 3))
        grep -q "rank $r exit 4" "$LOG" || fail "rank $r did not exit with 4 (CHORUS_ERR_TIMEOUT)"
    done
    grep -q "rank $IDLE exit 0" "$LOG" || fail "the idle rank did not exit cleanly"
    if [ "$every" -eq 0 ]; then
        grep -Eq "rank [013]: status CHORUS_ERR_TIMEOUT .*rank(s)? ([0-9]+, )*$IDLE([^0-9]|\$)" \
            "$LOG" || fail "$label: no rank's timeout names rank $IDLE"
    fi
    grep -Eq "chorusrun: never arrived at allreduce #[0-9]+: rank $IDLE\$" "$LOG" ||
        fail "$label: chorusrun's hang summary does not name rank $IDLE"
    [ "$rc" -eq 0 ] || fail "$label: chorusrun exit $rc"
    [ "$FAILED" -eq 0 ] || tail -n 30 "$LOG"
}

case_run "shm" 1 CHORUS_TRANSPORT=shm
case_run "tcp (loopback)" 0 CHORUS_TRANSPORT=tcp
summary "never calls (deadline $DEADLINE s)"
[ "$FAILED" -eq 0 ] || exit 1
echo "never calls: every other rank timed out naming rank $IDLE"
