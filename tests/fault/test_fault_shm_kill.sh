#!/bin/sh
# Acceptance 1 of issue 5 (shm): kill -9 one rank of 4 in the middle of a loop of 16 MiB
# allreduces over shared memory. Every survivor must return CHORUS_ERR_REMOTE naming the
# dead rank within 5 s (CHORUS_TIMEOUT=60: the deadline is not what finds it), and its
# chorus_comm_destroy must return. Once with the default algorithm choice (the shared
# arena), once with ring over the shm transport, and once on the arena with both buffers in
# registered memory (issue 38: the peers read the victim's buffers in place; the mapping
# outlives it, so they must get the error, not a SIGBUS). Prints the time to detection.
set -u
BUILD=${BUILD:-build}
HERE=$(dirname "$0")
PROG="$BUILD/tests/mp_fault_loop"
RUN="$BUILD/bin/chorusrun"
[ -x "$PROG" ] && [ -x "$RUN" ] || { echo "missing $PROG or $RUN (run make)"; exit 1; }
. "$HERE/fault_lib.sh"

fault_start
VICTIM=2

# case LABEL ENV...: one run; the victim is killed once every rank is in the loop.
case_run() {
    label=$1 extra=""
    shift
    case "$label" in *registered*) extra=--registered ;; esac
    rm -f "$TMP"/*.pid
    # The wrapper shell keeps chorusrun from stopping the survivors when the victim dies.
    env CHORUS_TIMEOUT=60 "$@" "$RUN" -n 4 --timeout 50 -- \
        sh -c '"$0" "$@"; echo "rank $CHORUS_RANK exit $?"' \
        "$PROG" --pid-dir "$TMP" --seconds 40 $extra >"$LOG" 2>&1 &
    RUNPID=$!
    if ! wait_pids "$TMP" 4 30; then
        fail "$label: the ranks did not start their loops"
        cat "$LOG"
        return
    fi
    sleep 0.3
    t_kill=$(now)
    kill -9 "$(cat "$TMP/$VICTIM.pid")"
    wait "$RUNPID"
    rc=$?
    RUNPID=""
    echo "--- $label: killed rank $VICTIM; chorusrun exit $rc"
    for r in 0 1 2 3; do
        [ "$r" -eq "$VICTIM" ] && continue
        check_rank "$r" CHORUS_ERR_REMOTE "$VICTIM" "$t_kill" 5
        grep -q "rank $r exit 3" "$LOG" || fail "rank $r did not exit with 3 (CHORUS_ERR_REMOTE)"
    done
    [ "$rc" -eq 0 ] || fail "$label: chorusrun exit $rc"
    [ "$FAILED" -eq 0 ] || tail -n 30 "$LOG"
}

case_run "shm, default algorithm" CHORUS_TRANSPORT=shm
case_run "shm, ring" CHORUS_TRANSPORT=shm CHORUS_ALGO=ring
case_run "shm, default algorithm, registered buffers" CHORUS_TRANSPORT=shm
summary "shm kill -9 of 1 rank of 4"
[ "$FAILED" -eq 0 ] || exit 1
echo "shm kill: every survivor reported the dead rank"
