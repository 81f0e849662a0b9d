"""CPU threads for the compiled kernels: a range of entities cut into tasks, run on a thread pool.

Every compiled kernel is a serial loop over a range ``[lo, hi)`` of
elements, faces or points, compiled with ``njit(nogil=True)``, so that it
runs outside the interpreter lock; :func:`parallel_range` cuts the range
into tasks and runs them on :func:`thread_count` threads (the caller and
the pool's workers), each worker taking the next task when it finishes one.

Why not Numba's ``prange``: its parallel-loop passes run over the whole
inlined body of a kernel, and on the assembly kernels they were most of a
first run's compile time (several times a serial loop's; docs/performance.md).
A kernel call from Python costs a few microseconds, nothing beside a task's work.

Each task writes what its range owns (an element's rows, a face's slot), so
results do not depend on how the range is cut or on the thread count.

How many threads: ``NUMBA_NUM_THREADS`` when set, else ``OMP_NUM_THREADS``,
else every core this process may run on, shared among the MPI ranks on its
node (:func:`environment_threads`).  :func:`use_environment_threads` applies
that rule (``numba.set_num_threads``); the command line calls it at start,
and polydg calls it once, on the first use of the kernels' threads, for the
Python API.  ``numba.set_num_threads(n)`` after that changes the count.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor

import numba
from numba import njit

#: tasks per thread: enough that a thread with cheap elements takes over the work of a slow one
TASKS_PER_THREAD = 4

#: no task smaller than this many range items, so small ranges stay on the calling thread
MIN_TASK_ITEMS = 64

_POOL: ThreadPoolExecutor | None = None
_POOL_WORKERS = 0

#: whether the environment's rule was applied (by :func:`use_environment_threads`)
_APPLIED = False


def range_kernel(func: Callable) -> Callable:
    """Compile ``func(lo, hi, *args)``, a serial loop over ``[lo, hi)``, as a kernel for :func:`parallel_range`.

    Cached on disk, run without the interpreter lock, and with NumPy's
    error model: a division by zero gives inf or nan, with no test and
    exception path at every division (the bodies of Numba's parallel loops
    behave the same), so that loops with divisions still vectorise.
    """
    return njit(cache=True, nogil=True, error_model="numpy")(func)


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity where the system tells it)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover - systems without affinity
        return max(1, os.cpu_count() or 1)


def environment_threads(environ: Mapping[str, str] = os.environ, cores: int | None = None,
                        ranks_on_node: int = 1) -> tuple[int, str]:
    """The thread count the environment asks for, and where it came from: ``NUMBA_NUM_THREADS``, else
    ``OMP_NUM_THREADS`` (its first entry), else the ``cores`` shared among the ``ranks_on_node``.

    >>> environment_threads({"OMP_NUM_THREADS": "1"}, cores=8)
    (1, 'OMP_NUM_THREADS')
    >>> environment_threads({"NUMBA_NUM_THREADS": "3", "OMP_NUM_THREADS": "1"}, cores=8)
    (3, 'NUMBA_NUM_THREADS')
    >>> environment_threads({}, cores=8, ranks_on_node=3)
    (2, 'cores')
    >>> environment_threads({"OMP_NUM_THREADS": "many"}, cores=4)
    (4, 'cores')
    """
    for name in ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS"):
        first = environ.get(name, "").split(",")[0].strip()
        if first.isdigit() and int(first) >= 1:
            return int(first), name
    cores = available_cores() if cores is None else cores
    return max(1, cores // max(1, ranks_on_node)), "cores"


def use_environment_threads(ranks_on_node: int = 1) -> int:
    """Set Numba's thread count (this thread's) by :func:`environment_threads`; returns it.

    Numba cannot run more threads than ``NUMBA_NUM_THREADS`` (default: every core), so a larger
    request is cut to that.
    """
    global _APPLIED
    wanted, _ = environment_threads(ranks_on_node=ranks_on_node)
    numba.set_num_threads(max(1, min(wanted, numba.config.NUMBA_NUM_THREADS)))
    _APPLIED = True
    return numba.get_num_threads()


def thread_count() -> int:
    """Threads the kernels use: Numba's setting (the environment's rule, then ``numba.set_num_threads``)."""
    if not _APPLIED:
        use_environment_threads()
    return max(1, numba.get_num_threads())


def pool(threads: int | None = None) -> ThreadPoolExecutor:
    """The shared pool of worker threads: ``threads - 1`` of them (the caller works too), grown when more are asked."""
    global _POOL, _POOL_WORKERS
    workers = max(1, (thread_count() if threads is None else threads) - 1)
    if _POOL is None or workers > _POOL_WORKERS:
        if _POOL is not None:
            _POOL.shutdown(wait=False)
        _POOL = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="polydg")
        _POOL_WORKERS = workers
    return _POOL


def run_tasks(work: Callable[[int], None], tasks: int, threads: int | None = None) -> None:
    """``work(k)`` for k < tasks on up to ``threads`` threads, the calling thread one of them.

    Workers take the next task as they finish one.  An exception in a task
    is re-raised here after every thread has stopped (the first one raised;
    the remaining tasks are skipped).
    """
    threads = thread_count() if threads is None else threads
    if threads <= 1 or tasks <= 1:
        for k in range(tasks):
            work(k)
        return
    counter = itertools.count()
    failed: list[BaseException] = []

    def worker() -> None:
        try:
            while not failed and (k := next(counter)) < tasks:
                work(k)
        except BaseException as exc:  # noqa: BLE001 - re-raised by the caller
            failed.append(exc)

    others = [pool(threads).submit(worker) for _ in range(min(threads, tasks) - 1)]
    worker()
    for future in others:
        future.result()
    if failed:
        raise failed[0]


def parallel_range(kernel: Callable, lo: int, hi: int, *args, threads: int | None = None) -> None:
    """``kernel(a, b, *args)`` for consecutive pieces ``[a, b)`` of ``[lo, hi)``, on the threads.

    An empty range still calls ``kernel(lo, lo, *args)`` once (on the
    calling thread), which compiles the kernel or loads it from the cache.

    >>> import numpy as np
    >>> out = np.zeros(1000)
    >>> def fill(a, b, out):
    ...     out[a:b] = np.arange(a, b)
    >>> parallel_range(fill, 0, 1000, out, threads=2)
    >>> bool((out == np.arange(1000)).all())
    True
    """
    lo, hi = int(lo), int(hi)
    threads = thread_count() if threads is None else threads
    tasks = min(threads * TASKS_PER_THREAD, (hi - lo) // MIN_TASK_ITEMS)
    if threads <= 1 or tasks <= 1:
        kernel(lo, hi, *args)
        return
    cuts = [lo + ((hi - lo) * k) // tasks for k in range(tasks + 1)]
    run_tasks(lambda k: kernel(cuts[k], cuts[k + 1], *args), tasks, threads)
