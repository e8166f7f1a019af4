# Each rank posts, for every other rank: irecv(from it) then isend(to it), then waits for
# all (distributed_test's test_batch_isend_irecv_gloo without batch_isend_irecv). The two
# directions of a pair carry different sizes. Repeated ITERS times.
#   python3 p2p_crossed_mismatch.py gloo|chorus RANKS ITERS
# With chorus on 3 ranks, 1 iteration: about 1 run in 8 fails with a false
#   chorus: collective mismatch: rank 0: recv #1 (27 x float32) with rank 2, but rank 2
#   called send #1 (27 x float32) and recv (1 x float32)
# (loop it: for i in $(seq 20); do ...; done 2>&1 | grep -c mismatch).
import sys, tempfile, torch, torch.distributed as dist, torch.multiprocessing as mp
def run(rank, n, f, backend, iters):
    if backend == "chorus":
        import chorus.torch  # noqa: F401
    dist.init_process_group(backend, init_method="file://" + f, rank=rank, world_size=n)
    for it in range(iters):
        reqs = []
        for peer in range(n):
            if peer == rank:
                continue
            r = torch.full((peer + 1,) * 3, -1.0)
            reqs.append(dist.irecv(r, peer))
            reqs.append(dist.isend(torch.full((rank + 1,) * 3, float(rank)), peer))
        for q in reqs:
            q.wait()
    print(f"rank {rank}: {iters} rounds ok", flush=True)
    dist.destroy_process_group()
if __name__ == "__main__":
    backend, n, iters = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    mp.start_processes(run, args=(n, tempfile.mktemp(), backend, iters), nprocs=n,
                       start_method="fork")
