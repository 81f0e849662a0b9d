"""A nonlinear problem on a DG space as a system of equations R(u) = 0: its kept plan, its linearisations."""

from __future__ import annotations

import numpy as np

from ..assembly.linearized_passes import Linearization, linearize_on_host
from ..assembly.penalty import penalty_weights
from ..assembly.plan import plan_assembly
from ..assembly.timing import Timer
from ..assembly.workspace import Workspace
from ..errors import OptionError
from ..problem import as_problem
from ..problem.data import check_data


class NonlinearSystem:
    """R(u) = 0 for ``problem`` on ``space``: the plan (pattern, rules, chunks, tables) and the penalty's
    weights are made once; each :meth:`linearize` pays for u at the points, the coefficients and the kernels."""

    def __init__(self, space, problem, *, penalty: float = 10.0, penalty_kind: str = "classical",
                 quadrature_extra: int = 0, memory_budget_mb: float = 1024.0, linear_solver: str = "direct"):
        if not penalty > 0:
            raise OptionError(f"penalty constant must be positive, got {penalty}")
        self.space = space
        self.problem = as_problem(problem, space.mesh.dim)
        check_data(self.problem, space.mesh)  # data per cell or element: one value per cell or element of this mesh
        self.penalty = float(penalty)
        self.linear_solver = linear_solver
        mesh = space.mesh
        self.plan = plan_assembly(space, self.problem, approach="2", dtype=np.float64, penalty=penalty,
                                  penalty_kind=penalty_kind, quadrature_extra=quadrature_extra,
                                  memory_budget_mb=memory_budget_mb, elements=np.arange(mesh.n_elements, dtype=np.int64),
                                  timer=Timer(), face_penalty=np.zeros(mesh.n_faces))
        self.weights = penalty_weights(mesh, space.degree, penalty_kind)
        self.workspace = Workspace()

    def linearize(self, u: np.ndarray, *, newton: bool = True, want_jacobian: bool = True,
                  face_penalty: np.ndarray | None = None) -> Linearization:
        """The Jacobian (Newton's, or Picard's) and residual at the iterate ``u``."""
        u = np.asarray(u, dtype=np.float64)
        if u.shape != (self.space.n_dofs,):
            raise OptionError(f"the iterate has shape {u.shape}, expected ({self.space.n_dofs},) (one value per dof)")
        return linearize_on_host(self.plan, self.problem, u, weights=self.weights, C_sigma=self.penalty,
                                 newton=newton, want_jacobian=want_jacobian, face_penalty=face_penalty,
                                 workspace=self.workspace)

    def solve_linear(self, matrix, rhs) -> np.ndarray:
        from ..solve import solve

        return solve(matrix, rhs, self.linear_solver, space=self.space)[0]
