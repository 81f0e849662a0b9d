"""A discrete function at quadrature points: u and grad u from its coefficients, through the basis tables.

The coefficients of the current iterate of a nonlinear solve (docs/design.md §8) enter the
problem's coefficient callables as values at the quadrature points of a chunk.  Each point belongs to
one entity (a sub-simplex, or a face seen from one of its sides) whose element is known, so a point
costs one basis evaluation in its element's box (the same :func:`~polydg.basis.eval_basis_point_scaled`
that the kernels use) and two short dot products.
"""

from __future__ import annotations

import numpy as np

from ..basis import element_box_tables, eval_basis_point_scaled
from ..threads import parallel_range, range_kernel


@range_kernel
def _field_at_points(t_lo, t_hi, entity_element, offsets, X, coefficients, dof_offsets, lo, hi, degree, nbasis,
                     table, rec, values, gradients):  # pragma: no cover - compiled
    d = X.shape[1]
    nbmax = table.shape[0]
    pmax = 0
    for k in range(d):
        pmax = max(pmax, table[nbmax - 1, k])
    dt = X.dtype
    leg, dleg = np.empty((d, pmax + 1), dt), np.empty((d, pmax + 1), dt)
    phi, gradT = np.empty(nbmax, dt), np.empty((d, nbmax), dt)
    box, scale = np.empty((d, 2), dt), np.empty((d, pmax + 1), dt)
    for t in range(t_lo, t_hi):
        e = entity_element[t]
        if e < 0:  # no element on this side (a boundary face's outside)
            for r in range(offsets[t], offsets[t + 1]):
                values[r] = 0.0
                for k in range(d):
                    gradients[r, k] = 0.0
            continue
        p, nb, first = degree[e], nbasis[e], dof_offsets[e]
        element_box_tables(lo[e], hi[e], p, box, scale)
        for r in range(offsets[t], offsets[t + 1]):
            eval_basis_point_scaled(X[r], box, scale, rec, p, table, nb, leg, dleg, phi, gradT)
            u = 0.0 * X[r, 0]
            for i in range(nb):
                u += coefficients[first + i] * phi[i]
            values[r] = u
            for k in range(d):
                g = 0.0 * X[r, 0]
                for i in range(nb):
                    g += coefficients[first + i] * gradT[k, i]
                gradients[r, k] = g


def field_at_points(space, coefficients: np.ndarray, entity_element: np.ndarray, offsets: np.ndarray,
                    X: np.ndarray, tables: tuple, values: np.ndarray | None = None,
                    gradients: np.ndarray | None = None, run=parallel_range) -> tuple[np.ndarray, np.ndarray]:
    """u (n,) and grad u (n, d) at the points X of a ragged batch of entities.

    Entity t owns points ``offsets[t]:offsets[t+1]`` and lies in element ``entity_element[t]`` (-1: no
    element, the values are 0).  ``coefficients`` is the function's dof vector in ``space``;
    ``tables`` = (lo, hi, table, rec): the elements' boxes, the basis' multi-indices and the Legendre
    recurrence, in the precision of ``X``.  ``run(kernel, lo, hi, *args)`` runs the compiled loop
    (default :func:`~polydg.threads.parallel_range`).

    >>> from polydg.mesh import unit_square, build_polytopic_mesh
    >>> from polydg.space import DGSpace
    >>> from polydg.basis import legendre_recurrence
    >>> space = DGSpace(build_polytopic_mesh(unit_square(2)), 1)
    >>> mesh = space.mesh
    >>> u = np.zeros(space.n_dofs); u[space.dof_offsets[:-1]] = 2.0  # twice the constant mode of each box
    >>> tables = (mesh.bbox_min, mesh.bbox_max, space.indices(), legendre_recurrence(1))
    >>> X = mesh.points[mesh.simplices[:, 0]]  # a vertex of each element's (one) sub-simplex
    >>> v, g = field_at_points(space, u, mesh.simplex_element, np.arange(9), X, tables)
    >>> box = np.prod(mesh.bbox_max - mesh.bbox_min, axis=1)  # the constant mode is 1 / sqrt(|box|)
    >>> bool(np.allclose(v, 2 / np.sqrt(box))), bool(np.all(g == 0))
    (True, True)
    """
    lo, hi, table, rec = tables
    n, d = X.shape
    dtype = X.dtype
    values = np.empty(n, dtype) if values is None else values
    gradients = np.empty((n, d), dtype) if gradients is None else gradients
    coefficients = np.ascontiguousarray(coefficients, dtype=dtype)
    run(_field_at_points, 0, len(entity_element), np.ascontiguousarray(entity_element, np.int64),
                   offsets, X, coefficients, space.dof_offsets, lo, hi, space.degree, space.element_dofs, table,
                   rec, values, gradients)
    return values, gradients
