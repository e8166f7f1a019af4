#!/bin/sh
# Runs the same allreduce (and allgather) sizes through Chorus (chorus-bench), Open MPI
# (ompi-bench, bench/mpi) and Gloo (gloo-bench, bench/gloo) on local ranks, and prints one
# table per rank count with each library's bus bandwidth and Chorus's ratio to the others.
#
#   make compare-peers            # builds ompi-bench and gloo-bench where possible
#   sh bench/compare.sh           # or: make bench-compare
#   sh bench/compare.sh -n "2 4" -b 8 -e 16M -f 4 -c allreduce -r 3 -o /tmp/cmp
#
# All three print nccl-tests rows with the same columns; busbw is recomputed here from the
# slowest rank's out-of-place time (us) with the nccl-tests factors, allreduce 2(n-1)/n and
# allgather (n-1)/n, so that small sizes keep their digits. The ratios are Chorus's busbw
# over the peer's (above 1: Chorus is faster). A peer that is not installed or not built is
# reported as "skipped: <reason>" and its columns show "-". Sizes run in bands with fewer
# iterations for the large ones (see band_iters) to keep the whole run to a few minutes on
# a small machine. Every result is checked (-c 1): a wrong value or a failed run prints
# FAIL in its column, and the exit status is then 1. On a shared machine, -r R runs every
# band R times and keeps each size's best time, so that a rank preempted by someone
# else's process does not decide a row.
#
# Environment: BUILD (default build) holds bin/chorusrun, bin/chorus-bench, bin/ompi-bench
# and bin/gloo-bench; MPIRUN (default mpirun.openmpi); MPIRUN_ARGS (default below);
# COMPARE_TIMEOUT, seconds one run may take (default 300).
set -u

BUILD=${BUILD:-build}
MPIRUN=${MPIRUN:-mpirun.openmpi}
# Shared memory (vader) only, no binding: 8 ranks share 2 cores here, and Chorus and Gloo
# do not bind either.
MPIRUN_ARGS=${MPIRUN_ARGS:---allow-run-as-root --oversubscribe --bind-to none --mca btl self,vader}
TIMEOUT=${COMPARE_TIMEOUT:-300}
here=$(cd "$(dirname "$0")" && pwd)

ranks="2 4 8"
min=8
max=64M
factor=4
colls="allreduce allgather"
repeat=1
outdir=

usage() {
    cat >&2 <<EOF
usage: $0 [-n "2 4 8"] [-b 8] [-e 64M] [-f 4] [-c "allreduce allgather"] [-r 1] [-o DIR]
  -n  rank counts          -b/-e  smallest/largest size (K M G)   -f  size factor
  -c  collectives          -r     runs of each band; the best time of each size is kept
  -o  keep every raw table in DIR (default: a temp dir, removed unless a run failed)
EOF
    exit 2
}

while getopts n:b:e:f:c:r:o:h opt; do
    case $opt in
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
min=$(to_bytes "$min") && max=$(to_bytes "$max") || usage
[ "$factor" -ge 2 ] 2>/dev/null && [ "$repeat" -ge 1 ] 2>/dev/null || usage
[ "$min" -ge 1 ] && [ "$min" -le "$max" ] || usage
for c in $colls; do
    case $c in allreduce | allgather) ;; *) usage ;; esac
done

# Iterations for the sizes of a band: "band_iters SIZE" prints "ITERS WARMUP".
band_iters() {
    if [ "$1" -le 65536 ]; then
        echo "20 5"
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
[ -n "$ompi_skip" ] && echo "Open MPI: skipped: $ompi_skip"
[ -n "$gloo_skip" ] && echo "Gloo: skipped: $gloo_skip"

keep=1
if [ -z "$outdir" ]; then
    outdir=$(mktemp -d "${TMPDIR:-/tmp}/chorus-compare.XXXXXX") || exit 1
    keep=0
fi
mkdir -p "$outdir" || exit 1
failed=0

# run LIB N COLL BMIN BMAX ITERS WARMUP: appends the rows of one band to $outdir/LIB.N.COLL
# as "size count time_us wrong_out wrong_in" (the best time and the most wrong values of
# the $repeat runs), or FAIL lines when a run failed.
run() {
    lib=$1 n=$2 coll=$3 blo=$4 bhi=$5
    args="$coll -b $blo -e $bhi -f $factor -n $6 -w $7 -c 1"
    raw="$outdir/$lib.$n.$coll.raw"
    # MPIRUN_ARGS and args are word lists, split on purpose.
    # shellcheck disable=SC2086
    case $lib in
    chorus) set -- "$BUILD/bin/chorusrun" -n "$n" -- "$BUILD/bin/chorus-bench" ;;
    ompi) set -- "$MPIRUN" $MPIRUN_ARGS -np "$n" "$BUILD/bin/ompi-bench" ;;
    gloo) set -- sh "$here/gloo/gloorun.sh" -n "$n" "$BUILD/bin/gloo-bench" ;;
    esac
    want=$(echo "$sizes" | awk -v lo="$blo" -v hi="$bhi" '{ for (i = 1; i <= NF; i++)
        if ($i + 0 >= lo + 0 && $i + 0 <= hi + 0) c++ } END { print c + 0 }')
    : >"$raw.rows"
    k=0 ok=1
    while [ "$k" -lt "$repeat" ] && [ "$ok" -eq 1 ]; do
        echo "## $* $args" >>"$raw"
        # shellcheck disable=SC2086
        timeout "$TIMEOUT" "$@" $args >"$raw.band" 2>&1
        rc=$?
        cat "$raw.band" >>"$raw"
        # Rows are the lines whose first field (after chorusrun's "[0] ") is a number.
        sed -e 's/^\[[0-9]*\] *//' "$raw.band" |
            awk '$1 ~ /^[0-9]+$/ && NF >= 13 { print $1, $2, $6, $9, $13 }' >"$raw.one"
        got=$(wc -l <"$raw.one")
        if [ "$rc" -ne 0 ] || [ "$got" -ne "$want" ]; then
            echo "compare: $lib -n $n $args failed (exit $rc, $got of $want rows); see $raw" >&2
            ok=0
        elif [ "$k" -eq 0 ]; then
            cp "$raw.one" "$raw.rows"
        else
            paste -d ' ' "$raw.rows" "$raw.one" | awk '{
                t = $8 < $3 ? $8 : $3; wo = $9 > $4 ? $9 : $4; wi = $10 > $5 ? $10 : $5
                print $1, $2, t, wo, wi }' >"$raw.best" && mv "$raw.best" "$raw.rows"
        fi
        k=$((k + 1))
    done
    if [ "$ok" -eq 1 ]; then
        cat "$raw.rows" >>"$outdir/$lib.$n.$coll"
    else
        i=0
        while [ "$i" -lt "$want" ]; do echo "FAIL" >>"$outdir/$lib.$n.$coll"; i=$((i + 1)); done
        failed=1
    fi
    rm -f "$raw.band" "$raw.one" "$raw.rows"
}

# Runs every library over every band of sizes for one rank count and collective.
run_all() {
    n=$1 coll=$2
    for lib in chorus ompi gloo; do
        : >"$outdir/$lib.$n.$coll"
        [ "$lib" = ompi ] && [ -n "$ompi_skip" ] && continue
        [ "$lib" = gloo ] && [ -n "$gloo_skip" ] && continue
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
}

# Prints the table of one rank count and collective from the three row files.
table() {
    n=$1 coll=$2
    echo
    echo "# $coll float32, $n ranks: busbw (GB/s) from the slowest rank's out-of-place time;"
    echo "# ratios are Chorus busbw / peer busbw"
    paste -d '|' "$outdir/chorus.$n.$coll" "$outdir/ompi.$n.$coll" "$outdir/gloo.$n.$coll" |
        awk -F '|' -v n="$n" -v coll="$coll" -v sizes="$sizes" '
        function bw(row, f,   a) {
            if (row == "") return "-"
            if (row == "FAIL") return "FAIL"
            split(row, a, " ")
            if (a[4] != 0 || a[5] != 0) return "FAIL"
            if (a[3] <= 0 || a[2] == 0) return "n/a"
            return a[2] * 4 * (coll == "allgather" ? n : 1) / (a[3] * 1000) * f
        }
        function num(x) { return x ~ /^[0-9.e+-]+$/ }
        function show(x) { return num(x) ? sprintf("%9.3g", x) : sprintf("%9s", x) }
        function ratio(a, b) {
            if (num(a) && num(b) && b > 0) return sprintf("%11.2f", a / b)
            return sprintf("%11s", "-")
        }
        function lat(row,   a) {
            if (row == "" || row == "FAIL") return row == "" ? "-" : "FAIL"
            split(row, a, " ")
            return sprintf("%.2f", a[3])
        }
        BEGIN {
            split(sizes, sz, " ")
            f = coll == "allgather" ? (n - 1) / n : 2 * (n - 1) / n
            printf "%12s  %9s  %9s  %9s  %11s  %11s\n", "size (B)", "chorus", "ompi", "gloo",
                   "chorus/ompi", "chorus/gloo"
        }
        {
            c = bw($1, f); o = bw($2, f); g = bw($3, f)
            printf "%12s  %s  %s  %s  %s  %s\n", sz[NR], show(c), show(o), show(g),
                   ratio(c, o), ratio(c, g)
            # The latency line uses the smallest size that moves data.
            if (latsize == "" && $1 != "FAIL" && $1 != "") {
                split($1, a, " ")
                if (a[2] > 0) {
                    latsize = sz[NR]; lc = lat($1); lo = lat($2); lg = lat($3)
                }
            }
        }
        END {
            if (latsize != "")
                printf "# %s B latency (us): chorus %s  ompi %s  gloo %s\n", latsize, lc, lo, lg
        }'
}

echo "# compare: sizes $min..$max factor $factor, ranks $ranks, collectives $colls," \
    "best of $repeat run(s), $(nproc) cores, raw tables in $outdir"
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
