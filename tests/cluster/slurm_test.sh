#!/bin/sh
# Jobs under a real Slurm on the emulated cluster (issue 21, acceptance 1): tasks started
# by srun and sbatch find each other with no CHORUS_*, MASTER_*, RANK or WORLD_SIZE
# variable set (tests/cluster/slurm.sh: munged, slurmctld, one slurmd per host).
#
#   tests/cluster/slurm_test.sh [--explicit-root] [--only NAME]   (make cluster-test;
#                                                                  BUILD=dir as make)
#
# env          srun -N 2 --ntasks-per-node 2 -l env: no CHORUS_* or MASTER_* variable
#              reaches a task; prints what task 3 sees of Slurm
# env_pmix     the same with srun --mpi=pmix; prints what task 3 sees of Slurm and PMIx
# srun         srun -N 4 --ntasks-per-node 2 chorus-bench allreduce -b 8 -e 1M -f 4
# srun_pmix    the same with srun --mpi=pmix (skipped where Slurm has no mpi/pmix plugin)
# fabric       srun -N 8 chorus-fabric --time-budget 20 on 8 hosts of 1 task, links at
#              200 Mbit/s (unlimited links on 2 cores make it fail on the saturated CPU)
# sbatch       sbatch --wait -N 2 --ntasks-per-node 2 of a script running srun chorus-bench
#              allreduce -b 8 -e 64K -f 4; the job's output file is checked
#
# Each must exit 0 and print the expected rank and host counts: chorus-bench's header
# "nranks 8" and "hosts 4" and "Out of bounds values : 0 OK", chorus-fabric's "8 hosts,
# 8 ranks" and "chorus-fabric: PASS". --explicit-root gives the tasks CHORUS_ROOT (host0,
# where Slurm puts task 0) and CHORUS_SECRET, to check the harness itself without the
# library's own Slurm bootstrap. --only NAME runs one case (repeatable). The logs of
# failed cases are printed (last 25 lines). Not named test_*: the default `make test` does
# not run it (1 to 3 minutes on 2 cores). Exit status: 0 every case passed, 1 one failed,
# 77 skipped (no root, namespaces or Slurm: apt-get install -y slurmd slurmctld
# slurm-client munge).
set -u
BUILD=${BUILD:-build}
HERE=$(dirname "$0")
BENCH="$BUILD/bin/chorus-bench"
FABRIC="$BUILD/bin/chorus-fabric"
SUBNET=10.214.0
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
for f in "$BENCH" "$FABRIC"; do [ -x "$f" ] || { echo "missing $f (run make)"; exit 1; }; done
TMP=$(mktemp -d "${TMPDIR:-/tmp}/chorus-slurm-test.XXXXXX") || exit 1
chmod 755 "$TMP"
trap 'rm -rf "$TMP"' EXIT
FAILED=0
RAN=0
SKIP_WHY=""

# What the tasks are given beyond what Slurm sets: nothing, unless --explicit-root.
ROOTENV=""
[ "$EXPLICIT" -eq 1 ] && ROOTENV="CHORUS_ROOT=$SUBNET.1:29500 CHORUS_SECRET=$(od -An -tx1 -N16 \
    /dev/urandom | tr -d ' \n')"

PMIX=""
for f in /usr/lib/*/slurm*/mpi_pmix*.so /usr/lib/slurm*/mpi_pmix*.so; do
    [ -f "$f" ] && PMIX=--mpi=pmix
done

wanted() { [ -z "$ONLY" ] || case " $ONLY " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }

# run NAME [slurm.sh options] -- command...: the run's output in $TMP/NAME.log, rc in $rc;
# returns 1 when the case could not run.
run() {
    name=$1
    shift
    echo "--- $name"
    sh "$HERE/slurm.sh" --subnet "$SUBNET" "$@" >"$TMP/$name.log" 2>&1
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

BENCH_ARGS="allreduce -b 8 -e 1M -f 4"
BENCH_OK='Out of bounds values : 0 OK'

# env_case NAME SRUN_OPTION: the variables task 3 of 4 sees; none of CHORUS_* or MASTER_*.
env_case() {
    # shellcheck disable=SC2086
    run "$1" --hosts 2 --timeout 60 -- env $ROOTENV srun $2 -N 2 --ntasks-per-node 2 -l env ||
        return
    if [ "$EXPLICIT" -eq 0 ] && grep -Eq '^[0-9]+: (CHORUS|MASTER)_' "$TMP/$1.log"; then
        echo "FAIL $1: a task sees $(grep -Eo '^[0-9]+: (CHORUS|MASTER)_[A-Z_]*' \
            "$TMP/$1.log" | head -n 1)"
        FAILED=1
    fi
    check "$1" '^3: SLURM_PROCID=3$' '^3: SLURM_NTASKS=4$'
    echo "    task 3 of 4 (srun ${2:-without --mpi}) sees:"
    grep -E '^3: (SLURM_|SLURMD_|PMIX_|PMI_|CHORUS_|MASTER_)' "$TMP/$1.log" | sort |
        sed 's/^3: /      /'
}
wanted env && env_case env ""
if wanted env_pmix; then
    if [ -z "$PMIX" ]; then
        echo "--- env_pmix"
        echo "PART-SKIP env_pmix: skipped: no mpi_pmix plugin in Slurm's plugin directory"
    else
        env_case env_pmix --mpi=pmix
    fi
fi

if wanted srun; then
    # shellcheck disable=SC2086
    if run srun --hosts 4 --timeout 300 -- env $ROOTENV srun -N 4 --ntasks-per-node 2 \
        "$BENCH" $BENCH_ARGS; then
        check srun 'nranks 8 ' '^# hosts 4 ' "$BENCH_OK"
        grep -E '^# (chorus-bench|hosts|Avg bus)' "$TMP/srun.log" | sed 's/^/    /'
    fi
fi

if wanted srun_pmix; then
    if [ -z "$PMIX" ]; then
        echo "--- srun_pmix"
        echo "PART-SKIP srun_pmix: skipped: no mpi_pmix plugin in Slurm's plugin directory"
    else
        # shellcheck disable=SC2086
        if run srun_pmix --hosts 4 --timeout 300 -- env $ROOTENV srun --mpi=pmix -N 4 \
            --ntasks-per-node 2 "$BENCH" $BENCH_ARGS; then
            check srun_pmix 'nranks 8 ' '^# hosts 4 ' "$BENCH_OK"
            grep -E '^# (chorus-bench|hosts|Avg bus)' "$TMP/srun_pmix.log" | sed 's/^/    /'
        fi
    fi
fi

if wanted fabric; then
    # shellcheck disable=SC2086
    if run fabric --hosts 8 --rate 200mbit --timeout 200 -- env $ROOTENV srun -N 8 \
        "$FABRIC" --time-budget 20; then
        check fabric '^chorus-fabric: 8 hosts, 8 ranks' '^chorus-fabric: PASS'
        grep -E '^chorus-fabric: ' "$TMP/fabric.log" | sed 's/^/    /'
    fi
fi

if wanted sbatch; then
    # The job's script runs on host0 (its first node) and starts the step with srun; the
    # output file is on the file system every emulated host shares.
    cat >"$TMP/job.sh" <<EOF
#!/bin/sh
#SBATCH -N 2
#SBATCH --ntasks-per-node 2
#SBATCH -o $TMP/job.out
echo "batch script on \$(hostname), job \$SLURM_JOB_ID, nodes \$SLURM_JOB_NODELIST"
srun "$BENCH" allreduce -b 8 -e 64K -f 4
EOF
    # shellcheck disable=SC2086
    if run sbatch --hosts 2 --timeout 300 -- env $ROOTENV sh -c \
        'sbatch --wait "$1"; rc=$?; echo "sbatch: exit status $rc"; cat "$2"; exit $rc' \
        sh "$TMP/job.sh" "$TMP/job.out"; then
        check sbatch '^Submitted batch job [0-9]+' '^batch script on host0' 'nranks 4 ' \
            '^# hosts 2 ' "$BENCH_OK"
        grep -E '^(Submitted|batch script|# chorus-bench|# hosts)' "$TMP/sbatch.log" |
            sed 's/^/    /'
    fi
fi

[ "$FAILED" -eq 0 ] || { echo "slurm_test: FAILED"; exit 1; }
[ "$RAN" -gt 0 ] || { echo "${SKIP_WHY:-skipped: no case selected}"; exit 77; }
echo "slurm_test: all passed"
