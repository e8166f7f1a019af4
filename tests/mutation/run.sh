#!/bin/sh
# The mutation check (issue 36): puts the faults of tests/mutation/mutants.txt into the
# library one at a time and says which tests catch them.
#
#   sh tests/mutation/run.sh [--only ID,...] [--list] [--keep] [--dir DIR]
#
# It copies the working tree (git ls-files -co --exclude-standard: tracked files and new
# ones, no build directories) into a scratch directory and builds it there once (make all
# and every test binary, in DIR/build). Then, for each mutant: apply it (a snippet that does
# not occur exactly once is an error: the list is stale), rebuild (the binaries its kill
# commands name, and `make all` if one goes through Python; a mutant that does not compile
# is an error), run its kill commands in order and, if none fails, the quick tier of
# tests/run_tests.sh with --fail-fast (after building everything); then put the file back.
# Each mutant ends KILLED (by the first command that failed), SURVIVED, or STALE /
# BUILD-FAILED / NO-QUICK (the quick tier could not run), which are errors. Before the mutants, every kill command
# runs once on the unchanged tree and must pass there: a command that fails anyway would
# "kill" anything.
#
# Prints one line per mutant (mutant, file:line, result, killed by, seconds) and ends with
#     mutation: K killed of N (P%), survivors: ...
# Exits 0 when at least MUTATION_MIN percent (default 90) were killed and nothing was in
# error, 1 otherwise, 2 on bad usage.
#
#   --only ID,...  just these mutants          --list  the mutants and where they apply
#   --keep         keep the scratch directory  --dir DIR  build in DIR, kept, reused by a
#                                                         later run (incremental builds)
# Environment: MAKE_JOBS (2), MUTATION_KILL_TIMEOUT (300 s per kill command),
# MUTATION_CUDA_HOME (/nonexistent: the nvcc plugin is left out of the scratch build; no
# mutant is in CUDA code, and the quick tier's device tests use the fake plugin), PYTHON.
set -u
cd "$(dirname "$0")/../.." || exit 2
TOP=$(pwd)
LIST_FILE=$TOP/tests/mutation/mutants.txt
HELPER="${PYTHON:-python3} $TOP/tests/mutation/mutants.py"
ONLY=""
LIST=0
KEEP=0
DIR=""
usage() {
    echo "usage: sh tests/mutation/run.sh [--only ID,...] [--list] [--keep] [--dir DIR]" >&2
    exit 2
}
while [ $# -gt 0 ]; do
    case "$1" in
    --only) [ $# -ge 2 ] || usage; ONLY=$2; shift ;;
    --only=*) ONLY=${1#--only=} ;;
    --list) LIST=1 ;;
    --keep) KEEP=1 ;;
    --dir) [ $# -ge 2 ] || usage; DIR=$2; KEEP=1; shift ;;
    *) usage ;;
    esac
    shift
done

IDS=$($HELPER ids "$LIST_FILE") || exit 2
if [ -n "$ONLY" ]; then
    want=$(echo "$ONLY" | tr ',' ' ')
    for id in $want; do
        echo "$IDS" | grep -qx "$id" || { echo "mutation: no mutant $id" >&2; exit 2; }
    done
    IDS=$want
fi
if [ "$LIST" -eq 1 ]; then
    # shellcheck disable=SC2086
    out=$($HELPER check "$LIST_FILE" "$TOP" $IDS)
    rc=$?
    echo "$out" | awk -F'\t' '{ printf "%-30s %-42s %s\n", $1, $2, $3 }'
    exit $rc
fi

now() { date +%s; }
T0=$(now)
if [ -n "$DIR" ]; then
    mkdir -p "$DIR" || exit 2
    S=$(cd "$DIR" && pwd)
else
    S=$(mktemp -d "${TMPDIR:-/tmp}/chorus-mutation.XXXXXX") || exit 2
fi
SAVE=$S/.mutation-orig
LOGS=$S/.mutation-logs
# A run stopped in the middle of a mutant (--dir) left its file mutated and built: the copy
# below puts the original back with an older time, so it is touched to be rebuilt.
LEFT=$( [ -d "$SAVE" ] && cd "$SAVE" && find . -type f | sed 's|^\./||')
rm -rf "$SAVE" "$LOGS"
mkdir -p "$SAVE" "$LOGS"
cleanup() { [ "$KEEP" -eq 1 ] || rm -rf "$S" "$S.lane2"; }
trap 'cleanup; exit 1' INT TERM

echo "mutation: scratch tree $S"
# The tree as it is now, build directories aside (they are ignored files anyway). Times
# are kept, so that a reused --dir rebuilds only what changed.
git ls-files -co --exclude-standard -z | tr '\0' '\n' | grep -v '^build\(-[^/]*\)\{0,1\}/' |
    tr '\n' '\0' | tar --null -T - -cf - | tar -xf - -C "$S" || { echo "mutation: copy failed"; exit 1; }
cd "$S" || exit 1
for f in $LEFT; do [ -f "$f" ] && touch "$f"; done

B=build
export B BUILD=$B
MAKE_ARGS="-j${MAKE_JOBS:-2} BUILD=$B CUDA_HOME=${MUTATION_CUDA_HOME:-/nonexistent} CHORUS_DEPS=none"
TEST_BINS=$( (ls tests/unit/test_*.c | sed 's|^tests/unit/\(.*\)\.c$|'$B'/tests/\1|'
    ls tests/mp/*.c | sed 's|^tests/mp/\(.*\)\.c$|'$B'/tests/mp_\1|'
    ls tests/gpu/*.c 2>/dev/null | sed 's|^tests/gpu/\(.*\)\.c$|'$B'/tests/gpu_\1|') | tr '\n' ' ')

# make TARGETS... (log in $1)
build() {
    blog=$1
    shift
    # shellcheck disable=SC2086
    make $MAKE_ARGS "$@" >"$blog" 2>&1
}

# The binaries a mutant's kill commands name ($B/tests/x, $B/bin/x).
kill_bins() {
    $HELPER kills "$LIST_FILE" "$1" | grep -o '\$B/\(tests\|bin\)/[A-Za-z0-9_.-]*' |
        sed "s|^\\\$B|$B|" | sort -u | tr '\n' ' '
}

# A short name for a kill command: no "env", no deadlines, "chorusrun -n N" for the launcher.
short() {
    echo "$1" | sed -e 's/^env //' -e 's/CHORUS_TIMEOUT=[^ ]* //g' \
        -e 's|\$B/bin/chorusrun -n \([0-9]*\) --timeout [0-9]* -- |chorusrun -n \1 |' \
        -e 's|\$B/tests/||g' -e 's|sh tests/python/run.sh|python/run.sh|'
}

# run_kill LOG COMMAND: the command's exit status (a skip, 77, is no failure).
run_kill() {
    (
        unset CHORUS_UNIQUE_ID CHORUS_RANK CHORUS_WORLD_SIZE CHORUS_LOCAL_RANK \
            CHORUS_LOCAL_SIZE CHORUS_ROOT RANK WORLD_SIZE MASTER_ADDR MASTER_PORT \
            CHORUS_ALGO CHORUS_TRANSPORT CHORUS_TIMEOUT 2>/dev/null
        export CHORUS_SOCKET_IFNAME=lo
        exec timeout -k 5 "${MUTATION_KILL_TIMEOUT:-300}" sh -c "$2"
    ) >"$1" 2>&1
    rc=$?
    [ "$rc" -eq 77 ] && rc=0
    return "$rc"
}

printf 'mutation: building the scratch tree (make all and the test binaries)... '
# shellcheck disable=SC2086
if ! build "$LOGS/build-clean.log" all $TEST_BINS; then
    echo "FAILED"
    tail -n 30 "$LOGS/build-clean.log"
    cleanup
    exit 1
fi
echo "done ($(($(now) - T0)) s)"

# Every kill command must pass on the unchanged tree.
echo "mutation: the kill commands on the unchanged tree"
$HELPER check "$LIST_FILE" "$S" $IDS >/dev/null || {
    # shellcheck disable=SC2086
    $HELPER check "$LIST_FILE" "$S" $IDS | grep STALE
    echo "mutation: stale mutants (update tests/mutation/mutants.txt)"
    cleanup
    exit 1
}
BASE_FAIL=0
for id in $IDS; do $HELPER kills "$LIST_FILE" "$id"; done | sort -u >"$LOGS/kills"
i=0
while IFS= read -r cmd; do
    i=$((i + 1))
    t=$(now)
    if run_kill "$LOGS/baseline-$i.log" "$cmd" </dev/null; then
        printf '  pass  %4ss  %s\n' "$(($(now) - t))" "$(short "$cmd")"
    else
        printf '  FAIL  %4ss  %s (log: %s)\n' "$(($(now) - t))" "$(short "$cmd")" \
            "$LOGS/baseline-$i.log"
        BASE_FAIL=1
    fi
done <"$LOGS/kills"
if [ "$BASE_FAIL" -eq 1 ]; then
    echo "mutation: a kill command fails on the unchanged tree; fix it first"
    KEEP=1
    exit 1
fi

# run_lane TREE IDS...: the mutants, one after the other, in the tree TREE (its own build,
# its own saved originals); one table line each, on stdout and in $LOGS/table.TREE-NAME.
run_lane() {
    lane_tree=$1
    shift
    cd "$lane_tree" || exit 1
    S=$lane_tree
    SAVE=$S/.mutation-orig
    mkdir -p "$SAVE"
    lane_table=$LOGS/table.$(basename "$S")
    : >"$lane_table"
    for id in "$@"; do
        t=$(now)
        log=$LOGS/$id
        where=$($HELPER apply "$LIST_FILE" "$S" "$id" "$SAVE")
        if [ $? -ne 0 ]; then
            result=STALE
            by="$where"
            where="-"
        else
            file=${where%:*}
            result=""
            by="-"
            # Only what its kill commands run: the binaries they name, with the library
            # they link (`make all` relinks every tool and example: 24 s against 7 for one
            # test binary here). A command that goes through Python (libchorus.so, the
            # extension) gets `all`. A survivor builds everything before the quick tier.
            targets=$(kill_bins "$id")
            if [ -z "$targets" ] || $HELPER kills "$LIST_FILE" "$id" | grep -q python; then
                targets="all $targets"
            fi
            # shellcheck disable=SC2086
            if ! build "$log.build.log" $targets; then
                result=BUILD-FAILED
                by="see $log.build.log"
            fi
            if [ -z "$result" ]; then
                k=0
                $HELPER kills "$LIST_FILE" "$id" >"$log.kills"
                while IFS= read -r cmd; do
                    k=$((k + 1))
                    if ! run_kill "$log.kill$k.log" "$cmd" </dev/null; then
                        result=KILLED
                        by=$(short "$cmd")
                        break
                    fi
                done <"$log.kills"
            fi
            if [ -z "$result" ]; then
                # shellcheck disable=SC2086
                if ! build "$log.build-tests.log" all $TEST_BINS; then
                    result=BUILD-FAILED
                    by="see $log.build-tests.log"
                else
                    BUILD=$B sh tests/run_tests.sh quick --fail-fast >"$log.quick.log" 2>&1
                    rc=$?
                    if [ "$rc" -eq 0 ]; then
                        result=SURVIVED
                    elif [ "$rc" -eq 2 ] && grep -q '^usage:' "$log.quick.log"; then
                        result=NO-QUICK
                        by="tests/run_tests.sh has no quick tier"
                    else
                        result=KILLED
                        by="quick: $(grep '^FAIL' "$log.quick.log" | head -n 1 |
                            sed 's/^FAIL *//; s/  *[0-9.]*s .*$//')"
                    fi
                fi
            fi
            # Back to the original; touched, so that the next make rebuilds what it feeds.
            cp "$SAVE/$file" "$file" && touch "$file"
        fi
        printf '%-30s %-40s %-12s %5ss  %s\n' "$id" "$where" "$result" "$(($(now) - t))" \
            "$by" | tee -a "$lane_table"
    done
}

# Two lanes by default, each in a tree of its own: a mutant's rebuild is one compile and a
# link, and its kill commands mostly one process, so one lane leaves a core idle. The
# second tree is a copy of the built first (times kept: nothing rebuilds).
LANES=${MUTATION_LANES:-2}
set -- $IDS
[ "$#" -ge 2 ] || LANES=1
S2=""
if [ "$LANES" -ge 2 ]; then
    S2=$S.lane2
    rm -rf "$S2"
    cp -a "$S" "$S2" || { echo "mutation: copying the tree for a second lane failed"; exit 1; }
    rm -rf "$S2/.mutation-orig" "$S2/.mutation-logs"
    # Greedy by weight: a mutant killed through Python rebuilds the extensions (both torch
    # lines), about 4 others' worth; two such builds at once would share the cores anyway.
    ids1="" ids2="" w1=0 w2=0
    for id in $IDS; do
        w=1
        $HELPER kills "$LIST_FILE" "$id" | grep -q python && w=4
        if [ "$w1" -le "$w2" ]; then ids1="$ids1 $id" w1=$((w1 + w)); else ids2="$ids2 $id" w2=$((w2 + w)); fi
    done
    echo "mutation: $# mutants in 2 lanes ($S, $S2)"
    # shellcheck disable=SC2086
    (run_lane "$S2" $ids2) &
    lane2_pid=$!
    # shellcheck disable=SC2086
    (run_lane "$S" $ids1)
    wait "$lane2_pid"
else
    # shellcheck disable=SC2086
    (run_lane "$S" $IDS)
fi
cd "$TOP" || exit 1
TABLE=$LOGS/table
cat "$LOGS"/table.* >"$TABLE"
NTOTAL=$(wc -l <"$TABLE")
NKILLED=$(awk '$3 == "KILLED"' "$TABLE" | wc -l)
SURVIVORS=$(awk '$3 == "SURVIVED" { printf "%s%s", n++ ? ", " : "", $1 }' "$TABLE")
ERRORS=$(awk '$3 != "KILLED" && $3 != "SURVIVED" { printf "%s%s (%s)", n++ ? ", " : "", $1, $3 }' "$TABLE")
NERR=$(awk '$3 != "KILLED" && $3 != "SURVIVED"' "$TABLE" | wc -l)

PCT=$(awk -v k="$NKILLED" -v n="$NTOTAL" 'BEGIN { printf "%d", n ? 100 * k / n : 0 }')
echo "mutation: $NKILLED killed of $NTOTAL ($PCT%), survivors: ${SURVIVORS:-none}" \
    "(total $(($(now) - T0)) s)"
[ -n "$ERRORS" ] && echo "mutation: errors: $ERRORS"
if [ "$KEEP" -eq 1 ]; then
    echo "mutation: scratch tree and logs kept in $S ($LOGS)"
else
    cd "$TOP" && rm -rf "$S" ${S2:+"$S2"}
fi
[ "$NERR" -eq 0 ] && [ "$PCT" -ge "${MUTATION_MIN:-90}" ]
