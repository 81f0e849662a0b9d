"""The passes of a linearisation: the Jacobian and residual of an iterate, chunk by chunk.

For problems whose coefficients depend on the iterate u (or differ on the two sides of a face), a
plan (:class:`~polydg.assembly.plan.AssemblyPlan`) is executed by these passes.  Per chunk they map the
quadrature points, evaluate u and grad u there from the iterate (on each side of an interior face),
form the pointwise M and rho of ``linearization.py`` from the problem's coefficients, and run the row
kernels.  The volume pass comes first: the penalty's a_K (max over K's points of the Gershgorin bound of
A at the iterate) is gathered from its coefficient values, so sigma_F is frozen at the iterate and
costs no evaluation of its own.

A problem whose coefficients read where their points lie (data per cell or element) gets, with each
batch, the :class:`~polydg.problem.data.PointLocation` of its points: the element and fine cell of the
sub-simplex, or of each side of a face.

Where the arrays live is an executor's business: :class:`HostExecutor` (NumPy, the Numba kernels of
``linearized_kernels.py``) here, :class:`~polydg.assembly.cuda_linearized.DeviceExecutor` on a GPU
(numba-cuda kernels, the backend's arrays).  The passes are written once against ``executor.xp``, over
``executor.chunks``.  The host's chunks are sized for the linearisation's own arrays (M at a face point
alone is four (1 + d) x (1 + d) matrices), and its per-point arrays (points, u and grad u, normals,
sigma, M, rho) are views of one :class:`~polydg.assembly.workspace.Workspace` kept by the executor:
allocated by the first chunk of the first iterate, refilled by every later one (fresh memory is paid
for in page faults, at every chunk).  Only the returned matrix values and residual are new at each
iterate.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import scipy.sparse as sp

from . import linearized_kernels as LK
from .fields import field_at_points
from .result import csr_as_given
from ..threads import parallel_range
from .linearization import (HOST_LOOPS, CoefficientsAtIterate, PointForms, XOnlyValues, boundary_forms, interior_forms,
                            volume_forms)
from .passes import chunk_interfaces, expand_ranges
from .plan import BYTES_PER_POINT, AssemblyPlan, element_chunks
from .points import PointBatch, simplex_points
from .timing import Timer
from .workspace import Workspace


def linearized_bytes_per_point(dim: int) -> int:
    """Working bytes per quadrature point of a linearisation: an interior face's M (four (1 + d) x (1 + d)
    matrices) and rho, besides what a linear assembly holds per point (the plan's ``BYTES_PER_POINT``)."""
    D = dim + 1
    return BYTES_PER_POINT + 8 * (4 * D * D + 2 * D)


#: the most memory (MB) a chunk of a linearisation takes, whatever the budget: its buffers are kept from
#: one iterate to the next, and chunks larger than this are no faster
LINEARIZATION_CHUNK_MB = 256.0


def linearization_chunks(plan: AssemblyPlan) -> list[tuple[int, int]]:
    """The plan's rows in chunks whose linearisation fits the plan's memory budget (``memory_budget_mb``),
    and at most :data:`LINEARIZATION_CHUNK_MB`."""
    if not plan.chunks or plan.options is None:
        return list(plan.chunks)
    mesh = plan.mesh
    budget_mb = min(plan.options.budget_mb, LINEARIZATION_CHUNK_MB)
    budget = budget_mb * BYTES_PER_POINT / linearized_bytes_per_point(mesh.dim)
    return element_chunks(mesh, plan.q_element, plan.face_q, budget, plan.elements)


@dataclass
class Linearization:
    """The Jacobian (CSR, int64 indices; None for the residual alone) and the residual of an iterate.

    ``face_penalty`` is the sigma_F used (at the iterate, or the one given); ``info`` has
    ``penalty_at_iterate`` (sigma_F from a_K at the iterate, whichever was used) and ``timings``
    (seconds: iterate, u and grad u at the points; forms, the coefficients and M, rho; the kernels;
    quadrature_points; penalty; total_assembly); from :meth:`~polydg.assembly.Assembler.linearize` also
    ``to_device`` (the host-to-device copies: copies, bytes, seconds).
    """

    jacobian: sp.csr_matrix | None
    residual: np.ndarray
    face_penalty: np.ndarray
    info: dict = field(default_factory=dict)


class HostExecutor:
    """The passes' means on the CPU: NumPy arrays, points by ``points.py``, the Numba row kernels.

    ``chunks`` are the plan's rows in the linearisation's chunks (:func:`linearization_chunks`);
    ``workspace`` holds the per-point arrays of a chunk, reused by the next chunk and the next iterate
    (what :meth:`results` returns is never in it); ``x_only`` the coefficients' values that depend on x
    alone, computed at the first iterate (up to a quarter of the memory budget)."""

    xp = np

    def __init__(self, plan: AssemblyPlan):
        self.plan = plan
        self.face_local = np.full(plan.mesh.n_faces, -1, dtype=np.int64)
        self.tables = (plan.lo, plan.hi, plan.table, plan.rec)
        self.chunks = linearization_chunks(plan)
        self.workspace = Workspace()
        budget_mb = plan.options.budget_mb if plan.options is not None else 0.0
        self.x_only = XOnlyValues(budget_mb * 2**20 / 4)
        self._warm: set = set()

    def _run(self, kernel, lo: int, hi: int, *args) -> None:
        """``kernel`` over lo:hi on the kernels' threads; its first call compiles (or loads it), timed as jit."""
        if kernel not in self._warm:
            start = time.perf_counter()
            kernel(lo, lo, *args)
            self.timer.add("jit", start)
            self._warm.add(kernel)
        parallel_range(kernel, lo, hi, *args)

    def run_forms(self, kind: str, n: int, *args) -> None:
        self._run(HOST_LOOPS[kind], 0, n, *args)

    def begin(self, u, want_jacobian: bool, timer: Timer) -> None:
        """Start a linearisation at the iterate ``u``: new values (zeroed) and load."""
        self.timer, self.want = timer, want_jacobian
        self.u = np.ascontiguousarray(u, dtype=np.float64)
        self.data = self.plan.pattern.zeroed_values(np.float64) if want_jacobian else np.zeros(0)
        self.rhs = np.zeros(self.plan.pattern.n_rows)

    # -- points and the iterate there

    def simplex_points(self, s_lo: int, s_hi: int, q) -> PointBatch:
        mesh = self.plan.mesh
        return simplex_points(mesh.points, mesh.simplex_volume[s_lo:s_hi], q, cells=mesh.simplices[s_lo:s_hi],
                              workspace=self.workspace)

    def face_points(self, faces: np.ndarray) -> PointBatch:
        mesh = self.plan.mesh
        return simplex_points(mesh.points, mesh.face_measure[faces], self.plan.face_degrees(faces),
                              cells=mesh.face_vertices[faces], workspace=self.workspace)

    def iterate(self, entity_element: np.ndarray, batch: PointBatch, side: int = 0):
        """u and grad u at the batch's points, seen from ``side`` (0, or 1 of an interior face)."""
        n, d = batch.x.shape
        ws = self.workspace
        return field_at_points(self.plan.space, self.u, entity_element, batch.offsets, batch.x, self.tables,
                               ws.take(f"u{side}", (n,), np.float64), ws.take(f"grad_u{side}", (n, d), np.float64),
                               run=self._run)

    def where(self, element: np.ndarray, cell: np.ndarray | None, batch: PointBatch):
        """The points' :class:`~polydg.problem.data.PointLocation` from their entities' element and fine cell."""
        from ..problem.data import PointLocation

        counts = np.diff(batch.offsets)
        cell = np.full(len(element), -1, dtype=np.int64) if cell is None else cell
        return PointLocation(element=np.repeat(element, counts), cell=np.repeat(cell, counts))

    def per_point(self, values: np.ndarray, batch: PointBatch, name: str):
        """``values`` (one per entity of the batch) repeated for each of the entity's points, in the buffer
        ``name``."""
        values = np.ascontiguousarray(values, dtype=np.float64)
        out = self.workspace.take(name, (len(batch.x),) + values.shape[1:], np.float64)
        width = int(np.prod(values.shape[1:], dtype=np.int64))
        self._run(LK.spread_kernel, 0, len(values), batch.offsets, values.reshape(len(values), width),
                  out.reshape(len(out), width))
        return out

    def gather_bound(self, a, batch: PointBatch, elements: np.ndarray, a_bound: np.ndarray) -> None:
        """a_bound[e] = max(a_bound[e], max of a over the points of the entities of element e)."""
        if len(a):
            np.maximum.at(a_bound, elements, np.maximum.reduceat(a, batch.offsets[:-1]))

    # -- the kernels

    def _arrays(self, forms: PointForms):
        rho = np.ascontiguousarray(forms.rho)
        if forms.M is None:  # the residual alone: a one-point stand-in of M's shape
            D = rho.shape[-1]
            return np.zeros((1, D, D) if rho.ndim == 2 else (1, 2, 2, D, D)), rho
        return np.ascontiguousarray(forms.M), rho

    def _tail(self):
        plan, space, pattern = self.plan, self.plan.space, self.plan.pattern
        return (plan.lo, plan.hi, space.degree, space.element_dofs, plan.table, plan.rec, pattern.row_base,
                pattern.row_width, pattern.block_start, pattern.diag_entry, pattern.row_start, self.want, self.data,
                self.rhs)

    def volume_rows(self, e_lo: int, e_hi: int, s_lo: int, batch: PointBatch, forms: PointForms) -> None:
        M, rho = self._arrays(forms)
        self._run(LK.volume_kernel, e_lo, e_hi, self.plan.mesh.element_offsets, s_lo, batch.offsets, batch.x,
                  batch.weight, M, rho, *self._tail())

    def interior_rows(self, e_lo: int, e_hi: int, batch: PointBatch, forms: PointForms) -> None:
        plan, M_rho = self.plan, self._arrays(forms)
        self._run(LK.interior_kernel, e_lo, e_hi, plan.pattern.adj_offsets, plan.pattern.adj_col,
                  plan.adj_interface, plan.mesh.interface_offsets, self.face_local, forms.bordered, batch.offsets,
                  batch.x, batch.weight, *M_rho, *self._tail())

    def boundary_rows(self, e_lo: int, e_hi: int, batch: PointBatch, forms: PointForms) -> None:
        M, rho = self._arrays(forms)
        self._run(LK.boundary_kernel, e_lo, e_hi, self.plan.boundary_offsets, self.face_local, batch.offsets,
                  batch.x, batch.weight, M, rho, *self._tail())

    def mark_faces(self, faces: np.ndarray, on: bool) -> None:
        self.face_local[faces] = np.arange(len(faces)) if on else -1

    def synchronize(self) -> None:
        pass

    def results(self):
        """The Jacobian (SciPy CSR) or None, and the residual (NumPy): the caller's alone (the executor keeps
        no reference to them, so they are freed with the caller's)."""
        jacobian = None
        if self.want:
            pattern = self.plan.pattern
            jacobian = csr_as_given(self.data, pattern.indices, pattern.indptr, (pattern.n_rows, pattern.n_cols))
        residual, self.data, self.rhs, self.u = self.rhs, None, None, None
        return jacobian, residual


def linearize(plan: AssemblyPlan, problem, executor, u, *, penalty_at: Callable[[np.ndarray], np.ndarray],
              newton: bool = True, want_jacobian: bool = True,
              face_penalty: np.ndarray | None = None) -> Linearization:
    """The Jacobian (Newton's, or Picard's with ``newton=False``) and residual at the iterate ``u``, by
    ``executor`` (:class:`HostExecutor` or the device's); the residual alone without ``want_jacobian``.

    ``penalty_at(a_bound)`` gives sigma_F of the plan's faces from a_K at the iterate (a_bound, per
    element, gathered by the volume pass; zero for elements without points here, e.g. another rank's);
    a given ``face_penalty`` is used instead (the iterate's own is still reported as
    ``info["penalty_at_iterate"]``).
    """
    timer = Timer()
    for key in ("iterate", "forms", "_jit_mark"):
        timer.t[key] = 0.0
    executor.begin(u, want_jacobian, timer)
    t_all = time.perf_counter()
    coefficients = CoefficientsAtIterate(problem, executor.xp, newton, executor.workspace, executor.x_only)
    a_bound = np.zeros(plan.mesh.n_elements)
    _volume_pass(plan, executor, coefficients, a_bound)
    t = time.perf_counter()
    own = penalty_at(a_bound)
    sigma = own if face_penalty is None else np.asarray(face_penalty, dtype=np.float64)
    timer.add("penalty", t)
    if plan.mesh.n_interior_faces:
        _interior_pass(plan, executor, coefficients, sigma)
    _boundary_pass(plan, executor, coefficients, sigma)
    jacobian, residual = executor.results()
    executor.synchronize()  # the total ends when the device's last queued work has run
    tt = timer.t
    del tt["_jit_mark"]
    tt["coefficients"] = tt["forms"]  # the coefficients and M, rho: the table's coefficients row
    tt["total_kernels"] = tt["element_kernel"] + tt["interior_kernel"] + tt["boundary_kernel"]
    tt["total_assembly"] = time.perf_counter() - t_all - tt["jit"]
    return Linearization(jacobian, residual, sigma, {"timings": dict(tt), "penalty_at_iterate": own})


def _timed(executor, key: str, start: float) -> float:
    """Close the stage ``key`` opened at ``start``; the compilation inside it (the first run of a kernel)
    is timed as jit, apart."""
    executor.synchronize()
    timer = executor.timer
    now = time.perf_counter()
    timer.t[key] += now - start - (timer.t["jit"] - timer.t["_jit_mark"])
    timer.t["_jit_mark"] = timer.t["jit"]
    return now


def _volume_pass(plan: AssemblyPlan, executor, coefficients: CoefficientsAtIterate, a_bound: np.ndarray) -> None:
    mesh = plan.mesh
    for e_lo, e_hi in executor.chunks:
        t = time.perf_counter()
        s_lo, s_hi = int(mesh.element_offsets[e_lo]), int(mesh.element_offsets[e_hi])
        q = plan.q_uniform if plan.q_uniform is not None else np.repeat(
            plan.q_element[e_lo:e_hi], np.diff(mesh.element_offsets[e_lo:e_hi + 1]))
        batch = executor.simplex_points(s_lo, s_hi, q)
        t = _timed(executor, "quadrature_points", t)
        elements = mesh.simplex_element[s_lo:s_hi]
        u, g = executor.iterate(elements, batch)
        t = _timed(executor, "iterate", t)
        where = None if not coefficients.problem.located else executor.where(
            elements, None if mesh.simplex_cell is None else mesh.simplex_cell[s_lo:s_hi], batch)
        coefficients.batch = ("volume", e_lo)
        forms, a = volume_forms(coefficients, batch.x, u, g, executor.want, executor.run_forms, where)
        executor.gather_bound(a, batch, elements, a_bound)
        t = _timed(executor, "forms", t)
        executor.volume_rows(e_lo, e_hi, s_lo, batch, forms)
        _timed(executor, "element_kernel", t)


def _interior_pass(plan: AssemblyPlan, executor, coefficients: CoefficientsAtIterate, sigma: np.ndarray) -> None:
    mesh = plan.mesh
    for e_lo, e_hi in executor.chunks:
        ifs = chunk_interfaces(plan, e_lo, e_hi)
        faces = expand_ranges(mesh.interface_offsets[ifs], mesh.interface_offsets[ifs + 1])
        if len(faces) == 0:
            continue
        t = time.perf_counter()
        executor.mark_faces(faces, True)
        batch = executor.face_points(faces)
        t = _timed(executor, "quadrature_points", t)
        sides = [executor.iterate(mesh.face_elements[faces, s], batch, s) for s in (0, 1)]
        t = _timed(executor, "iterate", t)
        normals = executor.per_point(mesh.face_normal[faces], batch, "normal")
        where = None if not coefficients.problem.located else tuple(
            executor.where(mesh.face_elements[faces, s], None if mesh.face_cells is None else mesh.face_cells[faces, s],
                           batch) for s in (0, 1))
        coefficients.batch = ("interior", e_lo)
        forms = interior_forms(coefficients, batch.x, normals, sides, executor.per_point(sigma[faces], batch, "sigma"),
                               executor.want, executor.run_forms, where)
        t = _timed(executor, "forms", t)
        executor.interior_rows(e_lo, e_hi, batch, forms)
        _timed(executor, "interior_kernel", t)
        executor.mark_faces(faces, False)


def _boundary_pass(plan: AssemblyPlan, executor, coefficients: CoefficientsAtIterate, sigma: np.ndarray) -> None:
    mesh = plan.mesh
    for e_lo, e_hi in executor.chunks:
        f0, f1 = int(plan.boundary_offsets[e_lo]), int(plan.boundary_offsets[e_hi])
        if f1 == f0:
            continue
        faces = np.arange(f0, f1, dtype=np.int64)
        t = time.perf_counter()
        executor.mark_faces(faces, True)
        batch = executor.face_points(faces)
        t = _timed(executor, "quadrature_points", t)
        u, g = executor.iterate(mesh.face_elements[faces, 0], batch)
        t = _timed(executor, "iterate", t)
        normals = executor.per_point(mesh.face_normal[faces], batch, "normal")
        where = None if not coefficients.problem.located else executor.where(
            mesh.face_elements[faces, 0], None if mesh.face_cells is None else mesh.face_cells[faces, 0], batch)
        coefficients.batch = ("boundary", e_lo)
        forms = boundary_forms(coefficients, batch.x, normals, u, g, executor.per_point(sigma[faces], batch, "sigma"),
                               executor.want, executor.run_forms, where)
        t = _timed(executor, "forms", t)
        executor.boundary_rows(e_lo, e_hi, batch, forms)
        _timed(executor, "boundary_kernel", t)
        executor.mark_faces(faces, False)
