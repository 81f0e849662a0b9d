"""Seconds per stage of one assembly, in the rows the paper reports."""

from __future__ import annotations

import time

#: the stages timed; "jit" (compilation or loading from the cache) is reported apart, never in a total
TIMING_KEYS = ("element_kernel", "interior_kernel", "boundary_kernel", "inflow_kernel",
               "total_kernels", "indices", "values", "quadrature_points", "coefficients", "penalty", "total_assembly",
               "jit")


class Timer:
    """Accumulated seconds per stage: ``start = timer.add(key, start)`` closes one interval and opens the next."""

    def __init__(self) -> None:
        self.t = dict.fromkeys(TIMING_KEYS, 0.0)

    def add(self, key: str, start: float) -> float:
        now = time.perf_counter()
        self.t[key] += now - start
        return now
