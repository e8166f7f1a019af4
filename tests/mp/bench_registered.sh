#!/bin/sh
# chorus-bench -R (issue 38), every figure it adds:
#   1. on 2 and 3 ranks, allreduce (one-shot and two-shot sizes) and allgather with -R 1 give
#      0 wrong elements, and "# Registered memory" says calls read every peer in place (more
#      than 0), while the same run with -R 0 prints no such line;
#   2. the bound of each row is what the printed memory bandwidth allows for the path's
#      reads and writes (recomputed here from the printed M with the table of
#      bench/README.md, "Registered memory"), and the fraction is busbw / bound;
#   3. -G -R 1 (on the fake GPU) reads the peers' device windows and prints no host bound,
#      -G -R 0 prints no -R figures, and --backend nccl refuses -R 1; --json records
#      options.registered 1, the reads of peers' buffers, the memory bandwidth and each
#      row's bound and fraction, as printed.
set -u
BUILD=${BUILD:-build}
RUN="$BUILD/bin/chorusrun"
BENCH="$BUILD/bin/chorus-bench"
[ -x "$RUN" ] && [ -x "$BENCH" ] || { echo "missing $RUN or $BENCH (run make)"; exit 1; }
unset CHORUS_UNIQUE_ID CHORUS_RANK CHORUS_WORLD_SIZE CHORUS_LOCAL_RANK CHORUS_LOCAL_SIZE \
    CHORUS_ROOT CHORUS_ALGO CHORUS_TRANSPORT CHORUS_ARENA CHORUS_WIN_ONESHOT_MAX 2>/dev/null
export CHORUS_TIMEOUT=${CHORUS_TIMEOUT:-30}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/chorus-bench-reg.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT
trap 'exit 1' INT TERM HUP
FAILED=0

fail() {
    echo "FAIL: $*"
    FAILED=1
}

# check_bounds OUT N: every bound line of OUT against the table (factor: nccl-tests').
check_bounds() {
    awk -v n="$2" '
        /Memory bandwidth/ { for (i = 1; i <= NF; i++) if ($i == "reads") m = $(i - 3) }
        /# The bound it sets/ { inb = 1; next }
        inb && $3 ~ /^[a-z_]+$/ && $4 ~ /^[0-9]+$/ {
            coll = $3; size = $4; busbw = $5; bound = $6; frac = $7
            if (coll == "allreduce") {
                lim = n > 4 ? 262144 * 4 / n : 262144
                per = (n == 2 || size <= lim) ? n * (n + 1) : 3 * n - 1
                factor = 2 * (n - 1) / n
            } else if (coll == "reduce_scatter") { per = n + 1; factor = (n - 1) / n }
            else if (coll == "broadcast") { per = 2 * n; factor = 1 }
            else { per = 2 * n; factor = (n - 1) / n }
            want = factor * m / per
            rows++
            if (bound < want * 0.97 - 0.02 || bound > want * 1.03 + 0.02) {
                printf "row %s %s: bound %s, the table gives %.3f (M %s GB/s)\n", coll, size,
                    bound, want, m
                bad = 1
            }
            if (frac < busbw / bound - 0.02 || frac > busbw / bound + 0.02) {
                printf "row %s %s: fraction %s, busbw / bound is %.3f\n", coll, size, frac,
                    busbw / bound
                bad = 1
            }
        }
        END {
            if (m == "") { print "no memory bandwidth line"; bad = 1 }
            if (rows == 0) { print "no bound rows"; bad = 1 }
            exit bad
        }' "$1"
}

for n in 2 3; do
    for coll in allreduce allgather; do
        out="$TMP/$coll.$n"
        # 128 KiB (one-shot on any n), 1 MiB (two-shot from 3 ranks).
        if ! "$RUN" -n "$n" --timeout 120 -- "$BENCH" "$coll" -b 128K -e 1M -f 8 -n 20 -w 2 \
            -c 1 -R 1 >"$out" 2>&1; then
            fail "$coll n=$n -R 1 failed"
            tail -n 20 "$out"
            continue
        fi
        grep -q "Out of bounds values : 0 OK" "$out" || fail "$coll n=$n -R 1: wrong values"
        calls=$(sed -n 's/.*Registered memory *: rank 0: \([0-9]*\) calls.*/\1/p' "$out")
        [ -n "$calls" ] && [ "$calls" -gt 0 ] ||
            fail "$coll n=$n -R 1: no call read its peers' buffers in place (${calls:-no line})"
        grep -q "registered (-R 1)" "$out" || fail "$coll n=$n: the header does not say -R 1"
        check_bounds "$out" "$n" || fail "$coll n=$n: the bound or fraction is not the model's"
    done
    out="$TMP/plain.$n"
    "$RUN" -n "$n" --timeout 120 -- "$BENCH" allreduce -b 128K -e 128K -n 5 -w 1 -R 0 \
        >"$out" 2>&1 || fail "allreduce n=$n -R 0 failed"
    ! grep -q "Registered memory\|Memory bandwidth" "$out" || fail "-R 0 printed -R figures"
done
# -G -R 1 on the fake GPU: buffers in a registered device window, read in place (no host
# memory bound: it is not the host's memory that moves); -G -R 0 says nothing of it.
FAKE="$BUILD/lib/libchorus-cuda-fake.so"
if [ -f "$FAKE" ]; then
    FAKE=$(cd "$(dirname "$FAKE")" && pwd)/$(basename "$FAKE")
    for r in 1 0; do
        CHORUS_CUDA_PLUGIN="$FAKE" "$RUN" -n 2 --timeout 120 -- "$BENCH" allgather -G -R "$r" \
            -b 64K -e 1M -f 16 -n 5 -w 1 >"$TMP/g$r" 2>&1 || fail "-G -R $r failed: $(tail -3 "$TMP/g$r")"
        grep -q "Out of bounds values : 0 OK" "$TMP/g$r" || fail "-G -R $r: wrong values"
    done
    calls=$(sed -n 's/.*Registered memory *: rank 0: \([0-9]*\) calls.*/\1/p' "$TMP/g1")
    [ -n "$calls" ] && [ "$calls" -gt 0 ] || fail "-G -R 1: no call read the peers' device windows"
    ! grep -q "Memory bandwidth" "$TMP/g1" || fail "-G -R 1 printed the host memory's bound"
    ! grep -q "Registered memory" "$TMP/g0" || fail "-G -R 0 printed -R figures"
else
    fail "missing $FAKE (run make)"
fi
if "$BENCH" allreduce -R 1 -G --backend nccl >"$TMP/g" 2>&1; then
    fail "-R 1 -G --backend nccl was accepted"
else
    grep -q "does not take" "$TMP/g" || fail "-R 1 -G --backend nccl: $(cat "$TMP/g")"
fi
"$RUN" -n 2 --timeout 120 -- "$BENCH" allreduce -b 64K -e 1M -f 16 -n 5 -w 1 -R 1 \
    --json "$TMP/r.json" >"$TMP/j" 2>&1 || fail "--json -R 1 failed"
# The file carries what the text printed: options.registered, the reads of peers' buffers,
# the memory bandwidth, and each out-of-place row's bound and fraction (the printed figures
# are rounded to 2 decimals); in-place rows have none. Valid against the schema where
# python3 has jsonschema.
python3 - "$TMP/r.json" "$TMP/j" bench/schema/chorus-bench.schema.json <<'PY' ||
import json, re, sys
d = json.load(open(sys.argv[1]))
text = open(sys.argv[2]).read()
m = d["metadata"]
bad = []
if m["options"]["registered"] != 1:
    bad.append("options.registered is not 1")
calls = int(re.search(r"Registered memory *: rank 0: ([0-9]+) calls", text).group(1))
if m.get("registered_reads", {}).get("calls") != calls or calls <= 0:
    bad.append(f"registered_reads {m.get('registered_reads')} against {calls} printed")
copy = float(re.search(r"Memory bandwidth *: ([0-9.]+) GB/s copied", text).group(1))
bw = m.get("memory_bandwidth", {})
if abs(bw.get("copy_GBps", -1) - copy) > 0.006 or abs(bw.get("traffic_GBps", -1) - 2 * bw.get("copy_GBps", 0)) > 1e-6:
    bad.append(f"memory_bandwidth {bw} against {copy} printed")
printed = {}
for g in re.finditer(r"#  allreduce +([0-9]+) +([0-9.]+) +([0-9.]+) +([0-9.]+)$", text, re.M):
    printed[int(g.group(1))] = tuple(float(x) for x in g.groups()[1:])
for r in d["rows"]:
    if r["in_place"]:
        if "bound_busbw" in r:
            bad.append(f"in-place row {r['size']} has a bound")
        continue
    p = printed.get(r["size"])
    if p is None or "bound_busbw" not in r:
        bad.append(f"row {r['size']}: no bound (printed {p})")
        continue
    if abs(r["bound_busbw"] - p[1]) > 0.006 or abs(r["bound_fraction"] - r["busbw"] / r["bound_busbw"]) > 1e-6:
        bad.append(f"row {r['size']}: bound {r['bound_busbw']} fraction {r['bound_fraction']} against printed {p}")
if len(printed) != 2:
    bad.append(f"{len(printed)} printed bound rows, want 2")
try:
    import jsonschema
    jsonschema.validate(d, json.load(open(sys.argv[3])))
except ImportError:
    pass
except jsonschema.ValidationError as e:
    bad.append(f"schema: {e.message}")
for b in bad:
    print("json:", b)
sys.exit(1 if bad else 0)
PY
    fail "the JSON does not carry the -R figures that the text printed"
[ "$FAILED" -eq 0 ] || exit 1
echo "bench_registered: -R runs read peers in place, and every bound is the model's"
