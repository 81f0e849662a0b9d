"""Physical quadrature points of sub-simplices and faces, in ragged batches.

Each entity (sub-simplex or face) gets the reference rule of its own
exactness degree, so entities of different degrees sit in one batch:
entity s owns points ``offsets[s]:offsets[s+1]``.  Points are mapped with
barycentric coordinates, x_q = sum_k lambda_qk v_k, and weights are scaled
by the entity's measure.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit, prange

from ..quadrature import simplex_rule
from .workspace import Workspace


@dataclass
class PointBatch:
    """Quadrature points of a batch of entities.

    x : (n_points, d) float64; weight : (n_points,) float64;
    offsets : (n_entities + 1,) int64.
    """

    x: np.ndarray
    weight: np.ndarray
    offsets: np.ndarray

    @property
    def n_points(self) -> int:
        return int(self.x.shape[0])


def distinct_degrees(degrees: np.ndarray) -> np.ndarray:
    """The distinct values of an array of rule degrees (small non-negative integers), increasing.

    A count per value: O(n) without a sort or hash (``np.unique`` on the
    million-entry degree arrays of a large mesh cost 0.1 s per assembly).
    """
    degrees = np.asarray(degrees)
    if degrees.size == 0:
        return np.zeros(0, dtype=np.int64)
    return np.flatnonzero(np.bincount(degrees.ravel()))


def point_counts(dim: int, degrees: np.ndarray) -> np.ndarray:
    """Number of points of the ``dim``-simplex rule of each degree in ``degrees``."""
    qs = distinct_degrees(degrees)
    table = np.zeros(int(qs.max()) + 1 if len(qs) else 1, dtype=np.int64)
    for q in qs:  # a handful of distinct degrees
        table[q] = len(simplex_rule(dim, int(q))[1])
    return table[degrees]


def simplex_points(vertices: np.ndarray, measures: np.ndarray, degrees: np.ndarray,
                   cells: np.ndarray | None = None, workspace: Workspace | None = None) -> PointBatch:
    """Quadrature points of n simplices of dimension k, rule degree per simplex.

    ``vertices`` is (n, k+1, d), the corners of each simplex; or, with
    ``cells`` (n, k+1) vertex ids, the mesh's points (m, d), gathered inside
    the compiled loop (no (n, k+1, d) copy).  ``measures`` are the
    k-dimensional measures of the simplices.  With a ``workspace``, the
    points and weights are views of its buffers "x" and "weight" (valid until
    they are next taken).
    """
    vertices = np.ascontiguousarray(vertices, dtype=np.float64)
    if cells is None:
        n, kp1, d = vertices.shape
        cells = np.arange(n * kp1, dtype=np.int64).reshape(n, kp1)
        vertices = vertices.reshape(n * kp1, d)
    cells = np.ascontiguousarray(cells, dtype=np.int64)
    n, kp1 = cells.shape
    d = vertices.shape[1]
    counts = point_counts(kp1 - 1, degrees)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    n_points = int(offsets[-1])
    if workspace is None:
        x, weight = np.empty((n_points, d)), np.empty(n_points)
    else:
        x, weight = workspace.take("x", (n_points, d), np.float64), workspace.take("weight", (n_points,), np.float64)
    measures = np.ascontiguousarray(measures, dtype=np.float64)
    qs = distinct_degrees(degrees)
    for q in qs:  # loop over distinct rule degrees only
        lam, w = simplex_rule(kp1 - 1, int(q))
        members = np.arange(n, dtype=np.int64) if len(qs) == 1 else np.flatnonzero(degrees == q).astype(np.int64)
        _map_points(members, offsets, vertices, cells, measures, np.ascontiguousarray(lam), np.ascontiguousarray(w),
                    x, weight)
    return PointBatch(x, weight, offsets)


def compile_point_kernels() -> None:
    """Compile (or load from Numba's cache) the point mapping, on empty input."""
    z = np.zeros(0, dtype=np.int64)
    lam, w = simplex_rule(1, 1)  # the cached rules are read-only arrays: a type of their own for Numba
    _map_points(z, np.zeros(1, np.int64), np.zeros((0, 2)), np.zeros((0, 2), np.int64), np.zeros(0),
                np.ascontiguousarray(lam), np.ascontiguousarray(w), np.zeros((0, 2)), np.zeros(0))


@njit(parallel=True, cache=True)
def _map_points(members, offsets, points, cells, measures, lam, w, x, weight):  # pragma: no cover - compiled
    """x_q = sum_k lam_qk v_k (v_k = points[cells[s, k]]) and w_q |S| for the listed simplices."""
    nq, kp1 = lam.shape
    d = points.shape[1]
    for t in prange(members.shape[0]):
        s = members[t]
        r0 = offsets[s]
        for q in range(nq):
            for m in range(d):
                acc = 0.0
                for k in range(kp1):
                    acc += lam[q, k] * points[cells[s, k], m]
                x[r0 + q, m] = acc
            weight[r0 + q] = measures[s] * w[q]
