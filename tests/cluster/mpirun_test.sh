#!/bin/sh
# Jobs under Open MPI's mpirun on the emulated cluster (issue 21, acceptance 2): ranks
# started by mpirun (on host0, orted on the others through an rsh agent, see
# tests/cluster/mpirun.sh) find each other with no CHORUS_*, MASTER_*, RANK or WORLD_SIZE
# variable set. 4 hosts, 2 slots each, mpirun -np 8 (ranks 2h and 2h+1 on host h).
#
#   tests/cluster/mpirun_test.sh [--explicit-root] [--only NAME]  (make cluster-test;
#                                                                  BUILD=dir as make)
#
# env          mpirun -np 4 env on 2 hosts: no CHORUS_* or MASTER_* variable reaches a rank;
#              prints what rank 3 sees of Open MPI and PMIx
# example      mpirun -np 8 examples/allreduce: "allreduce of 1024 floats over 8 ranks: ok"
# bench        mpirun -np 8 chorus-bench allreduce -b 8 -e 1M -f 4: "nranks 8", "hosts 4"
#              and "Out of bounds values : 0 OK"
# fabric       mpirun -np 8 chorus-fabric --time-budget 20 on 8 hosts of 1 slot, links at
#              200 Mbit/s (on unlimited veths the 2 cores saturate and it rightly fails,
#              naming the CPU): "8 hosts, 8 ranks" and "chorus-fabric: PASS"
#
# Each must also exit 0. --explicit-root sends the ranks CHORUS_ROOT (host0) and
# CHORUS_SECRET with mpirun -x, to check the harness itself without the library's own
# Open MPI/PMIx bootstrap. --only NAME runs one case (repeatable). The logs of failed cases
# are printed (last 25 lines). Not named test_*: the default `make test` does not run it
# (about 1.5 minutes on 2 cores). Exit status: 0 every case passed, 1 one failed, 77 skipped
# (no root, namespaces or mpirun).
set -u
BUILD=${BUILD:-build}
HERE=$(dirname "$0")
BENCH="$BUILD/bin/chorus-bench"
FABRIC="$BUILD/bin/chorus-fabric"
EXAMPLE="$BUILD/examples/allreduce"
SUBNET=10.215.0
EXPLICIT=0
ONLY=""
while [ $# -gt 0 ]; do
    case "$1" in
    --explicit-root) EXPLICIT=1; shift ;;
    --only)
        [ $# -ge 2 ] || { echo "--only needs a case name" >&2; exit 2; }
        ONLY="$ONLY $2"
        shift 2 ;;
    *) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0" >&2; exit 2 ;;
    esac
done
for f in "$BENCH" "$FABRIC" "$EXAMPLE"; do [ -x "$f" ] || { echo "missing $f (run make)"; exit 1; }; done
TMP=$(mktemp -d "${TMPDIR:-/tmp}/chorus-mpirun-test.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT
FAILED=0
RAN=0
SKIP_WHY=""

# What the ranks are given beyond what mpirun sets: nothing, unless --explicit-root.
ROOTARGS=""
if [ "$EXPLICIT" -eq 1 ]; then
    ROOTARGS="-x CHORUS_ROOT=$SUBNET.1:29500 -x CHORUS_SECRET=$(od -An -tx1 -N16 /dev/urandom |
        tr -d ' \n')"
fi

wanted() { [ -z "$ONLY" ] || case " $ONLY " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }

# run NAME [mpirun.sh options] -- command...: the run's output in $TMP/NAME.log, rc in $rc;
# returns 1 when the case could not run.
run() {
    name=$1
    shift
    echo "--- $name"
    sh "$HERE/mpirun.sh" --subnet "$SUBNET" "$@" >"$TMP/$name.log" 2>&1
    rc=$?
    # A case the emulated cluster could not run (77: no namespaces, no tc for --rate, ...)
    # is a PART-SKIP line with its reason, and the caller leaves out its checks; the script
    # skips as a whole only when no case ran.
    if [ "$rc" -eq 77 ]; then
        SKIP_WHY=$(grep -o 'skipped: .*' "$TMP/$name.log" | tail -n 1)
        echo "PART-SKIP $name: ${SKIP_WHY:=skipped: (no reason given)}"
        return 1
    fi
    RAN=$((RAN + 1))
}

# check NAME PATTERN...: rc 0 and every pattern (grep -E) in the log, else the case fails.
check() {
    name=$1
    shift
    bad=""
    [ "$rc" -eq 0 ] || bad="exit status $rc"
    for pat in "$@"; do
        grep -Eq -- "$pat" "$TMP/$name.log" || bad="${bad:+$bad; }no '$pat'"
    done
    if [ -n "$bad" ]; then
        echo "FAIL $name: $bad"
        tail -n 25 "$TMP/$name.log" | sed 's/^/    /'
        FAILED=1
    else
        echo "ok   $name"
    fi
}

if wanted env; then
    # shellcheck disable=SC2086
    run env --hosts 2 --timeout 60 -- mpirun -np 4 $ROOTARGS --tag-output env
fi
if wanted env && [ "$rc" -ne 77 ]; then
    if [ "$EXPLICIT" -eq 0 ] && grep -Eq '^\[[0-9,]+\]<stdout>:(CHORUS|MASTER)_' \
        "$TMP/env.log"; then
        echo "FAIL env: a rank sees $(grep -Eo '<stdout>:(CHORUS|MASTER)_[A-Z_]*' \
            "$TMP/env.log" | head -n 1)"
        FAILED=1
    fi
    check env '^\[[0-9]+,3\]<stdout>:OMPI_COMM_WORLD_RANK=3$' \
        '^\[[0-9]+,3\]<stdout>:OMPI_COMM_WORLD_SIZE=4$'
    echo "    rank 3 of 4 (on host1) sees:"
    keys='OMPI_COMM|OMPI_UNIVERSE|OMPI_MCA_orte_(hnp|local_daemon|num_nodes|ess_num)|PMIX_'
    grep -E "^\\[[0-9]+,3\\]<stdout>:($keys|CHORUS_|MASTER_)" "$TMP/env.log" |
        sed 's/^\[[0-9]*,3\]<stdout>:/      /' | sort
fi

if wanted example; then
    # shellcheck disable=SC2086
    if run example --hosts 4 --slots 2 --timeout 120 -- mpirun -np 8 $ROOTARGS "$EXAMPLE"; then
        check example '^allreduce of 1024 floats over 8 ranks: ok$'
        grep -E '^allreduce of' "$TMP/example.log" | sed 's/^/    /'
    fi
fi

if wanted bench; then
    # shellcheck disable=SC2086
    if run bench --hosts 4 --slots 2 --timeout 300 -- mpirun -np 8 $ROOTARGS "$BENCH" \
        allreduce -b 8 -e 1M -f 4; then
        check bench 'nranks 8 ' '^# hosts 4 ' 'Out of bounds values : 0 OK'
        grep -E '^# (chorus-bench|hosts|Avg bus)' "$TMP/bench.log" | sed 's/^/    /'
    fi
fi

if wanted fabric; then
    # shellcheck disable=SC2086
    if run fabric --hosts 8 --slots 1 --rate 200mbit --timeout 200 -- mpirun -np 8 \
        $ROOTARGS "$FABRIC" --time-budget 20; then
        check fabric '^chorus-fabric: 8 hosts, 8 ranks' '^chorus-fabric: PASS'
        grep -E '^chorus-fabric: ' "$TMP/fabric.log" | sed 's/^/    /'
    fi
fi

[ "$FAILED" -eq 0 ] || { echo "mpirun_test: FAILED"; exit 1; }
[ "$RAN" -gt 0 ] || { echo "${SKIP_WHY:-skipped: no case selected}"; exit 77; }
echo "mpirun_test: all passed"
