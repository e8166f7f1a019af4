# Shared by tests/fault/test_fault_*.sh (sourced, not run): the temporary folder and the
# cleanup, waiting for the loop to start, and the check of what every surviving rank of
# tests/mp/fault_loop.c printed. The caller sets BUILD and HERE, then calls fault_start
# (after setting PREFIX when it runs an emulated cluster).

RUNPID=""
CLUSTER_PID=""
JOIN_PID=""

fault_cleanup() {
    [ -n "$RUNPID" ] && kill "$RUNPID" 2>/dev/null
    [ -n "$JOIN_PID" ] && kill "$JOIN_PID" 2>/dev/null
    if [ -n "${PREFIX:-}" ]; then
        # cluster.sh tears down its namespaces and every process in them when it ends.
        [ -n "$CLUSTER_PID" ] && kill "$CLUSTER_PID" 2>/dev/null && wait "$CLUSTER_PID" 2>/dev/null
        sh "$HERE/../cluster/cluster.sh" --clean --prefix "$PREFIX" >/dev/null 2>&1
    fi
    rm -rf "$TMP"
}

# fault_start: TMP (removed at exit, with the launcher or the cluster), LOG for the ranks'
# output, DETECT_TIMES for the times to detection, FAILED=0.
fault_start() {
    TMP=$(mktemp -d "${TMPDIR:-/tmp}/chorus-fault.XXXXXX") || exit 1
    trap fault_cleanup EXIT
    trap 'exit 1' INT TERM
    LOG="$TMP/log"
    DETECT_TIMES="$TMP/times"
    : >"$DETECT_TIMES"
    FAILED=0
}

now() { date +%s.%N; }

# wait_pids DIR N SECONDS: waits until DIR holds N pid files (the loop runs on every rank).
wait_pids() {
    i=0
    while [ "$(ls "$1" 2>/dev/null | grep -c '\.pid$')" -lt "$2" ]; do
        i=$((i + 1))
        [ "$i" -le $(($3 * 10)) ] || return 1
        sleep 0.1
    done
    return 0
}

fail() {
    echo "FAIL: $*"
    FAILED=1
}

# check_rank R STATUS NAMED T_FAULT LIMIT: rank R printed a failure with STATUS whose message
# names rank NAMED ("peer N", "rank N" or in a "peers ..." list; empty: not checked), at most LIMIT
# seconds after the fault (epoch T_FAULT), and its destroy returned. Prints the time to
# detection.
check_rank() {
    r=$1 want=$2 named=$3 t_fault=$4 limit=$5
    line=$(grep -o "rank $r: status .*" "$LOG" | head -n 1)
    if [ -z "$line" ]; then
        fail "rank $r reported no failure"
        return
    fi
    status=$(echo "$line" | sed -n 's/^rank [0-9]*: status \([A-Z_]*\) .*/\1/p')
    at=$(echo "$line" | sed -n 's/.* (at \([0-9.]*\)): .*/\1/p')
    msg=${line#*): }
    dt=$(awk -v a="$t_fault" -v b="$at" 'BEGIN { printf "%.2f", b - a }')
    echo "rank $r: $status detected $dt s after the fault: $msg"
    [ "$status" = "$want" ] || fail "rank $r: status $status, expected $want"
    if [ -n "$named" ] && ! echo "$msg" | grep -Eq "(peer|rank)[s()]* ([0-9]+, )*$named([^0-9]|\$)"; then
        fail "rank $r: the message does not name rank $named"
    fi
    awk -v d="$dt" -v l="$limit" 'BEGIN { exit !(d >= 0 && d <= l) }' ||
        fail "rank $r: detection took $dt s (limit $limit s)"
    grep -q "rank $r: destroy returned" "$LOG" || fail "rank $r: destroy did not return"
    echo "$dt" >>"$DETECT_TIMES"
}

# summary WHAT: prints the slowest time to detection over the ranks checked.
summary() {
    worst=$(sort -n "$DETECT_TIMES" | tail -n 1)
    echo "$1: time to detection over $(wc -l <"$DETECT_TIMES") survivors: max ${worst:-?} s"
}

# cluster_start TMP PREFIX PROG_ARGS...: 8 ranks of mp_fault_loop on 4 emulated hosts x 2
# (tests/cluster/cluster.sh), in the background (CLUSTER_PID). A wrapper shell per rank
# keeps cluster.sh from stopping the survivors when a rank dies. Exits 77 (skip) when
# namespaces cannot be made here.
cluster_start() {
    ctmp=$1 cprefix=$2
    shift 2
    sh "$HERE/../cluster/cluster.sh" --hosts 4 --ranks-per-host 2 --prefix "$cprefix" \
        --timeout 55 -- sh -c '"$0" "$@"; echo "rank $CHORUS_RANK exit $?"' \
        "$PROG" --pid-dir "$ctmp" "$@" >"$LOG" 2>&1 &
    CLUSTER_PID=$!
    i=0
    while [ "$(ls "$ctmp" 2>/dev/null | grep -c '\.pid$')" -lt 8 ]; do
        if ! kill -0 "$CLUSTER_PID" 2>/dev/null; then
            wait "$CLUSTER_PID"
            if [ $? -eq 77 ]; then
                grep 'skipped:' "$LOG" | tail -n 1
                exit 77
            fi
            echo "FAIL: the cluster ended before the loops started"
            tail -n 30 "$LOG"
            exit 1
        fi
        i=$((i + 1))
        if [ "$i" -gt 400 ]; then
            echo "FAIL: the ranks did not start their loops in 40 s"
            tail -n 30 "$LOG"
            exit 1
        fi
        sleep 0.1
    done
}
