"""Time marching: dG in space and time, one slab after another (paper eqs. 2.8, 2.9).

For n = 1, ..., N the slab Omega x (t_{n-1}, t_n) is a 3D polytopic mesh
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
* the whole assembly (matrix and load) when nothing in it depends on t:
  slabs of equal length then differ only by a shift in time, so the slab
  is assembled once and each later slab computes only its bottom load
  (the previous slab's trace) and solves, with the kept factorisation.
  That is known when every coefficient and datum (A, b, c, f, g_D, g_N and
  the Neumann mask) is a constant, and stated by the caller with
  ``autonomous=True`` for callables free of t; ``autonomous=False`` asks
  for an assembly per slab.  ``info["reused_assemblies"]`` counts the
  slabs that reused it.

When only f, g_D or g_N depend on t the matrix is still the same: each slab
is assembled again (the load needs the kernels' pass over the points) and
the factorisation is kept.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from ..assembly import Workspace, assemble
from ..basis import BASES
from ..errors import OptionError
from ..mesh.polytopic import PolytopicMesh
from ..mesh.quadrature_simplices import DEFAULT_QUADRATURE_SIMPLICES, quadrature_mesh
from ..problem import Problem, as_problem
from ..solve import SolverError, solve
from ..space import DGSpace
from .problem import check_space_time, initial_values, slab_problem
from .slab import check_local_steps, shifted_slab, slab_mesh, step_offsets
from .trace import l2_error_at, l2_error_squared_over_slab, time_plane_rule, trace_load, trace_values

#: relative change of the matrix values below which a factorisation is reused
REUSE_TOL = 1e-13
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

    def total_timings(self) -> dict:
        """Each timing summed over the slabs."""
        keys = dict.fromkeys(k for t in self.timings for k in t)
        return {k: float(sum(t.get(k, 0.0) for t in self.timings)) for k in keys}


def uniform_time_nodes(n_slabs: int, final_time: float, start: float = 0.0) -> np.ndarray:
    """``n_slabs + 1`` equally spaced nodes from ``start`` to ``final_time``."""
    if not (isinstance(n_slabs, (int, np.integer)) and n_slabs >= 1):
        raise OptionError(f"the number of time slabs must be a positive integer, got {n_slabs!r}")
    if not final_time > start:
        raise OptionError(f"the final time must be greater than {start:g}, got {final_time!r}")
    return np.linspace(start, float(final_time), int(n_slabs) + 1)


def _check_nodes(time_nodes: Any) -> np.ndarray:
    nodes = np.asarray(time_nodes, dtype=np.float64).reshape(-1)
    if len(nodes) < 2 or not np.isfinite(nodes).all() or not (np.diff(nodes) > 0).all():
        raise OptionError("time nodes must be at least two finite, strictly increasing times")
    return nodes


class _Factorisation:
    """A sparse LU kept while the matrix does not change (direct solves)."""

    def __init__(self) -> None:
        self.matrix: sp.csr_matrix | None = None
        self.lu: Any = None
        self.count = 0

    def unchanged(self, A: sp.csr_matrix) -> bool:
        B = self.matrix
        if B is None or B.shape != A.shape or B.nnz != A.nnz:
            return False
        if not (np.array_equal(B.indptr, A.indptr) and np.array_equal(B.indices, A.indices)):
            return False
        scale = float(np.abs(B.data).max(initial=0.0))
        return float(np.abs(A.data - B.data).max(initial=0.0)) <= REUSE_TOL * scale

    def solve(self, A: sp.csr_matrix, b: np.ndarray, known_unchanged: bool = False) -> tuple[np.ndarray, dict]:
        """Solve A x = b, factorising A unless it is (``known_unchanged``, or found) the factorised matrix."""
        start = time.perf_counter()
        reused = self.lu is not None and (known_unchanged or self.unchanged(A))
        if not reused:
            try:
                self.lu = spla.splu(A.tocsc())
            except RuntimeError as exc:
                raise SolverError(f"direct solve failed: {exc} (is the matrix singular?)") from exc
            self.matrix, self.count = A, self.count + 1
        x = self.lu.solve(b)
        if not np.isfinite(x).all():
            raise SolverError("direct solve produced non-finite values (singular matrix?)")
        return x, {"method": "direct", "solver": "splu", "reused_factorisation": reused,
                   "seconds": time.perf_counter() - start}


def march(space_mesh: PolytopicMesh, problem: Problem | Any, degree: int | np.ndarray,
          time_nodes: Any = None, *, n_slabs: int | None = None, final_time: float | None = None,
          method: str = "direct", space_time_basis: str = "P", local_steps: int | np.ndarray | None = None,
          quadrature_simplices: str = DEFAULT_QUADRATURE_SIMPLICES, autonomous: bool | None = None, compute_errors: bool = True,
          progress: Callable[[str], None] | None = None, assembler: Callable | None = None,
          **assemble_options: Any) -> MarchResult:
    """Solve a space-time problem slab by slab; returns a :class:`MarchResult`.

    Parameters
    ----------
    space_mesh : the 2D polytopic mesh of Omega
    problem : a space-time :class:`Problem` (``space_time=True``, with
        ``initial``; see :mod:`polydg.spacetime.problem`), or an object
        :func:`~polydg.problem.as_problem` accepts
    degree : the degree p per element (int or one per spatial element)
    time_nodes : t_0 < ... < t_N; or ``n_slabs`` and ``final_time`` (from 0)
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
    compute_errors : L2 at t_N and L2(0, T; L2) when the problem has ``exact``
    progress : called with one line per slab
    assembler : ``assembler(space, (t0, t1), **options)`` returns the slab's
        AssemblyResult instead of :func:`polydg.assembly.assemble` on the
        slab problem (:class:`polydg.distributed.spacetime.SlabAssembler`
        assembles on all MPI ranks)
    assemble_options : passed to :func:`polydg.assembly.assemble` (penalty,
        quadrature_extra, ...)
    """
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
    nodes = _check_nodes(time_nodes)
    start = time.perf_counter()
    space_mesh = quadrature_mesh(space_mesh, quadrature_simplices)
    t_quadrature_mesh = time.perf_counter() - start  # counted in the first slab's mesh time
    d = space_mesh.dim
    pmax = int(np.max(degree))
    extra = int(assemble_options.get("quadrature_extra", 0)) + TRACE_EXTRA
    steps = check_local_steps(local_steps, space_mesh.n_elements)
    offsets = step_offsets(steps, space_mesh.n_elements)
    if steps is not None and np.ndim(degree) != 0:  # one degree per spatial element: the same on its steps
        degree = np.repeat(np.asarray(degree), steps)
    rule = time_plane_rule(space_mesh, 2 * pmax + extra)
    # the bottom of slab n is the first step of each element, the top of slab n - 1 its last
    bottom_rule = dataclasses.replace(rule, elements=offsets[:-1][rule.elements])
    top_rule = dataclasses.replace(rule, elements=offsets[1:][rule.elements] - 1)
    penalty_scale = None  # the faces between an element's steps: no normal diffusion, so no penalty
    factorisation = _Factorisation()
    workspace = Workspace()
    with_errors = compute_errors and problem.exact is not None
    # the slab matrix depends on t only through these: constants make equal-length slabs' matrices equal
    constant_coefficients = not any(callable(getattr(problem, k)) for k in
                                    ("diffusion", "advection", "reaction", "is_neumann"))
    if autonomous is None:  # and the load too: nothing of the slab problem depends on t
        autonomous = constant_coefficients and not any(callable(getattr(problem, k)) for k in
                                                       ("source", "dirichlet", "neumann"))

    base: PolytopicMesh | None = None  # the slab mesh of the current slab length, at base_t0
    base_t0 = base_tau = 0.0
    assembled = None  # the AssemblyResult reused by autonomous problems
    previous: tuple[DGSpace, np.ndarray, float] | None = None
    timings: list[dict] = []
    l2_l2 = 0.0
    reused_assemblies = 0
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
        t_mesh = time.perf_counter() - start + (t_quadrature_mesh if n == 1 else 0.0)

        if autonomous and assembled is not None and same_length:
            result = assembled
            stage = {"total_assembly": 0.0}
            reused_assemblies += 1
        else:
            if assembler is None:
                result = assemble(space, slab, workspace=workspace, face_penalty_scale=penalty_scale,
                                  to_host=True, **assemble_options)  # solved on the host
            else:  # e.g. every MPI rank assembling its rows (polydg.distributed.spacetime)
                result = assembler(space, (t0, t1), workspace=workspace, face_penalty_scale=penalty_scale,
                                   **assemble_options)
            stage = dict(result.info["timings"])
            assembled = result
        matrix, rhs = result.matrix, result.rhs

        t = time.perf_counter()
        if previous is None:
            bottom = initial_values(problem, rule.x)
        else:
            bottom = trace_values(previous[0], previous[1], top_rule, t0)
        load = rhs + trace_load(space, bottom_rule, t0, bottom)
        stage["trace"] = time.perf_counter() - t

        if method == "direct":
            u, solve_info = factorisation.solve(matrix, load, constant_coefficients and same_length)
        else:
            u, solve_info = solve(matrix, load, method, space=space)
        stage["solve"] = solve_info["seconds"]
        stage["mesh"] = t_mesh

        t = time.perf_counter()
        if with_errors:  # on prisms: the spatial rule times Gauss in t (exact in t to degree 2 pmax + 3)
            l2_l2 += l2_error_squared_over_slab(space, u, rule, offsets, t0, t1, problem.exact, pmax + 2)
        stage["errors"] = time.perf_counter() - t
        stage["slab"] = time.perf_counter() - start - stage.get("jit", 0.0)
        timings.append(stage)
        previous = (space, u, t1)
        if progress is not None:
            reuse = " (factorisation reused)" if solve_info.get("reused_factorisation") else ""
            progress(f"slab {n}/{len(nodes) - 1} ({t0:.4g}, {t1:.4g}): {space.n_dofs:,} dofs, "
                     f"{stage['slab']:.3f} s{reuse}")

    space, u, t_final = previous
    result_errors = None
    if with_errors:
        result_errors = {"l2": l2_error_at(space, u, top_rule, t_final, problem.exact),
                         "l2_l2": float(np.sqrt(l2_l2))}
    info = {"slabs": len(nodes) - 1, "dofs_per_slab": space.n_dofs, "nnz_per_slab": int(matrix.nnz),
            "local_steps": None if steps is None else {"min": int(steps.min()), "max": int(steps.max()),
                                                       "elements_per_slab": int(offsets[-1])},
            "factorisations": factorisation.count, "reused_assemblies": reused_assemblies,
            "autonomous": bool(autonomous),
            "solver": {k: v for k, v in solve_info.items() if isinstance(v, (int, float, str, bool))}}
    return MarchResult(u, space, nodes, timings, result_errors, info, result)


__all__ = ["MarchResult", "march", "uniform_time_nodes", "REUSE_TOL"]
