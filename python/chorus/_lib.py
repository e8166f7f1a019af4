"""Loading libchorus and declaring its C functions (ctypes).

The library is found, in this order: the CHORUS_LIBRARY environment variable (a path); the
path recorded when the package was installed by ``make install`` (``_libpath.py``); the
build tree next to this source (``../../build/lib``), for running from a checkout; and the
loader's search path (``libchorus.so.0``, as installed by ``make install`` or the Debian
package).
"""

import ctypes
import os

_HERE = os.path.dirname(os.path.abspath(__file__))


def _candidates():
    env = os.environ.get("CHORUS_LIBRARY")
    if env:
        yield env
        return
    try:
        from . import _libpath  # written by make install

        yield _libpath.LIBRARY
    except ImportError:
        pass
    build = os.environ.get("BUILD", "build")
    yield os.path.join(_HERE, "..", "..", build, "lib", "libchorus.so.0")
    yield "libchorus.so.0"


def _load():
    errors = []
    for path in _candidates():
        if os.sep in path and not os.path.exists(path):
            errors.append(f"{path}: no such file")
            continue
        try:
            return ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL), path
        except OSError as e:
            errors.append(str(e))
    raise ImportError(
        "chorus: cannot load libchorus (set CHORUS_LIBRARY to its path, or build it with "
        "make): " + "; ".join(errors)
    )


lib, path = _load()

c_comm = ctypes.c_void_p
c_req = ctypes.c_void_p
_st = ctypes.c_int
_sz = ctypes.c_size_t
_vp = ctypes.c_void_p
_i = ctypes.c_int


class UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * 128)]


def _declare(name, restype, *argtypes):
    fn = getattr(lib, name)
    fn.restype = restype
    fn.argtypes = list(argtypes)
    return fn


_declare("chorus_status_string", ctypes.c_char_p, _st)
_declare("chorus_last_error", ctypes.c_char_p)
_declare("chorus_version", _i)
_declare("chorus_build_info", ctypes.c_char_p)
_declare("chorus_get_unique_id", _st, ctypes.POINTER(UniqueId))
_declare("chorus_comm_init", _st, ctypes.POINTER(c_comm), _i, ctypes.POINTER(UniqueId), _i)
_declare("chorus_comm_init_env", _st, ctypes.POINTER(c_comm))
_declare("chorus_comm_rank", _st, c_comm, ctypes.POINTER(_i))
_declare("chorus_comm_size", _st, c_comm, ctypes.POINTER(_i))
_declare("chorus_comm_split", _st, c_comm, _i, _i, ctypes.POINTER(c_comm))
_declare("chorus_comm_destroy", _st, c_comm)
_declare("chorus_comm_abort", _st, c_comm)
_declare("chorus_comm_set_timeout", _st, c_comm, ctypes.c_double)
_declare("chorus_comm_get_async_error", _st, c_comm, ctypes.POINTER(_st))
# Recovery and the flight recorder.
_declare("chorus_comm_revoke", _st, c_comm)
_declare("chorus_comm_shrink", _st, c_comm, ctypes.c_uint, ctypes.POINTER(c_comm))
_declare("chorus_comm_failed_ranks", _st, c_comm, ctypes.POINTER(_i), _i, ctypes.POINTER(_i))
_declare("chorus_comm_grow", _st, c_comm, _i, ctypes.POINTER(UniqueId), ctypes.POINTER(c_comm))
_declare("chorus_comm_dump_flight_record", _st, c_comm, ctypes.c_char_p)
# Blocking, host memory (stream NULL).
_declare("chorus_allreduce", _st, _vp, _vp, _sz, _i, _i, c_comm, _vp)
_declare("chorus_allgather", _st, _vp, _vp, _sz, _i, c_comm, _vp)
_declare("chorus_reduce_scatter", _st, _vp, _vp, _sz, _i, _i, c_comm, _vp)
_declare("chorus_broadcast", _st, _vp, _vp, _sz, _i, _i, c_comm, _vp)
_declare("chorus_reduce", _st, _vp, _vp, _sz, _i, _i, _i, c_comm, _vp)
_declare("chorus_alltoall", _st, _vp, _vp, _sz, _i, c_comm, _vp)
_SZ = ctypes.POINTER(ctypes.c_size_t)
_declare("chorus_gather", _st, _vp, _vp, _sz, _i, _i, c_comm, _vp)
_declare("chorus_scatter", _st, _vp, _vp, _sz, _i, _i, c_comm, _vp)
_declare("chorus_allgatherv", _st, _vp, _vp, _sz, _SZ, _SZ, _i, c_comm, _vp)
_declare("chorus_reduce_scatterv", _st, _vp, _vp, _SZ, _i, _i, c_comm, _vp)
_declare("chorus_alltoallv", _st, _vp, _vp, _SZ, _SZ, _SZ, _SZ, _i, c_comm, _vp)
_declare("chorus_send", _st, _vp, _sz, _i, _i, c_comm, _vp)
_declare("chorus_recv", _st, _vp, _sz, _i, _i, c_comm, _vp)
_declare("chorus_barrier", _st, c_comm)
# Registered memory.
_declare("chorus_mem_alloc", _st, c_comm, _sz, ctypes.POINTER(_vp))
_declare("chorus_mem_free", _st, c_comm, _vp)
_declare("chorus_mem_stats", _st, c_comm, ctypes.POINTER(ctypes.c_uint64),
         ctypes.POINTER(ctypes.c_uint64))
# Nonblocking.
_R = ctypes.POINTER(c_req)
_declare("chorus_iallreduce", _st, _vp, _vp, _sz, _i, _i, c_comm, _R)
_declare("chorus_iallgather", _st, _vp, _vp, _sz, _i, c_comm, _R)
_declare("chorus_ireduce_scatter", _st, _vp, _vp, _sz, _i, _i, c_comm, _R)
_declare("chorus_ibroadcast", _st, _vp, _vp, _sz, _i, _i, c_comm, _R)
_declare("chorus_ireduce", _st, _vp, _vp, _sz, _i, _i, _i, c_comm, _R)
_declare("chorus_ialltoall", _st, _vp, _vp, _sz, _i, c_comm, _R)
_declare("chorus_igather", _st, _vp, _vp, _sz, _i, _i, c_comm, _R)
_declare("chorus_iscatter", _st, _vp, _vp, _sz, _i, _i, c_comm, _R)
_declare("chorus_iallgatherv", _st, _vp, _vp, _sz, _SZ, _SZ, _i, c_comm, _R)
_declare("chorus_ireduce_scatterv", _st, _vp, _vp, _SZ, _i, _i, c_comm, _R)
_declare("chorus_ialltoallv", _st, _vp, _vp, _SZ, _SZ, _SZ, _SZ, _i, c_comm, _R)
_declare("chorus_ibarrier", _st, c_comm, _R)
_declare("chorus_isend", _st, _vp, _sz, _i, _i, c_comm, _R)
_declare("chorus_irecv", _st, _vp, _sz, _i, _i, c_comm, _R)
_declare("chorus_tagged_isend", _st, _vp, _sz, _i, _i, _i, c_comm, _R)
_declare("chorus_tagged_irecv", _st, _vp, _sz, _i, _i, _i, c_comm, ctypes.POINTER(_i), _R)
_declare("chorus_wait", _st, _R)
_declare("chorus_test", _st, _R, ctypes.POINTER(_i))
_declare("chorus_request_free", _st, _R)
