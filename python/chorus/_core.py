"""Communicators, collectives and requests over libchorus (see the package docstring)."""

import atexit
import collections
import ctypes
import threading

from . import _lib
from ._lib import lib

# chorus_status_t
SUCCESS = 0
STATUS_NAMES = {
    -1: "INVALID_ARGUMENT",
    -2: "SYSTEM",
    -3: "REMOTE",
    -4: "TIMEOUT",
    -5: "MISMATCH",
    -6: "ABORTED",
    -7: "UNSUPPORTED",
    -8: "AUTH",
    -9: "NO_MEMORY",
    -10: "INTERNAL",
}

# chorus_dtype_t, by the names numpy and torch use.
DTYPES = {
    "int8": 0,
    "uint8": 1,
    "int32": 2,
    "uint32": 3,
    "int64": 4,
    "uint64": 5,
    "float16": 6,
    "bfloat16": 7,
    "float32": 8,
    "float64": 9,
}
OPS = {"sum": 0, "prod": 1, "product": 1, "min": 2, "max": 3, "avg": 4, "mean": 4}


class ChorusError(RuntimeError):
    """A Chorus call failed.

    ``status`` is the C status code (negative), ``status_name`` its name ("TIMEOUT",
    "MISMATCH", ...), and ``message`` Chorus's message, which names the rank, the peer and
    the operation.
    """

    def __init__(self, status, message):
        self.status = status
        self.status_name = STATUS_NAMES.get(status, str(status))
        self.message = message
        super().__init__(f"{self.status_name.lower().replace('_', ' ')}: {message}")


def _check(status):
    if status != SUCCESS:
        raise ChorusError(status, lib.chorus_last_error().decode(errors="replace"))


def build_info():
    """What the loaded libchorus was built with ("chorus 0.1.0: ucx yes, ...")."""
    return lib.chorus_build_info().decode()


# ---- Buffers: numpy arrays and CPU torch tensors, never copied ----


def _dtype_name(buf):
    dt = buf.dtype
    name = str(dt)
    if name.startswith("torch."):
        name = name[len("torch."):]
        name = {"float": "float32", "double": "float64", "half": "float16", "int": "int32",
                "long": "int64"}.get(name, name)
    return name


def _view(buf, what, writable):
    """(address, number of elements, chorus dtype) of a contiguous numpy array or CPU tensor.

    Nothing is copied: a buffer that is not contiguous, or not on the CPU, is refused with a
    ValueError that says so (call .contiguous() / np.ascontiguousarray first).
    """
    if buf is None:
        return None, 0, None
    name = _dtype_name(buf)
    if name not in DTYPES:
        raise TypeError(f"chorus: {what}: dtype {buf.dtype} is not supported "
                        f"(supported: {', '.join(DTYPES)})")
    if hasattr(buf, "data_ptr"):  # torch.Tensor
        if buf.device.type != "cpu":
            raise ValueError(f"chorus: {what}: a {buf.device.type} tensor; the Python binding "
                             "takes CPU tensors (use chorus.torch for device tensors)")
        if not buf.is_contiguous():
            raise ValueError(f"chorus: {what}: the tensor is not contiguous (call .contiguous())")
        return buf.data_ptr(), buf.numel(), DTYPES[name]
    iface = getattr(buf, "__array_interface__", None)
    if iface is None:
        raise TypeError(f"chorus: {what}: expected a numpy array or a torch tensor, "
                        f"got {type(buf).__name__}")
    if not buf.flags["C_CONTIGUOUS"]:
        raise ValueError(f"chorus: {what}: the array is not C-contiguous "
                         "(use numpy.ascontiguousarray)")
    if writable and not buf.flags["WRITEABLE"]:
        raise ValueError(f"chorus: {what}: the array is read-only")
    return iface["data"][0], buf.size, DTYPES[name]


def _op(op):
    if isinstance(op, int):
        return op
    try:
        return OPS[str(op).lower()]
    except KeyError:
        raise ValueError(f"chorus: unknown op {op!r} (sum, prod, min, max, avg)") from None


# ---- Operations in flight, and the buffers they own ----
#
# The library reads and writes an operation's buffers until the operation is over, whoever
# still holds its Request. So the buffers are owned here, not by the Request: every
# operation in flight is an _Op in _INFLIGHT (its C request and the arrays it uses) until
# it is known to be complete. A Request dropped unfinished (its last reference gone, its
# __del__ run) puts its _Op on _ORPHANS, which _reap() polls with chorus_test at the next
# call on any communicator and when a communicator is destroyed (which ends everything in
# flight on it): only then are the buffers released.
#
# Why not wait in __del__: a finalizer runs wherever the last reference goes, on any thread
# and during interpreter exit, and waiting there can block for as long as a peer takes (or
# forever, for a receive whose send is never made) with the caller's locks held. Polling
# never blocks. At exit (_at_exit, run by atexit before the modules are torn down) what is
# still in flight is leaked on purpose, so that no buffer the progress thread may still
# touch is ever freed: the process is ending, and its memory goes with it.
#
# _LOCK makes a chorus_test on a request exclusive with chorus_comm_destroy of its
# communicator (the library frees the communicator's queue there, which a test on a pending
# request uses) and with another thread's poll of the same orphan. It is reentrant because
# a finalizer (Request.__del__, Comm.__del__) may run inside _reap on the same thread; that
# happens between Python statements, never inside a C call, and a request whose
# communicator was destroyed is complete, so a test of it touches nothing else.


class _Op:
    """An operation in flight: its C request and the buffers it uses (kept alive)."""

    __slots__ = ("h", "keep")

    def __init__(self, handle, keep):
        self.h = handle
        self.keep = keep


_INFLIGHT = {}  # id(op) -> op, from issue until complete
_ORPHANS = collections.deque()  # ops of dropped unfinished Requests, polled by _reap
_LOCK = threading.RLock()
_ALIVE = True  # False from _at_exit on (None once the module is torn down)


def _retire(op):
    """op is complete (its C request freed by chorus_wait/chorus_test): release its buffers."""
    _INFLIGHT.pop(id(op), None)
    op.keep = None


def _poll(op):
    """chorus_test on op (lock held): (True, status) once complete, else (False, SUCCESS)."""
    if not op.h:
        return True, SUCCESS
    done = ctypes.c_int(0)
    status = lib.chorus_test(ctypes.byref(op.h), ctypes.byref(done))
    return bool(done.value), status


def _reap():
    """Releases the buffers of the dropped requests that have completed; never blocks."""
    if not _ORPHANS:
        return
    with _LOCK:
        # A finalizer run meanwhile may append to or (through Comm.destroy) empty the deque.
        for _ in range(len(_ORPHANS)):
            try:
                op = _ORPHANS.popleft()
            except IndexError:
                break
            done, _status = _poll(op)  # a dropped request's status is dropped with it
            if done:
                _retire(op)
            else:
                _ORPHANS.append(op)


def _at_exit():
    # What is still in flight now may be running on a progress thread until the process
    # ends: its buffers must survive the teardown of the modules, which drops _INFLIGHT.
    global _ALIVE
    _reap()
    _ALIVE = False
    for op in list(_INFLIGHT.values()):
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(op))


atexit.register(_at_exit)


ANY_SOURCE = -1  # tagged_recv from whichever rank sends first


class Request:
    """An operation in flight, from a collective called with ``async_op=True``.

    ``wait()`` blocks until it is complete and raises ChorusError if it failed;
    ``is_completed()`` never blocks. The buffers must not be touched before completion.
    They stay alive until the operation is over even if the Request is dropped unfinished
    (the operation still runs; its status is then lost).
    """

    def __init__(self, handle, keep, result=None):
        op = _Op(handle, keep)
        _INFLIGHT[id(op)] = op
        self._op = op
        self._result = result
        self._error = None

    def _finish(self, status):
        _retire(self._op)
        if status != SUCCESS:
            self._error = ChorusError(status, lib.chorus_last_error().decode(errors="replace"))

    def wait(self):
        """Waits for completion; returns the result buffer (or None), raises on failure."""
        if self._op.h:
            self._finish(lib.chorus_wait(ctypes.byref(self._op.h)))
        if self._error is not None:
            raise self._error
        return self._result

    def is_completed(self):
        """True once the operation is over (successfully or not: wait() then says which)."""
        if not self._op.h:
            return True
        with _LOCK:
            done, status = _poll(self._op)
        if done:
            self._finish(status)
        return done

    def __del__(self):
        op = getattr(self, "_op", None)
        if op is None or not op.h or _ALIVE is not True:
            return  # complete, or the interpreter is ending (_at_exit kept the buffers)
        # One test now: it frees what is already complete, and starts the send/recv batch the
        # operation may be in, as the operation must still run (chorus_request_free would).
        with _LOCK:
            done, _status = _poll(op)
            if done:
                _retire(op)
            else:
                _ORPHANS.append(op)



class _SourceRequest(Request):
    """A tagged_recv in flight: wait() returns the sender's rank."""

    def wait(self):
        super().wait()
        return self._result.value

def empty(shape, dtype, comm):
    """Collective over comm: an array in registered memory (see Comm.empty)."""
    return comm.empty(shape, dtype)


class Comm:
    """A Chorus communicator.

    Make one with ``Comm.from_env()`` under a launcher (chorusrun, torchrun's env://
    variables, mpirun, srun), or ``Comm(nranks, unique_id, rank)`` with an id made by
    ``unique_id()`` on one process and passed to all. Use it as a context manager, or call
    ``destroy()``.

    Every collective takes numpy arrays or CPU torch tensors (contiguous; never copied) and
    works in place when ``recv`` is omitted where that makes sense. With ``async_op=True`` it
    returns a Request at once; otherwise it blocks and returns the result buffer.
    """

    def __init__(self, nranks=None, uid=None, rank=None, _handle=None):
        self._windows = {}  # empty()'s memory by address, freed by free() or destroy()
        self._h = _lib.c_comm()
        if _handle is not None:
            self._h = _handle
        else:
            if uid is None or nranks is None or rank is None:
                raise ValueError("chorus: Comm(nranks, unique_id, rank), or Comm.from_env()")
            raw = _lib.UniqueId()
            data = bytes(uid)
            if len(data) != ctypes.sizeof(raw):
                raise ValueError(f"chorus: a unique id is {ctypes.sizeof(raw)} bytes, "
                                 f"not {len(data)}")
            ctypes.memmove(ctypes.byref(raw), data, len(data))
            _check(lib.chorus_comm_init(ctypes.byref(self._h), int(nranks), ctypes.byref(raw),
                                        int(rank)))
        r, n = ctypes.c_int(), ctypes.c_int()
        _check(lib.chorus_comm_rank(self._h, ctypes.byref(r)))
        _check(lib.chorus_comm_size(self._h, ctypes.byref(n)))
        self.rank, self.size = r.value, n.value

    @classmethod
    def from_env(cls):
        """Joins the job described by the launcher's environment (chorus_comm_init_env)."""
        h = _lib.c_comm()
        _check(lib.chorus_comm_init_env(ctypes.byref(h)))
        return cls(_handle=h)

    @staticmethod
    def unique_id():
        """A new unique id (bytes; it holds the job's secret), served by this process."""
        raw = _lib.UniqueId()
        _check(lib.chorus_get_unique_id(ctypes.byref(raw)))
        return ctypes.string_at(ctypes.byref(raw), ctypes.sizeof(raw))

    def _handle(self):
        if not self._h:
            raise ChorusError(-1, "the communicator was destroyed")
        return self._h

    def split(self, color, key=0):
        """Collective: ranks with the same color form a new Comm (None for color < 0)."""
        h = _lib.c_comm()
        _check(lib.chorus_comm_split(self._handle(), int(color), int(key), ctypes.byref(h)))
        return Comm(_handle=h) if h else None

    def set_timeout(self, seconds):
        """Deadline of every wait inside this communicator's operations (0: none)."""
        _check(lib.chorus_comm_set_timeout(self._handle(), float(seconds)))

    def abort(self):
        """Fails every operation in flight with ABORTED; may be called from any thread."""
        _check(lib.chorus_comm_abort(self._handle()))

    # ---- recovery (chorus.h, "Recovery") ----

    def revoke(self):
        """Makes every rank's pending and later calls on this comm fail at once."""
        _check(lib.chorus_comm_revoke(self._handle()))

    def shrink(self):
        """Collective over the live ranks, after an error: a new Comm of the survivors, in
        their old order (this one must still be destroyed). Ranks found dead during the
        call are left out too."""
        h = _lib.c_comm()
        _check(lib.chorus_comm_shrink(self._handle(), 0, ctypes.byref(h)))
        return Comm(_handle=h)

    def failed_ranks(self):
        """The ranks of this comm that the survivors of a shrink agreed were lost."""
        count = ctypes.c_int()
        _check(lib.chorus_comm_failed_ranks(self._handle(), None, 0, ctypes.byref(count)))
        ranks = (ctypes.c_int * max(1, count.value))()
        _check(lib.chorus_comm_failed_ranks(self._handle(), ranks, count.value,
                                            ctypes.byref(count)))
        return list(ranks[:count.value])

    def grow(self, nnew, uid=None):
        """Collective: a new Comm with nnew more ranks, this comm's ranks first. Rank 0
        gives uid (from Comm.unique_id() on rank 0: its process serves the rendezvous) and
        hands it to the new processes, which join with Comm(size + nnew, uid, size + k);
        uid is ignored on the other ranks."""
        raw = None
        if self.rank == 0:
            if uid is None:
                raise ValueError("chorus: Comm.grow: rank 0 gives the id (Comm.unique_id())")
            data = bytes(uid)
            raw = _lib.UniqueId()
            if len(data) != ctypes.sizeof(raw):
                raise ValueError(f"chorus: a unique id is {ctypes.sizeof(raw)} bytes, "
                                 f"not {len(data)}")
            ctypes.memmove(ctypes.byref(raw), data, len(data))
        h = _lib.c_comm()
        _check(lib.chorus_comm_grow(self._handle(), int(nnew),
                                    ctypes.byref(raw) if raw is not None else None,
                                    ctypes.byref(h)))
        return Comm(_handle=h)

    def dump_flight_record(self, directory=None):
        """Writes this rank's flight record (its last operations) as JSON into directory,
        or CHORUS_FR_DIR (chorus-fr.<comm>.<rank>.json); `chorus-trace fr DIR` reads the
        ranks' records together."""
        d = None if directory is None else str(directory).encode()
        _check(lib.chorus_comm_dump_flight_record(self._handle(), d))

    def destroy(self):
        """Frees the communicator (local; operations in flight end with ABORTED)."""
        if not self._h:
            return
        if _LOCK is None:
            # This module is being torn down at exit (its globals are None): nothing polls
            # requests any more, and _at_exit kept the buffers of those still in flight.
            lib.chorus_comm_destroy(self._h)
        else:
            # Under _LOCK: no test of one of its requests may run while its queue is freed.
            with _LOCK:
                lib.chorus_comm_destroy(self._h)
                _reap()  # its dropped requests are complete now (ABORTED if they were not)
        self._h = _lib.c_comm()
        self._windows = {}  # destroy freed them

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.destroy()
        return False

    def __del__(self):
        try:
            self.destroy()
        except Exception:
            pass

    # ---- registered memory ----

    def empty(self, shape, dtype="float32"):
        """Collective: an uninitialised array in registered memory (chorus_mem_alloc), which
        the ranks of this host read in place in collectives: each byte is copied once.

        Every rank calls it with the same shape and dtype, in the same order as its other
        empty() calls. dtype is a numpy dtype or name (a numpy array comes back), or a torch
        dtype (a CPU tensor comes back; bfloat16 too). The memory lives until
        ``comm.free(array)`` (collective) or the communicator's destroy(); views of it must
        not outlive either.
        """
        import math

        dims = (int(shape),) if isinstance(shape, int) else tuple(int(d) for d in shape)
        if any(d < 0 for d in dims):
            raise ValueError(f"chorus: empty: shape {shape} has a negative dimension")
        torch_dtype = dtype if str(dtype).startswith("torch.") else None
        if torch_dtype is not None:
            import torch

            itemsize = torch.empty((), dtype=torch_dtype).element_size()
        else:
            import numpy as np

            itemsize = np.dtype(dtype).itemsize
        nbytes = max(1, math.prod(dims) * itemsize)
        ptr = ctypes.c_void_p()
        _check(lib.chorus_mem_alloc(self._handle(), nbytes, ctypes.byref(ptr)))
        raw = (ctypes.c_uint8 * nbytes).from_address(ptr.value)
        self._windows[ptr.value] = raw
        if torch_dtype is not None:
            import torch

            return torch.frombuffer(raw, dtype=torch_dtype, count=math.prod(dims)).view(dims)
        import numpy as np

        return np.frombuffer(raw, dtype=dtype, count=math.prod(dims)).reshape(dims)

    def free(self, array):
        """Collective: frees what empty() returned (every rank frees its own, of the same
        empty() call). The array and its views must not be used afterwards."""
        ptr = array.data_ptr() if hasattr(array, "data_ptr") else \
            array.__array_interface__["data"][0]
        if ptr not in self._windows:
            raise ValueError("chorus: free: not an array that empty() returned on this Comm "
                             "(or freed already)")
        _check(lib.chorus_mem_free(self._handle(), ctypes.c_void_p(ptr)))
        del self._windows[ptr]

    def mem_stats(self):
        """(calls that read every peer's buffer in place, bytes read from peers' registered
        buffers) on this rank since the Comm was made (chorus_mem_stats)."""
        calls, nbytes = ctypes.c_uint64(), ctypes.c_uint64()
        _check(lib.chorus_mem_stats(self._handle(), ctypes.byref(calls), ctypes.byref(nbytes)))
        return calls.value, nbytes.value

    # ---- calls ----

    def _call(self, async_op, keep, result, blocking, nonblocking, *args):
        _reap()
        if async_op:
            req = _lib.c_req()
            _check(nonblocking(*args, self._handle(), ctypes.byref(req)))
            return Request(req, keep, result)
        _check(blocking(*args, self._handle(), None))
        return result

    def allreduce(self, send, recv=None, op="sum", async_op=False):
        """recv = op over ranks of send (in place without recv)."""
        recv = send if recv is None else recv
        s, n, dt = _view(send, "allreduce send", False)
        r, rn, rdt = _view(recv, "allreduce recv", True)
        if rn != n or rdt != dt:
            raise ValueError("chorus: allreduce: send and recv differ in size or dtype")
        return self._call(async_op, (send, recv), recv, lib.chorus_allreduce,
                          lib.chorus_iallreduce, s, r, n, dt, _op(op))

    def allgather(self, send, recv, async_op=False):
        """recv (size x send's elements) = every rank's send, in rank order."""
        s, n, dt = _view(send, "allgather send", False)
        r, rn, rdt = _view(recv, "allgather recv", True)
        if rn != n * self.size or rdt != dt:
            raise ValueError(f"chorus: allgather: recv must hold {self.size} x {n} elements "
                             "of send's dtype")
        return self._call(async_op, (send, recv), recv, lib.chorus_allgather,
                          lib.chorus_iallgather, s, r, n, dt)

    def reduce_scatter(self, send, recv, op="sum", async_op=False):
        """recv = op over ranks of this rank's block of send (size x recv's elements)."""
        s, n, dt = _view(send, "reduce_scatter send", False)
        r, rn, rdt = _view(recv, "reduce_scatter recv", True)
        if n != rn * self.size or rdt != dt:
            raise ValueError(f"chorus: reduce_scatter: send must hold {self.size} x {rn} "
                             "elements of recv's dtype")
        return self._call(async_op, (send, recv), recv, lib.chorus_reduce_scatter,
                          lib.chorus_ireduce_scatter, s, r, rn, dt, _op(op))

    def broadcast(self, buf, root=0, async_op=False):
        """buf = root's buf on every rank (in place)."""
        b, n, dt = _view(buf, "broadcast buf", True)
        return self._call(async_op, (buf,), buf, lib.chorus_broadcast, lib.chorus_ibroadcast,
                          b, b, n, dt, int(root))

    def reduce(self, send, recv=None, op="sum", root=0, async_op=False):
        """On root, recv = op over ranks of send (in place without recv)."""
        recv = send if recv is None else recv
        s, n, dt = _view(send, "reduce send", False)
        r, rn, rdt = _view(recv, "reduce recv", True)
        if rn != n or rdt != dt:
            raise ValueError("chorus: reduce: send and recv differ in size or dtype")
        return self._call(async_op, (send, recv), recv, lib.chorus_reduce, lib.chorus_ireduce,
                          s, r, n, dt, _op(op), int(root))

    def alltoall(self, send, recv, async_op=False):
        """recv's block r = rank r's block for this rank; both hold size equal blocks."""
        s, n, dt = _view(send, "alltoall send", False)
        r, rn, rdt = _view(recv, "alltoall recv", True)
        if rn != n or rdt != dt or n % self.size != 0:
            raise ValueError(f"chorus: alltoall: send and recv must hold the same number of "
                             f"elements, a multiple of {self.size}")
        return self._call(async_op, (send, recv), recv, lib.chorus_alltoall,
                          lib.chorus_ialltoall, s, r, n // self.size, dt)

    # ---- gather, scatter and the v-forms: counts and displacements in elements ----

    def _counts(self, what, name, values, default=None):
        """A ctypes array of size non-negative integers, and the list (None: default)."""
        if values is None:
            values = default
        try:
            vals = [int(v) for v in values]
        except (TypeError, ValueError):
            raise TypeError(f"chorus: {what}: {name} must be a sequence of {self.size} "
                            "non-negative integers") from None
        if len(vals) != self.size or any(v < 0 for v in vals):
            raise ValueError(f"chorus: {what}: {name} must hold {self.size} non-negative "
                             f"integers, got {values!r}")
        return (ctypes.c_size_t * self.size)(*vals), vals

    @staticmethod
    def _packed(counts):
        """Displacements of blocks laid back to back."""
        out, off = [], 0
        for c in counts:
            out.append(off)
            off += c
        return out

    def _root(self, root, what):
        root = int(root)
        if not 0 <= root < self.size:
            raise ValueError(f"chorus: {what}: root {root} out of range for {self.size} ranks")
        return root

    def gather(self, send, recv=None, root=0, async_op=False):
        """On root, recv (size x send's elements) = every rank's send in rank order. recv
        is only used on root (pass None elsewhere)."""
        root = self._root(root, "gather")
        s, n, dt = _view(send, "gather send", False)
        r = None
        if self.rank == root:
            if recv is None:
                raise ValueError("chorus: gather: recv is needed on the root")
            r, rn, rdt = _view(recv, "gather recv", True)
            if rn != n * self.size or rdt != dt:
                raise ValueError(f"chorus: gather: recv must hold {self.size} x {n} elements "
                                 "of send's dtype")
        return self._call(async_op, (send, recv), recv, lib.chorus_gather, lib.chorus_igather,
                          s, r, n, dt, root)

    def scatter(self, send, recv, root=0, async_op=False):
        """recv = root's block `rank` of send (size x recv's elements). send is only used on
        root (pass None elsewhere)."""
        root = self._root(root, "scatter")
        r, rn, rdt = _view(recv, "scatter recv", True)
        s = None
        if self.rank == root:
            if send is None:
                raise ValueError("chorus: scatter: send is needed on the root")
            s, n, dt = _view(send, "scatter send", False)
            if n != rn * self.size or dt != rdt:
                raise ValueError(f"chorus: scatter: send must hold {self.size} x {rn} elements "
                                 "of recv's dtype")
        return self._call(async_op, (send, recv), recv, lib.chorus_scatter,
                          lib.chorus_iscatter, s, r, rn, rdt, root)

    def allgatherv(self, send, recv, counts, displs=None, async_op=False):
        """recv[displs[r]:displs[r] + counts[r]] = rank r's send, on every rank; counts must
        be the same everywhere and counts[rank] = send's elements. displs default to the
        blocks back to back; elements of recv outside the blocks are not touched."""
        ca, cv = self._counts("allgatherv", "counts", counts)
        da, dv = self._counts("allgatherv", "displs", displs, self._packed(cv))
        s, n, dt = _view(send, "allgatherv send", False)
        r, rn, rdt = _view(recv, "allgatherv recv", True)
        if n != cv[self.rank]:
            raise ValueError(f"chorus: allgatherv: send holds {n} elements but "
                             f"counts[{self.rank}] = {cv[self.rank]}")
        need = max((d + c for d, c in zip(dv, cv) if c), default=0)
        if rn < need or rdt != dt:
            raise ValueError(f"chorus: allgatherv: recv must hold at least {need} elements of "
                             "send's dtype")
        return self._call(async_op, (send, recv, ca, da), recv, lib.chorus_allgatherv,
                          lib.chorus_iallgatherv, s, r, n, ca, da, dt)

    def reduce_scatterv(self, send, recv, counts, op="sum", async_op=False):
        """recv = op over ranks of this rank's block of send, whose blocks of counts[r]
        elements lie back to back; counts must be the same everywhere."""
        ca, cv = self._counts("reduce_scatterv", "counts", counts)
        s, n, dt = _view(send, "reduce_scatterv send", False)
        r, rn, rdt = _view(recv, "reduce_scatterv recv", True)
        if n != sum(cv) or rn != cv[self.rank] or rdt != dt:
            raise ValueError(f"chorus: reduce_scatterv: send must hold sum(counts) = {sum(cv)} "
                             f"and recv counts[{self.rank}] = {cv[self.rank]} elements of one "
                             "dtype")
        return self._call(async_op, (send, recv, ca), recv, lib.chorus_reduce_scatterv,
                          lib.chorus_ireduce_scatterv, s, r, ca, dt, _op(op))

    def alltoallv(self, send, recv, send_counts, recv_counts, send_displs=None,
                  recv_displs=None, async_op=False):
        """recv[recv_displs[r]:][:recv_counts[r]] = rank r's send_counts[rank] elements at its
        send_displs[rank]; rank r's send_counts[rank] must equal recv_counts[r] here.
        Displacements default to the blocks back to back."""
        sca, scv = self._counts("alltoallv", "send_counts", send_counts)
        rca, rcv = self._counts("alltoallv", "recv_counts", recv_counts)
        sda, sdv = self._counts("alltoallv", "send_displs", send_displs, self._packed(scv))
        rda, rdv = self._counts("alltoallv", "recv_displs", recv_displs, self._packed(rcv))
        s, n, dt = _view(send, "alltoallv send", False)
        r, rn, rdt = _view(recv, "alltoallv recv", True)
        sneed = max((d + c for d, c in zip(sdv, scv) if c), default=0)
        rneed = max((d + c for d, c in zip(rdv, rcv) if c), default=0)
        if n < sneed or rn < rneed or rdt != dt:
            raise ValueError(f"chorus: alltoallv: send must hold at least {sneed} and recv "
                             f"{rneed} elements of one dtype")
        return self._call(async_op, (send, recv, sca, sda, rca, rda), recv,
                          lib.chorus_alltoallv, lib.chorus_ialltoallv, s, r, sca, sda, rca,
                          rda, dt)

    def send(self, buf, peer, async_op=False):
        """Sends buf to peer (one message)."""
        b, n, dt = _view(buf, "send buf", False)
        return self._call(async_op, (buf,), None, lib.chorus_send, lib.chorus_isend, b, n, dt,
                          int(peer))

    def recv(self, buf, peer, async_op=False):
        """Receives one message from peer into buf (same size as sent)."""
        b, n, dt = _view(buf, "recv buf", True)
        return self._call(async_op, (buf,), buf, lib.chorus_recv, lib.chorus_irecv, b, n, dt,
                          int(peer))

    def tagged_send(self, buf, peer, tag=0, async_op=False):
        """Sends buf to peer under tag, for the peer's tagged_recv, which matches by tag and
        may take messages from any source (chorus.h, "Tagged point to point"). Completes once
        a receive took the message. The first tagged call makes this comm carry tagged
        messages only: give them a comm of their own (comm.split(0, rank))."""
        _reap()
        b, n, dt = _view(buf, "tagged_send buf", False)
        req = _lib.c_req()
        _check(lib.chorus_tagged_isend(b, n, dt, int(peer), int(tag), self._handle(),
                                       ctypes.byref(req)))
        r = Request(req, (buf,))
        return r if async_op else r.wait()

    def tagged_recv(self, buf, peer=-1, tag=0, async_op=False):
        """Receives into buf the first message under tag from peer (from any rank with
        ANY_SOURCE, the default); its dtype and size must be buf's. Returns the sender's
        rank (async_op: a Request whose wait() returns it)."""
        _reap()
        b, n, dt = _view(buf, "tagged_recv buf", True)
        src = ctypes.c_int(-1)
        req = _lib.c_req()
        _check(lib.chorus_tagged_irecv(b, n, dt, int(peer), int(tag), self._handle(),
                                       ctypes.byref(src), ctypes.byref(req)))
        r = _SourceRequest(req, (buf, src), src)
        return r if async_op else r.wait()

    def barrier(self, async_op=False):
        """Returns once every rank has entered the barrier."""
        _reap()
        if async_op:
            req = _lib.c_req()
            _check(lib.chorus_ibarrier(self._handle(), ctypes.byref(req)))
            return Request(req, None)
        _check(lib.chorus_barrier(self._handle()))
        return None
