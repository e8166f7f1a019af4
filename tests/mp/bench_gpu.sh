#!/bin/sh
# chorus-bench on device buffers, with the fake GPU plugin (tests/gpu/fake), so that -G runs
# for real on a machine without a GPU:
#   1. `-G` allreduce (8 B to 1 MiB), reduce_scatter, allgather, alltoall and sendrecv (a
#      device group of a send and a receive per rank; 8 B to 8 MiB, above the default
#      staging chunk) on 2 ranks with -c 1: exit 0, every row checked (no N/A) with 0 wrong
#      out of place and in place (sendrecv has no in-place column: `-`), and the JSON file
#      says device gpu and backend chorus (and validates against the schema when python3's
#      jsonschema is there);
#   2. `--backend nccl` says `skipped: <reason>` and exits 77 where NCCL or a real GPU is
#      missing (on the fake plugin always: NCCL cannot drive host memory), or, on a machine
#      that has both, runs and checks; a run that could not happen prints PART-SKIP nccl;
#   3. `-G` with CHORUS_CUDA_PLUGIN=none says `skipped: no CUDA device` and exits 77;
#   4. `--backend nccl` without -G is a usage error (exit 2);
#   5. gather (host memory only in the library) with -G prints that it is skipped, runs
#      nothing and exits 0, so that `all -G` still times the other collectives.
# The script exits 0 when every check passes, 1 otherwise.
set -u
BUILD=${BUILD:-build}
RUN="$BUILD/bin/chorusrun"
BENCH="$BUILD/bin/chorus-bench"
FAKE="$BUILD/lib/libchorus-cuda-fake.so"
SCHEMA=bench/schema/chorus-bench.schema.json
[ -x "$RUN" ] && [ -x "$BENCH" ] || { echo "missing $RUN or $BENCH (run make)"; exit 1; }
[ -f "$FAKE" ] || { echo "missing $FAKE (run make)"; exit 1; }
unset CHORUS_UNIQUE_ID CHORUS_RANK CHORUS_WORLD_SIZE CHORUS_LOCAL_RANK CHORUS_LOCAL_SIZE \
    CHORUS_ROOT CHORUS_ALGO CHORUS_TRANSPORT CHORUS_CUDA_PLUGIN 2>/dev/null
export CHORUS_TIMEOUT=${CHORUS_TIMEOUT:-30}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/chorus-bench-gpu.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT
trap 'exit 1' INT TERM HUP
FAILED=0

fail() {
    echo "FAIL: $*"
    FAILED=1
}

# Rows of the main tables whose checks did not run or did not pass: column 9 is the
# out-of-place #wrong, column 13 the in-place one; both must be 0 here, but for sendrecv
# (second argument "-"), which has no in-place run.
bad_rows() {
    awk -v ip="${2:-0}" '!/^#/ && NF >= 14 && ($9 != "0" || $13 != ip)' "$1" | head -n 3
}

# 1. -G on the fake plugin.
for coll in allreduce reduce_scatter allgather alltoall sendrecv; do
    out="$TMP/$coll.out"
    json="$TMP/$coll.json"
    end=1M
    want=9
    inplace=0
    if [ "$coll" = sendrecv ]; then
        # 8 B to 8 MiB by 4: 11 sizes, the last two above the 4 MiB staging chunk.
        end=8M
        want=11
        inplace=-
    fi
    if ! CHORUS_CUDA_PLUGIN="$FAKE" "$RUN" -n 2 -q --timeout 60 -- "$BENCH" "$coll" -G \
        -b 8 -e "$end" -f 4 -c 1 -n 2 -w 1 --json "$json" >"$out" 2>&1; then
        fail "$coll -G exited non-zero"
        tail -n 20 "$out"
        continue
    fi
    grep -q '^# Out of bounds values : 0 OK$' "$out" || fail "$coll -G: wrong values reported"
    grep -q 'backend chorus device gpu' "$out" || fail "$coll -G: the header does not say gpu"
    rows=$(awk '!/^#/ && NF >= 14' "$out" | wc -l)
    # 8 B to 1 MiB by 4: 8, 32, ..., 512 KiB: 9 sizes (sendrecv: 11, set above).
    [ "$rows" -eq "$want" ] || fail "$coll -G: $rows rows, want $want"
    bad=$(bad_rows "$out" "$inplace")
    [ -z "$bad" ] || fail "$coll -G: rows not checked or wrong: $bad"
    grep -q '"device": "gpu"' "$json" || fail "$coll -G: the JSON does not say device gpu"
    grep -q '"backend": "chorus"' "$json" || fail "$coll -G: the JSON does not say backend chorus"
    echo "$coll -G (fake plugin): $rows sizes checked, 0 wrong"
done

# 2. --backend nccl: here a skip, on a GPU machine with NCCL a run.
for plugin in default fake; do
    out="$TMP/nccl-$plugin.out"
    if [ "$plugin" = fake ]; then
        CHORUS_CUDA_PLUGIN="$FAKE" "$RUN" -n 2 -q --timeout 120 -- "$BENCH" allreduce -G \
            --backend nccl -b 8 -e 1M -f 4 -c 1 -n 2 -w 1 >"$out" 2>&1
    else
        "$RUN" -n 2 -q --timeout 120 -- "$BENCH" allreduce -G --backend nccl -b 8 -e 1M -f 4 \
            -c 1 -n 2 -w 1 >"$out" 2>&1
    fi
    rc=$?
    if [ "$rc" -eq 77 ]; then
        grep -q '^skipped: ..*' "$out" ||
            fail "--backend nccl ($plugin plugin): 77 without a reason"
        # On the fake plugin the skip is the behaviour checked; on the default one it
        # means the NCCL run itself did not happen here.
        if [ "$plugin" = default ]; then
            echo "PART-SKIP nccl: $(grep -m1 '^skipped:' "$out")"
        else
            echo "--backend nccl ($plugin plugin): $(grep -m1 '^skipped:' "$out")"
        fi
    elif [ "$rc" -eq 0 ] && [ "$plugin" = default ]; then
        grep -q '^# Out of bounds values : 0 OK$' "$out" || fail "--backend nccl: wrong values"
        grep -q 'backend nccl device gpu' "$out" || fail "--backend nccl: the header says otherwise"
        bad=$(bad_rows "$out")
        [ -z "$bad" ] || fail "--backend nccl: rows not checked or wrong: $bad"
        echo "--backend nccl: ran on a GPU and checked"
    else
        fail "--backend nccl ($plugin plugin) exited $rc, want 77 (skip) or 0"
        tail -n 20 "$out"
    fi
done

# 3. No GPU at all.
out="$TMP/none.out"
CHORUS_CUDA_PLUGIN=none "$RUN" -n 2 -q --timeout 60 -- "$BENCH" allreduce -G -b 8 -e 1K -f 4 \
    >"$out" 2>&1
rc=$?
[ "$rc" -eq 77 ] || fail "-G with CHORUS_CUDA_PLUGIN=none exited $rc, want 77"
grep -q '^skipped: no CUDA device' "$out" ||
    fail "-G with no GPU did not say skipped: no CUDA device"
[ "$rc" -eq 77 ] && echo "-G without a GPU: $(grep -m1 '^skipped:' "$out")"

# 4. NCCL takes device buffers only.
"$BENCH" allreduce --backend nccl >"$TMP/usage.out" 2>&1
rc=$?
[ "$rc" -eq 2 ] || fail "--backend nccl without -G exited $rc, want 2 (usage)"

# 5. A host-only collective under -G: a line saying so, no row, no failure.
out="$TMP/gather.out"
CHORUS_CUDA_PLUGIN="$FAKE" "$RUN" -n 2 -q --timeout 60 -- "$BENCH" gather -G -b 8 -e 1K -f 4 \
    >"$out" 2>&1
rc=$?
[ "$rc" -eq 0 ] || fail "gather -G exited $rc, want 0"
grep -q '^# gather: Chorus runs it on host memory only: skipped with -G' "$out" ||
    fail "gather -G did not say it was skipped"
[ -z "$(awk '!/^#/ && NF >= 14' "$out")" ] || fail "gather -G printed rows"

# The JSON of -G against the schema, where python3 has jsonschema.
if ! python3 -c 'import jsonschema' 2>/dev/null; then
    echo "PART-SKIP json-schema: skipped: python3 jsonschema module not installed" \
        "(apt-get install python3-jsonschema)"
elif [ "$FAILED" -eq 0 ]; then
    python3 - "$SCHEMA" "$TMP"/allreduce.json "$TMP"/reduce_scatter.json "$TMP"/allgather.json \
        "$TMP"/alltoall.json "$TMP"/sendrecv.json <<'EOF' || FAILED=1
import json, sys
import jsonschema

schema = json.load(open(sys.argv[1]))
ok = True
for path in sys.argv[2:]:
    doc = json.load(open(path))
    errors = list(jsonschema.validators.validator_for(schema)(schema).iter_errors(doc))
    for e in errors[:5]:
        print(f"FAIL: {path}: {'/'.join(map(str, e.path))}: {e.message}")
    m = doc["metadata"]
    if m["device"] != "gpu" or m["backend"] != "chorus" or "fake" not in m.get("gpu", ""):
        print(f"FAIL: {path}: metadata {m}"); ok = False
    if any(r["wrong"] != 0 for r in doc["rows"]):
        print(f"FAIL: {path}: a row has wrong values or was not checked"); ok = False
    ok = ok and not errors
print("JSON of -G valid against the schema" if ok else "FAIL: JSON of -G")
sys.exit(0 if ok else 1)
EOF
fi
[ "$FAILED" -eq 0 ] && echo "PASS" && exit 0
exit 1
