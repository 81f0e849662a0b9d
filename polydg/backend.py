"""The one place that knows NumPy from CuPy (docs/design.md §12).

A backend is a name: ``"numpy"`` (the CPU path), ``"cupy"`` (the GPU path:
numba-cuda kernels on CuPy arrays, ``polydg/assembly/cuda_passes.py``) or
``"auto"`` (CuPy when a GPU is usable, else NumPy).  Array-level code asks
:func:`array_module` for ``xp`` and uses the few primitives here that differ
between the two: segment sums, scatter-add, transfers and the free-memory
query.  Everything CuPy-only sits in the ``_cupy_*`` helpers below, each a
few lines.

``"cudasim"`` is for tests only: the GPU executor on NumPy arrays under
numba-cuda's CPU simulator (``NUMBA_ENABLE_CUDASIM=1`` set before
``numba.cuda`` is first imported); it is refused anywhere else.
"""

from __future__ import annotations

import importlib.util
import os
import threading
import time
from contextlib import contextmanager
from collections.abc import MutableMapping
from functools import lru_cache

import numpy as np

from .errors import OptionError

BACKENDS = ("numpy", "cupy", "auto")
#: the test-only backend: the GPU executor on NumPy arrays, under numba-cuda's simulator
SIMULATOR = "cudasim"


# ---------------------------------------------------------------------------
# which backend runs


def gpu_unavailable_reason() -> str | None:
    """Why CuPy cannot run here (one phrase), or None when it imports and sees a CUDA device."""
    if importlib.util.find_spec("cupy") is None:
        return "cupy is not installed (pip install 'polydg[gpu]')"
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() > 0:
            return None
        return "no CUDA device is visible"
    except Exception as exc:  # no driver, no device, a broken install
        return f"no usable CUDA device ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})"


def gpu_available() -> bool:
    """True when CuPy imports and sees at least one CUDA device."""
    return gpu_unavailable_reason() is None


def simulator_enabled(environ: MutableMapping[str, str] = os.environ) -> bool:
    """True when numba-cuda runs (or will run) its CPU simulator: ``NUMBA_ENABLE_CUDASIM=1``."""
    return environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0")


def resolve_backend(name: str, say=None) -> str:
    """The backend that will run: "numpy" or "cupy" (or the test-only "cudasim").

    ``auto`` picks CuPy only when a GPU is usable; with ``say`` (a callable
    taking one line) it says which it chose and why.  Raises
    :class:`OptionError`, one line, for unknown names, for ``cupy`` without
    CuPy or without a device, and for ``cudasim`` outside the simulator.
    """
    if name == SIMULATOR:
        if not simulator_enabled():
            raise OptionError("backend 'cudasim' is for tests: it needs NUMBA_ENABLE_CUDASIM=1")
        return SIMULATOR
    if name not in BACKENDS:
        raise OptionError(f"unknown backend {name!r}; choose one of {', '.join(BACKENDS)}")
    if name == "numpy":
        return "numpy"
    reason = gpu_unavailable_reason()
    if name == "auto":
        chosen = "numpy" if reason else "cupy"
        if say is not None:
            say(f"backend auto: {chosen} ({reason or 'GPU ' + device_name()})")
        return chosen
    if reason:
        raise OptionError(f"backend 'cupy': {reason}")
    return "cupy"


def device_synchronizer(backend: str):
    """A callable that waits until the device of ``backend`` has run its queued work ("cupy": every stream
    of the current device), or None where array calls run as they are made (NumPy, the simulator)."""
    if backend != "cupy":
        return None
    import cupy

    return cupy.cuda.Device().synchronize


def on_default_stream(backend: str) -> bool:
    """Whether the array calls of ``backend`` go to a default stream (CuPy's legacy or per-thread one; always
    so off a GPU).  polydg's kernels run on the legacy default stream, which orders itself with those; under a
    stream of the caller's own the executors wait for each launch before the array code reads its output."""
    if backend != "cupy":
        return True
    import cupy

    return cupy.cuda.get_current_stream().ptr in (0, 1, 2)


def device_name(backend: str = "cupy") -> str:
    """The name of the device that runs ``backend``: the current CUDA device, "CPU simulator" or "cpu"."""
    if backend == SIMULATOR:
        return "CPU simulator"
    if backend != "cupy":
        return "cpu"
    import cupy

    props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
    name = props["name"]
    return name.decode() if isinstance(name, bytes) else str(name)


def backend_versions(backend: str) -> dict[str, str]:
    """What runs a device backend, for reports: CuPy, numba-cuda, the CUDA runtime and driver, the compute
    capability ("cupy"); numba-cuda alone for the simulator; nothing for the CPU.

    >>> backend_versions("numpy")
    {}
    """
    if not is_device(backend):
        return {}
    out = {"numba_cuda": _distribution_version("numba-cuda")}
    if backend == SIMULATOR:
        return {**out, "cuda": "simulator"}
    import cupy

    runtime = cupy.cuda.runtime
    props = runtime.getDeviceProperties(cupy.cuda.Device().id)
    return {**out, "cupy": cupy.__version__, "cuda_runtime": _cuda_version(runtime.runtimeGetVersion()),
            "cuda_driver": _cuda_version(runtime.driverGetVersion()),
            "compute_capability": f"{props['major']}.{props['minor']}"}


@lru_cache(maxsize=None)
def _distribution_version(name: str) -> str:
    """The installed version of distribution ``name``, or "absent"."""
    import importlib.metadata

    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "absent"


def _cuda_version(code: int) -> str:
    """CUDA's integer version as text: 12040 -> "12.4".

    >>> _cuda_version(13000)
    '13.0'
    """
    return f"{int(code) // 1000}.{int(code) % 1000 // 10}"


def device_count(backend: str) -> int:
    """CUDA devices this process sees for ``backend``: CuPy's count, 1 for the simulator, 0 on the CPU."""
    if backend == SIMULATOR:
        return 1
    if backend != "cupy":
        return 0
    import cupy

    return int(cupy.cuda.runtime.getDeviceCount())


def device_for_rank(local_rank: int, n_devices: int) -> int:
    """The GPU of a rank: its rank among the ranks of its node, modulo the node's GPUs (issue #21, item 6).

    >>> [device_for_rank(r, 4) for r in range(6)]
    [0, 1, 2, 3, 0, 1]
    """
    if n_devices < 1:
        raise OptionError("no CUDA device on this node for the GPU backend")
    if local_rank < 0:
        raise ValueError(f"node-local rank must be >= 0, got {local_rank}")
    return int(local_rank) % int(n_devices)


def ranks_on_device(local_rank: int, node_ranks: int, n_devices: int) -> int:
    """How many of a node's ``node_ranks`` ranks share the GPU of rank ``local_rank`` (:func:`device_for_rank`).

    >>> [ranks_on_device(r, 6, 4) for r in range(6)]
    [2, 2, 1, 1, 2, 2]
    """
    return len(range(device_for_rank(local_rank, n_devices), node_ranks, int(n_devices)))


def use_device(index: int, backend: str) -> str:
    """Make GPU ``index`` current for CuPy and numba-cuda (one per process); its name, e.g. "GPU 1: NVIDIA H100".

    The simulator has one device and nothing to select.
    """
    if backend == SIMULATOR:
        return "CPU simulator"
    if backend != "cupy":
        return "cpu"
    _cupy_use_device(index)
    return f"GPU {index}: {device_name(backend)}"


def is_device(backend: str) -> bool:
    """True for the backends that run the GPU executor (cupy, and the simulator's stand-in)."""
    return backend in ("cupy", SIMULATOR)


# ---------------------------------------------------------------------------
# arrays


def array_module(name: str = "numpy"):
    """``xp`` of a resolved backend: cupy for "cupy", numpy otherwise (the simulator runs on NumPy arrays)."""
    if name == "cupy":
        import cupy

        return cupy
    return np


def array_namespace(*arrays):
    """``xp`` of the arrays: ``cupy`` for CuPy arrays, ``numpy`` for NumPy arrays, scalars and lists,
    else the array type's ``__array_namespace__()`` (the array API's protocol).

    Coefficient callables that should run where their points are (on the GPU
    with the CuPy backend) start with ``xp = array_namespace(x)`` and use
    ``xp.sin``, ``xp.empty``, ... instead of ``np.*``.

    >>> array_namespace(np.zeros(2)) is np
    True
    """
    for a in arrays:
        kind = type(a)
        if kind is np.ndarray or a is None or isinstance(a, (int, float, complex, bool, np.generic, list, tuple)):
            continue
        if kind.__module__.split(".")[0] == "cupy":
            import cupy

            return cupy.get_array_module(a)
        get = getattr(a, "__array_namespace__", None)
        if get is not None:
            return get()
    return np


def device_sparse_modules(matrix):
    """``(xp, sparse_linalg)`` for a sparse matrix on the GPU (``cupy``, ``cupyx.scipy.sparse.linalg``), else None.

    :func:`polydg.solve.solve` solves such a matrix where it is.
    """
    if type(matrix).__module__.split(".")[0] != "cupyx":
        return None
    import cupy
    import cupyx.scipy.sparse.linalg as linalg

    return cupy, linalg


def sparse_modules(backend: str):
    """``(sparse, sparse_linalg)`` of a resolved backend: ``cupyx.scipy.sparse`` and its ``linalg`` for
    "cupy", SciPy's otherwise (the simulator's stand-in backend keeps its matrices on the host)."""
    if backend == "cupy":
        import cupyx.scipy.sparse as sparse
        import cupyx.scipy.sparse.linalg as sparse_linalg
    else:
        import scipy.sparse as sparse
        import scipy.sparse.linalg as sparse_linalg
    return sparse, sparse_linalg


def numpy_aliases_for_numba_cuda() -> None:
    """Give NumPy back ``row_stack`` (an alias of ``vstack``) where it lacks it (NumPy 2.5 removed it): numba-cuda
    (to 0.30 at least) overloads it when its CUDA target first loads, and that load fails without it."""
    if not hasattr(np, "row_stack"):
        np.row_stack = np.vstack


class TransferCount:
    """The copies of host arrays to the device made while counted (:func:`counting_transfers`): how many, their
    bytes (as they arrived) and the host's seconds in them.  A copy from pageable host memory first
    waits for the device work queued before it, so the seconds are an upper bound of the copies' own time."""

    __slots__ = ("copies", "bytes", "seconds")

    def __init__(self) -> None:
        self.copies, self.bytes, self.seconds = 0, 0, 0.0

    def as_dict(self) -> dict:
        return {"copies": self.copies, "bytes": self.bytes, "seconds": self.seconds}


_counting = threading.local()


@contextmanager
def counting_transfers():
    """Count the host-to-device copies made through :func:`contiguous` in this thread (nested counts each see
    them all); yields a :class:`TransferCount`."""
    count = TransferCount()
    stack = _counting.__dict__.setdefault("stack", [])
    stack.append(count)
    try:
        yield count
    finally:
        stack.remove(count)


#: a host array of this many bytes or more crosses to a GPU through pinned memory that the kernels' threads fill
#: (:func:`staged_copy`); a smaller one through CuPy's own staging, which fills its pinned buffer on one thread,
#: the copy's bound where the copy engine is ten times faster than one thread's memcpy
#: (``launch/gpu_transfer.py``; docs/performance.md, "Figures behind the code's choices")
STAGED_COPY_BYTES = 8 * 2**20


def contiguous(xp, a, dtype=None):
    """``a`` as a C-contiguous array of the array module ``xp`` (NumPy or CuPy), of ``dtype`` when given; a host
    array is copied to the device for CuPy (counted: :func:`counting_transfers`; a large one through
    :func:`staged_copy`), whose ``ascontiguousarray`` (from CuPy 14) takes device arrays only.

    >>> contiguous(np, np.arange(6.0).reshape(2, 3).T, np.float32).flags.c_contiguous
    True
    """
    if xp is np or not isinstance(a, (np.ndarray, np.generic)):
        return xp.ascontiguousarray(xp.asarray(a, dtype=dtype))
    start = time.perf_counter()
    host = np.asarray(a, dtype=dtype)
    if host.nbytes >= STAGED_COPY_BYTES and _cupy_sends_pinned_as_is():
        out = staged_copy(np.ascontiguousarray(host), _cupy_pinned_empty, xp.asarray)
    else:
        out = xp.ascontiguousarray(xp.asarray(host))
    stack = getattr(_counting, "stack", None)
    if not stack:
        return out
    seconds = time.perf_counter() - start
    for count in stack:
        count.copies += 1
        count.bytes += int(out.nbytes)
        count.seconds += seconds
    return out


def staged_copy(host: np.ndarray, pinned_empty, send, threads: int | None = None):
    """``send(staging)``: the C-contiguous ``host`` array copied into ``pinned_empty(shape, dtype)`` (page-locked
    memory, which the device copies from directly and asynchronously) by ``threads`` threads, a slice each
    (NumPy's copy runs outside the interpreter lock); where no pinned memory is to be had, ``send(host)``.
    Called from the caller's own thread, not from a task of the pool (whose threads it uses).

    >>> out = staged_copy(np.arange(10.0).reshape(5, 2), np.empty, np.array, threads=3)
    >>> out.shape, float(out.sum())
    ((5, 2), 45.0)
    """
    from .threads import run_tasks, thread_count

    threads = thread_count() if threads is None else threads
    try:
        staging = pinned_empty(host.shape, host.dtype)
    except Exception:  # noqa: BLE001 - no page-locked memory (a limit of the system): the plain copy
        return send(host)
    source, target = host.reshape(-1), staging.reshape(-1)
    bounds = np.linspace(0, source.size, max(threads, 1) + 1).astype(np.int64)
    run_tasks(lambda k: np.copyto(target[bounds[k]:bounds[k + 1]], source[bounds[k]:bounds[k + 1]]),
              len(bounds) - 1, threads)
    return send(staging)  # CuPy keeps the staging memory until its copy has run


@lru_cache(maxsize=1)
def _cupy_sends_pinned_as_is() -> bool:
    """Whether ``cupy.asarray`` copies a pinned host array to the device as it is (CuPy 14 on), rather than
    through a second pinned buffer of its own, which would make a staged copy a copy more."""
    import cupy

    return int(cupy.__version__.split(".")[0]) >= 14


def _cupy_pinned_empty(shape, dtype) -> np.ndarray:
    import cupyx

    return cupyx.empty_pinned(shape, dtype)


def to_device(a, backend: str):
    """``a`` as a contiguous array of ``backend`` (a copy to the GPU for "cupy"; NumPy as it is otherwise)."""
    return contiguous(array_module(backend), a)


def to_host(a):
    """``a`` as a NumPy array (CuPy arrays are copied from the device; NumPy arrays returned as they are)."""
    return a.get() if hasattr(a, "get") and not isinstance(a, np.ndarray) else np.asarray(a)


def free_memory_bytes(backend: str) -> int:
    """Bytes free for work arrays: the device's free memory ("cupy") or the host's available memory."""
    if backend == "cupy":
        return _cupy_free_memory()
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):  # not POSIX: no bound known
        return 2**63 - 1


def segment_sums(values, offsets):
    """``out[s] = values[offsets[s]:offsets[s+1]].sum(axis=0)``, each segment summed in index order.

    ``offsets`` is non-decreasing, int64, with ``offsets[-1] == len(values)``;
    empty segments sum to zero.  Deterministic: the same inputs give the
    same bits from run to run.

    >>> segment_sums(np.array([1.0, 2.0, 3.0, 4.0]), np.array([0, 1, 1, 4]))
    array([1., 0., 9.])
    """
    if isinstance(values, np.ndarray):
        n = len(offsets) - 1
        out = np.zeros((n,) + values.shape[1:], dtype=values.dtype)
        nonempty = np.flatnonzero(offsets[1:] > offsets[:-1])
        if len(nonempty):
            out[nonempty] = np.add.reduceat(values, offsets[:-1][nonempty], axis=0)
        return out
    return _cupy_segment_sums(values, offsets)


def scatter_add(target, index, values) -> None:
    """``target[index[k]] += values[k]`` for every k, repeated indices accumulating (order not fixed on a GPU).

    >>> t = np.zeros(3); scatter_add(t, np.array([0, 2, 0]), np.array([1.0, 2.0, 3.0])); t
    array([4., 0., 2.])
    """
    if isinstance(target, np.ndarray):
        np.add.at(target, index, values)
    else:
        _cupy_scatter_add(target, index, values)


# ---------------------------------------------------------------------------
# CuPy-only helpers (each tested on a GPU; skipped, with the reason, elsewhere)


def _cupy_use_device(index: int) -> None:
    import cupy
    from numba import cuda

    cupy.cuda.Device(index).use()  # CuPy's arrays and kernels
    cuda.select_device(index)  # numba-cuda's launches: the same device's primary context


def _cupy_free_memory() -> int:
    import cupy

    free, _total = cupy.cuda.runtime.memGetInfo()
    return int(free) + int(cupy.get_default_memory_pool().free_bytes())  # the pool's cached blocks are free too


def _cupy_segment_sums(values, offsets):
    """Segment sums on the device: one thread per output value sums its segment in index order (a
    ``cupy.ElementwiseKernel``), so the result is the same from run to run."""
    import cupy

    n = len(offsets) - 1
    width = int(np.prod(values.shape[1:])) if values.ndim > 1 else 1
    out = cupy.empty((n,) + values.shape[1:], dtype=values.dtype)
    _segment_sum_kernel()(values.reshape(-1), contiguous(cupy, offsets, np.int64), width,
                          out.reshape(-1), size=n * width)
    return out


_SEGMENT_SUM = None


def _segment_sum_kernel():
    global _SEGMENT_SUM
    if _SEGMENT_SUM is None:
        import cupy

        _SEGMENT_SUM = cupy.ElementwiseKernel(
            "raw T values, raw int64 offsets, int64 width", "raw T out",
            """
            long long s = i / width, c = i % width;
            T acc = 0;
            for (long long r = offsets[s]; r < offsets[s + 1]; ++r) acc += values[r * width + c];
            out[i] = acc;
            """, "polydg_segment_sums")
    return _SEGMENT_SUM


def _cupy_scatter_add(target, index, values) -> None:
    import cupyx

    cupyx.scatter_add(target, index, values)


# ---------------------------------------------------------------------------


def quiet_openmp_workers(environ: MutableMapping[str, str] = os.environ) -> bool:
    """Let idle OpenMP worker threads sleep instead of spin: ``OMP_WAIT_POLICY=PASSIVE``, unless set.

    OpenMP runtimes (libgomp, under Numba's parallel loops or an OpenMP
    BLAS) keep their idle workers spinning after each parallel region by
    default, and those spinners take the cores that polydg's own threads
    (:mod:`polydg.threads`: kernels, coefficient evaluation) need next.
    libgomp reads the variable once, when it is loaded, so this
    must run early; ``python -m polydg.assemble`` calls it at start.  A
    value the user set is kept.  Returns whether it set the variable.

    >>> env = {}
    >>> quiet_openmp_workers(env), env
    (True, {'OMP_WAIT_POLICY': 'PASSIVE'})
    >>> quiet_openmp_workers({"OMP_WAIT_POLICY": "ACTIVE"})
    False
    """
    if "OMP_WAIT_POLICY" in environ:
        return False
    environ["OMP_WAIT_POLICY"] = "PASSIVE"
    return True
