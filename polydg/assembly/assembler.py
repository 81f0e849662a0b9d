"""``assemble()``: the IP-dG matrix and load vector of a problem on a DG space.

An assembly is a plan and three passes (DESIGN.md section 5)::

    DGSpace, Problem --plan_assembly--> AssemblyPlan: rows, tables, rule degrees,
                                        sparsity pattern, face penalty, chunks
                     --volume, interior-face, boundary-face passes-->
                       per chunk: quadrature points, coefficients, compiled kernels
                     --> CSR values and load --> AssemblyResult

``plan.py`` decides, ``passes.py`` executes (on the CPU; ``cuda_passes.py``
on a GPU) with the executor of the reduction that ``approach`` names
(``reductions/``), ``kernels.py`` computes: volume blocks from Legendre moments of the coefficients
(``moments.py``), face blocks with the batched forms of ``batched.py``;
``forms.py`` holds the same mathematics one point at a time (the GPU's
form; all three are tested against one another).

Three reductions (``reductions/``, one registered module each) give the same matrix up to round-off:

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

from .. import backend as bk
from ..errors import OptionError
from ..problem import as_problem
from ..threads import thread_count
from .coefficients import Coefficients
from .pattern import compile_pattern_kernels
from .penalty import PENALTY_KINDS, compile_penalty_kernels
from .plan import plan_assembly
from .points import compile_point_kernels
from . import reductions
from .timing import TIMING_KEYS, Timer
from .workspace import Workspace

APPROACHES = tuple(reductions.REDUCTIONS)  # "2", "atomic", "1": the registered reductions
PRECISIONS = {"double": np.float64, "single": np.float32}
__all__ = ["APPROACHES", "PRECISIONS", "TIMING_KEYS", "AssemblyResult", "assemble"]


@dataclass
class AssemblyResult:
    """What :func:`assemble` returns.

    matrix : scipy.sparse.csr_matrix of the assembled rows (int64 indices); None for the
        load alone (``assemble(..., matrix=False)``)
    rhs : the load vector of those rows
    face_penalty : sigma_F per face of the mesh (float64)
    info : sizes (dofs, nnz, elements, ...), options, and ``timings`` in
        seconds: element_kernel, interior_kernel, boundary_kernel,
        inflow_kernel, total_kernels, indices, penalty, total_assembly, and
        jit (compilation or cache loading, reported apart, not in the total)
    """

    matrix: sp.csr_matrix | None
    rhs: np.ndarray
    face_penalty: np.ndarray
    info: dict = field(default_factory=dict)


# ---------------------------------------------------------------------------
# the driver


def assemble(space, problem, *, approach: str = "2", precision: str = "double", penalty: float = 10.0,
             penalty_kind: str = "classical", quadrature_extra: int = 0, memory_budget_mb: float = 1024.0,
             backend: str = "numpy", elements: np.ndarray | None = None, face_penalty: np.ndarray | None = None,
             face_penalty_scale: np.ndarray | None = None, column_numbering: tuple | None = None,
             progress: Callable[[str, int, int], None] | None = None,
             workspace: Workspace | None = None, to_host: bool = False, comm=None,
             matrix: bool = True, load_boundary_faces: np.ndarray | None = None) -> AssemblyResult:
    """Assemble the IP-dG matrix and load vector of ``problem`` on ``space``.

    Parameters
    ----------
    space : DGSpace
    problem : a Problem, a callable returning one, or any object with the contract's attributes
        (methods ``diffusion``, ``advection``, ...; see :func:`polydg.problem.as_problem`)
    approach : "2" (default, reproducible), "atomic" or "1" (baseline)
    precision : "double" or "single"
    penalty : C_sigma, the penalty constant
    penalty_kind : "classical" (default, C_sigma a p^2 / h_K) or "paper" (Appendix A,
        faces read as whole interfaces); see :mod:`polydg.assembly.penalty`
        for the convergence runs behind the default
    quadrature_extra : added to the default exactness degree 2p + 1
    memory_budget_mb : bound on the working memory of one chunk of quadrature points
    backend : "numpy" (the CPU path), "cupy" (the GPU path: ``cuda_passes.py``, the same plan
        executed by numba-cuda kernels) or "auto" (cupy when a GPU is usable)
    elements : assemble only the rows of these elements (an increasing
        array of element ids: the rows of one MPI rank), numbered
        consecutively in that order; columns stay global.  Default all.
        The chunks cover ``elements[0]:elements[-1] + 1``, so the work is
        that of the range they span (:mod:`polydg.distributed` gives each
        rank a sub-mesh in which they span only themselves and their halo).
    face_penalty : sigma_F per face of the mesh, instead of computing it from
        ``penalty`` and ``penalty_kind`` (a rank's sub-mesh lacks the
        neighbours' other faces that the paper's formula reads)
    face_penalty_scale : (n_faces,) factors on the faces' penalties, default
        none (all 1).  A space-time slab with local time steps passes 0 on
        the faces between an element's steps: A = diag(a, 0) has no normal
        part there, and the dG-in-time jump is the upwind term alone
    column_numbering : ``(label, first, n)``: element e's columns are
        ``first[e]:first[e] + n_e`` of n, each row's blocks in the order of
        ``label`` (how an MPI rank writes the rank numbering's columns
        directly; :func:`~polydg.assembly.pattern.sparsity_pattern`);
        approaches 2 and atomic
    progress : called as ``progress(stage, done, total)`` after each chunk
    workspace : a :class:`~polydg.assembly.Workspace` to keep the work arrays
        (quadrature points, coefficient values) in from one call to the next,
        for repeated assemblies (time steps, nonlinear iterations, timing
        runs); default a new one per call.  Only the first call that needs
        an array pays for its new memory: at 2D p = 1 (2M points, 25k dofs)
        that is about 0.005 s of a 0.05 s assembly.  The returned matrix and
        vector never share memory with it; one assembly at a time may use it.
    to_host : with backend "cupy", return a SciPy matrix and a NumPy vector
        instead of a ``cupyx.scipy.sparse.csr_matrix`` and a CuPy array
    comm : an mpi4py communicator (any number of ranks, one included): the
        assembly is distributed over its ranks (:func:`polydg.distributed.assemble_distributed`;
        ``space`` is read on rank 0 only) and each rank gets a
        :class:`~polydg.distributed.DistributedAssembly` of its rows, whose
        ``gather()`` gives rank 0 this function's one-process result bit for bit
    matrix : False assembles the load vector alone (``AssemblyResult.matrix`` is None): the
        volume source term, the Dirichlet terms (penalty included), the inflow and Neumann terms,
        from the same rules and the same compiled kernels, which then skip every block (no
        interior-face pass, no CSR values, no column indices).  For repeated loads with an
        unchanged matrix: a space-time march's slabs whose coefficients do not depend on t.
        The default approach's load to round-off (by the row kernels whatever the ``approach``:
        the three approaches' loads agree to round-off); CPU backend only
    load_boundary_faces : with ``matrix=False``, (n_faces,) bool: the boundary faces whose
        terms the caller wants in the load (default all).  A space-time slab leaves out its
        bottom face: its inflow value is the previous slab's trace, a load of its own

    Returns
    -------
    AssemblyResult (a DistributedAssembly with ``comm``)

    >>> from polydg.mesh import unit_square
    >>> from polydg.partition import agglomerate
    >>> from polydg.space import DGSpace
    >>> from polydg.problem import builtin_problem
    >>> space = DGSpace(agglomerate(unit_square(8), 10), 1)
    >>> result = assemble(space, builtin_problem("poisson", 2))
    >>> result.matrix.shape == (space.n_dofs, space.n_dofs)
    True
    """
    if comm is not None:
        if elements is not None or face_penalty is not None:
            raise OptionError("elements and face_penalty are chosen per rank by the distributed assembly")
        from ..distributed.assembly import assemble_distributed

        return assemble_distributed(space, problem, comm, approach=approach, precision=precision, penalty=penalty,
                                    penalty_kind=penalty_kind, quadrature_extra=quadrature_extra,
                                    memory_budget_mb=memory_budget_mb, backend=backend, progress=progress,
                                    workspace=workspace, matrix=matrix)
    reduction = reductions.reduction(approach)  # the approach's entry, looked up once; OptionError if unknown
    approach = reduction.name
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
    if face_penalty_scale is not None:
        face_penalty_scale = np.asarray(face_penalty_scale, dtype=np.float64)
        if face_penalty_scale.shape != (space.mesh.n_faces,) or not (face_penalty_scale >= 0).all():
            raise OptionError(f"face_penalty_scale must be ({space.mesh.n_faces},) factors >= 0 (one per face), "
                              f"got shape {face_penalty_scale.shape}")
    backend = bk.resolve_backend(backend)
    on_device = bk.is_device(backend)
    if load_boundary_faces is not None:
        load_boundary_faces = np.asarray(load_boundary_faces, dtype=bool)
        if matrix or load_boundary_faces.shape != (space.mesh.n_faces,):
            raise OptionError(f"load_boundary_faces is for the load alone (matrix=False), one bool per face "
                              f"({space.mesh.n_faces}); got shape {load_boundary_faces.shape}")
    if on_device and not matrix:
        raise OptionError("the load alone (matrix=False) is assembled on the CPU (backend numpy) for now")
    if on_device and reduction.gpu is None:
        raise OptionError(f"approach {approach!r} runs on the CPU only; on a GPU use approach "
                          f"{' or '.join(reductions.gpu_reductions())}")
    if backend == "cupy":  # a chunk's points and coefficients must also fit the device's free memory
        memory_budget_mb = min(memory_budget_mb, bk.free_memory_bytes("cupy") / 2**20 / 4)
    dtype = PRECISIONS[precision]
    mesh = space.mesh
    d = mesh.dim
    problem = as_problem(problem, d)  # a Problem as it is; other objects adapted; dimension checked
    n_el = mesh.n_elements
    if elements is None:
        elements = np.arange(n_el, dtype=np.int64)
    elements = np.asarray(elements, dtype=np.int64)
    if elements.ndim != 1 or len(elements) == 0 or np.any(np.diff(elements) <= 0) or elements[0] < 0 \
            or elements[-1] >= n_el:
        raise OptionError(f"elements must be a non-empty increasing array of element ids in [0, {n_el})")
    if column_numbering is not None and not reduction.fills_pattern:
        raise OptionError(f"approach {approach!r} builds its own matrix: it takes no column_numbering")
    if face_penalty is not None and np.shape(face_penalty) != (mesh.n_faces,):
        raise OptionError(f"face_penalty has shape {np.shape(face_penalty)}, expected ({mesh.n_faces},) (one per face)")
    if workspace is None:
        workspace = Workspace()  # points and coefficients of one chunk at a time, reused by the next
    timer = Timer()
    t = time.perf_counter()
    compile_pattern_kernels()
    compile_point_kernels(d)
    compile_penalty_kernels()  # both kinds: a first run must not count the penalty's JIT as assembly
    if on_device:  # the pattern's index kernel, which runs before the executor's first launch
        from .cuda_kernels import warm_pattern_indices

        warm_pattern_indices(bk.array_module(backend))
    timer.add("jit", t)
    jit_before_start = timer.t["jit"]
    t_all = time.perf_counter()

    plan = plan_assembly(space, problem, approach=approach, dtype=dtype, penalty=penalty, penalty_kind=penalty_kind,
                         quadrature_extra=quadrature_extra, memory_budget_mb=memory_budget_mb, elements=elements,
                         face_penalty=face_penalty, timer=timer, face_penalty_scale=face_penalty_scale,
                         column_numbering=column_numbering, backend=backend, matrix=matrix,
                         load_boundary_faces=load_boundary_faces)
    coefficients = Coefficients(problem, d, dtype, thread_count(), workspace)
    # the same plan, the reduction's executor for the backend; matrix None for the load alone
    matrix, rhs = reduction.execute(plan, backend, coefficients, workspace, timer, progress, to_host)

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
        "rows": plan.pattern.n_rows,
        "nnz": int(matrix.nnz) if matrix is not None else 0,
        "assembled": "matrix+load" if matrix is not None else "load",
        "degree": {"min": space.min_degree, "max": space.max_degree},
        "precision": precision,
        "backend": backend,
        "device": bk.device_name(backend),
        "approach": approach,
        "penalty": {"constant": penalty, "kind": penalty_kind},
        "quadrature_extra": quadrature_extra,
        "chunks": len(plan.chunks),
        "timings": dict(tt),
    }
    return AssemblyResult(matrix, rhs, plan.face_penalty, info)
