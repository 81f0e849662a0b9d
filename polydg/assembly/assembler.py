"""The assembler: sparsity pattern, kernels in memory-bounded chunks, CSR.

Data flow (DESIGN.md section 5)::

    DGSpace --sparsity_pattern--> indptr/indices, then the zeroed value array
            --diffusion_bound, face_penalty--> sigma per face
            --for each chunk of elements: quadrature points, coefficients
              (the problem's vectorised callables), compiled kernels--> data, rhs

The kernels (``kernels.py``) form volume blocks from Legendre moments of the
coefficients (``moments.py``) and face blocks with the batched forms of
``batched.py`` (a batch of points at a time, as small dot-product
contractions); ``forms.py`` holds the same mathematics one point at a time
(the GPU's form; all three are tested against one another).

Three reductions give the same matrix up to round-off:

* ``"2"`` (default): row kernels write each block once, in a fixed order;
  bitwise reproducible for any chunk size and thread count.
* ``"atomic"``: the paper's Approach 2 as published: every sub-simplex and
  sub-face block is scatter-added into the precomputed pattern.
* ``"1"``: Approach 1, the baseline: COO triplets with duplicates, then
  SciPy's conversion to CSR (the "indices" step).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import scipy.sparse as sp

from ..backend import resolve_backend
from ..basis import legendre_recurrence, multi_indices
from ..errors import OptionError
from ..quadrature import default_degree
from ..threads import run_tasks, thread_count
from . import kernels as K
from .moments import moment_tables
from .pattern import SparsityPattern, compile_pattern_kernels, sparsity_pattern
from .penalty import PENALTY_KINDS, compile_penalty_kernels, diffusion_bound, face_penalty
from .points import PointBatch, compile_point_kernels, point_counts, simplex_points
from .workspace import Workspace

APPROACHES = ("2", "atomic", "1")
PRECISIONS = {"double": np.float64, "single": np.float32}
TIMING_KEYS = ("element_kernel", "interior_kernel", "boundary_kernel", "inflow_kernel",
               "total_kernels", "indices", "values", "quadrature_points", "coefficients", "penalty", "total_assembly", "jit")

#: bytes of working memory per quadrature point (points, weights, normals,
#: coefficients and the temporaries of their evaluation), used to size chunks
_BYTES_PER_POINT = 8 * 48


@dataclass
class AssemblyResult:
    """What :func:`assemble` returns.

    matrix : scipy.sparse.csr_matrix of the assembled rows (int64 indices)
    rhs : the load vector of those rows
    face_penalty : sigma_F per face of the mesh (float64)
    info : sizes (dofs, nnz, elements, ...), options, and ``timings`` in
        seconds: element_kernel, interior_kernel, boundary_kernel,
        inflow_kernel, total_kernels, indices, penalty, total_assembly, and
        jit (compilation or cache loading, reported apart, not in the total)
    """

    matrix: sp.csr_matrix
    rhs: np.ndarray
    face_penalty: np.ndarray
    info: dict = field(default_factory=dict)


# ---------------------------------------------------------------------------
# coefficient batches


#: points per piece of a coefficient evaluation (see :class:`_Coefficients`)
COEFFICIENT_PIECE = 131_072


class _Coefficients:
    """The problem's coefficients at a batch of points, as kernel-ready arrays.

    Missing coefficients are a single zero row; constant ones a single row.
    A large batch is evaluated in pieces of :data:`COEFFICIENT_PIECE` points,
    every coefficient of a piece before the next piece, so that the piece's
    points are read from memory once and stay in the core's cache for the
    others (b, c and f of 2M points at 2D p = 1, 2 threads: 14.5 -> 12.2 ms).  Each
    value is written into the kernel's array (a ``workspace`` buffer named
    after the coefficient, when given) by several threads (NumPy's ufuncs
    release the GIL).  Measured on paper-3d, 2 threads, against two whole
    halves copied afterwards: 6M volume points 0.15 -> 0.11 s, 5M face
    points 0.048 -> 0.024 s (pieces of 16k points: 0.155 / 0.040 s; 128k
    best; 256k no better).  Coefficient callables must therefore be pure
    functions of their arguments, as the Problem contract asks; ``threads=1``
    evaluates the pieces in order on the calling thread.
    """

    def __init__(self, problem, d: int, dtype, threads: int, workspace: Workspace | None = None):
        self.problem, self.d, self.dtype, self.threads = problem, d, dtype, threads
        self.workspace = workspace

    def _eval(self, methods: dict[str, Callable], x: np.ndarray) -> dict[str, np.ndarray]:
        """``{name: method(x)}`` cast to the working precision, piece by piece for large batches.

        The pieces are tasks of :func:`~polydg.threads.run_tasks` on
        ``threads`` threads; a piece's ProblemError is re-raised after all
        threads have stopped.
        """
        n = len(x)
        out = {name: np.ascontiguousarray(method(x), dtype=self.dtype)
               for name, method in methods.items() if self.problem.is_constant(name) or n <= COEFFICIENT_PIECE}
        pieces = {name: method for name, method in methods.items() if name not in out}
        if not pieces:
            return out
        for name, method in pieces.items():
            shape = (n,) + method(x[:1]).shape[1:]  # the value shape per point, from one point
            out[name] = np.empty(shape, self.dtype) if self.workspace is None else self.workspace.take(
                name, shape, self.dtype)
        cuts = list(range(0, n, COEFFICIENT_PIECE)) + [n]

        def piece(k: int) -> None:
            lo, hi = cuts[k], cuts[k + 1]
            for name, method in pieces.items():
                out[name][lo:hi] = method(x[lo:hi])

        run_tasks(piece, len(cuts) - 1, self.threads)
        return out

    def _A_B(self) -> dict[str, Callable]:
        """The callables of A and b, for the coefficients the problem has."""
        p = self.problem
        methods = {}
        if p.has_diffusion:
            methods["diffusion"] = p.diffusion_at
        if p.has_advection:
            methods["advection"] = p.advection_at
        return methods

    def _zero(self, *shape) -> np.ndarray:
        return np.zeros((1,) + shape, self.dtype)

    def volume(self, x: np.ndarray, want_load: bool):
        p, d = self.problem, self.d
        methods = self._A_B()
        if p.reaction is not None:
            methods["reaction"] = p.reaction_at
        if want_load and p.source is not None:
            methods["source"] = p.source_at
        v = self._eval(methods, x)
        return (v.get("diffusion", self._zero(d, d)), v.get("advection", self._zero(d)),
                v.get("reaction", self._zero()), v.get("source", self._zero()))

    def interior(self, x: np.ndarray):
        d = self.d
        v = self._eval(self._A_B(), x)
        return v.get("diffusion", self._zero(d, d)), v.get("advection", self._zero(d))

    def boundary(self, x: np.ndarray, normals: np.ndarray):
        p, d = self.problem, self.d
        methods = self._A_B()
        if p.dirichlet is not None:
            methods["dirichlet"] = p.dirichlet_at
        v = self._eval(methods, x)
        if p.is_neumann is not None and p.has_diffusion:
            NEU = np.ascontiguousarray(p.neumann_mask(x, normals), dtype=np.int8)
            GN = (np.ascontiguousarray(p.neumann_at(x, normals), dtype=self.dtype)
                  if (p.neumann is not None and NEU.any()) else self._zero())
        else:
            NEU, GN = np.zeros(1, dtype=np.int8), self._zero()
        return (v.get("diffusion", self._zero(d, d)), v.get("advection", self._zero(d)),
                v.get("dirichlet", self._zero()), GN, NEU)


# ---------------------------------------------------------------------------
# chunking


def element_chunks(mesh, element_rule: np.ndarray, face_rule: np.ndarray, memory_budget_mb: float,
                   elements: np.ndarray) -> list[tuple[int, int]]:
    """Split the contiguous element range into chunks whose quadrature points fit the budget.

    ``element_rule`` and ``face_rule`` are the rules' exactness degrees per
    element and per face (:func:`~polydg.quadrature.default_degree`, :func:`_face_degree`).
    """
    e_lo, e_hi = int(elements[0]), int(elements[-1]) + 1
    d = mesh.dim
    # every sub-simplex of an element has the element's rule: counted per element, not per sub-simplex
    per_element = point_counts(d, element_rule[e_lo:e_hi]) * np.diff(mesh.element_offsets[e_lo:e_hi + 1])
    # faces: each face's points counted for both of its elements (an upper bound)
    fe = mesh.face_elements
    per_face = point_counts(d - 1, face_rule)
    face_load = np.bincount(fe[:, 0], per_face, minlength=mesh.n_elements)
    inner = fe[:, 1] >= 0
    face_load += np.bincount(fe[inner, 1], per_face[inner], minlength=mesh.n_elements)
    cost = np.maximum(per_element, face_load[e_lo:e_hi].astype(np.int64))
    max_points = max(int(memory_budget_mb * 2**20 / _BYTES_PER_POINT), 1)
    cum = np.cumsum(cost)
    cuts = [0]
    while cuts[-1] < len(cost):  # one iteration per chunk
        base = cum[cuts[-1] - 1] if cuts[-1] > 0 else 0
        nxt = int(np.searchsorted(cum, base + max_points, side="right"))
        cuts.append(max(nxt, cuts[-1] + 1))
    cuts[-1] = min(cuts[-1], len(cost))
    return [(e_lo + a, e_lo + b) for a, b in zip(cuts[:-1], cuts[1:])]


class _Timer:
    def __init__(self):
        self.t = dict.fromkeys(TIMING_KEYS, 0.0)

    def add(self, key: str, start: float) -> float:
        now = time.perf_counter()
        self.t[key] += now - start
        return now


def _face_point_batch(mesh, faces: np.ndarray, degrees: int | np.ndarray,
                      workspace: Workspace | None = None) -> PointBatch:
    return simplex_points(mesh.points, mesh.face_measure[faces], degrees, cells=mesh.face_vertices[faces],
                          workspace=workspace)


def _working_precision(batch: PointBatch, dtype, workspace: Workspace) -> tuple[np.ndarray, np.ndarray]:
    """The batch's points and weights in the working precision (float32: converted into the workspace)."""
    if batch.x.dtype == dtype:
        return batch.x, batch.weight
    X, W = workspace.take("x_work", batch.x.shape, dtype), workspace.take("weight_work", batch.weight.shape, dtype)
    X[...], W[...] = batch.x, batch.weight
    return X, W


def _face_degree(degree: np.ndarray, face_elements: np.ndarray, extra: int) -> np.ndarray:
    other = np.where(face_elements[:, 1] >= 0, degree[np.maximum(face_elements[:, 1], 0)], 0)
    return default_degree(np.maximum(degree[face_elements[:, 0]], other), extra)


# ---------------------------------------------------------------------------
# the driver


def assemble(space, problem, *, approach: str = "2", precision: str = "double", penalty: float = 10.0,
             penalty_kind: str = "classical", quadrature_extra: int = 0, memory_budget_mb: float = 1024.0,
             backend: str = "numpy", elements: np.ndarray | None = None,
             progress: Callable[[str, int, int], None] | None = None,
             workspace: Workspace | None = None) -> AssemblyResult:
    """Assemble the IP-dG matrix and load vector of ``problem`` on ``space``.

    Parameters
    ----------
    space : DGSpace
    problem : Problem (see :mod:`polydg.problem`)
    approach : "2" (default, reproducible), "atomic" or "1" (baseline)
    precision : "double" or "single"
    penalty : C_sigma, the penalty constant
    penalty_kind : "classical" (default, C_sigma a p^2 / h_K) or "paper" (Appendix A,
        faces read as whole interfaces); see :mod:`polydg.assembly.penalty`
        for the convergence runs behind the default
    quadrature_extra : added to the default exactness degree 2p + 1
    memory_budget_mb : bound on the working memory of one chunk of quadrature points
    backend : "numpy" (the CPU path)
    elements : assemble only the rows of this contiguous range of elements
        (the rows of one MPI rank); default all
    progress : called as ``progress(stage, done, total)`` after each chunk
    workspace : a :class:`~polydg.assembly.Workspace` to keep the work arrays
        (quadrature points, coefficient values) in from one call to the next,
        for repeated assemblies (time steps, nonlinear iterations, timing
        runs); default a new one per call.  Only the first call that needs
        an array pays for its new memory: at 2D p = 1 (2M points, 25k dofs)
        that is about 0.005 s of a 0.05 s assembly.  The returned matrix and
        vector never share memory with it; one assembly at a time may use it.

    Returns
    -------
    AssemblyResult

    >>> from polydg.mesh import unit_square
    >>> from polydg.partition import agglomerate
    >>> from polydg.space import DGSpace
    >>> from polydg.problem import builtin_problem
    >>> space = DGSpace(agglomerate(unit_square(8), 10), 1)
    >>> result = assemble(space, builtin_problem("poisson", 2))
    >>> result.matrix.shape == (space.n_dofs, space.n_dofs)
    True
    """
    approach = str(approach)
    if approach not in APPROACHES:
        raise OptionError(f"unknown approach {approach!r}; choose one of {', '.join(APPROACHES)}")
    if precision not in PRECISIONS:
        raise OptionError(f"unknown precision {precision!r}; choose double or single")
    if penalty_kind not in PENALTY_KINDS:
        raise OptionError(f"unknown penalty kind {penalty_kind!r}; choose one of {', '.join(PENALTY_KINDS)}")
    if not penalty > 0:
        raise OptionError(f"penalty constant must be positive, got {penalty}")
    if quadrature_extra < 0:
        raise OptionError(f"quadrature extra degree must be >= 0, got {quadrature_extra}")
    if not memory_budget_mb > 0:
        raise OptionError(f"memory budget must be positive, got {memory_budget_mb} MB")
    backend = resolve_backend(backend)
    dtype = PRECISIONS[precision]
    mesh = space.mesh
    d = mesh.dim
    n_el = mesh.n_elements
    if elements is None:
        elements = np.arange(n_el, dtype=np.int64)
    elements = np.asarray(elements, dtype=np.int64)
    if len(elements) == 0 or np.any(np.diff(elements) != 1):
        raise OptionError("elements must be a non-empty contiguous increasing range")
    if approach != "2" and len(elements) != n_el:
        raise OptionError(f"approach {approach!r} assembles whole matrices only; use approach 2 for row ranges")
    if problem.dim is not None and problem.dim != d:
        raise OptionError(f"problem {problem.name!r} is {problem.dim}D but the mesh is {d}D")
    degree = space.degree
    nbasis = space.element_dofs
    table = np.ascontiguousarray(multi_indices(space.max_degree, d))
    rec = legendre_recurrence(2 * space.max_degree, dtype)  # the moments reach degree 2 pmax
    if workspace is None:
        workspace = Workspace()  # points and coefficients of one chunk at a time, reused by the next
    coeff = _Coefficients(problem, d, dtype, thread_count(), workspace)
    timer = _Timer()
    t = time.perf_counter()
    compile_pattern_kernels()
    compile_point_kernels(d)
    compile_penalty_kernels()  # both kinds: a first run must not count the penalty's JIT as assembly
    timer.add("jit", t)
    jit_before_start = timer.t["jit"]
    t_all = time.perf_counter()

    # --- pattern ("indices") -------------------------------------------------
    t = time.perf_counter()
    pattern = sparsity_pattern(mesh, space.dof_offsets, elements)
    t = timer.add("indices", t)
    # the value array (Approach 1 builds its own from the COO triplets)
    data = pattern.zeroed_values(dtype) if approach != "1" else np.zeros(0, dtype=dtype)
    t = timer.add("values", t)
    adj_interface = np.full(len(pattern.adj_col), -1, dtype=np.int64)
    adj_interface[pattern.interface_entry[:, 0]] = np.arange(mesh.n_interfaces)
    adj_interface[pattern.interface_entry[:, 1]] = np.arange(mesh.n_interfaces)

    # --- penalty ----------------------------------------------------------------
    a_bound = diffusion_bound(mesh, problem, degree, quadrature_extra)
    sigma64 = face_penalty(mesh, degree, a_bound, C_sigma=penalty, kind=penalty_kind)
    sigma = sigma64.astype(dtype)
    t = timer.add("penalty", t)

    rhs = np.zeros(pattern.n_rows, dtype=dtype)
    lo = np.ascontiguousarray(mesh.bbox_min, dtype=dtype)
    hi = np.ascontiguousarray(mesh.bbox_max, dtype=dtype)
    normal = np.ascontiguousarray(mesh.face_normal, dtype=dtype)
    n_int = mesh.n_interior_faces
    b_el = mesh.face_elements[n_int:, 0]
    boundary_offsets = n_int + np.searchsorted(b_el, np.arange(n_el + 1)).astype(np.int64)
    # the rules' degrees: one int when the space has one degree (no per-entity arrays to count)
    q_element = default_degree(degree, quadrature_extra)
    q_uniform = default_degree(space.max_degree, quadrature_extra) if space.min_degree == space.max_degree else None
    face_q = _face_degree(degree, mesh.face_elements, quadrature_extra)

    def face_degrees(faces: np.ndarray) -> int | np.ndarray:
        return q_uniform if q_uniform is not None else face_q[faces]

    face_local = np.full(mesh.n_faces, -1, dtype=np.int64)
    chunks = element_chunks(mesh, q_element, face_q, memory_budget_mb, elements)
    coo: list[tuple[np.ndarray, ...]] = []  # Approach 1 triplets
    compiled: set[str] = set()

    def warm(name: str, call: Callable[[], None]) -> None:
        # run the kernel once on an empty range: compiles (or loads from the
        # cache) the exact specialisation, so JIT time is reported apart
        if name not in compiled:
            s = time.perf_counter()
            call()
            timer.add("jit", s)
            compiled.add(name)

    def report(stage: str, done: int) -> None:
        if progress is not None:
            progress(stage, done, len(chunks))

    # --- element kernel -------------------------------------------------------
    for ci, (e_lo, e_hi) in enumerate(chunks):
        t = time.perf_counter()
        s_lo, s_hi = int(mesh.element_offsets[e_lo]), int(mesh.element_offsets[e_hi])
        q = q_uniform if q_uniform is not None else np.repeat(
            q_element[e_lo:e_hi], np.diff(mesh.element_offsets[e_lo:e_hi + 1]))
        batch = simplex_points(mesh.points, mesh.simplex_volume[s_lo:s_hi], q, cells=mesh.simplices[s_lo:s_hi],
                               workspace=workspace)
        X, W = _working_precision(batch, dtype, workspace)
        t = timer.add("quadrature_points", t)
        A, B, C, F = coeff.volume(batch.x, want_load=True)
        t = timer.add("coefficients", t)
        if approach == "2":
            args = (mesh.element_offsets, s_lo, batch.offsets, X, W, A, B, C, F, lo, hi, degree, nbasis, table, rec,
                    pattern.row_base, pattern.row_width, pattern.block_start, pattern.diag_entry,
                    space.dof_offsets, pattern.first_row, True, *moment_tables(space.max_degree, d, dtype), data, rhs)
            warm("element", lambda: K.element_rows(e_lo, e_lo, *args))
            t = time.perf_counter()
            K.element_rows(e_lo, e_hi, *args)
            timer.add("element_kernel", t)
        else:
            se = mesh.simplex_element[s_lo:s_hi]
            sizes = nbasis[se] ** 2
            vals_off = np.r_[0, np.cumsum(sizes)].astype(np.int64)
            load_off = np.r_[0, np.cumsum(nbasis[se])].astype(np.int64)
            vals = np.empty(int(vals_off[-1]), dtype=dtype)
            loads = np.empty(int(load_off[-1]), dtype=dtype)
            args = (mesh.simplex_element, batch.offsets, X, W, A, B, C, F, lo, hi, degree, nbasis, table, rec, True,
                    *moment_tables(space.max_degree, d, dtype), vals, vals_off, loads, load_off)
            warm("simplex", lambda: K.simplex_blocks(s_lo, s_lo, *args))
            t = time.perf_counter()
            K.simplex_blocks(s_lo, s_hi, *args)
            t = timer.add("element_kernel", t)
            _reduce_entity_blocks(approach, se, pattern.diag_entry[se], vals_off[:-1], vals, pattern, space,
                                  data, coo, timer)
            t = time.perf_counter()
            K.scatter_add_loads(se, load_off[:-1], loads, space.dof_offsets, nbasis, pattern.first_row, rhs)
            timer.add("element_kernel", t)
        report("element kernel", ci + 1)

    # --- interior-face kernel -----------------------------------------------------
    if n_int:
        if approach == "2":
            for ci, (e_lo, e_hi) in enumerate(chunks):
                ie = mesh.interface_elements
                ifs = np.flatnonzero(((ie[:, 0] >= e_lo) & (ie[:, 0] < e_hi)) | ((ie[:, 1] >= e_lo) & (ie[:, 1] < e_hi)))
                faces = _expand_ranges(mesh.interface_offsets[ifs], mesh.interface_offsets[ifs + 1])
                face_local[faces] = np.arange(len(faces))
                t = time.perf_counter()
                batch = _face_point_batch(mesh, faces, face_degrees(faces), workspace)
                X, W = _working_precision(batch, dtype, workspace)
                t = timer.add("quadrature_points", t)
                A, B = coeff.interior(batch.x)
                timer.add("coefficients", t)
                args = (pattern.adj_offsets, pattern.adj_col, adj_interface, mesh.interface_offsets, face_local,
                        batch.offsets, X, W, A, B, normal, sigma, lo, hi, degree, nbasis, table, rec,
                        pattern.row_base, pattern.row_width, pattern.block_start, pattern.diag_entry, data)
                warm("interior", lambda: K.interior_rows(e_lo, e_lo, *args))
                t = time.perf_counter()
                K.interior_rows(e_lo, e_hi, *args)
                timer.add("interior_kernel", t)
                face_local[faces] = -1
                report("interior kernel", ci + 1)
        else:
            for f_lo, f_hi in _face_chunks(n_int, len(chunks)):
                faces = np.arange(f_lo, f_hi, dtype=np.int64)
                face_local[faces] = np.arange(len(faces))
                t = time.perf_counter()
                batch = _face_point_batch(mesh, faces, face_degrees(faces), workspace)
                X, W = _working_precision(batch, dtype, workspace)
                t = timer.add("quadrature_points", t)
                A, B = coeff.interior(batch.x)
                timer.add("coefficients", t)
                e1, e2 = mesh.face_elements[faces, 0], mesh.face_elements[faces, 1]
                n1, n2 = nbasis[e1], nbasis[e2]
                per_face = n1 * n1 + n1 * n2 + n2 * n2 + n2 * n1
                vals_off = np.r_[0, np.cumsum(per_face)].astype(np.int64)
                vals = np.empty(int(vals_off[-1]), dtype=dtype)
                args = (mesh.face_elements, face_local, batch.offsets, X, W, A, B, normal, sigma, lo, hi, degree,
                        nbasis, table, rec, vals, vals_off)
                warm("interior-entity", lambda: K.interior_face_blocks(faces[:0], *args))
                t = time.perf_counter()
                K.interior_face_blocks(faces, *args)
                timer.add("interior_kernel", t)
                iface = np.searchsorted(mesh.interface_offsets, faces, side="right") - 1
                e12, e21 = pattern.interface_entry[iface, 0], pattern.interface_entry[iface, 1]
                o = vals_off[:-1]
                rows = np.stack([e1, e1, e2, e2], 1).ravel()
                entries = np.stack([pattern.diag_entry[e1], e12, pattern.diag_entry[e2], e21], 1).ravel()
                offs = np.stack([o, o + n1 * n1, o + n1 * n1 + n1 * n2, o + n1 * n1 + n1 * n2 + n2 * n2], 1).ravel()
                _reduce_entity_blocks(approach, rows, entries, offs, vals, pattern, space, data, coo, timer,
                                      "interior_kernel")
                face_local[faces] = -1

    # --- boundary kernels (diffusive: Dirichlet/Neumann; inflow: upwind) ------------
    passes = []
    if problem.has_diffusion:
        passes.append((K.DIFFUSIVE, "boundary_kernel"))
    if problem.has_advection:
        passes.append((K.INFLOW, "inflow_kernel"))
    for mode, key in passes:
        for ci, (e_lo, e_hi) in enumerate(chunks):
            f0, f1 = int(boundary_offsets[e_lo]), int(boundary_offsets[e_hi])
            if f0 == f1:
                continue
            faces = np.arange(f0, f1, dtype=np.int64)
            face_local[faces] = np.arange(len(faces))
            t = time.perf_counter()
            batch = _face_point_batch(mesh, faces, face_degrees(faces), workspace)
            X, W = _working_precision(batch, dtype, workspace)
            normals = np.repeat(mesh.face_normal[faces], np.diff(batch.offsets), axis=0)
            t = timer.add("quadrature_points", t)
            A, B, GD, GN, NEU = coeff.boundary(batch.x, normals)
            timer.add("coefficients", t)
            if approach == "2":
                args = (boundary_offsets, face_local, batch.offsets, X, W, A, B, GD, GN, NEU, normal, sigma, lo, hi,
                        degree, nbasis, table, rec, pattern.row_base, pattern.row_width, pattern.block_start,
                        pattern.diag_entry, space.dof_offsets, pattern.first_row, data, rhs)
                warm(f"boundary{mode}", lambda: K.boundary_rows(mode, e_lo, e_lo, *args))
                t = time.perf_counter()
                K.boundary_rows(mode, e_lo, e_hi, *args)
                timer.add(key, t)
            else:
                be = mesh.face_elements[faces, 0]
                vals_off = np.r_[0, np.cumsum(nbasis[be] ** 2)].astype(np.int64)
                load_off = np.r_[0, np.cumsum(nbasis[be])].astype(np.int64)
                vals = np.empty(int(vals_off[-1]), dtype=dtype)
                loads = np.empty(int(load_off[-1]), dtype=dtype)
                args = (mesh.face_elements, face_local, batch.offsets, X, W, A, B, GD, GN, NEU, normal, sigma,
                        lo, hi, degree, nbasis, table, rec, vals, vals_off, loads, load_off)
                warm(f"boundary-entity{mode}", lambda: K.boundary_face_blocks(mode, faces[:0], *args))
                t = time.perf_counter()
                K.boundary_face_blocks(mode, faces, *args)
                K.scatter_add_loads(be, load_off[:-1], loads, space.dof_offsets, nbasis, pattern.first_row, rhs)
                timer.add(key, t)
                _reduce_entity_blocks(approach, be, pattern.diag_entry[be], vals_off[:-1], vals, pattern, space,
                                      data, coo, timer, key)
            face_local[faces] = -1
            report(key.replace("_", " "), ci + 1)

    # --- the CSR matrix -------------------------------------------------------------
    shape = (pattern.n_rows, pattern.n_cols)
    if approach == "1":
        t = time.perf_counter()
        rows = np.concatenate([c[0] for c in coo])
        cols = np.concatenate([c[1] for c in coo])
        vals = np.concatenate([c[2] for c in coo])
        matrix = sp.coo_matrix((vals, (rows, cols)), shape=shape).tocsr()
        matrix.sum_duplicates()
        matrix.indices = matrix.indices.astype(np.int64)
        matrix.indptr = matrix.indptr.astype(np.int64)
        timer.add("indices", t)
    else:
        # the arrays as they are: SciPy's constructor would first convert the
        # int64 indices to int32 where they fit (an nnz-sized copy, 0.1-0.3 s
        # at a million dofs), and polydg promises int64
        matrix = sp.csr_matrix(shape, dtype=dtype)
        matrix.data, matrix.indices, matrix.indptr = data, pattern.indices, pattern.indptr
        matrix.check_format(full_check=False)
        matrix.has_sorted_indices = True

    tt = timer.t
    tt["total_kernels"] = tt["element_kernel"] + tt["interior_kernel"] + tt["boundary_kernel"] + tt["inflow_kernel"]
    tt["total_assembly"] = time.perf_counter() - t_all - (tt["jit"] - jit_before_start)
    info = {
        "dimension": d,
        "elements": n_el,
        "rows_elements": [int(elements[0]), int(elements[-1]) + 1],
        "sub_elements": mesh.n_simplices,
        "interior_faces": mesh.n_interior_faces,
        "interfaces": mesh.n_interfaces,
        "boundary_faces": mesh.n_boundary_faces,
        "dofs": space.n_dofs,
        "rows": pattern.n_rows,
        "nnz": int(matrix.nnz),
        "degree": {"min": space.min_degree, "max": space.max_degree},
        "precision": precision,
        "backend": backend,
        "approach": approach,
        "penalty": {"constant": penalty, "kind": penalty_kind},
        "quadrature_extra": quadrature_extra,
        "chunks": len(chunks),
        "timings": dict(tt),
    }
    return AssemblyResult(matrix, rhs, sigma64, info)


def _expand_ranges(starts: np.ndarray, stops: np.ndarray) -> np.ndarray:
    """Concatenate arange(starts[i], stops[i]) for all i, vectorised."""
    lengths = stops - starts
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    offsets = np.cumsum(lengths) - lengths
    return (np.repeat(starts - offsets, lengths) + np.arange(total)).astype(np.int64)


def _face_chunks(n_faces: int, n_chunks: int) -> list[tuple[int, int]]:
    cuts = np.linspace(0, n_faces, max(n_chunks, 1) + 1).astype(np.int64)
    return [(int(a), int(b)) for a, b in zip(cuts[:-1], cuts[1:]) if b > a]


def _reduce_entity_blocks(approach, rows, entries, offsets, vals, pattern: SparsityPattern, space, data, coo,
                          timer: _Timer, key: str = "element_kernel") -> None:
    """Scatter-add entity blocks into ``data`` (atomic) or keep their COO triplets (Approach 1)."""
    t = time.perf_counter()
    rows = np.ascontiguousarray(rows, dtype=np.int64)
    entries = np.ascontiguousarray(entries, dtype=np.int64)
    offsets = np.ascontiguousarray(offsets, dtype=np.int64)
    if approach == "atomic":
        K.scatter_add_blocks(rows, entries, offsets, vals, pattern.adj_col, space.element_dofs, pattern.row_base,
                             pattern.row_width, pattern.block_start, data)
        timer.add(key, t)  # the paper's atomic writes happen inside its kernels
    else:
        r = np.empty(len(vals), dtype=np.int64)
        c = np.empty(len(vals), dtype=np.int64)
        K.coo_triplets(rows, entries, offsets, vals, pattern.adj_col, space.element_dofs, space.dof_offsets, r, c)
        coo.append((r, c, vals))
        timer.add("indices", t)
