"""The passes of an assembly on the CPU: volume, interior faces, boundary faces.

Each pass runs over the plan's chunks (``plan.py``): it maps the chunk's
quadrature points, evaluates the problem's coefficients there
(``coefficients.py``) and runs the compiled kernels (``kernels.py``).  With
Approach 2 the row kernels write each block once at its CSR position; the
atomic variant and Approach 1 buffer every sub-simplex and face block and
then scatter-add them, or keep them as COO triplets (:func:`reduce_entity_blocks`).
A :class:`PassContext` holds what the passes write and share.
"""

from __future__ import annotations

import time
from typing import Callable

import numpy as np
import scipy.sparse as sp

from . import kernels as K
from .coefficients import Coefficients
from .kept_points import KeptPoints
from .plan import AssemblyPlan
from .points import PointBatch, simplex_points
from .timing import Timer
from .workspace import Workspace


class PassContext:
    """The values being assembled (CSR data and load, or Approach 1's triplets) and the passes' shared means.

    ``face_local`` maps the faces of the chunk in hand to their rows in its
    point batch (-1 elsewhere).  Each kernel is run once on an empty range
    before its first real call (:meth:`warm`), so that compilation or cache
    loading is timed apart, as ``jit``.
    """

    def __init__(self, plan: AssemblyPlan, coefficients: Coefficients, workspace: Workspace, timer: Timer,
                 progress: Callable[[str, int, int], None] | None = None, kept: KeptPoints | None = None):
        self.plan, self.coefficients, self.workspace, self.timer = plan, coefficients, workspace, timer
        self.progress, self.kept = progress, kept
        t = time.perf_counter()
        # the value array (Approach 1 builds its own from the COO triplets; a load alone needs none)
        with_values = plan.matrix and plan.approach != "1"
        self.data = plan.pattern.zeroed_values(plan.dtype) if with_values else np.zeros(0, plan.dtype)
        timer.add("values", t)
        self.rhs = np.zeros(plan.pattern.n_rows, dtype=plan.dtype)
        self.coo: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self.face_local = np.full(plan.mesh.n_faces, -1, dtype=np.int64)
        self._warm: set[str] = set()

    def warm(self, name: str, call: Callable[[], None]) -> None:
        if name not in self._warm:
            start = time.perf_counter()
            call()
            self.timer.add("jit", start)
            self._warm.add(name)

    def report(self, stage: str, done: int) -> None:
        if self.progress is not None:
            self.progress(stage, done, len(self.plan.chunks))

    def points(self, batch: PointBatch) -> tuple[np.ndarray, np.ndarray]:
        """The batch's points and weights in the working precision (float32: converted into the workspace)."""
        dtype = self.plan.dtype
        if batch.x.dtype == dtype:
            return batch.x, batch.weight
        X = self.workspace.take("x_work", batch.x.shape, dtype)
        W = self.workspace.take("weight_work", batch.weight.shape, dtype)
        X[...], W[...] = batch.x, batch.weight
        return X, W

    def chunk_points(self, key: tuple, make: Callable[[], PointBatch],
                     faces: np.ndarray | None = None) -> tuple[PointBatch, np.ndarray, np.ndarray]:
        """The points of the batch ``key`` (float64) and its points and weights in the working precision:
        kept ones (:class:`~polydg.assembly.kept_points.KeptPoints`, the same numbers), or ``make()``'s,
        then kept when the store keeps points.  ``faces``: the faces they belong to, checked against
        the kept batch's (a boundary pass's faces depend on the problem)."""
        t = time.perf_counter()
        found = self.kept.get(key, faces) if self.kept is not None else None
        if found is None:
            batch = make()
            X, W = self.points(batch)
            if self.kept is not None:
                batch, X, W = self.kept.put(key, faces, batch, X, W)
        else:
            batch, X, W = found
        self.timer.add("quadrature_points", t)
        return batch, X, W

    def face_points(self, faces: np.ndarray, key: tuple | None = None) -> tuple[PointBatch, np.ndarray, np.ndarray]:
        """The listed faces' quadrature points (float64) and the points and weights in the working precision
        (kept under ``key``, see :meth:`chunk_points`)."""
        mesh = self.plan.mesh

        def make() -> PointBatch:
            return simplex_points(mesh.points, mesh.face_measure[faces], self.plan.face_degrees(faces),
                                  cells=mesh.face_vertices[faces], workspace=self.workspace)

        if key is None:
            t = time.perf_counter()
            batch = make()
            X, W = self.points(batch)
            self.timer.add("quadrature_points", t)
            return batch, X, W
        return self.chunk_points(key, make, faces)

    def matrix(self) -> sp.csr_matrix | None:
        """The assembled rows as CSR with int64 indices (Approach 1: SciPy's conversion of the triplets);
        None when the plan is the load alone."""
        plan, pattern = self.plan, self.plan.pattern
        if plan.load_only:
            return None
        shape = (pattern.n_rows, pattern.n_cols)
        if plan.approach == "1":
            t = time.perf_counter()
            rows, cols, vals = (np.concatenate([c[k] for c in self.coo]) for k in range(3))
            matrix = sp.coo_matrix((vals, (rows, cols)), shape=shape).tocsr()
            matrix.sum_duplicates()
            matrix.indices = matrix.indices.astype(np.int64)
            matrix.indptr = matrix.indptr.astype(np.int64)
            self.timer.add("indices", t)
            return matrix
        # the arrays as they are: SciPy's constructor would first convert the int64 indices
        # to int32 where they fit (an nnz-sized copy), and polydg promises int64
        matrix = sp.csr_matrix(shape, dtype=plan.dtype)
        matrix.data, matrix.indices, matrix.indptr = self.data, pattern.indices, pattern.indptr
        matrix.check_format(full_check=False)
        matrix.has_sorted_indices = True
        return matrix


# ---------------------------------------------------------------------------
# volume


def volume_pass(plan: AssemblyPlan, ctx: PassContext) -> None:
    """Volume terms and load of every chunk's elements (the load alone, by the row kernel, for a
    load-only plan, whatever the approach: the loads of the three agree to round-off)."""
    mesh, space, timer = plan.mesh, plan.space, ctx.timer
    degree, nbasis, pattern = space.degree, space.element_dofs, plan.pattern
    tables = (plan.lo, plan.hi, degree, nbasis, plan.table, plan.rec)
    for ci, (e_lo, e_hi) in enumerate(plan.chunks):
        s_lo, s_hi = int(mesh.element_offsets[e_lo]), int(mesh.element_offsets[e_hi])

        def make() -> PointBatch:
            q = plan.q_uniform if plan.q_uniform is not None else np.repeat(
                plan.q_element[e_lo:e_hi], np.diff(mesh.element_offsets[e_lo:e_hi + 1]))
            return simplex_points(mesh.points, mesh.simplex_volume[s_lo:s_hi], q, cells=mesh.simplices[s_lo:s_hi],
                                  workspace=ctx.workspace)

        batch, X, W = ctx.chunk_points(("volume", ci), make)
        t = time.perf_counter()
        A, B, C, F = ctx.coefficients.volume(batch.x, want_load=True, want_block=plan.matrix)
        timer.add("coefficients", t)
        if plan.approach == "2" or plan.load_only:
            args = (mesh.element_offsets, s_lo, batch.offsets, X, W, A, B, C, F, *tables,
                    pattern.row_base, pattern.row_width, pattern.block_start, pattern.diag_entry,
                    pattern.row_start, True, plan.matrix, *plan.moments, ctx.data, ctx.rhs)
            ctx.warm("element", lambda: K.element_rows(e_lo, e_lo, *args))
            t = time.perf_counter()
            K.element_rows(e_lo, e_hi, *args)
            timer.add("element_kernel", t)
        else:
            se = mesh.simplex_element[s_lo:s_hi]
            vals_off = np.r_[0, np.cumsum(nbasis[se] ** 2)].astype(np.int64)
            load_off = np.r_[0, np.cumsum(nbasis[se])].astype(np.int64)
            vals = np.empty(int(vals_off[-1]), dtype=plan.dtype)
            loads = np.empty(int(load_off[-1]), dtype=plan.dtype)
            args = (mesh.simplex_element, batch.offsets, X, W, A, B, C, F, *tables, True, *plan.moments,
                    vals, vals_off, loads, load_off)
            ctx.warm("simplex", lambda: K.simplex_blocks(s_lo, s_lo, *args))
            t = time.perf_counter()
            K.simplex_blocks(s_lo, s_hi, *args)
            timer.add("element_kernel", t)
            reduce_entity_blocks(plan, ctx, se, pattern.diag_entry[se], vals_off[:-1], vals, "element_kernel")
            t = time.perf_counter()
            K.scatter_add_loads(se, load_off[:-1], loads, pattern.row_start, nbasis, ctx.rhs)
            timer.add("element_kernel", t)
        ctx.report("element kernel", ci + 1)


# ---------------------------------------------------------------------------
# interior faces


def interior_face_pass(plan: AssemblyPlan, ctx: PassContext) -> None:
    """Interior-face terms: by element rows (Approach 2) or face by face (the others); none in the load."""
    if plan.mesh.n_interior_faces and plan.matrix:
        (_interior_rows_pass if plan.approach == "2" else _interior_entities_pass)(plan, ctx)


def _interior_rows_pass(plan: AssemblyPlan, ctx: PassContext) -> None:
    mesh, space, pattern, timer = plan.mesh, plan.space, plan.pattern, ctx.timer
    for ci, (e_lo, e_hi) in enumerate(plan.chunks):
        # every face of an interface with a side in the chunk
        ifs = chunk_interfaces(plan, e_lo, e_hi)
        faces = expand_ranges(mesh.interface_offsets[ifs], mesh.interface_offsets[ifs + 1])
        ctx.face_local[faces] = np.arange(len(faces))
        batch, X, W = ctx.face_points(faces, ("interior", ci))
        t = time.perf_counter()
        A, B = ctx.coefficients.interior(batch.x)
        timer.add("coefficients", t)
        args = (pattern.adj_offsets, pattern.adj_col, plan.adj_interface, mesh.interface_offsets, ctx.face_local,
                batch.offsets, X, W, A, B, plan.normal, plan.sigma, plan.lo, plan.hi, space.degree,
                space.element_dofs, plan.table, plan.rec, pattern.row_base, pattern.row_width, pattern.block_start,
                pattern.diag_entry, ctx.data)
        ctx.warm("interior", lambda: K.interior_rows(e_lo, e_lo, *args))
        t = time.perf_counter()
        K.interior_rows(e_lo, e_hi, *args)
        timer.add("interior_kernel", t)
        ctx.face_local[faces] = -1
        ctx.report("interior kernel", ci + 1)


def chunk_interfaces(plan: AssemblyPlan, e_lo: int, e_hi: int) -> np.ndarray:
    """The interfaces with a side in elements ``e_lo:e_hi``, increasing, in O(chunk) work.

    Interfaces (e1, e2), e1 < e2, are sorted by e1, then e2: those with e1 in
    the chunk are one contiguous range (two binary searches), and the others
    with a side in it are (c, e) with c < e_lo, read from the adjacency of the
    chunk's element rows; their ids all lie below that range.  The mask
    over every interface of the mesh would cost O(mesh) per chunk, and the
    chunks of a memory budget grow in number with the mesh: the assembly's
    cost per dof would grow with the mesh.
    """
    mesh, pattern = plan.mesh, plan.pattern
    first = mesh.interface_elements[:, 0]
    i_lo, i_hi = np.searchsorted(first, [e_lo, e_hi])
    k_lo, k_hi = int(pattern.adj_offsets[e_lo]), int(pattern.adj_offsets[e_hi])
    below = plan.adj_interface[k_lo:k_hi][pattern.adj_col[k_lo:k_hi] < e_lo]  # no diagonal entry: it is >= e_lo
    return np.concatenate([np.sort(below), np.arange(i_lo, i_hi, dtype=np.int64)]).astype(np.int64, copy=False)


def _interior_entities_pass(plan: AssemblyPlan, ctx: PassContext) -> None:
    mesh, space, pattern, timer = plan.mesh, plan.space, plan.pattern, ctx.timer
    nbasis = space.element_dofs
    cuts = np.linspace(0, mesh.n_interior_faces, max(len(plan.chunks), 1) + 1).astype(np.int64)
    for ci, (f_lo, f_hi) in enumerate(zip(cuts[:-1], cuts[1:])):
        if f_hi == f_lo:
            continue
        faces = np.arange(f_lo, f_hi, dtype=np.int64)
        ctx.face_local[faces] = np.arange(len(faces))
        batch, X, W = ctx.face_points(faces, ("interior-entity", ci))
        t = time.perf_counter()
        A, B = ctx.coefficients.interior(batch.x)
        timer.add("coefficients", t)
        e1, e2 = mesh.face_elements[faces, 0], mesh.face_elements[faces, 1]
        n1, n2 = nbasis[e1], nbasis[e2]
        vals_off = np.r_[0, np.cumsum(n1 * n1 + n1 * n2 + n2 * n2 + n2 * n1)].astype(np.int64)
        vals = np.empty(int(vals_off[-1]), dtype=plan.dtype)
        args = (mesh.face_elements, ctx.face_local, batch.offsets, X, W, A, B, plan.normal, plan.sigma, plan.lo,
                plan.hi, space.degree, nbasis, plan.table, plan.rec, vals, vals_off)
        ctx.warm("interior-entity", lambda: K.interior_face_blocks(faces[:0], *args))
        t = time.perf_counter()
        K.interior_face_blocks(faces, *args)
        timer.add("interior_kernel", t)
        # each face's slot holds its blocks K1K1, K1K2, K2K2, K2K1 (see kernels.interior_face_blocks)
        iface = np.searchsorted(mesh.interface_offsets, faces, side="right") - 1
        e12, e21 = pattern.interface_entry[iface, 0], pattern.interface_entry[iface, 1]
        o = vals_off[:-1]
        rows = np.stack([e1, e1, e2, e2], 1).ravel()
        entries = np.stack([pattern.diag_entry[e1], e12, pattern.diag_entry[e2], e21], 1).ravel()
        offsets = np.stack([o, o + n1 * n1, o + n1 * n1 + n1 * n2, o + n1 * n1 + n1 * n2 + n2 * n2], 1).ravel()
        reduce_entity_blocks(plan, ctx, rows, entries, offsets, vals, "interior_kernel")
        ctx.face_local[faces] = -1


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
        vanish = np.all(A[None, :, :] * normal[:, None, :] == 0.0, axis=(1, 2))
        faces = ~vanish if faces is None else faces & ~vanish
    if mode == K.INFLOW and problem.is_constant("advection"):
        b = np.asarray(problem.advection_at(mesh.points[:1]), dtype=np.float64)[0]
        vanish = np.all(b[None, :] * normal >= 0.0, axis=1)
        faces = ~vanish if faces is None else faces & ~vanish
    return faces


def boundary_face_pass(plan: AssemblyPlan, ctx: PassContext, mode: int, key: str) -> None:
    """Boundary terms of one ``mode`` (``kernels.DIFFUSIVE`` or ``INFLOW``), timed as ``key``, on the faces
    where they can be non-zero (:func:`contributing_boundary_faces`)."""
    mesh, space, pattern, timer = plan.mesh, plan.space, plan.pattern, ctx.timer
    nbasis = space.element_dofs
    contributing = contributing_boundary_faces(plan, mode)
    for ci, (e_lo, e_hi) in enumerate(plan.chunks):
        f0, f1 = int(plan.boundary_offsets[e_lo]), int(plan.boundary_offsets[e_hi])
        faces = np.arange(f0, f1, dtype=np.int64)
        if contributing is not None:
            faces = faces[contributing[f0 - mesh.n_interior_faces:f1 - mesh.n_interior_faces]]
        if len(faces) == 0:
            continue
        ctx.face_local[faces] = np.arange(len(faces))
        batch, X, W = ctx.face_points(faces, ("boundary", mode, ci))
        t = time.perf_counter()
        normals = np.repeat(mesh.face_normal[faces], np.diff(batch.offsets), axis=0)
        A, B, GD, GN, NEU = ctx.coefficients.boundary(batch.x, normals)
        timer.add("coefficients", t)
        if plan.approach == "2" or plan.load_only:
            args = (plan.boundary_offsets, ctx.face_local, batch.offsets, X, W, A, B, GD, GN, NEU, plan.normal,
                    plan.sigma, plan.lo, plan.hi, space.degree, nbasis, plan.table, plan.rec, pattern.row_base,
                    pattern.row_width, pattern.block_start, pattern.diag_entry, pattern.row_start,
                    ctx.data, ctx.rhs, plan.matrix)
            ctx.warm(f"boundary{mode}", lambda: K.boundary_rows(mode, e_lo, e_lo, *args))
            t = time.perf_counter()
            K.boundary_rows(mode, e_lo, e_hi, *args)
            timer.add(key, t)
        else:
            be = mesh.face_elements[faces, 0]
            vals_off = np.r_[0, np.cumsum(nbasis[be] ** 2)].astype(np.int64)
            load_off = np.r_[0, np.cumsum(nbasis[be])].astype(np.int64)
            vals = np.empty(int(vals_off[-1]), dtype=plan.dtype)
            loads = np.empty(int(load_off[-1]), dtype=plan.dtype)
            args = (mesh.face_elements, ctx.face_local, batch.offsets, X, W, A, B, GD, GN, NEU, plan.normal,
                    plan.sigma, plan.lo, plan.hi, space.degree, nbasis, plan.table, plan.rec, vals, vals_off, loads,
                    load_off)
            ctx.warm(f"boundary-entity{mode}", lambda: K.boundary_face_blocks(mode, faces[:0], *args))
            t = time.perf_counter()
            K.boundary_face_blocks(mode, faces, *args)
            K.scatter_add_loads(be, load_off[:-1], loads, pattern.row_start, nbasis, ctx.rhs)
            timer.add(key, t)
            reduce_entity_blocks(plan, ctx, be, pattern.diag_entry[be], vals_off[:-1], vals, key)
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


def reduce_entity_blocks(plan: AssemblyPlan, ctx: PassContext, rows: np.ndarray, entries: np.ndarray,
                         offsets: np.ndarray, vals: np.ndarray, key: str) -> None:
    """Scatter-add entity blocks into the CSR values (atomic) or keep their COO triplets (Approach 1).

    Block t is row element ``rows[t]``'s block at adjacency entry
    ``entries[t]``, its values at ``vals[offsets[t]:]``.  Blocks of rows
    that are not assembled here (another rank's) are dropped.
    """
    t = time.perf_counter()
    pattern, space = plan.pattern, plan.space
    mine = pattern.row_base[rows] >= 0
    if not mine.all():
        rows, entries, offsets = rows[mine], entries[mine], offsets[mine]
    rows = np.ascontiguousarray(rows, dtype=np.int64)
    entries = np.ascontiguousarray(entries, dtype=np.int64)
    offsets = np.ascontiguousarray(offsets, dtype=np.int64)
    if plan.approach == "atomic":
        K.scatter_add_blocks(rows, entries, offsets, vals, pattern.adj_col, space.element_dofs, pattern.row_base,
                             pattern.row_width, pattern.block_start, ctx.data)
        ctx.timer.add(key, t)  # the paper's atomic writes happen inside its kernels
    else:
        nbasis = space.element_dofs
        sizes = nbasis[rows] * nbasis[pattern.adj_col[entries]]
        if not mine.all():  # the kept blocks' values, packed
            vals = vals[expand_ranges(offsets, offsets + sizes)]
            offsets = np.cumsum(sizes) - sizes
        r = np.empty(len(vals), dtype=np.int64)
        c = np.empty(len(vals), dtype=np.int64)
        K.coo_triplets(rows, entries, offsets, vals, pattern.adj_col, nbasis, pattern.row_start, space.dof_offsets,
                       r, c)
        ctx.coo.append((r, c, vals))
        ctx.timer.add("indices", t)
