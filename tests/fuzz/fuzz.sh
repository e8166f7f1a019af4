#!/bin/sh
# Runs the libFuzzer targets built by `make fuzz` (see tests/README.md).
#   fuzz.sh --check            exit 0 if $FUZZ_CC can build a libFuzzer target, else print
#                              "skipped: <reason>" and exit 77 (clang or its libFuzzer
#                              runtime is not installed)
#   fuzz.sh NAME...            run $BUILD/fuzz/fuzz_NAME for $FUZZ_SECONDS each on
#                              tests/fuzz/corpus/NAME (read only; new inputs go to
#                              $BUILD/fuzz/corpus/NAME); non-zero exit if any target crashed
# The socket-level target (auth_sock) is slow by nature and gets a third of the time.
set -u
BUILD=${BUILD:-build}
FUZZ_CC=${FUZZ_CC:-clang}
SECS=${FUZZ_SECONDS:-60}

if [ "${1:-}" = "--check" ]; then
    if ! command -v "$FUZZ_CC" >/dev/null 2>&1; then
        echo "fuzz: skipped: $FUZZ_CC not found (apt-get install clang libclang-rt-14-dev)"
        exit 77
    fi
    dir=$(mktemp -d) || exit 1
    printf '%s\n' 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n);' \
        'int LLVMFuzzerTestOneInput(const char *d, unsigned long n)' \
        '{ return (int)(n & 0) + (d == 0); }' >"$dir/t.c"
    if ! "$FUZZ_CC" -fsanitize=fuzzer,address,undefined -o "$dir/t" "$dir/t.c" >"$dir/log" 2>&1; then
        # Without its libFuzzer runtime the compiler cannot do it: that is a package not
        # installed. With the runtime there, the compiler is broken: that fails.
        rt=$("$FUZZ_CC" -print-runtime-dir 2>/dev/null)
        if ls "$rt"/libclang_rt.fuzzer*.a >/dev/null 2>&1; then
            echo "fuzz: FAIL: $FUZZ_CC has its libFuzzer runtime ($rt) but cannot link" \
                "-fsanitize=fuzzer:"
            tail -n 20 "$dir/log"
            rm -rf "$dir"
            exit 1
        fi
        rm -rf "$dir"
        echo "fuzz: skipped: $FUZZ_CC cannot link -fsanitize=fuzzer, no libFuzzer runtime" \
            "(apt-get install libclang-rt-14-dev)"
        exit 77
    fi
    rm -rf "$dir"
    exit 0
fi

[ $# -gt 0 ] || { echo "usage: fuzz.sh --check | fuzz.sh NAME..." >&2; exit 2; }
failed=0
for name in "$@"; do
    bin=$BUILD/fuzz/fuzz_$name
    work=$BUILD/fuzz/corpus/$name
    log=$BUILD/fuzz/$name.log
    secs=$SECS
    [ "$name" = auth_sock ] && secs=$(( (SECS + 2) / 3 ))
    mkdir -p "$work" "$BUILD/fuzz/artifacts" tests/fuzz/corpus/"$name"
    # -timeout: one input may take at most 10 s (the socket target's own bound is 2 s);
    # -malloc_limit_mb: no parser may ask for more than 64 MiB at once.
    "$bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=64 \
        -print_final_stats=1 -artifact_prefix="$BUILD/fuzz/artifacts/$name-" \
        "$work" tests/fuzz/corpus/"$name" >"$log" 2>&1
    rc=$?
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
    cov=$(grep -Eo 'cov: [0-9]+ ft: [0-9]+' "$log" | tail -n 1)
    if [ "$rc" -eq 0 ]; then
        echo "PASS fuzz_$name: ${secs} s, ${runs:-?} runs (${rate:-?}/s), ${cov:-no coverage line}"
    else
        failed=1
        echo "FAIL fuzz_$name (exit $rc): log $log, crashing input in $BUILD/fuzz/artifacts/"
        grep -E 'ERROR|invariant|SUMMARY|#0 |#1 |#2 |#3 ' "$log" | head -n 20
    fi
done
exit $failed
