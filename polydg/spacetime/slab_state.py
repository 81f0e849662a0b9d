"""What the march carries from one slab to the next, on the host or on the device.

The bottom load of slab n + 1 and the errors are linear in slab n's
solution u, so they are sparse products with tables of the slab basis at
quadrature points of the spatial mesh (:mod:`~polydg.spacetime.trace`'s rule):

    trace at t_n^-            g = T u            T[q, i] = phi_i(x_q, t_n)       (the top rule)
    bottom load of slab n+1   F = B^T (w g)      B[q, i] = phi_i(x_q, t_n^+)     (the next slab's bottom rule)
    error over the slab       sum_r w_r (u(y_r) - (E u)_r)^2,  E[r, i] = phi_i(y_r)  (the prism rule)

Each row of T, B and E holds one element's basis, so the products split
over chunks of spatial elements: a chunk's rows of T and E meet only its
dofs, and its dofs' rows of B^T only its points.  The tables are made and
applied chunk by chunk, each chunk's tables fitting the memory budget
(``memory_budget_mb``), so no table of the whole mesh is ever held.  A
chunk's products visit their terms in the whole table's order, so the
trace, the load and the solution are the same bit for bit for any budget;
the error over a slab is summed chunk by chunk, the same to round-off.

The tables depend on a slab only through its length (a later slab of the
same length is the same mesh shifted in time, and the basis lives on each
element's box): when all of them fit the allowance of kept data
(:func:`~polydg.assembly.kept_points.kept_points_allowance`: the budget,
and a quarter of the host memory available; on a GPU the budget alone
bounds them, as it bounds the assembly's kept points) they are made once per slab length
and kept, (16 n_b + 8 (d + 3)) bytes per row of E and (16 n_b + 16) per
point for each of T and B (n_b the element's basis size); otherwise each
slab makes each chunk's tables again as it applies them.  The same code runs
on NumPy/SciPy and, with ``backend="cupy"``, on CuPy/cupyx: there the slab
matrix and load (the device assembly's), the bottom load, the solve and the
trace carried forward never leave the GPU, the tables are made on the host
and sent, and the errors come back as one number per chunk.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np
import scipy.sparse as sp

from .. import backend as bk
from ..assembly.coefficients import DeviceCoefficients
from ..assembly.kept_points import kept_points_allowance
from ..assembly.points import bounded_runs
from ..basis import tabulate
from ..problem import Problem
from ..solve import SolverError, solve, solve_on_device
from ..space import DGSpace
from .problem import initial_values
from .trace import TimePlaneRule, prism_points

#: relative change of the matrix values below which a factorisation is reused
REUSE_TOL = 1e-13


def basis_matrix(space: DGSpace, y: np.ndarray, elements: np.ndarray, dofs: slice | None = None
                 ) -> sp.csr_matrix:
    """(len(y), n_dofs): row q holds the basis of element ``elements[q]`` at the point ``y[q]``, so that
    ``M @ u`` is the DG function u at the points; with ``dofs`` (a range holding the elements' dofs) only
    those columns, numbered from its start.  Built on the host, one tabulation per degree, written
    straight into CSR (each row is its element's dofs, consecutive: nothing to sort)."""
    mesh = space.mesh
    first, last = (0, space.n_dofs) if dofs is None else (dofs.start, dofs.stop)
    degree = space.degree[elements]
    width = space.element_dofs[elements]
    indptr = np.zeros(len(y) + 1, dtype=np.int64)
    np.cumsum(width, out=indptr[1:])
    degrees = np.unique(degree)
    if len(degrees) != 1:  # several degrees (or no point): filled degree by degree
        data, indices = np.empty(indptr[-1]), np.empty(indptr[-1], dtype=np.int64)
    for p in degrees:  # one tabulation per degree present
        r = np.flatnonzero(degree == p) if len(degrees) > 1 else slice(None)
        e = elements[r]
        phi = tabulate(y[r], mesh.bbox_min[e], mesh.bbox_max[e], int(p), space.basis)
        local = np.arange(phi.shape[1]) - first
        if len(degrees) == 1:  # one degree: the rows are phi's rows, in order
            data, indices = phi.ravel(), (space.dof_offsets[e][:, None] + local).ravel()
            break
        at = indptr[r][:, None] + local + first
        data[at] = phi
        indices[at] = space.dof_offsets[e][:, None] + local
    return sp.csr_matrix((data, indices, indptr), shape=(len(y), last - first))


@dataclass
class Chunk:
    """A run of spatial elements of the slab state: their plane points ``points`` and the slab dofs ``dofs``
    of all their steps (both ranges: the rule's points, like the mesh's sub-simplices, go element by
    element)."""

    points: slice
    dofs: slice


class Factorisation:
    """Direct slab solves, a sparse LU kept while the matrix does not change.

    On the host SciPy's ``splu`` factorises every new matrix and its factors
    are reused while the matrix stays the same.  cupyx has no device LU to
    keep: its ``spsolve`` (cuSOLVER's sparse QR) factorises and solves in one
    call, and its ``splu`` factorises on the host (SuperLU; the matrix is
    copied there once) and solves with the factors on the device.  So on the
    device a matrix that is known to come back (``expect_reuse``: constant
    coefficients, equal slabs) or is found unchanged is factorised by
    ``splu`` once and its factors reused; any other is solved by ``spsolve``.
    """

    def __init__(self, xp: Any, sparse_linalg: Any, on_device: bool = False) -> None:
        self.xp, self.linalg, self.on_device = xp, sparse_linalg, on_device
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
        """Solve A x = b, factorising A unless it is (``known_unchanged``, or found) the factorised matrix."""
        start = time.perf_counter()
        A = A if A.dtype == np.float64 else A.astype(np.float64)  # solved in double precision
        reused = self.lu is not None and (known_unchanged or self.unchanged(A))
        if reused:
            solver = "splu"
        elif not self.on_device or (hasattr(self.linalg, "splu") and (expect_reuse or self.unchanged(A))):
            try:
                self.lu = self.linalg.splu(A.tocsc())
            except RuntimeError as exc:
                raise SolverError(f"direct solve failed: {exc}", advice="is the matrix singular?") from exc
            self.count, solver = self.count + 1, "splu"
        else:  # the device, a matrix not expected back: factorise and solve in one call
            self.lu, self.count, solver = None, self.count + 1, "spsolve"
        x = self.lu.solve(b) if solver == "splu" else self.linalg.spsolve(A.tocsr(), b)
        self.matrix = A
        if not bool(self.xp.isfinite(x).all()):
            raise SolverError("direct solve produced non-finite values", advice="is the matrix singular?")
        return x, {"method": "direct", "solver": solver, "reused_factorisation": reused, "device": self.on_device,
                   "seconds": time.perf_counter() - start}


class SlabState:
    """What the march keeps from one slab to the next (see the module docstring), in ``backend``'s arrays.

    ``rule`` is the time-plane rule on the spatial mesh; ``bottom_rule`` and
    ``top_rule`` the same points in each element's first and last local step;
    ``offsets`` the slab elements of each spatial element; ``n_time`` the
    Gauss points in t of the error rule; ``memory_budget_mb`` bounds one
    chunk's tables.  With a GPU backend every array here lives on the device.
    """

    def __init__(self, backend: str, problem: Problem, rule: TimePlaneRule, bottom_rule: TimePlaneRule,
                 top_rule: TimePlaneRule, offsets: np.ndarray, n_time: int, with_errors: bool,
                 memory_budget_mb: float = 1024.0) -> None:
        self.xp = xp = bk.array_module(backend)
        self.sparse, self.linalg = bk.sparse_modules(backend)
        self.on_device = bk.is_device(backend)
        self.problem = problem
        self.values = DeviceCoefficients(problem, rule.x.shape[1], np.float64, xp)
        self.rule, self.bottom_rule, self.top_rule = rule, bottom_rule, top_rule
        self.offsets, self.n_time, self.with_errors = offsets, int(n_time), with_errors
        self.memory_budget_mb = float(memory_budget_mb)
        self.x, self.weights = xp.asarray(rule.x), xp.asarray(rule.weights)
        n_space = len(offsets) - 1
        # the plane points of spatial elements a:b are first[a]:first[b] (the rule goes element by element)
        if len(rule.elements) > 1 and (np.diff(rule.elements) < 0).any():
            raise ValueError("the time-plane rule's points are not grouped by element")
        self.first = np.zeros(n_space + 1, dtype=np.int64)
        np.cumsum(np.bincount(rule.elements, minlength=n_space), out=self.first[1:])
        self.factorisation = Factorisation(xp, self.linalg, self.on_device)
        self.trace: Any = None  # the last slab's solution at (x_q, t_n^-): what the next bottom load carries
        self.space: DGSpace | None = None
        self.interval = (0.0, 0.0)
        self.chunks: list[Chunk] = []
        self.kept: dict[tuple[str, int], Any] | None = None  # the tables by (kind, chunk), when they fit

    # -- the slab's tables, chunk by chunk

    def tabulate(self, space: DGSpace, t0: float, t1: float) -> None:
        """The chunks of the slab ``space`` over (t0, t1), and their tables B^T, T and E when all fit the
        allowance of kept data (else each use makes them again)."""
        self.space, self.interval = space, (float(t0), float(t1))
        self.kept = None
        rows, kept_bytes = self._rows_and_bytes(space)
        self.chunks = self._chunks(space, rows)
        if kept_bytes <= kept_points_allowance(self.memory_budget_mb):
            kinds = ("bottom", "top") + (("errors",) if self.with_errors else ())
            self.kept = {(kind, i): self._table(kind, chunk)
                         for i, chunk in enumerate(self.chunks) for kind in kinds}

    def _rows_and_bytes(self, space: DGSpace) -> tuple[np.ndarray, int]:
        """Per spatial element, the bytes of its largest table while it is made (E's rows with errors,
        else one row a point: the basis, its indices and their temporaries); and the bytes all the kept
        tables take."""
        d = self.rule.x.shape[1]
        points = np.diff(self.first)
        steps = np.diff(self.offsets)
        nb = space.element_dofs[self.offsets[:-1]].astype(np.int64)  # an element's steps share its degree
        error_rows = points * steps * self.n_time if self.with_errors else np.zeros_like(points)
        making = np.maximum(error_rows, points) * 8 * (4 * nb + 2 * d + 12)
        kept = error_rows * (16 * nb + 8 * (d + 3)) + 2 * points * (16 * nb + 16)
        return making, int(kept.sum())

    def _chunks(self, space: DGSpace, making: np.ndarray) -> list[Chunk]:
        """Consecutive spatial elements whose tables' making fits the memory budget (at least one each)."""
        chunks = []
        for a, b in bounded_runs(making, max(int(self.memory_budget_mb * 2**20), 1)):
            points = slice(int(self.first[a]), int(self.first[b]))
            dofs = slice(int(space.dof_offsets[self.offsets[a]]), int(space.dof_offsets[self.offsets[b]]))
            chunks.append(Chunk(points, dofs))
        return chunks

    def _table(self, kind: str, chunk: Chunk) -> Any:
        """One chunk's table: ``"bottom"`` its B^T, ``"top"`` its T, ``"errors"`` (E, the points' x, their
        times within the slab as fractions of it, their weights per unit slab length)."""
        space, (t0, t1), rule, points = self.space, self.interval, self.rule, chunk.points
        part = TimePlaneRule(rule.x[points], rule.weights[points], rule.elements[points])
        if kind == "bottom":
            bottom = basis_matrix(space, part.at(t0), self.bottom_rule.elements[points], chunk.dofs)
            return self.sparse.csr_matrix(bottom.T.tocsr())
        if kind == "top":
            return self.sparse.csr_matrix(basis_matrix(space, part.at(t1), self.top_rule.elements[points],
                                                       chunk.dofs))
        point, step, node, m, g, gw = prism_points(part, self.offsets, self.n_time)
        s = (step + 0.5 * (g[node] + 1.0)) / m  # the points' times within the slab, as fractions of it
        y = np.column_stack([part.x[point], t0 + (t1 - t0) * s])
        E = basis_matrix(space, y, self.offsets[part.elements[point]] + step, chunk.dofs)
        xp = self.xp
        return (self.sparse.csr_matrix(E), xp.asarray(part.x[point]), xp.asarray(s),
                xp.asarray(part.weights[point] * gw[node] * (0.5 / m)))

    def _tables(self, kind: str) -> Iterator[tuple[Chunk, Any]]:
        """Each chunk with its ``kind`` table, kept or made now."""
        for i, chunk in enumerate(self.chunks):
            yield chunk, self.kept[kind, i] if self.kept is not None else self._table(kind, chunk)

    # -- one slab

    def load(self, rhs: Any) -> Any:
        """The slab's load: the assembled ``rhs`` plus the bottom term of the carried trace (u_0 at first)."""
        g = self.trace if self.trace is not None else self._initial_values()
        wg = self.weights * g
        load = self.xp.array(rhs, dtype=np.float64)  # a copy: the assembly's rhs may serve the next slab
        for chunk, bottom_t in self._tables("bottom"):
            load[chunk.dofs] += bottom_t @ wg[chunk.points]
        return load

    def solve(self, matrix: Any, load: Any, method: str, known_unchanged: bool, expect_reuse: bool
              ) -> tuple[Any, dict]:
        """The slab's solution: direct (:class:`Factorisation`) or iterative (on the device cupyx's CG /
        GMRES with block-Jacobi on the element blocks, on the host :func:`polydg.solve.solve`)."""
        if method == "direct":
            return self.factorisation.solve(matrix, load, known_unchanged, expect_reuse)
        if self.on_device:
            return solve_on_device(matrix, load, method, xp=self.xp, sparse_linalg=self.linalg,
                                   block_sizes=self.space.element_dofs)
        return solve(matrix, load, method, space=self.space)

    def carry(self, u: Any) -> None:
        """Keep the slab solution's trace at its top, u(x_q, t_n^-): the next slab's bottom data."""
        trace = self.xp.empty(len(self.x))
        for chunk, top in self._tables("top"):
            trace[chunk.points] = top @ u[chunk.dofs]
        self.trace = trace

    def error_squared_over_slab(self, u: Any, t0: float, t1: float) -> float:
        """||u - u_h||^2 over the slab: the spatial rule times Gauss in t on each step (exact in t to degree
        2 n_time - 1), summed chunk by chunk."""
        xp = self.xp
        tau = t1 - t0
        total = 0.0
        for chunk, (E, x, s, w) in self._tables("errors"):
            y = xp.concatenate([x, (t0 + tau * s)[:, None]], axis=1)
            e = self._exact(y) - E @ u[chunk.dofs]
            total += float((w * tau) @ (e * e))
        return total

    def error_at_top(self, t: float) -> float:
        """||u(., t) - u_h(., t)|| at the last slab's top (t its end), from the carried trace."""
        y = self.xp.concatenate([self.x, self.xp.full((len(self.x), 1), float(t))], axis=1)
        e = self._exact(y) - self.trace
        return float(self.xp.sqrt(self.weights @ (e * e)))

    # -- the problem's callables at the state's points

    def _initial_values(self) -> Any:
        return initial_values(self.problem, self.x, evaluate=lambda x: self.values.values_of("initial", x))

    def _exact(self, y: Any) -> Any:
        return self.values.values_of("exact", y).reshape(-1)


__all__ = ["SlabState", "Factorisation", "REUSE_TOL", "basis_matrix"]
