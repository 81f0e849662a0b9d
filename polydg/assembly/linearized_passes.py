"""The passes of a linearisation on the CPU: the Jacobian and residual of an iterate, chunk by chunk.

A third executor of an :class:`~polydg.assembly.plan.AssemblyPlan` (after ``passes.py`` and
``cuda_passes.py``), for problems whose coefficients depend on the iterate u.  Per chunk of the plan
it maps the quadrature points, evaluates u and grad u there from the iterate (``fields.py``; on each
side of an interior face), forms the pointwise M and rho of ``linearization.py`` from the problem's
coefficients, and runs the row kernels of ``linearized_kernels.py``.  The volume pass comes first:
the penalty's a_K (max over K's points of the Gershgorin bound of A at the iterate) is gathered from
its coefficient values, so sigma_F is frozen at the iterate and costs no evaluation of its own.

A problem whose coefficients read where their points lie (data per cell or element) gets, with each
batch, the :class:`~polydg.problem.data.PointLocation` of its points: the element and fine cell of the
sub-simplex, or of each side of a face.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from . import linearized_kernels as LK
from ..problem.data import PointLocation
from .fields import field_at_points
from .linearization import IterateCoefficients, boundary_forms, interior_forms, volume_forms
from .passes import chunk_interfaces, expand_ranges
from .penalty import penalty_from_weights
from .plan import AssemblyPlan
from .points import simplex_points
from .timing import Timer
from .workspace import Workspace


@dataclass
class Linearization:
    """The Jacobian (CSR, int64 indices; None for the residual alone) and the residual of an iterate.

    ``face_penalty`` is the sigma_F used (at the iterate, or the one given); ``info`` has
    ``penalty_at_iterate`` (sigma_F from a_K at the iterate, whichever was used) and ``timings`` (seconds: iterate, the u and
    grad u at the points; coefficients, M and rho; kernels; quadrature_points; penalty; total).
    """

    jacobian: sp.csr_matrix | None
    residual: np.ndarray
    face_penalty: np.ndarray
    info: dict = field(default_factory=dict)


class _Context:
    def __init__(self, plan: AssemblyPlan, u: np.ndarray, workspace: Workspace, timer: Timer, want_jacobian: bool,
                 located: bool = False):
        self.plan, self.workspace, self.timer = plan, workspace, timer
        self.u = np.ascontiguousarray(u, dtype=np.float64)
        self.want = want_jacobian
        self.data = plan.pattern.zeroed_values(np.float64) if want_jacobian else np.zeros(0)
        self.rhs = np.zeros(plan.pattern.n_rows)
        self.face_local = np.full(plan.mesh.n_faces, -1, dtype=np.int64)
        self.tables = (plan.lo, plan.hi, plan.table, plan.rec)
        self.located = located
        mesh = plan.mesh
        self.simplex_cell = mesh.simplex_cell if mesh.simplex_cell is not None else np.full(mesh.n_simplices, -1)
        self.face_cells = mesh.face_cells if mesh.face_cells is not None else np.full((mesh.n_faces, 2), -1)

    def where(self, element, cell, offsets):
        """The points' PointLocation from their entities' element and fine cell (None: no coefficient reads it)."""
        if not self.located:
            return None
        counts = np.diff(offsets)
        return PointLocation(element=np.repeat(element, counts), cell=np.repeat(cell, counts))

    def iterate(self, entity_element, offsets, X):
        t = time.perf_counter()
        values = field_at_points(self.plan.space, self.u, entity_element, offsets, X, self.tables)
        self.timer.add("iterate", t)
        return values

    def face_points(self, faces):
        t = time.perf_counter()
        mesh = self.plan.mesh
        batch = simplex_points(mesh.points, mesh.face_measure[faces], self.plan.face_degrees(faces),
                               cells=mesh.face_vertices[faces])
        self.timer.add("quadrature_points", t)
        return batch


def linearize_on_host(plan: AssemblyPlan, problem, u: np.ndarray, *, weights: np.ndarray, C_sigma: float,
                      newton: bool = True, want_jacobian: bool = True, face_penalty: np.ndarray | None = None,
                      workspace: Workspace | None = None) -> Linearization:
    """The Jacobian (Newton's, or Picard's with ``newton=False``) and residual of iterate ``u`` on ``plan``.

    ``weights`` are the faces' penalty weights (:func:`~polydg.assembly.penalty.penalty_weights`),
    multiplied by C_sigma and a_K at the iterate; ``face_penalty`` (sigma_F per face) replaces them.
    """
    timer = Timer()
    for key in ("iterate", "forms"):
        timer.t[key] = 0.0
    t_all = time.perf_counter()
    ctx = _Context(plan, u, workspace or Workspace(), timer, want_jacobian, problem.located)
    coefficients = IterateCoefficients(problem, np, newton)
    a_bound = np.zeros(plan.mesh.n_elements)
    _volume_pass(plan, ctx, coefficients, a_bound)
    t = time.perf_counter()
    own = penalty_from_weights(weights, plan.mesh.face_elements, a_bound, C_sigma)
    sigma = own if face_penalty is None else np.asarray(face_penalty, dtype=np.float64)
    timer.add("penalty", t)
    if plan.mesh.n_interior_faces:
        _interior_pass(plan, ctx, coefficients, sigma)
    _boundary_pass(plan, ctx, coefficients, sigma)
    jacobian = None
    if want_jacobian:
        pattern = plan.pattern
        jacobian = sp.csr_matrix((pattern.n_rows, pattern.n_cols))
        jacobian.data, jacobian.indices, jacobian.indptr = ctx.data, pattern.indices, pattern.indptr
        jacobian.has_sorted_indices = True
    tt = timer.t
    tt["total_kernels"] = tt["element_kernel"] + tt["interior_kernel"] + tt["boundary_kernel"]
    tt["total_assembly"] = time.perf_counter() - t_all
    return Linearization(jacobian, ctx.rhs, sigma, {"timings": dict(tt), "penalty_at_iterate": own})


def _volume_pass(plan: AssemblyPlan, ctx: _Context, coefficients: IterateCoefficients, a_bound: np.ndarray) -> None:
    mesh, timer = plan.mesh, ctx.timer
    space, pattern = plan.space, plan.pattern
    for e_lo, e_hi in plan.chunks:
        t = time.perf_counter()
        s_lo, s_hi = int(mesh.element_offsets[e_lo]), int(mesh.element_offsets[e_hi])
        q = plan.q_uniform if plan.q_uniform is not None else np.repeat(
            plan.q_element[e_lo:e_hi], np.diff(mesh.element_offsets[e_lo:e_hi + 1]))
        batch = simplex_points(mesh.points, mesh.simplex_volume[s_lo:s_hi], q, cells=mesh.simplices[s_lo:s_hi])
        timer.add("quadrature_points", t)
        u, g = ctx.iterate(mesh.simplex_element[s_lo:s_hi], batch.offsets, batch.x)
        t = time.perf_counter()
        where = ctx.where(mesh.simplex_element[s_lo:s_hi], ctx.simplex_cell[s_lo:s_hi], batch.offsets)
        forms, a = volume_forms(coefficients, batch.x, u, g, ctx.want, where)
        if len(a):
            per_simplex = np.maximum.reduceat(a, batch.offsets[:-1])
            np.maximum.at(a_bound, mesh.simplex_element[s_lo:s_hi], per_simplex)
        t = timer.add("forms", t)
        LK.volume_rows(e_lo, e_hi, mesh.element_offsets, s_lo, batch.offsets, batch.x, batch.weight,
                       _c(forms.M, forms.rho), np.ascontiguousarray(forms.rho), plan.lo, plan.hi, space.degree,
                       space.element_dofs, plan.table, plan.rec, pattern.row_base, pattern.row_width,
                       pattern.block_start, pattern.diag_entry, pattern.row_start, ctx.want, ctx.data, ctx.rhs)
        timer.add("element_kernel", t)


def _interior_pass(plan: AssemblyPlan, ctx: _Context, coefficients: IterateCoefficients, sigma: np.ndarray) -> None:
    mesh, timer = plan.mesh, ctx.timer
    space, pattern = plan.space, plan.pattern
    for e_lo, e_hi in plan.chunks:
        ifs = chunk_interfaces(plan, e_lo, e_hi)
        faces = expand_ranges(mesh.interface_offsets[ifs], mesh.interface_offsets[ifs + 1])
        if len(faces) == 0:
            continue
        ctx.face_local[faces] = np.arange(len(faces))
        batch = ctx.face_points(faces)
        sides = [ctx.iterate(mesh.face_elements[faces, s], batch.offsets, batch.x) for s in (0, 1)]
        t = time.perf_counter()
        counts = np.diff(batch.offsets)
        normals = np.repeat(mesh.face_normal[faces], counts, axis=0)
        where = None if not ctx.located else tuple(
            ctx.where(mesh.face_elements[faces, s], ctx.face_cells[faces, s], batch.offsets) for s in (0, 1))
        forms = interior_forms(coefficients, batch.x, normals, sides, np.repeat(sigma[faces], counts), ctx.want,
                               where)
        t = timer.add("forms", t)
        LK.interior_rows(e_lo, e_hi, pattern.adj_offsets, pattern.adj_col, plan.adj_interface,
                         mesh.interface_offsets, ctx.face_local, batch.offsets, batch.x, batch.weight,
                         _c(forms.M, forms.rho), np.ascontiguousarray(forms.rho), plan.lo, plan.hi, space.degree,
                         space.element_dofs, plan.table, plan.rec, pattern.row_base, pattern.row_width,
                         pattern.block_start, pattern.diag_entry, pattern.row_start, ctx.want, ctx.data, ctx.rhs)
        timer.add("interior_kernel", t)
        ctx.face_local[faces] = -1


def _boundary_pass(plan: AssemblyPlan, ctx: _Context, coefficients: IterateCoefficients, sigma: np.ndarray) -> None:
    mesh, timer = plan.mesh, ctx.timer
    space, pattern = plan.space, plan.pattern
    for e_lo, e_hi in plan.chunks:
        f0, f1 = int(plan.boundary_offsets[e_lo]), int(plan.boundary_offsets[e_hi])
        if f1 == f0:
            continue
        faces = np.arange(f0, f1, dtype=np.int64)
        ctx.face_local[faces] = np.arange(len(faces))
        batch = ctx.face_points(faces)
        u, g = ctx.iterate(mesh.face_elements[faces, 0], batch.offsets, batch.x)
        t = time.perf_counter()
        counts = np.diff(batch.offsets)
        normals = np.repeat(mesh.face_normal[faces], counts, axis=0)
        where = ctx.where(mesh.face_elements[faces, 0], ctx.face_cells[faces, 0], batch.offsets)
        forms = boundary_forms(coefficients, batch.x, normals, u, g, np.repeat(sigma[faces], counts), ctx.want,
                               where)
        t = timer.add("forms", t)
        LK.boundary_rows(e_lo, e_hi, plan.boundary_offsets, ctx.face_local, batch.offsets, batch.x, batch.weight,
                         _c(forms.M, forms.rho), np.ascontiguousarray(forms.rho), plan.lo, plan.hi, space.degree,
                         space.element_dofs, plan.table, plan.rec, pattern.row_base, pattern.row_width,
                         pattern.block_start, pattern.diag_entry, pattern.row_start, ctx.want, ctx.data, ctx.rhs)
        timer.add("boundary_kernel", t)
        ctx.face_local[faces] = -1


def _c(M, rho):
    """M as the kernels read it: contiguous, or for the residual alone a one-point stand-in of its shape
    (rho (n, D): M (n, D, D); rho (n, 2, D): M (n, 2, 2, D, D))."""
    if M is None:
        D = rho.shape[-1]
        return np.zeros((1, D, D) if rho.ndim == 2 else (1, 2, 2, D, D))
    return np.ascontiguousarray(M)
