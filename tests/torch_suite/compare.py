"""Compare two runs of tests/torch_suite (a reference backend A, usually gloo, and B,
usually chorus):

    python3 tests/torch_suite/compare.py A B [--tsv FILE]

A and B: --out directories of run.sh (results.json, or results.tsv of a run cut short) or
those files themselves. Prints the side-by-side summary, then
  1. the tests that pass with A but not with B, with B's outcome and reason and a guessed
     class: (a) an op B lacks, (b) the suite restricts the test to named backends (or
     torch assumes a built-in one), (c) needs a GPU/accelerator, (d) anything else: a
     backend bug until shown otherwise; b? a skip whose reason matched no rule;
  2. B's failures and errors beyond A's own (B FAIL/ERROR where A did not fail);
  3. the tests that pass with B but not with A;
  4. B's reasons of (1), counted.
The class is a guess from the reason text (see classify()); check each (d) by hand.
--tsv writes section 1 and 2 as test, A outcome, B outcome, class, B reason.
"""

import argparse
import json
import os
import re
import sys
from collections import Counter

OUTCOMES = ("PASS", "FAIL", "ERROR", "SKIP")


def load(path):
    if os.path.isdir(path):
        j = os.path.join(path, "results.json")
        path = j if os.path.exists(j) else os.path.join(path, "results.tsv")
    if path.endswith(".json"):
        with open(path) as f:
            d = json.load(f)
        return d.get("meta", {}), d["tests"]
    tests = {}
    with open(path) as f:
        next(f, None)
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if len(parts) >= 2:
                tests[parts[0]] = {"outcome": parts[1],
                                   "seconds": float(parts[2]) if len(parts) > 2 else 0.0,
                                   "reason": parts[3] if len(parts) > 3 else ""}
    return {"summary": "(partial: results.tsv)", "source": path}, tests


# (class, regular expression on B's outcome + reason), first match wins.
RULES = [
    ("a", r"does not support (\w+)"),
    ("a", r"only tag 0 is accepted|has no tags"),
    ("a", r"not (?:yet )?(?:implemented|supported)\b|sequence numbers|monitoredBarrier|"
          r"monitored_barrier is only"),
    # torch 2.x: DDP logs ProcessGroup::getBackendName(), "custom" for any plugin backend
    ("b", r"'custom' != '"),
    ("b", r"requires backend \S+ to be one of|only supported on|Only gloo|only gloo|GLOO|"
          r"Only Gloo|Only (?:the )?\w+ backend|backend (?:does not support|is not)|"
          r"backend_feature|supported only by"),
    ("c", r"accelerator|CUDA|cuda|GPU|gpu|multi-device|NCCL|Nccl|nccl"),
]


def classify(rec):
    reason = rec.get("reason", "")
    if rec.get("outcome") != "SKIP":   # a run with --force: what happened, not the skip
        reason = re.sub(r"^\[forced past: .*?\] ", "", reason)
    text = f"{rec.get('outcome', '')} {reason}"
    for cls, pat in RULES:
        if re.search(pat, text):
            return cls
    if rec.get("outcome") == "SKIP":
        return "b?"
    return "d"


def short(s, n=150):
    s = s or ""
    return s if len(s) <= n else s[: n - 3] + "..."


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--tsv", help="write the differences here")
    ap.add_argument("--width", type=int, default=150, help="reason width (default 150)")
    ap.add_argument("--gate", metavar="FILE",
                    help="known gaps (test name, then why; # comments): exit 1 when a test "
                         "passes with A but not with B and is not listed (a listed test that "
                         "passes is named: the list serves both torch lines, so it may hold "
                         "for the other)")
    args = ap.parse_args()
    meta_a, A = load(args.a)
    meta_b, B = load(args.b)
    la = f"{meta_a.get('backend', 'A')}"
    lb = f"{meta_b.get('backend', 'B')}"
    if la == lb:
        la, lb = la + "(A)", lb + "(B)"

    def counts(T):
        c = Counter(r["outcome"] for r in T.values())
        return [len(T)] + [c.get(o, 0) for o in OUTCOMES]

    print(f"{'':10} {'tests':>6} {'pass':>6} {'fail':>6} {'error':>6} {'skip':>6}  time   torch")
    for lab, meta, T in ((la, meta_a, A), (lb, meta_b, B)):
        c = counts(T)
        secs = meta.get("seconds")
        t = f"{secs:.0f}s" if isinstance(secs, (int, float)) else "?"
        print(f"{lab:10} " + " ".join(f"{x:>6}" for x in c)
              + f"  {t:>6} {meta.get('torch', '?')} n={meta.get('world_size', '?')}")
    only_a = sorted(set(A) - set(B))
    only_b = sorted(set(B) - set(A))
    if only_a or only_b:
        print(f"(tests only in {la}: {len(only_a)}, only in {lb}: {len(only_b)})")

    rows = []
    lost = [t for t in sorted(A) if A[t]["outcome"] == "PASS" and t in B
            and B[t]["outcome"] != "PASS"]
    print(f"\n== 1. pass with {la}, not with {lb}: {len(lost)}")
    by_cls = Counter()
    for t in lost:
        cls = classify(B[t])
        by_cls[cls] += 1
        rows.append((t, A[t]["outcome"], B[t]["outcome"], cls, B[t]["reason"]))
        print(f"  {cls:<2} {B[t]['outcome']:<5} {t}  {short(B[t]['reason'], args.width)}")
    if by_cls:
        print("  by class: " + ", ".join(f"{k}: {v}" for k, v in sorted(by_cls.items())))

    extra = [t for t in sorted(B) if B[t]["outcome"] in ("FAIL", "ERROR")
             and A.get(t, {}).get("outcome") not in ("FAIL", "ERROR")]
    print(f"\n== 2. {lb} failures and errors beyond {la}'s: {len(extra)}")
    for t in extra:
        ao = A.get(t, {}).get("outcome", "-")
        if ao != "PASS":
            rows.append((t, ao, B[t]["outcome"], classify(B[t]), B[t]["reason"]))
        print(f"  {B[t]['outcome']:<5} ({la} {ao:<5}) {t}  {short(B[t]['reason'], args.width)}")

    gained = [t for t in sorted(B) if B[t]["outcome"] == "PASS"
              and A.get(t, {}).get("outcome") != "PASS"]
    print(f"\n== 3. pass with {lb}, not with {la}: {len(gained)}")
    for t in gained:
        ao = A.get(t, {})
        print(f"  ({la} {ao.get('outcome', '-'):<5}) {t}  {short(ao.get('reason', ''), args.width)}")

    print(f"\n== 4. {lb}'s reasons in section 1, counted")
    norm = Counter()
    for t in lost:
        r = re.sub(r"^rank [\d,]+: ", "", B[t]["reason"])
        r = re.sub(r"\b\d+(\.\d+)?\b", "N", r)
        norm[(B[t]["outcome"], short(r, args.width))] += 1
    for (o, r), k in norm.most_common():
        print(f"  {k:>4}  {o:<5} {r}")

    status = 0
    if args.gate:
        known = {}
        with open(args.gate) as f:
            for line in f:
                line = line.split("#", 1)[0].strip()
                if line:
                    name, _, why = line.partition(" ")
                    known[name] = why.strip()
        new = [t for t in lost if t not in known]
        stale = [t for t in known if t in B and B[t]["outcome"] == "PASS"]
        print(f"\n== gate ({args.gate}): {len(lost) - len(new)} known gaps, {len(new)} new, "
              f"{len(stale)} stale")
        for t in new:
            print(f"  NEW   {t}: {B[t]['outcome']} with {lb}, PASS with {la}: "
                  f"{short(B[t]['reason'], args.width)}")
        for t in stale:
            print(f"  note: {t} passes with {lb} here (listed for the other torch line, or "
                  f"stale)")
        status = 1 if new else 0

    if args.tsv:
        with open(args.tsv, "w") as f:
            f.write(f"test\t{la}\t{lb}\tclass\treason\n")
            for r in rows:
                f.write("\t".join(r) + "\n")
    return status


if __name__ == "__main__":
    sys.exit(main())
