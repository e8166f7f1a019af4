#!/bin/sh
# Acceptance 1 of issue 5 (tcp): kill -9 one rank of 8 on 4 emulated hosts (network
# namespaces, tests/cluster/cluster.sh; every peer over tcp) in the middle of a loop of
# 16 MiB allreduces. Every survivor must return CHORUS_ERR_REMOTE naming the dead rank
# within 5 s (CHORUS_TIMEOUT=60), and its destroy must return. Prints the time to
# detection. Needs root and network namespaces: otherwise "skipped: <reason>" (77).
set -u
BUILD=${BUILD:-build}
HERE=$(dirname "$0")
PROG="$BUILD/tests/mp_fault_loop"
[ -x "$PROG" ] || { echo "missing $PROG (run make)"; exit 1; }
. "$HERE/fault_lib.sh"

PREFIX="cfk$$"
fault_start
VICTIM=5

export CHORUS_TRANSPORT=tcp CHORUS_TIMEOUT=60
unset CHORUS_ALGO 2>/dev/null
cluster_start "$TMP" "$PREFIX" --seconds 45
sleep 0.3
t_kill=$(now)
kill -9 "$(cat "$TMP/$VICTIM.pid")"
wait "$CLUSTER_PID"
rc=$?
CLUSTER_PID=""
echo "--- tcp, 4 hosts x 2 ranks: killed rank $VICTIM; cluster exit $rc"
for r in 0 1 2 3 4 5 6 7; do
    [ "$r" -eq "$VICTIM" ] && continue
    check_rank "$r" CHORUS_ERR_REMOTE "$VICTIM" "$t_kill" 5
    grep -q "r$r\] rank $r exit 3" "$LOG" || fail "rank $r did not exit with 3 (CHORUS_ERR_REMOTE)"
done
[ "$FAILED" -eq 0 ] || tail -n 40 "$LOG"
summary "tcp kill -9 of 1 rank of 8 on 4 hosts"
[ "$FAILED" -eq 0 ] || exit 1
echo "tcp kill: every survivor reported the dead rank"
