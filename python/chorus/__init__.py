"""Chorus: collective communication for distributed training, from Python.

    import numpy as np, chorus
    with chorus.Comm.from_env() as comm:          # chorusrun, torchrun's env://, mpirun
        x = np.full(1024, comm.rank + 1, dtype=np.float32)
        comm.allreduce(x)                         # in place, blocking
        req = comm.allreduce(x, op="max", async_op=True)
        ...                                       # compute while it runs
        req.wait()

Buffers are numpy arrays or CPU torch tensors, contiguous, never copied. Errors raise
ChorusError (``.status``, ``.status_name``, ``.message``). ``import chorus.torch``
registers the "chorus" backend of torch.distributed. ``chorus.empty(shape, dtype, comm)``
gives an array in registered memory, which the ranks of a host read in place.

The library is libchorus (found as described in chorus._lib).
"""

from ._core import (  # noqa: F401
    ANY_SOURCE,
    DTYPES,
    OPS,
    ChorusError,
    Comm,
    Request,
    build_info,
    empty,
)
from ._lib import path as library_path  # noqa: F401

__all__ = ["Comm", "Request", "ChorusError", "build_info", "library_path", "DTYPES", "OPS",
           "ANY_SOURCE", "empty"]
__version__ = "0.1.0"
