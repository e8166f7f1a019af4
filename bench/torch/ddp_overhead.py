"""One run of the DDP-overhead benchmark (bench/torch/ddp_overhead.sh runs the rounds):

    chorusrun -n 4 --torch-env -- python3 bench/torch/ddp_overhead.py --mode chorus|gloo|floor

A 2-layer MLP (2048 -> 2048 -> 2048, tanh: 8.4M parameters) trained with
DistributedDataParallel, batch 64 per rank, torch.set_num_threads(1). --mode gloo or
chorus: the gradients are averaged by that backend (DDP's default all-reduce hook). --mode
floor: the same job on a gloo group with a comm hook that returns the gradients untouched
(no exchange at all): what the step costs without communication, the floor that a backend's
overhead is measured from. Every rank times each step from a barrier; the step's time is
the slowest rank's. Rank 0 prints one JSON record (median and quartiles over --steps steps
after --warmup) and with --save writes the final weights.
"""

import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def noop_hook(state, bucket):
    fut = torch.futures.Future()
    fut.set_result(bucket.buffer())
    return fut


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", required=True, choices=["floor", "gloo", "chorus"])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--batch", type=int, default=64, help="per rank")
    ap.add_argument("--width", type=int, default=2048)
    ap.add_argument("--hook", default="", choices=["", "fp16"],
                    help="fp16: DDP's fp16_compress_hook")
    ap.add_argument("--json")
    ap.add_argument("--round", type=int, default=0)
    ap.add_argument("--save")
    a = ap.parse_args()
    torch.set_num_threads(1)
    backend = "gloo" if a.mode == "floor" else a.mode
    if backend == "chorus":
        import chorus.torch  # noqa: F401  registers the backend
    dist.init_process_group(backend, init_method="env://")
    rank, n = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    w = a.width
    model = DDP(nn.Sequential(nn.Linear(w, w), nn.Tanh(), nn.Linear(w, w)))
    if a.mode == "floor":
        model.register_comm_hook(None, noop_hook)
    elif a.hook == "fp16":
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        model.register_comm_hook(dist.group.WORLD, default_hooks.fp16_compress_hook)
    params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    times = []
    for step in range(a.warmup + a.steps):
        g = torch.Generator().manual_seed(step * 1000 + rank)
        x = torch.randn(a.batch, w, generator=g)
        y = torch.randn(a.batch, w, generator=g)
        dist.barrier()
        t0 = time.perf_counter()
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        dt = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
        dist.all_reduce(dt, op=dist.ReduceOp.MAX)
        if step >= a.warmup:
            times.append(float(dt) * 1e3)
    q = statistics.quantiles(times, n=4)
    rec = dict(kind="ddp_overhead", mode=a.mode, hook=a.hook or "allreduce", round=a.round,
               ranks=n, params=params, batch_per_rank=a.batch, steps=a.steps,
               step_ms=statistics.median(times), q1_ms=q[0], q3_ms=q[2],
               torch=torch.__version__)
    if rank == 0:
        print(json.dumps(rec), flush=True)
        if a.json:
            with open(a.json, "a") as f:
                f.write(json.dumps(rec) + "\n")
        if a.save:
            torch.save([p.detach().clone() for p in model.parameters()], a.save)
    # Gloo's teardown can hang in destroy_process_group with 4 ranks (bench_torch.py): meet
    # once more and leave.
    dist.barrier()
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
