#!/bin/sh
# Allreduce on emulated clusters of 2, 4, 8 and 16 hosts (1 rank per host by default, links
# capped with tbf), once per algorithm, and a table of bus bandwidth as a fraction of the
# link rate.
#
#   tests/cluster/cluster_bench.sh [--hosts "2 4 8 16"] [--algos "ring tree hier"]
#       [--ranks-per-host 1] [--placement block|cyclic] [--rate 100mbit]
#       [--sizes "1M 64M 4"] [--iters 1] [--warmup 1] [--check 0|1] [--burst 80kb]
#       [--latency 5ms] [--logs DIR] [--transport tcp|ucx]
#                                               (make cluster-bench; BUILD=dir as make)
#
# Each run is chorus-bench allreduce -b MIN -e MAX -f F -n ITERS -w WARMUP under
# tests/cluster/cluster.sh with CHORUS_ALGO set; extra CHORUS_* variables (CHORUS_TCP_BUF,
# CHORUS_CHUNK_SIZE...) pass through; --transport sets CHORUS_TRANSPORT. UCX_NET_DEVICES
# defaults to each rank's veth, so that UCX never takes a namespace's own loopback for
# another host. From rank 0's rows we take the out-of-place and
# in-place times (us; chorus-bench prints busbw with two decimals, too coarse at these
# rates) and compute busbw = size / mean time * 2 (n-1) / n, the nccl-tests convention,
# then busbw * 8 / rate: 1.00 would be the link's whole bit rate carrying payload. TCP/IP
# and Ethernet headers take 66 of every 1514 bytes on the wire (MTU 1500), so about 0.956
# is the ceiling, less the ACKs that share each host's egress with its data.
# With R > 1 ranks per host (--ranks-per-host) n is the number of hosts, not of ranks: every
# allreduce must move at least 2 (n-1)/n of the vector over each host's link, whatever
# happens inside the hosts, so 1.00 stays the link's rate for every algorithm and placement
# (a flat ring over all ranks, placed by block, crosses each link 2 (nR-1)/(nR) times the
# size and so tops out at (n-1)/n * nR/(nR-1) of it: 0.857 on 4 hosts x 2).
# "scale" is busbw(n hosts) / busbw(first host count) at the largest size; "drops" the tbf
# drops on all links; "cpu" how busy the whole machine's CPUs were during the run (other
# work on the machine included). Ends with the acceptance line: ring allreduce at the
# largest size reaching >= 0.90 of the link rate at every host count (with R > 1: the best
# algorithm of each host count).
# Why 100 Mbit/s: the whole cluster runs on this machine's cores, so the links must be
# slow enough that the CPUs never are the bottleneck. At 16 hosts the ring moves 16 x 12.5
# MB/s through veths, the bridge and tbf; measured on a 2-core VM, the ranks and the kernel
# then keep the CPUs 65-82% busy (65 with CHORUS_YIELD_US=0). How we checked that the CPUs
# are not what limits it: halving the rate to 50 Mbit/s (ring, 64 MiB, 16 hosts) left the
# fraction where it was (0.865 -> 0.874). 200 Mbit/s, the earlier default, served up to 8
# hosts (1.1 cores busy there). Other load on the machine still shows: with a load average of
# 8 from unrelated work, ring at 8 hosts fell from 0.94 to 0.85.
# Why a 5 ms queue (tbf latency; cluster.sh's default is 100 ms): a deep queue delays every
# chunk of a ring by up to its depth at each hop, and at 16 hosts the pipeline never hides
# it (ring, 64 MiB: 0.84-0.86 with 100 ms, 0.90 with 20 ms, 0.92 with 5 ms, though tbf then
# drops packets and TCP resends them). Switch ports hold a few milliseconds, not 100. The
# price: where senders converge on one link (tree, halving-doubling) a shallow queue drops
# their segments and TCP backs off (8 hosts, tree, 1 MiB: 2.3 MB/s with 5 ms, about 6 with
# 100 ms); --latency 100ms measures those as before.
# Exit status: 0 when every run completed (whether or not the target was met), 77 when
# namespaces are unavailable, 1 when a run failed; --strict also fails on a missed target.
set -u
BUILD=${BUILD:-build}
HERE=$(dirname "$0")
BENCH="$BUILD/bin/chorus-bench"
HOSTS_LIST="2 4 8 16"
ALGOS="ring tree hier"
RPH=1
PLACEMENT=block
RATE=100mbit
SIZES="1M 64M 4"
ITERS=1
WARMUP=1
CHECK=0
BURST=""
LATENCY=5ms
LOGS=""
TRANSPORT=""
STRICT=0

usage() {
    awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0" >&2
    exit 2
}
while [ $# -gt 0 ]; do
    case "$1" in
    --strict) STRICT=1; shift; continue ;;
    -h | --help) usage ;;
    esac
    [ $# -ge 2 ] || usage
    case "$1" in
    --hosts) HOSTS_LIST=$2 ;;
    --algos) ALGOS=$2 ;;
    --ranks-per-host) RPH=$2 ;;
    --placement) PLACEMENT=$2 ;;
    --rate) RATE=$2 ;;
    --sizes) SIZES=$2 ;;
    --iters) ITERS=$2 ;;
    --warmup) WARMUP=$2 ;;
    --check) CHECK=$2 ;;
    --burst) BURST=$2 ;;
    --latency) LATENCY=$2 ;;
    --logs) LOGS=$2 ;;
    --transport) TRANSPORT=$2 ;;
    *) echo "cluster_bench: unknown option '$1'" >&2; usage ;;
    esac
    shift 2
done
if [ "$(id -u)" -ne 0 ]; then
    echo "skipped: not root (network namespaces need CAP_SYS_ADMIN)"
    exit 77
fi
[ -x "$BENCH" ] || { echo "missing $BENCH (run make BUILD=$BUILD)"; exit 1; }
# shellcheck disable=SC2086
set -- $SIZES
[ $# -eq 3 ] || { echo "--sizes is \"MIN MAX FACTOR\""; exit 2; }
MINB=$1 MAXB=$2 FACTOR=$3
RATE_BITS=$(echo "$RATE" | awk '
    /^[0-9.]+bit$/ { print $0 + 0; exit } /^[0-9.]+kbit$/ { print $0 * 1e3; exit }
    /^[0-9.]+mbit$/ { print $0 * 1e6; exit } /^[0-9.]+gbit$/ { print $0 * 1e9; exit }
    { print "" }')
[ -n "$RATE_BITS" ] || { echo "--rate must be a number with bit, kbit, mbit or gbit"; exit 2; }
[ -n "$LOGS" ] || LOGS="$BUILD/cluster-bench"
mkdir -p "$LOGS" || exit 1
unset CHORUS_TRANSPORT CHORUS_ALGO 2>/dev/null
export CHORUS_TIMEOUT=${CHORUS_TIMEOUT:-120}

cpu_ticks() { awk '/^cpu / { print $2 + $3 + $4 + $5 + $6 + $7 + $8, $5 + $6 }' /proc/stat; }

RESULTS="$LOGS/results"
: >"$RESULTS"
T_ALL=$(date +%s)
for algo in $ALGOS; do
    for n in $HOSTS_LIST; do
        tag="$algo-$n"
        [ "$RPH" -gt 1 ] && tag="$algo-${n}x$RPH"
        log="$LOGS/$tag.log"
        set -- $(cpu_ticks)
        c0_total=$1 c0_idle=$2
        t0=$(date +%s)
        sh "$HERE/cluster.sh" --hosts "$n" --ranks-per-host "$RPH" --placement "$PLACEMENT" \
            --rate "$RATE" ${BURST:+--burst "$BURST"} ${LATENCY:+--latency "$LATENCY"} \
            --timeout 600 --stats "$LOGS/$tag.stats" -- \
            sh -c 'export UCX_NET_DEVICES="${UCX_NET_DEVICES:-$CHORUS_SOCKET_IFNAME}"
                   exec "$@"' sh \
            env CHORUS_ALGO="$algo" ${TRANSPORT:+CHORUS_TRANSPORT="$TRANSPORT"} "$BENCH" allreduce -b "$MINB" -e "$MAXB" -f "$FACTOR" \
            -n "$ITERS" -w "$WARMUP" -c "$CHECK" >"$log" 2>&1
        rc=$?
        secs=$(($(date +%s) - t0))
        set -- $(cpu_ticks)
        cpu=$(awk -v t="$(($1 - c0_total))" -v i="$(($2 - c0_idle))" \
            'BEGIN { printf "%.0f", (t > 0 ? 100 * (t - i) / t : 0) }')
        if [ "$rc" -eq 77 ]; then grep 'skipped:' "$log" | tail -n 1; exit 77; fi
        if [ "$rc" -ne 0 ]; then
            echo "cluster_bench: $algo on $n hosts failed (exit $rc); last lines of $log:"
            tail -n 20 "$log"
            exit 1
        fi
        drops=$(awk '{ s += $7 } END { print s + 0 }' "$LOGS/$tag.stats")
        # Rank 0's data rows: size count type redop root time algbw busbw #wrong, twice.
        sed -n 's/^\[host0 r0\] *//p' "$log" | awk -v algo="$algo" -v n="$n" \
            -v rate="$RATE_BITS" -v drops="$drops" -v cpu="$cpu" -v secs="$secs" '
            $1 ~ /^[0-9]+$/ && $2 ~ /^[0-9]+$/ && NF >= 13 {
                t = ($6 + $10) / 2 * 1e-6
                bus = $1 / t * 2 * (n - 1) / n
                wrong = ($9 == "N/A" ? 0 : $9 + $13)
                print algo, n, $1, bus, bus * 8 / rate, $6, $10, wrong, drops, cpu, secs }
        ' >>"$RESULTS"
        echo "  ran $algo on $n hosts in $secs s (log $log)" >&2
    done
done

awk -v rate="$RATE" -v transport="${TRANSPORT:-auto}" -v bits="$RATE_BITS" -v first="${HOSTS_LIST%% *}" -v maxb="$MAXB" \
    -v rph="$RPH" -v placement="$PLACEMENT" '
    function human(b) {
        if (b >= 1048576 && b % 1048576 == 0) return (b / 1048576) "M"
        if (b >= 1024 && b % 1024 == 0) return (b / 1024) "K"
        return b
    }
    {
        key = $1 " " $2
        if (!(key in seen)) { seen[key] = 1; keys[++nk] = key; drops[key] = $9; cpu[key] = $10
                              secs[key] = $11 }
        if (!($3 in isz)) { isz[$3] = 1; sizes[++ns] = $3 }
        frac[key, $3] = $5; bus[key, $3] = $4; wrong[key] += $8
        if ($3 > big) big = $3
    }
    END {
        if (rph == 1) printf "\nallreduce, 1 rank per host"
        else printf "\nallreduce, %d ranks per host (%s)", rph, placement
        printf ", links %s (%.1f MB/s) each way, transport %s; busbw / link rate\n", rate,
            bits / 8e6, transport
        printf "%-5s %5s", "algo", "hosts"
        for (s = 1; s <= ns; s++) printf " %7s", human(sizes[s])
        printf " %9s %6s %5s %4s %5s\n", "MB/s@max", "scale", "drops", "cpu%", "secs"
        for (k = 1; k <= nk; k++) {
            split(keys[k], a, " ")
            printf "%-5s %5s", a[1], a[2]
            for (s = 1; s <= ns; s++) printf " %7.3f", frac[keys[k], sizes[s]]
            base = bus[a[1] " " first, big]
            printf " %9.2f %6.3f %5d %4d %5d%s\n", bus[keys[k], big] / 1e6,
                   (base > 0 ? bus[keys[k], big] / base : 0), drops[keys[k]], cpu[keys[k]],
                   secs[keys[k]], (wrong[keys[k]] ? "  WRONG RESULTS" : "")
            if (a[1] == "ring" && rph == 1) {
                nring++
                if (frac[keys[k], big] < 0.90) { miss = miss " " a[2] " hosts (" \
                    sprintf("%.3f", frac[keys[k], big]) ")" }
            }
            if (!(a[2] in best) || frac[keys[k], big] > best[a[2]]) best[a[2]] = frac[keys[k], big]
        }
        if (rph > 1)
            for (k = 1; k <= nk; k++) {
                split(keys[k], a, " ")
                if (a[2] in done) continue
                done[a[2]] = 1
                nring++
                if (best[a[2]] < 0.90)
                    miss = miss " " a[2] " hosts (" sprintf("%.3f", best[a[2]]) ")"
            }
        if (nring > 0)
            printf "\ntarget (%s allreduce at %s >= 0.90 of the link rate): %s\n",
                   (rph == 1 ? "ring" : "the best"), human(big),
                   (miss == "" ? "met at every host count" : "MISSED at" miss)
        exit (miss != "")
    }' "$RESULTS"
met=$?
echo "total $(($(date +%s) - T_ALL)) s; logs and results in $LOGS"
[ "$STRICT" -eq 1 ] && [ "$met" -ne 0 ] && exit 1
exit 0
