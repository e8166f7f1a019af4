#!/bin/sh
# FSDP2 (issue 41): examples/torch/fsdp_train.py, fully_shard on a CPU device mesh of 4
# ranks, 40 steps with backend chorus and with gloo; the full final weights must agree
# within 1e-5 relative per tensor (the two sum the gradient shards in different orders).
# torch 2.x only (TORCH_LINE=pip): fully_shard is not in torch 1.13.
set -u
BUILD=${BUILD:-build}
. tests/python/torch_line.sh  # TORCH_LINE=debian|pip: PYTHON, PYTHONPATH
have_torch || { echo "skipped: $NO_TORCH"; exit 77; }
"$PYTHON" -c 'from torch.distributed.fsdp import fully_shard' 2>/dev/null ||
    { echo "skipped: torch $("$PYTHON" -c 'import torch; print(torch.__version__)') has no FSDP2 (fully_shard)"; exit 77; }
export CHORUS_SOCKET_IFNAME=lo GLOO_SOCKET_IFNAME=lo OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
unset RANK WORLD_SIZE MASTER_ADDR MASTER_PORT CHORUS_TRANSPORT CHORUS_ALGO 2>/dev/null
TMP=$(mktemp -d "${TMPDIR:-/tmp}/chorus-fsdp.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT
# gloo is the reference, not under test: torch 2.15's gloo has been seen to abort in one rank
# at exit ("terminate called without an active exception", 1 run in about 10) after the
# weights were saved. Such a run still gives its weights, with a note; chorus's run must end
# cleanly.
for b in chorus gloo; do
    if ! "$BUILD/bin/chorusrun" -n 4 --torch-env --timeout 400 -- "$PYTHON" \
        examples/torch/fsdp_train.py --backend "$b" --steps 40 --save "$TMP/$b.pt" \
        >"$TMP/$b.log" 2>&1; then
        if [ "$b" = gloo ] && [ -s "$TMP/gloo.pt" ] && grep -q 'backend gloo' "$TMP/gloo.log"; then
            echo "NOTE: the gloo reference run failed after saving its weights (not under test):"
            grep -v 'loss' "$TMP/gloo.log" | tail -n 3
        else
            cat "$TMP/$b.log"; echo "FAIL: fsdp_train.py --backend $b"; exit 1
        fi
    fi
    grep -E 'backend |loss' "$TMP/$b.log"
done
"$PYTHON" tests/python/compare_weights.py "$TMP/chorus.pt" "$TMP/gloo.pt" --rel 1e-5
