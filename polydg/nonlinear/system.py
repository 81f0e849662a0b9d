"""A nonlinear problem on a DG space as a system of equations R(u) = 0: its kept plan, its linearisations."""

from __future__ import annotations

import numpy as np

from .. import backend as bk
from ..assembly.linearized_passes import HostExecutor, Linearization, linearize
from ..assembly.penalty import penalty_weights
from ..assembly.plan import plan_assembly
from ..assembly.timing import Timer
from ..errors import OptionError
from ..problem import as_problem


class NonlinearSystem:
    """R(u) = 0 for ``problem`` on ``space``: the plan (pattern, rules, chunks, tables) and the penalty's
    weights are made once; each :meth:`linearize` pays for u at the points, the coefficients and the kernels."""

    def __init__(self, space, problem, *, penalty: float = 10.0, penalty_kind: str = "classical",
                 quadrature_extra: int = 0, memory_budget_mb: float = 1024.0, linear_solver: str = "direct",
                 backend: str = "numpy"):
        if not penalty > 0:
            raise OptionError(f"penalty constant must be positive, got {penalty}")
        self.space = space
        self.problem = as_problem(problem, space.mesh.dim)
        self.penalty = float(penalty)
        self.linear_solver = linear_solver
        mesh = space.mesh
        self.plan = plan_assembly(space, self.problem, approach="2", dtype=np.float64, penalty=penalty,
                                  penalty_kind=penalty_kind, quadrature_extra=quadrature_extra,
                                  memory_budget_mb=memory_budget_mb, elements=np.arange(mesh.n_elements, dtype=np.int64),
                                  timer=Timer(), face_penalty=np.zeros(mesh.n_faces))
        self.weights = penalty_weights(mesh, space.degree, penalty_kind)
        backend = bk.resolve_backend(backend)
        if bk.is_device(backend):
            from ..assembly.cuda_linearized import DeviceExecutor

            self.executor = DeviceExecutor(self.plan, backend)
        else:
            self.executor = HostExecutor(self.plan)

    def linearize(self, u: np.ndarray, *, newton: bool = True, want_jacobian: bool = True,
                  face_penalty: np.ndarray | None = None) -> Linearization:
        """The Jacobian (Newton's, or Picard's) and residual at the iterate ``u``."""
        u = np.asarray(u, dtype=np.float64)
        if u.shape != (self.space.n_dofs,):
            raise OptionError(f"the iterate has shape {u.shape}, expected ({self.space.n_dofs},) (one value per dof)")
        return linearize(self.plan, self.problem, self.executor, u, weights=self.weights, C_sigma=self.penalty,
                         newton=newton, want_jacobian=want_jacobian, face_penalty=face_penalty)

    def solve_linear(self, matrix, rhs) -> np.ndarray:
        from ..solve import solve

        return solve(matrix, rhs, self.linear_solver, space=self.space)[0]
