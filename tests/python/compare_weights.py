"""Compares the weights two or three training runs saved (torch.save of a list of tensors):

    python3 compare_weights.py A.pt B.pt [--one ONE.pt] [--rel 1e-6]

A and B (two backends: each sums the gradients in its own order, so they may differ in the
last bits) must agree within --rel relative per tensor (||a - b|| / ||b||); both must agree
with ONE (a single process on the whole batch) within fp32 tolerance (rtol 1e-4, atol 1e-6).
Prints the figures, exits 1 when a bound is missed.
"""
import argparse
import os
import sys

import torch

p = argparse.ArgumentParser()
p.add_argument("a")
p.add_argument("b")
p.add_argument("--one")
p.add_argument("--rel", type=float, default=1e-6)
args = p.parse_args()
a, b = torch.load(args.a), torch.load(args.b)
ok = len(a) == len(b) and all(x.shape == y.shape for x, y in zip(a, b))
if not ok:
    print(f"the runs saved different tensors: {[tuple(x.shape) for x in a]} and "
          f"{[tuple(y.shape) for y in b]}")
    sys.exit(1)
na, nb = (os.path.basename(f).rsplit(".", 1)[0] for f in (args.a, args.b))
bitwise = all(torch.equal(x, y) for x, y in zip(a, b))
# Relative to each weight tensor's norm: an element near zero has no meaningful relative error.
rel = max(float((x - y).norm() / y.norm()) for x, y in zip(a, b))
absd = max(float((x - y).abs().max()) for x, y in zip(a, b))
print(f"{na} vs {nb}: bitwise equal {bitwise}, max abs diff {absd:.3g}, "
      f"max relative difference per tensor (norm) {rel:.3g} (bound {args.rel:g})")
ok = rel <= args.rel
if args.one:
    one = torch.load(args.one)
    d1 = max(float((x - y).abs().max()) for x, y in zip(a, one))
    print(f"{na} vs one process: max abs diff {d1:.3g}")
    ok = ok and all(torch.allclose(x, y, rtol=1e-4, atol=1e-6) for x, y in zip(a, one)) and \
        all(torch.allclose(x, y, rtol=1e-4, atol=1e-6) for x, y in zip(b, one))
sys.exit(0 if ok else 1)
