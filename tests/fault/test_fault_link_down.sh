#!/bin/sh
# Acceptance 2 of issue 5: take one emulated host's link down (`ip link set vs3 down` on
# the switch side: host 3, ranks 6 and 7, goes silent; nothing is closed) in the middle of
# a loop of 16 MiB allreduces over tcp on 4 hosts x 2 ranks. Every rank of the other
# hosts must report an error within the deadline (CHORUS_TIMEOUT=20; the tcp keep-alive,
# CHORUS_TCP_KEEPALIVE, defaults to 10 s), and its destroy must return. Prints the time to
# detection and the status each rank saw. Needs root and network namespaces: otherwise
# "skipped: <reason>" (77).
set -u
BUILD=${BUILD:-build}
HERE=$(dirname "$0")
PROG="$BUILD/tests/mp_fault_loop"
[ -x "$PROG" ] || { echo "missing $PROG (run make)"; exit 1; }
. "$HERE/fault_lib.sh"

PREFIX="cfl$$"
fault_start
DEADLINE=20

export CHORUS_TRANSPORT=tcp CHORUS_TIMEOUT=$DEADLINE
unset CHORUS_ALGO CHORUS_TCP_KEEPALIVE 2>/dev/null
# The ranks of host 3 stay blocked behind the dead link: --seconds bounds them, and the
# cluster's teardown removes them.
cluster_start "$TMP" "$PREFIX" --seconds 40
sleep 0.3
t_down=$(now)
ip -n "$PREFIX-sw" link set vs3 down || { echo "FAIL: cannot take vs3 down"; exit 1; }
# Every rank off host 3 must have reported by the deadline (plus slack for 8 ranks on few
# cores); then the cluster is stopped.
i=0
while [ "$(grep -c 'rank [0-5]: destroy returned' "$LOG")" -lt 6 ] && [ $i -lt $((DEADLINE * 10 + 50)) ]; do
    sleep 0.1
    i=$((i + 1))
done
kill "$CLUSTER_PID" 2>/dev/null
wait "$CLUSTER_PID" 2>/dev/null
CLUSTER_PID=""
echo "--- tcp, 4 hosts x 2 ranks: link of host 3 down"
for r in 0 1 2 3 4 5; do
    st=$(grep -o "rank $r: status [A-Z_]*" "$LOG" | head -n 1 | awk '{print $4}')
    case "$st" in
    CHORUS_ERR_REMOTE | CHORUS_ERR_TIMEOUT) check_rank "$r" "$st" "" "$t_down" "$DEADLINE" ;;
    *) fail "rank $r: no error reported (${st:-nothing})" ;;
    esac
done
[ "$FAILED" -eq 0 ] || tail -n 40 "$LOG"
summary "link down (deadline $DEADLINE s)"
[ "$FAILED" -eq 0 ] || exit 1
echo "link down: every rank of the other hosts reported an error within the deadline"
