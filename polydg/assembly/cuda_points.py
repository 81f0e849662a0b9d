"""Quadrature points mapped where the mesh is: :func:`~polydg.assembly.points.simplex_points` as one kernel.

For each listed simplex s and each point q of its rule,

    x_q = sum_k lambda_qk v_k   (v_k = points[cells[s, k]]),   weight_q = w_q |s|,

one GPU thread per point, the corners summed in the order of the CPU's
compiled map, so that on numba-cuda's simulator the points are bitwise the
CPU's (a GPU may fuse a multiply and an add: last bits).  The simplices are
read through an index (``members``: the faces of a chunk, straight from the
mesh's tables) or as a range (``base``: a chunk's sub-simplices), so no
corner array is gathered first; one launch per distinct rule degree writes
the batch in place.  With one rule for every simplex the batch's offsets
are made on the device; with several they are counted on the host (a point
count per degree, as there) and cross once; the kernels read the device's
(:attr:`~polydg.assembly.points.PointBatch.device_offsets`).

This module imports ``numba.cuda``: only the GPU executors import it.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
from numba import config, cuda

from ..backend import contiguous
from ..quadrature import simplex_rule
from .cuda_kernels import THREADS, kernel
from .points import PointBatch, point_offsets

#: the most threads one launch starts on the simulator (a Python thread each there: each loops over many
#: points instead); a GPU starts a thread per point
SIMULATOR_THREADS = 2 * THREADS


@kernel
def map_points(n_threads, n, n_q, base, members, first, points, cells, measures, lam, w, x, weight):
    """Points t < ``n`` of ``n_threads`` threads, each taking every ``n_threads``-th (a GPU starts one per
    point): point q = t % n_q of listed simplex i = t // n_q, which is ``members[i]`` (``base + i`` where
    ``members`` is empty), written at row ``first[i] + q``."""
    t = cuda.grid(1)
    if t >= n_threads:  # the grid's last block's spare threads (and a compiling launch's one thread)
        return
    while t < n:
        i = t // n_q
        q = t - i * n_q
        s = members[i] if members.shape[0] > 0 else base + i
        r = first[i] + q
        for m in range(x.shape[1]):
            acc = 0.0
            for k in range(cells.shape[1]):
                acc += lam[q, k] * points[cells[s, k], m]
            x[r, m] = acc
        weight[r] = measures[s] * w[q]
        t += n_threads


def device_simplex_points(xp, run: Callable, points, cells, measures, n: int, degrees: int | np.ndarray,
                          members=None, base: int = 0, rules: dict | None = None) -> PointBatch:
    """The quadrature points of ``n`` simplices, made on the device by :func:`map_points`.

    ``points`` (m, d) float64, ``cells`` (n_all, k + 1) int64 and ``measures`` (n_all,) are ``xp``
    arrays of the whole mesh; the simplices are ``members`` (an ``xp`` int64 array of n) or else the
    range ``base:base + n``.  ``degrees``: the rule degree, one for all or one per simplex (a host
    array).  ``run(kernel, name, n_threads, *args)`` launches (the caller's: it times the first
    launch's compilation apart).  ``rules``: where the reference rules copied to the device are kept
    (by dimension and degree) for the next batch.  Returns the batch with ``x``, ``weight`` and
    ``device_offsets`` on the device and ``offsets`` on the host (with one rule: made there on first use).
    """
    rules = {} if rules is None else rules
    if np.ndim(degrees):
        degrees = np.asarray(degrees)
    k = int(cells.shape[1]) - 1
    d = int(points.shape[1])
    if np.ndim(degrees) == 0:  # one rule: the offsets made on the device, none on the host or in a copy
        offsets, qs = None, np.array([int(degrees)])
        each = len(simplex_rule(k, int(degrees))[1])
        n_points = n * each
        offsets_dev = xp.arange(0, n_points + 1, each, dtype=np.int64)
    else:
        offsets, qs = point_offsets(n, k, degrees)
        n_points, each = int(offsets[-1]), 0
        offsets_dev = contiguous(xp, offsets)
    x, weight = xp.empty((n_points, d), dtype=np.float64), xp.empty(n_points, dtype=np.float64)
    members = xp.empty(0, dtype=np.int64) if members is None else members
    for q in qs:  # the distinct rule degrees
        if (k, int(q)) not in rules:
            rules[k, int(q)] = tuple(contiguous(xp, np.array(a, dtype=np.float64)) for a in simplex_rule(k, int(q)))
        lam, w = rules[k, int(q)]
        if len(qs) == 1:
            listed, first, count = members, offsets_dev[:-1], n
        else:
            at = np.flatnonzero(degrees == q)
            at_dev = contiguous(xp, at)
            listed = members[at_dev] if members.shape[0] else at_dev + base
            first, count = offsets_dev[at_dev], len(at)
        work = count * len(w)
        if work == 0:
            continue
        threads = min(work, SIMULATOR_THREADS) if config.ENABLE_CUDASIM else work
        run(map_points, "map_points", threads, work, len(w), base if len(qs) == 1 else 0, listed, first, points,
            cells, measures, lam, w, x, weight)
    return PointBatch(x, weight, offsets, device_offsets=offsets_dev, points_each=each)
