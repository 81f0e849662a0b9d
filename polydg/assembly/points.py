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

from ..quadrature import simplex_rule


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


def point_counts(dim: int, degrees: np.ndarray) -> np.ndarray:
    """Number of points of the ``dim``-simplex rule of each degree in ``degrees``."""
    qs = np.unique(degrees)
    table = np.zeros(int(qs.max()) + 1 if len(qs) else 1, dtype=np.int64)
    for q in qs:  # a handful of distinct degrees
        table[q] = len(simplex_rule(dim, int(q))[1])
    return table[degrees]


def simplex_points(vertices: np.ndarray, measures: np.ndarray, degrees: np.ndarray) -> PointBatch:
    """Quadrature points of simplices (n, k+1, d) of dimension k, rule degree per simplex.

    ``measures`` are the k-dimensional measures of the simplices.
    """
    n, kp1, d = vertices.shape
    counts = point_counts(kp1 - 1, degrees)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    x = np.empty((int(offsets[-1]), d))
    weight = np.empty(int(offsets[-1]))
    for q in np.unique(degrees):  # loop over distinct rule degrees only
        lam, w = simplex_rule(kp1 - 1, int(q))
        members = np.flatnonzero(degrees == q)
        nq = len(w)
        rows = (offsets[members][:, None] + np.arange(nq)).ravel()
        x[rows] = np.einsum("qk,skd->sqd", lam, vertices[members]).reshape(-1, d)
        weight[rows] = (measures[members][:, None] * w[None, :]).ravel()
    return PointBatch(x, weight, offsets)
