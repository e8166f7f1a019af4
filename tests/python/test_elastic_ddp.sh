#!/bin/sh
# DDP that loses a rank and grows back, in the same processes (issue 39, acceptance 2):
# examples/torch/elastic_ddp.py on 4 ranks for 40 steps, undisturbed, then with rank 3 gone
# at step 10 (the 3 others shrink with chorus.torch.shrink and go on) and a new process
# joining at step 20 (chorus.torch.grow / join). Both runs must finish on 4 ranks, and the
# final loss of the disturbed run must be within 1e-3 of the undisturbed one (the global
# batch is the same at any size, so the two differ only in the order of float additions).
set -u
BUILD=${BUILD:-build}
. tests/python/torch_line.sh  # TORCH_LINE=debian|pip: PYTHON, PYTHONPATH
have_torch || { echo "skipped: $NO_TORCH"; exit 77; }
export CHORUS_SOCKET_IFNAME=lo OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
unset RANK WORLD_SIZE MASTER_ADDR MASTER_PORT CHORUS_TRANSPORT CHORUS_ALGO 2>/dev/null
TMP=$(mktemp -d "${TMPDIR:-/tmp}/chorus-elastic-ddp.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT
RUN="$BUILD/bin/chorusrun"
"$RUN" -n 4 --torch-env --timeout 300 -- "$PYTHON" examples/torch/elastic_ddp.py \
    --undisturbed --save "$TMP/ref.txt" >"$TMP/ref.log" 2>&1 ||
    { tail -n 30 "$TMP/ref.log"; echo "FAIL: the undisturbed run"; exit 1; }
"$RUN" -n 4 --torch-env --on-failure continue --timeout 300 -- "$PYTHON" \
    examples/torch/elastic_ddp.py --save "$TMP/run.txt" >"$TMP/run.log" 2>&1 ||
    { tail -n 30 "$TMP/run.log"; echo "FAIL: the run that loses rank 3"; exit 1; }
failed=0
for r in 0 1 2; do
    grep -q "rank $r: step 10 failed: chorus: remote peer failure: .*rank 3 (pid [0-9]*) died" \
        "$TMP/run.log" || { echo "FAIL: rank $r did not see rank 3's loss at step 10"; failed=1; }
    grep -q "rank $r: shrunk to 3 ranks, now rank $r, resuming at step 10" "$TMP/run.log" ||
        { echo "FAIL: rank $r did not shrink to 3"; failed=1; }
    grep -q "rank $r: grown to 4 ranks at step 20" "$TMP/run.log" ||
        { echo "FAIL: rank $r did not grow back to 4"; failed=1; }
done
grep -q "new rank 3: joined 4 ranks, resuming at step 20" "$TMP/run.log" ||
    { echo "FAIL: no new process joined"; failed=1; }
# The new process is rank 0's child and shares its output: its lines may interleave with
# rank 0's, so the messages are counted, not the lines.
[ "$(grep -o ': done: 40 steps on 4 ranks' "$TMP/run.log" | wc -l)" -eq 4 ] ||
    { echo "FAIL: not 4 ranks finished"; failed=1; }
ref=$(cat "$TMP/ref.txt") got=$(cat "$TMP/run.txt")
if awk -v a="$ref" -v b="$got" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 1e-3) }'; then
    echo "elastic DDP ($TORCH_LINE): final loss $got, undisturbed $ref"
else
    echo "FAIL: final loss $got, undisturbed $ref (more than 1e-3 apart)"; failed=1
fi
[ "$failed" -eq 0 ] || { echo "--- the run"; grep -v Warning "$TMP/run.log" | tail -n 40; }
exit "$failed"
