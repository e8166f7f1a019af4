#!/bin/sh
# Chorus, Open MPI (tcp BTL) and Gloo (each of its allreduce algorithms) on the emulated
# cluster of tests/cluster/cluster.sh: 1 rank per host, every link capped with tbf. Prints
# per host count the busbw of each library, Chorus's ratios to Open MPI and to Gloo's best
# algorithm, and Chorus's busbw / link rate at the largest size.
#
#   tests/cluster/cluster_compare.sh [--hosts "2 4"] [--rate 200mbit] [--sizes "64K 64M 4"]
#       [--iters 1] [--warmup 1] [--gloo-algos "ring ring_chunked halving_doubling bcube
#       bcube_legacy"] [--libs "chorus ompi gloo"] [--timeout 900] [--logs DIR]
#   (BUILD=dir as make; needs $BUILD/bin/chorus-bench, ompi-bench and gloo-bench:
#    make BUILD=dir all compare-peers)
#
# Each library runs under its own cluster.sh (fresh namespaces, same caps):
# - Chorus: chorus-bench allreduce, as cluster_bench.sh does (CHORUS_* variables pass).
# - Gloo: gloo-bench with GLOO_BENCH_ALGO, its TCP device bound to the host's veth
#   (GLOO_BENCH_IFACE) and its FileStore rendezvous in a directory every namespace sees
#   (network namespaces share the file system).
# - Open MPI: host0 runs mpirun with a hostfile host0..host<N-1>; its rsh launcher is an
#   agent script that starts orted in host<h>'s namespace with `ip netns exec`, under the
#   host's own host name. OOB and the tcp BTL are limited to the cluster's subnet and the
#   PML is ob1, so MPI traffic crosses the capped veths. The other hosts' cluster.sh ranks
#   only keep their namespace alive until mpirun is done.
# A library that cannot run is reported as "skipped: <reason>" and its columns show "-".
# Every run checks its results (-c 1): a wrong value or a failed run shows FAIL.
#
# busbw = size / time * 2 (n-1) / n (nccl-tests), with time the slowest rank's out-of-place
# or in-place time of the row, whichever is less (the same rule for every library; these
# runs are one or two iterations long). TCP/IP headers cap the payload near 0.956 of the link
# rate (see cluster_bench.sh). The acceptance is Chorus >= 1.5x Gloo's best and >= 1.0x
# Open MPI at every size, and Chorus >= 0.90 of the link rate at 64 MiB.
#
# Exit status: 0 when every run completed with correct results (whatever the ratios), 1 when
# one failed, 77 when namespaces are not available here, 2 on a usage error.
set -u
BUILD=${BUILD:-build}
HERE=$(cd "$(dirname "$0")" && pwd)
HOSTS_LIST="2 4"
RATE=200mbit
SIZES="64K 64M 4"
ITERS=1
WARMUP=1
GLOO_ALGOS="ring ring_chunked halving_doubling bcube bcube_legacy"
LIBS="chorus ompi gloo"
TIMEOUT=900
LOGS=""
SUBNET=10.214.0
MPIRUN=${MPIRUN:-mpirun.openmpi}

usage() {
    awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0" >&2
    exit 2
}
while [ $# -gt 0 ]; do
    case "$1" in -h | --help) usage ;; esac
    [ $# -ge 2 ] || usage
    case "$1" in
    --hosts) HOSTS_LIST=$2 ;;
    --rate) RATE=$2 ;;
    --sizes) SIZES=$2 ;;
    --iters) ITERS=$2 ;;
    --warmup) WARMUP=$2 ;;
    --gloo-algos) GLOO_ALGOS=$2 ;;
    --libs) LIBS=$2 ;;
    --timeout) TIMEOUT=$2 ;;
    --logs) LOGS=$2 ;;
    *) echo "cluster_compare: unknown option '$1'" >&2; usage ;;
    esac
    shift 2
done
# shellcheck disable=SC2086
set -- $SIZES
[ $# -eq 3 ] || { echo "cluster_compare: --sizes is \"MIN MAX FACTOR\"" >&2; exit 2; }
MINB=$1 MAXB=$2 FACTOR=$3
RATE_BITS=$(echo "$RATE" | awk '
    /^[0-9.]+bit$/ { print $0 + 0; exit } /^[0-9.]+kbit$/ { print $0 * 1e3; exit }
    /^[0-9.]+mbit$/ { print $0 * 1e6; exit } /^[0-9.]+gbit$/ { print $0 * 1e9; exit }
    { print "" }')
[ -n "$RATE_BITS" ] || { echo "cluster_compare: --rate wants bit, kbit, mbit or gbit" >&2; exit 2; }
for l in $LIBS; do
    case $l in chorus | ompi | gloo) ;; *) echo "cluster_compare: bad --libs '$l'" >&2; exit 2 ;; esac
done
for a in $GLOO_ALGOS; do
    case $a in ring | bcube | ring_chunked | halving_doubling | bcube_legacy) ;;
    *) echo "cluster_compare: bad --gloo-algos '$a'" >&2; exit 2 ;;
    esac
done
if [ "$(id -u)" -ne 0 ]; then
    echo "skipped: not root (network namespaces need CAP_SYS_ADMIN)"
    exit 77
fi
[ -x "$BUILD/bin/chorus-bench" ] || { echo "missing $BUILD/bin/chorus-bench (make BUILD=$BUILD)"; exit 1; }
BUILD=$(cd "$BUILD" && pwd)

ompi_skip="" gloo_skip=""
if ! command -v "$MPIRUN" >/dev/null 2>&1; then
    ompi_skip="$MPIRUN not found (apt-get install openmpi-bin)"
elif [ ! -x "$BUILD/bin/ompi-bench" ]; then
    ompi_skip="$BUILD/bin/ompi-bench not built (make compare-peers)"
fi
[ -x "$BUILD/bin/gloo-bench" ] || gloo_skip="$BUILD/bin/gloo-bench not built (make compare-peers)"
case " $LIBS " in *" ompi "*) ;; *) ompi_skip="not asked for (--libs)" ;; esac
case " $LIBS " in *" gloo "*) ;; *) gloo_skip="not asked for (--libs)" ;; esac

[ -n "$LOGS" ] || LOGS="$BUILD/cluster-compare"
mkdir -p "$LOGS" || exit 1
LOGS=$(cd "$LOGS" && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/cluster-compare.XXXXXX") || exit 1
trap 'rm -rf "$WORK"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
unset CHORUS_TRANSPORT CHORUS_ALGO 2>/dev/null
export CHORUS_TIMEOUT=${CHORUS_TIMEOUT:-300}
BENCH_ARGS="allreduce -b $MINB -e $MAXB -f $FACTOR -n $ITERS -w $WARMUP -c 1"

# The rsh agent for mpirun: "agent HOST COMMAND..." runs COMMAND in HOST's namespace under
# HOST's name. The prefix is read from a file because each run has its own.
AGENT="$WORK/netns-rsh"
cat >"$AGENT" <<EOF
#!/bin/sh
host=\$1
shift
case \$host in host[0-9]*) ;; *) echo "netns-rsh: unknown host \$host" >&2; exit 1 ;; esac
ns=\$(cat "$WORK/prefix")-h\${host#host}
exec ip netns exec "\$ns" unshare --uts sh -c 'hostname "\$1"; shift; exec sh -c "\$*"' sh "\$host" "\$@"
EOF
chmod +x "$AGENT"

# cluster LOG N CMD...: runs CMD on N hosts; the exit status of cluster.sh.
cluster() {
    log=$1 n=$2
    shift 2
    prefix="ccmp$$"
    echo "$prefix" >"$WORK/prefix"
    sh "$HERE/cluster.sh" --hosts "$n" --rate "$RATE" --subnet "$SUBNET" --prefix "$prefix" \
        --timeout "$TIMEOUT" --stats "$log.stats" -- "$@" >"$log" 2>&1
}

# The megabytes host 0 sent through its veth during a run (cluster.sh --stats).
veth_mb() {
    awk '$2 == 0 { printf "%.0f", $3 / 1e6; found = 1 } END { if (!found) printf "-" }' \
        "$1" 2>/dev/null || printf -- "-"
}

# The rank-0 rows of a log as "size time_us wrong" (time: the lesser of out-of-place and
# in-place), or nothing.
rows() {
    sed -n 's/^\[host0 r0\] *//; s/^\[0\] *//; p' "$1" | awk '
        $1 ~ /^[0-9]+$/ && $2 ~ /^[0-9]+$/ && NF >= 13 {
            t = ($10 < $6 ? $10 : $6); w = ($9 == "N/A" ? 0 : $9 + $13); print $1, t, w }'
}

# run_lib NAME N CMD...: one library on N hosts; leaves $WORK/NAME.N with its rows or FAIL.
failed=0
run_lib() {
    name=$1 n=$2
    shift 2
    log="$LOGS/$name-$n.log"
    t0=$(date +%s)
    cluster "$log" "$n" "$@"
    rc=$?
    if [ "$rc" -eq 77 ]; then
        grep 'skipped:' "$log" | tail -n 1
        exit 77
    fi
    rows "$log" >"$WORK/$name.$n"
    if [ "$rc" -ne 0 ] || [ ! -s "$WORK/$name.$n" ]; then
        echo "cluster_compare: $name on $n hosts failed (exit $rc); last lines of $log:" >&2
        tail -n 8 "$log" >&2
        echo FAIL >"$WORK/$name.$n"
        failed=1
    fi
    echo "  ran $name on $n hosts in $(($(date +%s) - t0)) s (log $log)" >&2
}

[ -n "$ompi_skip" ] && echo "Open MPI: skipped: $ompi_skip"
[ -n "$gloo_skip" ] && echo "Gloo: skipped: $gloo_skip"
T_ALL=$(date +%s)
for n in $HOSTS_LIST; do
    run_lib chorus "$n" "$BUILD/bin/chorus-bench" $BENCH_ARGS
    if [ -z "$gloo_skip" ]; then
        for a in $GLOO_ALGOS; do
            store="$WORK/store-$a-$n"
            mkdir -p "$store"
            # shellcheck disable=SC2016
            run_lib "gloo-$a" "$n" env GLOO_BENCH_ALGO="$a" GLOO_BENCH_STORE="$store" sh -c '
                GLOO_BENCH_RANK=$CHORUS_RANK GLOO_BENCH_SIZE=$CHORUS_WORLD_SIZE \
                GLOO_BENCH_IFACE=$CHORUS_SOCKET_IFNAME exec "$@"' sh \
                "$BUILD/bin/gloo-bench" $BENCH_ARGS
        done
    fi
    if [ -z "$ompi_skip" ]; then
        hf="$WORK/hosts.$n"
        : >"$hf"
        h=0
        while [ "$h" -lt "$n" ]; do echo "host$h slots=1" >>"$hf"; h=$((h + 1)); done
        flag="$WORK/mpi-done.$n"
        rm -f "$flag"
        # Host 0 runs mpirun and then tells the other hosts' placeholders to end.
        # shellcheck disable=SC2016
        run_lib ompi "$n" sh -c '
            if [ "$CHORUS_RANK" -ne 0 ]; then
                while [ ! -f "$1" ]; do sleep 0.2; done
                exit 0
            fi
            flag=$1
            shift
            "$@"
            rc=$?
            echo "$rc" >"$flag"
            exit "$rc"' sh "$flag" "$MPIRUN" --allow-run-as-root --hostfile "$hf" -np "$n" \
            --map-by node --bind-to none --mca plm_rsh_agent "$AGENT" \
            --mca pml ob1 --mca btl self,tcp --mca btl_tcp_if_include "$SUBNET.0/24" \
            --mca oob_tcp_if_include "$SUBNET.0/24" "$BUILD/bin/ompi-bench" $BENCH_ARGS
    fi
done

# The table of one host count.
for n in $HOSTS_LIST; do
    : >"$WORK/gloo.$n"
    if [ -z "$gloo_skip" ]; then
        for a in $GLOO_ALGOS; do
            awk -v a="$a" '{ print a, $0 }' "$WORK/gloo-$a.$n"
        done >"$WORK/gloo.$n"
    fi
    [ -f "$WORK/ompi.$n" ] || : >"$WORK/ompi.$n"
    veth="chorus $(veth_mb "$LOGS/chorus-$n.log.stats")"
    [ -z "$ompi_skip" ] && veth="$veth  ompi $(veth_mb "$LOGS/ompi-$n.log.stats")"
    if [ -z "$gloo_skip" ]; then
        for a in $GLOO_ALGOS; do veth="$veth  gloo-$a $(veth_mb "$LOGS/gloo-$a-$n.log.stats")"; done
    fi
    awk -v n="$n" -v bits="$RATE_BITS" -v rate="$RATE" -v veth="$veth" \
        -v cf="$WORK/chorus.$n" -v of="$WORK/ompi.$n" -v gf="$WORK/gloo.$n" '
        function bus(size, t) { return size / (t * 1e-6) * 2 * (n - 1) / n / 1e9 }
        function show(x) { return x == "" ? sprintf("%9s", "-") : sprintf("%9.4f", x) }
        function ratio(a, b) { return (a != "" && b != "" && b > 0) ? sprintf("%11.2f", a / b) \
                                                                     : sprintf("%11s", "-") }
        BEGIN {
            while ((getline line < cf) > 0) {
                split(line, a, " ")
                if (a[1] == "FAIL") { cfail = 1; continue }
                sizes[++ns] = a[1]; c[a[1]] = (a[3] == 0 ? bus(a[1], a[2]) : "FAIL")
            }
            while ((getline line < of) > 0) {
                split(line, a, " ")
                if (a[1] == "FAIL") { ofail = 1; continue }
                o[a[1]] = (a[3] == 0 ? bus(a[1], a[2]) : "")
            }
            while ((getline line < gf) > 0) {
                split(line, a, " ")
                if (a[2] == "FAIL" || a[4] != 0) continue
                b = bus(a[2], a[3])
                if (!(a[2] in g) || b > g[a[2]]) { g[a[2]] = b; ga[a[2]] = a[1] }
                if (!(a[2] in seen)) { seen[a[2]] = 1; if (ns == 0 || cfail) gs[++ngs] = a[2] }
            }
            if (ns == 0) { for (i = 1; i <= ngs; i++) sizes[++ns] = gs[i] }
            printf "\n# allreduce float32, %d hosts x 1 rank, links %s (%.1f MB/s): busbw (GB/s)\n",
                   n, rate, bits / 8e6
            printf "%12s  %9s  %9s  %9s  %11s  %11s  %s\n", "size (B)", "chorus", "ompi",
                   "gloo-best", "chorus/ompi", "chorus/gloo", "gloo-algo"
            for (i = 1; i <= ns; i++) {
                s = sizes[i]; cv = (s in c && c[s] != "FAIL") ? c[s] : ""
                printf "%12s  %9s  %s  %s  %s  %s  %s\n", s,
                       (cfail || c[s] == "FAIL" ? "FAIL" : sprintf("%9.4f", cv)),
                       (ofail ? sprintf("%9s", "FAIL") : show(o[s])), show(g[s]),
                       ratio(cv, o[s]), ratio(cv, g[s]), (s in ga ? ga[s] : "-")
                last = s; lastc = cv
            }
            if (lastc != "")
                printf "# chorus busbw / link rate at %s B: %.3f (target >= 0.90)\n", last,
                       lastc * 8e9 / bits
            printf "# MB host0 sent on its veth during each run: %s\n", veth
        }'
done
echo
echo "# cluster_compare: done in $(($(date +%s) - T_ALL)) s; logs in $LOGS"
exit "$failed"
