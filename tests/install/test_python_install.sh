#!/bin/sh
# The Python package installed two ways (issue 17): by `make install PREFIX=<tmp>` (into
# <tmp>/lib/python3/dist-packages), and by `pip install --no-build-isolation --no-index
# --target <dir> python/` (offline) against that installed Chorus. Each copy must load the
# installed libchorus (not the build tree's), pass tests/python/test_package.py on 2 ranks,
# and, where torch is there, run torch.distributed with backend "chorus". Debian's python3.
# A part that cannot run here (no torch backend in the build, no pip) prints a PART-SKIP line.
set -u
BUILD=${BUILD:-build}
PYTHON=${PYTHON:-/usr/bin/python3}
[ -f "$BUILD/config.mk" ] || { echo "missing $BUILD/config.mk (run make first)"; exit 1; }
grep -q '^HAVE_NUMPY *:= *1' "$BUILD/config.mk" ||
    { echo "skipped: no numpy for $PYTHON (apt-get install python3-numpy)"; exit 77; }
TMP=$(mktemp -d "${TMPDIR:-/tmp}/chorus-pyinstall.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT
trap 'exit 1' INT TERM HUP
. tests/install/install_lib.sh
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
unset PYTHONPATH CHORUS_LIBRARY 2>/dev/null
P=$TMP/prefix
make --no-print-directory -s install BUILD="$BUILD" PREFIX="$P" >"$TMP/install.log" 2>&1 ||
    { cat "$TMP/install.log"; echo "FAIL: make install"; exit 1; }
have_torch=0
grep -q '^HAVE_TORCH *:= *1' "$BUILD/config.mk" && have_torch=1

cat >"$TMP/torch_check.py" <<'PY'
import torch, torch.distributed as dist, chorus, chorus.torch
dist.init_process_group("chorus", init_method="env://")
t = torch.full((4,), float(dist.get_rank() + 1))
dist.all_reduce(t)
n = dist.get_world_size()
assert torch.equal(t, torch.full((4,), n * (n + 1) / 2)), t
if dist.get_rank() == 0:
    print("torch all_reduce through", chorus.library_path, "ok")
dist.destroy_process_group()
PY

check_copy() { # LABEL PYTHONPATH
    label=$1
    lp=$(PYTHONPATH=$2 "$PYTHON" -c 'import chorus; print(chorus.library_path)' 2>&1)
    case "$lp" in
    "$P"/lib/libchorus.so.*) ok "$label: loads $lp" ;;
    *) fail "$label: loads '$lp', not the installed library under $P/lib" ;;
    esac
    if PYTHONPATH=$2 "$P/bin/chorusrun" -n 2 --timeout 300 -- "$PYTHON" \
        tests/python/test_package.py numpy >"$TMP/pkg.log" 2>&1; then
        ok "$label: $(grep -o 'rank 0 (numpy): .*' "$TMP/pkg.log")"
    else
        tail -n 20 "$TMP/pkg.log"; fail "$label: test_package.py on 2 ranks"
    fi
    if [ "$have_torch" -eq 1 ]; then
        if PYTHONPATH=$2 "$P/bin/chorusrun" -n 2 --torch-env --timeout 120 -- "$PYTHON" \
            "$TMP/torch_check.py" >"$TMP/torch.log" 2>&1; then
            ok "$label: $(grep -o 'torch all_reduce .*' "$TMP/torch.log")"
        else
            tail -n 20 "$TMP/torch.log"; fail "$label: torch.distributed with backend chorus"
        fi
    else
        echo "PART-SKIP torch-$(echo "$label" | tr ' ' -): skipped: built without the torch" \
            "backend (apt-get install python3-torch libtorch-dev)"
    fi
}

check_copy "make install" "$P/lib/python3/dist-packages"

if "$PYTHON" -m pip --version >/dev/null 2>&1; then
    if CHORUS_INCLUDE_DIR="$P/include" CHORUS_LIBRARY_DIR="$P/lib" "$PYTHON" -m pip install \
        --no-build-isolation --no-index --no-cache-dir --target "$TMP/pip" python/ \
        >"$TMP/pip.log" 2>&1; then
        ok "pip install --no-build-isolation --no-index python/"
        check_copy "pip install" "$TMP/pip"
    else
        tail -n 30 "$TMP/pip.log"; fail "pip install --no-build-isolation python/"
    fi
    rm -rf python/build python/chorus.egg-info python/chorus/_libpath.py
else
    echo "PART-SKIP pip: skipped: no pip for $PYTHON (apt-get install python3-pip)"
fi
[ "$FAILED" -eq 0 ] || exit 1
echo "python install: make install and pip install both work"
