#!/bin/sh
# chorus-sim against measurement on the emulated cluster (issue 19, acceptance 1): for each
# host count, ranks per host, algorithm and link case (uniform, or one host at half rate),
# runs chorus-bench allreduce on tests/cluster/cluster.sh, asks chorus-sim for the same
# sizes on the netns preset of that cluster, and writes a markdown table of measured and
# predicted busbw with the error of each point.
#
#   bench/sim/validate.sh [--hosts "2 4 8 16"] [--rph "1 2"] [--algos "ring tree
#       rabenseifner hier"] [--rate 100mbit] [--sizes "64K 64M 4"] [--cases "uniform slow"]
#       [--iters 1] [--burst 80kb] [--latency 100ms] [--out FILE] [--logs DIR]
#
# busbw is nccl-tests' convention over all ranks: size / time * 2 (n-1) / n with n the rank
# count, time the mean of the out-of-place and in-place runs of rank 0. "slow" caps host 1's
# link at half the rate (cluster.sh --rate-of, chorus-sim --override h1.nic0=0.5). The
# preset's figures are not fitted to these runs (docs/fabric.md). tbf's bucket (--burst) is
# cluster.sh's 80 kB: it lets calls of 64-256 KiB through faster than the link's rate, a
# burst the model has no notion of, but smaller buckets starve once the machine is busy (16
# hosts, ring at 16 MiB: 5.8 MB/s with 12 kB, 7.2 with 32 kB, 11.3 with 80 kB; the link
# carries 11.95). tbf's queue (--latency) is cluster.sh's 100 ms: a deep queue delays every
# message that crosses it, which the model does not know, but a shallow one (make
# cluster-bench's 5 ms, kind to the ring) drops the segments of a tree's or halving-doubling's
# converging senders, and TCP's backoff then costs far more (8 hosts, tree, 1 MiB: 2.3 MB/s
# with 5 ms, about 6 with 100 ms). Needs root and network
# namespaces (exit 77 otherwise). Writes FILE (default build/sim-validation.md) and prints it.
set -u
BUILD=${BUILD:-build}
HERE=$(dirname "$0")
ROOT=$(cd "$HERE/../.." && pwd)
HOSTS_LIST="2 4 8 16"
RPH_LIST="1 2"
ALGOS="ring tree rabenseifner hier"
RATE=100mbit
SIZES="64K 64M 4"
CASES="uniform slow"
ITERS=1
BURST=80kb
LATENCY=100ms
OUT=""
LOGS=""

usage() {
    awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0" >&2
    exit 2
}
while [ $# -gt 0 ]; do
    [ $# -ge 2 ] || usage
    case "$1" in
    --hosts) HOSTS_LIST=$2 ;;
    --rph) RPH_LIST=$2 ;;
    --algos) ALGOS=$2 ;;
    --rate) RATE=$2 ;;
    --sizes) SIZES=$2 ;;
    --cases) CASES=$2 ;;
    --iters) ITERS=$2 ;;
    --burst) BURST=$2 ;;
    --latency) LATENCY=$2 ;;
    --out) OUT=$2 ;;
    --logs) LOGS=$2 ;;
    *) usage ;;
    esac
    shift 2
done
if [ "$(id -u)" -ne 0 ]; then
    echo "skipped: not root (network namespaces need CAP_SYS_ADMIN)"
    exit 77
fi
BENCH="$BUILD/bin/chorus-bench" SIM="$BUILD/bin/chorus-sim"
[ -x "$BENCH" ] && [ -x "$SIM" ] || { echo "missing $BENCH or $SIM (run make)"; exit 1; }
MBIT=$(echo "$RATE" | sed -n 's/^\([0-9.]*\)mbit$/\1/p')
[ -n "$MBIT" ] || { echo "--rate is a number of mbit, e.g. 100mbit"; exit 2; }
HALF=$(awk -v m="$MBIT" 'BEGIN { print m / 2 }')
# shellcheck disable=SC2086
set -- $SIZES
MINB=$1 MAXB=$2 FACTOR=$3
[ -n "$OUT" ] || OUT="$BUILD/sim-validation.md"
[ -n "$LOGS" ] || LOGS="$BUILD/sim-validation"
mkdir -p "$LOGS" || exit 1
ROWS="$LOGS/rows"
: >"$ROWS"
unset CHORUS_TRANSPORT CHORUS_ALGO 2>/dev/null
export CHORUS_TIMEOUT=${CHORUS_TIMEOUT:-300}

bytes() { echo "$1" | awk '/K$/ { print $0 * 1024; next } /M$/ { print $0 * 1048576; next } { print $0 + 0 }'; }
MINBYTES=$(bytes "$MINB") MAXBYTES=$(bytes "$MAXB")

for case in $CASES; do
    for rph in $RPH_LIST; do
        for n in $HOSTS_LIST; do
            for algo in $ALGOS; do
                tag="$case-$n-x$rph-$algo"
                log="$LOGS/$tag.log"
                slow=""
                over=""
                if [ "$case" = slow ]; then slow="--rate-of 1=${HALF}mbit"; over="--override h1.nic0=0.5"; fi
                # shellcheck disable=SC2086
                sh "$ROOT/tests/cluster/cluster.sh" --hosts "$n" --ranks-per-host "$rph" \
                    --rate "$RATE" --burst "$BURST" --latency "$LATENCY" $slow --timeout 1200 -- \
                    env CHORUS_ALGO="$algo" "$BENCH" allreduce -b "$MINB" -e "$MAXB" \
                    -f "$FACTOR" -n "$ITERS" -w 1 -c 0 >"$log" 2>&1
                rc=$?
                if [ "$rc" -eq 77 ]; then grep 'skipped:' "$log" | tail -n 1; exit 77; fi
                if [ "$rc" -ne 0 ]; then
                    echo "validate: $tag failed (exit $rc); see $log" >&2
                    continue
                fi
                # shellcheck disable=SC2086
                "$SIM" --preset "netns:hosts=$n,ranks=$rph,mbit=$MBIT" $over -a "$algo" \
                    -b "$MINBYTES" -e "$MAXBYTES" -f "$FACTOR" --json >"$LOGS/$tag.sim.json" 2>&1 ||
                    { echo "validate: chorus-sim failed for $tag" >&2; continue; }
                sed -n 's/^\[host0 r0\] *//p' "$log" |
                    awk -v r="$((n * rph))" -v tag="$case $n $rph $algo" '
                        $1 ~ /^[0-9]+$/ && $2 ~ /^[0-9]+$/ && NF >= 13 {
                            t = ($6 + $10) / 2 * 1e-6
                            print tag, $1, $1 / t * 2 * (r - 1) / r / 1e6 }' >"$LOGS/$tag.meas"
                # The simulated busbw per size (MB/s), from the JSON lines.
                sed -n 's/.*"bytes": \([0-9]*\),.*"busbw_GBps": \([0-9.e+-]*\),.*/\1 \2/p' \
                    "$LOGS/$tag.sim.json" | awk '{ print $1, $2 * 1000 }' >"$LOGS/$tag.pred"
                awk 'NR == FNR { pred[$1] = $2; next }
                     ($5 in pred) { print $0, pred[$5] }' "$LOGS/$tag.pred" "$LOGS/$tag.meas" >>"$ROWS"
                echo "  $tag done" >&2
            done
        done
    done
done

awk -v rate="$RATE" -v burst="$BURST" -v latency="$LATENCY" '
    { err = ($7 - $6) / $6; a = err < 0 ? -err : err
      n++; if (a <= 0.15) in15++; if (a <= 0.25) in25++
      line[n] = sprintf("| %s | %s | %s | %s | %s | %.3f | %.3f | %+.1f%% |", $1, $2, $3, $4, $5,
                        $6, $7, 100 * err) }
    END {
        print "# chorus-sim against the emulated cluster"
        print ""
        printf "Links %s (tbf bucket %s, queue %s); allreduce float32; busbw in MB/s (nccl-tests convention over all ranks).\n", rate, burst, latency
        print "Generated by `bench/sim/validate.sh`; the preset netns is not fitted to these runs."
        print ""
        printf "Points: %d; within 15%%: %d (%.0f%%); within 25%%: %d (%.0f%%).\n", n, in15,
               n ? 100 * in15 / n : 0, in25, n ? 100 * in25 / n : 0
        print ""
        print "| case | hosts | ranks/host | algo | bytes | measured | predicted | error |"
        print "| --- | --- | --- | --- | --- | --- | --- | --- |"
        for (i = 1; i <= n; i++) print line[i]
    }' "$ROWS" >"$OUT"
cat "$OUT"
