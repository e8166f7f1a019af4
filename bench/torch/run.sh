#!/bin/sh
# torch.distributed with gloo and with chorus side by side, in one run (issue 17):
#
#   BUILD=build [TORCH_LINE=debian|pip] sh bench/torch/run.sh [--ranks 4] [--sizes 4K:256M] [--steps 10] [--out DIR]
#                                      [--plain-malloc]
#
# Runs bench/torch/bench_torch.py under chorusrun --torch-env for each backend in turn (gloo
# first), then prints one table: all_reduce busbw per size for both and their ratio, and
# the same sizes on registered tensors (chorus.torch.empty) with how many calls read the
# peers in place, and the DDP step (25M-parameter MLP) in ms with the gradient exchange's share. The raw
# records are in DIR/torch-bench.jsonl. Speed is measured here, never asserted in tests.
#
# The allocator: glibc gives every large tensor back to the kernel when it is freed, and
# the next one faults its pages in again; this VM pays about 11 us per page fault
# (torch.zeros(4096, 4096) takes 190 ms), so with glibc's defaults the weight gradients'
# page faults, not the arithmetic, make most of the training step. Both backends' ranks
# therefore keep freed memory in the heap (MALLOC_MMAP_MAX_=0, MALLOC_TRIM_THRESHOLD_), as
# a caching allocator (jemalloc, PyTorch's on GPUs) would; --plain-malloc measures with
# glibc's defaults instead.
set -u
BUILD=${BUILD:-build}
RANKS=4 SIZES=4K:256M STEPS=10 OUT= PLAIN=0
while [ $# -gt 0 ]; do
    case "$1" in
    --plain-malloc) PLAIN=1 ;;
    --ranks) RANKS=$2; shift ;;
    --sizes) SIZES=$2; shift ;;
    --steps) STEPS=$2; shift ;;
    --out) OUT=$2; shift ;;
    *) echo "usage: sh bench/torch/run.sh [--ranks N] [--sizes LO:HI] [--steps N] [--out DIR] [--plain-malloc]" >&2
       exit 2 ;;
    esac
    shift
done
. tests/python/torch_line.sh  # TORCH_LINE=debian|pip: PYTHON, PYTHONPATH
have_torch || { echo "bench/torch: skipped: $NO_TORCH"; exit 77; }
[ -n "$OUT" ] || OUT=$(mktemp -d "${TMPDIR:-/tmp}/chorus-torch-bench.XXXXXX")
mkdir -p "$OUT"
J="$OUT/torch-bench.jsonl"
: >"$J"
export CHORUS_SOCKET_IFNAME=lo GLOO_SOCKET_IFNAME=lo OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
unset RANK WORLD_SIZE MASTER_ADDR MASTER_PORT 2>/dev/null
if [ "$PLAIN" -eq 0 ]; then
    export MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=68719476736
    echo "allocator: freed memory kept in the heap (MALLOC_MMAP_MAX_=0; --plain-malloc: glibc's defaults)"
else
    echo "allocator: glibc's defaults"
fi
for b in gloo chorus; do
    echo "== $b on $RANKS ranks"
    "$BUILD/bin/chorusrun" -n "$RANKS" --torch-env --timeout 1200 -- "$PYTHON" \
        bench/torch/bench_torch.py --backend "$b" --sizes "$SIZES" --steps "$STEPS" --json "$J" \
        >"$OUT/$b.log" 2>&1 || { tail -n 20 "$OUT/$b.log"; echo "bench/torch: $b failed"; exit 1; }
done
"$PYTHON" - "$J" "$RANKS" <<'PY'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
ar = {}
for r in recs:
    if r["kind"] == "allreduce":
        ar.setdefault(r["bytes"], {})[r["backend"]] = r
print(f"\ntorch.distributed.all_reduce, float32 sum, {sys.argv[2]} ranks (busbw GB/s; time us)")
print(f"{'bytes':>11} {'gloo busbw':>11} {'chorus busbw':>13} {'ratio':>7} {'gloo us':>10} {'chorus us':>10}")
for size in sorted(ar):
    g, c = ar[size].get("gloo"), ar[size].get("chorus")
    if g and c:
        print(f"{size:>11} {g['busbw_gbs']:>11.3f} {c['busbw_gbs']:>13.3f} "
              f"{c['busbw_gbs'] / g['busbw_gbs']:>7.2f} {g['time_us']:>10.1f} {c['time_us']:>10.1f}")
reg = {r["bytes"]: r for r in recs if r["kind"] == "allreduce_registered"}
if reg:
    print(f"\nthe same on a tensor from chorus.torch.empty (registered memory): busbw, and the "
          f"calls that read every peer's buffer in place (single copy) of those made")
    print(f"{'bytes':>11} {'chorus busbw':>13} {'registered':>11} {'ratio':>7} {'single copy':>12} {'GB read in place':>17}")
    for size in sorted(reg):
        r, c = reg[size], ar.get(size, {}).get("chorus")
        ratio = f"{r['busbw_gbs'] / c['busbw_gbs']:>7.2f}" if c else f"{'':>7}"
        print(f"{size:>11} {c['busbw_gbs'] if c else float('nan'):>13.3f} {r['busbw_gbs']:>11.3f} "
              f"{ratio} {r['single_copy_calls']:>5}/{r['calls']:<6} {r['peer_bytes_read'] / 1e9:>17.3f}")
dd = {r["backend"]: r for r in recs if r["kind"] == "ddp"}
if "gloo" in dd and "chorus" in dd:
    g, c = dd["gloo"], dd["chorus"]
    print(f"\nDDP step, {g['params'] / 1e6:.1f}M-parameter MLP, batch 8 per rank")
    print(f"{'backend':>8} {'ms/step':>9} {'no_sync ms':>11} {'exchange share':>15}")
    for name, r in (("gloo", g), ("chorus", c)):
        print(f"{name:>8} {r['step_ms']:>9.1f} {r['nosync_ms']:>11.1f} {r['exchange_share']:>15.2f}")
    print(f"chorus / gloo step time: {c['step_ms'] / g['step_ms']:.2f}")
PY
echo "records: $J"
