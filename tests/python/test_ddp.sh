#!/bin/sh
# DDP training (issue 17, acceptance 3): examples/torch/ddp_train.py for 50 steps with
# backend chorus on 4 ranks, with gloo on 4 ranks, and in one process on the whole batch.
# chorus and gloo sum the gradients in different orders, and float addition is not
# associative, so their weights may differ in the last bits: they must agree within 1e-6
# relative (||chorus - gloo|| / ||gloo|| per weight tensor; whether they are bitwise equal
# is printed). Both must agree with the single
# process within fp32 tolerance (rtol 1e-4, atol 1e-6 after 50 steps of SGD).
set -u
BUILD=${BUILD:-build}
. tests/python/torch_line.sh  # TORCH_LINE=debian|pip: PYTHON, PYTHONPATH
have_torch || { echo "skipped: $NO_TORCH"; exit 77; }
export CHORUS_SOCKET_IFNAME=lo OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
unset RANK WORLD_SIZE MASTER_ADDR MASTER_PORT CHORUS_TRANSPORT CHORUS_ALGO 2>/dev/null
TMP=$(mktemp -d "${TMPDIR:-/tmp}/chorus-ddp.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT
for b in chorus gloo; do
    "$BUILD/bin/chorusrun" -n 4 --torch-env --timeout 400 -- "$PYTHON" examples/torch/ddp_train.py \
        --backend "$b" --steps 50 --save "$TMP/$b.pt" >"$TMP/$b.log" 2>&1 ||
        { cat "$TMP/$b.log"; echo "FAIL: ddp_train.py --backend $b"; exit 1; }
    grep 'backend ' "$TMP/$b.log"
done
"$PYTHON" examples/torch/ddp_train.py --backend none --steps 50 --save "$TMP/none.pt" \
    >"$TMP/none.log" 2>&1 || { cat "$TMP/none.log"; echo "FAIL: one process"; exit 1; }
grep 'backend ' "$TMP/none.log"
"$PYTHON" tests/python/compare_weights.py "$TMP/chorus.pt" "$TMP/gloo.pt" --one "$TMP/none.pt" --rel 1e-6
