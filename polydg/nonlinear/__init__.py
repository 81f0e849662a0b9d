"""Nonlinear problems: R(u) = 0 for coefficients of the discrete solution (``DESIGN.md`` section 12).

* :mod:`~polydg.nonlinear.system`: :class:`NonlinearSystem`, a problem on a space with its kept plan;
* :mod:`~polydg.nonlinear.newton`: Newton's and Picard's iterations on it.

>>> import numpy as np
>>> from polydg.mesh import unit_square
>>> from polydg.partition import agglomerate
>>> from polydg.space import DGSpace
>>> from polydg.problem import Problem
>>> space = DGSpace(agglomerate(unit_square(8), 12), 1)
>>> problem = Problem("bratu", diffusion=1.0, source=lambda x, u: 0.5 * np.exp(u))  # -Lap u = 0.5 e^u, u = 0 on the boundary
>>> result = solve_nonlinear(space, problem)
>>> result.iterations <= 6 and result.residuals[-1] < 1e-10 * result.residuals[0]
True
"""

from __future__ import annotations

import numpy as np

from .newton import NONLINEAR_METHODS, NonlinearError, NonlinearOptions, NonlinearResult, solve_iteration
from .system import NonlinearSystem

__all__ = ["NONLINEAR_METHODS", "NonlinearError", "NonlinearOptions", "NonlinearResult", "NonlinearSystem",
           "solve_nonlinear"]


def solve_nonlinear(space, problem, u0: np.ndarray | None = None, *, options: NonlinearOptions | None = None,
                    progress=None, **assembly) -> NonlinearResult:
    """Solve R(u) = 0 for ``problem`` on ``space`` from ``u0`` (default zero) by Newton (or Picard).

    ``assembly`` goes to :class:`NonlinearSystem` (penalty, penalty_kind, quadrature_extra,
    memory_budget_mb, linear_solver); ``progress`` gets one line per iterate.  Raises
    :class:`NonlinearError` when the iteration diverges or does not converge.
    """
    system = NonlinearSystem(space, problem, **assembly)
    u0 = np.zeros(space.n_dofs) if u0 is None else u0
    return solve_iteration(system, u0, options, progress)
