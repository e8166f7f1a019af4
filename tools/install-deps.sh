#!/bin/sh
# Installs the Debian packages Chorus needs to build and test, when they are missing.
# --check only reports (exit 1 if something required is missing). Optional packages are
# reported, never fatal.
set -u
REQUIRED="build-essential pkg-config libssl-dev libcmocka-dev libjansson-dev"
OPTIONAL="openmpi-bin valgrind libopenmpi-dev libgloo-dev g++ python3-jsonschema gnuplot-nox
          clang libclang-rt-14-dev libucx-dev libibverbs-dev libhwloc-dev"
# libopenmpi-dev, libgloo-dev, g++: bench/compare.sh; python3-jsonschema: tests/mp/bench_json.sh;
# gnuplot-nox: chorus-bench --plot; clang, libclang-rt-14-dev: make fuzz (libFuzzer);
# libucx-dev, libibverbs-dev, libhwloc-dev: the ucx and ib transports, topology discovery.
# libjansson-dev (required): chorus-bench --json.

missing() {
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || echo "$p"
    done
}

need=$(missing $REQUIRED)
want=$(missing $OPTIONAL)
if [ "${1:-}" = "--check" ]; then
    [ -z "$need" ] && exit 0
    echo "missing required packages: $need"; exit 1
fi
if [ -z "$need" ] && [ -z "$want" ]; then exit 0; fi
if [ "$(id -u)" != 0 ]; then
    [ -n "$need" ] && { echo "install-deps: need root to install: $need" >&2; exit 1; }
    echo "install-deps: optional packages missing (not fatal): $want" >&2; exit 0
fi
echo "install-deps: installing: $need $want"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null 2>&1 || true
if [ -n "$need" ]; then
    apt-get install -y -qq --no-install-recommends $need >/dev/null || {
        echo "install-deps: could not install required packages: $need" >&2; exit 1; }
fi
for p in $want; do
    apt-get install -y -qq --no-install-recommends "$p" >/dev/null 2>&1 ||
        echo "install-deps: optional package $p not installed (features using it are skipped)" >&2
done
exit 0
