"""A small model trained with DistributedDataParallel, the backend chosen by flag.

    chorusrun -n 4 --torch-env -- /usr/bin/python3 examples/torch/ddp_train.py --backend chorus
    (or torchrun --nproc_per_node 4 examples/torch/ddp_train.py --backend chorus)
    /usr/bin/python3 examples/torch/ddp_train.py --backend none     # one process, whole batch

Every step draws the same global batch everywhere (seeded by the step) and each rank trains
on its slice, so DDP with any backend computes the gradient of the whole batch, which is what
a single process (--backend none) computes: the final weights must agree within fp32
rounding. Prints the loss every 10 steps and a checksum of the final weights; --save FILE
writes them (rank 0) for comparison.
"""

import argparse
import hashlib
import os
import time

import torch
import torch.nn as nn


def build_model(dim, hidden, depth, out):
    layers, d = [], dim
    for _ in range(depth):
        layers += [nn.Linear(d, hidden), nn.Tanh()]
        d = hidden
    layers.append(nn.Linear(d, out))
    return nn.Sequential(*layers)


def batch(step, size, dim, out):
    g = torch.Generator().manual_seed(1000 + step)
    x = torch.randn(size, dim, generator=g)
    w = torch.linspace(-1, 1, dim * out).reshape(dim, out)
    y = torch.tanh(x @ w) + 0.01 * torch.randn(size, out, generator=g)
    return x, y


def checksum(model):
    h = hashlib.sha256()
    total = 0.0
    for p in model.parameters():
        h.update(p.detach().contiguous().numpy().tobytes())
        total += float(p.detach().double().sum())
    return total, h.hexdigest()[:16]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", default="chorus", choices=["chorus", "gloo", "none"])
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--batch", type=int, default=64, help="global batch (split over ranks)")
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--depth", type=int, default=2)
    ap.add_argument("--out", type=int, default=8)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--save", default=None)
    args = ap.parse_args()
    torch.set_num_threads(1)

    rank, world = 0, 1
    if args.backend != "none":
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP

        if args.backend == "chorus":
            import chorus.torch  # noqa: F401  registers the backend
        dist.init_process_group(args.backend, init_method="env://")
        rank, world = dist.get_rank(), dist.get_world_size()
    if args.batch % world:
        raise SystemExit(f"--batch {args.batch} must be a multiple of {world} ranks")

    torch.manual_seed(0)  # the same initial weights everywhere
    model = build_model(args.dim, args.hidden, args.depth, args.out)
    if args.backend != "none":
        model = DDP(model)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    per = args.batch // world
    t0 = time.time()
    for step in range(args.steps):
        x, y = batch(step, args.batch, args.dim, args.out)
        xs, ys = x[rank * per:(rank + 1) * per], y[rank * per:(rank + 1) * per]
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(xs), ys)
        loss.backward()  # DDP averages the gradients over ranks here
        opt.step()
        if rank == 0 and (step % 10 == 0 or step == args.steps - 1):
            print(f"step {step:3d} loss {loss.item():.6f}", flush=True)
    elapsed = time.time() - t0
    net = model.module if args.backend != "none" else model
    total, digest = checksum(net)
    if rank == 0:
        print(f"backend {args.backend}, {world} rank(s), {args.steps} steps in {elapsed:.2f} s: "
              f"weights sum {total:.9f} sha256 {digest}", flush=True)
        if args.save:
            torch.save([p.detach().clone() for p in net.parameters()], args.save)
    if args.backend != "none":
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
