#!/bin/sh
# Installs the Debian packages Chorus needs to build and test, when they are missing.
#
#   sh tools/install-deps.sh [--check] [--stamp FILE]
#
# CHORUS_DEPS says how much to install: `all` (default) the required and the optional
# packages, `min` the required ones only, `none` nothing (report only). Optional packages
# that cannot be had are reported, never fatal; the build then reports what it lost.
# --check only reports (exit 1 if something required is missing).
# --stamp FILE remembers the optional packages that apt cannot find, so that later builds
# do not run apt-get again for the same ones (tools/configure.sh passes
# $BUILD/deps.stamp); a package missing that is not in the stamp is tried again.
set -u
REQUIRED="build-essential pkg-config libssl-dev libcmocka-dev libjansson-dev"
# libucx-dev, libibverbs-dev, libhwloc-dev: the ucx and ib transports, topology discovery
# (built in when found: tools/configure.sh); libpmix-dev: the PMIx bootstrap (same).
# openmpi-bin, libopenmpi-dev, libgloo-dev, g++:
# bench/compare.sh and the mpirun tests; valgrind: leak checks; python3-jsonschema:
# tests/mp/bench_json.sh; gnuplot-nox: chorus-bench --plot; clang, libclang-rt-14-dev:
# make fuzz; cmake: the CMake package test (tests/install); dpkg-dev: make deb; libudev-dev:
# `pkg-config --static chorus` (hwloc's private libraries name -ludev); python3-numpy,
# python3-torch, libtorch-dev, python3-dev, pybind11-dev, python3-setuptools: the chorus
# Python package and its torch.distributed backend (python/); libopenblas0-pthread: Debian's
# torch calls whatever libblas.so.3 is, and the reference BLAS makes its matrix products
# (bench/torch's training step) some 20x slower than OpenBLAS.
OPTIONAL="libucx-dev libibverbs-dev libhwloc-dev libpmix-dev openmpi-bin libopenmpi-dev libgloo-dev g++
          valgrind python3-jsonschema gnuplot-nox clang libclang-rt-14-dev cmake dpkg-dev
          libudev-dev python3-numpy python3-torch libtorch-dev python3-dev pybind11-dev
          python3-setuptools libopenblas0-pthread"

CHECK=0
STAMP=
while [ $# -gt 0 ]; do
    case "$1" in
    --check) CHECK=1 ;;
    --stamp) STAMP=$2; shift ;;
    *) echo "usage: sh tools/install-deps.sh [--check] [--stamp FILE]" >&2; exit 2 ;;
    esac
    shift
done

missing() {
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || echo "$p"
    done
}

need=$(missing $REQUIRED)
case "${CHORUS_DEPS:-all}" in
all) want=$(missing $OPTIONAL) ;;
min | none) want= ;;
*) echo "install-deps: CHORUS_DEPS must be all, min or none, not '$CHORUS_DEPS'" >&2; exit 2 ;;
esac
if [ "$CHECK" -eq 1 ]; then
    [ -z "$need" ] && exit 0
    echo "missing required packages:" $need; exit 1
fi
# Optional packages already tried in vain for this build are not tried again.
if [ -n "$STAMP" ] && [ -f "$STAMP" ] && [ -n "$want" ]; then
    retry=
    for p in $want; do grep -qx "$p" "$STAMP" || retry="$retry $p"; done
    want=$retry
fi
[ -z "$need" ] && [ -z "$want" ] && exit 0
if [ "${CHORUS_DEPS:-all}" = none ]; then
    echo "install-deps: CHORUS_DEPS=none: not installing required packages:" $need >&2
    exit 1
fi
if [ "$(id -u)" != 0 ]; then
    if [ -n "$need" ]; then
        echo "install-deps: need root to install required packages:" $need >&2; exit 1
    fi
    echo "install-deps: not root: optional packages not installed:" $want >&2
    [ -n "$STAMP" ] && printf '%s\n' $want >>"$STAMP"
    exit 0
fi
echo "install-deps: installing:" $need $want
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null 2>&1 || true
if [ -n "$need" ]; then
    apt-get install -y -qq --no-install-recommends $need >/dev/null || {
        echo "install-deps: could not install required packages:" $need >&2; exit 1; }
fi
# One apt-get for all optional packages; one at a time only if that fails, so that one
# package that cannot be had does not cost the others.
if [ -n "$want" ] &&
    ! apt-get install -y -qq --no-install-recommends $want >/dev/null 2>&1; then
    for p in $want; do
        apt-get install -y -qq --no-install-recommends "$p" >/dev/null 2>&1 ||
            echo "install-deps: optional package $p not installed (features using it are skipped)" >&2
    done
fi
# Only packages that this machine's sources do not have are remembered; one that failed
# for another reason (a dpkg lock held by another apt) is tried again next time.
if [ -n "$STAMP" ]; then
    mkdir -p "$(dirname "$STAMP")"
    for p in $(missing $want); do
        apt-cache policy "$p" 2>/dev/null | grep -q 'Candidate: [0-9]' || echo "$p" >>"$STAMP"
    done
fi
exit 0
