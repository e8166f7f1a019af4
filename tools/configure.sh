#!/bin/sh
# Decides what this build is made of, before anything is compiled, and records it in
# $BUILD/config.mk, which the Makefile includes and every object depends on.
#
#   BUILD=build CUDA_HOME=/usr/local/cuda SUMMARY=1 sh tools/configure.sh
#
# 1. Installs missing packages first (tools/install-deps.sh, as much as CHORUS_DEPS says:
#    all, min or none), so that what `make` installs is used by the same `make`.
# 2. Detects the optional libraries with pkg-config, and nvcc under CUDA_HOME.
# 3. Writes config.mk only when its content changes: an unchanged record leaves every
#    object as it is, a changed one (a package installed or removed since) rebuilds them.
# 4. With SUMMARY=1, or when the record is new or changed, prints one line per optional
#    part: found and used, or missing and what is lost.
set -u
BUILD=${BUILD:-build}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
CONFIG=$BUILD/config.mk

mkdir -p "$BUILD" || exit 1
sh tools/install-deps.sh --stamp "$BUILD/deps.stamp" || {
    echo "configure: required packages are missing (see above); CHORUS_DEPS=${CHORUS_DEPS:-all}" >&2
    exit 1
}

for pc in libcrypto jansson; do
    pkg-config --exists "$pc" 2>/dev/null || {
        echo "configure: $pc not found by pkg-config (apt-get install libssl-dev libjansson-dev)" >&2
        exit 1
    }
done

cppflags=""
libs="$(pkg-config --libs libcrypto jansson)"
requires="libcrypto, jansson"
summary=""
line() { summary="$summary$(printf 'config: %-10s %-4s %s' "$1" "$2" "$3")
"; }

# optional NAME PKG DEB WHAT: a library the library itself is built with when present.
optional() {
    if pkg-config --exists "$2" 2>/dev/null; then
        eval "have_$1=1"
        cppflags="$cppflags -DCHORUS_HAVE_$1=1 $(pkg-config --cflags "$2")"
        libs="$libs $(pkg-config --libs "$2")"
        requires="$requires, $2"
        line "$2" yes "$(pkg-config --modversion "$2"): $4"
    else
        eval "have_$1="
        line "$2" no "$4 unavailable (apt-get install $3)"
    fi
}
have_UCX= have_IBV= have_HWLOC= have_PMIX=
optional UCX ucx libucx-dev "CHORUS_TRANSPORT=ucx"
optional IBV libibverbs libibverbs-dev "the ib transport (InfiniBand, RoCE)"
optional HWLOC hwloc libhwloc-dev "hwloc topology discovery"
optional PMIX pmix libpmix-dev "PMIx bootstrap (mpirun, srun --mpi=pmix) with no variable to set"

if [ -x "$CUDA_HOME/bin/nvcc" ]; then
    have_nvcc=1
    v=$("$CUDA_HOME/bin/nvcc" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')
    line cuda yes "nvcc $v at $CUDA_HOME: libchorus-cuda.so (device buffers)"
else
    have_nvcc=
    line cuda no "no nvcc at $CUDA_HOME/bin: no libchorus-cuda.so, device buffers unsupported"
fi

# Python (Debian's interpreter: another python3 may come first on PATH): the chorus package
# needs numpy or torch for its tests; chorus.torch needs torch and its C++ headers.
PYTHON=${PYTHON:-/usr/bin/python3}
have_numpy= have_torch=
if [ -x "$PYTHON" ] && "$PYTHON" -c 'import numpy' >/dev/null 2>&1; then
    have_numpy=1
    line numpy yes "$("$PYTHON" -c 'import numpy; print(numpy.__version__)'): the chorus Python package's tests"
else
    line numpy no "no tests of the chorus Python package on numpy (apt-get install python3-numpy)"
fi
if [ -x "$PYTHON" ] && "$PYTHON" -c 'import torch, torch.utils.cpp_extension' >/dev/null 2>&1 &&
    [ -f /usr/include/torch/csrc/distributed/c10d/ProcessGroup.hpp ] ||
    "$PYTHON" -c 'import torch, os, sys; sys.exit(not os.path.exists(os.path.join(os.path.dirname(torch.__file__), "include", "torch", "csrc", "distributed", "c10d", "ProcessGroup.hpp")))' >/dev/null 2>&1
then
    have_torch=1
    line torch yes "$("$PYTHON" -c 'import torch; print(torch.__version__)'): the torch.distributed backend (chorus.torch)"
else
    line torch no "no torch.distributed backend (apt-get install python3-torch libtorch-dev)"
fi

# torch 2.x from pip: the python3 first on PATH when it is another interpreter than PYTHON
# and has torch 2 or later (PIP_PYTHON names another). The backend is built for it too, in
# $BUILD/python-pip (the extensions of two interpreters of one Python version share a file
# name), and the Python tests run on both torch lines.
PIP_PYTHON=${PIP_PYTHON:-$(command -v python3 2>/dev/null)}
have_pip_torch=
if [ -n "$PIP_PYTHON" ] && [ -x "$PIP_PYTHON" ] &&
    [ "$("$PIP_PYTHON" -c 'import sys; print(sys.prefix)' 2>/dev/null)" != \
      "$("$PYTHON" -c 'import sys; print(sys.prefix)' 2>/dev/null)" ] &&
    "$PIP_PYTHON" -c 'import sys, torch, torch.utils.cpp_extension; sys.exit(int(torch.__version__.split(".")[0]) < 2)' >/dev/null 2>&1
then
    have_pip_torch=1
    PIP_PYTHON=$("$PIP_PYTHON" -c 'import sys; print(sys.executable)')  # not pyenv's shim
    line torch-pip yes "$("$PIP_PYTHON" -c 'import torch; print(torch.__version__)') in $PIP_PYTHON: the backend for torch 2.x too"
else
    PIP_PYTHON=
    line torch-pip no "no torch 2.x: the backend is built and tested for Debian's torch only (pip install torch into the python3 first on PATH, or PIP_PYTHON=...)"
fi

# Test and benchmark tools: not part of the library, reported so that their tests' skips
# are no surprise.
tool() { # NAME FOUND WHAT-WITH WHAT-WITHOUT
    if [ -n "$2" ]; then line "$1" yes "$3"; else line "$1" no "$4"; fi
}
tool cmocka "$(pkg-config --exists cmocka 2>/dev/null && echo 1)" "unit tests" \
    "unit tests cannot build (apt-get install libcmocka-dev)"
tool openmpi "$(command -v mpicc.openmpi)" "bench/compare.sh, mpirun tests" \
    "no Open MPI comparison or mpirun tests (apt-get install libopenmpi-dev openmpi-bin)"
tool gloo "$([ -f /usr/include/gloo/allreduce.h ] && echo 1)" "bench/compare.sh" \
    "no Gloo comparison (apt-get install libgloo-dev)"
tool slurm "$(command -v slurmd)" "make cluster-test: a real Slurm on emulated hosts" \
    "make cluster-test skips Slurm (apt-get install slurmd slurmctld slurm-client munge)"
tool valgrind "$(command -v valgrind)" "leak tests" "no valgrind leak tests (apt-get install valgrind)"
tool gnuplot "$(command -v gnuplot)" "chorus-bench --plot" "no plots (apt-get install gnuplot-nox)"

major=$(sed -n 's/^#define CHORUS_VERSION_MAJOR \([0-9]*\)$/\1/p' include/chorus.h)
minor=$(sed -n 's/^#define CHORUS_VERSION_MINOR \([0-9]*\)$/\1/p' include/chorus.h)
patch=$(sed -n 's/^#define CHORUS_VERSION_PATCH \([0-9]*\)$/\1/p' include/chorus.h)

tmp=$CONFIG.tmp.$$
cat >"$tmp" <<EOF
# Written by tools/configure.sh: what this build is made of. Every object depends on this
# file, which is rewritten only when its content changes.
CHORUS_VERSION   := $major.$minor.$patch
CHORUS_SOVERSION := $major
HAVE_UCX         := $have_UCX
HAVE_IBV         := $have_IBV
HAVE_HWLOC       := $have_HWLOC
HAVE_PMIX        := $have_PMIX
HAVE_NVCC        := $have_nvcc
PYTHON           := $PYTHON
HAVE_NUMPY       := $have_numpy
HAVE_TORCH       := $have_torch
PIP_PYTHON       := $PIP_PYTHON
HAVE_PIP_TORCH   := $have_pip_torch
CONFIG_CPPFLAGS  :=$(echo "$cppflags" | tr -s ' ')
CONFIG_LIBS      := $(echo "$libs" | tr -s ' ')
PC_REQUIRES_PRIVATE := $requires
EOF
changed=0 created=0
if cmp -s "$tmp" "$CONFIG"; then
    rm -f "$tmp"
else
    if [ -f "$CONFIG" ]; then changed=1; else created=1; fi
    mv "$tmp" "$CONFIG"
fi
if [ "${SUMMARY:-1}" = 1 ] || [ "$changed" = 1 ] || [ "$created" = 1 ]; then
    [ "$changed" = 1 ] && echo "config: what is installed changed: $CONFIG rewritten, rebuilding"
    printf '%s' "$summary"
fi
exit 0
