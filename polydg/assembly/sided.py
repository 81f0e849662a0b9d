"""A linear problem assembled by the sided executor: coefficients that differ on the two sides of a face.

The linear kernels take one coefficient value per face point, so a coefficient that jumps across an
element interface (data per fine cell or per element, :mod:`polydg.problem.data`) has no single
value there.  The sided executor (``linearized_passes.py``) evaluates the diffusion on each side of an
interior face, from each side's element and fine cell; for a linear problem its Jacobian at u = 0 is
the matrix and -R(0) the load.  :func:`~polydg.assembly.assemble` sends such problems here (those whose
coefficients read ``where``: :attr:`Problem.located <polydg.problem.Problem.located>`).

The penalty takes a_K, the largest Gershgorin bound of A over K's quadrature points, as the linear
path does; sub-simplex quadrature integrates a per-fine-cell coefficient exactly.  The plan (rows,
pattern, rules, chunks) is the linear path's, so the matrix has the same pattern; the values are the
linear path's wherever the coefficients are single-valued on the faces, to round-off.
"""

from __future__ import annotations

import time

import numpy as np

from .. import backend as bk
from ..errors import OptionError, ProblemError
from ..problem.data import check_data
from .linearized_passes import HostExecutor, linearize
from .options import AssemblyOptions
from .penalty import penalty_from_weights, penalty_weights
from .plan import AssemblyPlan, layout_plan
from .reductions.choice import AUTO
from .result import AssemblyResult, size_record
from .scope import AssemblyScope
from .timing import Timer


def assemble_sided(space, problem, options: AssemblyOptions, *, scope: AssemblyScope | None = None,
                   matrix: bool = True, layout: AssemblyPlan | None = None, weights: np.ndarray | None = None):
    """The matrix and load of the linear ``problem`` (a :class:`~polydg.problem.Problem`) on ``space`` by the
    sided executor, with the ``options`` and ``scope`` of :func:`~polydg.assembly.assemble`, which calls this
    for problems whose coefficients read where their points lie.  On the CPU in double precision (row
    kernels: reproducible).

    >>> from polydg.mesh import unit_square
    >>> from polydg.partition import agglomerate
    >>> from polydg.space import DGSpace
    >>> from polydg.problem import Problem
    >>> from polydg.problem.data import ElementData
    >>> space = DGSpace(agglomerate(unit_square(4), 4), 1)
    >>> k = ElementData(1.0 + np.arange(space.mesh.n_elements))  # a diffusion that jumps at every interface
    >>> result = assemble_sided(space, Problem("layers", diffusion=k, source=1.0), AssemblyOptions())
    >>> result.matrix.shape == (space.n_dofs, space.n_dofs), result.info["executor"]
    (True, 'sided')

    ``layout`` and ``weights``: the plan's layout (:func:`~polydg.assembly.plan.layout_plan`: host, double,
    approach 2, these rows) and the penalty's weights, kept by an :class:`~polydg.assembly.Assembler`;
    by default made here.
    """
    mesh = space.mesh
    scope = scope or AssemblyScope()
    check_sided(problem, options, scope)
    check_data(problem, mesh)
    timer = Timer()
    t_all = time.perf_counter()
    if layout is None:  # no face penalty of its own: the linear plan's a_K (without the points' locations) unused
        layout = layout_plan(space, options.replace(backend="numpy"), scope, timer=timer, matrix=matrix)
    plan = layout.for_problem(problem, np.zeros(mesh.n_faces), matrix=matrix)
    if weights is None:
        t = time.perf_counter()
        weights = penalty_weights(mesh, space.degree, options.penalty_kind)
        timer.add("penalty", t)

    def penalty_at(a_bound):
        return penalty_from_weights(weights, mesh.face_elements, a_bound, options.penalty)

    lin = linearize(plan, problem, HostExecutor(plan), np.zeros(space.n_dofs), penalty_at=penalty_at, newton=False,
                    want_jacobian=matrix, face_penalty=scope.face_penalty)
    timings = dict(timer.t)  # the plan's (indices, penalty weights), then the executor's stages
    for key, value in lin.info["timings"].items():
        timings[key] = timings.get(key, 0.0) + value
    timings["total_assembly"] = time.perf_counter() - t_all - timings.get("jit", 0.0)
    result_matrix = lin.jacobian
    elements = scope.rows(mesh.n_elements)
    info = {
        **size_record(space, plan.pattern.n_rows, elements, result_matrix),
        "precision": "double",
        "backend": "numpy",
        "device": bk.device_name("numpy"),
        "approach": "2",
        "executor": "sided",
        "penalty": {"constant": options.penalty, "kind": options.penalty_kind},
        "quadrature_extra": options.quadrature_extra,
        "memory_budget_mb": options.budget_mb,
        "chunks": len(plan.chunks),
        "options": options.as_dict(),
        "timings": timings,
    }
    return AssemblyResult(result_matrix, -lin.residual, lin.face_penalty, info)


def check_sided(problem, options: AssemblyOptions, scope: AssemblyScope) -> None:
    """Raise a one-line error unless the sided executor can assemble ``problem`` with ``options`` and ``scope``."""
    what = f"problem {problem.name!r} reads where its points lie (data per cell or element)"
    if problem.nonlinear:
        raise ProblemError(f"problem {problem.name!r} depends on the iterate: a nonlinear problem is solved by "
                           "polydg.nonlinear.solve_nonlinear (command line: --nonlinear newton|picard), not assembled once")
    if problem.space_time:
        raise OptionError(f"{what}: not supported for a space-time problem")
    if bk.is_device(options.resolved().backend):
        raise OptionError(f"{what}: it is assembled on the CPU (backend numpy), the GPU backend has no sided executor")
    if options.precision != "double":
        raise OptionError(f"{what}: it is assembled in double precision, not {options.precision}")
    if options.approach not in (AUTO, "2"):  # "auto" is "2" on the CPU
        raise OptionError(f"{what}: it is assembled by row kernels (approach 2), not approach {options.approach!r}")
    if scope.face_penalty_scale is not None or scope.load_boundary_faces is not None:
        raise OptionError(f"{what}: face_penalty_scale and load_boundary_faces (space-time slabs) are not supported")
