"""DDP training that loses a rank, goes on in the same processes, and grows back (issue 39).

    chorusrun -n 4 --torch-env --on-failure continue -- python3 examples/torch/elastic_ddp.py
    chorusrun -n 4 --torch-env -- python3 examples/torch/elastic_ddp.py --undisturbed

Four ranks train a small MLP with DistributedDataParallel over the chorus backend for 40
steps. Every step draws the same global batch of 48 samples everywhere (seeded by the step)
and each rank takes the samples i with i % size == rank; its loss is its samples' squared
error times size / 48, so DDP's average is the gradient of the whole batch at any size and
the run does not depend on how many ranks share it. At step 10 rank 3 exits without a word.
The others' backward raises; each calls chorus.torch.shrink on its group, rebuilds DDP over
the 3 survivors, takes rank 0's weights and step (a call that failed on one rank may have
completed on another), and goes on. At step 20 rank 0 makes an id with
chorus.torch.unique_id() and starts a new process (this script with --join), the three call
chorus.torch.grow, the new one chorus.torch.join; DDP over the 4 broadcasts rank 0's
weights and rank 0 broadcasts the step; all four finish. Rank 0 prints the final loss, and
with --save FILE writes it (and the weights' checksum) for comparison with --undisturbed.
"""

import argparse
import os
import subprocess
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import chorus.torch as ct

GLOBAL_BATCH = 48  # divisible by 3 and 4


def say(text):
    """One write per line: the new process shares rank 0's output."""
    sys.stdout.write(text + "\n")
    sys.stdout.flush()
DIM, HIDDEN, OUT = 32, 64, 8


def build_model():
    torch.manual_seed(7)
    return nn.Sequential(nn.Linear(DIM, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, HIDDEN),
                         nn.Tanh(), nn.Linear(HIDDEN, OUT))


def batch(step):
    g = torch.Generator().manual_seed(1000 + step)
    x = torch.randn(GLOBAL_BATCH, DIM, generator=g)
    w = torch.linspace(-1, 1, DIM * OUT).reshape(DIM, OUT)
    y = torch.tanh(x @ w) + 0.01 * torch.randn(GLOBAL_BATCH, OUT, generator=g)
    return x, y


def full_loss(module, step):
    x, y = batch(step)
    with torch.no_grad():
        return float(((module(x) - y) ** 2).sum() / GLOBAL_BATCH)


def train_step(ddp, opt, step, rank, size):
    x, y = batch(step)
    mine = torch.arange(rank, GLOBAL_BATCH, size)
    opt.zero_grad(set_to_none=True)
    loss = ((ddp(x[mine]) - y[mine]) ** 2).sum() * size / GLOBAL_BATCH
    loss.backward()
    opt.step()


def share_state(module, pg, step):
    """Rank 0's weights and step to every rank of pg (DDP's constructor broadcasts the
    weights too; the step goes here)."""
    for p in module.parameters():
        ct.broadcast(p.data, pg)
    s = torch.tensor([step], dtype=torch.int64)
    ct.broadcast(s, pg)
    return int(s[0])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--lose-at", type=int, default=10)
    ap.add_argument("--grow-at", type=int, default=20)
    ap.add_argument("--undisturbed", action="store_true")
    ap.add_argument("--save", help="rank 0 writes the final loss here")
    ap.add_argument("--join", nargs=3, metavar=("HEX_ID", "SIZE", "RANK"),
                    help="a new process: join a grow (started by rank 0)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    module = build_model()
    opt = torch.optim.SGD(module.parameters(), lr=0.05)

    if args.join:
        uid, size, me = bytes.fromhex(args.join[0]), int(args.join[1]), int(args.join[2])
        pg = ct.join(uid, size, me, timeout=60)
        ddp = DDP(module, process_group=pg)
        step = share_state(module, pg, 0)
        say(f"new rank {me}: joined {size} ranks, resuming at step {step}")
        rank = me
        grown = True
    else:
        dist.init_process_group("chorus", init_method="env://")
        pg = dist.group.WORLD
        rank, size = dist.get_rank(), dist.get_world_size()
        ddp = DDP(module, process_group=pg)
        step = 0
        grown = False
    first_rank = rank
    joiner = None
    lost = []
    while step < args.steps:
        if not args.undisturbed and first_rank == 3 and not args.join and step == args.lose_at:
            os._exit(0)  # rank 3 is gone without a word
        try:
            train_step(ddp, opt, step, rank, size)
            step += 1
        except RuntimeError as e:
            say(f"rank {first_rank}: step {step} failed: {str(e).splitlines()[0][:160]}")
            pg = ct.shrink(pg)
            rank, size = pg.rank(), pg.size()
            ddp = DDP(module, process_group=pg)
            step = share_state(module, pg, step)
            say(f"rank {first_rank}: shrunk to {size} ranks, now rank {rank}, resuming at "
                f"step {step}")
            continue
        if not args.undisturbed and not grown and step == args.grow_at and size < 4:
            uid = ct.unique_id() if rank == 0 else None
            if rank == 0:
                env = {k: v for k, v in os.environ.items()
                       if not k.startswith("CHORUS_UNIQUE") and k not in
                       ("RANK", "WORLD_SIZE", "LOCAL_RANK", "CHORUS_RANK", "CHORUS_WORLD_SIZE")}
                joiner = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--join",
                                           uid.hex(), str(4), str(size)] +
                                          (["--save", args.save + ".joiner"] if args.save else []),
                                          env=env)
            pg = ct.grow(pg, 4 - size, uid)
            rank, size = pg.rank(), pg.size()
            ddp = DDP(module, process_group=pg)
            step = share_state(module, pg, step)
            grown = True
            say(f"rank {first_rank}: grown to {size} ranks at step {step}")
    loss = full_loss(module, args.steps)
    say(f"rank {first_rank}: done: {args.steps} steps on {size} ranks, final loss {loss:.6f}")
    if rank == 0 and args.save:
        with open(args.save, "w") as f:
            f.write(f"{loss:.9f}\n")
    if joiner is not None:
        joiner.wait(timeout=120)
        if joiner.returncode != 0:
            say(f"rank 0: the new process ended with {joiner.returncode}")
            sys.exit(1)
    sys.exit(0)


if __name__ == "__main__":
    main()
