# TORCH_DISTRIBUTED_DEBUG=DETAIL: torch 2.x wraps every process group, a third-party
# backend's too, in a ProcessGroupWrapper that checks each collective across ranks and asks
# the backend for its sequence number (c10d::Backend::getSequenceNumberForGroup, set by
# setSequenceNumberForGroup); torch 1.13 wraps only gloo/nccl/ucc groups.
#   python3 debug_detail_seqnum.py gloo|chorus      (2 ranks)
import os, sys, tempfile, torch, torch.distributed as dist, torch.multiprocessing as mp
def run(rank, n, f, backend):
    if backend == "chorus":
        import chorus.torch  # noqa: F401
    dist.set_debug_level_from_env()
    dist.init_process_group(backend, init_method="file://" + f, rank=rank, world_size=n)
    t = torch.ones(4)
    try:
        dist.all_reduce(t)
        print(f"rank {rank}: world all_reduce ok", flush=True)
    except RuntimeError as e:
        print(f"rank {rank}: world all_reduce: {e}".splitlines()[0], flush=True)
    g = dist.new_group([0, 1])
    try:
        dist.all_reduce(t, group=g)
        print(f"rank {rank}: subgroup all_reduce ok", flush=True)
    except RuntimeError as e:
        print(f"rank {rank}: subgroup all_reduce: {e}".splitlines()[0], flush=True)
    dist.destroy_process_group()
if __name__ == "__main__":
    os.environ["TORCH_DISTRIBUTED_DEBUG"] = "DETAIL"
    mp.start_processes(run, args=(2, tempfile.mktemp(), sys.argv[1]), nprocs=2, start_method="fork")
