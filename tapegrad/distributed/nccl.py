"""The NCCL backend for CUDA ranks, through ``cupy.cuda.nccl``.

UNVERIFIED: no GPU was available where this was written; nothing in the test
suite runs this file. It follows CuPy's documented NCCL API: rank 0 makes the
NCCL unique id, MPI broadcasts it (the bootstrap group), each rank opens an
``NcclCommunicator`` on GPU ``local rank % device count``. CuPy arrays are
reduced on the current stream, and a wait polls ``stream.done`` against the
same deadline as the MPI backend. Objects, barriers and the timeout census go
through the MPI bootstrap group.
"""

from __future__ import annotations

import os
import time

from ..errors import DeviceError, DTypeError
from .group import CollectiveTimeout, ProcessGroup

__all__ = ["NCCLGroup"]


class _StreamRequest:
    def __init__(self, group, stream, label, finish=None):
        self.group, self.stream, self.label, self.finish = group, stream, label, finish

    def test(self) -> bool:
        done = self.stream.done
        if done and self.finish is not None:
            self.finish()
            self.finish = None
        return done

    def wait(self) -> None:
        t0 = time.monotonic()
        while not self.stream.done:
            if time.monotonic() - t0 > self.group.timeout:
                raise CollectiveTimeout(f"{self.label} (NCCL) timed out on rank "
                                        f"{self.group.rank} after {self.group.timeout:g} s")
            time.sleep(5e-5)
        self.test()


class NCCLGroup(ProcessGroup):
    """CUDA ranks over NCCL; ``bootstrap`` is the MPI (or local) group."""

    backend = "nccl"

    def __init__(self, bootstrap, timeout: float):
        try:
            import cupy
            from cupy.cuda import nccl
        except ImportError as exc:
            raise DeviceError("the nccl backend needs CuPy with NCCL (pip install "
                              f"'tapegrad[cuda]'), and a GPU per rank ({exc}); on CPU ranks "
                              "use init_process_group('mpi')") from exc
        try:
            n_gpus = cupy.cuda.runtime.getDeviceCount()
        except Exception as exc:  # CUDA driver missing: CuPy raises its own runtime error
            raise DeviceError(f"the nccl backend needs a CUDA GPU; CuPy found none ({exc}); "
                              "use init_process_group('mpi') on CPU ranks") from exc
        if n_gpus < 1:
            raise DeviceError("the nccl backend needs a CUDA GPU; none is visible")
        self.cupy, self.nccl, self.bootstrap = cupy, nccl, bootstrap
        self.rank, self.size, self.timeout = bootstrap.rank, bootstrap.size, timeout
        local = int(os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK",
                                   os.environ.get("MPI_LOCALRANKID", self.rank)))
        self.device = cupy.cuda.Device(local % n_gpus)
        self.device.use()
        uid = nccl.get_unique_id() if self.rank == 0 else None
        uid = bootstrap.broadcast_object(uid, 0, "broadcast of the NCCL unique id")
        self.comm = nccl.NcclCommunicator(self.size, uid, self.rank)
        self._ops = {"sum": nccl.NCCL_SUM, "max": nccl.NCCL_MAX, "min": nccl.NCCL_MIN,
                     "product": nccl.NCCL_PROD}
        self._types = {"float16": nccl.NCCL_FLOAT16, "float32": nccl.NCCL_FLOAT32,
                       "float64": nccl.NCCL_FLOAT64, "int32": nccl.NCCL_INT32,
                       "int64": nccl.NCCL_INT64, "uint8": nccl.NCCL_UINT8,
                       "int8": nccl.NCCL_INT8}

    def _device_array(self, a, what):
        cp = self.cupy
        if isinstance(a, cp.ndarray) and a.flags.c_contiguous:
            return a, None
        buf = cp.ascontiguousarray(cp.asarray(a))

        def back():
            if isinstance(a, cp.ndarray):
                a[...] = buf
            else:
                a[...] = buf.get()
        return buf, back

    def _type(self, a, what):
        t = self._types.get(a.dtype.name)
        if t is None:
            raise DTypeError(f"{what} (NCCL): dtype {a.dtype} is not supported")
        return t

    def iallreduce(self, a, op="sum", what="all_reduce"):
        buf, back = self._device_array(a, what)
        stream = self.cupy.cuda.get_current_stream()
        self.comm.allReduce(buf.data.ptr, buf.data.ptr, buf.size, self._type(buf, what),
                            self._ops[op], stream.ptr)
        return _StreamRequest(self, stream, what, back)

    def allreduce(self, a, op="sum", what="all_reduce"):
        self.iallreduce(a, op, what).wait()

    def broadcast(self, a, src=0, what="broadcast"):
        buf, back = self._device_array(a, what)
        stream = self.cupy.cuda.get_current_stream()
        self.comm.bcast(buf.data.ptr, buf.size, self._type(buf, what), src, stream.ptr)
        _StreamRequest(self, stream, what, back).wait()

    def allgather(self, a, what="all_gather"):
        buf, _ = self._device_array(a, what)
        out = self.cupy.empty((self.size, *buf.shape), buf.dtype)
        stream = self.cupy.cuda.get_current_stream()
        self.comm.allGather(buf.data.ptr, out.data.ptr, buf.size, self._type(buf, what),
                            stream.ptr)
        _StreamRequest(self, stream, what).wait()
        return out

    def barrier(self, what="barrier"):
        self.bootstrap.barrier(what)

    def allgather_object(self, obj, what="all_gather_object"):
        return self.bootstrap.allgather_object(obj, what)

    def broadcast_object(self, obj, src=0, what="broadcast_object"):
        return self.bootstrap.broadcast_object(obj, src, what)

    def split(self):
        return NCCLGroup(self.bootstrap.split(), self.timeout)

    def abort(self, status=1):
        try:
            self.comm.abort()
        finally:
            self.bootstrap.abort(status)

    def destroy(self):
        self.comm.destroy()
