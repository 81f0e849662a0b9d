"""A nonlinear problem on a DG space as a system of equations R(u) = 0: its kept plan, its linearisations."""

from __future__ import annotations

import time

import numpy as np

from ..assembly.assembler import Assembler, warn_degree_zero_diffusion
from ..assembly.linearized_passes import Linearization
from ..assembly.options import AssemblyOptions, assembly_options, linearisation_options
from ..assembly.pattern import compile_pattern_kernels
from ..assembly.penalty import compile_penalty_kernels, penalty_from_weights
from ..assembly.points import compile_point_kernels
from ..assembly.scope import AssemblyScope
from ..problem.protocol import as_steady_problem
from ..problem.data import check_data


class NonlinearSystem:
    """R(u) = 0 for ``problem`` on ``space``: the plan (pattern, rules, chunks, tables) and the penalty's
    weights are made once, by an :class:`~polydg.assembly.Assembler` (``assembler``) that keeps them; each
    :meth:`linearize` pays for u at the points, the coefficients and the kernels.

    ``options`` (or their fields as keywords) as for :func:`~polydg.assembly.assemble`: penalty, penalty_kind,
    quadrature_extra, memory_budget_mb and backend are used; the linearisation is in double precision
    by rows (approach 2), and other precisions or approaches are refused (OptionError).  ``linear_solver``
    is the method of each step's linear solve.
    ``face_penalty_scale`` (one factor per face) multiplies the penalty at every iterate (a space-time
    slab with local time steps: 0 between an element's steps).  ``scope`` gives the rows and their column
    numbering (an MPI rank's: :class:`~polydg.distributed.nonlinear.DistributedNonlinearSystem`).  ``plan_seconds`` is what making the plan
    took, ``jit_seconds`` its kernels' compilation (apart).
    """

    def __init__(self, space, problem, options: AssemblyOptions | None = None, *, linear_solver: str = "auto",
                 face_penalty_scale: np.ndarray | None = None, scope: AssemblyScope | None = None, **choices):
        self.options = linearisation_options(assembly_options(options, choices)).resolved()
        self.space = space
        self.problem = as_steady_problem(problem, space.mesh.dim)
        check_data(self.problem, space.mesh)  # data per cell or element: one value per cell or element of this mesh
        warn_degree_zero_diffusion(space, self.problem)
        self.linear_solver = linear_solver
        mesh = space.mesh
        start = time.perf_counter()
        compile_pattern_kernels()
        compile_point_kernels(mesh.dim)
        compile_penalty_kernels()
        self.jit_seconds = time.perf_counter() - start  # compilation or cache loading, apart
        start = time.perf_counter()
        rows = scope or AssemblyScope()
        scale = None if face_penalty_scale is None else np.asarray(face_penalty_scale, dtype=np.float64)
        self.assembler = Assembler(space, self.options, scope=AssemblyScope(
            elements=rows.elements, column_numbering=rows.column_numbering, face_penalty_scale=scale))
        self.plan, self.executor, self.weights = self.assembler.linearization()
        self.plan_seconds = time.perf_counter() - start

    def linearize(self, u: np.ndarray, *, newton: bool = True, want_jacobian: bool = True,
                  face_penalty: np.ndarray | None = None) -> Linearization:
        """The Jacobian (Newton's, or Picard's) and residual at the iterate ``u``."""
        return self.assembler.linearize_checked(self.problem, u, newton=newton, want_jacobian=want_jacobian,
                                                face_penalty=face_penalty, penalty_at=self.penalty_at)

    def penalty_at(self, a_bound: np.ndarray) -> np.ndarray:
        """sigma_F = C_sigma max over F's elements K of a_K w[F, K], from a_K at the iterate."""
        return penalty_from_weights(self.weights, self.space.mesh.face_elements, a_bound, self.options.penalty)

    def solve_linear(self, matrix, rhs) -> np.ndarray:
        from ..solve import solve

        return solve(matrix, rhs, self.linear_solver, space=self.space)[0]
