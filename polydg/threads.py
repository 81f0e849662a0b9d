"""CPU threads for the compiled kernels: a range of entities cut into tasks, run on a thread pool.

Every compiled kernel is a serial loop over a range ``[lo, hi)`` of
elements, faces or points, compiled with ``njit(nogil=True)``, so that it
runs outside the interpreter lock; :func:`parallel_range` cuts the range
into tasks and runs them on :func:`thread_count` threads (the caller and
the pool's workers), each worker taking the next task when it finishes one.

Why not Numba's ``prange``: its parallel-loop passes run over the whole
inlined body of a kernel, and on the assembly kernels they were most of a
first run's compile time (the 2D interior-face kernel: 61 s with ``prange``,
20 s as a serial loop).  A kernel call from Python costs a few
microseconds, nothing beside a task's work.

Each task writes what its range owns (an element's rows, a face's slot), so
results do not depend on how the range is cut or on the thread count.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numba
from numba import njit

#: tasks per thread: enough that a thread with cheap elements takes over the work of a slow one
TASKS_PER_THREAD = 4

#: no task smaller than this many range items, so small ranges stay on the calling thread
MIN_TASK_ITEMS = 64

_POOL: ThreadPoolExecutor | None = None


def range_kernel(func: Callable) -> Callable:
    """Compile ``func(lo, hi, *args)``, a serial loop over ``[lo, hi)``, as a kernel for :func:`parallel_range`.

    Cached on disk, run without the interpreter lock, and with NumPy's
    error model: a division by zero gives inf or nan, with no test and
    exception path at every division, as in the bodies of Numba's parallel
    loops, where these kernels' speed was first measured.
    """
    return njit(cache=True, nogil=True, error_model="numpy")(func)


def thread_count() -> int:
    """Threads the kernels use: Numba's setting (``NUMBA_NUM_THREADS``, ``numba.set_num_threads``)."""
    return max(1, numba.get_num_threads())


def pool() -> ThreadPoolExecutor:
    """The shared pool of worker threads (one fewer than the most threads Numba allows: the caller works too)."""
    global _POOL
    if _POOL is None:
        _POOL = ThreadPoolExecutor(max_workers=max(1, numba.config.NUMBA_NUM_THREADS - 1),
                                   thread_name_prefix="polydg")
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

    others = [pool().submit(worker) for _ in range(min(threads, tasks) - 1)]
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
