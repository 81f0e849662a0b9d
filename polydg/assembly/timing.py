"""Seconds per stage of one assembly, in the rows the paper reports."""

from __future__ import annotations

import time
from typing import Callable

from ..jit import compiled_within

#: the stages timed; "jit" (compilation or loading from the cache) is reported apart, never in a total
TIMING_KEYS = ("element_kernel", "interior_kernel", "boundary_kernel", "inflow_kernel",
               "total_kernels", "indices", "values", "quadrature_points", "coefficients", "penalty", "total_assembly",
               "jit")


class Timer:
    """Accumulated seconds per stage: ``start = timer.add(key, start)`` closes one interval and opens the next.

    Compilation of polydg's functions inside an interval (:func:`polydg.jit.compiled_within`: a kernel
    that was not warmed first, e.g. Approach 1's triplets) is moved from its stage to ``jit``, so that
    no stage, and no total, counts it.

    ``sync`` (a GPU assembly's: :func:`polydg.backend.device_synchronizer`) is the wait for the device's
    queued work that closes the total.  The stages do not wait: array calls return before the device has
    run them, so the host prepares the next chunk while the device works (waiting at every stage cost a
    third of Table 5's total), and part of a stage's device time may show in a later stage: the kernels'
    rows, which wait for their launches, hold what device work was still queued before them too.  For each
    stage's own device time, run with ``CUDA_LAUNCH_BLOCKING=1`` (``launch/gpu_profile.py``).
    """

    def __init__(self, sync: Callable[[], None] | None = None) -> None:
        self.t = dict.fromkeys(TIMING_KEYS, 0.0)
        self.sync = sync
        self._moved_until = time.perf_counter()  # compilation up to here is in "jit" already
        self._compiled: list[tuple[float, float]] = []  # the intervals closed by compiled()

    def add(self, key: str, start: float) -> float:
        now = time.perf_counter()
        if key == "jit":
            self.t[key] += now - start
            self._moved_until = max(self._moved_until, now)
            return now
        compiled = compiled_within(start, now)
        own = sum(max(0.0, min(b, now) - max(a, start)) for a, b in self._compiled)
        self.t[key] += now - start - compiled - own
        if compiled:
            self.t["jit"] += compiled_within(max(start, self._moved_until), now)
        self._moved_until = max(self._moved_until, now)
        return now

    def compiled(self, start: float) -> float:
        """Close an interval of compilation that :func:`polydg.jit.compiled_within` does not see (numba-cuda's
        kernels, compiled at their first launch): it goes to ``jit``, and out of any stage's interval that
        holds it."""
        now = time.perf_counter()
        self.t["jit"] += now - start
        self._compiled.append((start, now))
        return now


def untimed(timings: dict) -> float:
    """Seconds of ``timings["total_assembly"]`` that no stage timed (Python between the stages, and on a
    GPU work the stages left queued): the figure a split of the total into stages is judged by."""
    return timings["total_assembly"] - sum(timings[k] for k in ("total_kernels", "indices", "values",
                                                                "quadrature_points", "coefficients", "penalty"))
