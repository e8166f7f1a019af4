#!/bin/sh
# Every GPU check of Chorus, for a machine with a CUDA device, in under 8 minutes: builds
# the library, the CUDA plugin and the GPU tests; prints the device; runs the kernel check
# and benchmark (sum vs copy bandwidth, acceptance 3 of issue 6), the plugin's PCI address
# and dma-buf export (GPUDirect RDMA, issue 7), registered device memory (cuMem windows,
# issue 38), the collective matrix on
# device buffers with the real plugin (2 and 4 ranks on one GPU, CUDA IPC and staging
# paths), the mismatch check, chorus-bench -G next to --backend nccl, and last the host
# unit tests; then a summary with every number the closing note needs. Without a device
# it says `skipped: no CUDA device` and exits 77.
#
#   BUILD=build sh tests/gpu/run_all.sh
#   RUN_ALL_FAKE=1 BUILD=build sh tests/gpu/run_all.sh     (a rehearsal on the fake plugin)
#
# Everything is also written under $OUT when set (the device tool fetches that folder),
# else under ${TMPDIR:-/tmp}/chorus-gpu-<time>: run_all.log (what the terminal shows) and
# one log per step. Each step has its own deadline, and the run as a whole a budget
# (RUN_ALL_BUDGET seconds, default 450): a step that would start past it is skipped, and
# one that starts near it gets only what is left.
set -u
BUILD=${BUILD:-build}
BUDGET=${RUN_ALL_BUDGET:-450}
LOG=${OUT:-${TMPDIR:-/tmp}/chorus-gpu-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$LOG" || exit 2
export CHORUS_SOCKET_IFNAME=${CHORUS_SOCKET_IFNAME:-lo}
export CHORUS_TIMEOUT=${CHORUS_TIMEOUT:-60}
unset CHORUS_CUDA_PLUGIN CHORUS_UNIQUE_ID CHORUS_RANK CHORUS_WORLD_SIZE CHORUS_LOCAL_RANK \
    CHORUS_LOCAL_SIZE CHORUS_TRANSPORT CHORUS_ALGO CHORUS_GPU_PATH 2>/dev/null
# RUN_ALL_FAKE=1 rehearses this script on the fake plugin, where there is no GPU.
if [ -n "${RUN_ALL_FAKE:-}" ]; then
    export CHORUS_CUDA_PLUGIN="$PWD/$BUILD/lib/libchorus-cuda-fake.so"
fi

RUN="$BUILD/bin/chorusrun"
GM="$BUILD/tests/gpu_coll_matrix"
KB="$BUILD/tests/gpu_kernel_bench"
CB="$BUILD/bin/chorus-bench"
T0=$(date +%s)
NSTEP=0
INFO_ONLY=0
PASS=0
FAIL=0
SKIP=0
: >"$LOG/summary.txt"

elapsed() {
    echo $(($(date +%s) - T0))
}

# step NAME TIMEOUT CMD...: runs CMD with a deadline, its output in $LOG/NN-<slug>.log;
# PASS on 0, SKIP on 77, FAIL otherwise (124/137: the deadline), or INFO when INFO_ONLY=1
# (a step that reports and cannot fail the run). Sets STEP_LOG, STEP_RC.
step() {
    name=$1
    limit=$2
    shift 2
    NSTEP=$((NSTEP + 1))
    slug=$(printf '%s' "$name" | tr -c 'A-Za-z0-9=.-' '_' | cut -c1-50)
    STEP_LOG="$LOG/$(printf '%02d' "$NSTEP")-$slug.log"
    left=$((BUDGET - $(elapsed)))
    if [ "$left" -le 5 ]; then
        STEP_RC=-1
        record SKIP "$name" 0 "(over the ${BUDGET}s budget)"
        return
    fi
    [ "$limit" -gt "$left" ] && limit=$left
    echo "---- $name (deadline ${limit}s)"
    t=$(date +%s)
    timeout -k 5 "$limit" "$@" >"$STEP_LOG" 2>&1
    STEP_RC=$?
    t=$(($(date +%s) - t))
    if [ "$STEP_RC" -ne 0 ] && [ "$INFO_ONLY" -eq 1 ]; then
        record INFO "$name" "$t" "(exit $STEP_RC; informational, not counted)"
    else
        case $STEP_RC in
        0) record PASS "$name" "$t" "" ;;
        77) record SKIP "$name" "$t" "$(grep -o 'skipped: .*' "$STEP_LOG" | tail -n 1)" ;;
        124 | 137) record FAIL "$name" "$t" "(deadline of ${limit}s)" ;;
        *) record FAIL "$name" "$t" "(exit $STEP_RC)" ;;
        esac
    fi
    if [ "$STEP_RC" -ne 0 ] && [ "$STEP_RC" -ne 77 ]; then
        echo "     last lines of $STEP_LOG:"
        tail -n 25 "$STEP_LOG" | sed 's/^/     | /'
    fi
}

record() {
    case $1 in
    PASS) PASS=$((PASS + 1)) ;;
    INFO) ;;
    FAIL) FAIL=$((FAIL + 1)) ;;
    SKIP) SKIP=$((SKIP + 1)) ;;
    esac
    line=$(printf '%-4s %-44s %4ss %s' "$1" "$2" "$3" "$4")
    echo "$line"
    echo "$line" >>"$LOG/summary.txt"
}

# The out-of-place busbw of a chorus-bench --csv file, "size busbw" per line.
busbw_of() {
    [ -f "$1" ] || return 0
    awk -F, '!/^#/ && $1 != "collective" && $7 == 0 { print $2, $10 }' "$1"
}

# chorus vs nccl busbw, side by side, from two --csv files.
side_by_side() {
    busbw_of "$1" >"$LOG/.a"
    busbw_of "$2" >"$LOG/.b"
    printf '%12s %16s %16s %10s\n' "size(B)" "chorus busbw" "nccl busbw" "chorus/nccl"
    awk 'FILENAME == ARGV[1] { n[$1] = $2; next }
         { v = ($1 in n) ? n[$1] : ""; r = (v != "" && v > 0) ? sprintf("%.2f", $2 / v) : "-";
           printf "%12s %16.2f %16s %10s\n", $1, $2, v == "" ? "-" : sprintf("%.2f", v), r }' \
        "$LOG/.b" "$LOG/.a"
    rm -f "$LOG/.a" "$LOG/.b"
}

main() {
    echo "chorus GPU checks: $(date -u +%Y-%m-%dT%H:%M:%SZ), BUILD=$BUILD, logs in $LOG"
    echo "host: $(uname -n), $(nproc) cores, $(uname -r)"
    if command -v nvidia-smi >/dev/null 2>&1; then
        timeout 20 nvidia-smi --query-gpu=index,name,memory.total,driver_version,compute_cap \
            --format=csv 2>&1 | sed 's/^/gpu: /'
    else
        echo "gpu: no nvidia-smi"
    fi
    cuda_home=${CUDA_HOME:-/usr/local/cuda}
    [ -x "$cuda_home/bin/nvcc" ] && echo "nvcc: $("$cuda_home/bin/nvcc" --version | tail -n 1)"
    echo "nccl: $(ls "$cuda_home"/lib64/libnccl.so* /usr/lib/x86_64-linux-gnu/libnccl.so* \
        2>/dev/null | tr '\n' ' ')"

    # The library and plugin (make all) and the test programs this script runs, which
    # `all` does not build. With a toolkit whose warnings differ from the one the code was
    # written against, -Werror fails the build: then a second build without it lets the
    # GPU checks still run, and the failed first build stays in the summary.
    targets="all"
    for f in tests/gpu/*.c; do
        b=$(basename "$f" .c)
        targets="$targets $BUILD/tests/gpu_$b"
    done
    step "build (make, -Werror)" 300 make -j"$(nproc)" BUILD="$BUILD" $targets
    if [ "$STEP_RC" -ne 0 ]; then
        step "build again without nvcc -Werror" 300 make -j"$(nproc)" BUILD="$BUILD" \
            NVCCFLAGS="-O3 -std=c++17 -gencode arch=compute_80,code=sm_80 \
-gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90 \
-Xcompiler -fPIC,-Wall,-Wextra,-fvisibility=hidden" $targets
        [ "$STEP_RC" -ne 0 ] && return 1
    fi
    if [ ! -f "$BUILD/lib/libchorus-cuda.so" ]; then
        echo "skipped: no CUDA device (libchorus-cuda.so was not built: no nvcc)"
        return 77
    fi

    # Whether the real plugin finds a device, and what it says about it (a few ms of work).
    step "probe: plugin and device" 60 env CHORUS_DEBUG=info "$KB" --bench-only --bytes 1M \
        --iters 1
    grep -E '^# |cuda|device' "$STEP_LOG" | head -n 8 | sed 's/^/     /'
    if [ "$STEP_RC" -eq 77 ]; then
        grep -o 'skipped: .*' "$STEP_LOG" | tail -n 1
        return 77
    fi
    # A plugin that is there but broken (it will not load, lacks its entry, speaks another
    # ABI, or its start failed) is no "no device": the probe has failed with the loader's
    # reason (above), and every later step would only fail on it again.
    if [ "$STEP_RC" -ne 0 ] && grep -q '^FAIL: broken CUDA plugin' "$STEP_LOG"; then
        echo "the CUDA plugin is broken: the other steps are not run"
        return 1
    fi

    # The plugin's calls for NIC pairing and GPUDirect RDMA: every device's PCI address,
    # and a dma-buf export (skipped where the driver has no dma-buf: reported, not failed).
    step "gpu_plugin_extras --pci" 30 "$BUILD/tests/gpu_plugin_extras" --pci
    grep -E '^device|FAIL' "$STEP_LOG" | head -n 8 | sed 's/^/     /'
    step "gpu_plugin_extras --dmabuf" 30 "$BUILD/tests/gpu_plugin_extras" --dmabuf
    grep -E 'FAIL|skipped' "$STEP_LOG" | head -n 4 | sed 's/^/     /'

    # Kernels: every op x dtype against the CPU, then sum vs copy on 1 GiB buffers.
    step "gpu_kernel_bench (check + 1 GiB bench)" 120 "$KB"
    grep -E '^check:|^#|GB/s|x copy|acceptance|^copy|^sum' "$STEP_LOG" | sed 's/^/     /'
    cp "$STEP_LOG" "$LOG/kernel_bench.txt"

    for n in 2 4; do
        for path in ipc staging; do
            step "gpu_coll_matrix n=$n path=$path" 200 env CHORUS_GPU_PATH=$path \
                "$RUN" -n "$n" --timeout 190 --hang-report -- "$GM" --large 4194307 \
                --large-colls allreduce,allgather,reduce_scatter,broadcast,alltoall
            grep -E 'passed|failed|MISMATCH|error' "$STEP_LOG" | head -n 6 | sed 's/^/     /'
        done
    done
    step "gpu_coll_matrix n=3 --mismatch" 70 env CHORUS_TIMEOUT=10 \
        "$RUN" -n 3 --timeout 60 -- "$GM" --mismatch
    # The CUDA IPC arena on its own: every collective x dtype x op, several chunks, and
    # host/device mismatches, on real IPC handles between processes on one GPU.
    for n in 2 4; do
        step "gpu_ipc_arena n=$n" 90 "$RUN" -n "$n" --timeout 85 -- "$BUILD/tests/gpu_ipc_arena"
        grep -E 'passed|failed|FAIL' "$STEP_LOG" | head -n 4 | sed 's/^/     /'
    done

    # Registered device memory (issue 38): cuMem windows exported as POSIX descriptors and
    # mapped by every peer, then the same on a window whose owner exited.
    step "gpu_dev_win n=2" 60 "$RUN" -n 2 --timeout 55 -- "$BUILD/tests/gpu_dev_win"
    grep -E 'failure|FAIL|skipped' "$STEP_LOG" | head -n 4 | sed 's/^/     /'
    step "gpu_dev_win n=2 --owner-dies" 60 "$RUN" -n 2 --timeout 55 -- \
        "$BUILD/tests/gpu_dev_win" --owner-dies
    grep -E 'failure|FAIL|skipped' "$STEP_LOG" | head -n 4 | sed 's/^/     /'
    # Single copy from the windows against the slots: allgather and allreduce, 2 ranks.
    for c in allgather allreduce; do
        for r in 0 1; do
            step "chorus-bench -G -R $r $c n=2" 60 "$RUN" -n 2 --timeout 55 -- "$CB" "$c" -G \
                -R "$r" -b 64K -e 64M -f 4 --time-per-size 0.2
            awk '/Registered memory|Out of bounds/ || (/^\[0\] +[0-9]/ && NF >= 14)' "$STEP_LOG" |
                sed 's/^\[0\]/    /'
        done
    done

    # chorus-bench -G, Chorus and NCCL on the same sizes, 2 and 4 ranks on the one GPU.
    # NCCL refuses two ranks on one GPU ("Duplicate GPU detected", ncclInvalidUsage), so on
    # a one-GPU machine its rows are missing: its steps only report.
    if "$CB" --help 2>&1 | grep -q -- '--backend'; then
        for n in 2 4; do
            for be in chorus nccl; do
                [ "$be" = nccl ] && INFO_ONLY=1
                step "chorus-bench -G allreduce n=$n --backend $be" 120 "$RUN" -n "$n" \
                    --timeout 115 -- "$CB" allreduce -G -b 1K -e 64M -f 4 --time-per-size 0.2 \
                    --backend "$be" --csv "$LOG/bench-allreduce-n$n-$be.csv"
                INFO_ONLY=0
                # The busbw table's rows (the latency table's rows have fewer columns).
                awk '/Duplicate GPU|skipped:/ || (/^\[0\] +[0-9]/ && NF >= 14)' "$STEP_LOG" |
                    sed 's/^\[0\]/    /'
            done
        done
    else
        echo "note: chorus-bench has no --backend"
    fi

    # Host unit tests, last: written and run without a GPU, here they see one (the real
    # plugin loads), which is what they add. Started only with time for a whole run.
    if [ $((BUDGET - $(elapsed))) -lt 150 ]; then
        record SKIP "unit tests (host)" 0 "(less than 150s of the budget left)"
    elif ls tests/unit/test_*.c >/dev/null 2>&1; then
        units=""
        for f in tests/unit/test_*.c; do
            units="$units $BUILD/tests/$(basename "$f" .c)"
        done
        step "build unit tests" 120 make -j"$(nproc)" BUILD="$BUILD" $units
        [ "$STEP_RC" -eq 0 ] && step "unit tests (host)" 120 env BUILD="$BUILD" \
            sh tests/run_tests.sh unit
    fi

    echo
    echo "================ summary ================"
    cat "$LOG/summary.txt"
    echo "$PASS passed, $FAIL failed, $SKIP skipped, $(elapsed) s in all (budget ${BUDGET}s)"
    echo
    echo "---- kernels (gpu_kernel_bench, $LOG/kernel_bench.txt)"
    grep -E '^# cuda|^# fake|^check:|^copy bandwidth|bandwidth:|^kernel copy|^acceptance' \
        "$LOG/kernel_bench.txt" 2>/dev/null
    for n in 2 4; do
        echo "---- allreduce busbw (GB/s), $n ranks on one GPU, out-of-place, -G"
        side_by_side "$LOG/bench-allreduce-n$n-chorus.csv" "$LOG/bench-allreduce-n$n-nccl.csv"
        if [ ! -s "$LOG/bench-allreduce-n$n-nccl.csv" ]; then
            why=$(grep -h -o -E 'Duplicate GPU.*|skipped: .*|NCCL.*error.*' \
                "$LOG"/*"n=${n}_--backend_nccl.log" 2>/dev/null | head -n 1)
            echo "     (no NCCL rows: ${why:-see the step log})"
        fi
    done
    echo "logs: $LOG"
    [ "$FAIL" -eq 0 ]
}

# The status of main, not of tee: a file carries it out of the pipeline.
{
    main "$@"
    echo $? >"$LOG/.rc"
} 2>&1 | tee "$LOG/run_all.log"
rc=$(cat "$LOG/.rc" 2>/dev/null)
rm -f "$LOG/.rc"
exit "${rc:-1}"
