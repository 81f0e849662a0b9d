"""Vectorised simplex geometry: signed volumes, facets, normals, measures."""

from __future__ import annotations

import math

import numpy as np


def facet_local_vertices(d: int) -> np.ndarray:
    """Local vertex indices of the d + 1 facets of a d-simplex.

    Row k is the facet opposite local vertex k.

    >>> facet_local_vertices(2).tolist()
    [[1, 2], [0, 2], [0, 1]]
    """
    return np.array([[j for j in range(d + 1) if j != k] for k in range(d + 1)], dtype=np.int64)


def signed_volumes(vertices: np.ndarray) -> np.ndarray:
    """Signed measures of simplices given as (n, d + 1, d) vertex arrays.

    Positive for counter-clockwise triangles and right-handed tetrahedra.
    """
    d = vertices.shape[-1]
    edges = vertices[:, 1:, :] - vertices[:, :1, :]
    if d == 2:
        det = edges[:, 0, 0] * edges[:, 1, 1] - edges[:, 0, 1] * edges[:, 1, 0]
    elif d == 3:
        det = np.einsum("ni,ni->n", edges[:, 0], np.cross(edges[:, 1], edges[:, 2]))
    else:  # pragma: no cover - dimension checked by the mesh
        det = np.linalg.det(edges)
    return det / math.factorial(d)


def facet_normals(vertices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Unit normals and measures of (d-1)-simplices in R^d.

    ``vertices`` has shape (n, d, d).  The normal's sign is arbitrary; callers
    orient it.  In any d the generalised cross product of the d - 1 edges
    e_1..e_{d-1} from vertex 0, n_k = (-1)^k det(E without column k), is
    normal to them with |n| the (d-1)-volume of their parallelotope, so the
    facet's measure is |n| / (d-1)!  (d = 2, 3 spelled out; d = 4 is the
    facets of space-time slabs over 3D meshes).
    """
    d = vertices.shape[-1]
    if d == 2:
        t = vertices[:, 1] - vertices[:, 0]
        n = np.stack([t[:, 1], -t[:, 0]], axis=1)
        measure = np.hypot(t[:, 0], t[:, 1])
    elif d == 3:
        n = np.cross(vertices[:, 1] - vertices[:, 0], vertices[:, 2] - vertices[:, 0])
        measure = 0.5 * np.linalg.norm(n, axis=1)
    else:
        edges = vertices[:, 1:, :] - vertices[:, :1, :]  # (n, d-1, d)
        columns = np.arange(d)
        n = np.stack([(-1) ** k * np.linalg.det(edges[:, :, columns != k]) for k in range(d)], axis=1)
        measure = np.linalg.norm(n, axis=1) / math.factorial(d - 1)
    length = np.linalg.norm(n, axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        n = n / length[:, None]
    return n, measure


def max_edge_lengths(vertices: np.ndarray) -> np.ndarray:
    """Longest edge of each simplex in an (n, k, d) vertex array."""
    k = vertices.shape[1]
    longest = np.zeros(vertices.shape[0])
    for a in range(k):  # loop over the (few) local vertex pairs, not over cells
        for b in range(a + 1, k):
            np.maximum(longest, np.linalg.norm(vertices[:, a] - vertices[:, b], axis=1), out=longest)
    return longest
