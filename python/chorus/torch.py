"""The "chorus" backend of torch.distributed.

    import chorus.torch                     # registers the backend
    torch.distributed.init_process_group("chorus", init_method="env://")

Bootstraps through the Store that init_process_group makes (env://, tcp://, file://,
torchrun), and implements allreduce (SUM, PRODUCT, MIN, MAX, AVG), allgather,
_allgather_base, reduce_scatter, _reduce_scatter_base, broadcast, reduce, alltoall,
alltoall_base (with and without split sizes), send, recv and barrier on CPU tensors of
float32/64, float16, bfloat16, int8/uint8/int32/int64, every call asynchronous (the Work's
wait(), is_completed() and get_future()). Errors raise RuntimeError carrying Chorus's
message (rank, peer, operation). The C++ side is python/csrc/process_group_chorus.cpp.
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


def _create(store, rank, size, timeout):
    return _torch_ext.create_process_group(store, rank, size, timeout)


if BACKEND.upper() not in _dist.Backend._plugins:
    _dist.Backend.register_backend(BACKEND, _create)

build_info = _torch_ext.build_info
