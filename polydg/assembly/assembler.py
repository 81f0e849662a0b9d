"""``assemble()``: the IP-dG matrix and load vector of a problem on a DG space.

An assembly is a plan and three passes (docs/design.md §7)::

    DGSpace, Problem --plan_assembly--> AssemblyPlan: rows, tables, rule degrees,
                                        sparsity pattern, face penalty, chunks
                     --volume_pass, interior_face_pass, boundary_face_pass-->
                       per chunk: quadrature points, coefficients, compiled kernels
                     --> CSR values and load --> AssemblyResult

``plan.py`` decides, ``passes.py`` executes (on the CPU), ``kernels.py``
computes: volume blocks from Legendre moments of the coefficients
(``moments.py``), face blocks with the batched forms of ``batched.py``;
``forms.py`` holds the same mathematics one point at a time (the GPU's
form; all three are tested against one another).

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
from typing import Callable


from .. import backend as bk
from ..errors import OptionError
from ..problem import as_problem
from ..threads import thread_count
from .coefficients import Coefficients
from .finite import check_finite_result
from .memory import check_assembly_memory
from .passes import PassContext, boundary_face_pass, boundary_modes, interior_face_pass, volume_pass
from .pattern import compile_pattern_kernels
from .penalty import compile_penalty_kernels
from .options import APPROACHES, PRECISIONS, AssemblyOptions, assembly_options
from .plan import plan_assembly
from .result import AssemblyResult
from .points import compile_point_kernels
from .scope import AssemblyScope
from .timing import TIMING_KEYS, Timer
from .workspace import Workspace

__all__ = ["APPROACHES", "PRECISIONS", "TIMING_KEYS", "AssemblyResult", "assemble"]




# ---------------------------------------------------------------------------
# the driver


def assemble(space, problem, options: AssemblyOptions | None = None, *, matrix: bool = True,
             progress: Callable[[str, int, int], None] | None = None, workspace: Workspace | None = None,
             scope: AssemblyScope | None = None, **choices) -> AssemblyResult:
    """Assemble the IP-dG matrix and load vector of ``problem`` on ``space``.

    Parameters
    ----------
    space : DGSpace
    problem : a Problem, a callable returning one, or any object with the contract's attributes
        (methods ``diffusion``, ``advection``, ...; see :func:`polydg.problem.as_problem`)
    options : an :class:`~polydg.assembly.AssemblyOptions` (approach, precision, penalty and its
        kind, quadrature, memory budget, backend, host copy); default the session's defaults
    choices : the same fields as keywords, over ``options`` (``assemble(space, problem,
        approach="atomic")``); an unknown name is an :class:`~polydg.errors.OptionError`
    matrix : False assembles the load vector alone (``AssemblyResult.matrix`` is None): the
        volume source term, the Dirichlet terms (penalty included), the inflow and Neumann terms,
        from the same rules and the same compiled kernels, which then skip every block (no
        interior-face pass, no CSR values, no column indices).  For repeated loads with an
        unchanged matrix: a space-time march's slabs whose coefficients do not depend on t.
        The default approach's load to round-off (by the row kernels whatever the ``approach``:
        the three approaches' loads agree to round-off); CPU backend only
    progress : called as ``progress(stage, done, total)`` after each chunk
    workspace : a :class:`~polydg.assembly.Workspace` to keep the work arrays
        (quadrature points, coefficient values) in from one call to the next,
        for repeated assemblies (time steps, nonlinear iterations, timing
        runs); default a new one per call.  Only the first call that needs
        an array pays for its new memory.  The returned matrix and
        vector never share memory with it; one assembly at a time may use it.
    scope : an :class:`~polydg.assembly.AssemblyScope`: the rows to assemble (default all) and what
        the layer above fixes (given penalties, penalty scales, column numbering, the load's
        boundary faces); built by :mod:`polydg.distributed` and :mod:`polydg.spacetime`

    Returns
    -------
    AssemblyResult; on several MPI ranks use :func:`polydg.distributed.assemble_distributed`

    >>> from polydg.mesh import unit_square
    >>> from polydg.partition import agglomerate
    >>> from polydg.space import DGSpace
    >>> from polydg.problem import builtin_problem
    >>> space = DGSpace(agglomerate(unit_square(8), 10), 1)
    >>> result = assemble(space, builtin_problem("poisson", 2))
    >>> result.matrix.shape == (space.n_dofs, space.n_dofs)
    True
    >>> assemble(space, builtin_problem("poisson", 2), precision="single").matrix.dtype
    dtype('float32')
    """
    options = assembly_options(options, choices)
    scope = AssemblyScope() if scope is None else scope
    if not isinstance(scope, AssemblyScope):
        raise OptionError(f"scope must be an AssemblyScope, got {type(scope).__name__}")
    mesh = space.mesh
    scope.check(mesh, options.approach, matrix)
    run = options.resolved()  # "auto" decided; approach 1 refused on a GPU
    on_device = bk.is_device(run.backend)
    if on_device and not matrix:
        raise OptionError("the load alone (matrix=False) is assembled on the CPU (backend numpy) for now")
    if run.backend == "cupy":  # a chunk's points and coefficients must also fit the device's free memory
        run = run.replace(memory_budget_mb=min(run.memory_budget_mb, bk.free_memory_bytes("cupy") / 2**20 / 4))
    d = mesh.dim
    problem = as_problem(problem, d)  # a Problem as it is; other objects adapted; dimension checked
    if problem.located:  # coefficients that read where their points lie (data per cell): the sided executor
        from .sided import assemble_sided

        return assemble_sided(space, problem, options, scope=scope, matrix=matrix)
    n_el = mesh.n_elements
    elements = scope.rows(n_el)
    check_assembly_memory(space, run, elements, matrix)  # a one-line refusal of what cannot fit, before allocating
    if workspace is None:
        workspace = Workspace()  # points and coefficients of one chunk at a time, reused by the next
    timer = Timer()
    t = time.perf_counter()
    compile_pattern_kernels()
    compile_point_kernels(d)
    compile_penalty_kernels()  # both kinds: a first run must not count the penalty's JIT as assembly
    if on_device:  # the pattern's index kernel, which runs before the executor's first launch
        from .cuda_kernels import warm_pattern_indices

        warm_pattern_indices(bk.array_module(run.backend))
    timer.add("jit", t)
    jit_before_start = timer.t["jit"]
    t_all = time.perf_counter()

    plan = plan_assembly(space, problem, run, scope, timer=timer, matrix=matrix)
    coefficients = Coefficients(problem, d, plan.dtype, thread_count(), workspace)
    if on_device:  # the same plan, a second executor
        from .cuda_passes import assemble_on_device

        matrix, rhs = assemble_on_device(plan, run.backend, coefficients, workspace, timer, progress, run.to_host)
    else:
        ctx = PassContext(plan, coefficients, workspace, timer, progress)
        volume_pass(plan, ctx)
        interior_face_pass(plan, ctx)
        for mode, key in boundary_modes(problem, matrix):
            boundary_face_pass(plan, ctx, mode, key)
        matrix, rhs = ctx.matrix(), ctx.rhs  # matrix None for the load alone

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
        "precision": options.precision,
        "backend": run.backend,
        "device": bk.device_name(run.backend),
        "versions": bk.backend_versions(run.backend),  # CuPy, numba-cuda, CUDA: empty on the CPU
        "approach": options.approach,
        "penalty": {"constant": options.penalty, "kind": options.penalty_kind},
        "quadrature_extra": options.quadrature_extra,
        "chunks": len(plan.chunks),
        "options": options.as_dict(),
        "timings": dict(tt),
    }
    check_finite_result(space, problem, run, plan.face_penalty, matrix, rhs, elements)  # finite or refused
    return AssemblyResult(matrix, rhs, plan.face_penalty, info)
