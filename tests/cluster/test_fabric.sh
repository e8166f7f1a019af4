#!/bin/sh
# chorus-fabric on the emulated cluster (issue 8, acceptance 1 and 3): 8 hosts, one rank
# each, every link capped at 200 Mbit/s (tests/cluster/cluster.sh), --time-budget 60.
#
# 1. All links equal: chorus-fabric exits 0 with "chorus-fabric: PASS".
# 2. host5's link at 100 Mbit/s (--rate-of 5=100mbit): it exits 1, and its --json report
#    names exactly host5 among the slow hosts (findings of kind "host"), the verdict line
#    says "slow hosts: host5", and host5's pairs measure about half of the others.
#    Every one of host5's 7 pairs is flagged by the first test and retested (the retest's
#    slice fits them at --time-budget 60), and is still slow after it.
# Every host's CPU over the rounds is in the JSON (the hosts share one /proc/stat here, so
# their figures agree), and every link named slow was retested (issue 21); the verdict line
# may end with "; likely cause: saturated CPU on ..." when the 2 cores were saturated.
# Each run must finish within its budget: the run's own elapsed_s (rank 0) and the time
# the cluster script measured from the ranks' start to their end. The figures (per-pair
# rates, host5's ratio, elapsed, the retested pairs before and after, and rank 0's -v
# lines of the retest) are printed. Skipped (77) without network namespaces.
set -u
BUILD=${BUILD:-build}
HERE=$(dirname "$0")
FABRIC="$BUILD/bin/chorus-fabric"
BUDGET=${FABRIC_TEST_BUDGET:-60}
[ -x "$FABRIC" ] || { echo "missing $FABRIC (run make)"; exit 1; }
unset CHORUS_TRANSPORT CHORUS_ALGO CHORUS_DEBUG CHORUS_HOSTID 2>/dev/null
export CHORUS_TIMEOUT=${CHORUS_TIMEOUT:-30}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/chorus-cluster-fabric.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT
FAILED=0
# part_skip PART LOG: cluster.sh could not run this part (77: no network namespaces, no tc
# for --rate); one PART-SKIP line says so with cluster.sh's reason, and the script skips as
# a whole (exit 77, that reason) only when no part ran at all.
RAN=0
SKIP_WHY=""
part_skip() {
    SKIP_WHY=$(grep -o 'skipped: .*' "$2" | tail -n 1)
    echo "PART-SKIP $1: ${SKIP_WHY:=skipped: (cluster.sh gave no reason)}"
}

# fabric_run NAME WANT_RC [cluster options]: runs chorus-fabric, leaves
# $TMP/NAME.{log,json}, and checks the run (or says it could not run).
fabric_run() {
    name=$1 want_rc=$2
    shift 2
    sh "$HERE/cluster.sh" --hosts 8 --rate 200mbit "$@" --timeout $((BUDGET + 60)) -- \
        "$FABRIC" --time-budget "$BUDGET" -v --json "$TMP/$name.json" >"$TMP/$name.log" 2>&1
    rc=$?
    if [ "$rc" -eq 77 ]; then part_skip "$name" "$TMP/$name.log"; return; fi
    RAN=$((RAN + 1))
    check "$name" "$want_rc"
}

# check NAME WANT_RC: the exit status, the verdict, the JSON and the time of a run.
check() {
    name=$1 want=$2
    verdict=$(grep '^\[host0 r0\] chorus-fabric: \(PASS\|FAIL\)' "$TMP/$name.log" | tail -n 1)
    verdict=${verdict#\[host0 r0\] }
    ms=$(sed -n 's/^cluster: done in \([0-9]*\) ms.*/\1/p' "$TMP/$name.log")
    echo "$name: exit $rc (want $want), ranks ran ${ms:-?} ms; $verdict"
    grep '^\[host0 r0\] chorus-fabric: .*\(retest\|concurrent shift 1 \)' "$TMP/$name.log" |
        sed 's/^\[host0 r0\] chorus-fabric:/  -v:/'
    if [ "$rc" -ne "$want" ] || [ -z "$verdict" ]; then
        echo "FAIL $name: exit status or verdict line"
        grep -v '^\[host[1-7] ' "$TMP/$name.log" | tail -n 40
        FAILED=1
        return
    fi
    if [ -z "$ms" ] || [ "$ms" -gt $((BUDGET * 1000)) ]; then
        echo "FAIL $name: the ranks ran ${ms:-?} ms, over the budget of $BUDGET s"
        FAILED=1
    fi
    python3 - "$TMP/$name.json" "$want" "$BUDGET" <<'PY' || FAILED=1
import json, statistics, sys
d = json.load(open(sys.argv[1]))
want, budget = int(sys.argv[2]), float(sys.argv[3])
names = [h["name"] for h in d["hosts"]]
bad = []
if names != ["host%d" % i for i in range(8)]:
    bad.append("hosts %s" % names)
pairs = d["inter"]
if len(pairs) != 28 or any(min(p["gbps_ab"], p["gbps_ba"], p["bidir_gbps"], p["lat_us"]) <= 0
                           for p in pairs):
    bad.append("want 28 measured inter-host pairs, have %d" % len(pairs))
def involves5(p):
    return 5 in (p["a"], p["b"])
rates = lambda sel: [r for p in pairs if sel(p) for r in (p["gbps_ab"], p["gbps_ba"])]
with5, others = rates(involves5), rates(lambda p: not involves5(p))
if with5 and others:
    m5, mo = statistics.median(with5), statistics.median(others)
    print("  per-pair one-way Gbit/s: host5's pairs %.3f-%.3f (median %.3f), others %.3f-%.3f "
          "(median %.3f); ratio %.2f" % (min(with5), max(with5), m5, min(others), max(others),
                                         mo, m5 / mo))
    print("  both ways at once, median: host5's pairs %.3f, others %.3f" % (
        statistics.median(p["bidir_gbps"] for p in pairs if involves5(p)),
        statistics.median(p["bidir_gbps"] for p in pairs if not involves5(p))))
slow = sorted(f["host_name"] for f in d["findings"] if f["kind"] == "host")
cpus = [h["cpu"] for h in d["hosts"]]
if any(c is None or not 0 <= c["busy"] <= 1 for c in cpus):
    bad.append("hosts without CPU figures: %s" % cpus)
else:
    print("  CPU during the rounds, busy/softirq %%: %s; notes: %s" % (
        " ".join("%.0f/%.0f" % (100 * c["busy"], 100 * c["softirq"]) for c in cpus),
        "; ".join(n["text"] for n in d["notes"]) or "none"))
for f in d["findings"]:
    if f["kind"] == "link" and not any(p["retested"] for p in pairs
                                       if (p["a"], p["b"]) == (f["host"], f["peer"])):
        bad.append("link %s-%s named slow without a retest" % (f["host"], f["peer"]))
again = [p for p in pairs if p["retested"]]
print("  retested %d pairs (first -> kept, Gbit/s a->b b->a): %s" % (len(again), ", ".join(
    "host%d-host%d %.3f %.3f -> %.3f %.3f" % (p["a"], p["b"], p["first_gbps_ab"],
                                              p["first_gbps_ba"], p["gbps_ab"], p["gbps_ba"])
    for p in again) or "none"))
if any(p["gbps_ab"] < p["first_gbps_ab"] or p["gbps_ba"] < p["first_gbps_ba"] for p in again):
    bad.append("a retested pair kept a figure below its first one")
print("  elapsed %.1f s of %.0f; findings: %s" % (
    d["run"]["elapsed_s"], budget, "; ".join(f["text"] for f in d["findings"]) or "none"))
if d["run"]["elapsed_s"] > budget:
    bad.append("elapsed %.1f s over the budget" % d["run"]["elapsed_s"])
if d["verdict"]["exit_code"] != want:
    bad.append("verdict exit_code %s" % d["verdict"]["exit_code"])
if want == 0 and (d["findings"] or not d["verdict"]["pass"]):
    bad.append("findings with all links equal")
if want == 1:
    if slow != ["host5"]:
        bad.append("slow hosts %s, want exactly host5" % slow)
    named = d["verdict"]["line"].split("; likely cause:")[0]
    if "slow hosts: host5" not in named or "host5," in named:
        bad.append("verdict line %r" % d["verdict"]["line"])
    if sorted((p["a"], p["b"]) for p in again if involves5(p)) != sorted(
            (p["a"], p["b"]) for p in pairs if involves5(p)):
        bad.append("host5's 7 pairs not all retested")
    if not (0.35 <= m5 / mo <= 0.65):
        bad.append("host5's pairs at %.2f of the others, want about 0.5" % (m5 / mo))
for b in bad:
    print("FAIL %s" % b)
sys.exit(1 if bad else 0)
PY
}

fabric_run equal 0
fabric_run slow5 1 --rate-of 5=100mbit

[ "$FAILED" -eq 0 ] || { echo "cluster fabric: FAILED"; exit 1; }
[ "$RAN" -gt 0 ] || { echo "$SKIP_WHY"; exit 77; }
echo "cluster fabric: all equal passes; host5 at half rate fails naming host5 alone"
