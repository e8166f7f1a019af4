#!/bin/sh
# A torchrun-style launch: four processes started here with RANK, WORLD_SIZE, LOCAL_RANK,
# MASTER_ADDR, MASTER_PORT and a 0600 CHORUS_SECRET_FILE, and none of the CHORUS_* rank
# variables; chorus_comm_init_env must find them, rank 0 serve the rendezvous, and the
# collectives of mp_env_init give exact results.
set -u
BUILD=${BUILD:-build}
PROG="$BUILD/tests/mp_env_init"
N=4
[ -x "$PROG" ] && [ -x "$BUILD/tests/mp_stranger" ] || { echo "missing $PROG (run make)"; exit 1; }
unset CHORUS_UNIQUE_ID CHORUS_RANK CHORUS_WORLD_SIZE CHORUS_LOCAL_RANK CHORUS_LOCAL_SIZE \
    CHORUS_ROOT CHORUS_SECRET 2>/dev/null
TMP=$(mktemp -d "${TMPDIR:-/tmp}/chorus-torchrun.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT
trap 'exit 1' INT TERM HUP
(umask 077 && od -An -tx1 -N16 /dev/urandom | tr -d ' \n' >"$TMP/secret")
PORT=$("$BUILD/tests/mp_stranger" --free-port) || exit 1
echo "MASTER_ADDR=127.0.0.1 MASTER_PORT=$PORT secret file $TMP/secret"

pids=""
r=0
while [ $r -lt $N ]; do
    RANK=$r WORLD_SIZE=$N LOCAL_RANK=$r LOCAL_WORLD_SIZE=$N MASTER_ADDR=127.0.0.1 \
        MASTER_PORT=$PORT CHORUS_SECRET_FILE="$TMP/secret" \
        timeout -k 2 60 "$PROG" --rounds 3 >"$TMP/out.$r" 2>&1 &
    pids="$pids $!"
    r=$((r + 1))
done
rc=0
r=0
for pid in $pids; do
    wait "$pid" || { echo "rank $r failed (status $?)"; rc=1; }
    sed "s/^/[$r] /" "$TMP/out.$r"
    r=$((r + 1))
done
[ "$(grep -l 'all exact' "$TMP"/out.* | wc -l)" -eq $N ] || rc=1
[ $rc -eq 0 ] && echo "torchrun-style launch of $N ranks: all exact"
exit $rc
