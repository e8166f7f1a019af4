#!/bin/sh
# The torch benchmarks, short, so that what they print stays true (issues 38 and 41):
#
#   BUILD=build TORCH_LINE=debian|pip sh tests/python/test_torch_bench.sh
#
# 1. bench/torch/run.sh on 2 ranks at 16 MiB: the gloo and chorus all_reduce rows, and the
#    registered row (chorus.torch.empty), where every call read the peers in place (2 ranks,
#    16 MiB: the single-copy path) and the bytes read there are what those calls must read:
#    each call reads the peer's whole 16 MiB; the DDP table.
# 2. bench/torch/ddp_overhead.sh on 2 ranks, 1 round of 3 steps: the table, both ratios, the
#    allreduce of the gradients' bytes and the bound, recomputed here from its records:
#    floor + bound time over floor is the printed step / floor limit; the weights compare.
# Speed is not asserted: only that each figure is there and follows from the records.
set -u
BUILD=${BUILD:-build}
. tests/python/torch_line.sh
have_torch || { echo "skipped: $NO_TORCH"; exit 77; }
TMP=$(mktemp -d "${TMPDIR:-/tmp}/chorus-torch-bench.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT
trap 'exit 1' INT TERM HUP
FAILED=0
fail() { echo "FAIL: $*"; FAILED=1; }

export BUILD
sh bench/torch/run.sh --ranks 2 --sizes 16M:16M --steps 2 --out "$TMP/run" >"$TMP/run.out" 2>&1 ||
    { cat "$TMP/run.out"; fail "bench/torch/run.sh exited $?"; }
"$PYTHON" - "$TMP/run/torch-bench.jsonl" "$TMP/run.out" <<'PY' || fail "bench/torch/run.sh's figures"
import json, re, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
text = open(sys.argv[2]).read()
bad = []
kinds = sorted((r["kind"], r["backend"]) for r in recs)
want = [("allreduce", "chorus"), ("allreduce", "gloo"), ("allreduce_registered", "chorus"),
        ("ddp", "chorus"), ("ddp", "gloo")]
if kinds != want:
    bad.append(f"records {kinds}, want {want}")
reg = [r for r in recs if r["kind"] == "allreduce_registered"]
if reg:
    r = reg[0]
    # 2 ranks, 16 MiB in place: the single-copy path, every call reading the peer's 16 MiB.
    if r["single_copy_calls"] != r["calls"] or r["calls"] != r["iters"] + 2:
        bad.append(f"single copy {r['single_copy_calls']} of {r['calls']} calls ({r['iters']} timed)")
    if r["peer_bytes_read"] != r["calls"] * r["bytes"]:
        bad.append(f"{r['peer_bytes_read']} bytes read in place, want {r['calls']} x {r['bytes']}")
    m = re.search(r"^ *16777216 +[0-9.]+ +[0-9.]+ +[0-9.]+ +([0-9]+)/([0-9]+) +([0-9.]+)$", text, re.M)
    if not m or (int(m.group(1)), int(m.group(2))) != (r["single_copy_calls"], r["calls"]) or \
            abs(float(m.group(3)) - r["peer_bytes_read"] / 1e9) > 0.0006:
        bad.append(f"the printed registered row does not match the record ({m and m.group(0)})")
if "chorus / gloo step time:" not in text:
    bad.append("no DDP comparison line")
for b in bad:
    print("run.sh:", b)
sys.exit(1 if bad else 0)
PY

sh bench/torch/ddp_overhead.sh --ranks 2 --rounds 1 --steps 3 --out "$TMP/ddp" >"$TMP/ddp.out" 2>&1 ||
    { cat "$TMP/ddp.out"; fail "bench/torch/ddp_overhead.sh exited $?"; }
"$PYTHON" - "$TMP/ddp" "$TMP/ddp.out" <<'PY' || fail "ddp_overhead.sh's figures"
import json, re, sys
d, text = sys.argv[1], open(sys.argv[2]).read()
recs = [json.loads(l) for l in open(f"{d}/ddp-overhead.jsonl")]
step = {r["mode"]: r["step_ms"] for r in recs}
bad = []
if sorted(step) != ["chorus", "floor", "gloo"]:
    bad.append(f"modes {sorted(step)}")
r0, r1 = (json.load(open(f"{d}/allreduce-R{R}.json")) for R in (0, 1))
grad_bytes = 4 * recs[0]["params"]
for name, doc in (("-R 0", r0), ("-R 1", r1)):
    if {r["size"] for r in doc["rows"]} != {grad_bytes} or doc["summary"]["wrong_total"] != 0:
        bad.append(f"chorus-bench {name}: sizes {[r['size'] for r in doc['rows']]}, want {grad_bytes}, "
                   f"wrong {doc['summary']['wrong_total']}")
ratio = re.search(r"chorus step / floor: ([0-9.]+)", text)
if not ratio or abs(float(ratio.group(1)) - step["chorus"] / step["floor"]) > 0.0006:
    bad.append(f"step / floor printed {ratio and ratio.group(1)}, records give {step['chorus'] / step['floor']:.3f}")
reg = next(r for r in r1["rows"] if not r["in_place"])
t_bound = reg["time_us"] * reg["bound_fraction"] / 1e3
lim = re.search(r"floor \+ ([0-9.]+) ms: step / floor >= ([0-9.]+)", text)
if not lim:
    bad.append("no bound line")
else:
    if abs(float(lim.group(1)) - t_bound) > 0.06:
        bad.append(f"bound {lim.group(1)} ms printed, the records give {t_bound:.2f}")
    if abs(float(lim.group(2)) - (step["floor"] + t_bound) / step["floor"]) > 0.0006:
        bad.append(f"step / floor limit {lim.group(2)}, the records give "
                   f"{(step['floor'] + t_bound) / step['floor']:.3f}")
priv = re.search(r"moves \(5n-2\) x ([0-9.]+) MB: ([0-9.]+) ms at best: step / floor >= ([0-9.]+)", text)
n = r0["metadata"]["ranks"]
t_priv = (5 * n - 2) * grad_bytes / (r1["metadata"]["memory_bandwidth"]["traffic_GBps"] * 1e9) * 1e3
if not priv or abs(float(priv.group(2)) - t_priv) > 0.06 or \
        abs(float(priv.group(3)) - (step["floor"] + t_priv) / step["floor"]) > 0.0006:
    bad.append(f"private-memory bound {priv and priv.groups()}, the records give {t_priv:.2f} ms")
if "(bound 1e-05)" not in text:
    bad.append("no weights comparison")
for b in bad:
    print("ddp_overhead.sh:", b)
sys.exit(1 if bad else 0)
PY
[ "$FAILED" -eq 0 ] || { cat "$TMP/run.out" "$TMP/ddp.out"; exit 1; }
echo "torch benches: every figure checked against the records"
