# dist.all_gather_coalesced(output_tensor_lists, input_tensor_list): torch's layout is
# output_tensor_lists[rank][i] (one list per rank, each like the inputs; the docstring's
# example, gloo, distributed_test's _test_all_gather_coalesced_helper). Two cases on 2
# ranks: 3 inputs of different shapes (the layouts cannot be confused: an error if the
# backend wants another), and 2 inputs of one shape (as many inputs as ranks: a backend
# with the transposed layout [i][rank] accepts it and fills the outputs transposed).
#   python3 allgather_coalesced_layout.py gloo|chorus
import sys, tempfile, warnings, torch, torch.distributed as dist, torch.multiprocessing as mp
def run(rank, n, f, backend):
    if backend == "chorus":
        import chorus.torch  # noqa: F401
    warnings.simplefilter("ignore")
    dist.init_process_group(backend, init_method="file://" + f, rank=rank, world_size=n)
    for shapes in ([(1,), (2, 2), (3,)], [(2,)] * n):
        inputs = [torch.full(s, float(10 * rank + i)) for i, s in enumerate(shapes)]
        outputs = [[torch.zeros(s) for s in shapes] for _ in range(n)]    # [rank][i]
        try:
            dist.all_gather_coalesced(outputs, inputs)
            ok = all(torch.equal(outputs[r][i], torch.full(s, float(10 * r + i)))
                     for r in range(n) for i, s in enumerate(shapes))
            got = [[o.flatten()[0].item() for o in lst] for lst in outputs]
            print(f"rank {rank} {len(shapes)} inputs: "
                  + ("ok" if ok else f"WRONG VALUES {got}"), flush=True)
        except RuntimeError as e:
            print(f"rank {rank} {len(shapes)} inputs: {str(e).splitlines()[0]}", flush=True)
    dist.destroy_process_group()
if __name__ == "__main__":
    mp.start_processes(run, args=(2, tempfile.mktemp(), sys.argv[1]), nprocs=2,
                       start_method="fork")
