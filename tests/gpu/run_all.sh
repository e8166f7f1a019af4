#!/bin/sh
# Every GPU check of Chorus, for a machine with a CUDA device, in under 8 minutes: builds,
# runs the unit tests, the collective matrix on device buffers with the real plugin (2 and 4
# ranks on one host, CUDA IPC and staging paths), the kernel benchmark and a short
# chorus-bench -G sweep, then prints a summary. Without a device it says
# `skipped: no CUDA device` and exits 77.
#
#   BUILD=build sh tests/gpu/run_all.sh
set -u
BUILD=${BUILD:-build}
export CHORUS_SOCKET_IFNAME=${CHORUS_SOCKET_IFNAME:-lo}
export CHORUS_TIMEOUT=${CHORUS_TIMEOUT:-60}
unset CHORUS_CUDA_PLUGIN CHORUS_UNIQUE_ID CHORUS_RANK CHORUS_WORLD_SIZE CHORUS_TRANSPORT \
    CHORUS_ALGO 2>/dev/null

make -j"$(nproc)" BUILD="$BUILD" >"${TMPDIR:-/tmp}/chorus-gpu-make.log" 2>&1 || {
    tail -n 30 "${TMPDIR:-/tmp}/chorus-gpu-make.log"
    echo "FAIL: make"
    exit 1
}
RUN="$BUILD/bin/chorusrun"
GM="$BUILD/tests/gpu_coll_matrix"
if [ ! -f "$BUILD/lib/libchorus-cuda.so" ]; then
    echo "skipped: no CUDA device (libchorus-cuda.so was not built: no nvcc)"
    exit 77
fi
# The matrix itself says whether the plugin found a device.
out=$("$RUN" -n 1 --timeout 60 -- "$GM" --colls allreduce --large 0 2>&1)
rc=$?
if [ "$rc" -eq 77 ]; then
    echo "$out" | grep -o 'skipped: .*' | tail -n 1
    exit 77
fi

PASS=0
FAIL=0
SUMMARY=""
step() {
    name=$1
    shift
    t0=$(date +%s)
    if "$@" >"${TMPDIR:-/tmp}/chorus-gpu-step.log" 2>&1; then
        PASS=$((PASS + 1))
        r=PASS
    else
        FAIL=$((FAIL + 1))
        r=FAIL
        tail -n 20 "${TMPDIR:-/tmp}/chorus-gpu-step.log"
    fi
    tail -n 3 "${TMPDIR:-/tmp}/chorus-gpu-step.log"
    line=$(printf '%-4s %-60s %4ss' "$r" "$name" "$(($(date +%s) - t0))")
    echo "$line"
    SUMMARY="$SUMMARY$line
"
}

step "unit tests" sh tests/run_tests.sh unit
for n in 2 4; do
    for path in ipc staging; do
        step "gpu_coll_matrix n=$n path=$path" env CHORUS_GPU_PATH=$path \
            timeout -k 5 240 "$RUN" -n "$n" --timeout 230 -- "$GM" --large 4194307 \
            --large-colls allreduce,allgather,reduce_scatter,broadcast,alltoall
    done
done
step "gpu_coll_matrix n=3 --mismatch" env CHORUS_TIMEOUT=10 \
    "$RUN" -n 3 --timeout 60 -- "$GM" --mismatch
if [ -x "$BUILD/tests/gpu_kernel_bench" ]; then
    step "gpu_kernel_bench" timeout -k 5 120 "$BUILD/tests/gpu_kernel_bench"
else
    echo "note: no $BUILD/tests/gpu_kernel_bench"
fi
if [ -x "$BUILD/bin/chorus-bench" ] && "$BUILD/bin/chorus-bench" --help 2>&1 | grep -q -- '-G'; then
    step "chorus-bench -G allreduce n=2" timeout -k 5 120 "$RUN" -n 2 --timeout 110 -- \
        "$BUILD/bin/chorus-bench" allreduce -G -b 8 -e 64M -f 8
else
    echo "note: chorus-bench has no -G"
fi

echo "---- summary ----"
printf '%s' "$SUMMARY"
echo "$PASS passed, $FAIL failed"
[ "$FAIL" -eq 0 ]
