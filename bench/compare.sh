#!/bin/sh
# Runs the same collectives and sizes through Chorus (chorus-bench), Open MPI (ompi-bench,
# bench/mpi) and Gloo (gloo-bench, bench/gloo) on local ranks, and prints one table per
# collective and rank count with each library's time per call and bus bandwidth and the
# ratios between Chorus and each peer.
#
#   make compare-peers            # builds ompi-bench and gloo-bench where possible
#   sh bench/compare.sh           # or: make bench-compare
#   sh bench/compare.sh -n "2 4" -b 8 -e 16M -f 4 -c allreduce -r 3 -o /tmp/cmp
#   sh bench/compare.sh -n "2 4" -b 8 -e 1M -f 8 -c all
#   sh bench/compare.sh -t tcp -n "2 4 8" -b 64K -e 256M -c allreduce -r 2
#
# -c lists the collectives: allreduce allgather reduce_scatter broadcast reduce alltoall
# barrier gather scatter allgatherv reduce_scatterv alltoallv, or all of them (all);
# float32, sum, root 0; the v-forms with equal blocks (count per rank, as their regular
# counterparts). The peers print chorus-bench's rows with its size and count conventions,
# buffer contents and checks (bench/mpi/peer.h). gloo-bench times gather, scatter,
# allgatherv and alltoallv with Gloo's own calls and skips reduce_scatterv (its columns show
# "-").
# -t picks the transport. shm (the default): Chorus as it chooses for local ranks (its shm
# transport), Open MPI's vader BTL, Gloo over loopback tcp (Gloo has nothing else). tcp:
# Chorus with CHORUS_TRANSPORT=tcp, Open MPI with the ob1 PML and the tcp BTL on lo only
# (btl_tcp_if_include lo), Gloo as always; a line under each table says how many bytes lo
# carried during each library's runs, which shows that all three really used loopback tcp.
# With -t tcp each table also has "tcp-ceil", the busbw of tcp-ceiling (bench/ceiling): the
# same ranks moving a ring allreduce's bytes over loopback tcp with plain sockets, no library
# and no reduction, so it bounds every library's ring busbw over loopback tcp on this
# machine; "chorus/ceil" is Chorus's busbw over it (1.00 would be the kernel's limit).
# -R puts Chorus's buffers in registered memory (chorus-bench -R 1, issue 38), as
# nccl-tests' -R; the peers' buffers stay plain malloc (Open MPI's vader copies them once
# with cross memory attach or its own single-copy mechanism where it has one).
# -g lists Gloo's allreduce algorithms to run (GLOO_BENCH_ALGO of gloo-bench: ring, bcube,
# ring_chunked, halving_doubling, bcube_legacy); default ring for shm, all five for tcp.
# With more than one, the Gloo columns of allreduce are each size's fastest algorithm, named
# in a last column, and Chorus's ratios are to that best. The other collectives have one
# Gloo implementation each.
#
# Every table has, for each library, the slowest rank's out-of-place time per call (us)
# and the busbw computed here from it with the nccl-tests bytes and factors (allreduce
# 2(n-1)/n; broadcast, reduce 1; every other collective (n-1)/n; the bytes are
# the row's size column, which is count * 4 times n for the per-rank counts), so that
# small sizes keep their digits. Ratios: peer time / Chorus time, and Chorus busbw / peer
# busbw; above 1, Chorus is faster. The acceptance compares time per call up to 32 KiB and
# busbw from 64 KiB, so under each table "# worst ratio up to 32 KiB (time)" and "# worst
# ratio from 64 KiB (busbw)" give the lowest ratio over those sizes and where it was. A
# barrier has no size: its table is one row of time per call. Sizes whose split moves no
# data (every collective with per-rank blocks, below 4n bytes) show n/a.
#
# A peer that is not installed or not built is reported as "skipped: <reason>" and its
# columns show "-"; so is a collective that a peer program skips (exit status 77). Sizes run
# in bands with fewer iterations for the large ones (see band_iters) to keep the whole run
# to a few minutes on a small machine. Every result is checked (-c 1): a wrong value or a
# failed run prints FAIL in its column, and the exit status is then 1. On a shared machine,
# -r R runs every band R times and keeps each size's best time, so that a rank preempted by
# someone else's process does not decide a row.
#
# Environment: BUILD (default build) holds bin/chorusrun, bin/chorus-bench, bin/ompi-bench,
# bin/gloo-bench and bin/tcp-ceiling; MPIRUN (default mpirun.openmpi); MPIRUN_ARGS (default
# below); COMPARE_TIMEOUT, seconds one run may take (default 300; a run past it is stopped,
# shown as FAIL and named on stderr as timed out).
set -u

BUILD=${BUILD:-build}
MPIRUN=${MPIRUN:-mpirun.openmpi}
# Shared memory (vader) only, no binding: 8 ranks share 2 cores here, and Chorus and Gloo
# do not bind either. For -t tcp: the tcp BTL on loopback only. Open MPI excludes 127.0.0.0/8
# by default, so without the include it would pick another interface (whose traffic the
# kernel still loops back, but through the address of a real NIC); ob1 is the PML that
# drives BTLs (UCX, when it finds a device, would bypass them).
MPIRUN_ARGS_SHM="--allow-run-as-root --oversubscribe --bind-to none --mca btl self,vader"
MPIRUN_ARGS_TCP="--allow-run-as-root --oversubscribe --bind-to none --mca pml ob1"
MPIRUN_ARGS_TCP="$MPIRUN_ARGS_TCP --mca btl self,tcp --mca btl_tcp_if_include lo"
TIMEOUT=${COMPARE_TIMEOUT:-300}
here=$(cd "$(dirname "$0")" && pwd)

ranks="2 4 8"
min=8
max=64M
factor=4
colls="allreduce allgather"
repeat=1
outdir=
transport=shm
registered=0
gloo_algos=""

usage() {
    cat >&2 <<EOF
usage: $0 [-t shm|tcp] [-n "2 4 8"] [-b 8] [-e 64M] [-f 4] [-c "allreduce allgather"]
          [-g "gloo algorithms"] [-r 1] [-o DIR] [-R]
  -t  transport (shm: Chorus shm, Open MPI vader; tcp: both on loopback tcp)
  -R  Chorus's buffers in registered memory (chorus-bench -R 1)
  -n  rank counts          -b/-e  smallest/largest size (K M G)   -f  size factor
  -c  collectives: allreduce allgather reduce_scatter broadcast reduce alltoall barrier
      gather scatter allgatherv reduce_scatterv alltoallv, or all
  -r  runs of each band; the best time of each size is kept
  -g  Gloo allreduce algorithms: ring bcube ring_chunked halving_doubling bcube_legacy
      (default: ring for shm, all of them for tcp; the best of each size is shown)
  -o  keep every raw table in DIR (default: a temp dir, removed unless a run failed)
EOF
    exit 2
}

while getopts t:n:b:e:f:c:g:r:o:Rh opt; do
    case $opt in
    t) transport=$OPTARG ;;
    R) registered=1 ;;
    g) gloo_algos=$OPTARG ;;
    n) ranks=$OPTARG ;;
    b) min=$OPTARG ;;
    e) max=$OPTARG ;;
    f) factor=$OPTARG ;;
    c) colls=$OPTARG ;;
    r) repeat=$OPTARG ;;
    o) outdir=$OPTARG ;;
    *) usage ;;
    esac
done

to_bytes() {
    case $1 in
    *[kK]) echo $((${1%?} * 1024)) ;;
    *[mM]) echo $((${1%?} * 1048576)) ;;
    *[gG]) echo $((${1%?} * 1073741824)) ;;
    *) echo $(($1)) ;;
    esac
}
if ! min=$(to_bytes "$min") || ! max=$(to_bytes "$max"); then usage; fi
if ! [ "$factor" -ge 2 ] 2>/dev/null || ! [ "$repeat" -ge 1 ] 2>/dev/null; then usage; fi
if ! [ "$min" -ge 1 ] || ! [ "$min" -le "$max" ]; then usage; fi
all_colls="allreduce allgather reduce_scatter broadcast reduce alltoall barrier"
all_colls="$all_colls gather scatter allgatherv reduce_scatterv alltoallv"
for c in $colls; do
    case $c in
    all) colls=$all_colls ;;
    allreduce | allgather | reduce_scatter | broadcast | reduce | alltoall | barrier) ;;
    gather | scatter | allgatherv | reduce_scatterv | alltoallv) ;;
    *) usage ;;
    esac
done
[ -n "$colls" ] || usage
case $transport in
shm) MPIRUN_ARGS=${MPIRUN_ARGS:-$MPIRUN_ARGS_SHM}; : "${gloo_algos:=ring}" ;;
tcp)
    MPIRUN_ARGS=${MPIRUN_ARGS:-$MPIRUN_ARGS_TCP}
    : "${gloo_algos:=ring ring_chunked halving_doubling bcube bcube_legacy}"
    ;;
*) usage ;;
esac
for a in $gloo_algos; do
    case $a in ring | bcube | ring_chunked | halving_doubling | bcube_legacy) ;; *) usage ;; esac
done
# shellcheck disable=SC2086
set -- $gloo_algos
[ $# -ge 1 ] || usage
ngloo=$#
lo_stats=/sys/class/net/lo/statistics/tx_bytes

# Iterations for the sizes of a band: "band_iters SIZE" prints "ITERS WARMUP".
# Small calls take 0.1 to 50 us here, where one preemption costs milliseconds and the first
# thousand calls still find cold caches and lazily bound symbols: as OSU's micro-benchmarks
# do, small sizes get thousands of iterations (5000 up to 4 KiB, 2000 up to 32 KiB: at most
# a few tenths of a second a size; Gloo, 100 times slower, at most 200: see run), the large
# ones fewer (50 up to 1 MiB, then 10 and 3).
band_iters() {
    if [ "$1" -le 4096 ]; then
        echo "5000 500"
    elif [ "$1" -le 32768 ]; then
        echo "2000 200"
    elif [ "$1" -le 1048576 ]; then
        echo "50 5"
    elif [ "$1" -le 4194304 ]; then
        echo "10 2"
    else
        echo "3 1"
    fi
}

# The sizes from min to max, each with its band's iteration counts.
sizes=""
s=$min
while [ "$s" -le "$max" ]; do
    sizes="$sizes $s"
    s=$((s * factor))
done

# Which libraries can run, and why not.
if [ ! -x "$BUILD/bin/chorus-bench" ] || [ ! -x "$BUILD/bin/chorusrun" ]; then
    echo "compare: $BUILD/bin/chorus-bench or chorusrun missing: run make first" >&2
    exit 2
fi
ompi_skip=""
if ! command -v "$MPIRUN" >/dev/null 2>&1; then
    ompi_skip="$MPIRUN not found (apt-get install openmpi-bin libopenmpi-dev)"
elif [ ! -x "$BUILD/bin/ompi-bench" ]; then
    if command -v mpicc.openmpi >/dev/null 2>&1; then
        ompi_skip="$BUILD/bin/ompi-bench not built (make compare-peers)"
    else
        ompi_skip="mpicc.openmpi not found (apt-get install libopenmpi-dev)"
    fi
fi
gloo_skip=""
if [ ! -x "$BUILD/bin/gloo-bench" ]; then
    if [ ! -f /usr/include/gloo/allreduce.h ]; then
        gloo_skip="/usr/include/gloo not found (apt-get install libgloo-dev)"
    elif ! command -v "${CXX:-g++}" >/dev/null 2>&1; then
        gloo_skip="no C++ compiler ${CXX:-g++} (apt-get install g++)"
    else
        gloo_skip="$BUILD/bin/gloo-bench not built (make compare-peers)"
    fi
fi
ceil_skip=""
if [ "$transport" = tcp ] && [ ! -x "$BUILD/bin/tcp-ceiling" ]; then
    ceil_skip="$BUILD/bin/tcp-ceiling not built (make)"
fi
[ -n "$ompi_skip" ] && echo "Open MPI: skipped: $ompi_skip"
[ -n "$gloo_skip" ] && echo "Gloo: skipped: $gloo_skip"
[ -n "$ceil_skip" ] && echo "tcp ceiling: skipped: $ceil_skip"

keep=1
if [ -z "$outdir" ]; then
    outdir=$(mktemp -d "${TMPDIR:-/tmp}/chorus-compare.XXXXXX") || exit 1
    keep=0
fi
mkdir -p "$outdir" || exit 1
failed=0

# Bytes sent on lo so far (0 where the counter cannot be read).
lo_bytes() { cat "$lo_stats" 2>/dev/null || echo 0; }

# run LIB N COLL BMIN BMAX ITERS WARMUP: appends the rows of one band to $outdir/LIB.N.COLL
# as "size count time_us wrong_out wrong_in" (the best time and the most wrong values of
# the $repeat runs; size is the row's size column, the bytes of its larger buffer; a wrong
# count is "-" where the row has none, as the barrier's), or FAIL lines when a run failed,
# or SKIP lines when the program skipped the collective (exit status 77; its reason goes to
# $outdir/LIB.N.COLL.skip). LIB is chorus, ompi or gloo-ALGO. The bytes lo carried
# meanwhile are added up in $outdir/LIB.N.COLL.lo.
run() {
    lib=$1 n=$2 coll=$3 blo=$4 bhi=$5 iters=$6 warm=$7
    # Gloo's small calls take 0.1 to 10 ms here (TCP on loopback): 200 of them average its
    # spikes away as well as thousands do the others', in minutes less.
    case $lib in gloo-*) [ "$iters" -gt 200 ] && iters=200 warm=20 ;; esac
    args="$coll -b $blo -e $bhi -f $factor -n $iters -w $warm -c 1"
    raw="$outdir/$lib.$n.$coll.raw"
    # MPIRUN_ARGS and args are word lists, split on purpose.
    # shellcheck disable=SC2086
    case $lib in
    chorus)
        if [ "$transport" = tcp ]; then
            set -- env CHORUS_TRANSPORT=tcp "$BUILD/bin/chorusrun" -n "$n" -- \
                "$BUILD/bin/chorus-bench"
        else
            set -- "$BUILD/bin/chorusrun" -n "$n" -- "$BUILD/bin/chorus-bench"
        fi
        # -R: Chorus's buffers in registered memory (chorus-bench -R 1); the peers' as ever.
        [ "$registered" -eq 1 ] && set -- "$@" -R 1
        ;;
    ompi) set -- "$MPIRUN" $MPIRUN_ARGS -np "$n" "$BUILD/bin/ompi-bench" ;;
    gloo-*)
        set -- env GLOO_BENCH_ALGO="${lib#gloo-}" sh "$here/gloo/gloorun.sh" -n "$n" \
            "$BUILD/bin/gloo-bench"
        ;;
    esac
    want=$(echo "$sizes" | awk -v lo="$blo" -v hi="$bhi" '{ for (i = 1; i <= NF; i++)
        if ($i + 0 >= lo + 0 && $i + 0 <= hi + 0) c++ } END { print c + 0 }')
    : >"$raw.rows"
    k=0 ok=1
    while [ "$k" -lt "$repeat" ] && [ "$ok" -eq 1 ]; do
        echo "## $* $args" >>"$raw"
        lo0=$(lo_bytes)
        # A run past the timeout gets SIGTERM (the launchers pass it on to their ranks),
        # then SIGKILL 10 s later.
        # shellcheck disable=SC2086
        timeout -k 10 "$TIMEOUT" "$@" $args >"$raw.band" 2>&1
        rc=$?
        lo1=$(lo_bytes)
        echo $((lo1 - lo0)) >>"$outdir/$lib.$n.$coll.lo"
        cat "$raw.band" >>"$raw"
        # Rows are the lines whose first field (after chorusrun's "[0] ") is a number; an
        # unchecked #wrong (N/A, or "-" where there is no in-place half) becomes "-".
        sed -e 's/^\[[0-9]*\] *//' "$raw.band" |
            awk '$1 ~ /^[0-9]+$/ && NF >= 13 {
                print $1, $2, $6, ($9 ~ /^[0-9]+$/ ? $9 : "-"), ($13 ~ /^[0-9]+$/ ? $13 : "-") }' \
            >"$raw.one"
        got=$(wc -l <"$raw.one")
        if [ "$rc" -eq 77 ]; then
            # The program cannot run this collective here and said why ("skipped: ...").
            sed -n 's/^\(\[[0-9]*\] *\)\{0,1\}skipped: //p' "$raw.band" | head -n 1 \
                >"$outdir/$lib.$n.$coll.skip"
            [ -s "$outdir/$lib.$n.$coll.skip" ] || echo "exit status 77" >"$outdir/$lib.$n.$coll.skip"
            ok=2
        elif [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
            echo "compare: $lib -n $n $args timed out after $TIMEOUT s (COMPARE_TIMEOUT)" \
                "with $got of $want rows; see $raw" >&2
            ok=0
        elif [ "$rc" -ne 0 ] || [ "$got" -ne "$want" ]; then
            echo "compare: $lib -n $n $args failed (exit $rc, $got of $want rows); see $raw" >&2
            ok=0
        elif [ "$k" -eq 0 ]; then
            cp "$raw.one" "$raw.rows"
        else
            paste -d ' ' "$raw.rows" "$raw.one" | awk '
                function most(a, b) { return a == "-" ? b : b == "-" ? a : (b + 0 > a + 0 ? b : a) }
                { print $1, $2, ($8 + 0 < $3 + 0 ? $8 : $3), most($4, $9), most($5, $10) }' \
                >"$raw.best" && mv "$raw.best" "$raw.rows"
        fi
        k=$((k + 1))
    done
    if [ "$ok" -eq 1 ]; then
        cat "$raw.rows" >>"$outdir/$lib.$n.$coll"
    elif [ "$ok" -eq 2 ]; then
        i=0
        while [ "$i" -lt "$want" ]; do echo "SKIP" >>"$outdir/$lib.$n.$coll"; i=$((i + 1)); done
    else
        i=0
        while [ "$i" -lt "$want" ]; do echo "FAIL" >>"$outdir/$lib.$n.$coll"; i=$((i + 1)); done
        failed=1
    fi
    rm -f "$raw.band" "$raw.one" "$raw.rows"
}

# run_ceiling N: tcp-ceiling over all the sizes at once, -r $repeat rounds each keeping the
# best, once per rank count (the collectives share it); its rows "size time_us busbw" go to
# $outdir/ceil.N, or FAIL lines when it failed. Nothing at all when it was skipped.
ceil_done=""
run_ceiling() {
    n=$1
    case " $ceil_done " in *" $n "*) return ;; esac
    ceil_done="$ceil_done $n"
    : >"$outdir/ceil.$n"
    [ -n "$ceil_skip" ] && return
    raw="$outdir/ceil.$n.raw"
    echo "## $BUILD/bin/tcp-ceiling -n $n -b $min -e $max -f $factor -r $repeat" >"$raw"
    timeout -k 10 "$TIMEOUT" "$BUILD/bin/tcp-ceiling" -n "$n" -b "$min" -e "$max" \
        -f "$factor" -r "$repeat" >>"$raw" 2>&1
    rc=$?
    awk '$1 ~ /^[0-9]+$/ && NF == 3 { print $1, $2, $3 }' "$raw" >"$raw.rows"
    got=$(wc -l <"$raw.rows")
    # shellcheck disable=SC2086
    want=$(set -- $sizes && echo $#)
    if [ "$rc" -eq 0 ] && [ "$got" -eq "$want" ]; then
        mv "$raw.rows" "$outdir/ceil.$n"
    else
        echo "compare: tcp-ceiling -n $n failed (exit $rc, $got of $want rows); see $raw" >&2
        for s in $sizes; do echo FAIL >>"$outdir/ceil.$n"; done
        rm -f "$raw.rows"
        failed=1
    fi
}

# Runs every library over every band of sizes for one rank count and collective, then
# merges the Gloo algorithms into $outdir/gloo.N.COLL. A barrier is one run of one row.
run_all() {
    n=$1 coll=$2
    glibs=""
    if [ "$coll" = allreduce ]; then
        for a in $gloo_algos; do glibs="$glibs gloo-$a"; done
    else
        # GLOO_BENCH_ALGO picks an allreduce only: the other collectives run once.
        glibs=gloo-ring
    fi
    [ "$transport" = tcp ] && [ "$coll" != barrier ] && run_ceiling "$n"
    for lib in chorus ompi $glibs; do
        : >"$outdir/$lib.$n.$coll"
        : >"$outdir/$lib.$n.$coll.lo"
        rm -f "$outdir/$lib.$n.$coll.skip"
        [ "$lib" = ompi ] && [ -n "$ompi_skip" ] && continue
        case $lib in gloo-*) [ -n "$gloo_skip" ] && continue ;; esac
        if [ "$coll" = barrier ]; then
            # shellcheck disable=SC2046
            run "$lib" "$n" barrier "$min" "$min" $(band_iters 0)
            continue
        fi
        lo="" prev_band=""
        for s in $sizes; do
            band=$(band_iters "$s")
            if [ -n "$lo" ] && [ "$band" != "$prev_band" ]; then
                # shellcheck disable=SC2086
                run "$lib" "$n" "$coll" "$lo" "$hi" $prev_band
                lo=""
            fi
            [ -z "$lo" ] && lo=$s
            hi=$s prev_band=$band
        done
        # shellcheck disable=SC2086
        [ -n "$lo" ] && run "$lib" "$n" "$coll" "$lo" "$hi" $prev_band
    done
    # shellcheck disable=SC2086
    merge_gloo "$n" "$coll" $glibs
}

# merge_gloo N COLL GLOO-LIB...: for every size the fastest correct row of the Gloo
# algorithms goes to $outdir/gloo.N.COLL and its algorithm's name to gloo.N.COLL.algo. A
# size where every algorithm failed stays FAIL (and a failed algorithm already set the
# exit status), one where every algorithm was skipped SKIP (the reason in
# gloo.N.COLL.skip); nothing at all when Gloo was skipped.
merge_gloo() {
    n=$1 coll=$2
    shift 2
    : >"$outdir/gloo.$n.$coll"
    : >"$outdir/gloo.$n.$coll.algo"
    rm -f "$outdir/gloo.$n.$coll.skip"
    [ -n "$gloo_skip" ] && return
    for g in "$@"; do
        [ -f "$outdir/$g.$n.$coll.skip" ] && cp "$outdir/$g.$n.$coll.skip" "$outdir/gloo.$n.$coll.skip"
        awk -v algo="${g#gloo-}" '{ print FNR, algo, $0 }' "$outdir/$g.$n.$coll"
    done | awk -v out="$outdir/gloo.$n.$coll" -v names="$outdir/gloo.$n.$coll.algo" \
        -v coll="$coll" '
        # A wrong count other than 0 fails the row; "-" (none) is right only for a barrier,
        # and in place (inpl) for alltoallv, which has no in-place form.
        function bad(w, inpl) {
            return w == "-" ? !(coll == "barrier" || (inpl && coll == "alltoallv")) : w != 0
        }
        {
            i = $1; if (i > rows) rows = i
            if ($3 == "SKIP") { skip[i] = 1; next }
            if ($3 == "FAIL" || bad($6, 0) || bad($7, 1)) next
            if (!(i in best) || $5 + 0 < t[i]) {
                best[i] = $3 " " $4 " " $5 " " $6 " " $7; t[i] = $5 + 0; name[i] = $2
            }
        }
        END {
            for (i = 1; i <= rows; i++) {
                print (i in best ? best[i] : i in skip ? "SKIP" : "FAIL") >out
                print (i in best ? name[i] : "-") >names
            }
        }'
}

# The awk functions both kinds of table use. A row of the row files is "size count time_us
# wrong_out wrong_in", or FAIL, or SKIP (the program skipped the collective), or empty (the
# library was skipped); coll is the collective.
table_awk='
    # A wrong count other than 0 fails the row; "-" (none) is right only for a barrier,
    # and in place (inpl) for alltoallv, which has no in-place form.
    function bad(w, inpl) {
        return w == "-" ? !(coll == "barrier" || (inpl && coll == "alltoallv")) : w != 0
    }
    # "" for a row with numbers to show, else what its columns show instead.
    function state(row,   a) {
        if (row == "" || row == "SKIP") return "-"
        if (row == "FAIL") return "FAIL"
        split(row, a, " ")
        return bad(a[4], 0) || bad(a[5], 1) ? "FAIL" : ""
    }
    # Time per call (us). A size whose split moves no data (count 0) shows n/a: Gloo
    # does not even make such a call, so there is nothing to compare.
    function tm(row,   a, st) {
        if ((st = state(row)) != "") return st
        split(row, a, " ")
        return a[2] == 0 && coll != "barrier" ? "n/a" : a[3] + 0
    }
    # busbw (GB/s) from the time: the bytes are the row size column (nccl-tests: count * 4,
    # times n for the per-rank and per-peer counts), f the collective busbw factor.
    function bw(row, f,   a, st) {
        if ((st = state(row)) != "") return st
        split(row, a, " ")
        if (a[3] <= 0 || a[2] == 0) return "n/a"
        return a[1] / (a[3] * 1000) * f
    }
    # "-" (skipped) is no number, though made of the same characters.
    function num(x) { return x ~ /^[0-9.e+-]+$/ && x ~ /[0-9]/ }
    function showt(x) {
        if (!num(x)) return sprintf("%9s", x)
        return sprintf(x >= 1000 ? "%9.0f" : x >= 10 ? "%9.1f" : "%9.2f", x)
    }
    function showb(x) { return num(x) ? sprintf("%9.3g", x) : sprintf("%9s", x) }
    function ratio(a, b) {
        if (num(a) && num(b) && b > 0) return sprintf("%11.2f", a / b)
        return sprintf("%11s", "-")
    }
    function at(v, where) { return v == "" ? "-" : sprintf("%.2f at %s", v, where) }
'

# Prints the table of one rank count and collective from the three row files.
table() {
    n=$1 coll=$2
    echo
    best=0
    [ "$coll" = allreduce ] && [ "$ngloo" -gt 1 ] && best=1
    over=""
    [ "$transport" = tcp ] && over=" over loopback tcp"
    if [ "$coll" = barrier ]; then
        echo "# barrier, $n ranks$over: the slowest rank's time per call (us);"
        echo "# ratios are peer time / Chorus time (above 1: Chorus is faster)"
    else
        echo "# $coll float32, $n ranks$over: the slowest rank's out-of-place time per call"
        echo "# and busbw from it; ratios above 1: Chorus is faster (peer time / Chorus time,"
        echo "# Chorus busbw / peer busbw)"
    fi
    [ "$best" -eq 1 ] && echo "# gloo-best: each size's fastest Gloo algorithm (gloo-algo)"
    [ -f "$outdir/ompi.$n.$coll.skip" ] && echo "# Open MPI $coll: skipped: $(cat "$outdir/ompi.$n.$coll.skip")"
    [ -f "$outdir/gloo.$n.$coll.skip" ] && echo "# Gloo $coll: skipped: $(cat "$outdir/gloo.$n.$coll.skip")"
    if [ "$coll" = barrier ]; then
        paste -d '|' "$outdir/chorus.$n.$coll" "$outdir/ompi.$n.$coll" "$outdir/gloo.$n.$coll" |
            awk -F '|' -v coll="$coll" "$table_awk"'
            BEGIN {
                printf "%12s  %9s  %9s  %9s  %11s  %11s\n", "", "chorus", "ompi", "gloo",
                       "ompi/chorus", "gloo/chorus"
            }
            {
                c = tm($1); o = tm($2); g = tm($3)
                printf "%12s  %s  %s  %s  %s  %s\n", "barrier", showt(c), showt(o), showt(g),
                       ratio(o, c), ratio(g, c)
            }'
        return
    fi
    ceil=0 ceilf=/dev/null
    [ "$transport" = tcp ] && ceil=1 ceilf="$outdir/ceil.$n"
    paste -d '|' "$outdir/chorus.$n.$coll" "$outdir/ompi.$n.$coll" "$outdir/gloo.$n.$coll" \
        "$outdir/gloo.$n.$coll.algo" "$ceilf" |
        awk -F '|' -v n="$n" -v coll="$coll" -v sizes="$sizes" -v best="$best" -v ceil="$ceil" \
        "$table_awk"'
        # tcp-ceiling rows are "size time_us busbw"; busbw again from the time, for digits.
        function ceilbw(row,   a) {
            if (row == "") return "-"
            if (row == "FAIL") return "FAIL"
            split(row, a, " ")
            if (a[2] <= 0) return "n/a"
            return int(2 * (n - 1) * a[1] / n) / (a[2] * 1000)
        }
        BEGIN {
            split(sizes, sz, " ")
            f = coll == "allreduce" ? 2 * (n - 1) / n : coll ~ /^(broadcast|reduce)$/ ? 1 : (n - 1) / n
            g = best ? "gloo-best" : "gloo"
            printf "#%11s  %-31s  %-24s  %-31s  %s\n", "", "time per call (us)",
                   "time: peer/chorus", "busbw (GB/s)", "busbw: chorus/peer"
            printf "%12s  %9s  %9s  %9s  %11s  %11s  %9s  %9s  %9s  %11s  %11s", "size (B)",
                   "chorus", "ompi", g, "ompi/chorus", "gloo/chorus", "chorus", "ompi", g,
                   "chorus/ompi", "chorus/gloo"
            if (ceil) printf "  %9s  %11s", "tcp-ceil", "chorus/ceil"
            printf "%s\n", (best ? "  gloo-algo" : "")
        }
        {
            tc = tm($1); to = tm($2); tg = tm($3)
            c = bw($1, f); o = bw($2, f); g = bw($3, f); k = ceilbw($5)
            printf "%12s  %s  %s  %s  %s  %s  %s  %s  %s  %s  %s", sz[NR], showt(tc), showt(to),
                   showt(tg), ratio(to, tc), ratio(tg, tc), showb(c), showb(o), showb(g),
                   ratio(c, o), ratio(c, g)
            if (ceil) printf "  %s  %s", showb(k), ratio(c, k)
            printf "%s\n", (best ? "  " ($4 == "" ? "-" : $4) : "")
            # The acceptance compares time per call up to 32 KiB and busbw from 64 KiB up:
            # the worst ratio of each band, and where it was.
            if (sz[NR] + 0 <= 32768) {
                if (num(to) && num(tc) && tc > 0 && (wto == "" || to / tc < wto)) {
                    wto = to / tc; wtos = sz[NR]
                }
                if (num(tg) && num(tc) && tc > 0 && (wtg == "" || tg / tc < wtg)) {
                    wtg = tg / tc; wtgs = sz[NR]
                }
                small = 1
            }
            if (sz[NR] + 0 >= 65536) {
                if (num(c) && num(o) && o > 0 && (wo == "" || c / o < wo)) { wo = c / o; wos = sz[NR] }
                if (num(c) && num(g) && g > 0 && (wg == "" || c / g < wg)) { wg = c / g; wgs = sz[NR] }
                if (num(c) && num(k) && k > 0 && (wk == "" || c / k < wk)) { wk = c / k; wks = sz[NR] }
                big = 1
            }
        }
        END {
            if (small)
                printf "# worst ratio up to 32 KiB (time): ompi/chorus %s  gloo/chorus %s\n",
                       at(wto, wtos), at(wtg, wtgs)
            if (big)
                printf "# worst ratio from 64 KiB (busbw): chorus/ompi %s  chorus/gloo %s\n",
                       at(wo, wos), at(wg, wgs)
            if (big && ceil) printf "# lowest chorus/ceil from 64 KiB: %s\n", at(wk, wks)
        }'
    if [ "$transport" = tcp ]; then
        # Byte counts pass the shell's arithmetic by: awk adds them up.
        mb() { cat "$@" 2>/dev/null | awk '{ s += $1 } END { printf "%.0f", s / 1e6 }'; }
        printf "# lo carried (MB): chorus %s  ompi %s  gloo %s\n" \
            "$(mb "$outdir/chorus.$n.$coll.lo")" "$(mb "$outdir/ompi.$n.$coll.lo")" \
            "$(mb "$outdir"/gloo-*."$n.$coll".lo)"
    fi
}

if [ "$transport" = tcp ]; then
    echo "# compare: transport tcp (loopback), sizes $min..$max factor $factor, ranks $ranks," \
        "collectives $colls, gloo algorithms $gloo_algos, best of $repeat run(s)," \
        "$(nproc) cores, raw tables in $outdir"
    echo "# mpirun args: $MPIRUN_ARGS"
elif [ "$ngloo" -gt 1 ]; then
    echo "# compare: sizes $min..$max factor $factor, ranks $ranks, collectives $colls," \
        "gloo algorithms $gloo_algos, best of $repeat run(s), $(nproc) cores, raw tables in $outdir"
else
    echo "# compare: sizes $min..$max factor $factor, ranks $ranks, collectives $colls," \
        "best of $repeat run(s), $(nproc) cores, raw tables in $outdir"
fi
start=$(date +%s)
for coll in $colls; do
    for n in $ranks; do
        run_all "$n" "$coll"
        table "$n" "$coll"
    done
done
echo
echo "# compare: done in $(($(date +%s) - start)) s"
if [ "$failed" -ne 0 ]; then
    echo "compare: some runs failed or found wrong values (FAIL above); see $outdir" >&2
elif [ "$keep" -eq 0 ]; then
    rm -rf "$outdir"
fi
exit "$failed"
