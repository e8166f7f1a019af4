#!/bin/sh
# chorus-bench as a test:
#   1. with -c 1, every collective (`all`), every datatype (`-d all`) and every op
#      (`-o all`) gives 0 wrong elements on 2, 3, 4 and 8 ranks, at sizes that do not divide
#      evenly, with the last rank as the root;
#   2. a 2-rank run with --json and --csv: the JSON document validates against
#      bench/schema/chorus-bench.schema.json (python3-jsonschema), holds a row for every
#      collective, and the CSV file holds the same rows; a document with a broken row
#      must fail validation (so the check itself can fail); every row records the
#      algorithm the library chose (auto: by size; --algo tree: tree where it applies;
#      the size-threshold choice, CHORUS_TUNE=0, so that the expected names are fixed:
#      the cost model's own choices are tested in tests/unit/test_tune.c);
#   3. `chorus-bench sweep --ranks 3,2` prints the scaling table and keeps valid JSON;
#   4. with gnuplot, --plot writes PNG files.
# Without python3's jsonschema the schema validation is skipped (one PART-SKIP line) and
# the other checks of the JSON and CSV files still run; without gnuplot, 4 is skipped.
set -u
BUILD=${BUILD:-build}
RUN="$BUILD/bin/chorusrun"
BENCH="$BUILD/bin/chorus-bench"
SCHEMA=bench/schema/chorus-bench.schema.json
[ -x "$RUN" ] && [ -x "$BENCH" ] || { echo "missing $RUN or $BENCH (run make)"; exit 1; }
[ -f "$SCHEMA" ] || { echo "missing $SCHEMA (run from the repository root)"; exit 1; }
unset CHORUS_UNIQUE_ID CHORUS_RANK CHORUS_WORLD_SIZE CHORUS_LOCAL_RANK CHORUS_LOCAL_SIZE \
    CHORUS_ROOT CHORUS_ALGO CHORUS_TRANSPORT 2>/dev/null
export CHORUS_TIMEOUT=${CHORUS_TIMEOUT:-30}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/chorus-bench-test.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT
trap 'exit 1' INT TERM HUP
FAILED=0

fail() {
    echo "FAIL: $*"
    FAILED=1
}

# 1. Exact results everywhere.
for n in 2 3 4 8; do
    out="$TMP/check.$n"
    if ! "$RUN" -n "$n" -q --timeout 60 -- "$BENCH" all -d all -o all -b 1000 -e 33000 -f 33 \
        -n 2 -w 1 -c 1 -r $((n - 1)) >"$out" 2>&1; then
        fail "$n ranks: chorus-bench all -d all -o all exited non-zero"
        tail -n 20 "$out"
        continue
    fi
    grep -q '^# Out of bounds values : 0 OK$' "$out" || fail "$n ranks: wrong values reported"
    blocks=$(grep -c '^# [a-z_]*: the time column is' "$out")
    [ "$blocks" -eq 13 ] || fail "$n ranks: $blocks collective tables, want 13"
    # Every line of the main tables has #wrong 0 (column 9, out of place) and 0 or '-' (no
    # in-place form: sendrecv, alltoallv) in column 13; the barrier's is N/A: it moves no
    # data.
    bad=$(awk '!/^#/ && NF >= 14 && (($9 != "0" && $9 != "N/A") || ($13 != "0" && $13 != "-"))' \
        "$out" | head -n 3)
    [ -z "$bad" ] || fail "$n ranks: rows with wrong values: $bad"
    echo "$n ranks: every collective, datatype and op exact ($(grep -c '^ ' "$out") lines)"
done

# 2. JSON and CSV of a 2-rank run.
JSON="$TMP/run.json"
CSV="$TMP/run.csv"
if ! CHORUS_TUNE=0 "$RUN" -n 2 -q --timeout 60 -- "$BENCH" all -b 8 -e 64K -f 64 -n 2 -w 1 -c 1 \
    --json "$JSON" --csv "$CSV" --algo auto --transport shm >"$TMP/json.out" 2>&1; then
    fail "the 2-rank run with --json failed"
    tail -n 20 "$TMP/json.out"
fi

# Per-row algorithms: auto picks by size (8 B latency-bound, 128 KiB not); a forced
# algorithm shows in every row it applies to.
for algo in auto tree; do
    if ! CHORUS_TUNE=0 "$RUN" -n 2 -q --timeout 60 -- "$BENCH" allreduce -b 8 -e 128K -f 16384 -n 2 -w 1 \
        --algo "$algo" --json "$TMP/algo-$algo.json" >"$TMP/algo-$algo.out" 2>&1; then
        fail "the 2-rank allreduce run with --algo $algo failed"
        tail -n 20 "$TMP/algo-$algo.out"
    fi
done

# 3. A sweep over 2 and 3 ranks (given out of order: the sweep sorts them).
if ! "$BENCH" sweep --ranks 3,2 --keep "$TMP/sweep" --launcher "$RUN --timeout 60" \
    allreduce -b 1K -e 16K -f 4 -n 2 -w 1 >"$TMP/sweep.out" 2>&1; then
    fail "sweep failed"
    tail -n 20 "$TMP/sweep.out"
fi
grep -q '^# scaling efficiency' "$TMP/sweep.out" || fail "sweep printed no efficiency table"
# The reference rank count (2) has efficiency 1 at every size it shows.
eff=$(awk '/^# scaling efficiency/ { on = 1; next } on && !/^#/ { print $2 }' "$TMP/sweep.out" |
    sort -u)
[ "$eff" = "1.000" ] || fail "sweep: efficiency of the smallest rank count is '$eff', want 1.000"

# 4. Plots, when gnuplot is there.
if command -v gnuplot >/dev/null 2>&1; then
    "$RUN" -n 2 -q --timeout 60 -- "$BENCH" allreduce -b 1K -e 16K -f 4 -n 2 -w 1 \
        --plot "$TMP/plot" >"$TMP/plot.out" 2>&1 || fail "the run with --plot failed"
    for f in "$TMP/plot-allreduce-busbw.png" "$TMP/plot-allreduce-latency.png"; do
        [ "$(head -c 4 "$f" 2>/dev/null | od -An -tx1 | tr -d ' ')" = "89504e47" ] ||
            fail "--plot did not write the PNG $f"
    done
else
    echo "PART-SKIP plot: skipped: gnuplot not installed (apt-get install gnuplot)"
fi

ALGO_AUTO="$TMP/algo-auto.json" ALGO_TREE="$TMP/algo-tree.json" \
python3 - "$SCHEMA" "$JSON" "$CSV" "$TMP"/sweep/run-*.json <<'EOF' || FAILED=1
import csv, copy, json, os, sys
try:
    import jsonschema
except ImportError:
    jsonschema = None

schema = json.load(open(sys.argv[1]))
validator = None
if jsonschema is None:
    # Only the validation needs the module: the checks of the contents below still run.
    print("PART-SKIP schema: skipped: python3 jsonschema module not installed "
          "(apt-get install python3-jsonschema)")
else:
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    validator = cls(schema)
ok = True

def check(path):
    global ok
    doc = json.load(open(path))
    errors = list(validator.iter_errors(doc)) if validator is not None else []
    for e in errors[:5]:
        print(f"FAIL: {path}: {'/'.join(map(str, e.path))}: {e.message}")
    ok = ok and not errors
    return doc

doc = check(sys.argv[2])
meta, rows = doc["metadata"], doc["rows"]
want = {"allreduce", "allgather", "reduce_scatter", "broadcast", "reduce", "alltoall",
        "sendrecv", "barrier", "gather", "scatter", "allgatherv", "reduce_scatterv",
        "alltoallv"}
got = {r["collective"] for r in rows}
if got != want:
    print(f"FAIL: collectives {sorted(got)}, want {sorted(want)}"); ok = False
# Sizes 8, 512 and 32768: 3 sizes x 2 placements for 10 collectives, 3 sizes for sendrecv
# and alltoallv (no in-place form), 1 barrier row.
if len(rows) != 10 * 3 * 2 + 2 * 3 + 1:
    print(f"FAIL: {len(rows)} rows, want 67"); ok = False
if meta["ranks"] != 2 or meta["hosts"] != 1 or meta["transport"] != "shm" \
        or meta["algo_requested"] != "auto" or meta["options"]["iters"] != 2:
    print(f"FAIL: metadata {meta}"); ok = False
if any(r["wrong"] != 0 for r in rows if r["collective"] != "barrier"):
    print("FAIL: a checked row has wrong values"); ok = False
if any(r["iters"] != 2 for r in rows):
    print("FAIL: -n 2 not honoured"); ok = False
for r in rows:
    if not r["lat_min_us"] <= r["lat_avg_us"] <= r["lat_max_us"] or r["time_us"] != r["lat_max_us"]:
        print(f"FAIL: latency spread or -a 3 time wrong in {r}"); ok = False
        break
# With 2 ranks every size here is below the 64 KiB latency threshold of the automatic
# choice: recursive doubling for allreduce, trees for broadcast and reduce; the rooted and
# irregular collectives have one algorithm each.
want_algo = {"allreduce": "rd", "allgather": "ring", "reduce_scatter": "ring",
             "broadcast": "tree", "reduce": "tree", "alltoall": "pairwise",
             "sendrecv": "p2p", "barrier": "dissemination", "gather": "direct",
             "scatter": "direct", "allgatherv": "ring", "reduce_scatterv": "ring",
             "alltoallv": "pairwise"}
bad = [(r["collective"], r["size"], r["algo"]) for r in rows
       if r["algo"] != want_algo[r["collective"]]]
if bad:
    print(f"FAIL: rows with unexpected algorithms: {bad[:5]}"); ok = False
csv_rows = list(csv.DictReader(l for l in open(sys.argv[3]) if not l.startswith("#")))
if [(r["collective"], int(r["size"]), r["in_place"], r["algo"]) for r in csv_rows] != \
        [(r["collective"], r["size"], str(int(r["in_place"])), r["algo"]) for r in rows]:
    print("FAIL: the CSV rows differ from the JSON rows"); ok = False
if any(r["algo_requested"] != "auto" for r in csv_rows):
    print("FAIL: the CSV rows do not repeat algo_requested"); ok = False

for env, requested, want in (("ALGO_AUTO", "auto", ["rd", "rd", "ring", "ring"]),
                             ("ALGO_TREE", "tree", ["tree"] * 4)):
    d = check(os.environ[env])
    got = [r["algo"] for r in d["rows"]]
    if d["metadata"]["algo_requested"] != requested or got != want:
        print(f"FAIL: --algo {requested}: algo_requested {d['metadata']['algo_requested']}, "
              f"row algorithms {got}, want {want}"); ok = False

# The validation itself must be able to fail.
broken = copy.deepcopy(doc)
broken["rows"][0]["op"] = None  # allreduce always has an op
next(r for r in broken["rows"] if r["collective"] == "barrier")["in_place"] = True  # none
broken["rows"][1]["algo"] = "p2p"  # only sendrecv is point to point
if validator is not None and len(list(validator.iter_errors(broken))) != 3:
    print("FAIL: the schema accepted a broken document"); ok = False

sweeps = sys.argv[4:]
if len(sweeps) != 2:
    print(f"FAIL: sweep kept {len(sweeps)} JSON files, want 2"); ok = False
ranks = sorted(check(p)["metadata"]["ranks"] for p in sweeps)
if ranks != [2, 3]:
    print(f"FAIL: sweep ranks {ranks}, want [2, 3]"); ok = False
print(f"JSON: {len(rows)} rows{' valid against the schema' if validator else ''}; "
      "CSV matches; sweep files checked")
sys.exit(0 if ok else 1)
EOF
[ "$FAILED" -eq 0 ] && echo "PASS" && exit 0
exit 1
