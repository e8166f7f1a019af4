#!/bin/sh
# Three ranks started the way `srun -n 3` starts them when Slurm has no PMIx plugin (issue
# 21): only Slurm's variables (SLURM_PROCID, SLURM_STEP_NUM_TASKS, SLURM_STEP_NODELIST,
# SLURM_JOB_ID, SLURM_STEP_ID, SLURM_NODEID, SLURM_LOCALID), no CHORUS_* and no MASTER_*.
# Every rank must derive the same root (the step's first host, here localhost, and a port
# from the job and step ids), rank 0 must serve it, and the secret comes from the default
# file under a fresh HOME, which the first rank to need it creates. Runs tests/mp/env_init.c
# (exact results, 2 rounds) and examples/allreduce, then checks that a step whose task 0
# runs on another node than the first fails at once with a message that says so.
# A real Slurm over emulated hosts is tests/cluster/slurm_test.sh (make cluster-test).
set -u
BUILD=${BUILD:-build}
PROG="$BUILD/tests/mp_env_init"
EXAMPLE="$BUILD/examples/allreduce"
for f in "$PROG" "$EXAMPLE"; do [ -x "$f" ] || { echo "missing $f (run make)"; exit 1; }; done
unset CHORUS_UNIQUE_ID CHORUS_RANK CHORUS_WORLD_SIZE CHORUS_LOCAL_RANK CHORUS_LOCAL_SIZE \
    CHORUS_ROOT CHORUS_SECRET CHORUS_SECRET_FILE CHORUS_LAUNCHER RANK WORLD_SIZE LOCAL_RANK \
    MASTER_ADDR MASTER_PORT OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_SIZE PMI_RANK PMI_SIZE \
    PMIX_NAMESPACE PMIX_RANK SLURM_NTASKS SLURM_JOB_NODELIST 2>/dev/null
TMP=$(mktemp -d "${TMPDIR:-/tmp}/chorus-slurm-env.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT
trap 'exit 1' INT TERM HUP
FAILED=0
fail() { echo "FAIL: $*"; FAILED=1; }
N=3
# A job id of our own: the port it gives is unlikely to be taken by another test.
JOB=$(( $(od -An -tu4 -N4 /dev/urandom | tr -d ' ') % 900000 + 1000 ))
STEP=0

# run_step NAME NODEID_OF_RANK0 PROG ARGS...: N tasks as srun would start them on one node.
run_step() {
    name=$1 node0=$2
    shift 2
    pids=""
    r=0
    while [ $r -lt $N ]; do
        node=0
        [ $r -eq 0 ] && node=$node0
        HOME="$TMP/home" SLURM_PROCID=$r SLURM_STEP_NUM_TASKS=$N SLURM_LOCALID=$r \
            SLURM_STEP_NODELIST=localhost SLURM_JOB_ID=$JOB SLURM_STEP_ID=$STEP \
            SLURM_NODEID=$node CHORUS_TIMEOUT=${CHORUS_TIMEOUT:-20} \
            timeout -k 5 60 "$@" >"$TMP/$name.$r" 2>&1 &
        pids="$pids $!"
        r=$((r + 1))
    done
    rc=0
    for p in $pids; do wait "$p" || rc=1; done
    cat "$TMP/$name".*
    STEP=$((STEP + 1))
    return $rc
}

mkdir -p "$TMP/home"
run_step env_init 0 "$PROG" --rounds 2 || fail "env_init under Slurm's variables failed"
n=$(cat "$TMP"/env_init.* | grep -c 'all exact')
[ "$n" -eq $N ] || fail "expected $N ranks reporting exact results, got $n"
[ -f "$TMP/home/.chorus/secret" ] || fail "the secret file was not created"

run_step example 0 "$EXAMPLE" || fail "examples/allreduce under Slurm's variables failed"
grep -q "allreduce of 1024 floats over $N ranks: ok" "$TMP"/example.* ||
    fail "examples/allreduce did not report ok"

# Task 0 on node 1: rank 0 refuses at once (the others then time out: give them 3 s).
CHORUS_TIMEOUT=3 run_step misplaced 1 "$EXAMPLE" && fail "task 0 off the first host was accepted"
grep -q 'task 0 runs on node 1 of the step, not on its first host localhost' "$TMP/misplaced.0" ||
    fail "task 0 off the first host: no message naming it"
[ $FAILED -eq 0 ] || exit 1
echo "Slurm variables without PMIx: $N ranks found the root with no variable of ours"
