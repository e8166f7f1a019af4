"""A Request dropped unfinished keeps its buffers alive until its operation ends (issue 36),
on every rank of a chorusrun job of 2 or more ranks (tests/python/run.sh dropped):

    chorusrun -n N -- /usr/bin/python3 tests/python/test_dropped_request.py [numpy|torch]

Rank 0 issues an operation whose peer is held back (rank 1 sleeps before its side), drops
the Request while it runs, collects garbage and fills fresh buffers of the same size with a
scribble pattern, so that memory freed too early would be handed out again and written by
one side or the other. Then, after a barrier (which waits for everything in flight):

  - the dropped buffer is still alive while the operation runs (a weak reference to it);
  - the data arrived: rank 0's dropped receive buffer holds rank 1's values, and rank 1's
    allreduce result holds rank 0's dropped send buffer's values;
  - the scribbled buffers are untouched (nothing wrote into memory that was given back);
  - once the operation is over the next call releases the buffer (no leak);
  - a dropped receive that never completes is released by Comm.destroy (ABORTED);
  - the process exits cleanly with a dropped receive still running.

Under AddressSanitizer (tests/python/asan.sh) a buffer freed while the library still reads
or writes it is reported as a heap-use-after-free. Prints "N passed, 0 failed" per rank;
exit 1 on any failure.
"""

import gc
import sys
import time
import weakref

import chorus
from chorus import _core

KIND = sys.argv[1] if len(sys.argv) > 1 else "numpy"
if KIND == "torch":
    import torch
else:
    import numpy as np

PASSED = FAILED = 0
COUNT = 1 << 16  # 512 KiB of float64: above malloc's first mmap threshold, and reused
HOLD = 0.5  # seconds rank 1 waits before its side, so that rank 0's side is still running


def check(cond, what):
    global PASSED, FAILED
    if cond:
        PASSED += 1
    else:
        FAILED += 1
        print(f"FAIL rank {comm.rank}: {what}", flush=True)


def full(value):
    if KIND == "torch":
        return torch.full((COUNT,), float(value), dtype=torch.float64)
    return np.full(COUNT, float(value), dtype=np.float64)


def pattern(seed):
    if KIND == "torch":
        return torch.arange(COUNT, dtype=torch.float64) + seed
    return np.arange(COUNT, dtype=np.float64) + seed


def equal(a, b):
    return bool((a == b).all())


def scribble():
    """Buffers of the dropped one's size, filled with -7: memory freed too early comes back."""
    gc.collect()
    return [full(-7.0) for _ in range(16)]


def untouched(bufs):
    return all(equal(b, full(-7.0)) for b in bufs)


comm = chorus.Comm.from_env()
rank, n = comm.rank, comm.size
if n < 2:
    print("FAIL: a dropped request needs a peer: run on 2 or more ranks", flush=True)
    sys.exit(2)

# 1. A dropped receive: rank 1 sends only after HOLD, into memory rank 0 no longer names.
comm.barrier()
if rank == 0:
    req = comm.recv(full(0.0), 1, async_op=True)
    check(not req.is_completed(), "the receive is still running when it is dropped")
    ref = weakref.ref(req._op.keep[0])
    del req
    junk = scribble()
    check(ref() is not None, "a dropped running receive keeps its buffer alive")
elif rank == 1:
    time.sleep(HOLD)
    comm.send(pattern(1000.0), 0)
comm.barrier()  # waits for the receive
if rank == 0:
    buf = ref()
    check(buf is not None and equal(buf, pattern(1000.0)),
          "the dropped receive's buffer holds the peer's data")
    check(untouched(junk), "no scribbled buffer was written by the dropped receive")
    del buf, junk
    comm.barrier()  # the next call releases what completed
    check(ref() is None, "the completed dropped receive's buffer is released")
else:
    comm.barrier()

# 2. A dropped allreduce: rank 1 joins after HOLD and reads rank 0's send buffer then.
if rank == 0:
    req = comm.allreduce(pattern(1.0), full(0.0), async_op=True)
    check(not req.is_completed(), "the allreduce is still running when it is dropped")
    refs = [weakref.ref(b) for b in req._op.keep]
    del req
    junk = scribble()
    check(all(r() is not None for r in refs), "a dropped running allreduce keeps its buffers")
    res = None
else:
    if rank == 1:
        time.sleep(HOLD)
    res = comm.allreduce(pattern(float(rank + 1)), full(0.0))
comm.barrier()
if rank == 0:
    got = refs[1]()
    want = pattern(0.0) * n + float(sum(range(1, n + 1)))
    check(got is not None and equal(got, want), "the dropped allreduce's result is right")
    check(untouched(junk), "no scribbled buffer was written by the dropped allreduce")
    del got, junk
else:
    want = pattern(0.0) * n + float(sum(range(1, n + 1)))
    check(equal(res, want), "the peer's allreduce read the dropped send buffer intact")
comm.barrier()
if rank == 0:
    check(all(r() is None for r in refs), "the completed dropped allreduce's buffers are released")

# 3. A dropped send: rank 1 receives only after HOLD, from memory rank 0 no longer names.
if rank == 0:
    req = comm.send(pattern(2000.0), 1, async_op=True)
    ref = weakref.ref(req._op.keep[0])
    del req
    junk = scribble()
elif rank == 1:
    time.sleep(HOLD)
    got = comm.recv(full(0.0), 0)
    check(equal(got, pattern(2000.0)), "the peer received the dropped send's data intact")
comm.barrier()
if rank == 0:
    check(untouched(junk), "no scribbled buffer was written around the dropped send")
    del junk
    comm.barrier()
    check(ref() is None, "the completed dropped send's buffer is released")
else:
    comm.barrier()

# 4. A dropped receive that nothing matches: destroying its communicator ends it (ABORTED),
# and only then is its buffer released.
sub = comm.split(0, key=rank)
if rank == 0:
    req = sub.recv(full(0.0), 1, async_op=True)
    ref = weakref.ref(req._op.keep[0])
    del req
    gc.collect()
    check(ref() is not None, "a dropped unmatched receive keeps its buffer alive")
comm.barrier()
sub.destroy()
if rank == 0:
    check(ref() is None, "destroying the communicator releases the dropped receive's buffer")
check(not _core._ORPHANS, f"no dropped request left over: {len(_core._ORPHANS)}")

# 5. The process ends with a dropped receive still running on a communicator it never
# destroys: exit must neither hang nor free the buffer under the progress thread (the
# exit status and, under ASan, the absence of a report say so).
comm.barrier()
last = comm.split(0, key=rank)
if rank == 0:
    last.recv(full(0.0), 1, async_op=True)
comm.barrier()
comm.destroy()
print(f"rank {rank} ({KIND}): {PASSED} passed, {FAILED} failed", flush=True)
sys.exit(1 if FAILED else 0)
