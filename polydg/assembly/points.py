"""Physical quadrature points of sub-simplices and faces, in ragged batches.

Each entity (sub-simplex or face) gets the reference rule of its own
exactness degree, so entities of different degrees sit in one batch:
entity s owns points ``offsets[s]:offsets[s+1]``.  Points are mapped with
barycentric coordinates, x_q = sum_k lambda_qk v_k, and weights are scaled
by the entity's measure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
from numba import njit

from ..quadrature import simplex_rule
from ..threads import parallel_range, range_kernel
from .workspace import Workspace


@dataclass
class PointBatch:
    """Quadrature points of a batch of entities.

    x : (n_points, d) float64; weight : (n_points,) float64;
    offsets : (n_entities + 1,) int64, on the host; ``device_offsets``: their copy on the device
    where the points were made there (``cuda_points.py``), else None.

    A batch made on the device with one rule for every entity (``points_each`` points each) has its offsets
    there alone: the host's are made on first use (by the host code of a linearisation), not counted and
    copied for every chunk.

    >>> PointBatch(np.zeros((6, 2)), np.ones(6), None, points_each=3).offsets
    array([0, 3, 6])
    """

    x: np.ndarray
    weight: np.ndarray
    host_offsets: np.ndarray | None
    device_offsets: object = None
    points_each: int = 0

    def __post_init__(self) -> None:
        if self.host_offsets is None and self.points_each < 1:
            raise ValueError("a point batch needs its offsets, or the points of each entity where one rule serves")

    @property
    def offsets(self) -> np.ndarray:
        if self.host_offsets is None:  # one rule: every entity's points_each points
            self.host_offsets = np.arange(0, self.n_points + 1, self.points_each, dtype=np.int64)
        return self.host_offsets

    @property
    def n_points(self) -> int:
        return int(self.x.shape[0])


def distinct_degrees(degrees: np.ndarray) -> np.ndarray:
    """The distinct values of an array of rule degrees (small non-negative integers), increasing.

    A count per value: O(n) without a sort or hash (``np.unique`` sorts, a
    visible cost per assembly on the million-entry degree arrays of a large mesh); one degree (the common
    case) is told by its least and greatest values, which two reductions find faster than the count.

    >>> distinct_degrees(np.array([3, 1, 3])), distinct_degrees(np.full(4, 5))
    (array([1, 3]), array([5]))
    """
    degrees = np.asarray(degrees)
    if degrees.size == 0:
        return np.zeros(0, dtype=np.int64)
    lo, hi = int(degrees.min()), int(degrees.max())
    if lo == hi:
        return np.array([lo], dtype=np.int64)
    return np.flatnonzero(np.bincount(degrees.ravel()))


def point_counts(dim: int, degrees: np.ndarray) -> np.ndarray:
    """Number of points of the ``dim``-simplex rule of each degree in ``degrees``."""
    qs = distinct_degrees(degrees)
    table = np.zeros(int(qs.max()) + 1 if len(qs) else 1, dtype=np.int64)
    for q in qs:  # a handful of distinct degrees
        table[q] = len(simplex_rule(dim, int(q))[1])
    return table[degrees]


def bounded_runs(cost: np.ndarray, budget: float) -> list[tuple[int, int]]:
    """Runs [a, b) of consecutive items, taken greedily, whose costs sum to at most ``budget`` (one item at
    least): the chunks of every budgeted pass.

    >>> bounded_runs(np.array([1, 1, 4, 4, 4]), 6)
    [(0, 3), (3, 4), (4, 5)]
    """
    cum = np.cumsum(cost)
    runs, start = [], 0
    while start < len(cum):  # one pass per run
        base = cum[start - 1] if start else 0
        stop = max(int(np.searchsorted(cum, base + budget, side="right")), start + 1)
        runs.append((start, stop))
        start = stop
    return runs


def point_ranges(dim: int, degrees: np.ndarray, max_points: int) -> list[slice]:
    """Runs of consecutive ``dim``-simplices (rules of ``degrees``, one per simplex) whose points number at
    most ``max_points``, one simplex at least: chunks bounded by points, whatever the rules' sizes.

    >>> [(r.start, r.stop) for r in point_ranges(2, np.array([1, 1, 3, 3, 3]), 6)]  # rules of 1 and 4 points
    [(0, 3), (3, 4), (4, 5)]
    """
    return [slice(a, b) for a, b in bounded_runs(point_counts(dim, degrees), max_points)]


def face_point_loads(face_elements: np.ndarray, face_rule: np.ndarray, n_elements: int, dim: int,
                     per_face_extra: int = 0) -> np.ndarray:
    """(n_elements,) int64: the quadrature points of each element's faces, a face counted for each of its
    elements: the points of the ``dim``-simplex rule of each face's degree (``face_rule``), plus
    ``per_face_extra``.  One compiled pass over the faces (NumPy's weighted bincounts take several)."""
    rules = distinct_degrees(face_rule)
    points_of_rule = np.zeros(int(rules.max()) + 1 if len(rules) else 1, dtype=np.int64)
    points_of_rule[rules] = point_counts(dim, rules) + per_face_extra
    out = np.zeros(n_elements, dtype=np.int64)
    _add_face_loads(np.ascontiguousarray(face_elements, dtype=np.int64),
                    np.ascontiguousarray(face_rule, dtype=np.int64), points_of_rule, out)
    return out


@njit(cache=True)
def _add_face_loads(face_elements, face_rule, points_of_rule, out):  # pragma: no cover - compiled
    for f in range(face_elements.shape[0]):
        n = points_of_rule[face_rule[f]]
        for side in range(2):
            e = face_elements[f, side]
            if e >= 0:
                out[e] += n


def point_offsets(n: int, dim: int, degrees) -> tuple[np.ndarray, np.ndarray]:
    """Offsets (n + 1,) of the points of n dim-simplices with rules of ``degrees`` (one int or one per
    simplex), and the distinct degrees."""
    offsets = np.zeros(n + 1, dtype=np.int64)
    if np.ndim(degrees) == 0:
        offsets[1:] = np.arange(1, n + 1, dtype=np.int64) * len(simplex_rule(dim, int(degrees))[1])
        return offsets, np.array([int(degrees)])
    degrees = np.asarray(degrees)
    np.cumsum(point_counts(dim, degrees), out=offsets[1:])
    return offsets, distinct_degrees(degrees)


def simplex_points(vertices: np.ndarray, measures: np.ndarray, degrees: int | np.ndarray,
                   cells: np.ndarray | None = None, workspace: Workspace | None = None) -> PointBatch:
    """Quadrature points of n simplices of dimension k, rule degree per simplex.

    ``vertices`` is (n, k+1, d), the corners of each simplex; or, with
    ``cells`` (n, k+1) vertex ids, the mesh's points (m, d), gathered inside
    the compiled loop (no (n, k+1, d) copy).  ``measures`` are the
    k-dimensional measures of the simplices.  ``degrees`` is the rule's
    exactness degree per simplex, or one int for all of them (no per-simplex
    arrays to count and sort).  With a ``workspace``, the points and weights
    are views of its buffers "x" and "weight" (valid until they are next
    taken).

    >>> tri = np.array([[[0.0, 0.0], [2.0, 0.0], [0.0, 2.0]]])
    >>> batch = simplex_points(tri, np.array([2.0]), 3)
    >>> centroid = batch.weight @ batch.x / batch.weight.sum()  # exact: degree 1 <= 3
    >>> batch.offsets, float(batch.weight.sum()), centroid.round(12).tolist()
    (array([0, 4]), 2.0, [0.666666666667, 0.666666666667])
    """
    vertices = np.ascontiguousarray(vertices, dtype=np.float64)
    if cells is None:
        n, kp1, d = vertices.shape
        cells = np.arange(n * kp1, dtype=np.int64).reshape(n, kp1)
        vertices = vertices.reshape(n * kp1, d)
    cells = np.ascontiguousarray(cells, dtype=np.int64)
    n, kp1 = cells.shape
    d = vertices.shape[1]
    offsets, qs = point_offsets(n, kp1 - 1, degrees)
    n_points = int(offsets[-1])
    if workspace is None:
        x, weight = np.empty((n_points, d)), np.empty(n_points)
    else:
        x, weight = workspace.take("x", (n_points, d), np.float64), workspace.take("weight", (n_points,), np.float64)
    measures = np.ascontiguousarray(measures, dtype=np.float64)
    map_points = point_map_kernel(kp1, d)
    for q in qs:  # loop over distinct rule degrees only
        lam, w = simplex_rule(kp1 - 1, int(q))
        members = (np.arange(n, dtype=np.int64) if len(qs) == 1
                   else np.flatnonzero(np.asarray(degrees) == q).astype(np.int64))
        parallel_range(map_points, 0, len(members), members, offsets, vertices, cells, measures,
                       np.ascontiguousarray(lam), np.ascontiguousarray(w), x, weight)
    return PointBatch(x, weight, offsets)


def compile_point_kernels(dim: int) -> None:
    """Compile (or load from Numba's cache) the point maps of a ``dim``-dimensional mesh, on empty input.

    Those are the maps of its cells (``dim``-simplices) and of its faces
    (``dim - 1``-simplices).
    """
    z = np.zeros(0, dtype=np.int64)
    _add_face_loads(np.zeros((0, 2), np.int64), z, np.zeros(1, np.int64), z)
    for k in (dim, dim - 1):
        lam, w = simplex_rule(k, 1)  # the cached rules are read-only arrays: a type of their own for Numba
        point_map_kernel(k + 1, dim)(0, 0, z, np.zeros(1, np.int64), np.zeros((0, dim)), np.zeros((0, k + 1), np.int64),
                                     np.zeros(0), np.ascontiguousarray(lam), np.ascontiguousarray(w),
                                     np.zeros((0, dim)), np.zeros(0))


_POINT_MAPS: dict[tuple[int, int], Callable] = {}


def point_map_kernel(corners: int, d: int) -> Callable:
    """The compiled map of simplices with ``corners`` vertices in R^d, made once per (corners, d).

    ``map_points(t_lo, t_hi, members, offsets, points, cells, measures, lam, w, x, weight)``
    sets, for each listed simplex s = members[t], t_lo <= t < t_hi, with vertices v_k = points[cells[s, k]],

        x_q = sum_k lam_qk v_k   and   weight_q = w_q |s|

    in rows ``offsets[s]:offsets[s] + len(w)``.  ``corners`` and ``d`` are
    constants of the compiled code (Numba freezes the closure's integers), so
    the sums over k and the coordinates unroll (about twice as fast as
    run-time loop bounds, bitwise the same points; docs/performance.md).
    Numba's cache keys each kernel by the values of its closure.
    """
    key = (int(corners), int(d))
    if key not in _POINT_MAPS:
        _POINT_MAPS[key] = _make_point_map(*key)
    return _POINT_MAPS[key]


def _make_point_map(corners: int, d: int) -> Callable:
    @range_kernel
    def map_points(t_lo, t_hi, members, offsets, points, cells, measures, lam, w, x, weight):  # pragma: no cover
        for t in range(t_lo, t_hi):
            s = members[t]
            r0 = offsets[s]
            for q in range(lam.shape[0]):
                for m in range(d):
                    acc = 0.0
                    for k in range(corners):
                        acc += lam[q, k] * points[cells[s, k], m]
                    x[r0 + q, m] = acc
                weight[r0 + q] = measures[s] * w[q]

    return map_points
