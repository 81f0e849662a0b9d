"""The passes of an assembly on a GPU: the same plan as ``passes.py``, executed by numba-cuda kernels.

A second executor of an :class:`~polydg.assembly.plan.AssemblyPlan`: it
runs over the plan's chunks as the CPU passes do (volume, interior faces,
boundary faces of each mode) and for each chunk

1. maps the quadrature points on the device (``cuda_points.py``: the CPU's
   point map as one kernel, from the mesh's points, cells and measures
   copied once) and evaluates the problem's coefficients there
   (``coefficients.DeviceCoefficients``: the problem's callables receive the
   backend's arrays; a NumPy-only callable is detected and evaluated on the
   host, with a one-time warning);
2. hands them to the reduction's GPU executor (``reductions/``), which
   launches its kernels of ``cuda_kernels.py`` (:meth:`DeviceContext.run`).

The sparsity pattern is built on the device (``device_pattern.py``); the
plan's other tables cross to the device once, as the kernels' structures
(``arguments.plan_arguments``); per chunk, the host sends the entities'
offsets.  The CSR values and the load stay on the device until the end.
Arrays are those of the backend (:mod:`polydg.backend`): CuPy on a GPU,
NumPy under numba-cuda's simulator (the test-only backend ``"cudasim"``).
"""

from __future__ import annotations

import time
from typing import Callable

import numpy as np

from .. import backend as bk
from .arguments import Points, Values, plan_arguments
from .coefficients import Coefficients, DeviceCoefficients
from .passes import boundary_modes, contributing_boundary_faces
from .result import csr_as_given
from .plan import AssemblyPlan
from .points import PointBatch
from .timing import Timer
from .workspace import Workspace


class DeviceContext:
    """What the device passes share: the backend's arrays of the plan (``args``, the kernels' structures),
    the values being assembled, the coefficients on the device and the kernels.

    ``kept``: where the plan's device tables are kept from one call to the next (an
    :class:`~polydg.assembly.Assembler`'s, for all its assemblies): its structures and the mesh arrays
    the point maps read, copied once; each call sends only the problem's face penalties (``sigma``)
    and starts its own ``face_local`` and values."""

    def __init__(self, plan: AssemblyPlan, backend: str, coefficients: Coefficients, workspace: Workspace,
                 timer: Timer, progress: Callable[[str, int, int], None] | None = None, kept: dict | None = None):
        from .cuda_kernels import ViewCache, gpu_kernels  # imports numba.cuda: only here, on the GPU path

        self.plan, self.backend, self.workspace, self.timer = plan, backend, workspace, timer
        self.progress = progress
        self.xp = bk.array_module(backend)
        space, mesh, pattern = plan.space, plan.mesh, plan.pattern
        self.kernels = gpu_kernels(mesh.dim, int(space.max_degree), np.dtype(plan.dtype).type,
                                  getattr(space, "basis", "P"))
        t = time.perf_counter()
        dev = self.dev
        kept = {} if kept is None else kept
        made_now = not kept
        if made_now:  # what no problem changes: the structures (sigma aside) and what the point maps read
            args = plan_arguments(plan, dev, self.xp)
            kept.update(args=args,  # the coefficients' normals are float64, as on the host: the kernels' in double
                        face_normal64=args.faces.normal if plan.normal is mesh.face_normal else dev(mesh.face_normal),
                        mesh_points=dev(mesh.points), simplices=dev(mesh.simplices),
                        simplex_volume=dev(mesh.simplex_volume), face_vertices=dev(mesh.face_vertices),
                        face_measure=dev(mesh.face_measure))
        args = kept["args"]
        self.kept = kept
        self.face_local = self.xp.full(mesh.n_faces, -1, dtype=np.int64)
        sigma = args.faces.sigma if made_now else dev(plan.sigma)  # the problem's, sent by every later call
        self.args = args._replace(faces=args.faces._replace(sigma=sigma, face_local=self.face_local))
        self.data = self.xp.zeros(pattern.nnz if plan.matrix else 0, dtype=plan.dtype)  # none for the load alone
        self.rhs = self.xp.zeros(pattern.n_rows, dtype=plan.dtype)
        self.values = Values(self.data, self.rhs)
        self.face_normal64, self.mesh_points, self.simplices = kept["face_normal64"], kept["mesh_points"], kept["simplices"]
        self.simplex_volume, self.face_vertices = kept["simplex_volume"], kept["face_vertices"]
        self.face_measure = kept["face_measure"]
        self.coefficients = DeviceCoefficients(coefficients.problem, mesh.dim, plan.dtype, self.xp)
        # what every launch reads, viewed once as numba-cuda's own arrays (a launch types those faster)
        self.views = ViewCache(self.args.pattern, self.args.basis, self.args.faces, self.values, self.mesh_points,
                               self.simplices, self.simplex_volume, self.face_vertices, self.face_measure)
        timer.add("values", t)
        self._warm: set[str] = set()
        self.streamed = not bk.on_default_stream(backend)  # the caller's own stream: each launch waited for
        self.rules: dict = {}  # the reference quadrature rules on the device, by (dimension, degree)

    def mesh_table(self, name: str) -> object:
        """The mesh's array ``name`` on the device (``element_offsets``, ``simplex_element``, ...), copied once
        and kept with the plan's tables (an Assembler's, across its assemblies)."""
        key = f"mesh.{name}"
        if key not in self.kept:
            self.kept[key] = self.dev(getattr(self.plan.mesh, name))
        self.views.add(self.kept[key])
        return self.kept[key]

    def dev(self, a) -> object:
        """``a`` as an array of the backend (contiguous; int arrays int64); the pattern's arrays already are."""
        if bk.array_namespace(a) is not np:
            return a
        a = np.asarray(a)
        wide = a.astype(np.int64, copy=False) if a.dtype.kind in "iu" and a.dtype != np.int8 else a
        return bk.to_device(wide, self.backend)

    def run(self, name: str, n: int, key: str, *args) -> None:
        """Launch kernel ``name`` (of ``cuda_kernels.gpu_kernels``) on ``n`` threads, timed as ``key``."""
        self.run_kernel(getattr(self.kernels, name), name, n, key, *args)

    def run_kernel(self, kernel, name: str, n: int, key: str, *args, block: int | None = None) -> None:
        """Launch ``kernel`` on ``n`` threads (with ``block``: ``n`` blocks of ``block`` threads), timed as
        ``key``; its first launch compiles (timed as ``jit``).

        ``key``'s row holds the launch and the device work still queued before it (the stages do not wait).
        """
        from .cuda_kernels import compile_once, launch

        args = self.views(args)
        t = time.perf_counter()
        compile_once(kernel, name, args, self._warm, self.timer, self.synchronize)  # timed apart, as jit
        launch(kernel, n, *args, block=block)
        self.synchronize()
        self.timer.add(key, t)

    def launch_queued(self, kernel, name: str, n: int, *args) -> None:
        """Launch ``kernel`` on ``n`` threads and go on (the device runs it while the host prepares what
        follows; the caller's stage holds the launch); its first launch compiles (timed as ``jit``)."""
        from .cuda_kernels import compile_once, launch

        args = self.views(args)
        compile_once(kernel, name, args, self._warm, self.timer, self.synchronize)
        launch(kernel, n, *args)
        if self.streamed:  # the array code that reads its output runs on another stream
            self.synchronize()

    def synchronize(self) -> None:
        if self.backend == "cupy":
            from numba import cuda

            cuda.synchronize()

    def simplex_points(self, cells, measures, n: int, degrees, members=None, base: int = 0) -> PointBatch:
        """The quadrature points of ``n`` simplices of the mesh's ``cells`` and ``measures`` (device tables):
        ``members`` (device indices) or the range ``base:base + n``, mapped on the device
        (:func:`~polydg.assembly.cuda_points.device_simplex_points`)."""
        from .cuda_points import device_simplex_points

        return device_simplex_points(self.xp, self.launch_queued, self.mesh_points, cells, measures, n, degrees,
                                     members=members, base=base, rules=self.rules)

    def points(self, batch: PointBatch) -> Points:
        """The (device) batch's offsets, points and weights in the working precision, on the device.

        The float64 points stay as ``self.x64``: the coefficients are evaluated there (as on the host).
        """
        dtype = self.plan.dtype
        self.x64 = batch.x
        X = self.x64 if np.dtype(dtype) == np.float64 else self.x64.astype(dtype)
        W = batch.weight if np.dtype(dtype) == np.float64 else batch.weight.astype(dtype)
        offsets = batch.device_offsets if batch.device_offsets is not None else self.dev(batch.offsets)
        return Points(offsets, X, W)

    def point_normals(self, faces_dev, pts) -> object:
        """The unit normal of each point's face (float64, on the device): face ``faces_dev[i]`` owns points
        ``pts[i]:pts[i+1]``."""
        from .device_pattern import segment_owner

        return self.face_normal64[faces_dev[segment_owner(self.xp, pts, int(pts[-1]))]]

    def interface_faces(self, e_lo: int, e_hi: int) -> tuple[np.ndarray | None, object]:
        """Every face of the interfaces with a side in elements ``e_lo:e_hi``, on the device (the host's
        ``passes.chunk_interfaces`` and ``expand_ranges``, the same faces in the same order, from the
        device's pattern), numbered in ``face_local``; timed as ``indices``.  Also on the host (first of
        the pair) only where the faces' rule degrees differ (the points' offsets are made there), else
        None.  The caller resets ``face_local`` to -1 after its kernels."""
        from .device_pattern import interface_faces_on

        t = time.perf_counter()
        xp, plan = self.xp, self.plan
        faces_dev = interface_faces_on(xp, plan.pattern, plan.adj_interface, plan.mesh.interface_elements[:, 0],
                                       self.args.faces.interface_offsets, e_lo, e_hi)
        self.face_local[faces_dev] = xp.arange(len(faces_dev), dtype=np.int64)
        faces = None if plan.q_uniform is not None else bk.to_host(faces_dev)
        self.timer.add("indices", t)
        return faces, faces_dev

    def face_points(self, faces: np.ndarray | None, faces_dev=None) -> tuple[PointBatch, Points]:
        """The quadrature points of ``faces`` (on the host; ``faces_dev`` their copy on the device, if made;
        ``faces`` may be None where the plan has one rule degree)."""
        t = time.perf_counter()
        faces_dev = self.dev(faces) if faces_dev is None else faces_dev
        batch = self.simplex_points(self.face_vertices, self.face_measure, len(faces_dev),
                                    self.plan.face_degrees(faces), members=faces_dev)
        points = self.points(batch)
        self.timer.add("quadrature_points", t)
        return batch, points

    def interior_chunks(self):
        """The interior faces chunk by chunk, as the executors that take them by element chunk do (rows,
        ordered sums, blocks): for each chunk of the plan with interface faces, ``(e_lo, e_hi, faces_dev,
        points, coef)``, its faces numbered in ``face_local`` while the executor launches its kernels (reset
        to -1 when it asks for the next); progress reported per chunk."""
        chunks = self.plan.chunks
        for ci, (e_lo, e_hi) in enumerate(chunks):
            faces, faces_dev = self.interface_faces(e_lo, e_hi)
            if len(faces_dev):
                batch, points = self.face_points(faces, faces_dev)
                t = time.perf_counter()
                coef = self.coefficients.interior(self.x64)
                self.timer.add("coefficients", t)
                yield e_lo, e_hi, faces_dev, points, coef
            self.face_local[faces_dev] = -1
            self.report("interior kernel", ci + 1, len(chunks))

    def report(self, stage: str, done: int, total: int) -> None:
        if self.progress is not None:
            self.progress(stage, done, total)


# ---------------------------------------------------------------------------
# the passes: points and coefficients per chunk, the executor's kernels on them


def volume_pass(ctx: DeviceContext, passes) -> None:
    """Volume terms and load of every chunk's elements (for the load alone, only the load)."""
    plan, timer = ctx.plan, ctx.timer
    element_offsets = plan.mesh.element_offsets
    for ci, (e_lo, e_hi) in enumerate(plan.chunks):
        t = time.perf_counter()
        s_lo, s_hi = int(element_offsets[e_lo]), int(element_offsets[e_hi])
        q = plan.q_uniform if plan.q_uniform is not None else np.repeat(
            plan.q_element[e_lo:e_hi], np.diff(element_offsets[e_lo:e_hi + 1]))
        batch = ctx.simplex_points(ctx.simplices, ctx.simplex_volume, s_hi - s_lo, q, base=s_lo)
        points = ctx.points(batch)
        t = timer.add("quadrature_points", t)
        coef = ctx.coefficients.volume(ctx.x64, want_load=True, want_block=plan.matrix)
        timer.add("coefficients", t)
        passes.volume(e_lo, e_hi, s_lo, s_hi, points, coef)
        ctx.report("element kernel", ci + 1, len(plan.chunks))


def boundary_face_pass(ctx: DeviceContext, passes, mode: int, key: str) -> None:
    """Boundary terms of one ``mode`` (``kernels.DIFFUSIVE`` or ``INFLOW``), timed as ``key``, on the faces
    where they can be non-zero (``passes.contributing_boundary_faces``, as on the host); the others keep
    ``face_local`` -1 and the kernels leave them out."""
    plan, timer, mesh = ctx.plan, ctx.timer, ctx.plan.mesh
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
        t = time.perf_counter()
        faces_dev = ctx.xp.arange(f0, f1, dtype=np.int64) if contributing is None else ctx.dev(faces)
        ctx.face_local[faces_dev] = ctx.xp.arange(len(faces), dtype=np.int64)
        timer.add("indices", t)
        batch, points = ctx.face_points(faces, faces_dev)
        t = time.perf_counter()
        coef = ctx.coefficients.boundary(ctx.x64, ctx.point_normals(faces_dev, points.offsets))
        timer.add("coefficients", t)
        passes.boundary(mode, key, e_lo, e_hi, faces, points, coef)
        ctx.face_local[faces_dev] = -1
        ctx.report(key.replace("_", " "), ci + 1, len(plan.chunks))


# ---------------------------------------------------------------------------
# the executor


def assemble_on_device(plan: AssemblyPlan, executor: Callable[[DeviceContext], object], backend: str,
                       coefficients: Coefficients, workspace: Workspace, timer: Timer,
                       progress: Callable[[str, int, int], None] | None = None,
                       to_host: bool = False, kept: dict | None = None) -> tuple[object, object]:
    """Run the plan's passes on the device with a reduction's GPU ``executor``; the matrix (None for the load
    alone, a plan of ``matrix=False``) and load vector.

    With ``backend="cupy"`` the matrix is a ``cupyx.scipy.sparse.csr_matrix``
    and the load a CuPy array, or with ``to_host`` a SciPy CSR matrix (int64
    indices) and a NumPy array; under the simulator (``"cudasim"``) always
    the SciPy / NumPy pair.  ``kept``: where the plan's device tables are kept from one call to the next
    (an :class:`~polydg.assembly.Assembler`'s); default copied for this call.
    """
    ctx = DeviceContext(plan, backend, coefficients, workspace, timer, progress, kept)
    t = time.perf_counter()
    passes = executor(ctx)  # the executor's own tables, copied to the device
    timer.add("values", t)
    volume_pass(ctx, passes)
    if plan.matrix and plan.mesh.n_interior_faces:
        passes.interior_faces()
    for mode, key in boundary_modes(plan.problem, plan.matrix):
        boundary_face_pass(ctx, passes, mode, key)
    t = time.perf_counter()
    pattern = plan.pattern
    shape = (pattern.n_rows, pattern.n_cols)
    if not plan.matrix:
        matrix, rhs = None, (bk.to_host(ctx.rhs) if to_host or backend != "cupy" else ctx.rhs)
    elif backend == "cupy" and not to_host:
        matrix, rhs = _cupy_csr(ctx.data, pattern.indices, pattern.indptr, shape), ctx.rhs
    else:
        # int64 indices kept, as the CPU path does
        matrix = csr_as_given(bk.to_host(ctx.data), bk.to_host(pattern.indices), bk.to_host(pattern.indptr), shape)
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
