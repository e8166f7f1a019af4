#!/bin/sh
# shm-floor as a test: it prints one line per way of publishing (release, locked) with a
# positive time per round, and rejects bad arguments with its usage and exit status 2. The
# times themselves are measurements, never asserted against a limit here.
set -u
BUILD=${BUILD:-build}
FLOOR="$BUILD/bin/shm-floor"
[ -x "$FLOOR" ] || { echo "missing $FLOOR (run make)"; exit 1; }
FAILED=0
fail() { echo "FAIL: $*"; FAILED=1; }

out=$("$FLOOR" -n 20000 -r 2) || fail "shm-floor -n 20000 -r 2 exited $?"
echo "$out"
for way in release locked; do
    echo "$out" | awk -v w="$way" '$2 == w && $3 + 0 > 0 && $4 == "us" { ok = 1 }
        END { exit !ok }' || fail "no positive time for '$way' in: $out"
done
[ "$(echo "$out" | wc -l)" -eq 2 ] || fail "expected exactly 2 lines, got: $out"
for bad in "-n 0" "-r x" "extra"; do
    # shellcheck disable=SC2086 # the arguments are a word list on purpose
    "$FLOOR" $bad >/dev/null 2>&1
    rc=$?
    [ "$rc" -eq 2 ] || fail "shm-floor $bad: exit $rc, expected 2"
done
[ "$FAILED" -eq 0 ] && echo "ok shm-floor"
exit "$FAILED"
