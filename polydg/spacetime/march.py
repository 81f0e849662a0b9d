"""Time marching: dG in space and time, one slab after another (paper eqs. 2.8, 2.9).

For n = 1, ..., N the slab Omega x (t_{n-1}, t_n) is a (d+1)D polytopic mesh
(:mod:`~polydg.spacetime.slab`) carrying the steady problem with
A = diag(a, 0), b = (w, 1) (:mod:`~polydg.spacetime.problem`), assembled by
:func:`polydg.assembly.assemble`, plus the bottom load of the previous
slab's solution (:mod:`~polydg.spacetime.trace`), and solved.  The space is
P_p (total degree p in (x, t)) or PQ_p (degree p in t times total degree p
in x) on each element's box K's box x I_n.

What is reused from slab to slab:

* the slab mesh: built once per slab length and shifted in time;
* the factorisation (direct solves): kept while the matrix is unchanged.
  With constant coefficients (A, b, c and the Neumann mask not callables)
  and the same slab length it is known to be (the slab is only shifted in
  time); otherwise the new matrix is compared with the factorised one
  (same pattern, values equal to 1e-13 relative), which catches callables
  that do not depend on t;
* the matrix when A, b, c and the Neumann mask do not depend on t
  (:mod:`~polydg.spacetime.time_dependence`): a slab of the same length
  then assembles its load alone (``assemble(..., matrix=False)``: the
  source, Dirichlet and Neumann terms, no block) and keeps the matrix and
  its factorisation.  Known for constants; for callables detected per slab
  by their values at the slab's quadrature points, compared bitwise (by a
  digest) with those of the slab whose matrix is kept; or stated by the
  caller with ``coefficients_free_of_t``.  paper-2d1 (a = 1, c = 1, f and
  g_D depending on t) assembles its matrix once;
* the whole assembly (matrix and load) when nothing in it depends on t:
  slabs of equal length then differ only by a shift in time, so the slab
  is assembled once and each later slab computes only its bottom load
  (the previous slab's trace) and solves, with the kept factorisation.
  That is known when every coefficient and datum (A, b, c, f, g_D, g_N and
  the Neumann mask) is a constant, and stated by the caller with
  ``autonomous=True`` for callables free of t; ``autonomous=False`` asks
  for an assembly per slab.

``info["assembled_per_slab"]`` says what each slab assembled: "matrix+load",
"load" (the kept matrix) or "none" (the kept assembly); ``info`` counts them
as ``matrix_assemblies``, ``load_assemblies`` and ``reused_assemblies``.

What the march carries from slab to slab (the trace at the top, the
tables of the bottom load and the errors, the factorisation) is a
:class:`~polydg.spacetime.slab_state.SlabState`, in the backend's arrays:
with a GPU backend (``backend="cupy"``) the slabs' matrices, loads, bottom
trace and solves stay on the device and the last slab's solution is copied
to the host once, at the end; the matrix is kept and the load assembled alone
as on the host where the coefficients are constants or stated free of t
(callables are not fingerprinted there: see ``_KeptMatrix``).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from .. import backend as bk
from ..assembly import AssemblyOptions, AssemblyScope, Workspace, assemble
from ..assembly.memory import chunk_budget_mb
from ..assembly.options import assembly_options
from ..basis import BASES
from ..errors import OptionError
from ..mesh.polytopic import PolytopicMesh, require_polytopic
from ..mesh.quadrature_simplices import DEFAULT_QUADRATURE_SIMPLICES, quadrature_mesh
from ..problem import Problem, as_problem
from ..space import DGSpace
from .slab_state import REUSE_TOL, SlabState
from .problem import check_space_time, slab_problem
from .slab import check_local_steps, shifted_slab, slab_mesh, step_offsets
from .time_dependence import CoefficientFingerprint, load_data_constant, matrix_coefficients_constant
from .trace import time_plane_rule

#: extra quadrature degree for the initial value and the errors (non-polynomial data)
TRACE_EXTRA = 2


@dataclass
class MarchResult:
    """What :func:`march` returns.

    solution : coefficients of the last slab's solution in ``space``
    space : the last slab's DG space (its mesh is Omega x (t_{N-1}, t_N))
    time_nodes : (N + 1,) t_0 < ... < t_N
    timings : one dict per slab: the assembly's timings plus ``mesh``,
        ``trace`` (bottom load), ``solve``, ``errors``, ``slab`` (all of it)
        and ``time_dependence`` (deciding whether the matrix is kept: the
        digest of callable coefficients, 0 for constants)
    errors : ``{"l2": ||u - u_h||_{L2} at t_N, "l2_l2": ||u - u_h||_{L2(0,T;L2)}}``
        when the problem has an exact solution, else None
    info : dofs per slab, factorisations, reused assemblies, solver
    assembly : the last slab's :class:`~polydg.assembly.AssemblyResult`
        (its matrix, the load without the bottom term, sizes and options)
    """

    solution: np.ndarray
    space: DGSpace
    time_nodes: np.ndarray
    timings: list[dict] = field(default_factory=list)
    errors: dict | None = None
    info: dict = field(default_factory=dict)
    assembly: Any = None

    def __repr__(self) -> str:  # one line: the arrays, the space and the per-slab records are attributes
        nodes = self.time_nodes
        errors = "".join(f", {k} {v:.4e}" for k, v in (self.errors or {}).items())
        return (f"MarchResult({len(nodes) - 1} slabs over [{nodes[0]:g}, {nodes[-1]:g}], "
                f"{self.info.get('dofs_per_slab', len(self.solution))} dofs per slab{errors})")

    def total_timings(self) -> dict:
        """Each timing summed over the slabs."""
        keys = dict.fromkeys(k for t in self.timings for k in t)
        return {k: float(sum(t.get(k, 0.0) for t in self.timings)) for k in keys}


def uniform_time_nodes(n_slabs: int, final_time: float, start: float = 0.0) -> np.ndarray:
    """``n_slabs + 1`` equally spaced nodes from ``start`` to ``final_time``."""
    if isinstance(n_slabs, bool) or not (isinstance(n_slabs, (int, np.integer)) and n_slabs >= 1):
        raise OptionError(f"the number of time slabs must be a positive integer, got {n_slabs!r}")
    if not (isinstance(final_time, (int, float, np.integer, np.floating)) and not isinstance(final_time, bool)
            and np.isfinite(final_time) and final_time > start):
        raise OptionError(f"the final time must be a finite number greater than {start:g}, got {final_time!r}")
    return np.linspace(start, float(final_time), int(n_slabs) + 1)


def _check_nodes(time_nodes: Any) -> np.ndarray:
    nodes = np.asarray(time_nodes, dtype=np.float64).reshape(-1)
    if len(nodes) < 2 or not np.isfinite(nodes).all() or not (np.diff(nodes) > 0).all():
        raise OptionError("time nodes must be at least two finite, strictly increasing times")
    return nodes


#: what a slab assembled (``info["assembled_per_slab"]``)
MATRIX_AND_LOAD, LOAD_ONLY, NOTHING = "matrix+load", "load", "none"


class _KeptMatrix:
    """The slab matrix kept from slab to slab, and whether the next slab may keep it.

    A slab of the same length keeps it when the coefficients it reads (A, b,
    c, the Neumann mask) are free of t: constants, the caller's word
    (``free_of_t=True``), or, for callables and with ``detect``, the same
    :class:`~polydg.spacetime.time_dependence.CoefficientFingerprint` as
    the slab that assembled it.  A GPU march does not ``detect``: the
    fingerprint evaluates the callables on the host at every quadrature
    point of the slab, which costs more than the device's own assembly of
    the matrix, and a CuPy-only callable could not run there.
    """

    def __init__(self, problem: Problem, free_of_t: bool | None, quadrature_extra: int, detect: bool = True):
        self.constant = matrix_coefficients_constant(problem)
        self.free_of_t = free_of_t
        self.detect = detect
        self.fingerprint = CoefficientFingerprint(problem, quadrature_extra)
        self.assembly = None  # the AssemblyResult whose matrix is kept
        self.digest: bytes | None = None
        self._last: tuple[DGSpace, Problem, bytes] | None = None  # the slab last fingerprinted, and its digest

    def _detect(self) -> bool:
        return self.free_of_t is None and not self.constant

    def _fingerprint(self, space: DGSpace, slab: Problem) -> bytes:
        """The slab's digest, computed once: a slab that does not keep the matrix asks again in ``keep``."""
        if self._last is None or self._last[0] is not space or self._last[1] is not slab:
            self._last = (space, slab, self.fingerprint(space, slab))
        return self._last[2]

    def keeps(self, same_length: bool, space: DGSpace, slab: Problem) -> bool:
        """Whether this slab (of ``space``, problem ``slab``) keeps the matrix and assembles its load alone."""
        if self.assembly is None or not same_length or self.free_of_t is False:
            return False
        if not self._detect():
            return True
        return self.detect and self._fingerprint(space, slab) == self.digest

    def keep(self, assembly, space: DGSpace, slab: Problem) -> None:
        """Keep the matrix of ``assembly`` (this slab's full assembly)."""
        self.assembly = assembly
        self.digest = self._fingerprint(space, slab) if self._detect() and self.detect else None

    def with_load(self, load) -> Any:
        """The kept matrix with this slab's ``load`` (an AssemblyResult of ``assemble(..., matrix=False)``)."""
        kept = self.assembly
        return dataclasses.replace(load, matrix=kept.matrix, face_penalty=kept.face_penalty,
                                   info=dict(load.info, nnz=int(kept.matrix.nnz)))


def march(space_mesh: PolytopicMesh, problem: Problem | Any, degree: int | np.ndarray,
          time_nodes: Any = None, *, n_slabs: int | None = None, final_time: float | None = None,
          method: str = "direct", space_time_basis: str = "P", local_steps: int | np.ndarray | None = None,
          quadrature_simplices: str = DEFAULT_QUADRATURE_SIMPLICES, autonomous: bool | None = None,
          coefficients_free_of_t: bool | None = None, compute_errors: bool = True,
          progress: Callable[[str], None] | None = None, assembler: Callable | None = None,
          options: AssemblyOptions | None = None, nonlinear: Any = None,
          on_slab: Callable[[DGSpace, Any, float], None] | None = None, **choices: Any) -> MarchResult:
    """Solve a space-time problem slab by slab; returns a :class:`MarchResult`.

    Parameters
    ----------
    space_mesh : the 2D or 3D polytopic mesh of Omega
    problem : a space-time :class:`Problem` (``space_time=True``, with
        ``initial``; see :mod:`polydg.spacetime.problem`), or an object
        :func:`~polydg.problem.as_problem` accepts
    degree : the degree p per element (int or one per spatial element)
    time_nodes : t_0 < ... < t_N; or ``n_slabs`` and ``final_time`` (from 0).
        The march starts from the problem's ``initial`` as u(t_0), whatever t_0 is
    space_time_basis : "P" (total degree p in (x, t), the paper's reduced
        choice, the default) or "PQ" (degree p in t times total degree p in x)
    local_steps : m_K equal time steps of element K inside every slab (an
        int for all, or one per spatial element; default one): the slab's
        elements are K x I_{n,j} (:func:`~polydg.spacetime.slab.slab_mesh`),
        the faces between an element's steps carry the upwind time jump
        (their penalty is 0), and the next slab starts from each element's
        last step.  ``MarchResult.space`` is then over those elements
    quadrature_simplices : the spatial sub-triangles the prisms (and the
        bottom and top faces) are built over: "coarse" (the default) each
        polygon re-triangulated from its boundary vertices, fewer
        (:func:`~polydg.mesh.quadrature_simplices.coarse_quadrature_mesh`;
        3D meshes keep theirs), or "fine" the mesh's own
    method : "direct" (sparse LU, reused while the matrix is unchanged) or
        "iterative" (:func:`polydg.solve.solve` on every slab)
    autonomous : whether coefficients and data are free of t, so that
        equal-length slabs reuse the assembled matrix and load: None (the
        default) when every one is a constant, True on the caller's word
        (callables free of t), False never
    coefficients_free_of_t : whether A, b, c and the Neumann mask are free
        of t, so that equal-length slabs keep the matrix (and its
        factorisation) and assemble their load alone: None (the default)
        when they are constants, or, for callables, detected slab by slab
        (their values at the quadrature points of the matrix, compared
        bitwise with the kept matrix's slab; see
        :mod:`~polydg.spacetime.time_dependence`); True on the caller's
        word; False never (a matrix per slab)
    compute_errors : L2 at t_N and L2(0, T; L2) when the problem has ``exact``
    progress : called with one line per slab
    assembler : ``assembler(space, (t0, t1), options, scope=, matrix=,
        workspace=)`` returns the slab's AssemblyResult instead of
        :func:`polydg.assembly.assemble` on the slab problem
        (:class:`polydg.distributed.spacetime.SlabAssembler` assembles on
        all MPI ranks)
    nonlinear : the :class:`~polydg.nonlinear.NonlinearOptions` of each slab's Newton (or Picard)
        iteration, for a problem whose coefficients depend on u (default: Newton's defaults, each
        step's linear system solved by ``method``).  Each slab starts from the previous slab's
        solution (slabs of one length share their dofs), the first from zero; the bottom load of the
        trace enters the residual.  One process (no ``assembler``), the CPU or one device
    on_slab : called after each slab with (its space, its solution, its end time t_n): e.g. to keep
        the solution at each slab's end (:class:`polydg.output.SlabSeries`).  The solution is in the
        backend's arrays (CuPy on a GPU)
    options : the :class:`~polydg.assembly.AssemblyOptions` of every slab's
        assembly (or its fields as keywords ``choices``: penalty,
        quadrature_extra, backend, ...), every one passed to each slab as
        it is.  With a GPU backend the march's state stays on the device
        (module docstring) and ``solution`` is copied to the host once, at
        the end; with ``to_host`` too, each slab's matrix and load come to
        the host and the state stays there
    """
    options = assembly_options(options, choices)
    require_polytopic(space_mesh, "march takes the polytopic mesh of Omega")  # not a fine mesh, nor a space
    if assembler is not None and (isinstance(assembler, type) or not callable(assembler)):
        raise OptionError("assembler= is the hook by which MPI ranks assemble each slab (a callable), not an "
                          "Assembler: a march keeps its plan from slab to slab by itself")
    problem = as_problem(problem)
    check_space_time(problem)
    if method not in ("direct", "iterative"):
        raise OptionError(f"unknown solve method {method!r}; choose direct or iterative")
    if space_time_basis not in BASES:
        raise OptionError(f"unknown space-time basis {space_time_basis!r}; choose one of {', '.join(BASES)}")
    if time_nodes is None:
        if n_slabs is None or final_time is None:
            raise OptionError("give time_nodes, or n_slabs and final_time")
        time_nodes = uniform_time_nodes(n_slabs, final_time)
    elif n_slabs is not None or final_time is not None:
        raise OptionError("give time_nodes, or n_slabs and final_time, not both")
    nodes = _check_nodes(time_nodes)
    start = time.perf_counter()
    space_mesh = quadrature_mesh(space_mesh, quadrature_simplices)
    t_quadrature_mesh = time.perf_counter() - start  # counted in the first slab's mesh time
    d = space_mesh.dim
    pmax = int(np.max(degree))
    extra = options.quadrature_extra + TRACE_EXTRA
    steps = check_local_steps(local_steps, space_mesh.n_elements)
    offsets = step_offsets(steps, space_mesh.n_elements)
    if steps is not None and np.ndim(degree) != 0:  # one degree per spatial element: the same on its steps
        degree = np.repeat(np.asarray(degree), steps)
    rule = time_plane_rule(space_mesh, 2 * pmax + extra)
    # the bottom of slab n is the first step of each element, the top of slab n - 1 its last
    bottom_rule = dataclasses.replace(rule, elements=offsets[:-1][rule.elements])
    top_rule = dataclasses.replace(rule, elements=offsets[1:][rule.elements] - 1)
    penalty_scale = None  # the faces between an element's steps: no normal diffusion, so no penalty
    workspace = Workspace()
    with_errors = compute_errors and problem.exact is not None
    backend = bk.resolve_backend(options.backend)
    # the slab matrix depends on t only through A, b, c and the Neumann mask (time_dependence.py)
    kept = _KeptMatrix(problem, coefficients_free_of_t, options.quadrature_extra, detect=not bk.is_device(backend))
    if autonomous is None:  # and the load too: nothing of the slab problem depends on t
        autonomous = kept.constant and load_data_constant(problem)
    # (ranks' assemblies come to rank 0's host, and so do those with to_host)
    on_device = bk.is_device(backend) and not options.to_host and assembler is None
    state_backend = backend if on_device else "numpy"  # the budget of where the state lives
    state = SlabState(state_backend, problem, rule, bottom_rule, top_rule, offsets, pmax + 2, with_errors,
                      chunk_budget_mb(options.replace(backend=state_backend)))

    if problem.nonlinear:
        from ..nonlinear import NonlinearOptions

        if assembler is not None:
            raise OptionError("a nonlinear space-time problem runs on one process only, not yet on MPI ranks: "
                              "run it without mpiexec")
        nonlinear = nonlinear or NonlinearOptions(linear_solver=method)
        autonomous, coefficients_free_of_t = False, False  # every slab's system is its own
        iterations_per_slab: list[int] = []
    base: PolytopicMesh | None = None  # the slab mesh of the current slab length, at base_t0
    base_t0 = base_tau = 0.0
    assembled = None  # the AssemblyResult reused by autonomous problems
    previous: tuple[DGSpace, np.ndarray, float] | None = None
    timings: list[dict] = []
    l2_l2 = 0.0
    assembled_per_slab: list[str] = []
    solve_info: dict = {}
    for n in range(1, len(nodes)):
        t0, t1 = float(nodes[n - 1]), float(nodes[n])
        tau = t1 - t0
        start = time.perf_counter()
        same_length = base is not None and abs(tau - base_tau) <= 1e-12 * base_tau
        if not same_length:
            base, base_t0, base_tau = slab_mesh(space_mesh, t0, t1, steps), t0, tau
            if steps is not None:
                penalty_scale = (np.abs(base.face_normal[:, -1]) != 1.0).astype(np.float64)
        mesh = base if t0 == base_t0 else shifted_slab(base, t0 - base_t0)
        space = DGSpace(mesh, degree, space_time_basis)
        slab = slab_problem(problem, d, t0, t1)
        if not same_length:
            state.tabulate(space, t0, t1)
        t_mesh = time.perf_counter() - start + (t_quadrature_mesh if n == 1 else 0.0)

        if problem.nonlinear:
            guess = previous[1] if previous is not None and same_length else None
            u, result, stage, solve_info = _nonlinear_slab(space, slab, options, penalty_scale, state, guess,
                                                           nonlinear, progress)
            iterations_per_slab.append(solve_info["iterations"])
            what = f"{nonlinear.method}, {solve_info['iterations']} iterations"
            assembled_per_slab.append(MATRIX_AND_LOAD)
            matrix = result.matrix
            state.carry(u)
            stage["mesh"] = t_mesh
        else:
            if autonomous and assembled is not None and same_length:
                result, what = assembled, NOTHING
                stage = {"total_assembly": 0.0}
            else:
                t = time.perf_counter()
                load_only = kept.keeps(same_length, space, slab)
                t_check = time.perf_counter() - t
                result = _assemble_slab(space, slab, (t0, t1), options, load_only, kept, assembler, workspace,
                                        penalty_scale)
                what = LOAD_ONLY if load_only else MATRIX_AND_LOAD
                stage = dict(result.info["timings"], time_dependence=t_check)
                if not load_only:
                    t = time.perf_counter()
                    kept.keep(result, space, slab)
                    stage["time_dependence"] += time.perf_counter() - t
                assembled = result
            assembled_per_slab.append(what)
            matrix, rhs = result.matrix, result.rhs

            t = time.perf_counter()
            load = state.load(rhs)  # rhs + the bottom term of the carried trace (u_0 on the first slab)
            stage["trace"] = time.perf_counter() - t

            unchanged = what != MATRIX_AND_LOAD or (kept.constant and same_length)
            u, solve_info = state.solve(matrix, load, method, unchanged, kept.constant)
            state.carry(u)
            stage["solve"] = solve_info["seconds"]
            stage["mesh"] = t_mesh

        t = time.perf_counter()
        if with_errors:  # on prisms: the spatial rule times Gauss in t (exact in t to degree 2 pmax + 3)
            l2_l2 += state.error_squared_over_slab(u, t0, t1)
        stage["errors"] = time.perf_counter() - t
        # slab 1 holds the quadrature mesh made before the loop, as its mesh time does
        stage["slab"] = time.perf_counter() - start - stage.get("jit", 0.0) + (t_quadrature_mesh if n == 1 else 0.0)
        timings.append(stage)
        previous = (space, u, t1)
        if on_slab is not None:
            on_slab(space, u, t1)
        if progress is not None:
            reuse = ", factorisation reused" if solve_info.get("reused_factorisation") else ""
            progress(f"slab {n}/{len(nodes) - 1} ({t0:.4g}, {t1:.4g}): {space.n_dofs:,} dofs, "
                     f"{stage['slab']:.3f} s (assembled: {what}{reuse})")

    space, u, t_final = previous
    result_errors = None
    if with_errors:
        result_errors = {"l2": state.error_at_top(t_final), "l2_l2": float(np.sqrt(l2_l2))}
    u = bk.to_host(u)  # on a GPU the one copy of the march's state to the host
    info = {"slabs": len(nodes) - 1, "dofs_per_slab": space.n_dofs, "nnz_per_slab": int(matrix.nnz),
            "local_steps": None if steps is None else {"min": int(steps.min()), "max": int(steps.max()),
                                                       "elements_per_slab": int(offsets[-1])},
            "factorisations": state.factorisation.count,
            "assembled_per_slab": assembled_per_slab,
            "matrix_assemblies": assembled_per_slab.count(MATRIX_AND_LOAD),
            "load_assemblies": assembled_per_slab.count(LOAD_ONLY),
            "reused_assemblies": assembled_per_slab.count(NOTHING), "autonomous": bool(autonomous),
            "nonlinear_iterations_per_slab": iterations_per_slab if problem.nonlinear else None,
            "solver": {k: v for k, v in solve_info.items() if isinstance(v, (int, float, str, bool))}}
    return MarchResult(u, space, nodes, timings, result_errors, info, result)


def _nonlinear_slab(space: DGSpace, slab: Problem, options: AssemblyOptions, penalty_scale, state: SlabState,
                    guess, nonlinear, progress) -> tuple[Any, Any, dict, dict]:
    """One slab of a nonlinear problem: R(u) - (the bottom load of the carried trace) = 0 by Newton (or
    Picard) from ``guess`` (zero when None); returns the solution, the last linearisation as an
    AssemblyResult, the slab's timings and the solve's info."""
    from ..nonlinear import NonlinearSystem, solve_iteration

    system = NonlinearSystem(space, slab, options, linear_solver=nonlinear.linear_solver,
                             face_penalty_scale=penalty_scale)
    bottom = bk.to_host(state.load(np.zeros(space.n_dofs)))  # the previous slab's trace (u_0 at first)
    slab_system = _WithLoad(system, bottom)
    u0 = np.zeros(space.n_dofs) if guess is None else bk.to_host(guess)
    result = solve_iteration(slab_system, u0, nonlinear,
                             None if progress is None else (lambda line: progress("  " + line)))
    last = result.last
    stage = dict(last.info["timings"])
    stage["total_assembly"] = result.assembly_seconds
    stage["jit"] = system.jit_seconds + result.jit
    solve_seconds = stage["solve"] = result.solve_seconds
    assembly = result.last_assembly(system.options)
    solve_info = {"seconds": solve_seconds, "solver": f"{nonlinear.method} + {nonlinear.linear_solver}",
                  "iterations": result.iterations, "residual": result.residuals[-1]}
    return state.xp.asarray(result.solution), assembly, stage, solve_info


class _WithLoad:
    """A nonlinear system whose residual carries one more load: R(u) - load."""

    def __init__(self, system, load: np.ndarray):
        self.system, self.load = system, load

    def linearize(self, u, **kwargs):
        lin = self.system.linearize(u, **kwargs)
        lin.residual = lin.residual - self.load
        return lin

    def solve_linear(self, matrix, rhs):
        return self.system.solve_linear(matrix, rhs)


def _assemble_slab(space: DGSpace, slab: Problem, interval: tuple[float, float], options: AssemblyOptions,
                   load_only: bool, kept: _KeptMatrix, assembler: Callable | None, workspace: Workspace,
                   penalty_scale: np.ndarray | None) -> Any:
    """The slab's AssemblyResult with ``options``: matrix and load, or (``load_only``) the load with
    the kept matrix."""
    if load_only:  # the kept matrix's penalty (its face scale included) serves the Dirichlet load; the
        # bottom's inflow value is the trace load
        scope = AssemblyScope(face_penalty=kept.assembly.face_penalty,
                              load_boundary_faces=space.mesh.face_normal[:, -1] != -1.0)
    else:
        scope = AssemblyScope(face_penalty_scale=penalty_scale)
    if assembler is not None:  # e.g. every MPI rank assembling its rows (polydg.distributed.spacetime)
        result = assembler(space, interval, options, scope=scope, matrix=not load_only, workspace=workspace)
    else:
        result = assemble(space, slab, options, scope=scope, matrix=not load_only, workspace=workspace)
    return kept.with_load(result) if load_only else result


__all__ = ["MarchResult", "march", "uniform_time_nodes", "REUSE_TOL", "MATRIX_AND_LOAD", "LOAD_ONLY", "NOTHING"]
