"""The torch.distributed "chorus" backend refuses bad arguments before touching memory
(issue 36), on 1-4 ranks with env:// variables (chorusrun --torch-env; tests/python/run.sh
args):

    /usr/bin/python3 tests/python/test_torch_args.py

Every rank makes the same bad call, and each must raise RuntimeError on the calling rank
with "chorus", the operation and "rank R" in the message, at once: no rank may hang (the
job's timeout) and the group must still work after each refusal (a checked all_reduce and
a checked all_to_all_single follow every case). The cases: all_to_all_single split sizes
that add up to less or more than the tensor, a list of the wrong length, a negative size, a
size longer than the tensor (on the input and the output side), equal splits of a first
dimension that world_size does not divide, a 0-dimensional tensor, mixed dtypes; send and
recv with a negative tag or a peer outside the group, sizes that differ between a send and
its receive, tags that never meet (and messages taken by tag and from any source); and
wrong list lengths, sizes and
dtypes in all_gather, reduce_scatter, all_to_all, _all_gather_base, broadcast, reduce,
gather and scatter; an uneven all_gather and an all_to_all_single whose sizes disagree
between ranks (a mismatch, reported on every rank), and an all_to_all_single and a gather
where one rank contradicts rank 0 alone (on one host: the arena, every rank raises).
Under AddressSanitizer (tests/python/asan.sh) a check that let a bad split through shows
as a heap-buffer-overflow. Prints "N passed, 0 failed" per rank; exit 1 on any failure.
"""

import datetime
import os
import sys
import warnings

import torch
import torch.distributed as dist

import chorus.torch  # noqa: F401  registers the backend

# _all_gather_base and _reduce_scatter_base are called on purpose (the backend's methods).
warnings.filterwarnings("ignore", message=".*is a private function")

dist.init_process_group("chorus", init_method="env://", rank=int(os.environ["RANK"]),
                        world_size=int(os.environ["WORLD_SIZE"]),
                        timeout=datetime.timedelta(seconds=60))
rank, n = dist.get_rank(), dist.get_world_size()
PASSED = FAILED = 0
ROWS = 4 * n
# The group's own methods reach the backend's checks where torch.distributed's functions
# would refuse first.
pg = dist.distributed_c10d._get_default_group()


def gather_opts(root):
    o = dist.GatherOptions()
    o.rootRank = root
    return o


def scatter_opts(root):
    o = dist.ScatterOptions()
    o.rootRank = root
    return o  # the first dimension of the tensors that are split


def check(cond, what):
    global PASSED, FAILED
    if cond:
        PASSED += 1
    else:
        FAILED += 1
        print(f"FAIL rank {rank}: {what}", flush=True)


def still_works(after):
    """The group is usable after a refusal: an all_reduce and an all_to_all_single."""
    t = torch.full((3,), float(rank + 1))
    dist.all_reduce(t)
    check(torch.equal(t, torch.full((3,), float(n * (n + 1) // 2))), f"all_reduce after {after}")
    src = torch.arange(2 * n, dtype=torch.float32) + 100 * rank
    out = torch.zeros(2 * n)
    dist.all_to_all_single(out, src)
    want = torch.cat([torch.arange(2 * rank, 2 * rank + 2, dtype=torch.float32) + 100 * r
                      for r in range(n)])
    check(torch.equal(out, want), f"all_to_all_single after {after}")


def refused(what, op, fn, *words):
    """fn() must raise RuntimeError naming chorus, op, this rank and every one of words."""
    try:
        fn()
    except RuntimeError as e:
        msg = str(e)
        ok = "chorus" in msg and op in msg and f"rank {rank}" in msg and all(
            w in msg for w in words)
        check(ok, f"{what}: the message must name chorus, {op!r}, rank {rank} and "
                  f"{list(words)}: {msg[:300]}")
    except Exception as e:  # noqa: BLE001
        check(False, f"{what}: raised {type(e).__name__}, not RuntimeError: {e}")
    else:
        check(False, f"{what}: accepted")
    still_works(what)


def a2a(in_splits, out_splits, rows_in=ROWS, rows_out=ROWS, dtype_out=torch.float32):
    src = torch.arange(rows_in * 2, dtype=torch.float32).reshape(rows_in, 2)
    out = torch.zeros(rows_out, 2, dtype=dtype_out)
    return lambda: dist.all_to_all_single(out, src, output_split_sizes=out_splits,
                                          input_split_sizes=in_splits)


A2A = "all_to_all_single"
even = [4] * n
# First, the call that would read and write past both tensors if it were let through: every
# rank sends ROWS + 1 rows to itself, a consistent exchange the library would carry out
# (under ASan a heap-buffer-overflow; without, a corrupted heap).
past = [ROWS + 1 if p == rank else 0 for p in range(n)]
refused("splits past the end, to self", A2A, a2a(past, past), "more than")
# Split sizes that add up to less than the tensor.
refused("input splits short", A2A, a2a([1] * n, even), "input split sizes", "add up to")
refused("output splits short", A2A, a2a(even, [1] * n), "output split sizes", "add up to")
# A list of the wrong length (world_size + 1 entries, the same sum).
refused("input splits too many", A2A, a2a(even[:-1] + [3, 1], even), "entries")
refused("output splits too many", A2A, a2a(even, even[:-1] + [3, 1]), "entries")
if n > 1:
    refused("input splits too few", A2A, a2a(even[:-1], even), "entries")
# A negative size, the sum still right.
negative = [-1] + [0] * (n - 2) + [ROWS + 1] if n > 1 else [-1]
refused("negative input split", A2A, a2a(negative, even), "input split size 0 is negative")
refused("negative output split", A2A, a2a(even, negative), "output split size 0 is negative")
# One size longer than the whole tensor (what would read or write past its end).
refused("input split past the end", A2A, a2a([ROWS + 1] + [0] * (n - 1), even), "more than")
refused("output split past the end", A2A, a2a(even, [0] * (n - 1) + [ROWS + 1]), "more than")
refused("huge input split", A2A, a2a([2 ** 62] * n, even), "more than")
# Splits given on one side only: the other side's equal blocks must divide its rows.
if n > 1:
    refused("equal output blocks of indivisible rows", A2A,
            a2a(even, [], rows_out=ROWS + 1), "multiple of world_size")
    refused("equal splits of indivisible rows", A2A,
            a2a([], [], rows_in=ROWS + 1, rows_out=ROWS + 1), "multiple of world_size")
refused("equal splits of unequal sizes", A2A, a2a([], [], rows_out=ROWS + n), "same size")
refused("all_to_all_single of a 0-dimensional tensor", A2A,
        lambda: dist.all_to_all_single(torch.zeros(()), torch.zeros(())), "0-dimensional")

# Tags (matched as Gloo matches them, on the group's tagged communicator): a negative tag
# and a peer outside the group are refused; messages are taken by tag whatever the order
# sent, and by a receive from any source; a size that differs between the two ends raises a
# mismatch on both; a send and a receive whose tags never meet both raise at the group's
# timeout, naming peer and tag (on a group of its own with a 2 s timeout). torch 2.x itself
# refuses a send to self, so the exchanges go round a ring.
peer, prev = (rank + 1) % n, (rank - 1) % n
refused("irecv with tag -1", "recv", lambda: dist.irecv(torch.ones(2), src=peer, tag=-1),
        "tag -1")
refused("send to rank world_size", "send", lambda: dist.send(torch.ones(2), dst=n),
        f"peer {n}")
if n > 1:
    got1, got2 = torch.zeros(2), torch.zeros(3)
    ws = [dist.isend(torch.full((2,), float(rank)), dst=peer, tag=1),
          dist.isend(torch.full((3,), rank + 0.5), dst=peer, tag=2)]
    dist.recv(got2, src=prev, tag=2)  # the second message sent, taken first
    dist.recv(got1, src=prev, tag=1)
    for w in ws:
        w.wait()
    check(torch.equal(got1, torch.full((2,), float(prev))) and
          torch.equal(got2, torch.full((3,), prev + 0.5)), "send/recv taken by tag")
    got = torch.zeros(4)
    s = dist.isend(torch.full((4,), float(rank)), dst=peer, tag=3)
    w = dist.irecv(got, tag=3)  # any source
    w.wait()
    s.wait()
    check(w._source_rank() == prev and torch.equal(got, torch.full((4,), float(prev))),
          f"irecv from any source: source {w._source_rank()}, {got.tolist()}")

    def raises(work, what, *words):
        try:
            work.wait()
        except RuntimeError as e:
            msg = str(e)
            check("chorus" in msg and f"rank {rank}" in msg and all(x in msg for x in words),
                  f"{what}: the message must name chorus, rank {rank} and {list(words)}: "
                  f"{msg[:300]}")
        else:
            check(False, f"{what}: completed")

    def sizes_differ():
        s = dist.isend(torch.ones(2), dst=peer, tag=4)
        try:
            dist.recv(torch.zeros(3), src=prev, tag=4)
        finally:
            raises(s, "send of 2 elements to a receive of 3", "mismatch", "3 x float32")
    refused("recv of 3 elements from a send of 2", "recv", sizes_differ, "mismatch",
            "2 x float32")

    def tags_never_meet():
        g = dist.new_group(backend="chorus", timeout=datetime.timedelta(seconds=2))
        s = dist.isend(torch.ones(2), dst=peer, tag=5, group=g)
        try:
            dist.recv(torch.zeros(2), src=prev, tag=6, group=g)
        finally:
            raises(s, "send under tag 5 that nothing receives", "tag 5", f"rank {peer}",
                   "timeout")
            # Every rank's deadlines have passed before any leaves g: a rank that left
            # first would fail the others' pending calls as a lost peer instead.
            dist.barrier()
            dist.destroy_process_group(g)
    refused("recv under tag 6 while the peer sends tag 5", "recv", tags_never_meet, "tag 6",
            "timeout", "held here: tag 5")

# The other operations' lists, sizes and dtypes.
refused("all_gather of world_size + 1 outputs", "allgather",
        lambda: dist.all_gather([torch.zeros(2) for _ in range(n + 1)], torch.ones(2)),
        "world_size")
# This rank's own output must hold its input (the others may differ: an uneven all_gather).
refused("all_gather of a short output for this rank", "allgather",
        lambda: dist.all_gather([torch.zeros(1 if r == rank else 2) for r in range(n)],
                                torch.ones(2)), "elements")
# Uneven all_gather whose output sizes disagree across ranks: allgatherv's counts differ, a
# mismatch on every rank (each rank expects rank 0 to send 2 + its own rank elements).
# A mismatch fails the communicator it happens on (chorus.h), so each such case runs on a
# group of its own, dropped after it.
def on_new_group(fn):
    def run():
        g = dist.new_group(backend="chorus")
        try:
            fn(g)
        finally:
            dist.destroy_process_group(g)
    return run


if n > 1:
    refused("all_gather with output sizes that disagree across ranks", "allgather",
            on_new_group(lambda g: dist.all_gather(
                [torch.zeros(2 + rank if r == 0 else 1) for r in range(n)],
                torch.ones(2 + rank if rank == 0 else 1), group=g)), "mismatch")
# gather and scatter: a root outside the group; lists on the wrong ranks or of the wrong
# length (made bad on every rank, so that every rank refuses before any data moves).
refused("gather to root world_size", "gather",
        lambda: pg.gather([], [torch.ones(2)], gather_opts(n)).wait(), f"root {n}")
refused("scatter from root world_size", "scatter",
        lambda: pg.scatter([torch.zeros(2)], [], scatter_opts(n)).wait(), f"root {n}")
refused("gather with world_size + 1 outputs on the root, lists elsewhere", "gather",
        lambda: pg.gather([[torch.zeros(2) for _ in range(n + 1 if rank == 0 else n)]],
                          [torch.ones(2)], gather_opts(0)).wait(),
        "world_size" if rank == 0 else "only the root")
refused("scatter with a short input on the root, lists elsewhere", "scatter",
        lambda: pg.scatter([torch.zeros(2)],
                           [[torch.ones(1 if rank == 0 and r == n - 1 else 2) for r in range(n)]],
                           scatter_opts(0)).wait(),
        "elements" if rank == 0 else "only the root")
refused("gather of mixed dtypes on the root, lists elsewhere", "gather",
        lambda: pg.gather([[torch.zeros(2, dtype=torch.float64 if rank == 0 else torch.float32)
                            for _ in range(n)]], [torch.ones(2)], gather_opts(0)).wait(),
        "not Float" if rank == 0 else "only the root")
# all_to_all_single whose splits are right locally but disagree between ranks: each rank
# sends one row more to its right neighbour and one fewer to the next than they expect.
if n > 2:
    skew = [4 + (1 if p == (rank + 1) % n else -1 if p == (rank + 2) % n else 0)
            for p in range(n)]
    src, out = torch.zeros(ROWS, 2), torch.zeros(ROWS, 2)
    refused("all_to_all_single splits that disagree between ranks", "alltoallv",
            on_new_group(lambda g: dist.all_to_all_single(
                out, src, output_split_sizes=even, input_split_sizes=skew, group=g)),
            "mismatch")
# One rank contradicts rank 0 alone, the others agree with everyone. On one host (these
# tests) the calls run on the shared arena, where every rank compares every rank's counts
# before data moves, so every rank raises, uninvolved ones too (lib/arena/arena_v.c).
if n > 2:
    odd_splits = [4] * n
    if rank == n - 1:
        odd_splits[0], odd_splits[1] = 5, 3
    refused("all_to_all_single: the last rank sends rank 0 a row more, rank 1 one less",
            "alltoallv", on_new_group(lambda g: dist.all_to_all_single(
                torch.zeros(ROWS, 2), torch.zeros(ROWS, 2), output_split_sizes=even,
                input_split_sizes=odd_splits, group=g)), "mismatch")

    def gather_odd(g):
        # The group's own gather, whose root has no size of the others' to check against.
        gpg = dist.distributed_c10d._get_default_group() if g is None else g
        outs = [[torch.zeros(2) for _ in range(n)]] if rank == 0 else []
        gpg.gather(outs, [torch.ones(3 if rank == n - 1 else 2)], gather_opts(0)).wait()
    refused("gather: the last rank sends 3 elements where the root expects 2", "gather",
            on_new_group(gather_odd), "mismatch")
refused("reduce_scatter of world_size + 1 inputs", "reduce_scatter",
        lambda: dist.reduce_scatter(torch.zeros(2), [torch.ones(2) for _ in range(n + 1)]),
        "world_size")
refused("reduce_scatter of a short input", "reduce_scatter",
        lambda: dist.reduce_scatter(torch.zeros(2), [torch.ones(1) for _ in range(n)]),
        "elements")
refused("all_to_all of world_size + 1 tensors", "all_to_all",
        lambda: dist.all_to_all([torch.zeros(1) for _ in range(n + 1)],
                                [torch.ones(1) for _ in range(n + 1)]), "world_size")
refused("_all_gather_base of a short output", "_allgather_base",
        lambda: dist._all_gather_base(torch.zeros(2 * n - 1), torch.ones(2)), "elements")
refused("_reduce_scatter_base of a short input", "_reduce_scatter_base",
        lambda: dist._reduce_scatter_base(torch.zeros(2), torch.ones(2 * n - 1)), "elements")
refused("broadcast of two tensors", "broadcast",
        lambda: dist.distributed_c10d._get_default_group().broadcast(
            [torch.ones(1), torch.ones(1)], dist.BroadcastOptions()).wait(), "one tensor")
refused("broadcast from root world_size", "broadcast",
        lambda: dist.broadcast(torch.ones(1), src=n), f"root {n}")
refused("reduce to root world_size", "reduce",
        lambda: dist.reduce(torch.ones(1), dst=n), f"root {n}")

# Mixed dtypes: torch.distributed refuses them before the backend, so the group's own
# methods are called here to reach its checks.
refused("alltoall_base of mixed dtypes", A2A,
        lambda: pg.alltoall_base(torch.zeros(ROWS, dtype=torch.float64), torch.zeros(ROWS), even,
                                 even, dist.AllToAllOptions()).wait(), "not Float")
refused("allgather of mixed dtypes", "allgather",
        lambda: pg.allgather([[torch.zeros(2, dtype=torch.float64) for _ in range(n)]],
                             [torch.ones(2)]).wait(), "not Float")
refused("alltoall of mixed dtypes", "all_to_all",
        lambda: pg.alltoall([torch.zeros(1) for _ in range(n)],
                            [torch.ones(1, dtype=torch.int64)] +
                            [torch.ones(1) for _ in range(n - 1)],
                            dist.AllToAllOptions()).wait(), "not Long")
refused("allreduce_coalesced of mixed dtypes", "allreduce_coalesced",
        lambda: pg.allreduce_coalesced([torch.ones(1), torch.ones(1, dtype=torch.int32)],
                                       dist.AllreduceCoalescedOptions()).wait(), "not Float")

print(f"rank {rank} ({n} ranks): {PASSED} passed, {FAILED} failed", flush=True)
dist.destroy_process_group()
sys.exit(1 if FAILED else 0)
