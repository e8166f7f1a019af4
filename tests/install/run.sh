#!/bin/sh
# `make test-install`: what a new user does, each step a test line, ending with
# "N passed, N failed, N skipped" (issue 16).
#
#   BUILD=build sh tests/install/run.sh [--ci]
#
#   prefix          make install to a temporary prefix; the examples through pkg-config
#                   (shared, --static) and CMake; the build tree (tests/install/test_prefix.sh)
#   python          the Python package by make install and by pip install (offline)
#   deb             make deb, dpkg -i, the examples against the package, dpkg -r
#   readme          every command block of README.md, verbatim (tests/readme/test_readme.sh)
#   fresh-machine   the optional -dev packages removed, both orders of the quick start on
#                   fresh clones, real ucx and ib code checked; then CHORUS_DEPS=min
#
# --ci (.ci/run, which has just run the quick start as written in its own fresh clone,
# the optional packages removed): the README blocks other than the quick start, in place,
# and of the fresh machines only the other order (make test && make bench) and --min. A step's PART-SKIP lines (parts it could not run) are SKIP
# lines of their own, counted as skipped.
set -u
BUILD=${BUILD:-build}
CI_MODE=0
[ "${1:-}" = "--ci" ] && CI_MODE=1
NPASS=0 NFAIL=0 NSKIP=0
LOGDIR=$(mktemp -d "${TMPDIR:-/tmp}/chorus-test-install.XXXXXX") || exit 2
step() {
    name=$1
    shift
    t0=$(date +%s)
    "$@" >"$LOGDIR/$name.log" 2>&1
    rc=$?
    t=$(($(date +%s) - t0))
    if [ "$rc" -eq 0 ]; then
        NPASS=$((NPASS + 1)); printf 'PASS  install/%-20s %5ss\n' "$name" "$t"
    elif [ "$rc" -eq 77 ]; then
        NSKIP=$((NSKIP + 1))
        printf 'SKIP  install/%-20s %5ss  %s\n' "$name" "$t" \
            "$(grep -o 'skipped: .*' "$LOGDIR/$name.log" | tail -n 1)"
    else
        NFAIL=$((NFAIL + 1)); printf 'FAIL  install/%-20s %5ss  exit %s\n' "$name" "$t" "$rc"
    fi
    if [ "$rc" -ne 77 ]; then
        tab=$(printf '\t')
        sed -n 's/^PART-SKIP \([^:]*\): \(skipped: .*\)$/\1\t\2/p' "$LOGDIR/$name.log" |
            while IFS="$tab" read -r part reason; do
                printf 'SKIP  install/%-20s %5s   %s\n' "$name/$part" "-" "$reason"
            done
        NSKIP=$((NSKIP + $(grep -c '^PART-SKIP [^:]*: skipped: ' "$LOGDIR/$name.log")))
    fi
    sed 's/^/      /' "$LOGDIR/$name.log"
}
export BUILD
step prefix sh tests/install/test_prefix.sh
step python sh tests/install/test_python_install.sh
step deb sh tests/install/test_deb.sh
if [ "$CI_MODE" -eq 1 ]; then
    step readme sh tests/readme/test_readme.sh --in-place --quickstart-done
    step fresh-machine sh tests/install/test_fresh_machine.sh --other-order --min
else
    step readme sh tests/readme/test_readme.sh
    step fresh-machine sh tests/install/test_fresh_machine.sh --min
fi
rm -rf "$LOGDIR"
echo "$NPASS passed, $NFAIL failed, $NSKIP skipped"
[ "$NFAIL" -eq 0 ]
