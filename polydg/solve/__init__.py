"""Linear solves of the assembled system, DG error norms and point evaluation.

* :func:`solve` (:mod:`~polydg.solve.linear`): the direct solve
  (:mod:`~polydg.solve.direct`: SuperLU after a nested dissection of the
  element graph) or the preconditioned Krylov solve
  (:mod:`~polydg.solve.krylov`, with the preconditioners of
  :mod:`~polydg.solve.preconditioners`: AMG via pyamg, block-Jacobi, ILU,
  Jacobi), chosen by :mod:`~polydg.solve.choice` unless the caller names
  one; a matrix on the GPU is solved there (:mod:`~polydg.solve.device`).
* :func:`errors`, :func:`evaluate`, :func:`element_means`
  (:mod:`~polydg.solve.norms`): error norms against the exact solution, the
  DG function at points, its element means.
* :mod:`~polydg.solve.system`: the checks every solve makes, and
  :class:`SolverError` / :class:`SolverWarning`.
"""

from .choice import DIRECT_BELOW, METHODS, choose_method
from .device import block_jacobi_on, solve_on_device
from .direct import ORDERINGS
from .linear import solve
from .norms import DEFAULT_PENALTY, element_means, errors, evaluate
from .preconditioners import ILU_BELOW, PRECONDITIONERS, block_jacobi, constant_coefficients
from .system import SolverError, SolverWarning, is_symmetric

__all__ = ["solve", "SolverError", "SolverWarning", "METHODS", "ORDERINGS", "PRECONDITIONERS", "ILU_BELOW",
           "DIRECT_BELOW", "choose_method", "is_symmetric", "block_jacobi", "constant_coefficients",
           "solve_on_device", "block_jacobi_on", "errors", "evaluate", "element_means", "DEFAULT_PENALTY"]
