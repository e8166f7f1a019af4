"""A small model trained with FSDP2 (torch.distributed.fsdp.fully_shard) on a CPU device
mesh, the backend chosen by flag (torch 2.x):

    chorusrun -n 4 --torch-env -- python3 examples/torch/fsdp_train.py --backend chorus
    chorusrun -n 4 --torch-env -- python3 examples/torch/fsdp_train.py --backend gloo

Each layer's parameters are sharded over the ranks: the forward pass gathers them
(all_gather_into_tensor, coalesced), the backward pass reduce-scatters the gradients
(reduce_scatter_tensor). Every step draws the same global batch everywhere (seeded by the
step) and each rank trains on its slice. Prints the loss every 10 steps and a checksum of
the full final weights (gathered from the shards); --save FILE writes them (rank 0), so
that two backends' runs can be compared.
"""

import argparse
import hashlib
import time

import torch
import torch.distributed as dist
import torch.nn as nn

# The same model and data as the DDP example next to this file (its directory is on
# sys.path when this file runs as a script).
from ddp_train import batch, build_model


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", default="chorus", choices=["chorus", "gloo"])
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--batch", type=int, default=64, help="global batch")
    p.add_argument("--dim", type=int, default=32)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--depth", type=int, default=3)
    p.add_argument("--save", help="write the final full weights here (rank 0)")
    a = p.parse_args()

    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    if a.backend == "chorus":
        import chorus.torch  # noqa: F401  registers the backend
    dist.init_process_group(a.backend)
    rank, n = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh("cpu", (n,))

    torch.manual_seed(0)
    model = build_model(a.dim, a.hidden, a.depth, 1)
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    per = a.batch // n
    t0 = time.perf_counter()
    for step in range(a.steps):
        x, y = batch(step, a.batch, a.dim, 1)
        xs, ys = x[rank * per:(rank + 1) * per], y[rank * per:(rank + 1) * per]
        loss = nn.functional.mse_loss(model(xs), ys)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 10 == 0 or step == a.steps - 1:
            lt = loss.detach().clone()
            dist.all_reduce(lt)
            if rank == 0:
                print(f"step {step:3d} loss {float(lt) / n:.6f}", flush=True)
    dt = time.perf_counter() - t0
    full = [p.full_tensor().detach().clone() for p in model.parameters()]
    if rank == 0:
        h = hashlib.sha256(b"".join(t.numpy().tobytes() for t in full)).hexdigest()[:16]
        print(f"backend {a.backend}, {n} rank(s), FSDP2 fully_shard, {a.steps} steps in "
              f"{dt:.2f} s: weights sum {float(sum(t.double().sum() for t in full)):.9f} "
              f"sha256 {h}", flush=True)
        if a.save:
            torch.save(full, a.save)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
