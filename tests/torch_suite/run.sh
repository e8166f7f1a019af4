#!/bin/sh
# PyTorch's torch.distributed conformance suite (distributed_test.py's _DistTestBase, as
# pytorch's test/distributed/test_distributed_spawn.py runs it) on one backend:
#
#   sh tests/torch_suite/run.sh --line debian|pip --backend chorus|gloo --ranks 2|3 \
#       [--out DIR] [-k PATTERN]... [--timeout S] [--total-timeout S] [--features a,b]
#       [--start fork|spawn] [--force REGEX] [--list]
#
# --line     debian: /usr/bin/python3 with Debian's torch 1.13 on $BUILD/python; pip: the
#            interpreter of PIP_PYTHON in $BUILD/config.mk with torch 2.x on $BUILD/python-pip
#            (tests/python/torch_line.sh)
# --out      result directory (default ${TMPDIR:-/tmp}/torch_suite/LINE-BACKEND-nRANKS):
#            results.tsv, results.json, logs/ (per test and rank), driver.log
# -k         only tests whose name contains PATTERN (or matches it as a glob); repeatable
# --timeout  per-test limit, the suite's own (default 180 s); --total-timeout: the whole
#            run, killed with its ranks after it (default 5400 s)
# --features the DistTestCases.backend_feature sets the backend is declared in (default for
#            chorus: plugin,ddp,subgroup)
# --start    how the ranks start: fork (default, ~0.3 s a test) or spawn (as
#            test_distributed_spawn.py, 10-15 s a test here)
# --force    also run the tests the suite skips up front when the skip reason matches REGEX
#            (e.g. 'gloo' or '.'): what a restriction to named backends hides
# --list     the selected tests, with their up-front skip reasons
#
# Prints one line per test (PASS/FAIL/ERROR/SKIP, seconds, reason) and a summary line;
# exit 0 when nothing failed. Compare two runs: python3 tests/torch_suite/compare.py A B.
set -u
cd "$(dirname "$0")/../.." || exit 2
BUILD=${BUILD:-build}
line=debian backend= ranks=3 out= total=${TORCH_SUITE_TOTAL_TIMEOUT:-5400}
n=$#
while [ "$n" -gt 0 ]; do
    a=$1; shift; n=$((n - 1))
    case $a in
    --line|--backend|--ranks|--out|--total-timeout)
        [ "$n" -gt 0 ] || { echo "run.sh: $a needs a value" >&2; exit 2; }
        v=$1; shift; n=$((n - 1))
        case $a in
        --line) line=$v ;; --backend) backend=$v ;; --ranks) ranks=$v ;;
        --out) out=$v ;; --total-timeout) total=$v ;;
        esac ;;
    --line=*) line=${a#*=} ;;
    --backend=*) backend=${a#*=} ;;
    --ranks=*) ranks=${a#*=} ;;
    --out=*) out=${a#*=} ;;
    --total-timeout=*) total=${a#*=} ;;
    -h|--help) sed -n '2,26p' "$0"; exit 0 ;;
    *) set -- "$@" "$a" ;;   # for suite.py: -k, --timeout, --features, --list
    esac
done
[ -n "$backend" ] || { echo "run.sh: --backend chorus|gloo is required (see --help)" >&2; exit 2; }
out=${out:-${TMPDIR:-/tmp}/torch_suite/$line-$backend-n$ranks}

TORCH_LINE=$line
export TORCH_LINE
. tests/python/torch_line.sh
[ "$line" = debian ] || have_torch || { echo "skipped: $NO_TORCH"; exit 77; }
"$PYTHON" -c 'import torch.distributed' 2>/dev/null || {
    echo "skipped: $PYTHON has no torch.distributed"; exit 77; }
if [ "$backend" = chorus ]; then
    "$PYTHON" -c 'import chorus.torch' || {
        echo "FAIL: $PYTHON cannot import chorus.torch from $PYDIR (run make)"; exit 1; }
fi
# Debian's python3-torch lacks expecttest, which torch's test helpers import.
if ! "$PYTHON" -c 'import expecttest' 2>/dev/null; then
    PYTHONPATH="$PYTHONPATH:$PWD/tests/torch_suite/shim"
fi

export CHORUS_SOCKET_IFNAME=lo GLOO_SOCKET_IFNAME=lo OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
export PYTHONPATH PYTHONUNBUFFERED=1
unset RANK LOCAL_RANK WORLD_SIZE MASTER_ADDR MASTER_PORT CHORUS_TRANSPORT CHORUS_ALGO 2>/dev/null
# A previous run's directory is replaced; anything else that is not empty is refused.
if [ -d "$out" ] && [ -n "$(ls -A "$out" 2>/dev/null)" ] && [ ! -e "$out/driver.log" ] &&
    [ ! -e "$out/results.tsv" ]; then
    echo "run.sh: --out $out is not empty and not a previous run's: not replacing it" >&2
    exit 2
fi
rm -rf "$out"
mkdir -p "$out" || exit 2

start=$(date +%s)
timeout --kill-after=30 "$total" "$PYTHON" tests/torch_suite/suite.py \
    --line "$line" --backend "$backend" --ranks "$ranks" --out "$out" "$@"
rc=$?
end=$(date +%s)
[ "$rc" -eq 124 ] || [ "$rc" -eq 137 ] &&
    echo "TIMEOUT: the whole run passed --total-timeout ${total}s; partial results in $out/results.tsv"
echo "# $line $backend n=$ranks: $((end - start))s wall, exit $rc"
exit "$rc"
