"""Error norms and point evaluation of a DG solution.

* :func:`errors`: the L2 error, the broken H1 seminorm error and the DG-norm
  error of a discrete solution against the problem's exact solution, by
  quadrature on the sub-simplices and the faces of the polytopic mesh.
* :func:`evaluate`, :func:`element_means`: the DG function at given points,
  and its mean value on every element.

Everything over elements, sub-simplices, faces and quadrature points is
vectorised: the only Python loops run over the distinct polynomial degrees
and over memory-bounded chunks.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from ..problem.contract import reads_location
from ..problem.data import PointLocation
from ..space import require_space
from .system import SolverError

#: default penalty constant of :func:`errors` when no per-face values are given
DEFAULT_PENALTY = 10.0


# ---------------------------------------------------------------------------
# the DG function at points


def _basis() -> tuple[Callable, Callable, Callable]:
    """(tabulate, tabulate_gradients, n_basis) from polydg.basis."""
    from .. import basis

    return basis.tabulate, basis.tabulate_gradients, basis.n_basis


def _kind(space: Any) -> str:
    """The space's basis, "P" (total degree) or "PQ" (space-time); spaces without one are P."""
    return getattr(space, "basis", "P")


def _size(space: Any, p: int) -> int:
    """Basis functions of degree p in the space's basis."""
    from ..basis import basis_size

    return basis_size(int(p), space.mesh.dim, _kind(space))


def _total(space: Any, p: int) -> int:
    """The total degree of the space's degree-p functions (p for P, 2p for PQ): rules follow it."""
    return 2 * int(p) if _kind(space) == "PQ" else int(p)


def _simplex_rule(k: int, q: int) -> tuple[np.ndarray, np.ndarray]:
    """Barycentric points (nq, k+1) and weights (nq,) summing to 1 on the k-simplex."""
    from ..quadrature import simplex_rule

    lam, w = simplex_rule(k, int(q))
    return np.asarray(lam, dtype=np.float64), np.asarray(w, dtype=np.float64)


def _coefficients(space: Any, solution: np.ndarray, elements: np.ndarray, nb: int) -> np.ndarray:
    """(k, nb) coefficients of the given elements, zero-padded to ``nb`` basis
    functions (the basis is hierarchical: degree p is a prefix of degree P >= p)."""
    local = np.arange(nb)
    index = space.dof_offsets[elements][:, None] + local
    valid = local < space.element_dofs[elements][:, None]
    return np.where(valid, solution[np.where(valid, index, 0)], 0.0)


def _values(space: Any, solution: np.ndarray, x: np.ndarray, elements: np.ndarray, p: int,
            gradients: bool) -> tuple[np.ndarray, np.ndarray | None]:
    """u_h (and grad u_h) at points x (n, d) lying in ``elements`` (n,), with the
    degree-p basis (p >= the degree of every element involved)."""
    tabulate, tabulate_gradients, _ = _basis()
    mesh = space.mesh
    nb = _size(space, p)
    lo, hi = mesh.bbox_min[elements], mesh.bbox_max[elements]
    c = _coefficients(space, solution, elements, nb)
    value = np.einsum("nb,nb->n", tabulate(x, lo, hi, p, _kind(space)), c)
    grad = np.einsum("nbd,nb->nd", tabulate_gradients(x, lo, hi, p, _kind(space)), c) if gradients else None
    return value, grad


def _chunks(n: int, per_item: int, budget_mb: float) -> list[slice]:
    size = max(1, int(budget_mb * 2**20 / 8 / max(per_item, 1)))
    return [slice(a, min(a + size, n)) for a in range(0, n, size)]


def _coefficients_of(space: Any, solution: Any) -> np.ndarray:
    """``solution`` as the space's (n_dofs,) float64 coefficients, or a one-line SolverError."""
    if np.iscomplexobj(solution):
        raise SolverError("solution has complex values: the DG spaces here are real (give its real part, or "
                          "each part apart)")
    solution = np.asarray(solution, dtype=np.float64)
    if solution.size != space.n_dofs or solution.squeeze().ndim > 1:
        raise SolverError(f"solution has shape {solution.shape}, the space has {space.n_dofs} dofs")
    return solution.reshape(-1)


def evaluate(space: Any, solution: np.ndarray, points: np.ndarray, elements: np.ndarray, *,
             gradient: bool = False, memory_budget_mb: float = 256.0) -> np.ndarray | tuple:
    """The DG function with coefficients ``solution`` at ``points`` (n, d), point i
    taken in element ``elements[i]`` (the caller knows it lies there).

    Returns the values (n,), or ``(values, gradients (n, d))`` with ``gradient=True``.
    """
    points = np.asarray(points, dtype=np.float64)
    elements = np.asarray(elements, dtype=np.int64)
    solution = _coefficients_of(space, solution)
    n, d = points.shape
    values = np.empty(n)
    grads = np.empty((n, d)) if gradient else None
    degree = space.degree[elements]
    for p in np.unique(degree):
        members = np.flatnonzero(degree == p)
        per_point = _size(space, p) * (d + 2)
        for part in _chunks(len(members), per_point, memory_budget_mb):
            rows = members[part]
            v, g = _values(space, solution, points[rows], elements[rows], int(p), gradient)
            values[rows] = v
            if gradient:
                grads[rows] = g
    return (values, grads) if gradient else values


# ---------------------------------------------------------------------------
# quadrature on sub-simplices and faces


def _simplex_batches(space: Any, extra: int, budget_mb: float, factor: int = 2):
    """Yield (simplices, x (k*nq, d), weights (k*nq,), elements (k*nq,), p, nq) per degree
    and chunk, with the rule of degree ``factor * P + extra`` on sub-simplices of degree p, P the
    total degree of their functions (p; 2p for PQ)."""
    mesh = space.mesh
    d = mesh.dim
    simplex_degree = space.degree[mesh.simplex_element]
    for p in np.unique(simplex_degree):
        p = int(p)
        lam, w = _simplex_rule(d, factor * _total(space, p) + extra)
        nq = len(w)
        members = np.flatnonzero(simplex_degree == p)
        for part in _chunks(len(members), nq * _size(space, p) * (d + 2), budget_mb):
            s = members[part]
            x = np.einsum("qj,kjd->kqd", lam, mesh.points[mesh.simplices[s]]).reshape(-1, d)
            weight = (mesh.simplex_volume[s][:, None] * w[None, :]).ravel()
            yield s, x, weight, np.repeat(mesh.simplex_element[s], nq), p, nq


def _face_batches(space: Any, faces: np.ndarray, extra: int, budget_mb: float):
    """Yield (faces, x, weights, P, nq) over the given faces, grouped by the
    larger degree P of the adjacent elements."""
    mesh = space.mesh
    d = mesh.dim
    fe = mesh.face_elements[faces]
    P = np.maximum(space.degree[fe[:, 0]], np.where(fe[:, 1] >= 0, space.degree[np.maximum(fe[:, 1], 0)], 0))
    for p in np.unique(P):
        p = int(p)
        lam, w = _simplex_rule(d - 1, 2 * _total(space, p) + extra)
        nq = len(w)
        members = faces[P == p]
        for part in _chunks(len(members), nq * _size(space, p) * 4, budget_mb):
            f = members[part]
            x = np.einsum("qj,kjd->kqd", lam, mesh.points[mesh.face_vertices[f]]).reshape(-1, d)
            weight = (mesh.face_measure[f][:, None] * w[None, :]).ravel()
            yield f, x, weight, p, nq


def _face_cells(mesh: Any, faces: np.ndarray, side: int, nq: int) -> np.ndarray | None:
    """The fine cell on ``side`` of each face, once per quadrature point (None: the mesh records none)."""
    return None if mesh.face_cells is None else np.repeat(mesh.face_cells[faces, side], nq)


def _quadratic_form(v: np.ndarray, A: np.ndarray) -> np.ndarray:
    """v_n^T A_n v_n for v (n, d) and A (n, d, d) or (1, d, d)."""
    return np.einsum("ni,ni->n", (v[:, None, :] @ A)[:, 0, :], v)


def _normal_diffusion(A: np.ndarray, normal: np.ndarray) -> np.ndarray:
    return _quadratic_form(normal, A)


def _diffusion(problem: Any, x: np.ndarray, elements: np.ndarray, cells: np.ndarray | None, u: Any = None,
               grad_u: Any = None) -> np.ndarray:
    """A at the points for the DG norm: a diffusion of the iterate at the exact solution (``u``, ``grad_u``
    where the caller has them, else evaluated if the diffusion names them), one that reads where its points
    lie at ``elements`` and fine ``cells`` (None: not known)."""
    where = None
    if reads_location(problem.diffusion):
        where = PointLocation(element=elements, cell=np.full(len(elements), -1, dtype=np.int64) if cells is None
                              else cells)
    named = problem.iterate_arguments("diffusion")
    if "u" in named and u is None:
        u = problem.exact_at(x)
    if "grad_u" in named and grad_u is None:
        grad_u = problem.exact_gradient_at(x)
    return problem.diffusion_at(x, u=u, grad_u=grad_u, where=where)


def errors(space: Any, problem: Any, solution: np.ndarray, *, penalty_values: np.ndarray | None = None,
           quadrature_extra: int = 2, memory_budget_mb: float = 256.0, faces: np.ndarray | None = None) -> dict:
    """Errors of the DG solution against ``problem.exact``: ``{"l2", "h1", "dg"}``.

    With e = u - u_h, quadrature of degree 2 p_K + ``quadrature_extra`` on
    every sub-simplex and 2 max(p_K1, p_K2) + ``quadrature_extra`` on faces:

        l2^2 = sum_K ||e||^2_{L2(K)}
        h1^2 = sum_K ||grad e||^2_{L2(K)}                        (broken H1 seminorm)
        dg^2 = sum_K ||A^{1/2} grad e||^2_{L2(K)}
             + sum_{F interior} sigma_F ||[[e]]||^2_F
             + sum_{F on the boundary} sigma_F ||e||^2_{F ∩ diffusive Dirichlet}
             + 1/2 sum_{F interior} || |b.n|^{1/2} [[e]] ||^2_F
             + 1/2 sum_{F on the boundary} || |b.n|^{1/2} e ||^2_F

    where [[e]] = e_K1 - e_K2 = u_h,K2 - u_h,K1 (u is continuous), the
    diffusive Dirichlet part is {n.A n > 0 and not is_neumann}, pointwise, and
    sigma_F is ``penalty_values[F]`` (one per face, as the assembler reports
    it) or by default the classical 10 a_F max(p_K, 1)^2 / min(h_K) with a_F
    the largest n.A n at the face's quadrature points, on either side.  The keys h1 and dg
    are left out when the problem has no ``exact_gradient``.  A diffusion that
    depends on the solution (a nonlinear problem) is taken at the exact one;
    data per cell or element on each side of a face.

    ``faces`` (a boolean mask over the faces) limits the face sums to those
    faces: one MPI rank's share, whose squares the ranks add up.
    """
    require_space(space, "errors")
    mesh = space.mesh
    solution = _coefficients_of(space, solution)
    if penalty_values is not None:
        penalty_values = np.asarray(penalty_values, dtype=np.float64).reshape(-1)
        if penalty_values.shape[0] != mesh.n_faces:
            raise SolverError(f"penalty_values has {penalty_values.shape[0]} entries, the mesh has "
                              f"{mesh.n_faces} faces")
    with_gradient = problem.exact_gradient is not None
    l2 = h1 = energy = jumps = 0.0

    # --- volume terms ------------------------------------------------------
    for s, x, weight, elements, p, nq in _simplex_batches(space, quadrature_extra, memory_budget_mb):
        uh, guh = _values(space, solution, x, elements, p, with_gradient)
        u = problem.exact_at(x)
        e = u - uh
        l2 += float(weight @ e**2)
        if with_gradient:
            gu = problem.exact_gradient_at(x)
            ge = gu - guh
            h1 += float(weight @ np.einsum("nd,nd->n", ge, ge))
            cells = None if mesh.simplex_cell is None else np.repeat(mesh.simplex_cell[s], nq)
            energy += float(weight @ _quadratic_form(ge, _diffusion(problem, x, elements, cells, u, gu)))

    # --- face terms ----------------------------------------------------------
    if with_gradient:
        h = mesh.diameter
        chosen = np.ones(mesh.n_faces, dtype=bool) if faces is None else np.asarray(faces, dtype=bool)
        for interior, face_range in ((True, np.arange(mesh.n_interior_faces)),
                                     (False, np.arange(mesh.n_interior_faces, mesh.n_faces))):
            face_range = face_range[chosen[face_range]]
            if len(face_range) == 0:
                continue
            for f, x, weight, p, nq in _face_batches(space, face_range, quadrature_extra, memory_budget_mb):
                e1 = np.repeat(mesh.face_elements[f, 0], nq)
                normal = np.repeat(mesh.face_normal[f], nq, axis=0)
                u1, _ = _values(space, solution, x, e1, p, False)
                if interior:
                    e2 = np.repeat(mesh.face_elements[f, 1], nq)
                    u2, _ = _values(space, solution, x, e2, p, False)
                    jump = u1 - u2
                    u = problem.exact_at(x) if "u" in problem.iterate_arguments("diffusion") else None
                else:
                    u = problem.exact_at(x)
                    jump = u - u1
                nAn = np.broadcast_to(_normal_diffusion(_diffusion(problem, x, e1, _face_cells(mesh, f, 0, nq), u),
                                                        normal), jump.shape)
                if interior and reads_location(problem.diffusion):  # the other side's too: a_F the larger
                    other = _diffusion(problem, x, e2, _face_cells(mesh, f, 1, nq), u)
                    nAn = np.maximum(nAn, _normal_diffusion(other, normal))
                if penalty_values is not None:
                    sigma = np.repeat(penalty_values[f], nq)
                else:
                    a_face = nAn.reshape(-1, nq).max(axis=1)
                    fe = mesh.face_elements[f]
                    h_face = np.where(fe[:, 1] >= 0, np.minimum(h[fe[:, 0]], h[np.maximum(fe[:, 1], 0)]),
                                      h[fe[:, 0]])
                    sigma = np.repeat(DEFAULT_PENALTY * a_face * max(p, 1) ** 2 / h_face, nq)
                if interior:
                    penalised = np.ones(jump.shape, dtype=bool)
                else:
                    neumann = np.broadcast_to(problem.neumann_mask(x, normal), jump.shape)
                    penalised = (nAn > 0) & ~neumann
                jumps += float(weight @ np.where(penalised, sigma * jump**2, 0.0))
                if problem.has_advection:
                    bn = np.einsum("nd,nd->n", np.broadcast_to(problem.advection_at(x), x.shape), normal)
                    jumps += 0.5 * float(weight @ (np.abs(bn) * jump**2))

    result = {"l2": math.sqrt(l2)}
    if with_gradient:
        result.update(h1=math.sqrt(h1), dg=math.sqrt(energy + jumps))
    return result


def element_means(space: Any, solution: np.ndarray, *, memory_budget_mb: float = 256.0) -> np.ndarray:
    """(n_elements,) mean value of the DG function on each element, (1/|K|) int_K u_h,
    by a quadrature exact for degree p_K on the sub-simplices.

    Each chunk's points are summed into the range of elements it spans (a chunk of one degree's
    sub-simplices, in their order: sorted by element), so the cost is its points and that range,
    not every element per chunk.
    """
    mesh = space.mesh
    solution = np.asarray(solution, dtype=np.float64).reshape(-1)
    integral = np.zeros(mesh.n_elements)
    for _, x, weight, elements, p, _ in _simplex_batches(space, 0, memory_budget_mb, factor=1):
        uh, _ = _values(space, solution, x, elements, p, False)
        first, last = int(elements.min()), int(elements.max())
        integral[first: last + 1] += np.bincount(elements - first, weights=weight * uh, minlength=last + 1 - first)
    return integral / mesh.measure


__all__ = ["errors", "evaluate", "element_means", "DEFAULT_PENALTY"]
