"""The march's state on the device: with a GPU backend nothing slab-sized comes back to the host until the end.

With ``backend="cupy"`` :func:`~polydg.spacetime.march.march` assembles each
slab on the GPU and keeps there the slab matrix and load (the
``cupyx.scipy.sparse`` matrix and CuPy vector of :func:`polydg.assembly.assemble`),
the bottom-face trace load, the solve and the solution's trace carried into
the next slab; the errors are reduced there to one number per slab.  The
last slab's solution is copied to the host once, at the end.

The bottom load and the errors are linear in a slab's solution u, so on the
device they are sparse products with matrices that tabulate the slab basis
at quadrature points of the spatial mesh (:mod:`~polydg.spacetime.trace`'s
rule):

    trace at t_n^-            g = T u            T[q, i] = phi_i(x_q, t_n)       (the top rule)
    bottom load of slab n+1   F = B^T (w g)      B[q, i] = phi_i(x_q, t_n^+)     (the next slab's bottom rule)
    error over the slab       sum_r w_r (u(y_r) - (E u)_r)^2,  E[r, i] = phi_i(y_r)  (the prism rule)

T, B and E depend on a slab only through its length (a later slab of the
same length is the same mesh shifted in time, and the basis lives on each
element's box), so they are tabulated on the host once per slab length and
copied to the device once.  The same code runs on NumPy and SciPy under the
simulator's stand-in backend ("cudasim"), which is how it is tested
without a GPU.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import scipy.sparse as sp

from .. import backend as bk
from ..assembly.coefficients import DeviceCoefficients
from ..basis import tabulate
from ..errors import ProblemError
from ..problem import Problem
from ..solve import SolverError, solve_on_device
from ..space import DGSpace
from .trace import TimePlaneRule, prism_points

#: relative change of the matrix values below which a factorisation is reused (on the host and the device)
REUSE_TOL = 1e-13


def basis_matrix(space: DGSpace, y: np.ndarray, elements: np.ndarray) -> sp.csr_matrix:
    """(len(y), n_dofs): row q holds the basis of element ``elements[q]`` at the point ``y[q]``, so that
    ``M @ u`` is the DG function u at the points.  Built on the host, one tabulation per degree."""
    mesh = space.mesh
    degree = space.degree[elements]
    rows, cols, vals = [], [], []
    for p in np.unique(degree):  # one tabulation per degree present
        r = np.flatnonzero(degree == p)
        e = elements[r]
        phi = tabulate(y[r], mesh.bbox_min[e], mesh.bbox_max[e], int(p), space.basis)
        rows.append(np.repeat(r, phi.shape[1]))
        cols.append((space.dof_offsets[e][:, None] + np.arange(phi.shape[1])).ravel())
        vals.append(phi.ravel())
    return sp.csr_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
                         shape=(len(y), space.n_dofs))


class DeviceFactorisation:
    """Direct slab solves on the device, a factorisation kept while the matrix does not change.

    cupyx has no device LU to keep: ``spsolve`` (cuSOLVER's sparse QR)
    factorises and solves in one call, and ``splu`` factorises on the host
    (SuperLU; the matrix is copied there once) and solves with the factors on
    the device.  So a matrix that is known to come back (``expect_reuse``:
    constant coefficients, equal slabs) or is found unchanged is factorised
    by ``splu`` once and its factors reused on every later slab; any other is
    solved by ``spsolve``.
    """

    def __init__(self, xp: Any, sparse_linalg: Any) -> None:
        self.xp, self.linalg = xp, sparse_linalg
        self.matrix: Any = None
        self.lu: Any = None
        self.count = 0

    def unchanged(self, A: Any) -> bool:
        """Whether A is the last matrix seen: same pattern, values equal to ``REUSE_TOL`` relative."""
        B, xp = self.matrix, self.xp
        if B is None or B.shape != A.shape or B.nnz != A.nnz:
            return False
        if not (bool(xp.array_equal(B.indptr, A.indptr)) and bool(xp.array_equal(B.indices, A.indices))):
            return False
        scale = float(xp.abs(B.data).max()) if B.nnz else 0.0
        return (float(xp.abs(A.data - B.data).max()) if A.nnz else 0.0) <= REUSE_TOL * scale

    def solve(self, A: Any, b: Any, known_unchanged: bool = False, expect_reuse: bool = False) -> tuple[Any, dict]:
        start = time.perf_counter()
        xp = self.xp
        A = A if A.dtype == np.float64 else A.astype(np.float64)  # solved in double precision, as solve_on_device does
        reused = self.lu is not None and (known_unchanged or self.unchanged(A))
        if reused:
            x = self.lu.solve(b)
            solver = "splu"
        elif hasattr(self.linalg, "splu") and (expect_reuse or self.unchanged(A)):  # it comes back: keep factors
            try:
                self.lu = self.linalg.splu(A.tocsc())
            except RuntimeError as exc:
                raise SolverError(f"direct solve failed: {exc} (is the matrix singular?)") from exc
            self.count += 1
            x, solver = self.lu.solve(b), "splu"
        else:
            self.lu, self.count = None, self.count + 1
            x, solver = self.linalg.spsolve(A.tocsr(), b), "spsolve"
        self.matrix = A
        if not bool(xp.isfinite(x).all()):
            raise SolverError("direct solve produced non-finite values (singular matrix?)")
        return x, {"method": "direct", "solver": solver, "reused_factorisation": reused, "device": True,
                   "seconds": time.perf_counter() - start}


class DeviceSlabs:
    """What the march keeps on the device from one slab to the next (see the module docstring).

    ``rule`` is the time-plane rule on the spatial mesh; ``bottom_rule`` and
    ``top_rule`` the same points in each element's first and last local step;
    ``offsets`` the slab elements of each spatial element; ``n_time`` the
    Gauss points in t of the error rule.
    """

    def __init__(self, backend: str, problem: Problem, rule: TimePlaneRule, bottom_rule: TimePlaneRule,
                 top_rule: TimePlaneRule, offsets: np.ndarray, n_time: int, with_errors: bool) -> None:
        self.xp = xp = bk.array_module(backend)
        self.sparse, self.linalg = bk.sparse_modules(backend)
        self.problem = problem
        self.values = DeviceCoefficients(problem, rule.x.shape[1], np.float64, xp)
        self.rule, self.bottom_rule, self.top_rule = rule, bottom_rule, top_rule
        self.offsets, self.n_time, self.with_errors = offsets, int(n_time), with_errors
        self.x, self.weights = xp.asarray(rule.x), xp.asarray(rule.weights)
        self.factorisation = DeviceFactorisation(xp, self.linalg)
        self.trace: Any = None  # the last slab's solution at (x_q, t_n^-): what the next bottom load carries
        self.bottom = self.top = self.errors = self.block_sizes = None

    # -- the slab's tables, once per slab length

    def tabulate(self, space: DGSpace, t0: float, t1: float) -> None:
        """B^T, T and the error rule's E of the slab ``space`` over (t0, t1), on the device."""
        rule = self.rule
        self.block_sizes = space.element_dofs  # the solves' element blocks (the same on every slab of a length)
        bottom = basis_matrix(space, rule.at(t0), self.bottom_rule.elements)
        self.bottom = self.sparse.csr_matrix(bottom.T.tocsr())
        self.top = self.sparse.csr_matrix(basis_matrix(space, rule.at(t1), self.top_rule.elements))
        if self.with_errors:
            point, step, node, m, g, gw = prism_points(rule, self.offsets, self.n_time)
            y = np.column_stack([rule.x[point], t0 + (t1 - t0) * (step + 0.5 * (g[node] + 1.0)) / m])
            E = basis_matrix(space, y, self.offsets[rule.elements[point]] + step)
            # the points' x and time within the slab, and their weights per unit slab length
            self.errors = (self.sparse.csr_matrix(E), self.x[self.xp.asarray(point)],
                           self.xp.asarray((step + 0.5 * (g[node] + 1.0)) / m),
                           self.xp.asarray(self.rule.weights[point] * gw[node] * (0.5 / m)))

    # -- one slab

    def load(self, rhs: Any) -> Any:
        """The slab's load: the assembled ``rhs`` plus the bottom term of the carried trace (u_0 at first)."""
        g = self.trace if self.trace is not None else self._initial_values()
        return self.xp.asarray(rhs, dtype=np.float64) + self.bottom @ (self.weights * g)

    def solve(self, matrix: Any, load: Any, method: str, known_unchanged: bool, expect_reuse: bool
              ) -> tuple[Any, dict]:
        """The slab's solution on the device: direct (:class:`DeviceFactorisation`) or cupyx's CG / GMRES with
        block-Jacobi on the element blocks."""
        if method == "direct":
            return self.factorisation.solve(matrix, load, known_unchanged, expect_reuse)
        return solve_on_device(matrix, load, method, xp=self.xp, sparse_linalg=self.linalg,
                               block_sizes=self.block_sizes)

    def carry(self, u: Any) -> None:
        """Keep the slab solution's trace at its top, u(x_q, t_n^-): the next slab's bottom data."""
        self.trace = self.top @ u

    def error_squared_over_slab(self, u: Any, t0: float, t1: float) -> float:
        """||u - u_h||^2 over the slab: the prism rule of :func:`~polydg.spacetime.trace.l2_error_squared_over_slab`."""
        xp = self.xp
        E, x, s, w = self.errors
        tau = t1 - t0
        y = xp.concatenate([x, (t0 + tau * s)[:, None]], axis=1)
        e = self._exact(y) - E @ u
        return float((w * tau) @ (e * e))

    def error_at_top(self, t: float) -> float:
        """||u(., t) - u_h(., t)|| at the last slab's top (t its end), from the carried trace."""
        y = self.xp.concatenate([self.x, self.xp.full((len(self.x), 1), float(t))], axis=1)
        e = self._exact(y) - self.trace
        return float(self.xp.sqrt(self.weights @ (e * e)))

    # -- the problem's callables at the device's points

    def _initial_values(self) -> Any:
        u0, n = self.problem.initial, len(self.x)
        if not callable(u0):
            return self.xp.full(n, 0.0 if u0 is None else float(np.asarray(u0, dtype=np.float64)))
        try:
            value = self.values.values_of("initial", self.x)
        except ProblemError:
            raise
        except Exception as exc:
            raise ProblemError(f"problem {self.problem.name!r}: initial raised {type(exc).__name__} at {n} points: "
                               f"{str(exc).splitlines()[0] if str(exc) else ''}") from exc
        if tuple(value.shape) != (n,) or not bool(self.xp.isfinite(value).all()):
            raise ProblemError(f"problem {self.problem.name!r}: initial returned shape {tuple(value.shape)} or "
                               f"non-finite values for {n} spatial points, expected ({n},) finite values")
        return value

    def _exact(self, y: Any) -> Any:
        return self.values.values_of("exact", y).reshape(-1)


__all__ = ["DeviceSlabs", "DeviceFactorisation", "REUSE_TOL", "basis_matrix"]
