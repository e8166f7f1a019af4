#!/bin/sh
# The Python package and the torch.distributed backend (issue 17), one line each like
# tests/run_tests.sh (which calls this for its "python" part):
#
#   BUILD=build sh tests/python/run.sh [package|torch|ddp]...
#
# package  tests/python/test_package.py on 1-4 ranks under chorusrun, on numpy arrays and on
#          CPU torch tensors
# torch    tests/python/test_torch_backend.py on 1-4 ranks with env:// variables as torchrun
#          sets them (chorusrun --torch-env), and on 2 ranks with tcp:// and file:// init
# ddp      examples/torch/ddp_train.py: 50 steps of DDP with chorus, with gloo, and one
#          process on the whole batch; the weights compared (tests/python/test_ddp.sh)
# dropped  tests/python/test_dropped_request.py on 2-4 ranks: a Request dropped unfinished
#          keeps its buffers alive until its operation ends (issue 36)
# recovery tests/python/test_recovery.py on 4 ranks: one leaves; Comm.shrink, failed_ranks,
#          then Comm.grow back to 4 with a new process (and one with a wrong secret refused)
# args     tests/python/test_torch_args.py on 1-4 ranks: the backend refuses bad split sizes,
#          tags, lists, sizes and dtypes on every rank, before touching memory (issue 36)
#
# tests/python/asan.sh runs any of these under AddressSanitizer.
#
# Two torch lines (TORCH_LINE): debian (default) runs Debian's interpreter (PYTHON, default
# /usr/bin/python3) with its torch 1.13 on $BUILD/python; pip runs the interpreter that
# configure found with torch 2.x from pip (PIP_PYTHON in $BUILD/config.mk) on
# $BUILD/python-pip. A part whose packages are missing prints "skipped: <reason>" (exit 77
# for the caller), never a pass.
set -u
BUILD=${BUILD:-build}
. tests/python/torch_line.sh
[ "${TORCH_LINE:-debian}" = debian ] || have_torch || { echo "skipped: $NO_TORCH"; exit 77; }
RUN="$BUILD/bin/chorusrun"
export CHORUS_SOCKET_IFNAME=lo OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
unset CHORUS_TRANSPORT CHORUS_ALGO RANK WORLD_SIZE MASTER_ADDR MASTER_PORT 2>/dev/null
"$PYTHON" -c 'import chorus' 2>/dev/null || {
    echo "FAIL: $PYTHON cannot import chorus from $PYDIR (run make)"; exit 1; }
case "${1:-}" in
package)
    kind=$2 n=$3
    if [ "$kind" = numpy ] && ! "$PYTHON" -c 'import numpy' 2>/dev/null; then
        echo "skipped: no numpy for $PYTHON (apt-get install python3-numpy, or pip install numpy)"; exit 77; fi
    if [ "$kind" = torch ] && ! "$PYTHON" -c 'import torch' 2>/dev/null; then
        echo "skipped: no torch for $PYTHON (apt-get install python3-torch)"; exit 77; fi
    exec "$RUN" -n "$n" --timeout 300 -- "$PYTHON" tests/python/test_package.py "$kind"
    ;;
dropped)
    kind=$2 n=$3
    [ "$n" -ge 2 ] || { echo "FAIL: dropped needs 2 or more ranks" >&2; exit 2; }
    if [ "$kind" = numpy ] && ! "$PYTHON" -c 'import numpy' 2>/dev/null; then
        echo "skipped: no numpy for $PYTHON (apt-get install python3-numpy, or pip install numpy)"; exit 77; fi
    if [ "$kind" = torch ] && ! "$PYTHON" -c 'import torch' 2>/dev/null; then
        echo "skipped: no torch for $PYTHON (apt-get install python3-torch)"; exit 77; fi
    exec "$RUN" -n "$n" --timeout 300 -- "$PYTHON" tests/python/test_dropped_request.py "$kind"
    ;;
recovery)
    if ! "$PYTHON" -c 'import numpy' 2>/dev/null; then
        echo "skipped: no numpy for $PYTHON (apt-get install python3-numpy, or pip install numpy)"; exit 77; fi
    exec "$RUN" -n 4 --on-failure continue --timeout 200 -- "$PYTHON" tests/python/test_recovery.py
    ;;
args)
    n=$2
    have_torch || { echo "skipped: $NO_TORCH"; exit 77; }
    exec "$RUN" -n "$n" --torch-env --timeout 300 -- "$PYTHON" tests/python/test_torch_args.py
    ;;
torch)
    how=$2 n=$3
    have_torch || { echo "skipped: $NO_TORCH"; exit 77; }
    if [ "$how" = file ]; then
        f=$(mktemp -u "${TMPDIR:-/tmp}/chorus-torch-file.XXXXXX")
        "$RUN" -n "$n" --torch-env --timeout 400 -- "$PYTHON" tests/python/test_torch_backend.py file "$f"
        rc=$?
        rm -f "$f"
        exit $rc
    fi
    exec "$RUN" -n "$n" --torch-env --timeout 400 -- "$PYTHON" tests/python/test_torch_backend.py "$how"
    ;;
*)
    echo "usage: BUILD=dir sh tests/python/run.sh package numpy|torch N | torch env|tcp|file N |" \
        "dropped numpy|torch N | args N | recovery" >&2
    exit 2
    ;;
esac
