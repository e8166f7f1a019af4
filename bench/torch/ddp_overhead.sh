#!/bin/sh
# What DDP's gradient exchange costs over the compute (issue 41), on one torch line:
#
#   BUILD=build TORCH_LINE=debian|pip sh bench/torch/ddp_overhead.sh [--ranks 4] [--rounds 5]
#       [--steps 20] [--hook fp16] [--out DIR]
#
# Each round runs bench/torch/ddp_overhead.py three times, interleaved: floor (the same DDP
# job with a comm hook that exchanges nothing), gloo, chorus. A mode's step time is the
# median over the rounds of each round's median step; its overhead is that minus the
# floor's. Prints the table and the two acceptance ratios (chorus overhead / gloo overhead,
# chorus step / floor), and compares the final weights of the last round's chorus and gloo
# runs (within 1e-5 relative: they sum in different orders). Then one allreduce of the
# gradients' bytes on the same ranks, staged and registered, and the memory-bandwidth bound
# of a single-copy allreduce: the least the exchange can add to the step where the ranks
# fill every core. Speed is measured here, never asserted: the script fails only when a run
# fails or the weights differ.
set -u
BUILD=${BUILD:-build}
RANKS=4 ROUNDS=5 STEPS=20 HOOK= OUT=
while [ $# -gt 0 ]; do
    case "$1" in
    --ranks) RANKS=$2; shift ;;
    --rounds) ROUNDS=$2; shift ;;
    --steps) STEPS=$2; shift ;;
    --hook) HOOK=$2; shift ;;
    --out) OUT=$2; shift ;;
    *) echo "usage: sh bench/torch/ddp_overhead.sh [--ranks N] [--rounds N] [--steps N] [--hook fp16] [--out DIR]" >&2
       exit 2 ;;
    esac
    shift
done
. tests/python/torch_line.sh  # TORCH_LINE=debian|pip: PYTHON, PYTHONPATH
have_torch || { echo "bench/torch: skipped: $NO_TORCH"; exit 77; }
[ -n "$OUT" ] || OUT=$(mktemp -d "${TMPDIR:-/tmp}/chorus-ddp-overhead.XXXXXX")
mkdir -p "$OUT"
J="$OUT/ddp-overhead.jsonl"
: >"$J"
export CHORUS_SOCKET_IFNAME=lo GLOO_SOCKET_IFNAME=lo OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
unset RANK WORLD_SIZE MASTER_ADDR MASTER_PORT 2>/dev/null
# Freed memory stays in the heap, as with a caching allocator (bench/torch/run.sh says why).
export MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=68719476736
echo "torch $("$PYTHON" -c 'import torch; print(torch.__version__)') ($PYTHON), $RANKS ranks on $(getconf _NPROCESSORS_ONLN) cores, $ROUNDS rounds of $STEPS steps${HOOK:+, hook $HOOK}"
r=1
while [ "$r" -le "$ROUNDS" ]; do
    for mode in floor gloo chorus; do
        save=
        [ "$r" -eq "$ROUNDS" ] && [ "$mode" != floor ] && save="--save $OUT/$mode.pt"
        "$BUILD/bin/chorusrun" -n "$RANKS" --torch-env --timeout 600 -- "$PYTHON" \
            bench/torch/ddp_overhead.py --mode "$mode" --steps "$STEPS" --round "$r" \
            ${HOOK:+--hook "$HOOK"} --json "$J" $save >"$OUT/$mode-$r.log" 2>&1 ||
            { tail -n 20 "$OUT/$mode-$r.log"; echo "bench/torch: $mode round $r failed"; exit 1; }
    done
    r=$((r + 1))
done
# What this machine allows: the same ranks time one allreduce of the gradients' bytes
# (float32) with chorus-bench, staged in place as DDP's buckets go (-R 0), and from
# registered memory (-R 1), whose run also measures the memory bandwidth and the time a
# single-copy path needs at it (bench/README.md, "Registered memory").
GBYTES=$("$PYTHON" -c 'import json, sys; print(4 * json.loads(open(sys.argv[1]).readline())["params"])' "$J")
for R in 0 1; do
    "$BUILD/bin/chorusrun" -n "$RANKS" --timeout 600 -- "$BUILD/bin/chorus-bench" allreduce \
        -b "$GBYTES" -e "$GBYTES" -n 10 -w 3 -R "$R" --json "$OUT/allreduce-R$R.json" \
        >"$OUT/allreduce-R$R.log" 2>&1 ||
        { tail -n 20 "$OUT/allreduce-R$R.log"; echo "bench/torch: chorus-bench -R $R failed"; exit 1; }
done
"$PYTHON" - "$J" "$OUT/allreduce-R0.json" "$OUT/allreduce-R1.json" <<'PY' || exit 1
import json, statistics, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
by = {}
for r in recs:
    by.setdefault(r["mode"], []).append(r["step_ms"])
med = {m: statistics.median(v) for m, v in by.items()}
r0 = recs[0]
print(f"DDP step, {r0['params'] / 1e6:.1f}M-parameter MLP, batch {r0['batch_per_rank']} per rank, "
      f"{r0['ranks']} ranks, hook {r0['hook']}: median of {len(by['floor'])} rounds (ms)")
print(f"{'mode':>7} {'step ms':>8} {'overhead ms':>12}   per round")
for m in ("floor", "gloo", "chorus"):
    print(f"{m:>7} {med[m]:>8.1f} {med[m] - med['floor']:>12.1f}   "
          + " ".join(f"{x:.1f}" for x in by[m]))
og, oc = med["gloo"] - med["floor"], med["chorus"] - med["floor"]
print(f"chorus overhead / gloo overhead: {oc / og:.2f} (goal <= 0.25)" if og > 0 else
      "gloo overhead <= 0: no ratio")
print(f"chorus step / floor: {med['chorus'] / med['floor']:.3f} (goal <= 1.10)")
# The floor keeps every core busy (ranks >= cores), so the exchange's processor time adds
# to the step whatever overlaps: an allreduce of the gradients costs its own time at least.
r0, r1 = (json.load(open(f)) for f in sys.argv[2:4])
row = lambda d, inplace: next(r for r in d["rows"] if r["in_place"] == inplace)
staged, reg = row(r0, True)["time_us"] / 1e3, row(r1, False)
bw = r1["metadata"].get("memory_bandwidth")
print(f"one allreduce of the {r0['rows'][0]['size'] / 1e6:.1f} MB of gradients on the same "
      f"{r0['metadata']['ranks']} ranks (chorus-bench, records in {sys.argv[2].rsplit('/', 1)[0]}):")
print(f"  staged, in place (DDP's buckets): {staged:.1f} ms; registered, out of place: "
      f"{reg['time_us'] / 1e3:.1f} ms")
if bw and reg.get("bound_fraction"):
    t_bound = reg["time_us"] * reg["bound_fraction"] / 1e3
    n, size = r0["metadata"]["ranks"], r0["rows"][0]["size"]
    # Buffers private to each rank (DDP allocates its buckets): (5n - 2) x size of reads and
    # writes at least (bench/README.md, "DDP's overhead and the machine's bound").
    t_private = (5 * n - 2) * size / (bw["traffic_GBps"] * 1e9) * 1e3
    ratio = lambda t: f"{t / og:.2f}" if og > 0 else "n/a"
    print(f"  a single-copy path at this run's memory bandwidth ({bw['traffic_GBps']:.1f} GB/s "
          f"of reads and writes): {t_bound:.1f} ms at best")
    print(f"  so the lowest step this machine allows is floor + {t_bound:.1f} ms: step / floor "
          f">= {(med['floor'] + t_bound) / med['floor']:.3f}, overhead ratio >= {ratio(t_bound)}")
    print(f"  with the buckets in private memory, as DDP allocates them, any path moves "
          f"(5n-2) x {size / 1e6:.1f} MB: {t_private:.1f} ms at best: step / floor >= "
          f"{(med['floor'] + t_private) / med['floor']:.3f}, overhead ratio >= {ratio(t_private)}")
PY
"$PYTHON" tests/python/compare_weights.py "$OUT/chorus.pt" "$OUT/gloo.pt" --rel 1e-5
echo "records: $J"
