"""The passes of an assembly on a GPU: the same plan as ``passes.py``, executed by numba-cuda kernels.

A second executor of an :class:`~polydg.assembly.plan.AssemblyPlan`: it
runs over the plan's chunks as the CPU passes do (volume, interior faces,
boundary faces of each mode) and for each chunk

1. maps the quadrature points on the device (``points.simplex_points_on``:
   the CPU's point maps as array code, from the mesh's points, cells and
   measures copied once) and evaluates the problem's coefficients there
   (``coefficients.DeviceCoefficients``: the problem's callables receive the
   backend's arrays; a NumPy-only callable is detected and evaluated on the
   host, with a one-time warning);
2. launches the kernels of ``cuda_kernels.py``: the row kernels
   (deterministic, one thread per element) or, with ``approach="atomic"``,
   the entity kernels that add their blocks with ``cuda.atomic.add``.

The sparsity pattern is built on the device (``device_pattern.py``); the
plan's other tables cross to the device once; per chunk, the host sends the
entities' offsets.  The CSR values and the load stay on the
device until the end.  Arrays are
those of the backend (:mod:`polydg.backend`): CuPy on a GPU, NumPy under
numba-cuda's simulator (the test-only backend ``"cudasim"``).
"""

from __future__ import annotations

import time
from typing import Callable

import numpy as np

from .. import backend as bk
from ..errors import OptionError
from .coefficients import Coefficients, DeviceCoefficients
from .passes import boundary_modes, expand_ranges
from .plan import AssemblyPlan
from .points import PointBatch, simplex_points_on
from .timing import Timer
from .workspace import Workspace


class DeviceContext:
    """What the device passes share: the backend's arrays of the plan, the values being assembled, the kernels."""

    def __init__(self, plan: AssemblyPlan, backend: str, coefficients: Coefficients, workspace: Workspace,
                 timer: Timer, progress: Callable[[str, int, int], None] | None = None, kept: dict | None = None):
        from .cuda_kernels import gpu_kernels  # imports numba.cuda: only here, on the GPU path

        if plan.approach not in ("2", "atomic"):
            raise OptionError(f"approach {plan.approach!r} runs on the CPU only; on a GPU use approach 2 or atomic")
        self.plan, self.backend, self.coefficients, self.workspace, self.timer = (plan, backend, coefficients,
                                                                                  workspace, timer)
        self.progress = progress
        self.xp = bk.array_module(backend)
        space, mesh, pattern = plan.space, plan.mesh, plan.pattern
        self.kernels = gpu_kernels(mesh.dim, int(space.max_degree), np.dtype(plan.dtype).type,
                                  getattr(space, "basis", "P"))
        t = time.perf_counter()
        dev = self.dev
        # the plan's tables on the device, copied once per ``kept`` (an Assembler's, for all its assemblies)
        kept = {} if kept is None else kept
        if not kept:
            # row_start: each element's first row among the assembled ones (the kernels' dof_offsets - first_row)
            kept.update(degree=dev(space.degree), nbasis=dev(space.element_dofs), dof_offsets=dev(pattern.row_start),
                        lo=dev(plan.lo), hi=dev(plan.hi), normal=dev(plan.normal),
                        csr=(dev(pattern.row_base), dev(pattern.row_width), dev(pattern.block_start),
                             dev(pattern.diag_entry)),
                        face_normal64=dev(mesh.face_normal),  # float64: the coefficients' normals, as on the host
                        # what the point maps read: vertices, sub-simplices and faces with their measures
                        mesh_points=dev(mesh.points), simplices=dev(mesh.simplices),
                        simplex_volume=dev(mesh.simplex_volume), face_vertices=dev(mesh.face_vertices),
                        face_measure=dev(mesh.face_measure))
        for name, value in kept.items():
            setattr(self, name, value)
        self.sigma = dev(plan.sigma)
        self.first_row = 0
        self.data = self.xp.zeros(pattern.nnz, dtype=plan.dtype)
        self.rhs = self.xp.zeros(pattern.n_rows, dtype=plan.dtype)
        self.face_local = self.xp.full(mesh.n_faces, -1, dtype=np.int64)
        self.values = DeviceCoefficients(coefficients.problem, mesh.dim, plan.dtype, self.xp)
        timer.add("values", t)
        self._warm: set[str] = set()

    def dev(self, a) -> object:
        """``a`` as an array of the backend (contiguous; int arrays int64); the pattern's arrays already are."""
        if bk.array_namespace(a) is not np:
            return a
        a = np.asarray(a)
        return bk.to_device(a.astype(np.int64) if a.dtype.kind in "iu" and a.dtype != np.int8 else a, self.backend)

    def run(self, name: str, n: int, key: str, *args) -> None:
        """Launch kernel ``name`` on ``n`` threads, timed as ``key``; its first launch compiles (timed as ``jit``)."""
        from .cuda_kernels import launch

        kernel = getattr(self.kernels, name)
        if name not in self._warm:  # one launch whose threads all return: numba-cuda compiles it here
            t = time.perf_counter()
            kernel[1, 1](0, *args)
            self.synchronize()
            self.timer.add("jit", t)
            self._warm.add(name)
        t = time.perf_counter()
        launch(kernel, n, *args)
        self.synchronize()
        self.timer.add(key, t)

    def synchronize(self) -> None:
        if self.backend == "cupy":
            from numba import cuda

            cuda.synchronize()

    def points(self, batch: PointBatch) -> tuple[object, object, object]:
        """The (device) batch's points and weights in the working precision, and its offsets, on the device.

        The float64 points stay as ``self.x64``: the coefficients are evaluated there (as on the host).
        """
        dtype = self.plan.dtype
        self.x64 = batch.x
        X = self.x64 if np.dtype(dtype) == np.float64 else self.x64.astype(dtype)
        W = batch.weight if np.dtype(dtype) == np.float64 else batch.weight.astype(dtype)
        return X, W, self.dev(batch.offsets)

    def point_normals(self, faces_dev, pts) -> object:
        """The unit normal of each point's face (float64, on the device): face ``faces_dev[i]`` owns points
        ``pts[i]:pts[i+1]``."""
        xp = self.xp
        n_points = int(pts[-1])
        owner = xp.searchsorted(pts, xp.arange(n_points, dtype=np.int64), side="right") - 1
        return self.face_normal64[faces_dev[owner]]

    def face_points(self, faces: np.ndarray) -> tuple[PointBatch, tuple]:
        t = time.perf_counter()
        faces_dev = self.dev(faces)
        batch = simplex_points_on(self.xp, self.mesh_points, self.face_vertices[faces_dev],
                                  self.face_measure[faces_dev], self.plan.face_degrees(faces))
        device = self.points(batch)
        self.timer.add("quadrature_points", t)
        return batch, device

    def report(self, stage: str, done: int, total: int) -> None:
        if self.progress is not None:
            self.progress(stage, done, total)


# ---------------------------------------------------------------------------
# the passes


def volume_pass(ctx: DeviceContext) -> None:
    """Volume terms and load of every chunk's elements."""
    plan, timer = ctx.plan, ctx.timer
    mesh = plan.mesh
    element_offsets = mesh.element_offsets
    tables = (ctx.lo, ctx.hi, ctx.degree, ctx.nbasis, *ctx.csr, ctx.dof_offsets, ctx.first_row, ctx.data, ctx.rhs)
    offsets_dev = ctx.dev(element_offsets) if plan.approach == "2" else ctx.dev(mesh.simplex_element)
    for ci, (e_lo, e_hi) in enumerate(plan.chunks):
        t = time.perf_counter()
        s_lo, s_hi = int(element_offsets[e_lo]), int(element_offsets[e_hi])
        q = plan.q_uniform if plan.q_uniform is not None else np.repeat(
            plan.q_element[e_lo:e_hi], np.diff(element_offsets[e_lo:e_hi + 1]))
        batch = simplex_points_on(ctx.xp, ctx.mesh_points, ctx.simplices[s_lo:s_hi], ctx.simplex_volume[s_lo:s_hi], q)
        X, W, pts = ctx.points(batch)
        t = timer.add("quadrature_points", t)
        coef = ctx.values.volume(ctx.x64, want_load=True)
        timer.add("coefficients", t)
        if plan.approach == "2":  # thread per element: its sub-simplices in order
            ctx.run("volume_rows", e_hi - e_lo, "element_kernel", e_lo, offsets_dev, s_lo, pts, X, W, *coef, *tables)
        else:  # thread per sub-simplex, atomic adds
            ctx.run("volume_atomic", s_hi - s_lo, "element_kernel", s_lo, offsets_dev, pts, X, W, *coef, *tables)
        ctx.report("element kernel", ci + 1, len(plan.chunks))


def interior_face_pass(ctx: DeviceContext) -> None:
    """Interior-face terms: by element rows (deterministic) or by face sides (atomic)."""
    if ctx.plan.mesh.n_interior_faces:
        (_interior_rows_pass if ctx.plan.approach == "2" else _interior_sides_pass)(ctx)


def _interior_rows_pass(ctx: DeviceContext) -> None:
    plan, timer, xp = ctx.plan, ctx.timer, ctx.xp
    mesh, pattern = plan.mesh, plan.pattern
    ie = mesh.interface_elements
    adjacency = (ctx.dev(pattern.adj_offsets), ctx.dev(pattern.adj_col), ctx.dev(plan.adj_interface),
                 ctx.dev(mesh.interface_offsets))
    tables = (ctx.normal, ctx.sigma, ctx.lo, ctx.hi, ctx.degree, ctx.nbasis, *ctx.csr, ctx.data)
    for ci, (e_lo, e_hi) in enumerate(plan.chunks):
        # every face of an interface with a side in the chunk (as passes._interior_rows_pass)
        ifs = np.flatnonzero(((ie[:, 0] >= e_lo) & (ie[:, 0] < e_hi)) | ((ie[:, 1] >= e_lo) & (ie[:, 1] < e_hi)))
        faces = expand_ranges(mesh.interface_offsets[ifs], mesh.interface_offsets[ifs + 1])
        faces_dev = ctx.dev(faces)
        ctx.face_local[faces_dev] = xp.arange(len(faces), dtype=np.int64)
        batch, (X, W, pts) = ctx.face_points(faces)
        t = time.perf_counter()
        A, B = ctx.values.interior(ctx.x64)
        timer.add("coefficients", t)
        ctx.run("interior_rows", e_hi - e_lo, "interior_kernel", e_lo, *adjacency, ctx.face_local, pts, X, W, A, B,
                *tables)
        ctx.face_local[faces_dev] = -1
        ctx.report("interior kernel", ci + 1, len(plan.chunks))


def _interior_sides_pass(ctx: DeviceContext) -> None:
    plan, timer = ctx.plan, ctx.timer
    mesh, pattern = plan.mesh, plan.pattern
    face_elements = ctx.dev(mesh.face_elements)
    tables = (ctx.normal, ctx.sigma, ctx.lo, ctx.hi, ctx.degree, ctx.nbasis, *ctx.csr, ctx.data)
    cuts = np.linspace(0, mesh.n_interior_faces, max(len(plan.chunks), 1) + 1).astype(np.int64)
    for ci, (f_lo, f_hi) in enumerate(zip(cuts[:-1], cuts[1:])):
        if f_hi == f_lo:
            continue
        faces = np.arange(f_lo, f_hi, dtype=np.int64)
        batch, (X, W, pts) = ctx.face_points(faces)
        t = time.perf_counter()
        A, B = ctx.values.interior(ctx.x64)
        timer.add("coefficients", t)
        # the adjacency entry of each side's off-diagonal block: (e1, e2) for side 0, (e2, e1) for side 1
        iface = np.searchsorted(mesh.interface_offsets, faces, side="right") - 1
        side_entry = pattern.interface_entry[ctx.dev(iface)]
        ctx.run("interior_atomic", 2 * len(faces), "interior_kernel", int(f_lo), face_elements, side_entry, pts, X, W,
                A, B, *tables)
        ctx.report("interior kernel", ci + 1, len(cuts) - 1)


def boundary_face_pass(ctx: DeviceContext, mode: int, key: str) -> None:
    """Boundary terms of one ``mode`` (``kernels.DIFFUSIVE`` or ``INFLOW``), timed as ``key``."""
    plan, timer = ctx.plan, ctx.timer
    mesh = plan.mesh
    tables = (ctx.normal, ctx.sigma, ctx.lo, ctx.hi, ctx.degree, ctx.nbasis, *ctx.csr, ctx.dof_offsets,
              ctx.first_row, ctx.data, ctx.rhs)
    where = ctx.dev(plan.boundary_offsets) if plan.approach == "2" else ctx.dev(mesh.face_elements)
    for ci, (e_lo, e_hi) in enumerate(plan.chunks):
        f0, f1 = int(plan.boundary_offsets[e_lo]), int(plan.boundary_offsets[e_hi])
        if f0 == f1:
            continue
        faces = np.arange(f0, f1, dtype=np.int64)
        batch, (X, W, pts) = ctx.face_points(faces)
        t = time.perf_counter()
        coef = ctx.values.boundary(ctx.x64, ctx.point_normals(ctx.dev(faces), pts))
        timer.add("coefficients", t)
        if plan.approach == "2":  # thread per element: its boundary faces in order
            ctx.face_local[f0:f1] = ctx.xp.arange(f1 - f0, dtype=np.int64)
            ctx.run("boundary_rows", e_hi - e_lo, key, e_lo, mode, where, ctx.face_local, pts, X, W, *coef, *tables)
            ctx.face_local[f0:f1] = -1
        else:  # thread per boundary face, atomic adds
            ctx.run("boundary_atomic", f1 - f0, key, f0, mode, where, pts, X, W, *coef, *tables)
        ctx.report(key.replace("_", " "), ci + 1, len(plan.chunks))


# ---------------------------------------------------------------------------
# the executor


def assemble_on_device(plan: AssemblyPlan, backend: str, coefficients: Coefficients, workspace: Workspace,
                       timer: Timer, progress: Callable[[str, int, int], None] | None = None,
                       to_host: bool = False, kept: dict | None = None) -> tuple[object, object]:
    """Run the plan's passes on the device; the matrix and load vector.

    With ``backend="cupy"`` the matrix is a ``cupyx.scipy.sparse.csr_matrix``
    and the load a CuPy array, or with ``to_host`` a SciPy CSR matrix (int64
    indices) and a NumPy array; under the simulator (``"cudasim"``) always
    the SciPy / NumPy pair.  ``kept``: where the plan's device tables are kept from one call to the next
    (an :class:`~polydg.assembly.Assembler`'s); default copied for this call.
    """
    ctx = DeviceContext(plan, backend, coefficients, workspace, timer, progress, kept)
    volume_pass(ctx)
    interior_face_pass(ctx)
    for mode, key in boundary_modes(plan.problem):
        boundary_face_pass(ctx, mode, key)
    t = time.perf_counter()
    pattern = plan.pattern
    shape = (pattern.n_rows, pattern.n_cols)
    if backend == "cupy" and not to_host:
        matrix, rhs = _cupy_csr(ctx.data, pattern.indices, pattern.indptr, shape), ctx.rhs
    else:
        import scipy.sparse as sp

        matrix = sp.csr_matrix(shape, dtype=plan.dtype)  # int64 indices kept, as the CPU path does
        matrix.data, matrix.indices, matrix.indptr = (bk.to_host(ctx.data), bk.to_host(pattern.indices),
                                                       bk.to_host(pattern.indptr))
        matrix.check_format(full_check=False)
        matrix.has_sorted_indices = True
        rhs = bk.to_host(ctx.rhs)
    timer.add("values", t)
    return matrix, rhs


def _cupy_csr(data, indices: np.ndarray, indptr: np.ndarray, shape: tuple[int, int]):
    """A ``cupyx.scipy.sparse.csr_matrix`` of the device values (CuPy's sparse matrices index with int32: the
    pattern's sizes were checked before any value was assembled, ``device_pattern.check_device_index_range``)."""
    import cupy
    import cupyx.scipy.sparse as csp

    return csp.csr_matrix((data, cupy.asarray(indices, dtype=cupy.int32), cupy.asarray(indptr, dtype=cupy.int32)),
                          shape=shape)
