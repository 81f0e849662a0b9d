"""The quadrature points of an :class:`~polydg.assembly.Assembler`'s chunks, kept from one assembly to the next.

The points of a chunk (its sub-simplices, the faces of its interfaces, its boundary faces) depend on
the mesh and the rules alone.  A :class:`KeptPoints` holds them after the first assembly that makes
them, so that a later one reads them instead of mapping them again: the same numbers, so the same
matrix bit for bit.  It keeps them only when their total fits an allowance
(:func:`kept_points_allowance`); otherwise every assembly maps each chunk's points again.
"""

from __future__ import annotations

import numpy as np

from .memory import available_memory
from .points import PointBatch, point_counts


def kept_points_allowance(memory_budget_mb: float) -> int:
    """Bytes the kept points may take: the memory budget (``memory_budget_mb``, which also bounds one
    chunk's working memory), and at most a quarter of the memory available now."""
    allowance = int(memory_budget_mb * 2**20)
    available, _ = available_memory()
    return allowance if available is None else min(allowance, available // 4)


def kept_points_bytes(plan) -> int:
    """An upper bound on the bytes of every chunk's points of ``plan`` (float64 points and weights, and
    their copies in the working precision when it is single): the sub-simplices of its rows once, every
    interior face twice (a face of two chunks), every boundary face twice (two boundary passes)."""
    mesh = plan.mesh
    d = mesh.dim
    e_lo, e_hi = int(plan.elements[0]), int(plan.elements[-1]) + 1
    volume = int((point_counts(d, plan.q_element[e_lo:e_hi]) * np.diff(mesh.element_offsets[e_lo:e_hi + 1])).sum())
    per_face = point_counts(d - 1, plan.face_q)
    n_int = mesh.n_interior_faces
    f0, f1 = int(plan.boundary_offsets[e_lo]), int(plan.boundary_offsets[e_hi])
    faces = 2 * int(per_face[:n_int].sum()) + 2 * int(per_face[f0:f1].sum())
    per_point = (d + 1) * 8 + ((d + 1) * np.dtype(plan.dtype).itemsize if np.dtype(plan.dtype) != np.float64 else 0)
    return (volume + faces) * per_point


class KeptPoints:
    """Batches of points by key (``("volume", chunk)``, ``("interior", chunk)``, ``("boundary", mode, chunk)``):
    ``(batch, X, W)``, the float64 batch and its points and weights in the working precision.

    >>> kept = KeptPoints()
    >>> batch = PointBatch(np.zeros((2, 2)), np.ones(2), np.array([0, 2]))
    >>> kept.put(("volume", 0), None, batch, batch.x, batch.weight)[0].x is batch.x
    False
    >>> kept.get(("volume", 0)) is not None, kept.get(("volume", 1)), kept.nbytes
    (True, None, 64)
    """

    def __init__(self) -> None:
        self._batches: dict[tuple, tuple] = {}

    def get(self, key: tuple, faces: np.ndarray | None = None) -> tuple | None:
        """The kept ``(batch, X, W)`` of ``key``; with ``faces`` (increasing), those faces' points, gathered
        from the kept batch when they are some of its faces (each face's points are its own: the same
        numbers); else None."""
        found = self._batches.get(key)
        if found is None:
            return None
        batch, X, W, kept_faces = found
        if faces is None or np.array_equal(kept_faces, faces):
            return batch, X, W
        at = np.searchsorted(kept_faces, faces)
        if len(faces) == 0 or at[-1] >= len(kept_faces) or not np.array_equal(kept_faces[at], faces):
            return None
        counts = batch.offsets[at + 1] - batch.offsets[at]
        offsets = np.zeros(len(faces) + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        rows = np.repeat(batch.offsets[at] - offsets[:-1], counts) + np.arange(int(offsets[-1]), dtype=np.int64)
        subset = PointBatch(batch.x[rows], batch.weight[rows], offsets)
        return (subset, subset.x if X is batch.x else X[rows], subset.weight if W is batch.weight else W[rows])

    def faces(self, key: tuple) -> np.ndarray | None:
        """The faces whose points are kept under ``key`` (None: none kept, or a volume batch)."""
        found = self._batches.get(key)
        return None if found is None else found[3]

    def put(self, key: tuple, faces: np.ndarray | None, batch: PointBatch, X: np.ndarray,
            W: np.ndarray) -> tuple[PointBatch, np.ndarray, np.ndarray]:
        """Keep copies of a batch made in work arrays (which the next chunk overwrites); returns them.  A batch
        of fewer faces than the one kept under ``key`` leaves that one kept."""
        kept = PointBatch(batch.x.copy(), batch.weight.copy(), batch.offsets.copy())
        X = kept.x if X is batch.x else X.copy()
        W = kept.weight if W is batch.weight else W.copy()
        before = self._batches.get(key)
        if before is None or faces is None or len(faces) > len(before[3]):
            self._batches[key] = (kept, X, W, None if faces is None else faces.copy())
        return kept, X, W

    @property
    def nbytes(self) -> int:
        """Bytes of the points, weights and offsets held."""
        total = 0
        for batch, X, W, _ in self._batches.values():
            total += batch.x.nbytes + batch.weight.nbytes + batch.offsets.nbytes
            total += (X.nbytes if X is not batch.x else 0) + (W.nbytes if W is not batch.weight else 0)
        return total
