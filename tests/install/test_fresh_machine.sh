#!/bin/sh
# A fresh machine, as a new user meets it (issue 16, acceptance 1): the optional -dev
# packages are removed (apt-get remove libucx-dev libibverbs-dev libhwloc-dev libpmix-dev, and what
# apt removes with them), then on a fresh clone of HEAD the README's two commands run in
# the README's order, `make bench && make test`; removed again, another fresh clone runs
# them the other way round, `make test && make bench`. Each must pass, and the build must
# have the real ucx and ib code, which is checked four ways: the build's record
# (config.mk), the library's own word (chorus-bench --version, chorus_build_info()), the
# shared library's NEEDED entries (libucp, libibverbs, libhwloc, libpmix), and the test log (the
# ucx and ib unit tests passed, no test skipped as "built without").
# With --min, a third clone runs `make bench && make test` with CHORUS_DEPS=min and the
# packages still removed: it must pass too, with every stub reported. With --other-order
# only `make test && make bench` runs of the two orders: .ci/run has just run the README's
# order on its own fresh clone with the same packages removed, and checked the same.
# Whatever apt removed is installed again at the end. Root, apt-get and a package mirror
# needed (skips otherwise); about 10 minutes per order on 2 cores.
set -u
BUILD_UNUSED=${BUILD:-}
MIN=0
BOTH=1
for arg in "$@"; do
    case "$arg" in
    --min) MIN=1 ;;
    --other-order) BOTH=0 ;;
    *) echo "usage: sh tests/install/test_fresh_machine.sh [--min] [--other-order]" >&2; exit 2 ;;
    esac
done
[ "$(id -u)" = 0 ] || { echo "skipped: removing packages needs root"; exit 77; }
command -v apt-get >/dev/null 2>&1 || { echo "skipped: no apt-get"; exit 77; }
REPO=$(git rev-parse --show-toplevel 2>/dev/null) || { echo "skipped: not in a git clone"; exit 77; }
OPTIONAL_DEV="libucx-dev libibverbs-dev libhwloc-dev libpmix-dev"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/chorus-fresh.XXXXXX") || exit 1
FAILED=0
fail() { echo "FAIL: $*"; FAILED=1; }

# Everything apt would take away with them, to put back at the end.
removed=$(apt-get remove -s $OPTIONAL_DEV 2>/dev/null | sed -n 's/^Remv \([^ ]*\) .*/\1/p' | tr '\n' ' ')
restore() {
    back=
    for p in $removed $OPTIONAL_DEV; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || back="$back $p"
    done
    if [ -n "$back" ]; then
        echo "restoring:$back"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $back \
            >"$TMP/restore.log" 2>&1 || { cat "$TMP/restore.log"; echo "could not restore:$back"; }
    fi
    rm -rf "$TMP"
}
trap restore EXIT
trap 'exit 1' INT TERM HUP

remove_optional() {
    DEBIAN_FRONTEND=noninteractive apt-get remove -y -qq $OPTIONAL_DEV >"$TMP/remove.log" 2>&1 || {
        cat "$TMP/remove.log"; echo "FAIL: apt-get remove $OPTIONAL_DEV"; exit 1; }
    for p in $OPTIONAL_DEV; do
        if pkg-config --exists "$(echo "$p" | sed 's/-dev$//; s/^libucx$/ucx/; s/^libhwloc$/hwloc/; s/^libpmix$/pmix/')"; then
            echo "FAIL: $p removed but its pkg-config file is still found"; exit 1
        fi
    done
    echo "removed: $removed"
}

# run_order NAME CMD1 CMD2 [ENV=VALUE...]: a fresh clone, the two commands in that order.
run_order() {
    name=$1 c1=$2 c2=$3 envs=${4:-}
    dir=$TMP/$name
    git clone -q "$REPO" "$dir" || { fail "$name: git clone"; return; }
    echo "== $name: $envs $c1 && $c2 in a fresh clone of $(git -C "$dir" rev-parse --short HEAD)"
    for c in "$c1" "$c2"; do
        t0=$(date +%s)
        # As from a user's shell: not a sub-make of the make that runs this test (which
        # would share its job slots, or have none, instead of the Makefile's every core).
        # shellcheck disable=SC2086
        (cd "$dir" && env -u MAKELEVEL -u MAKEFLAGS -u MFLAGS $envs $c) >"$dir.$(echo "$c" | tr ' ' _).log" 2>&1
        rc=$?
        echo "$name: '$c' exited $rc in $(($(date +%s) - t0)) s"
        [ "$rc" -eq 0 ] || { tail -n 40 "$dir.$(echo "$c" | tr ' ' _).log"; fail "$name: $c"; return; }
    done
    grep '^config:' "$dir.$(echo "$c1" | tr ' ' _).log" | head -n 4
    grep -E '^[0-9]+ passed, [0-9]+ failed' "$dir.make_test.log"
    grep 'Avg bus bandwidth' "$dir.make_bench.log"
}

# check_real NAME: the build in NAME has the real ucx, ib, hwloc and pmix code.
check_real() {
    dir=$TMP/$1
    for h in UCX IBV HWLOC PMIX; do
        grep -q "^HAVE_$h *:= *1" "$dir/build/config.mk" || fail "$1: config.mk has no HAVE_$h=1"
    done
    info=$("$dir/build/bin/chorus-bench" --version)
    echo "$1: chorus-bench --version: $info"
    case "$info" in *"ucx yes, ib verbs yes, hwloc yes, pmix yes"*) ;; *) fail "$1: the library has stubs" ;; esac
    needed=$(readelf -d "$dir/build/lib/libchorus.so" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')
    echo "$1: libchorus.so NEEDED: $needed"
    for lib in libucp.so libibverbs.so libhwloc.so libpmix.so; do
        case "$needed" in *"$lib"*) ;; *) fail "$1: libchorus.so does not link $lib" ;; esac
    done
    log=$dir.make_test.log
    for t in unit/test_transport_ucx unit/test_ucx_rma unit/test_ib_data unit/test_ib_zcopy; do
        grep -q "^PASS  $t " "$log" || fail "$1: $t did not pass"
    done
    if grep -q 'built without' "$log"; then
        fail "$1: tests skipped for a missing library: $(grep 'built without' "$log" | head -n 3)"
    fi
    grep -q '^[0-9]* passed, 0 failed' "$log" || fail "$1: make test had failures"
}

if [ "$BOTH" -eq 1 ]; then
    remove_optional
    run_order bench-then-test "make bench" "make test"
    check_real bench-then-test
fi
remove_optional
# In .ci/run (--other-order), the job's quick tier has passed on a build of the same commit
# with the same packages (CHORUS_FRESH_REUSE, its record): this clone's `make test`
# carries those passes where it builds the same bytes (the build flags make clones
# reproducible; tests/run_tests.sh checks build_id and runs everything otherwise). What
# this order adds, `make test` as a user's first command installing, configuring and
# building everything, is checked in full either way, and check_real below too.
reuse_env=
if [ "$BOTH" -eq 0 ] && [ -n "${CHORUS_FRESH_REUSE:-}" ] && [ -f "$CHORUS_FRESH_REUSE" ]; then
    reuse_env="CHORUS_TESTS_REUSE=$CHORUS_FRESH_REUSE"
fi
run_order test-then-bench "make test" "make bench" "$reuse_env"
grep -E '^(reusing|not reusing) ' "$TMP/test-then-bench.make_test.log"
check_real test-then-bench
if [ "$MIN" -eq 1 ]; then
    remove_optional
    run_order min-deps "make bench" "make test" CHORUS_DEPS=min
    dir=$TMP/min-deps
    info=$("$dir/build/bin/chorus-bench" --version 2>/dev/null)
    echo "min-deps: chorus-bench --version: $info"
    case "$info" in *"ucx no (stub"*"ib verbs no (stub"*) ;; *) fail "min-deps: stubs not reported" ;; esac
    grep -q '^config: ucx *no' "$dir.make_bench.log" || fail "min-deps: make did not report ucx missing"
    grep 'built without' "$dir.make_test.log" | head -n 4
fi
[ "$FAILED" -eq 0 ] || exit 1
if [ "$BOTH" -eq 1 ]; then
    echo "fresh machine: both orders built the real ucx and ib code and passed"
else
    echo "fresh machine: make test && make bench built the real ucx and ib code and passed" \
        "(the README's order: .ci/run's first phase)"
fi
