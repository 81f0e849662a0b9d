"""The kernels' threads (polydg.threads): every index once, errors come back, results independent of threads."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from polydg import threads
from polydg.assembly import assemble
from polydg.mesh import from_spec
from polydg.partition import agglomerate
from polydg.problem import builtin_problem
from polydg.space import DGSpace


@pytest.mark.parametrize("n", [0, 1, 63, 64, 1000, 4097])
@pytest.mark.parametrize("count", [1, 2, 3])
def test_parallel_range_covers_every_index_once(n, count):
    hits = np.zeros(n + 1, dtype=np.int64)  # one slot past the end: must stay untouched
    calls, seen = [], set()

    def kernel(a, b, out):
        calls.append((a, b))
        seen.add(threading.get_ident())
        out[a:b] += 1

    threads.parallel_range(kernel, 0, n, hits, threads=count)
    assert np.array_equal(hits, np.r_[np.ones(n, np.int64), 0])
    assert calls if n else calls == [(0, 0)]  # an empty range still calls the kernel once (its warm-up)
    assert len(seen) <= count
    if n >= count * threads.MIN_TASK_ITEMS and count > 1:
        assert len(calls) > 1  # the range was cut into tasks


def test_parallel_range_offsets_and_small_tasks(monkeypatch):
    monkeypatch.setattr(threads, "MIN_TASK_ITEMS", 1)
    out = np.zeros(30)
    threads.parallel_range(lambda a, b, o: o.__setitem__(slice(a, b), np.arange(a, b)), 10, 20, out, threads=4)
    assert np.array_equal(out[10:20], np.arange(10, 20)) and not out[:10].any() and not out[20:].any()


def test_an_error_in_a_task_reaches_the_caller_after_all_threads_stopped():
    finished = []

    def work(k):
        if k == 5:
            raise ValueError("task 5 failed")
        finished.append(k)

    with pytest.raises(ValueError, match="task 5 failed"):
        threads.run_tasks(work, 40, threads=3)
    assert 5 not in finished and len(finished) < 40  # the remaining tasks were skipped


@pytest.mark.parametrize("approach", ["2", "atomic"])
def test_the_matrix_is_bitwise_the_same_for_any_thread_count_and_task_size(monkeypatch, approach):
    space = DGSpace(agglomerate(from_spec("square:12"), 40), 1)
    problem = builtin_problem("paper-2d", 2)
    one = assemble(space, problem, approach=approach)
    monkeypatch.setattr(threads, "MIN_TASK_ITEMS", 1)  # many small tasks, taken in any order
    monkeypatch.setattr(threads, "thread_count", lambda: 3)
    many = assemble(space, problem, approach=approach)
    assert np.array_equal(one.matrix.data, many.matrix.data) and np.array_equal(one.rhs, many.rhs)
    assert np.array_equal(one.matrix.indices, many.matrix.indices)


def test_the_environment_sets_the_thread_count(monkeypatch):
    import numba

    before = numba.get_num_threads()
    monkeypatch.delenv("NUMBA_NUM_THREADS", raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    try:
        assert threads.use_environment_threads() == 1 == threads.thread_count()
        assert threads.environment_threads({"OMP_NUM_THREADS": "2,1"}, cores=4) == (2, "OMP_NUM_THREADS")
        assert threads.environment_threads({}, cores=3, ranks_on_node=4) == (1, "cores")  # never 0
    finally:
        numba.set_num_threads(before)


def test_the_pool_has_the_workers_asked_for():
    threads.pool(3)
    assert threads._POOL_WORKERS >= 2
    workers = threads._POOL_WORKERS
    threads.pool(2)  # fewer: the same pool
    assert threads._POOL_WORKERS == workers
