"""torch.distributed with backend="chorus", launched with env:// variables as torchrun sets
them (chorusrun --torch-env; tests/python/run.sh), on 1-4 ranks:

    /usr/bin/python3 tests/python/test_torch_backend.py [env|tcp|file FILE]

Every operation of the backend x each dtype, sync and async (work.wait(), is_completed(),
get_future()), on "chorus" (the default group) and on a "gloo" group of the same ranks: the
results must be identical where Gloo implements the operation, and equal to the expected
values computed here everywhere (integer-valued data, so every reduction is exact in any
order). Then non-contiguous tensors, errors as RuntimeError with Chorus's message, and a
second "chorus" group (new_group) working beside the first. The init method: env://
(default), tcp://MASTER_ADDR:MASTER_PORT, or file://FILE.
"""

import datetime
import os
import sys
import time

import torch
import torch.distributed as dist

import chorus.torch  # noqa: F401  registers the backend

how = sys.argv[1] if len(sys.argv) > 1 else "env"

if how == "tcp":
    init = f"tcp://{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}"
elif how == "file":
    init = "file://" + sys.argv[2]
else:
    init = "env://"
dist.init_process_group("chorus", init_method=init, rank=int(os.environ["RANK"]),
                        world_size=int(os.environ["WORLD_SIZE"]),
                        timeout=datetime.timedelta(seconds=60))
rank, n = dist.get_rank(), dist.get_world_size()
assert dist.get_backend() == "chorus", dist.get_backend()
gloo = dist.new_group(backend="gloo")

PASSED = FAILED = 0
GLOO_SKIPPED = {}  # operation -> (gloo's reason, dtypes)


def check(cond, what):
    global PASSED, FAILED
    if cond:
        PASSED += 1
    else:
        FAILED += 1
        print(f"FAIL rank {rank}: {what}", flush=True)


DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8,
          torch.int32, torch.int64]


def val(r, i):
    # 1..3, varying along a tensor (a block copied from the wrong offset shows) and across
    # ranks: exact sums and products on up to 4 ranks in every dtype.
    return 1 + (r * 5 + i) % 3


def data(r, shape, dtype):
    numel = 1
    for s in shape:
        numel *= s
    return torch.tensor([val(r, i) for i in range(numel)], dtype=dtype).reshape(shape)


def run(fn, group, async_op):
    """fn(group, async_op) -> Work or None; the result checked by the caller."""
    w = fn(group, async_op)
    if async_op and isinstance(w, torch._C.Future):  # all_gather_coalesced's
        w.wait()
        check(w.done(), "the Future is done after wait()")
    elif async_op:
        check(w is not None, "async_op=True returns a Work")
        fut = w.get_future() if group is None else None
        w.wait()
        # Only chorus's: on torch 2.x some of Gloo's Works do not say completed after wait().
        if group is not gloo:
            check(w.is_completed(), "is_completed() after wait()")
        if fut is not None:
            fut.wait()
            check(fut.done(), "the Future completes with the Work")


def flat(t):
    """A tensor, a list of them or a list of lists, as one list."""
    if not isinstance(t, list):
        return [t]
    return [x for e in t for x in flat(e)]


def both(name, make, op, expected, gloo_defined=True):
    """make() -> fresh tensors; op(tensors, group, async_op) runs the operation; the outputs
    (a list of tensors) must equal expected on chorus, and gloo's where gloo can."""
    for async_op in (False, True):
        t = make()
        run(lambda g, a: op(t, g, a), None, async_op)
        outs = flat(t)
        ok = len(outs) == len(expected) and all(
            o.dtype == e.dtype and torch.equal(o, e) for o, e in zip(outs, expected))
        check(ok, f"{name} async={async_op}: chorus {[o.tolist() for o in outs][:2]} "
                  f"expected {[e.tolist() for e in expected][:2]}")
        g = make()
        try:
            run(lambda gr, a: op(g, gr, a), gloo, async_op)
        except RuntimeError as e:
            opname, dtname = (name.split(" ") + [""])[:2]
            reason, dts = GLOO_SKIPPED.setdefault(opname, (str(e).splitlines()[0][:50], set()))
            dts.add(dtname)
            continue
        gouts = flat(g)
        check(not gloo_defined or all(torch.equal(a, b) for a, b in zip(outs, gouts)),
              f"{name} async={async_op}: chorus and gloo differ")


def rs_for(dt):
    """This rank's block of a reduce-scatter of data(r, [6 * n]) over every rank r."""
    return torch.tensor([sum(val(r, rank * 6 + i) for r in range(n)) for i in range(6)],
                        dtype=dt)


N = 11
R = dist.ReduceOp
for dt in DTYPES:
    tag = str(dt).replace("torch.", "")
    for rop, f in [(R.SUM, sum), (R.PRODUCT, None), (R.MIN, min), (R.MAX, max)]:
        def expect_red(i, f=f):
            vs = [val(r, i) for r in range(n)]
            if f is None:
                p = 1
                for v in vs:
                    p *= v
                return p
            return f(vs)
        exp = torch.tensor([expect_red(i) for i in range(N)], dtype=dt)
        both(f"all_reduce {tag} {rop}", lambda: data(rank, [N], dt),
             lambda t, g, a, rop=rop: dist.all_reduce(t, op=rop, group=g, async_op=a), [exp])
        exp_root = exp if rank == n - 1 else data(rank, [N], dt)
        both(f"reduce {tag} {rop}", lambda: data(rank, [N], dt),
             lambda t, g, a, rop=rop: dist.reduce(t, dst=n - 1, op=rop, group=g, async_op=a),
             [exp_root], gloo_defined=rank == n - 1)  # gloo scribbles on non-roots
    # AVG (Gloo has none in this torch): the sum divided by n, as Chorus defines it.
    if dt.is_floating_point:
        s = torch.tensor([sum(val(r, i) for r in range(n)) for i in range(N)], dtype=torch.float64)
        exp = (s / n).to(dt)
        t = data(rank, [N], dt)
        dist.all_reduce(t, op=R.AVG)
        check(torch.allclose(t.double(), exp.double(), rtol=1e-2 if torch.finfo(dt).bits == 16 else 1e-6),
              f"all_reduce {tag} AVG")
    both(f"broadcast {tag}", lambda: data(rank, [3, 4], dt),
         lambda t, g, a: dist.broadcast(t, src=n - 1, group=g, async_op=a),
         [data(n - 1, [3, 4], dt)])
    both(f"all_gather {tag}", lambda: [torch.zeros(5, dtype=dt) for _ in range(n)],
         lambda ts, g, a: dist.all_gather(ts, data(rank, [5], dt), group=g, async_op=a),
         [data(r, [5], dt) for r in range(n)])
    both(f"_all_gather_base {tag}", lambda: torch.zeros(5 * n, dtype=dt),
         lambda t, g, a: dist._all_gather_base(t, data(rank, [5], dt), group=g, async_op=a),
         [torch.cat([data(r, [5], dt) for r in range(n)])])
    rs_exp = torch.tensor([sum(val(r, rank * 6 + i) for r in range(n)) for i in range(6)],
                          dtype=dt)
    both(f"reduce_scatter {tag}", lambda: torch.zeros(6, dtype=dt),
         lambda t, g, a: dist.reduce_scatter(
             t, list(data(rank, [6 * n], dt).chunk(n)), group=g, async_op=a), [rs_exp])
    both(f"_reduce_scatter_base {tag}", lambda: torch.zeros(6, dtype=dt),
         lambda t, g, a: dist._reduce_scatter_base(t, data(rank, [6 * n], dt), group=g,
                                                   async_op=a), [rs_exp])
    # alltoall: rank r's block j (of 2 elements) goes to rank j.
    a_in = torch.tensor([(rank * 10 + j) % 100 for j in range(n) for _ in range(2)], dtype=dt)
    a_exp = torch.tensor([(r * 10 + rank) % 100 for r in range(n) for _ in range(2)], dtype=dt)
    both(f"all_to_all_single {tag}", lambda: torch.zeros(2 * n, dtype=dt),
         lambda t, g, a: dist.all_to_all_single(t, a_in, group=g, async_op=a), [a_exp])
    # Uneven splits: rank r sends j + 1 elements to rank j, so receives rank + 1 from each.
    in_splits = [j + 1 for j in range(n)]
    u_in = torch.cat([torch.full((j + 1,), (rank * 10 + j) % 100, dtype=dt) for j in range(n)])
    u_exp = torch.cat([torch.full((rank + 1,), (r * 10 + rank) % 100, dtype=dt)
                       for r in range(n)])
    both(f"all_to_all_single splits {tag}", lambda: torch.zeros((rank + 1) * n, dtype=dt),
         lambda t, g, a: dist.all_to_all_single(t, u_in, output_split_sizes=[rank + 1] * n,
                                                input_split_sizes=in_splits, group=g,
                                                async_op=a), [u_exp])
    both(f"all_to_all {tag}", lambda: [torch.zeros(j + 1, dtype=dt) for j in range(n)],
         lambda ts, g, a: dist.all_to_all(
             ts, [torch.full((rank + 1,), (rank * 10 + j) % 100, dtype=dt) for j in range(n)],
             group=g, async_op=a),
         [torch.full((j + 1,), (j * 10 + rank) % 100, dtype=dt) for j in range(n)])

# send / recv: a ring, then a pair, sync and async.
for dt in (torch.float32, torch.int64):
    if n > 1:
        right, left = (rank + 1) % n, (rank - 1) % n
        for a in (False, True):
            out, got = data(rank, [7], dt), torch.zeros(7, dtype=dt)
            if a:
                ws = [dist.irecv(got, src=left), dist.isend(out, dst=right)]
                for w in ws:
                    w.wait()
            elif rank % 2 == 0:
                dist.send(out, dst=right)
                dist.recv(got, src=left)
            else:
                dist.recv(got, src=left)
                dist.send(out, dst=right)
            check(torch.equal(got, data(left, [7], dt)), f"send/recv ring {dt} async={a}")
# irecv, a pause, then isend: the backend must not start the receive alone (Chorus runs the
# batch at the first wait), or both ranks wait in a recv whose send never starts.
if n > 1:
    right, left = (rank + 1) % n, (rank - 1) % n
    got = torch.zeros(3)
    w1 = dist.irecv(got, src=left)
    time.sleep(0.3)
    w2 = dist.isend(torch.full((3,), float(rank)), dst=right)
    w1.wait()
    w2.wait()
    check(torch.equal(got, torch.full((3,), float(left))), "irecv, pause, isend")
dist.barrier()
w = dist.barrier(async_op=True)
w.wait()

# Non-contiguous tensors are staged and written back.
m = data(rank, [4, 6], torch.float32).t()  # 6 x 4, not contiguous
dist.all_reduce(m)
check(torch.equal(m, torch.stack([data(r, [4, 6], torch.float32) for r in range(n)]).sum(0).t()),
      "all_reduce of a non-contiguous tensor")
b = torch.zeros(4, 6)[:, ::2]
if rank == 0:
    b.copy_(torch.arange(12.).reshape(4, 3))
dist.broadcast(b, src=0)
check(torch.equal(b, torch.arange(12.).reshape(4, 3)), "broadcast into a strided view")

# allreduce_coalesced (DDP-style flattening inside the backend)
ts = [data(rank, [3], torch.float32), data(rank, [2, 2], torch.float32)]
dist.all_reduce_coalesced(ts)
check(torch.equal(ts[1], torch.stack([data(r, [2, 2], torch.float32) for r in range(n)]).sum(0)),
      "all_reduce_coalesced")

# all_gather_coalesced: torch's layout is output_lists[r][i] = rank r's input i; one
# allgather of the inputs laid end to end inside. Gloo is the reference (torch 2.x warns that
# it is deprecated).
import warnings
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    for dt in (torch.float32, torch.int64):
        both(f"all_gather_coalesced {dt}",
             lambda: [[torch.zeros(3, dtype=dt), torch.zeros(2, 2, dtype=dt)]
                      for _ in range(n)],
             lambda ls, g, a: dist.all_gather_coalesced(
                 ls, [data(rank, [3], dt), data(rank + 7, [2, 2], dt)], group=g, async_op=a),
             # (rank + 7: the second tensor's values out of phase with the first's)
             [x for r in range(n) for x in (data(r, [3], dt), data(r + 7, [2, 2], dt))])

# gather and scatter to/from each root; an uneven all_gather (rank r contributes r + 1
# elements: allgatherv); Gloo is the reference where it has them.
for dt in (torch.float32, torch.int64, torch.uint8):
    for root in sorted({0, n - 1, n // 2}):
        both(f"gather {dt} root={root}",
             lambda: [torch.zeros(2, 3, dtype=dt) for _ in range(n)] if rank == root else [],
             lambda ts, g, a, root=root: dist.gather(data(rank, [2, 3], dt),
                                                     ts if rank == root else None, dst=root,
                                                     group=g, async_op=a),
             [data(r, [2, 3], dt) for r in range(n)] if rank == root else [])
        both(f"scatter {dt} root={root}", lambda: torch.zeros(4, dtype=dt),
             lambda t, g, a, root=root: dist.scatter(
                 t, [data(r + 7 * root, [4], dt) for r in range(n)] if rank == root else None,
                 src=root, group=g, async_op=a),
             [data(rank + 7 * root, [4], dt)])
    both(f"all_gather uneven {dt}", lambda: [torch.zeros(r + 1, dtype=dt) for r in range(n)],
         lambda ts, g, a: dist.all_gather(ts, data(rank, [rank + 1], dt), group=g, async_op=a),
         [data(r, [r + 1], dt) for r in range(n)])

# The tensor forms (torch 1.13 has them too), then what only torch 2.x calls: their
# coalesced forms through _coalescing_manager (FSDP) and the functional collectives that
# compiled code uses.
for dt in (torch.float32, torch.bfloat16, torch.int32):
    both(f"all_gather_into_tensor {dt}", lambda: torch.zeros(n, 4, dtype=dt),
         lambda t, g, a: dist.all_gather_into_tensor(t, data(rank, [4], dt), group=g, async_op=a),
         [torch.stack([data(r, [4], dt) for r in range(n)])])
    both(f"reduce_scatter_tensor {dt}", lambda: torch.zeros(6, dtype=dt),
         lambda t, g, a: dist.reduce_scatter_tensor(t, data(rank, [6 * n], dt), group=g,
                                                    async_op=a), [rs_for(dt)])
TORCH2 = int(torch.__version__.split(".")[0]) >= 2
if TORCH2:
    from torch.distributed.distributed_c10d import _coalescing_manager
    import torch.distributed._functional_collectives as fcol
    for a in (False, True):
        outs = [torch.zeros(n * 3), torch.zeros(n * 5, dtype=torch.int64)]
        ins = [data(rank, [3], torch.float32), data(rank, [5], torch.int64)]
        with _coalescing_manager(async_ops=a) as cm:
            for o, i in zip(outs, ins):
                dist.all_gather_into_tensor(o, i)
        if a:
            cm.wait()
        check(all(torch.equal(o, torch.cat([data(r, list(i.shape), i.dtype) for r in range(n)]))
                  for o, i in zip(outs, ins)), f"_coalescing_manager all_gather_into_tensor async={a}")
        routs = [torch.zeros(2), torch.zeros(4, dtype=torch.int32)]
        with _coalescing_manager(async_ops=a) as cm:
            for k, o in enumerate(routs):
                dist.reduce_scatter_tensor(o, data(rank, [o.numel() * n], o.dtype))
        if a:
            cm.wait()
        for o in routs:
            m = o.numel()
            want = torch.tensor([sum(val(r, rank * m + i) for r in range(n)) for i in range(m)],
                                dtype=o.dtype)
            check(torch.equal(o, want), f"_coalescing_manager reduce_scatter_tensor {o.dtype} async={a}")
        ars = [data(rank, [4], torch.float32), data(rank, [3], torch.float32)]
        with _coalescing_manager(async_ops=a) as cm:
            for t in ars:
                dist.all_reduce(t)
        if a:
            cm.wait()
        check(all(torch.equal(t, torch.stack([data(r, list(t.shape), t.dtype)
                                              for r in range(n)]).sum(0)) for t in ars),
              f"_coalescing_manager all_reduce async={a}")
    # Functional collectives: results as new tensors, waited on when used.
    wg = dist.group.WORLD
    x = data(rank, [5], torch.float32)
    y = fcol.all_reduce(x, "sum", wg)
    check(torch.equal(fcol.wait_tensor(y), torch.stack([data(r, [5], torch.float32)
                                                         for r in range(n)]).sum(0)),
          "functional all_reduce")
    y = fcol.all_gather_tensor(data(rank, [2, 3], torch.float32), 0, wg)
    check(torch.equal(fcol.wait_tensor(y), torch.cat([data(r, [2, 3], torch.float32)
                                                       for r in range(n)])),
          "functional all_gather_tensor")
    y = fcol.reduce_scatter_tensor(data(rank, [6 * n], torch.float32), "sum", 0, wg)
    check(torch.equal(fcol.wait_tensor(y), rs_for(torch.float32)), "functional reduce_scatter_tensor")
    y = fcol.broadcast(data(rank, [4], torch.int64), n - 1, wg)
    check(torch.equal(fcol.wait_tensor(y), data(n - 1, [4], torch.int64)), "functional broadcast")
    y = fcol.all_to_all_single(a_in.float(), None, None, wg)
    check(torch.equal(fcol.wait_tensor(y), a_exp.float()), "functional all_to_all_single")
    ys = fcol.all_reduce_coalesced([data(rank, [2], torch.float32), data(rank, [3], torch.float32)],
                                   "max", wg)
    check(all(torch.equal(fcol.wait_tensor(t), torch.stack([data(r, list(t.shape), t.dtype)
                                                            for r in range(n)]).amax(0))
              for t in ys), "functional all_reduce_coalesced max")

# Errors carry Chorus's message into Python.
try:
    dist.all_reduce(torch.ones(2), op=R.BAND)
    check(False, "BAND accepted")
except (RuntimeError, ValueError) as e:
    check("chorus" in str(e) and "SUM" in str(e), f"BAND refused with a clear message: {e}")
c = torch.ones(2, dtype=torch.complex64)  # torch hands it over as float32 pairs
dist.all_reduce(c)
check(torch.equal(c, torch.full((2,), complex(n, 0), dtype=torch.complex64)), "complex sum")
try:
    dist.all_reduce(torch.ones(2, dtype=torch.bool))
    check(False, "a bool reduction accepted")
except (RuntimeError, ValueError) as e:
    check("dtype" in str(e) and "chorus" in str(e), f"bool reduction refused: {e}")
if n > 1:
    g2 = dist.new_group(backend="chorus")
    x = torch.ones(5 if rank == 0 else 6)
    try:
        dist.all_reduce(x, group=g2)
        check(False, "a mismatched all_reduce succeeded")
    except RuntimeError as e:
        msg = str(e)
        # (under TORCH_DISTRIBUTED_DEBUG=DETAIL torch's wrapper finds it first: "ALLREDUCE")
        check("allreduce" in msg.lower() and "rank" in msg.lower(),
              f"mismatch raised with rank and operation: {msg[:200]}")
    # A second group of the same ranks works beside the default one.
    g3 = dist.new_group(backend="chorus")
    y = torch.full((3,), float(rank))
    dist.all_reduce(y, group=g3)
    check(torch.equal(y, torch.full((3,), float(sum(range(n))))), "a second chorus group")

# Reproducible groups (chorus.torch.Options): level 2 gives the correctly rounded sum, computed
# here with exact fractions; level 1 the rank-order fold, done here in float32 steps.
def f32_round(q):
    """The float32 nearest to the Fraction q, ties to even (no double rounding)."""
    import math
    import struct
    from fractions import Fraction
    if q == 0:
        return 0.0
    lo = struct.unpack("<f", struct.pack("<f", float(q)))[0]  # near q, maybe off by one ulp
    bits = struct.unpack("<i", struct.pack("<f", lo))[0]
    best = None
    for b in (bits - 1, bits, bits + 1):
        c = struct.unpack("<f", struct.pack("<i", b))[0]
        if math.isinf(c) or math.isnan(c):
            continue
        d = abs(Fraction(c) - q)
        if best is None or d < best[0] or (d == best[0] and b % 2 == 0):
            best = (d, b, c)
    return best[2]


def adversarial(r, count):
    g = torch.Generator().manual_seed(1234 + r)
    mant = torch.rand(count, generator=g, dtype=torch.float64) + 1.0
    exp = torch.randint(-60, 60, (count,), generator=g).double()
    sign = torch.where(torch.rand(count, generator=g) < 0.5, -1.0, 1.0).double()
    return (sign * mant * torch.pow(2.0, exp)).float()


try:
    chorus.torch.Options(reproducible=3)
    check(False, "Options(reproducible=3) accepted")
except ValueError:
    check(True, "Options(reproducible=3) refused")
for level in (1, 2):
    grp = dist.new_group(backend="chorus", pg_options=chorus.torch.Options(reproducible=level))
    count = 257
    x = adversarial(rank, count)
    dist.all_reduce(x, group=grp)
    ins = [adversarial(r, count) for r in range(n)]
    if level == 2:
        from fractions import Fraction
        want = torch.tensor([f32_round(sum(Fraction(float(t[i])) for t in ins))
                             for i in range(count)], dtype=torch.float32)
    else:
        want = ins[0].clone()
        for t in ins[1:]:
            want = want + t  # float32 + float32, rounded at each step
    check(torch.equal(x.view(torch.int32), want.view(torch.int32)),
          f"reproducible level {level}: all_reduce bytes equal the reference")
    dist.destroy_process_group(grp)

if rank == 0 and GLOO_SKIPPED:
    print("checked against expected values only where gloo refuses: " + "; ".join(
        f"{op} {'/'.join(sorted(d))} ({r})" for op, (r, d) in sorted(GLOO_SKIPPED.items())),
        flush=True)
# Registered memory (issue 38): a tensor from chorus.torch.empty, allreduced through the
# backend, equals the plain tensor's result. torch's all_reduce works in place, which reads
# the peers' buffers in place on 2 ranks from 16 MiB (arena_direct.c: smaller, and on 3+
# ranks, the staged path measured faster in place); there chorus.torch.mem_stats must show
# it. Then free and its errors.
big = 4 << 20  # 16 MiB of float32
reg = chorus.torch.empty((big,), dtype=torch.float32)
check(tuple(reg.shape) == (big,) and reg.dtype == torch.float32, "chorus.torch.empty's tensor")
plain = (1 + (rank * 5 + torch.arange(big, dtype=torch.int64)) % 3).to(torch.float32)
reg.copy_(plain)
calls0, bytes0 = chorus.torch.mem_stats()
dist.all_reduce(reg)
calls1, bytes1 = chorus.torch.mem_stats()
dist.all_reduce(plain)
check(torch.equal(reg, plain), "an allreduce of registered memory equals the plain one's")
check(float(reg[5]) == float(sum(val(r, 5) for r in range(n))), "registered allreduce value")
if n == 2 and os.environ.get("CHORUS_ARENA") != "0":
    check(calls1 == calls0 + 1 and bytes1 > bytes0,
          f"the backend read its peers' registered buffers in place ({calls0} -> {calls1})")
chorus.torch.free(reg)
try:
    chorus.torch.free(reg)
    check(False, "a second chorus.torch.free succeeded")
except ValueError:
    check(True, "a second free refused")

print(f"rank {rank} ({how}, {n} ranks): {PASSED} passed, {FAILED} failed", flush=True)
dist.destroy_process_group()
sys.exit(1 if FAILED else 0)
