#!/bin/sh
# Runs a part of tests/python/run.sh under AddressSanitizer (issue 36), with the same
# arguments, over a libchorus built with SAN=1:
#
#   make BUILD=build-asan SAN=1 OPT=-O1 all
#   BUILD=build-asan sh tests/python/asan.sh dropped numpy 2
#
# Debian's interpreter is not built with ASan, so gcc's runtime is preloaded (it must come
# first; libstdc++ with it) and leak checking is off (the interpreter and torch keep memory
# until exit by design). A report (use after free, overflow, undefined behaviour) fails the
# run even if the process went on to exit 0. Exit 77 with the reason when the sanitized
# build or libasan is absent.
set -u
BUILD=${BUILD:-build-asan}
PYTHON=${PYTHON:-/usr/bin/python3}
LIB="$BUILD/lib/libchorus.so.0"
[ -f "$LIB" ] || {
    echo "skipped: no $LIB (make BUILD=$BUILD SAN=1 OPT=-O1 all)"; exit 77; }
grep -q __asan_init "$LIB" || {
    echo "skipped: $LIB is not built with ASan (make BUILD=$BUILD SAN=1 OPT=-O1 all)"; exit 77; }
ASAN_LIB=$(gcc -print-file-name=libasan.so 2>/dev/null)
case "$ASAN_LIB" in
/*) [ -f "$ASAN_LIB" ] || ASAN_LIB= ;;
*) ASAN_LIB= ;;
esac
[ -n "$ASAN_LIB" ] || {
    echo "skipped: gcc's libasan.so not found (apt-get install libasan8)"; exit 77; }
# libstdc++ preloaded too: ASan intercepts __cxa_throw and finds the real one when it
# starts, before the interpreter loads any C++ (torch's exceptions would stop it otherwise).
CXX_LIB=$(gcc -print-file-name=libstdc++.so.6 2>/dev/null)
case "$CXX_LIB" in
/*) [ -f "$CXX_LIB" ] || CXX_LIB= ;;
*) CXX_LIB= ;;
esac
[ -n "$CXX_LIB" ] || {
    echo "skipped: gcc's libstdc++.so.6 not found (apt-get install libstdc++6)"; exit 77; }

log=$(mktemp "${TMPDIR:-/tmp}/chorus-asan.XXXXXX")
BUILD="$BUILD" PYTHON="$PYTHON" LD_PRELOAD="$ASAN_LIB $CXX_LIB${LD_PRELOAD:+ $LD_PRELOAD}" \
    ASAN_OPTIONS="detect_leaks=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}" \
    UBSAN_OPTIONS="print_stacktrace=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}" \
    sh tests/python/run.sh "$@" >"$log" 2>&1
rc=$?
cat "$log"
if grep -q -e "ERROR: AddressSanitizer" -e "runtime error:" "$log"; then
    echo "FAIL: a sanitizer report above"
    [ "$rc" -eq 0 ] && rc=1
fi
rm -f "$log"
exit $rc
