"""The "chorus" backend of torch.distributed.

    import chorus.torch                     # registers the backend
    torch.distributed.init_process_group("chorus", init_method="env://")

Bootstraps through the Store that init_process_group makes (env://, tcp://, file://,
torchrun), and implements allreduce (SUM, PRODUCT, MIN, MAX, AVG), allreduce_coalesced,
allgather (also with outputs of different sizes), allgather_coalesced, _allgather_base
(all_gather_into_tensor), gather, scatter, reduce_scatter,
_reduce_scatter_base (reduce_scatter_tensor), broadcast, reduce, alltoall, alltoall_base
(with and without split sizes), send and recv (matched by tag; recv from any source), and
barrier, and on torch 2.x the coalesced
all_gather_into_tensor / reduce_scatter_tensor (_coalescing_manager), on CPU tensors of
float32/64, float16, bfloat16, int8/uint8/int32/int64, every call asynchronous (the Work's
wait(), is_completed() and get_future()). Errors raise RuntimeError carrying Chorus's
message (rank, peer, operation). Options(reproducible=1|2) as pg_options makes a group's
floating-point reductions reproducible (class Options below). The C++ side is
python/csrc/process_group_chorus.cpp: one source for torch 1.13 (a c10d::ProcessGroup) and
torch 2.x (a c10d::Backend registered for the cpu device).
"""

import torch.distributed as _dist

try:
    from . import _torch_ext
except ImportError as e:  # built without torch, or against another torch
    raise ImportError(
        "chorus.torch: the backend extension (chorus/_torch_ext) is not built: build it with "
        f"make (needs python3-torch and libtorch-dev) ({e})"
    ) from e

BACKEND = "chorus"


class Options:
    """Options of a chorus process group, passed as pg_options:

        torch.distributed.init_process_group("chorus", pg_options=Options(reproducible=2))
        torch.distributed.new_group(backend="chorus", pg_options=Options(reproducible=1))

    reproducible: 0, 1 (every floating-point reduction in one fixed order: the same bits
    whatever the algorithm or transport) or 2 (SUM and AVG exactly rounded: the same bits
    on any number of ranks); None keeps CHORUS_REPRODUCIBLE (chorus.h,
    chorus_comm_set_reproducible)."""

    def __init__(self, reproducible=None):
        if reproducible not in (None, 0, 1, 2):
            raise ValueError(f"chorus.torch.Options: reproducible={reproducible!r} is not "
                             "None, 0, 1 or 2")
        self.reproducible = reproducible


def _create(opts, pg_options):
    level = -1
    if pg_options is not None:
        if not isinstance(pg_options, Options):
            raise TypeError("the chorus backend takes chorus.torch.Options as pg_options, not "
                            f"{type(pg_options).__name__}")
        if pg_options.reproducible is not None:
            level = pg_options.reproducible
    return _torch_ext.create_process_group(opts.store, opts.group_rank, opts.group_size,
                                           opts.timeout, level)


if BACKEND.upper() not in _dist.Backend._plugins:
    # The extended API hands the creator the pg_options of init_process_group / new_group.
    # torch 2.x binds a backend to device types; this one takes CPU tensors.
    if _torch_ext.torch_version_major >= 2:
        _dist.Backend.register_backend(BACKEND, _create, extended_api=True, devices=["cpu"])
    else:
        _dist.Backend.register_backend(BACKEND, _create, extended_api=True)

build_info = _torch_ext.build_info


def _backend(group):
    """The chorus ProcessGroupChorus behind group (None: the default group)."""
    import torch

    pg = group if group is not None else _dist.group.WORLD
    if pg is None:
        raise RuntimeError("chorus.torch: no default process group (init_process_group first)")
    be = pg._get_backend(torch.device("cpu")) if hasattr(pg, "_get_backend") else pg
    # TORCH_DISTRIBUTED_DEBUG=DETAIL wraps the backend (torch 2.x: every backend) in a
    # _ProcessGroupWrapper that checks collectives' shapes first; registered memory is
    # the wrapped backend's.
    while not hasattr(be, "mem_alloc") and hasattr(be, "wrapped_pg"):
        be = be.wrapped_pg
    if not hasattr(be, "mem_alloc"):
        raise RuntimeError(f"chorus.torch: the group's backend is {type(be).__name__}, not "
                           "chorus")
    return be


_windows = {}  # address -> (backend, tensor base), for free()


def empty(shape, dtype=None, group=None):
    """Collective over group (default: the default group): an uninitialised CPU tensor in
    registered memory (chorus_mem_alloc), which the group's ranks on this host read in place
    in collectives, so an allreduce of it copies each byte once. Every rank calls it with
    the same shape and dtype, in the same order. It lives until free(tensor) (collective)
    or the group's destruction; views of it must not outlive either."""
    import ctypes
    import math

    import torch

    dtype = dtype if dtype is not None else torch.get_default_dtype()
    dims = (int(shape),) if isinstance(shape, int) else tuple(int(d) for d in shape)
    if any(d < 0 for d in dims):
        raise ValueError(f"chorus.torch.empty: shape {shape} has a negative dimension")
    be = _backend(group)
    count = math.prod(dims)
    nbytes = max(1, count * torch.empty((), dtype=dtype).element_size())
    ptr = be.mem_alloc(nbytes)
    raw = (ctypes.c_uint8 * nbytes).from_address(ptr)
    t = torch.frombuffer(raw, dtype=dtype, count=count).view(dims)
    _windows[ptr] = (be, raw)
    return t


def free(tensor, group=None):
    """Collective: frees what empty() returned (every rank its own, of the same call)."""
    ptr = tensor.data_ptr()
    if ptr not in _windows:
        raise ValueError("chorus.torch.free: not a tensor that chorus.torch.empty returned (or "
                         "freed already)")
    be, _ = _windows.pop(ptr)
    be.mem_free(ptr)


def mem_stats(group=None):
    """(calls that read every peer's buffer in place, bytes read from peers' registered
    buffers) on this rank, for group's communicator (chorus_mem_stats)."""
    return tuple(_backend(group).mem_stats())


# ---- recovery: a group that lost a rank goes on in the same processes (issue 39) ----
#
# After a rank dies, the survivors' Work.wait() (or DDP's backward) raises. Each survivor then
# calls shrink(group) and gets a new process group of the survivors over Chorus's shrunk
# communicator: no process restarts and no new store rendezvous. To take new processes in,
# the survivors call grow(group, nnew, uid) with an id from unique_id() on rank 0, which
# hands it to the new processes; they call join(uid, size, rank). The groups these return
# are not registered with torch.distributed (no new_group): pass them where a group object
# is taken (DistributedDataParallel(process_group=...), the group's own methods). Model and
# optimizer state are the program's to share: broadcast(tensor, group) below from rank 0.


def _wrap(be):
    """A process group object over the backend be: on torch 2.x a c10d ProcessGroup with be
    registered for the cpu device (as init_process_group builds one, with a store of its own
    that nothing uses: the communicator is made already); on 1.13 be is one."""
    import torch

    if _torch_ext.torch_version_major < 2:
        return be
    pg = _dist.ProcessGroup(_dist.HashStore(), be.rank(), be.size())
    kind = _dist.ProcessGroup.BackendType.CUSTOM
    pg._register_backend(torch.device("cpu"), kind, be)
    if hasattr(pg, "_set_default_backend"):
        pg._set_default_backend(kind)
    if hasattr(pg, "_set_group_name"):
        pg._set_group_name(f"chorus-recovered-{id(pg):x}")
    return pg


def unique_id():
    """A new id for grow() (bytes; it holds a fresh secret), served by this process: call it
    on rank 0 of the group that grows."""
    from . import _core

    return _core.Comm.unique_id()


def shrink(group=None):
    """Collective over the group's live ranks, after one died: a new process group of the
    survivors, ranked in their old order. The old group is revoked (its later calls fail at
    once); drop it when done."""
    be = _backend(group)
    timeout = be.timeout_seconds()
    return _wrap(_torch_ext.adopt_comm(be.shrink_comm(), timeout))


def failed_ranks(group=None):
    """The ranks of group that the survivors of shrink(group) agreed were lost."""
    return list(_backend(group).failed_ranks())


def grow(group, nnew, uid=None):
    """Collective over group: a new process group with nnew more ranks, group's ranks first.
    Rank 0 gives uid (unique_id()) and hands it to the new processes, which call
    join(uid, size + nnew, size + k)."""
    be = _backend(group)
    timeout = be.timeout_seconds()
    return _wrap(_torch_ext.adopt_comm(be.grow_comm(int(nnew), bytes(uid or b"")), timeout))


def join(uid, size, rank, timeout=300.0):
    """A new process's side of grow(): its process group, as rank `rank` of `size`."""
    return _wrap(_torch_ext.join_comm(bytes(uid), int(size), int(rank), float(timeout)))


def broadcast(tensor, group, root=0):
    """Broadcasts tensor (in place) from root over a group these functions returned (which
    torch.distributed.broadcast does not know), and waits."""
    opts = _dist.BroadcastOptions()
    opts.rootRank = int(root)
    opts.rootTensor = 0
    group.broadcast([tensor], opts).wait()
    return tensor
