"""The discontinuity-penalisation parameter sigma_F (paper, Appendix A).

``paper``::

    sigma_F = C_sigma max_{K in {K1, K2}} min(|K| / |K^F|, C_cov(K)) a_K p_K^2 |F| / |K|

Here F is a polytopic face, not a fine facet: the whole interface of K1 and
K2 (the union of its fine facets), or K's whole part of the boundary.  Read
with F a fine facet, the formula gives sigma ~ |facet| / |K|, which vanishes
as the agglomeration gets finer inside a fixed element and was measured to
be unstable (3D, p = 1: no convergence on agglomerated cubes); the paper's
faces are the element's (d-1)-dimensional faces.  |K^F| = |F| height / d
with height the distance from the fine facet's hyperplane to the farthest
vertex of K (the largest simplex on F spanned by K's own vertices, the sup
of the paper for convex K), so that min(|K| / |K^F|, C_cov) |F| / |K| =
min(d / height, C_cov |F| / |K|).  C_cov(K) =
p_K^(2(d-1)) (p-coverable elements), and a_K = max over K of n_F^T A n_F,
bounded here by the largest Gershgorin bound of A at K's quadrature points
(exact for diagonal A).

``classical`` (the default)::

    sigma_F = C_sigma max_K a_K p_K^2 / h_K.

Why classical is the default (poisson, C_sigma = 10, L2 errors):

* 3D boxes agglomerated from perturbed cube:2N (48 tets each), N = 3, 6, 12,
  p = 1: paper 0.142, 0.049, 0.0156 (rates 1.53, 1.65); classical 0.120,
  0.037, 0.0107 (rates 1.69, 1.79).  p = 2, N = 2, 4, 8: paper rates 2.73,
  2.76; classical 2.91, 3.01.
* METIS agglomerates of cube:N (3 tets each): both stable at C_sigma = 10,
  classical with the smaller errors; classical at C_sigma <= 5 and the paper
  formula with fine facets as F were unstable (errors growing under
  refinement).
* 2D METIS agglomerates with 32 triangles per element: both converge at
  the optimal rates (tests/test_convergence.py).

The paper formula penalises about five times harder than classical on these
meshes (min(d / height, p^(2(d-1)) |F| / |K|) against 1 / h_K), which costs
accuracy through the stronger pull towards continuity without adding
stability that classical lacks at C_sigma = 10.

p_K is replaced by max(p_K, 1) so that piecewise constants are still
penalised (the SIP consistency terms vanish for p = 0 and the penalty is
the whole scheme).
"""

from __future__ import annotations

import numpy as np

from ..mesh.polytopic import PolytopicMesh
from ..problem.data import PointLocation
from ..quadrature import default_degree
from ..threads import parallel_range, range_kernel
from .points import point_ranges, simplex_points

PENALTY_KINDS = ("paper", "classical")


def diffusion_bound(mesh: PolytopicMesh, problem, degree: np.ndarray, extra: int,
                    max_points: int = 2_000_000) -> np.ndarray:
    """a_K per element: max over K's quadrature points of max_i sum_j |A_ij| (located there, for data per cell)."""
    n_el = mesh.n_elements
    if not problem.has_diffusion:
        return np.zeros(n_el)
    if problem.is_constant("diffusion"):
        A = problem.diffusion_at(mesh.points[:1])[0]
        return np.full(n_el, float(np.abs(A).sum(axis=1).max()))
    bound = np.zeros(n_el)
    q = default_degree(degree[mesh.simplex_element], extra)
    for chunk in point_ranges(mesh.dim, q, max_points):  # chunks of sub-simplices bound the memory
        s, e = chunk.start, chunk.stop
        batch = simplex_points(mesh.points, mesh.simplex_volume[s:e], q[s:e], cells=mesh.simplices[s:e])
        A = problem.diffusion_values_at(batch.x, where=_where(mesh, s, e, batch.offsets) if problem.located else None)
        g = row_sum_bound(A)
        if len(g) == 1:
            g = np.full(batch.n_points, g[0])
        per_simplex = np.maximum.reduceat(g, batch.offsets[:-1])
        np.maximum.at(bound, mesh.simplex_element[s:e], per_simplex)
    return bound


def row_sum_bound(A: np.ndarray) -> np.ndarray:
    """max_i sum_j |A_ij| per point of A (n, d, d); |a| for a(x) I given as a (n,).

    Compiled: NumPy's reductions over axes of length d are slow.  The sums run over j in order, as
    ``np.abs(A).sum(axis=2)`` does, so the bound is the same number.
    """
    A = np.ascontiguousarray(A, dtype=np.float64)
    if A.ndim == 1:
        return np.abs(A)
    out = np.empty(A.shape[0])
    parallel_range(_row_sum_bound, 0, A.shape[0], A, out)
    return out


@range_kernel
def _row_sum_bound(lo, hi, A, out):  # pragma: no cover - compiled
    d = A.shape[1]
    for k in range(lo, hi):
        best = 0.0
        for i in range(d):
            s = 0.0
            for j in range(d):
                s += abs(A[k, i, j])
            if s > best or i == 0:
                best = s
        out[k] = best


def _where(mesh: PolytopicMesh, s: int, e: int, offsets: np.ndarray) -> PointLocation:
    """The location (element, fine cell) of the points of sub-simplices s:e, for data per cell or element."""
    counts = np.diff(offsets)
    cell = mesh.simplex_cell[s:e] if mesh.simplex_cell is not None else np.full(e - s, -1)
    return PointLocation(element=np.repeat(mesh.simplex_element[s:e], counts), cell=np.repeat(cell, counts))


@range_kernel
def _apex_heights(f_lo, f_hi, face_vertices, face_elements, normal, points, ev_offsets, ev,
                  out):  # pragma: no cover - compiled
    """out[f, side]: height over face f of the farthest boundary vertex of each adjacent element."""
    d = points.shape[1]
    for f in range(f_lo, f_hi):
        x0 = face_vertices[f, 0]
        for side in range(2):
            e = face_elements[f, side]
            if e < 0:
                continue
            sign = 1.0 if side == 0 else -1.0  # normal out of e
            best = 0.0
            for k in range(ev_offsets[e], ev_offsets[e + 1]):
                v = ev[k]
                h = 0.0
                for m in range(d):
                    h += (points[x0, m] - points[v, m]) * normal[f, m]
                h *= sign
                if h > best:
                    best = h
            out[f, side] = best


def polytopic_face_measure(mesh: PolytopicMesh) -> np.ndarray:
    """|F| of the polytopic face each fine facet belongs to.

    An interior fine facet belongs to the interface of its two elements, a
    boundary facet to its element's part of the boundary; |F| is the sum of
    their fine facets' measures.
    """
    n_int = mesh.n_interior_faces
    out = np.empty(mesh.n_faces)
    if n_int:
        per_interface = np.add.reduceat(mesh.face_measure[:n_int], mesh.interface_offsets[:-1])
        out[:n_int] = np.repeat(per_interface, np.diff(mesh.interface_offsets))
    b_el = mesh.face_elements[n_int:, 0]
    per_element = np.bincount(b_el, mesh.face_measure[n_int:], minlength=mesh.n_elements)
    out[n_int:] = per_element[b_el]
    return out


def compile_penalty_kernels() -> None:
    """Compile (or load from Numba's cache) the penalty kernel, on empty input."""
    z2 = np.zeros((0, 2), dtype=np.int64)
    _row_sum_bound(0, 0, np.zeros((0, 2, 2)), np.zeros(0))
    _classical_weights(0, 0, z2, np.zeros(1), np.zeros(1), np.zeros((0, 2)))
    _face_penalty(0, 0, np.zeros((0, 2)), z2, np.zeros(1), 1.0, np.zeros(0))
    _apex_heights(0, 0, z2, z2, np.zeros((0, 2)), np.zeros((1, 2)), np.zeros(1, np.int64), np.zeros(0, np.int64),
                  np.zeros((0, 2)))


def penalty_weights(mesh: PolytopicMesh, degree: np.ndarray, kind: str = "paper") -> np.ndarray:
    """w[F, side]: sigma_F / (C_sigma a_K) for the element K on each side of every face (0 outside).

    ``classical``: p_K^2 / h_K; ``paper``: min(|K| / |K^F|, C_cov(K)) p_K^2 |F| / |K|.
    The weights are geometry and degrees only, so that a rank can be handed
    those of its faces (the paper's need the neighbour's whole boundary).
    """
    d = mesh.dim
    p = np.maximum(degree, 1).astype(np.float64)
    el = np.ascontiguousarray(mesh.face_elements, dtype=np.int64)
    if kind == "classical":  # compiled: a few gathers per face, on every core
        out = np.empty((len(el), 2))
        parallel_range(_classical_weights, 0, len(el), el, p, np.ascontiguousarray(mesh.diameter, dtype=np.float64),
                       out)
        return out
    both = el >= 0
    safe = np.where(both, el, 0)
    if kind == "paper":
        ev_offsets, ev = mesh.element_boundary_vertices()
        height = np.zeros((len(el), 2))
        parallel_range(_apex_heights, 0, len(el), mesh.face_vertices, el, mesh.face_normal, mesh.points, ev_offsets,
                       ev, height)
        face = polytopic_face_measure(mesh)[:, None]
        kf = face * height / d  # |K^F| = |F| height / d
        ratio = mesh.measure[safe] / np.maximum(kf, 1e-300)
        c_cov = p[safe] ** (2 * (d - 1))
        per_side = np.minimum(ratio, c_cov) * p[safe] ** 2 * face / mesh.measure[safe]
    else:
        raise ValueError(f"unknown penalty kind {kind!r}; known: {', '.join(PENALTY_KINDS)}")
    return np.where(both, per_side, 0.0)


def penalty_from_weights(weights: np.ndarray, face_elements: np.ndarray, a_bound: np.ndarray,
                         C_sigma: float) -> np.ndarray:
    """sigma_F = C_sigma max over the sides K of F of a_K w[F, K] (see :func:`penalty_weights`); a missing
    side (-1) counts as 0 (times w, as ``np.where(e >= 0, a, 0) * w`` would), a NaN on either side gives NaN
    (as ``np.maximum``; of two zeros of either sign, the first).  ``face_elements`` must hold element ids of
    ``a_bound`` or -1 (a mesh's; unchecked).  Compiled, on every core: the host's share of a GPU assembly."""
    out = np.empty(len(face_elements))
    parallel_range(_face_penalty, 0, len(face_elements), np.ascontiguousarray(weights, dtype=np.float64),
                   np.ascontiguousarray(face_elements, dtype=np.int64),
                   np.ascontiguousarray(a_bound, dtype=np.float64), float(C_sigma), out)
    return out


@range_kernel
def _classical_weights(lo, hi, face_elements, p, diameter, out):  # pragma: no cover - compiled
    """out[f, side] = p_K^2 / h_K of the element K on each side of face f, 0 where there is none."""
    for f in range(lo, hi):
        for side in range(2):
            e = face_elements[f, side]
            out[f, side] = p[e] * p[e] / diameter[e] if e >= 0 else 0.0


@range_kernel
def _face_penalty(lo, hi, weights, face_elements, a_bound, C_sigma, out):  # pragma: no cover - compiled
    for f in range(lo, hi):
        e0, e1 = face_elements[f, 0], face_elements[f, 1]
        s0 = (a_bound[e0] if e0 >= 0 else 0.0) * weights[f, 0]
        s1 = (a_bound[e1] if e1 >= 0 else 0.0) * weights[f, 1]
        out[f] = C_sigma * (s0 if s0 >= s1 or s0 != s0 else s1)  # np.maximum: a NaN wins


def face_penalty(mesh: PolytopicMesh, degree: np.ndarray, a_bound: np.ndarray, *, C_sigma: float = 10.0,
                 kind: str = "paper") -> np.ndarray:
    """sigma_F for every face of ``mesh`` (interior faces first, then boundary)."""
    return penalty_from_weights(penalty_weights(mesh, degree, kind), mesh.face_elements, a_bound, C_sigma)
