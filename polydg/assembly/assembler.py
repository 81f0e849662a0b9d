"""``assemble()`` and :class:`Assembler`: the IP-dG matrix and load vector of a problem on a DG space.

An assembly is a plan and three passes (docs/design.md §7)::

    DGSpace, Problem --plan_assembly--> AssemblyPlan: rows, tables, rule degrees,
                                        sparsity pattern, face penalty, chunks
                     --volume, interior-face, boundary-face passes-->
                       per chunk: quadrature points, coefficients, compiled kernels
                     --> CSR values and load --> AssemblyResult

``plan.py`` decides, ``passes.py`` executes (on the CPU; ``cuda_passes.py``
on a GPU) with the executor of the reduction that ``approach`` names
(``reductions/``), ``kernels.py`` computes: volume blocks from Legendre
moments of the coefficients (``moments.py``), face blocks with the batched
forms of ``batched.py``; ``forms.py`` holds the same mathematics one point
at a time (the GPU's form; all three are tested against one another).

The reductions (``reductions/``, one registered module each) give the same
matrix up to round-off; the default, ``"auto"``, chooses ``"2"`` on the CPU
and ``"2"`` or ``"blocks"`` on a GPU (``reductions/choice.py``):

* ``"2"``: row kernels write each block once, in a fixed order;
  bitwise reproducible for any chunk size and thread count.
* ``"atomic"``: the paper's Approach 2 as published: every sub-simplex and
  sub-face block is scatter-added into the precomputed pattern.
* ``"1"``: Approach 1, the baseline: COO triplets with duplicates, then
  SciPy's conversion to CSR (the "indices" step).

An :class:`Assembler` keeps the part of the plan that no problem changes (the layout:
rows, tables, rules, pattern, chunks; the penalty's geometric weights; the chunks'
quadrature points) for every later assembly on the same space; ``assemble()`` is
one assembler's one assembly.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Callable

import numpy as np

from .. import backend as bk
from ..errors import OptionError, ProblemWarning, warn_user
from ..problem.protocol import as_steady_problem
from ..threads import thread_count
from ..problem.data import check_data
from ..space import require_space
from .coefficients import Coefficients
from .finite import check_finite_result
from .kept_points import KeptPoints, kept_points_allowance, kept_points_bytes
from .memory import check_assembly_memory, chunk_budget_mb
from .passes import compile_boundary_choice_kernels
from .pattern import compile_pattern_kernels
from .penalty import compile_penalty_kernels, diffusion_bound, penalty_from_weights, penalty_weights
from .options import APPROACHES, PRECISIONS, AssemblyOptions, assembly_options, linearisation_options
from .plan import AssemblyPlan, layout_plan
from .result import AssemblyResult, size_record
from .points import compile_point_kernels
from .reductions import reduction
from .scope import AssemblyScope
from .timing import TIMING_KEYS, Timer
from .workspace import Workspace

__all__ = ["APPROACHES", "PRECISIONS", "TIMING_KEYS", "Assembler", "AssemblyResult", "assemble"]


# ---------------------------------------------------------------------------
# the driver


#: what a process has been told once
_SAID = {"degree 0": False}


def warn_degree_zero_diffusion(space, problem) -> None:
    """Say, once a process (a study of degrees at its first), that elements of degree 0 under a diffusion
    do not converge: their gradients vanish and the penalty alone couples them."""
    if problem.has_diffusion and space.min_degree == 0 and not _SAID["degree 0"]:
        _SAID["degree 0"] = True
        warn_user("degree 0 with a diffusion: the gradients vanish on those elements and the penalty alone "
                  "couples them, so the solution does not converge to the diffusion problem's (use degree 1 "
                  "or more where there is diffusion; degree 0 suits advection and reaction)", ProblemWarning)


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
        The default approach's load to round-off (on the CPU by the row kernels whatever the
        ``approach``, on a GPU by the approach's own kernels: the approaches' loads agree to round-off)
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
    AssemblyResult; on several MPI ranks use :func:`polydg.distributed.assemble_distributed`.
    For many problems on one space (time steps, parameter sweeps) an :class:`Assembler` keeps the
    plan: ``assemble(space, problem, options)`` is ``Assembler(space, options).assemble(problem)``.

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
    require_space(space, "assemble")
    assembler = Assembler(space, options, scope=scope, keep_points=False, **choices)
    return assembler.assemble(problem, matrix=matrix, progress=progress, workspace=workspace)


class Assembler:
    """The assemblies of many problems on one ``space``: the plan is made once, each :meth:`assemble`
    pays for the coefficients, the kernels and the zeroing of the values.

    What no problem changes is kept, made by the first assembly that needs it (whose ``timings``
    report it as ``indices`` and ``penalty``, as :func:`assemble` does): the rows, the bases' tables,
    the rule degrees (from the space's degrees and ``quadrature_extra``: no problem changes them),
    the sparsity pattern (on the GPU backend, on the device), the chunks, the penalty's geometric
    weights (sigma_F = C_sigma max_K a_K w[F, K]; a_K, the bound of the problem's diffusion over K's
    points, is evaluated per problem and timed as ``coefficients``), and on the CPU the chunks'
    quadrature points when they fit an allowance (``keep_points``: None decides by
    :func:`~polydg.assembly.kept_points.kept_points_allowance`, the memory budget and a quarter of the
    available memory; ``info["plan"]["points"]`` says ``"kept"`` or ``"recomputed"``).  A load
    alone (``matrix=False``) uses the full pattern when it is kept, else a pattern of rows only
    (kept too).  A problem whose coefficients read where their points lie (data per cell) goes to
    the sided executor on the same kept layout and weights.

    Every result is bitwise that of :func:`assemble` with the same space, problem, options and
    scope.  ``options`` (or their fields as keywords) and ``scope`` are fixed at construction: an
    Assembler is frozen; make another for other options.  :meth:`linearize` forms a nonlinear
    problem's Jacobian and residual on the same kept layout (:class:`~polydg.nonlinear.NonlinearSystem`
    holds an Assembler).

    >>> from polydg.mesh import unit_square
    >>> from polydg.partition import agglomerate
    >>> from polydg.space import DGSpace
    >>> from polydg.problem import Problem, builtin_problem
    >>> space = DGSpace(agglomerate(unit_square(8), 10), 1)
    >>> assembler = Assembler(space, approach="2")
    >>> first = assembler.assemble(builtin_problem("poisson", 2))
    >>> later = assembler.assemble(Problem("k", diffusion=lambda x: 1 + x[:, 0], source=1.0))
    >>> later.info["plan"]["made"], later.info["timings"]["indices"]
    (False, 0.0)
    >>> (later.matrix != assemble(space, Problem("k", diffusion=lambda x: 1 + x[:, 0], source=1.0)).matrix).nnz
    0
    """

    def __init__(self, space, options: AssemblyOptions | None = None, *, scope: AssemblyScope | None = None,
                 keep_points: bool | None = None, **choices):
        require_space(space, "Assembler")
        options = assembly_options(options, choices)
        scope = AssemblyScope() if scope is None else scope
        if not isinstance(scope, AssemblyScope):
            raise OptionError(f"scope must be an AssemblyScope, got {type(scope).__name__}")
        run = options.resolved().for_space(space)  # backend and approach "auto" decided; 1 refused on a GPU
        entry = reduction(run.approach)  # the approach's registered reduction: its executors
        scope.check(space.mesh, entry, scope.load_boundary_faces is None)
        run = run.replace(memory_budget_mb=chunk_budget_mb(run))  # on a GPU within its free memory too
        state = self.__dict__
        state.update(_space=space, _options=options, _run=run, _scope=scope, _reduction=entry, _keep_points=keep_points,
                     _layouts={}, _weights=None, _kept={}, _linearization=None, _workspace=Workspace(),
                     _device_tables={})

    def __setattr__(self, name, value):
        raise AttributeError(f"an Assembler is frozen: make another for other {name.lstrip('_')}")

    @property
    def space(self):
        return self._space

    @property
    def options(self) -> AssemblyOptions:
        return self._options

    @property
    def scope(self) -> AssemblyScope:
        return self._scope

    @property
    def workspace(self) -> Workspace:
        """The work arrays of its assemblies (those not given one)."""
        return self._workspace

    @property
    def weights(self) -> np.ndarray:
        """w[F, side] of :func:`~polydg.assembly.penalty.penalty_weights` (made on first use, kept)."""
        if self._weights is None:
            self.__dict__["_weights"] = penalty_weights(self._space.mesh, self._space.degree,
                                                        self._options.penalty_kind)
        return self._weights

    def layout(self, matrix: bool = True, timer: Timer | None = None) -> AssemblyPlan:
        """The kept layout (:func:`~polydg.assembly.plan.layout_plan`) of the matrix and load, or with
        ``matrix=False`` of a load alone (the full one if kept); made on first use, its time in ``timer``."""
        key = self._layout_key(matrix)
        if key not in self._layouts:
            self._layouts[key] = layout_plan(self._space, self._run, self._scope, timer=timer, matrix=key)
        return self._layouts[key]

    def _layout_key(self, matrix: bool) -> bool:
        """The layout an assembly uses: the full one for the matrix, and for a load alone when it is kept."""
        return bool(matrix) or True in self._layouts

    def _kept_points(self, layout: AssemblyPlan) -> KeptPoints | None:
        """The kept points of ``layout``'s chunks, or None where they are recomputed (see the class)."""
        key = id(layout)
        if key not in self._kept:
            keep = self._keep_points
            if keep is None:
                keep = kept_points_bytes(layout) <= kept_points_allowance(self._run.budget_mb)
            self._kept[key] = KeptPoints() if keep and not bk.is_device(self._run.backend) else None
        return self._kept[key]

    def assemble(self, problem, *, matrix: bool = True, progress: Callable[[str, int, int], None] | None = None,
                 workspace: Workspace | None = None, face_penalty: np.ndarray | None = None) -> AssemblyResult:
        """The matrix and load of ``problem`` (``matrix=False``: the load alone), as
        :func:`assemble` with this assembler's space, options and scope; ``workspace`` default the
        assembler's own.  ``face_penalty`` (sigma_F per face) is this assembly's, as a scope's would be
        (an MPI rank's, computed across ranks for each problem: :mod:`polydg.distributed`)."""
        space, options, run, scope = self._space, self._options, self._run, self._scope
        mesh = space.mesh
        if scope.load_boundary_faces is not None:
            scope.check(mesh, self._reduction, matrix)
        on_device = bk.is_device(run.backend)
        d = mesh.dim
        problem = as_steady_problem(problem, d)  # a Problem as it is; other objects adapted; dimension checked
        if matrix and not (problem.has_diffusion or problem.has_advection or problem.has_reaction):
            warn_user(f"problem {problem.name!r} has no diffusion, advection or reaction (each absent or zero): "
                      "its matrix is zero", ProblemWarning)
        if matrix:
            warn_degree_zero_diffusion(space, problem)
        made = self._layout_key(matrix) not in self._layouts
        if face_penalty is not None:
            face_penalty = np.ascontiguousarray(face_penalty, dtype=np.float64)
            if face_penalty.shape != (mesh.n_faces,):
                raise OptionError(f"face_penalty has shape {face_penalty.shape}, expected ({mesh.n_faces},) "
                                  "(one per face)")
            scope = dataclasses.replace(scope, face_penalty=face_penalty)
        if problem.located:  # coefficients that read where their points lie (data per cell): the sided executor
            from .sided import assemble_sided, check_sided

            check_sided(problem, options, scope)
            timer = Timer()
            layout = self.layout(matrix, timer)
            t = time.perf_counter()
            weights = self.weights
            timer.add("penalty", t)
            result = assemble_sided(space, problem, options, scope=scope, matrix=matrix, layout=layout,
                                    weights=weights)
            timings = result.info["timings"]  # with the kept plan's stages, made here or before
            for key in ("indices", "penalty", "jit"):
                timings[key] += timer.t[key]
            timings["total_assembly"] += timer.t["indices"] + timer.t["penalty"]
            result.info["plan"] = {"made": made, "points": "recomputed", "points_bytes": 0}
            result.info["to_device"] = bk.TransferCount().as_dict()  # the CPU's: none
            return result
        n_el = mesh.n_elements
        elements = scope.rows(n_el)
        if made:
            check_assembly_memory(space, run, elements, matrix)  # a one-line refusal of what cannot fit, before allocating
        if workspace is None:
            workspace = self._workspace  # points and coefficients of one chunk at a time, reused by the next
        timer = Timer(sync=bk.device_synchronizer(run.backend))  # a GPU's total waits for the device
        t = time.perf_counter()
        compile_pattern_kernels()
        compile_point_kernels(d)
        compile_penalty_kernels()  # both kinds: a first run must not count the penalty's JIT as assembly
        compile_boundary_choice_kernels()
        if on_device:  # the pattern's index kernel, which runs before the executor's first launch
            from .cuda_kernels import warm_pattern_indices

            warm_pattern_indices(bk.array_module(run.backend))
        timer.add("jit", t)
        jit_before_start = timer.t["jit"]
        t_all = time.perf_counter()

        with bk.counting_transfers() as sent:  # the host-to-device copies, inside the stages; reported apart
            layout = self.layout(matrix, timer)
            sigma64 = self._face_penalty(problem, scope, timer)
            plan = layout.for_problem(problem, sigma64, matrix=matrix)
            kept = None if on_device else self._kept_points(layout)
            points = "recomputed" if kept is None else "kept"  # on a device: mapped there per chunk, tables kept
            coefficients = Coefficients(problem, d, plan.dtype, thread_count(), workspace)
            # the same plan, the executor of the approach's reduction for the backend; matrix None for the load alone
            matrix, rhs = self._reduction.execute(plan, run.backend, coefficients, workspace, timer, progress,
                                                  run.to_host, kept_points=kept,
                                                  device_tables=self._device_tables.setdefault(id(layout), {}))

            if timer.sync is not None:  # the total ends when the device's last queued work has run
                timer.sync()
        tt = timer.t
        tt["total_kernels"] = tt["element_kernel"] + tt["interior_kernel"] + tt["boundary_kernel"] + tt["inflow_kernel"]
        tt["total_assembly"] = time.perf_counter() - t_all - (tt["jit"] - jit_before_start)
        info = {
            **size_record(space, plan.pattern.n_rows, elements, matrix),
            "precision": options.precision,
            "backend": run.backend,
            "device": bk.device_name(run.backend),
            "versions": bk.backend_versions(run.backend),  # CuPy, numba-cuda, CUDA: empty on the CPU
            "approach": run.approach,  # the one that ran ("auto" chooses)
            "penalty": {"constant": options.penalty, "kind": options.penalty_kind},
            "quadrature_extra": options.quadrature_extra,
            "chunks": len(plan.chunks),
            "memory_budget_mb": run.budget_mb,  # the chunks' bound: the option, else the backend's (capped on a GPU)
            "options": options.as_dict(),
            "plan": {"made": made, "points": points, "points_bytes": 0 if kept is None else kept.nbytes},
            "to_device": sent.as_dict(),  # counted within the stages' timings, not beside them
            "timings": dict(tt),
        }
        check_finite_result(space, problem, run, plan.face_penalty, matrix, rhs, elements)  # finite or refused
        return AssemblyResult(matrix, rhs, plan.face_penalty, info)

    def _face_penalty(self, problem, scope: AssemblyScope, timer: Timer) -> np.ndarray:
        """sigma_F of ``problem`` (float64, per face): the scope's, or C_sigma max_K a_K w[F, K] from the kept
        weights (timed as ``penalty``) and a_K, the problem's diffusion bound (timed as ``coefficients``);
        times the scope's ``face_penalty_scale``."""
        options, space = self._options, self._space
        t = time.perf_counter()
        if scope.face_penalty is None:
            weights = self.weights
            t = timer.add("penalty", t)
            a_bound = diffusion_bound(space.mesh, problem, space.total_degree, options.quadrature_extra)
            t = timer.add("coefficients", t)
            sigma64 = penalty_from_weights(weights, space.mesh.face_elements, a_bound, options.penalty)
        else:
            sigma64 = np.ascontiguousarray(scope.face_penalty, dtype=np.float64)
        if scope.face_penalty_scale is not None:
            sigma64 = sigma64 * scope.face_penalty_scale
        timer.add("penalty", t)
        return sigma64

    # -----------------------------------------------------------------------
    # nonlinear problems

    def linearize(self, problem, u: np.ndarray, *, newton: bool = True, want_jacobian: bool = True,
                  face_penalty: np.ndarray | None = None):
        """The Jacobian (Newton's, or Picard's with ``newton=False``) and residual of ``problem`` at the
        iterate ``u`` (a :class:`~polydg.assembly.linearized_passes.Linearization`), on the kept layout of
        approach 2 on the host (the assembler's own when its options are those) and the kept penalty
        weights, times the scope's ``face_penalty_scale``; sigma_F from a_K at the iterate unless
        ``face_penalty`` is given.  Double precision only; the options' backend runs the passes."""
        problem = as_steady_problem(problem, self._space.mesh.dim)
        check_data(problem, self._space.mesh)  # data per cell or element: one value per cell or element of this mesh
        return self.linearize_checked(problem, u, newton=newton, want_jacobian=want_jacobian,
                                      face_penalty=face_penalty)

    def linearize_checked(self, problem, u: np.ndarray, *, newton: bool = True, want_jacobian: bool = True,
                          face_penalty: np.ndarray | None = None,
                          penalty_at: Callable[[np.ndarray], np.ndarray] | None = None):
        """:meth:`linearize` of a ``problem`` already checked against the space (a Problem whose data fit);
        ``penalty_at(a_bound)`` gives sigma_F from a_K at the iterate (default: from the kept weights; an
        MPI rank's takes a_K of every element from its owner)."""
        from .linearized_passes import linearize

        u = np.asarray(u, dtype=np.float64)
        if u.shape != (self._space.n_dofs,):
            raise OptionError(f"the iterate has shape {u.shape}, expected ({self._space.n_dofs},) (one value per dof)")
        with bk.counting_transfers() as sent:  # the host-to-device copies (the first call's tables among them)
            plan, executor, weights = self.linearization()
            face_elements = self._space.mesh.face_elements
            C_sigma = self._options.penalty

            def from_weights(a_bound: np.ndarray) -> np.ndarray:
                return penalty_from_weights(weights, face_elements, a_bound, C_sigma)

            penalty_at = from_weights if penalty_at is None else penalty_at
            result = linearize(plan, problem, executor, u, penalty_at=penalty_at, newton=newton,
                               want_jacobian=want_jacobian, face_penalty=face_penalty)
        result.info["to_device"] = sent.as_dict()
        return result

    def linearization(self) -> tuple[AssemblyPlan, object, np.ndarray]:
        """What :meth:`linearize` keeps: the host plan of approach 2, the executor of the options' backend
        and the penalty weights times the scope's ``face_penalty_scale`` (made on first use)."""
        if self._linearization is None:
            options = linearisation_options(self._options.replace(approach="2")).resolved()  # rows for any approach
            if self._run.backend == "numpy" and self._run.approach == "2":
                layout = self.layout(True)
            else:
                rows = AssemblyScope(elements=self._scope.elements, column_numbering=self._scope.column_numbering)
                # a linearisation's point holds two to three times an assembly's bytes: the host's default
                # chunk, not a GPU's larger one, unless a budget was given
                layout = layout_plan(self._space, options.replace(backend="numpy", approach="2",
                                                                  memory_budget_mb=self._options.memory_budget_mb), rows)
            plan = layout.for_problem(None, np.zeros(self._space.mesh.n_faces))
            weights = self.weights
            if self._scope.face_penalty_scale is not None:
                weights = weights * self._scope.face_penalty_scale[:, None]
            if options.backend != "numpy":
                from .cuda_linearized import DeviceExecutor

                executor = DeviceExecutor(plan, options.backend)
            else:
                from .linearized_passes import HostExecutor

                executor = HostExecutor(plan)
            self.__dict__["_linearization"] = (plan, executor, weights)
        return self._linearization
