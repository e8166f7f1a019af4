#!/bin/sh
# Every collective x dtype x op (mp_coll_matrix) over CHORUS_TRANSPORT=ucx on an emulated
# cluster of 4 hosts x 2 ranks (tests/cluster/cluster.sh), issue 7 acceptance 1: once with
# UCX's default transports (shared memory between the two ranks of a host, tcp over the
# veths between hosts) and once with UCX_TLS=tcp, with the default algorithm; then the ring
# on the default transports. UCX_NET_DEVICES is the rank's veth, so UCX never takes a namespace's loopback
# for a way to another host. Checks that every rank took ucx for all 7 peers ("peers: 0 shm,
# 0 tcp, 7 ucx"). Skipped (77) without netns, and without UCX in the build.
set -u
BUILD=${BUILD:-build}
HERE=$(dirname "$0")
PROG="$BUILD/tests/mp_coll_matrix"
[ -x "$PROG" ] || { echo "missing $PROG (run make)"; exit 1; }
if ! grep -q '^HAVE_UCX *:= *1' "$BUILD/config.mk" 2>/dev/null; then
    echo "skipped: built without UCX (apt-get install libucx-dev)"
    exit 77
fi
unset CHORUS_ALGO CHORUS_DEBUG_FILE UCX_TLS UCX_NET_DEVICES 2>/dev/null
export CHORUS_TRANSPORT=ucx
export CHORUS_TIMEOUT=${CHORUS_TIMEOUT:-30}
# The INFO log carries the "peers: ..." line of every rank.
export CHORUS_DEBUG=info
LOG=$(mktemp "${TMPDIR:-/tmp}/chorus-cluster-ucx.XXXXXX") || exit 1
trap 'rm -f "$LOG"' EXIT
FAILED=0
# part_skip PART LOG: cluster.sh could not run this part (77: no network namespaces, no tc
# for --rate); one PART-SKIP line says so with cluster.sh's reason, and the script skips as
# a whole (exit 77, that reason) only when no part ran at all.
RAN=0
SKIP_WHY=""
part_skip() {
    SKIP_WHY=$(grep -o 'skipped: .*' "$2" | tail -n 1)
    echo "PART-SKIP $1: ${SKIP_WHY:=skipped: (cluster.sh gave no reason)}"
}

# case_run LABEL TLS -- matrix options (TLS "default" leaves UCX_TLS unset)
case_run() {
    label=$1 tls=$2
    shift 3
    t0=$(date +%s)
    # shellcheck disable=SC2016
    sh "$HERE/cluster.sh" --hosts 4 --ranks-per-host 2 --timeout 100 -- sh -c '
        tls=$1; shift
        [ "$tls" = default ] || export UCX_TLS="$tls"
        UCX_NET_DEVICES=$CHORUS_SOCKET_IFNAME exec "$@"' sh "$tls" "$PROG" "$@" >"$LOG" 2>&1
    rc=$?
    if [ "$rc" -eq 77 ]; then
        part_skip "$label" "$LOG"
        return
    fi
    RAN=$((RAN + 1))
    summary=$(grep '\[host0 r0\] mp_coll_matrix: .* passed, 0 failed' "$LOG")
    allucx=$(grep -c 'ready: rank [0-7] of 8 on 4 host(s); peers: 0 shm, 0 tcp, 7 ucx' "$LOG")
    if [ "$rc" -ne 0 ] || [ -z "$summary" ] || [ "$allucx" -ne 8 ]; then
        echo "FAIL $label: cluster exit $rc, $allucx of 8 ranks with 7 ucx peers"
        grep -v ' core: .* bytes (class ' "$LOG" | tail -n 40
        FAILED=1
        return
    fi
    echo "ok   $label ($(($(date +%s) - t0)) s): ${summary#*mp_coll_matrix: }"
}

case_run "4x2 ucx UCX_TLS=default algo=auto" default -- --algo auto
case_run "4x2 ucx UCX_TLS=tcp algo=auto" tcp -- --algo auto
case_run "4x2 ucx UCX_TLS=default algo=ring" default -- --algo ring --large 0

[ "$FAILED" -eq 0 ] || exit 1
[ "$RAN" -gt 0 ] || { echo "$SKIP_WHY"; exit 77; }
echo "cluster ucx: every collective exact on 4 hosts x 2 ranks over CHORUS_TRANSPORT=ucx"
