"""One backend's side of bench/torch/run.sh, on every rank (chorusrun --torch-env):

    bench_torch.py --backend chorus|gloo [--sizes 4K:256M] [--steps 10] [--json FILE]

1. torch.distributed.all_reduce (float32, SUM) bus bandwidth from 4 KiB to 256 MiB, x4 per
   step: the median time of each size's iterations (the slowest rank's), busbw = 2 (n-1)/n
   x bytes / time, as nccl-tests counts it. With chorus, each size again on a tensor from
   chorus.torch.empty (registered memory), with how many calls read the peers' buffers in
   place (chorus.torch.mem_stats).
2. A DDP training step of a 25M-parameter MLP (1024-4096-4096-1024, batch 8 per rank), whose
   time is dominated by the 100 MB gradient exchange: ms per step (median of --steps), the
   same step under no_sync() (no exchange), and the exchange's share of the step.
Rank 0 appends one JSON object per measurement to --json.
"""

import argparse
import json
import os
import sys
import statistics
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def parse_size(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(s[:-1]) * mult[s[-1]] if s[-1] in mult else int(s)


def slowest(t):
    x = torch.tensor([t], dtype=torch.float64)
    dist.all_reduce(x, op=dist.ReduceOp.MAX)
    return float(x)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", required=True)
    ap.add_argument("--sizes", default="4K:256M")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--json", default=None)
    ap.add_argument("--skip-ddp", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(1)
    if args.backend == "chorus":
        import chorus.torch  # registers the backend; chorus.torch.empty below
    dist.init_process_group(args.backend, init_method="env://")
    rank, n = dist.get_rank(), dist.get_world_size()
    out = open(args.json, "a") if rank == 0 and args.json else None

    def emit(rec):
        rec.update(backend=args.backend, ranks=n)
        if rank == 0:
            print(json.dumps(rec), flush=True)
            if out:
                out.write(json.dumps(rec) + "\n")
                out.flush()

    def time_allreduce(t, size):
        iters = max(3, min(200, int(2e8 // max(size, 1 << 16)) // 4))
        for _ in range(2):
            dist.all_reduce(t)
        times = []
        for _ in range(iters):
            dist.barrier()
            t0 = time.perf_counter()
            dist.all_reduce(t)
            times.append(slowest(time.perf_counter() - t0))
        med = statistics.median(times)
        return dict(bytes=size, iters=iters, time_us=med * 1e6,
                    busbw_gbs=2 * (n - 1) / n * size / med / 1e9)

    lo, hi = (parse_size(s) for s in args.sizes.split(":"))
    size = lo
    while size <= hi:
        emit(dict(kind="allreduce", **time_allreduce(torch.ones(size // 4), size)))
        if args.backend == "chorus":
            # The same call on a tensor from chorus.torch.empty (registered memory, issue
            # 38), with chorus_mem_stats around it: the calls that read every peer's buffer
            # in place (single copy) and the bytes read from peers' buffers. torch's
            # all_reduce works in place, which the library reads in place on 2 ranks from
            # 16 MiB and stages otherwise (lib/arena/arena_direct.c says why).
            reg = chorus.torch.empty((size // 4,), dtype=torch.float32)
            reg.zero_()
            c0, b0 = chorus.torch.mem_stats()
            rec = time_allreduce(reg, size)
            c1, b1 = chorus.torch.mem_stats()
            reg.fill_(rank + 1)  # and one checked call: 1 + 2 + ... + n everywhere
            dist.all_reduce(reg)
            if not bool((reg == n * (n + 1) // 2).all()):
                raise SystemExit(f"rank {rank}: the registered allreduce of {size} bytes is wrong")
            emit(dict(kind="allreduce_registered", single_copy_calls=c1 - c0,
                      calls=rec["iters"] + 2, peer_bytes_read=b1 - b0, **rec))
            chorus.torch.free(reg)
        size *= 4

    if args.skip_ddp:
        finish()
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(1024, 4096), nn.ReLU(), nn.Linear(4096, 4096), nn.ReLU(),
                              nn.Linear(4096, 1024)))
    params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x, y = torch.randn(8, 1024), torch.randn(8, 1024)

    def step(sync):
        opt.zero_grad()
        if sync:
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
        else:
            with model.no_sync():
                loss = nn.functional.mse_loss(model(x), y)
                loss.backward()
        opt.step()

    res = {}
    for sync in (True, False):
        for _ in range(2):
            step(sync)
        times = []
        for _ in range(args.steps):
            dist.barrier()
            t0 = time.perf_counter()
            step(sync)
            times.append(slowest(time.perf_counter() - t0))
        res[sync] = statistics.median(times)
    emit(dict(kind="ddp", params=params, step_ms=res[True] * 1e3, nosync_ms=res[False] * 1e3,
              exchange_share=max(0.0, 1 - res[False] / res[True])))
    finish()


def finish():
    # Gloo's teardown can hang in destroy_process_group (seen here with 4 ranks): every rank
    # meets once more and leaves without it.
    dist.barrier()
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
