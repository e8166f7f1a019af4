"""The chorus Python package on every rank of a chorusrun job (tests/python/run.sh):

    chorusrun -n N -- /usr/bin/python3 tests/python/test_package.py [numpy|torch]

Every collective x dtype x op on numpy arrays (or CPU torch tensors), blocking and with
async_op=True, checked exactly: the values are small integers, so every sum, product, min,
max and average is exact in every dtype and in any reduction order, and every rank must end
with the same bytes. Then send/recv, split, errors raised as ChorusError with Chorus's
message, argument errors (non-contiguous, read-only, sizes), and abort of a request in
flight. Prints "N passed, 0 failed" per rank; exit 1 on any failure.
"""

import sys
import threading
import time

import chorus

KIND = sys.argv[1] if len(sys.argv) > 1 else "numpy"
if KIND == "torch":
    import torch
else:
    import numpy as np

PASSED = 0
FAILED = 0


def check(cond, what):
    global PASSED, FAILED
    if cond:
        PASSED += 1
    else:
        FAILED += 1
        print(f"FAIL rank {comm.rank}: {what}", flush=True)


DTYPES = ["int8", "uint8", "int32", "uint32", "int64", "uint64", "float16", "bfloat16",
          "float32", "float64"]
if KIND == "torch":
    # torch has no uint32/uint64 tensors.
    DTYPES = [d for d in DTYPES if d not in ("uint32", "uint64")]
else:
    DTYPES = [d for d in DTYPES if d != "bfloat16"]  # numpy has no bfloat16


def arr(values, dtype):
    if KIND == "torch":
        return torch.tensor(values, dtype=getattr(torch, dtype))
    return np.array(values, dtype=dtype)


def tolist(a):
    return [float(v) for v in (a.tolist() if KIND == "torch" else list(a))]


def value(rank, i):
    # 1..3: sums and products of up to 4 ranks stay exact in int8 and float16.
    return 1 + (rank * 7 + i * 3) % 3


def expect(op, i, n):
    vals = [value(r, i) for r in range(n)]
    if op == "sum":
        return float(sum(vals))
    if op == "prod":
        p = 1
        for v in vals:
            p *= v
        return float(p)
    if op == "min":
        return float(min(vals))
    if op == "max":
        return float(max(vals))
    return float(int(sum(vals) / n)) if not is_float_dt else sum(vals) / n


def same_everywhere(buf, what):
    """Every rank holds the same bytes (compared through an allgather of the bytes)."""
    if KIND == "torch":
        raw = buf.contiguous().view(torch.uint8).clone()
        allb = torch.zeros(raw.numel() * comm.size, dtype=torch.uint8)
    else:
        raw = np.frombuffer(np.ascontiguousarray(buf).tobytes(), dtype=np.uint8).copy()
        allb = np.zeros(raw.size * comm.size, dtype=np.uint8)
    comm.allgather(raw, allb)
    m = len(raw)
    first = tolist(allb[:m])
    check(all(tolist(allb[r * m:(r + 1) * m]) == first for r in range(comm.size)),
          f"{what}: ranks hold different bytes")


def close(a, b, dtype):
    if dtype in ("float16", "bfloat16"):
        return abs(a - b) <= 1e-2 * max(1.0, abs(b))
    if dtype in ("float32", "float64"):
        return abs(a - b) <= 1e-6 * max(1.0, abs(b))
    return a == b


comm = chorus.Comm.from_env()
n, rank = comm.size, comm.rank
N = 37

for dtype in DTYPES:
    is_float_dt = dtype.startswith("float") or dtype == "bfloat16"
    for op in ["sum", "prod", "min", "max", "avg"]:
        for async_op in (False, True):
            x = arr([value(rank, i) for i in range(N)], dtype)
            res = comm.allreduce(x, op=op, async_op=async_op)
            if async_op:
                check(isinstance(res, chorus.Request), "async_op returns a Request")
                res = res.wait()
                check(res is x, "the request's result is the buffer")
            got = tolist(x)
            want = [expect(op, i, n) for i in range(N)]
            check(all(close(g, w, dtype) for g, w in zip(got, want)),
                  f"allreduce {dtype} {op} async={async_op}: {got[:4]} want {want[:4]}")
            same_everywhere(x, f"allreduce {dtype} {op}")
    # allgather, reduce_scatter, broadcast, reduce, alltoall
    x = arr([value(rank, i) for i in range(N)], dtype)
    out = arr([0] * (N * n), dtype)
    comm.allgather(x, out)
    check(tolist(out) == [float(value(r, i)) for r in range(n) for i in range(N)],
          f"allgather {dtype}")
    big = arr([value(rank, i) for i in range(N * n)], dtype)
    rs = arr([0] * N, dtype)
    req = comm.reduce_scatter(big, rs, op="max", async_op=True)
    req.wait()
    check(tolist(rs) == [float(max(value(r, rank * N + i) for r in range(n))) for i in range(N)],
          f"reduce_scatter {dtype} max")
    b = arr([value(n - 1, i) if rank == n - 1 else 0 for i in range(N)], dtype)
    comm.broadcast(b, root=n - 1)
    check(tolist(b) == [float(value(n - 1, i)) for i in range(N)], f"broadcast {dtype}")
    red = arr([value(rank, i) for i in range(N)], dtype)
    comm.reduce(red, op="min", root=0)
    if rank == 0:
        check(tolist(red) == [float(min(value(r, i) for r in range(n))) for i in range(N)],
              f"reduce {dtype} min")
    a_in = arr([(rank * n + j) % 100 for j in range(n) for _ in range(3)], dtype)
    a_out = arr([0] * (3 * n), dtype)
    comm.alltoall(a_in, a_out, async_op=True).wait()
    check(tolist(a_out) == [float((r * n + rank) % 100) for r in range(n) for _ in range(3)],
          f"alltoall {dtype}")
    if KIND == "numpy":
        # gather, scatter and the v-forms (issue 41): uneven counts, one rank with none.
        root = n // 2
        g = arr([0] * (N * n), dtype) if rank == root else None
        comm.gather(arr([value(rank, i) for i in range(N)], dtype), g, root=root)
        if rank == root:
            check(tolist(g) == [float(value(r, i)) for r in range(n) for i in range(N)],
                  f"gather {dtype}")
        sc_in = arr([value(root, i) for i in range(N * n)], dtype) if rank == root else None
        sc_out = arr([0] * N, dtype)
        comm.scatter(sc_in, sc_out, root=root, async_op=True).wait()
        check(tolist(sc_out) == [float(value(root, rank * N + i)) for i in range(N)],
              f"scatter {dtype}")
        cnt = [(r * 3 + 1) % 4 for r in range(n)]  # rank 1 of 4 has none
        dsp = [sum(cnt[r + 1:]) + 2 * (n - 1 - r) for r in range(n)]  # reversed, gaps
        agv = arr([77] * (sum(cnt) + 2 * n), dtype)
        comm.allgatherv(arr([value(rank, i) for i in range(cnt[rank])], dtype), agv, cnt, dsp)
        want = [77.0] * (sum(cnt) + 2 * n)
        for r in range(n):
            want[dsp[r]:dsp[r] + cnt[r]] = [float(value(r, i)) for i in range(cnt[r])]
        check(tolist(agv) == want, f"allgatherv {dtype}: {tolist(agv)} want {want}")
        rsv = arr([0] * cnt[rank], dtype)
        comm.reduce_scatterv(arr([value(rank, i) for i in range(sum(cnt))], dtype), rsv, cnt,
                             op="max", async_op=True).wait()
        off = sum(cnt[:rank])
        check(tolist(rsv) == [float(max(value(r, off + i) for r in range(n)))
                              for i in range(cnt[rank])], f"reduce_scatterv {dtype} max")
        # alltoallv: rank r sends (r + p) % 3 elements of value 10 * r + p to p.
        s_cnt = [(rank + p) % 3 for p in range(n)]
        r_cnt = [(p + rank) % 3 for p in range(n)]
        a2 = arr([10 * rank + p for p in range(n) for _ in range(s_cnt[p])], dtype)
        b2 = arr([0] * sum(r_cnt), dtype)
        comm.alltoallv(a2, b2, s_cnt, r_cnt)
        check(tolist(b2) == [float(10 * p + rank) for p in range(n) for _ in range(r_cnt[p])],
              f"alltoallv {dtype}")

# send/recv around the ring, async, both orders
right, left = (rank + 1) % n, (rank - 1) % n
if n > 1:
    s = arr([rank * 10 + i for i in range(8)], "int32")
    r_ = arr([0] * 8, "int32")
    reqs = [comm.recv(r_, left, async_op=True), comm.send(s, right, async_op=True)]
    for q in reqs:
        q.wait()
    check(tolist(r_) == [float(left * 10 + i) for i in range(8)], "send/recv ring")
comm.barrier()
comm.barrier(async_op=True).wait()

# tagged send/recv on a comm of their own: taken by tag against the order sent, and from
# any source (the sender's rank returned)
tc = comm.split(0, key=rank)
if n > 1:
    a1, a2 = arr([rank] * 3, "int64"), arr([rank + 100] * 5, "int64")
    reqs = [tc.tagged_send(a1, right, tag=1, async_op=True),
            tc.tagged_send(a2, right, tag=2, async_op=True)]
    g2, g1 = arr([0] * 5, "int64"), arr([0] * 3, "int64")
    src2 = tc.tagged_recv(g2, left, tag=2)
    src1 = tc.tagged_recv(g1, tag=1)  # any source
    for q in reqs:
        q.wait()
    check(src2 == left and src1 == left and tolist(g2) == [float(left + 100)] * 5 and
          tolist(g1) == [float(left)] * 3, f"tagged send/recv: sources {src2} {src1}")
    try:
        tc.allreduce(arr([1], "int32"))
        check(False, "a collective on a comm that carried tagged messages was accepted")
    except chorus.ChorusError as e:
        check("tagged" in str(e), f"a collective on a tagged comm: {e}")
tc.destroy()

# split: even and odd ranks
sub = comm.split(rank % 2, key=rank)
check(sub.size == (n + 1 - rank % 2) // 2, f"split size {sub.size}")
y = arr([1], "int32")
sub.allreduce(y)
check(tolist(y) == [float(sub.size)], "allreduce on the split comm")
sub.destroy()

# Argument errors are exceptions, before anything is started.
def raises(fn, exc, what):
    try:
        fn()
    except exc:
        check(True, what)
        return
    except Exception as e:  # noqa: BLE001
        check(False, f"{what}: raised {type(e).__name__}: {e}")
        return
    check(False, f"{what}: no exception")


m = arr(list(range(16)), "float32")
if KIND == "torch":
    raises(lambda: comm.allreduce(m.view(4, 4).t()), ValueError, "non-contiguous refused")
    raises(lambda: comm.allreduce(torch.zeros(2, dtype=torch.bool)), TypeError, "bool refused")
else:
    raises(lambda: comm.allreduce(m[::2]), ValueError, "non-contiguous refused")
    ro = np.zeros(4, dtype=np.float32)
    ro.flags.writeable = False
    raises(lambda: comm.allreduce(ro), ValueError, "read-only refused")
    raises(lambda: comm.allreduce(np.zeros(2, dtype=np.complex64)), TypeError, "complex refused")
raises(lambda: comm.allgather(arr([1], "int32"), arr([0] * (n + 1), "int32")), ValueError,
       "allgather size")
if KIND == "numpy":
    one, many = arr([1], "int32"), arr([0] * (4 * n + 4), "int32")
    raises(lambda: comm.allgatherv(one, many, [1] * (n + 1)), ValueError, "allgatherv counts")
    raises(lambda: comm.allgatherv(one, many, [2] * n), ValueError, "allgatherv sendcount")
    raises(lambda: comm.allgatherv(one, many, [1] * n, [-1] * n), ValueError, "negative displ")
    raises(lambda: comm.allgatherv(one, one, [1] * n, [1] * n), ValueError,
           "allgatherv recv too small")
    raises(lambda: comm.reduce_scatterv(many, one, [1] * n), ValueError, "reduce_scatterv sizes")
    raises(lambda: comm.alltoallv(one, many, ["x"] * n, [1] * n), TypeError, "alltoallv counts")
    raises(lambda: comm.alltoallv(one, many, [2] * n, [1] * n), ValueError, "alltoallv send size")
    raises(lambda: comm.gather(one, None, root=n), ValueError, "gather root out of range")
    raises(lambda: comm.scatter(None, one, root=rank), ValueError, "scatter send on root")
    if n > 1:  # overlapping receive blocks: the library's own check, as ChorusError
        raises(lambda: comm.allgatherv(one, many, [1] * n, [0] * n), chorus.ChorusError,
               "allgatherv overlapping blocks")
raises(lambda: comm.send(arr([1], "int32"), n + 5), chorus.ChorusError, "peer out of range")
try:
    comm.send(arr([1], "int32"), n + 5)
except chorus.ChorusError as e:
    check(e.status_name == "INVALID_ARGUMENT" and f"rank {rank}" in e.message and "peer" in e.message,
          f"the error names the rank and the peer: {e}")

# A mismatch in flight fails the request with Chorus's message, and the comm after it.
if n > 1:
    c2 = comm.split(0, key=rank)
    c2.set_timeout(20)
    z = arr([1] * (5 if rank == 0 else 6), "int32")
    req = c2.allreduce(z, async_op=True)
    try:
        req.wait()
        check(False, "a mismatched allreduce succeeded")
    except chorus.ChorusError as e:
        check(e.status_name in ("MISMATCH", "REMOTE") and "allreduce" in e.message,
              f"mismatch raised with the message: {e}")
    check(req.is_completed(), "a failed request is completed")
    c2.destroy()

    # Abort ends a request in flight: rank 0 alone calls, another thread aborts.
    c3 = comm.split(0, key=rank)
    if rank == 0:
        w = arr([1] * 1000, "float32")
        req = c3.allreduce(w, async_op=True)
        threading.Timer(0.3, c3.abort).start()
        t0 = time.time()
        try:
            req.wait()
            check(False, "an aborted request succeeded")
        except chorus.ChorusError as e:
            check(e.status_name == "ABORTED", f"abort raised ABORTED: {e}")
        check(time.time() - t0 < 10, "abort ended the wait")
    comm.barrier()  # the others keep c3 open until rank 0's request has ended
    c3.destroy()

# Registered memory (issue 38): chorus.empty gives an array the ranks of the host read in
# place; an allreduce on it equals the plain path's result, and on 2+ ranks (the arena)
# the stats show that it read its peers' buffers in place. Then free() and its errors.
big = 1 << 17  # 512 KiB of float32: past the arena's flat path
dt_reg = torch.float32 if KIND == "torch" else "float32"
reg = chorus.empty((2, big), dt_reg, comm)
check(tuple(reg.shape) == (2, big), f"empty's shape {tuple(reg.shape)}")
for i in range(0, big, 4099):
    reg[0, i] = float(value(rank, i))
    reg[1, i] = 0.0
plain = arr([0.0] * big, "float32")
for i in range(0, big, 4099):
    plain[i] = float(value(rank, i))
calls0, bytes0 = comm.mem_stats()
comm.allreduce(reg[0], reg[1])
calls1, bytes1 = comm.mem_stats()
comm.allreduce(plain)
same = all(float(reg[1, i]) == float(plain[i]) for i in range(0, big, 4099))
check(same, "an allreduce on registered memory equals the plain path's")
check(float(reg[1, 0]) == float(sum(value(r, 0) for r in range(n))), "registered allreduce sum")
if n > 1:
    check(calls1 == calls0 + 1 and bytes1 > bytes0,
          f"the registered allreduce read its peers' buffers in place ({calls0}->{calls1})")
comm.free(reg)
raises(lambda: comm.free(reg), ValueError, "a second free refused")
raises(lambda: comm.free(plain), ValueError, "free of an array empty() did not return")
raises(lambda: chorus.empty((-1,), dt_reg, comm), ValueError, "negative shape refused")
extra = chorus.empty(16, dt_reg, comm)  # left for destroy() to free

check(chorus.build_info().startswith("chorus "), "build_info")
comm.destroy()
print(f"rank {rank} ({KIND}): {PASSED} passed, {FAILED} failed", flush=True)
sys.exit(1 if FAILED else 0)
