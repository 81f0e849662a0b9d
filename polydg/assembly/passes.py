"""The passes of an assembly on the CPU: volume, interior faces, boundary faces.

Each pass runs over the plan's chunks (``plan.py``): it maps the chunk's
quadrature points and evaluates the problem's coefficients there
(``coefficients.py``); then the reduction's CPU executor (``reductions/``)
runs its compiled kernels (``kernels.py``) on them and writes the blocks:
the row kernels each block once at its CSR position, the entity kernels
into buffers that are then scatter-added or kept as COO triplets.  A
:class:`PassContext` holds what the passes write and share, among it the
kernels' structures of the plan (``arguments.py``), made once.

An executor has ``volume(e_lo, e_hi, s_lo, s_hi, points, coef)``,
``interior_faces()`` (the whole pass: the reductions cut the faces
differently), ``boundary(mode, key, e_lo, e_hi, faces, points, coef)`` and
``matrix()``; it is made with the context, ``executor(ctx)``.
"""

from __future__ import annotations

import time
from typing import Callable

import numpy as np
import scipy.sparse as sp

from ..backend import to_host
from ..threads import parallel_range, range_kernel
from . import kernels as K
from .result import csr_as_given
from .arguments import Points, Values, plan_arguments
from .coefficients import Coefficients
from .kept_points import KeptPoints
from .plan import AssemblyPlan
from .points import PointBatch, simplex_points
from .timing import Timer
from .workspace import Workspace


class PassContext:
    """The values being assembled (CSR data and load) and the passes' shared means.

    ``args`` are the kernels' pattern, basis and face structures of the plan
    (:func:`~polydg.assembly.arguments.plan_arguments`); ``face_local``
    (theirs) maps the faces of the chunk in hand to their entities in its
    point batch (-1 elsewhere).  ``csr_values`` False: no CSR value array
    (a reduction that builds its own matrix, or the load alone).  Each
    kernel is run once on an empty range before its first real call
    (:meth:`warm`), so that compilation or cache loading is timed apart, as
    ``jit``.  ``kept``: an Assembler's kept points (:meth:`chunk_points`), or None.
    """

    def __init__(self, plan: AssemblyPlan, coefficients: Coefficients, workspace: Workspace, timer: Timer,
                 progress: Callable[[str, int, int], None] | None = None, csr_values: bool = True,
                 kept: KeptPoints | None = None):
        self.plan, self.coefficients, self.workspace, self.timer = plan, coefficients, workspace, timer
        self.progress, self.kept = progress, kept
        t = time.perf_counter()
        self.data = plan.pattern.zeroed_values(plan.dtype) if csr_values else np.zeros(0, plan.dtype)
        timer.add("values", t)
        self.rhs = np.zeros(plan.pattern.n_rows, dtype=plan.dtype)
        self.values = Values(self.data, self.rhs)
        self.args = plan_arguments(plan)
        self.face_local = self.args.faces.face_local
        self._warm: set[str] = set()

    def warm(self, name: str, call: Callable[[], None]) -> None:
        if name not in self._warm:
            start = time.perf_counter()
            call()
            self.timer.add("jit", start)
            self._warm.add(name)

    def report(self, stage: str, done: int, total: int | None = None) -> None:
        if self.progress is not None:
            self.progress(stage, done, len(self.plan.chunks) if total is None else total)

    def points(self, batch: PointBatch) -> Points:
        """The batch's points and weights in the working precision (float32: converted into the workspace)."""
        dtype = self.plan.dtype
        if batch.x.dtype == dtype:
            return Points(batch.offsets, batch.x, batch.weight)
        X = self.workspace.take("x_work", batch.x.shape, dtype)
        W = self.workspace.take("weight_work", batch.weight.shape, dtype)
        X[...], W[...] = batch.x, batch.weight
        return Points(batch.offsets, X, W)

    def chunk_points(self, key: tuple, make: Callable[[], PointBatch],
                     faces: np.ndarray | None = None) -> tuple[PointBatch, Points]:
        """The points of the batch ``key`` (float64) and its points and weights in the working precision:
        kept ones (:class:`~polydg.assembly.kept_points.KeptPoints`, the same numbers), or ``make()``'s,
        then kept when the store keeps points.  ``faces``: the faces they belong to, checked against
        the kept batch's (a boundary pass's faces depend on the problem)."""
        t = time.perf_counter()
        found = self.kept.get(key, faces) if self.kept is not None else None
        if found is None:
            batch = make()
            points = self.points(batch)
            if self.kept is not None:
                batch, X, W = self.kept.put(key, faces, batch, points.x, points.weight)
                points = Points(batch.offsets, X, W)
        else:
            batch, X, W = found
            points = Points(batch.offsets, X, W)
        self.timer.add("quadrature_points", t)
        return batch, points

    def face_points(self, faces: np.ndarray, key: tuple | None = None) -> tuple[PointBatch, Points]:
        """The listed faces' quadrature points (float64) and the points and weights in the working precision
        (kept under ``key``, see :meth:`chunk_points`)."""
        mesh = self.plan.mesh

        def make() -> PointBatch:
            return simplex_points(mesh.points, mesh.face_measure[faces], self.plan.face_degrees(faces),
                                  cells=mesh.face_vertices[faces], workspace=self.workspace)

        if key is None:
            t = time.perf_counter()
            batch = make()
            points = self.points(batch)
            self.timer.add("quadrature_points", t)
            return batch, points
        return self.chunk_points(key, make, faces)

    def csr_matrix(self) -> sp.csr_matrix:
        """The pattern's values as CSR with int64 indices."""
        pattern = self.plan.pattern
        return csr_as_given(self.data, pattern.indices, pattern.indptr, (pattern.n_rows, pattern.n_cols))


def assemble_on_host(plan: AssemblyPlan, executor: Callable[[PassContext], object], coefficients: Coefficients,
                     workspace: Workspace, timer: Timer, progress: Callable[[str, int, int], None] | None = None,
                     csr_values: bool = True, kept: KeptPoints | None = None) -> tuple[sp.csr_matrix | None, np.ndarray]:
    """Run the plan's passes on the CPU with a reduction's ``executor``; the matrix (None for the load
    alone) and the load vector.  ``csr_values``: whether the executor writes the pattern's CSR values;
    ``kept``: the points kept across assemblies (:class:`PassContext`)."""
    ctx = PassContext(plan, coefficients, workspace, timer, progress, csr_values=csr_values and plan.matrix,
                      kept=kept)
    passes = executor(ctx)
    volume_pass(ctx, passes)
    if plan.mesh.n_interior_faces and plan.matrix:  # no interior-face term in the load
        passes.interior_faces()
    for mode, key in boundary_modes(plan.problem, plan.matrix):
        boundary_face_pass(ctx, passes, mode, key)
    return (passes.matrix() if plan.matrix else None), ctx.rhs


# ---------------------------------------------------------------------------
# volume


def volume_pass(ctx: PassContext, passes) -> None:
    """Volume terms and load of every chunk's elements (for the load alone, only the load)."""
    plan, timer = ctx.plan, ctx.timer
    mesh = plan.mesh
    for ci, (e_lo, e_hi) in enumerate(plan.chunks):
        s_lo, s_hi = int(mesh.element_offsets[e_lo]), int(mesh.element_offsets[e_hi])

        def make() -> PointBatch:
            q = plan.q_uniform if plan.q_uniform is not None else np.repeat(
                plan.q_element[e_lo:e_hi], np.diff(mesh.element_offsets[e_lo:e_hi + 1]))
            return simplex_points(mesh.points, mesh.simplex_volume[s_lo:s_hi], q, cells=mesh.simplices[s_lo:s_hi],
                                  workspace=ctx.workspace)

        batch, points = ctx.chunk_points(("volume", ci), make)
        t = time.perf_counter()
        coef = ctx.coefficients.volume(batch.x, want_load=True, want_block=plan.matrix)
        timer.add("coefficients", t)
        passes.volume(e_lo, e_hi, s_lo, s_hi, points, coef)
        ctx.report("element kernel", ci + 1)


# ---------------------------------------------------------------------------
# interior faces: the executors' own passes, with these helpers


def chunk_interfaces(plan: AssemblyPlan, e_lo: int, e_hi: int) -> np.ndarray:
    """The interfaces with a side in elements ``e_lo:e_hi``, increasing, in O(chunk) work.

    Interfaces (e1, e2), e1 < e2, are sorted by e1, then e2: those with e1 in
    the chunk are one contiguous range (two binary searches), and the others
    with a side in it are (c, e) with c < e_lo, read from the adjacency of the
    chunk's element rows; their ids all lie below that range.  Not a mask
    over every interface of the mesh: that would cost O(mesh) per chunk, and
    the chunks of a memory budget grow in number with the mesh.
    """
    mesh, pattern = plan.mesh, plan.pattern
    first = mesh.interface_elements[:, 0]
    i_lo, i_hi = np.searchsorted(first, [e_lo, e_hi])
    k_lo, k_hi = int(pattern.adj_offsets[e_lo]), int(pattern.adj_offsets[e_hi])
    # on the host whatever the plan's backend (a GPU's pattern is on the device): the ids index the mesh's arrays
    column, interface = to_host(pattern.adj_col[k_lo:k_hi]), to_host(plan.adj_interface[k_lo:k_hi])
    below = interface[column < e_lo]  # no diagonal entry: it is >= e_lo
    return np.concatenate([np.sort(below), np.arange(i_lo, i_hi, dtype=np.int64)]).astype(np.int64, copy=False)


def interior_face_cuts(plan: AssemblyPlan) -> np.ndarray:
    """Cuts of the interior faces into as many consecutive ranges as the plan has chunks (the entity
    kernels' chunks)."""
    return np.linspace(0, plan.mesh.n_interior_faces, max(len(plan.chunks), 1) + 1).astype(np.int64)


# ---------------------------------------------------------------------------
# boundary faces


def boundary_modes(problem, matrix: bool = True) -> list[tuple[int, str]]:
    """The boundary passes a problem needs, with their timing rows: diffusive (Dirichlet / Neumann) and inflow.

    For the load alone (``matrix=False``) a pass without boundary data (no g_D, and for the diffusive
    pass no g_N) would add only zeros, and is left out.
    """
    modes = []
    if problem.has_diffusion and (matrix or problem.dirichlet is not None or problem.neumann is not None):
        modes.append((K.DIFFUSIVE, "boundary_kernel"))
    if problem.has_advection and (matrix or problem.dirichlet is not None):
        modes.append((K.INFLOW, "inflow_kernel"))
    return modes


def contributing_boundary_faces(plan: AssemblyPlan, mode: int) -> np.ndarray | None:
    """(n_boundary_faces,) bool: the boundary faces where ``mode``'s terms can be non-zero; None for all.

    With a constant A the diffusive terms need n.A n > 0, and with a constant b the inflow terms need
    b.n < 0 (``kernels.boundary_face_accumulate``): a face where every product A_kl n_l is zero, or
    every b_k n_k is >= 0, adds nothing in any precision, and is left out before its points are made.
    A space-time slab's top face (and, for the diffusive terms, its bottom face) is such a face: they
    are half of a 2D + 1 slab's boundary points.  The load alone keeps only the plan's
    ``load_boundary_faces`` when it has them.
    """
    problem, mesh = plan.problem, plan.mesh
    n_int = mesh.n_interior_faces
    normal = mesh.face_normal[n_int:]
    faces = None if plan.load_boundary_faces is None else plan.load_boundary_faces[n_int:]
    if mode == K.DIFFUSIVE and problem.is_constant("diffusion"):
        A = np.asarray(problem.diffusion_at(mesh.points[:1]), dtype=np.float64)[0]
        faces = _and(faces, ~_diffusion_vanishes(A, normal))
    if mode == K.INFLOW and problem.is_constant("advection"):
        b = np.asarray(problem.advection_at(mesh.points[:1]), dtype=np.float64)[0]
        faces = _and(faces, ~_inflow_vanishes(b, normal))
    return faces


def _and(faces: np.ndarray | None, more: np.ndarray) -> np.ndarray:
    return more if faces is None else faces & more


def _diffusion_vanishes(A: np.ndarray, normal: np.ndarray) -> np.ndarray:
    """Faces where every A_kl n_l is zero: a finite normal with n_l = 0 for every column l of A holding a
    non-zero.  A non-finite A or normal makes some product non-zero or NaN: such a face stays (and the
    assembly's finite check speaks); products that would underflow to zero keep their face too.  Compiled,
    a face at a time on every core, not through an (n_faces, d, d) product."""
    out = np.zeros(len(normal), dtype=np.bool_)
    if np.isfinite(A).all():
        parallel_range(_normal_misses_columns, 0, len(normal), np.ascontiguousarray(normal, dtype=np.float64),
                       np.any(A != 0.0, axis=0), out)
    return out


def _inflow_vanishes(b: np.ndarray, normal: np.ndarray) -> np.ndarray:
    """Faces where every b_k n_k is >= 0 (so b.n >= 0 in any precision)."""
    out = np.empty(len(normal), dtype=np.bool_)
    parallel_range(_products_nonnegative, 0, len(normal), np.ascontiguousarray(normal, dtype=np.float64),
                   np.ascontiguousarray(b, dtype=np.float64), out)
    return out


def compile_boundary_choice_kernels() -> None:
    """Compile (or load from Numba's cache) the kernels of :func:`contributing_boundary_faces`, on empty input."""
    normal, none = np.zeros((0, 2)), np.zeros(0, dtype=np.bool_)
    _normal_misses_columns(0, 0, normal, np.zeros(2, dtype=np.bool_), none)
    _products_nonnegative(0, 0, normal, np.zeros(2), none)


@range_kernel
def _normal_misses_columns(lo, hi, normal, columns, out):  # pragma: no cover - compiled
    """out[f]: n_f is finite and n_fl = 0 wherever ``columns[l]``."""
    for f in range(lo, hi):
        vanishes = True
        for m in range(normal.shape[1]):
            n = normal[f, m]
            if not np.isfinite(n) or (columns[m] and n != 0.0):
                vanishes = False
        out[f] = vanishes


@range_kernel
def _products_nonnegative(lo, hi, normal, b, out):  # pragma: no cover - compiled
    """out[f]: every n_fk b_k >= 0 (False where one is NaN)."""
    for f in range(lo, hi):
        ok = True
        for m in range(normal.shape[1]):
            if not normal[f, m] * b[m] >= 0.0:
                ok = False
        out[f] = ok


def boundary_face_pass(ctx: PassContext, passes, mode: int, key: str) -> None:
    """Boundary terms of one ``mode`` (``kernels.DIFFUSIVE`` or ``INFLOW``), timed as ``key``, on the faces
    where they can be non-zero (:func:`contributing_boundary_faces`)."""
    plan, timer = ctx.plan, ctx.timer
    mesh = plan.mesh
    t = time.perf_counter()
    contributing = contributing_boundary_faces(plan, mode)
    timer.add("coefficients", t)  # the faces the constant coefficients leave out: the problem's, not the plan's
    for ci, (e_lo, e_hi) in enumerate(plan.chunks):
        f0, f1 = int(plan.boundary_offsets[e_lo]), int(plan.boundary_offsets[e_hi])
        faces = np.arange(f0, f1, dtype=np.int64)
        if contributing is not None:
            faces = faces[contributing[f0 - mesh.n_interior_faces:f1 - mesh.n_interior_faces]]
        if len(faces) == 0:
            continue
        ctx.face_local[faces] = np.arange(len(faces))
        batch, points = ctx.face_points(faces, ("boundary", mode, ci))
        t = time.perf_counter()
        normals = np.repeat(mesh.face_normal[faces], np.diff(batch.offsets), axis=0)
        coef = ctx.coefficients.boundary(batch.x, normals)
        timer.add("coefficients", t)
        passes.boundary(mode, key, e_lo, e_hi, faces, points, coef)
        ctx.face_local[faces] = -1
        ctx.report(key.replace("_", " "), ci + 1)


# ---------------------------------------------------------------------------
# helpers


def expand_ranges(starts: np.ndarray, stops: np.ndarray) -> np.ndarray:
    """Concatenate arange(starts[i], stops[i]) for all i, vectorised."""
    lengths = stops - starts
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    offsets = np.cumsum(lengths) - lengths
    return (np.repeat(starts - offsets, lengths) + np.arange(total)).astype(np.int64)
