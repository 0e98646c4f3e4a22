"""batchfs_gpu - Python binding of libbatchfs-gpu (gpu/batchfs_gpu.h), with DLPack.

Batches of a batchfs mount (or of a directory laid out like one, DIR/epoch/N/batch_K)
delivered into GPU memory by the C library's background thread, and handed to PyTorch,
CuPy, JAX or numpy without a copy through the DLPack protocol::

    with batchfs_gpu.Loader("/mnt/train", dtype="f16", layout="nchw") as loader:
        for batch in loader:
            images = torch.from_dlpack(batch["images"])   # on the current stream

Token datasets (docs/sequences.md) work the same way, their tensors as the files hold
them (batch["tokens"] int32, batch["mask"] uint8, ...; no dtype=/normalize=/layout=), and
so do the field tensors of multi-field datasets (batch["caption"] uint8,
batch["caption_lengths"] int32, ...; docs/multimodal.md), after images, labels, indices.

One module, pure ctypes, no compiled part. The library is found through
$BATCHFS_GPU_LIBRARY, else build/libbatchfs-gpu.so of the source tree this file sits in
(gpu/python/../../build), else libbatchfs-gpu.so.1 on the loader's search path.

Lifetimes: every Batch object holds a retain of its C batch (bfsg_batch_retain), dropped
exactly once by Batch.release() or when the object is collected, so a Batch and its
tensors stay valid while referenced, also after the next batch was taken and after the
Loader was closed. A batch still referenced when the next one is taken leaves the
loader's ring and a spare takes its place; its buffers become the next spare when its
last reference goes, so holding batches a step longer allocates nothing. A DLPack
capsule holds a retain of its
own, released by the consumer (or by the capsule's destructor when it was never
consumed).

Threads: a Loader is used by one thread at a time; Batch.release, collection and the
DLPack deleters may happen on any thread.
"""
from __future__ import annotations

import ctypes
import os
import sys
import threading
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

__all__ = ["BatchfsGpuError", "Loader", "Batch", "Tensor", "API_VERSION", "library_path"]

API_VERSION = 3  # BFSG_API_VERSION of the header this module binds

_MAX_TENSORS = 64  # BFSG_MAX_TENSORS
_MAX_DIMS = 8  # BFSG_MAX_DIMS
_DEVICE_CPU = 1  # BFSG_DEVICE_CPU == kDLCPU
_DEVICE_CUDA = 2  # BFSG_DEVICE_CUDA == kDLCUDA

# bfsg_dtype -> numpy-style name (5, BFSG_I32: token batches; 6, 7: fields)
_DTYPES = {0: "uint8", 1: "float16", 2: "bfloat16", 3: "float32", 4: "int64", 5: "int32",
           6: "uint16", 7: "uint32"}


# ---- the C structs (gpu/batchfs_gpu.h, gpu/dlpack.h) -------------------------------------


class _CTensor(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("dtype", ctypes.c_int),
        ("ndim", ctypes.c_uint32),
        ("shape", ctypes.c_int64 * _MAX_DIMS),
        ("strides", ctypes.c_int64 * _MAX_DIMS),
        ("data", ctypes.c_void_p),
        ("nbytes", ctypes.c_uint64),
    ]


class _CBatch(ctypes.Structure):
    _fields_ = [
        ("epoch", ctypes.c_uint64),
        ("index", ctypes.c_uint64),
        ("path", ctypes.c_char_p),
        ("n_tensors", ctypes.c_uint32),
        ("tensors", _CTensor * _MAX_TENSORS),
        ("device_type", ctypes.c_int),
        ("device_id", ctypes.c_int),
        ("ready_event", ctypes.c_void_p),
    ]


class _CStats(ctypes.Structure):
    _fields_ = [
        ("batches", ctypes.c_uint64),
        ("bytes_read", ctypes.c_uint64),
        ("host_copies", ctypes.c_uint64),
        ("registered", ctypes.c_uint64),
        ("staged", ctypes.c_uint64),
        ("converted", ctypes.c_uint64),
        ("wait_ns", ctypes.c_uint64),
        ("register_ns_per_mb", ctypes.c_uint64),
        ("staging_ns_per_mb", ctypes.c_uint64),
        ("device", ctypes.c_char * 96),
        ("copy", ctypes.c_char * 16),
        ("fallback", ctypes.c_char * 256),
        ("pooled", ctypes.c_uint64),
        ("pool_staged", ctypes.c_uint64),
    ]


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


_DLDeleter = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [
        ("dl_tensor", _DLTensor),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", _DLDeleter),
    ]


# ---- the library ---------------------------------------------------------------------------


class BatchfsGpuError(OSError):
    """A failure of libbatchfs-gpu: .errno is the positive errno (ENOENT, EINVAL, EBADMSG,
    ENODEV, EPROTO, ...), .strerror the library's message (bfsg_error), which names the
    file, the parameter or the CUDA call."""

    def __init__(self, err: int, message: str) -> None:
        super().__init__(err, message or os.strerror(err))


def library_path() -> str:
    """The libbatchfs-gpu this module loads: $BATCHFS_GPU_LIBRARY, else the build tree's
    build/libbatchfs-gpu.so (relative to this file: ../../build), else the installed
    libbatchfs-gpu.so.1 on the dynamic loader's search path."""
    env = os.environ.get("BATCHFS_GPU_LIBRARY")
    if env:
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    built = os.path.normpath(os.path.join(here, "..", "..", "build", "libbatchfs-gpu.so"))
    if os.path.exists(built):
        return built
    return "libbatchfs-gpu.so.1"


_lib_lock = threading.Lock()
_lib_handle: Optional[ctypes.CDLL] = None


def _lib() -> ctypes.CDLL:
    """Load the library once (at the first Loader) and declare its prototypes."""
    global _lib_handle
    with _lib_lock:
        if _lib_handle is not None:
            return _lib_handle
        path = library_path()
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            raise BatchfsGpuError(
                2, f"cannot load libbatchfs-gpu from {path}: {e} (build it with 'make gpu', "
                "or set BATCHFS_GPU_LIBRARY to its path)") from None
        vp, i, u64 = ctypes.c_void_p, ctypes.c_int, ctypes.c_uint64
        protos: Dict[str, Tuple[Any, List[Any]]] = {
            "bfsg_create": (i, [i, ctypes.POINTER(vp)]),
            "bfsg_destroy": (None, [vp]),
            "bfsg_error": (ctypes.c_char_p, [vp]),
            "bfsg_set": (i, [vp, ctypes.c_char_p, ctypes.c_char_p]),
            "bfsg_set_stream": (i, [vp, vp]),
            "bfsg_open": (i, [vp, ctypes.c_char_p]),
            "bfsg_seek": (i, [vp, u64, u64]),
            "bfsg_next": (i, [vp, ctypes.POINTER(vp)]),
            "bfsg_batch_retain": (i, [vp]),
            "bfsg_batch_release": (None, [vp]),
            "bfsg_batch_sync": (i, [vp]),
            "bfsg_batch_wait_stream": (i, [vp, vp]),
            "bfsg_batch_dlpack": (i, [vp, ctypes.c_uint32, ctypes.POINTER(vp)]),
            "bfsg_get_stats": (i, [vp, ctypes.POINTER(_CStats)]),
        }
        for name, (restype, argtypes) in protos.items():
            f = getattr(lib, name)
            f.restype = restype
            f.argtypes = argtypes
        _lib_handle = lib
        return lib


def _text(b: Optional[bytes]) -> str:
    return os.fsdecode(b) if b else ""


# ---- DLPack capsules -------------------------------------------------------------------------
#
# Private prototypes of the C API (not ctypes.pythonapi.X.argtypes, which other modules
# share). The destructor gets the capsule as a plain address: a py_object argument would
# take a new reference to an object being deallocated.

_PyCapsuleDestructor = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_PyCapsule_New = ctypes.PYFUNCTYPE(
    ctypes.py_object, ctypes.c_void_p, ctypes.c_void_p, _PyCapsuleDestructor
)(("PyCapsule_New", ctypes.pythonapi))
_PyCapsule_IsValid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)(
    ("PyCapsule_IsValid", ctypes.pythonapi))
_PyCapsule_GetPointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi))
# The capsule name: PyCapsule keeps the pointer, so the bytes must outlive every capsule,
# also those freed at interpreter exit; the buffer is never freed (one reference leaked).
_DLTENSOR_NAME = ctypes.create_string_buffer(b"dltensor")
_DLTENSOR_ADDR = ctypes.addressof(_DLTENSOR_NAME)


# A consumer may drop the capsule while an exception is pending (numpy.from_dlpack of a
# device or a dtype it lacks sets its error, then drops the capsule): any C call made from
# Python would then fail, so the destructor's first call takes the exception out. It must
# convert no argument, which could see the pending error: 3.12+ has a call without any,
# before that PyErr_Fetch writes into buffers made in advance.
if sys.version_info >= (3, 12):
    _take_exception = ctypes.PYFUNCTYPE(ctypes.c_void_p)(
        ("PyErr_GetRaisedException", ctypes.pythonapi))
    _put_exception = ctypes.PYFUNCTYPE(None, ctypes.c_void_p)(
        ("PyErr_SetRaisedException", ctypes.pythonapi))
else:
    _PyErr_Fetch = ctypes.PYFUNCTYPE(None)(("PyErr_Fetch", ctypes.pythonapi))  # args as given
    _PyErr_Restore = ctypes.PYFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)(
        ("PyErr_Restore", ctypes.pythonapi))
    _EXC = (ctypes.c_void_p * 3)()
    _EXC_ARGS = tuple(ctypes.c_void_p(ctypes.addressof(_EXC) + k * ctypes.sizeof(ctypes.c_void_p))
                      for k in range(3))

    def _take_exception(_fetch: Any = _PyErr_Fetch, _args: Any = _EXC_ARGS,
                        _exc: Any = _EXC) -> Any:
        # (A thread switch between the two lines, to a thread dropping a capsule of its own,
        # could swap the two threads' exceptions; 3.12+ has no such window.)
        _fetch(*_args)
        e = (_exc[0], _exc[1], _exc[2])
        _exc[0] = _exc[1] = _exc[2] = None
        return e if e[0] else None

    def _put_exception(e: Any, _restore: Any = _PyErr_Restore) -> None:
        _restore(*e)


def _capsule_destructor(capsule: Optional[int], _take: Any = _take_exception,
                        _put: Any = _put_exception, _valid: Any = _PyCapsule_IsValid,
                        _get: Any = _PyCapsule_GetPointer, _name: int = _DLTENSOR_ADDR,
                        _managed: Any = _DLManagedTensor) -> None:
    """PyCapsule destructor of the capsules __dlpack__ returns: runs the managed tensor's
    deleter unless a consumer took it (and renamed the capsule "used_dltensor").

    Everything it needs is bound as a default argument: it also runs at interpreter exit,
    when module globals may already be gone."""
    pending = _take()  # first: see above
    try:
        if capsule and _valid(capsule, _name):
            m = _get(capsule, _name)
            if m:
                _managed.from_address(m).deleter(m)
    finally:
        if pending:
            # A ctypes callback cannot leave an exception pending for its caller: put back,
            # it is reported ("Exception ignored ... ctypes callback") instead of lost; the
            # consumer then raises SystemError ("returned NULL without setting an exception").
            _put(pending)


_CAPSULE_DESTRUCTOR = _PyCapsuleDestructor(_capsule_destructor)
# never freed, like the name: capsules alive at interpreter exit still call it
ctypes.pythonapi.Py_IncRef(ctypes.py_object(_CAPSULE_DESTRUCTOR))
ctypes.pythonapi.Py_IncRef(ctypes.py_object(_DLTENSOR_NAME))


def _dlpack_stream(stream: Optional[int]) -> Optional[int]:
    """The CUstream to wait on for DLPack's stream argument (CUDA), or None for no wait.

    None: the consumer did not say; DLPack says to assume the legacy default stream.
    -1: no synchronization. 1: the legacy default stream (passed as NULL). 2: the
    per-thread default stream (passed as the driver's CU_STREAM_PER_THREAD, which is 2).
    Other values > 2: a CUstream handle. 0 is ambiguous and refused, as DLPack says."""
    if stream is None:
        return 0
    if isinstance(stream, bool) or not isinstance(stream, int):
        raise TypeError(f"__dlpack__: stream must be an int or None, not {type(stream).__name__}")
    if stream == -1:
        return None
    if stream == 1:
        return 0
    if stream == 0 or stream < -1:
        raise ValueError(f"__dlpack__: stream={stream} is not a DLPack CUDA stream "
                         "(None, -1, 1 (legacy default), 2 (per-thread default) or a handle)")
    return stream


# ---- objects -----------------------------------------------------------------------------------


class Tensor:
    """One tensor of a Batch: images, labels or indices; or a token batch's tokens,
    positions, lengths, indices, mask (as the file names them). Holds its Batch, so the data
    stays valid while the Tensor is referenced. The data is device memory when .device is
    "cuda:N": read it through DLPack (torch.from_dlpack) or cuda calls, never as a host
    pointer."""

    __slots__ = ("_batch", "_i", "name", "dtype", "shape", "strides", "data_ptr", "nbytes")

    def __init__(self, batch: "Batch", i: int, meta: "_TensorMeta") -> None:
        self._batch = batch
        self._i = i
        self.name: str = meta.name
        # 'uint8', 'float16', 'bfloat16', 'float32', 'int64', 'int32'
        self.dtype: str = meta.dtype
        self.shape: Tuple[int, ...] = meta.shape
        self.strides: Tuple[int, ...] = meta.strides  # in elements
        self.data_ptr: int = meta.data_ptr
        self.nbytes: int = meta.nbytes

    @property
    def batch(self) -> "Batch":
        """The Batch this tensor belongs to."""
        return self._batch

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def device(self) -> str:
        """"cpu" or "cuda:N"."""
        return self._batch.device

    def __repr__(self) -> str:
        return (f"<batchfs_gpu.Tensor {self.name} {self.dtype}{list(self.shape)} "
                f"on {self.device}>")

    def __dlpack_device__(self) -> Tuple[int, int]:
        """(1, 0) on the host (kDLCPU), (2, N) on CUDA device N (kDLCUDA)."""
        b = self._batch
        return (_DEVICE_CUDA, b._device_id) if b._cuda else (_DEVICE_CPU, 0)

    def __dlpack__(self, *, stream: Optional[int] = None,
                   max_version: Optional[Tuple[int, int]] = None,
                   dl_device: Optional[Tuple[int, int]] = None,
                   copy: Optional[bool] = None) -> Any:
        """A PyCapsule "dltensor" holding a DLManagedTensor (DLPack 0.8 ABI, also what
        consumers asking for max_version (1, x) accept) of this tensor; it holds a retain
        of the batch until the consumer's deleter runs.

        stream (CUDA only; ignored on the host): the consumer's stream is made to wait for
        the batch's copies (bfsg_batch_wait_stream), without blocking the host. None: the
        legacy default stream; -1: no synchronization; 1: the legacy default stream; 2:
        the per-thread default stream; > 2: a CUstream handle (as an int). dl_device other
        than this tensor's, or copy=True, raise BufferError: the binding never copies."""
        b = self._batch
        h = b._handle_or_raise()
        if dl_device is not None and tuple(dl_device) != self.__dlpack_device__():
            raise BufferError(f"{self.name} is on {self.device}: cannot export it to DLPack "
                              f"device {tuple(dl_device)} (no copies)")
        if copy:
            raise BufferError(f"{self.name}: copy=True asked, the batchfs_gpu binding "
                              "exports without copying")
        lib = b._lib
        if b._cuda:
            s = _dlpack_stream(stream)
            if s is not None:
                rc = lib.bfsg_batch_wait_stream(h, s or None)
                if rc:
                    raise BatchfsGpuError(-rc, f"{b.path}: cuStreamWaitEvent on stream "
                                               f"{stream!r} failed (bfsg_batch_wait_stream)")
        out = ctypes.c_void_p()
        rc = lib.bfsg_batch_dlpack(h, self._i, ctypes.byref(out))
        if rc:
            raise BatchfsGpuError(-rc, f"{b.path}: bfsg_batch_dlpack of {self.name} failed")
        m = int(out.value or 0)
        try:
            return _PyCapsule_New(m, _DLTENSOR_ADDR, _CAPSULE_DESTRUCTOR)
        except BaseException:
            _DLManagedTensor.from_address(m).deleter(m)
            raise

    def numpy(self) -> Any:
        """A numpy array over the tensor's host memory, no copy (device "cpu" only); the
        array keeps the batch alive. numpy has no bfloat16: such tensors raise TypeError
        (use .torch())."""
        if self._batch._cuda:
            raise TypeError(f"{self.name} is on {self.device}: numpy() needs host memory "
                            "(use .torch() or another DLPack consumer)")
        if self.dtype == "bfloat16":
            raise TypeError(f"{self.name} is bfloat16, which numpy lacks: use .torch()")
        self._batch._handle_or_raise()
        import numpy

        if hasattr(numpy, "from_dlpack"):
            return numpy.from_dlpack(self)
        return numpy.asarray(_ArrayInterface(self))

    def torch(self) -> Any:
        """torch.from_dlpack(self): a torch.Tensor sharing the memory, ordered after the
        batch's copies on torch's current CUDA stream."""
        import torch

        return torch.from_dlpack(self)


class _ArrayInterface:
    """numpy's __array_interface__ over a CPU tensor (numpy without from_dlpack); the
    array's base is this object, which holds the Tensor and so the batch."""

    def __init__(self, t: Tensor) -> None:
        self._tensor = t
        code = {"uint8": "|u1", "float16": "<f2", "float32": "<f4", "int64": "<i8",
                "int32": "<i4", "uint16": "<u2", "uint32": "<u4"}[t.dtype]
        size = int(code[2:])
        self.__array_interface__ = {
            "version": 3,
            "data": (t.data_ptr, False),
            "shape": t.shape,
            "strides": tuple(s * size for s in t.strides),
            "typestr": code,
        }


class _TensorMeta:
    """A tensor view copied out of bfsg_tensor (the C struct lives as long as the batch)."""

    __slots__ = ("name", "dtype", "shape", "strides", "data_ptr", "nbytes")

    def __init__(self, t: _CTensor) -> None:
        n = min(int(t.ndim), _MAX_DIMS)
        self.name = _text(t.name)
        self.dtype = _DTYPES.get(int(t.dtype), f"unknown{int(t.dtype)}")
        self.shape = tuple(int(t.shape[k]) for k in range(n))
        self.strides = tuple(int(t.strides[k]) for k in range(n))
        self.data_ptr = int(t.data or 0)
        self.nbytes = int(t.nbytes)


class Batch:
    """One delivered batch (the file epoch/<epoch>/batch_<index>): its tensors by name,
    batch["images"], batch["labels"], batch["indices"] and a multi-field dataset's field
    tensors (batch["caption"], batch["caption_lengths"], ...); for a token batch the file's
    tensors in data order (batch["tokens"], and "positions", or "lengths", "indices",
    "mask"), whose shapes may differ from batch to batch (pack=bucket).

    Valid while referenced: the object holds a retain of the C batch, released once by
    release() (or with-block exit, or collection). After release() the tensors' data is
    gone (tensors already exported through DLPack keep their own hold). Tensor objects
    point to their Batch, never the reverse, so that dropping the last reference releases
    the batch at once (no cycle left to the garbage collector)."""

    def __init__(self, lib: ctypes.CDLL, ptr: int) -> None:
        """Wraps a bfsg_batch * that the caller retained for this object."""
        self._lib = lib
        self._release_fn = lib.bfsg_batch_release  # held: also usable at interpreter exit
        self._ptr: List[int] = [ptr]  # popped once by release(): atomic, also across threads
        c = _CBatch.from_address(ptr)
        self.epoch: int = int(c.epoch)
        self.index: int = int(c.index)
        self.path: str = _text(c.path)
        self._cuda = c.device_type == _DEVICE_CUDA
        self._device_id = int(c.device_id)
        self._meta = [_TensorMeta(c.tensors[i]) for i in range(min(int(c.n_tensors), _MAX_TENSORS))]

    @property
    def tensors(self) -> Dict[str, Tensor]:
        """name -> Tensor, in the file's order (images, labels, indices; a token batch's
        data order)."""
        return {m.name: Tensor(self, i, m) for i, m in enumerate(self._meta)}

    @property
    def device(self) -> str:
        """"cpu" or "cuda:N"."""
        return f"cuda:{self._device_id}" if self._cuda else "cpu"

    @property
    def released(self) -> bool:
        return not self._ptr

    def _handle_or_raise(self) -> int:
        p = self._ptr
        if not p:
            raise ValueError(f"batch {self.path} was released")
        return p[0]

    def __getitem__(self, name: str) -> Tensor:
        for i, m in enumerate(self._meta):
            if m.name == name:
                return Tensor(self, i, m)
        raise KeyError(f"{name!r}: batch {self.path} has {[m.name for m in self._meta]}")

    def __contains__(self, name: object) -> bool:
        return any(m.name == name for m in self._meta)

    def keys(self) -> List[str]:
        return [m.name for m in self._meta]

    def sync(self) -> None:
        """Block until the batch's data is on the device (a no-op on the host). Host code
        that reads device memory by other means than a stream needs it."""
        rc = self._lib.bfsg_batch_sync(self._handle_or_raise())
        if rc:
            raise BatchfsGpuError(-rc, f"{self.path}: cuEventSynchronize failed")

    def release(self) -> None:
        """Drop this object's hold of the batch (once; later calls do nothing). Safe after
        the Loader was closed."""
        try:
            p = self._ptr.pop()
        except (IndexError, AttributeError):
            return
        self._release_fn(p)

    def __enter__(self) -> "Batch":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()

    def __del__(self) -> None:
        self.release()

    def __repr__(self) -> str:
        state = " released" if self.released else ""
        return (f"<batchfs_gpu.Batch epoch {self.epoch} batch {self.index} on {self.device}"
                f"{state}: {', '.join(f'{m.name} {m.dtype}{list(m.shape)}' for m in self._meta)}>")


class Loader:
    """A libbatchfs-gpu loader over a batchfs mount or a directory laid out like one
    (path/epoch/N/batch_K). Iterate it for Batch objects, in order; use it as a context
    manager, or close() it.

    Parameters (see bfsg_set in gpu/batchfs_gpu.h; None leaves the library's default):
      device        "auto" (CUDA device 0 when a driver and a device exist, else the host)
                    | "cpu" | "cuda" | "cuda:N"
      rank, world   deliver batches rank, rank+world, ... of each epoch
      epoch_begin   first epoch; epoch_end: one past the last (default: all listed)
      depth         batches in flight ahead of the consumer, 1..8 (default: 3 on a
                    device, 2 on the host)
      copy          "auto" | "pool" | "staging" | "register" (CUDA only; pool: the
                    mount's gpu_pool_mb= pool file, registered once; auto takes it
                    where the mount offers one)
      dtype         "u8" | "f16" | "bf16" | "f32": convert u8 images on the device
                    (this and normalize, layout: images only; each token batch is
                    refused with EINVAL when one is set)
      normalize     "imagenet" | "none" | "m0,m1,m2/s0,s1,s2", or ((m0,m1,m2), (s0,s1,s2))
      layout        "nhwc" | "nchw"
      stream        the consumer's CUstream: an int handle (0: the legacy default
                    stream), or an object with .cuda_stream (torch.cuda.Stream,
                    cupy.cuda.Stream). Each batch's copies are ordered before work later
                    queued on it. Default: the legacy default stream.
      cuda_library  the CUDA driver library to load (default: $BATCHFS_GPU_LIBCUDA, else
                    libcuda.so.1)
      **params      further named parameters, passed to bfsg_set as text

    Raises BatchfsGpuError (an OSError: .errno, and a message naming the file, the
    parameter or the CUDA call) on any failure of the library."""

    def __init__(self, path: Union[str, "os.PathLike[str]"], *, device: str = "auto",
                 rank: int = 0, world: int = 1, epoch_begin: int = 0,
                 epoch_end: Optional[int] = None, depth: Optional[int] = None, copy: str = "auto",
                 dtype: Optional[str] = None,
                 normalize: Union[str, Tuple[Sequence[float], Sequence[float]], None] = None,
                 layout: Optional[str] = None, stream: Any = None,
                 cuda_library: Optional[str] = None, **params: Any) -> None:
        self._h: Optional[int] = None
        lib = _lib()
        self._lib = lib
        h = ctypes.c_void_p()
        rc = lib.bfsg_create(API_VERSION, ctypes.byref(h))
        if rc:
            msg = "out of memory"
            if -rc == 71:  # EPROTO
                msg = (f"{library_path()} does not implement API version {API_VERSION}: "
                       "use the library this module came with")
            raise BatchfsGpuError(-rc, f"bfsg_create: {msg}")
        self._h = h.value
        self.path = os.fspath(path)
        try:
            named: Dict[str, Any] = {
                "device": device, "cuda_library": cuda_library, "rank": rank, "world": world,
                "epoch_begin": epoch_begin, "epoch_end": epoch_end, "depth": depth,
                "copy": copy, "dtype": dtype, "normalize": _normalize_text(normalize),
                "layout": layout,
            }
            named.update(params)
            for name, value in named.items():
                if value is not None:
                    self._set(name, value)
            if stream is not None:
                handle = getattr(stream, "cuda_stream", stream)
                if isinstance(handle, bool) or not isinstance(handle, int):
                    raise TypeError(f"stream: an int CUstream handle or an object with "
                                    f".cuda_stream, not {type(stream).__name__}")
                self._check(lib.bfsg_set_stream(self._h, handle or None), "bfsg_set_stream")
            self._check(lib.bfsg_open(self._h, os.fsencode(self.path)), f"open {self.path}")
        except BaseException:
            self.close()
            raise

    def _set(self, name: str, value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            raise TypeError(f"parameter {name}: a str or an int, not {type(value).__name__}")
        self._check(self._lib.bfsg_set(self._h, name.encode(), str(value).encode()),
                    f"parameter {name}={value}")

    def _check(self, rc: int, what: str) -> None:
        if rc:
            msg = _text(self._lib.bfsg_error(self._h))
            raise BatchfsGpuError(-rc, msg or f"{what}: {os.strerror(-rc)}")

    def _handle(self) -> int:
        if self._h is None:
            raise ValueError("the batchfs_gpu Loader is closed")
        return self._h

    def close(self) -> None:
        """Stop the background thread and free the loader (bfsg_destroy). Batches and
        DLPack tensors still referenced stay valid. Closing twice is a no-op."""
        h, self._h = self._h, None
        if h is not None:
            self._lib.bfsg_destroy(h)

    @property
    def closed(self) -> bool:
        return self._h is None

    def __enter__(self) -> "Loader":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        if getattr(self, "_h", None) is not None:
            self.close()

    def next_batch(self) -> Optional[Batch]:
        """The next batch, or None after the last one. Raises BatchfsGpuError for a file
        that is not a valid batch (EBADMSG), a read error (EIO, ...) or a CUDA failure
        (EPROTO), naming it; the next call goes on with the batch after the failed one."""
        h = self._handle()
        out = ctypes.c_void_p()
        self._check(self._lib.bfsg_next(h, ctypes.byref(out)), "bfsg_next")
        if not out.value:
            return None
        rc = self._lib.bfsg_batch_retain(out.value)
        if rc:
            raise BatchfsGpuError(-rc, "bfsg_batch_retain failed")
        return Batch(self._lib, out.value)

    def __iter__(self) -> "Loader":
        return self

    def __next__(self) -> Batch:
        b = self.next_batch()
        if b is None:
            raise StopIteration
        return b

    def seek(self, epoch: int, batch: int) -> None:
        """The next batch delivered is (epoch, batch) (one of this rank's); batches in
        flight are dropped. Raises BatchfsGpuError (EINVAL) for another rank's batch or an
        epoch outside [epoch_begin, epoch_end)."""
        self._check(self._lib.bfsg_seek(self._handle(), epoch, batch), "bfsg_seek")

    def stats(self) -> Dict[str, Union[int, str]]:
        """What the loader did since it opened: the fields of bfsg_stats (batches,
        bytes_read, host_copies, registered, staged, converted, wait_ns,
        register_ns_per_mb, staging_ns_per_mb, pooled, pool_staged, and the strings device, copy,
        fallback)."""
        s = _CStats()
        self._check(self._lib.bfsg_get_stats(self._handle(), ctypes.byref(s)), "bfsg_get_stats")
        out: Dict[str, Union[int, str]] = {}
        for field in _CStats._fields_:
            v = getattr(s, field[0])
            out[field[0]] = v.decode("utf-8", "replace") if isinstance(v, bytes) else int(v)
        return out

    @property
    def device(self) -> str:
        """Where batches land: "cpu", or "cuda:N NAME" (the device's name)."""
        return str(self.stats()["device"])

    def __repr__(self) -> str:
        if self._h is None:
            return f"<batchfs_gpu.Loader {self.path!r} closed>"
        return f"<batchfs_gpu.Loader {self.path!r} on {self.device}>"


def _normalize_text(v: Union[str, Tuple[Sequence[float], Sequence[float]], None]) -> Optional[str]:
    if v is None or isinstance(v, str):
        return v
    mean, std = v[0], v[1]
    return ",".join(repr(float(x)) for x in mean) + "/" + ",".join(repr(float(x)) for x in std)
