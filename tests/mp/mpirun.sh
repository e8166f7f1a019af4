#!/bin/sh
# Four ranks launched by Open MPI's mpirun: chorus_comm_init_env takes rank and size from
# OMPI_COMM_WORLD_RANK/SIZE, the rendezvous from CHORUS_ROOT and the secret from
# CHORUS_SECRET (exported to all ranks with -x). Skipped when mpirun.openmpi is missing.
set -u
BUILD=${BUILD:-build}
PROG="$BUILD/tests/mp_env_init"
MPIRUN=$(command -v mpirun.openmpi) || { echo "skipped: mpirun.openmpi not installed"; exit 77; }
[ -x "$PROG" ] && [ -x "$BUILD/tests/mp_stranger" ] || { echo "missing $PROG (run make)"; exit 1; }
unset CHORUS_UNIQUE_ID CHORUS_RANK CHORUS_WORLD_SIZE CHORUS_LOCAL_RANK CHORUS_LOCAL_SIZE \
    RANK WORLD_SIZE MASTER_ADDR MASTER_PORT 2>/dev/null
PORT=$("$BUILD/tests/mp_stranger" --free-port) || exit 1
export CHORUS_ROOT="127.0.0.1:$PORT"
CHORUS_SECRET=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
export CHORUS_SECRET
ROOTOPT=""
[ "$(id -u)" -eq 0 ] && ROOTOPT="--allow-run-as-root"
OUT=$(mktemp "${TMPDIR:-/tmp}/chorus-mpirun.XXXXXX") || exit 1
trap 'rm -f "$OUT"' EXIT
echo "CHORUS_ROOT=$CHORUS_ROOT"
XOPTS="-x CHORUS_ROOT -x CHORUS_SECRET"
for v in CHORUS_TIMEOUT CHORUS_TRANSPORT CHORUS_DEBUG; do
    eval "[ -n \"\${$v:-}\" ]" && XOPTS="$XOPTS -x $v"
done
# The MPI library itself is not used, so keep Open MPI from probing networks and cores.
# shellcheck disable=SC2086
timeout -k 5 90 "$MPIRUN" -np 4 --oversubscribe --bind-to none $ROOTOPT \
    --mca btl self,tcp --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo \
    $XOPTS "$PROG" --rounds 3 >"$OUT" 2>&1
rc=$?
cat "$OUT"
if [ $rc -ne 0 ]; then echo "mpirun exited with status $rc"; exit 1; fi
n=$(grep -c 'all exact' "$OUT")
[ "$n" -eq 4 ] || { echo "expected 4 ranks reporting exact results, got $n"; exit 1; }
echo "mpirun launch of 4 ranks: all exact"
