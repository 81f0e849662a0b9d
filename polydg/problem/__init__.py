"""Problems: the contract (docs/design.md §1 and §6), the built-in problems and their loading.

One concept per module:

* :mod:`~polydg.problem.contract`: :class:`Problem` (the PDE's coefficients
  and data, checked where they are evaluated; coefficients may depend on the
  discrete solution);
* :mod:`~polydg.problem.protocol`: :func:`as_problem`, which accepts any
  object meeting the contract;
* :mod:`~polydg.problem.iterate`: coefficients of the discrete solution and
  their derivatives (given, or by the complex step);
* :mod:`~polydg.problem.builtin`: the manufactured problems and
  :data:`BUILTIN_PROBLEMS`, :func:`builtin_problem`;
  :mod:`~polydg.problem.nonlinear_builtin` the nonlinear ones;
* :mod:`~polydg.problem.polynomial`: problems with a polynomial exact
  solution (:func:`polynomial_problem`);
* :mod:`~polydg.problem.paper_kernel`: the compiled source term of the
  paper's problem;
* :mod:`~polydg.problem.loading`: :func:`load_problem`, from a built-in
  name, ``path/to/file.py:NAME`` or ``package.module:NAME``;
* :mod:`~polydg.problem.data`: coefficients from data, per fine cell
  (:class:`CellData`), per element (:class:`ElementData`) or on a grid
  (:class:`GridData`);
* :mod:`~polydg.problem.coefficient_options`: ``--coefficient NAME=SPEC``
  (:func:`with_coefficients`).

Everything is importable from ``polydg.problem`` itself, as before the split.
"""

from .builtin import (
    BUILTIN_PROBLEMS,
    advection_problem,
    builtin_names,
    builtin_problem,
    change_of_type_problem,
    neumann_problem,
    paper_problem,
    poisson_problem,
)
from .contract import COEFFICIENTS, Problem
from .protocol import as_problem
from .loading import load_problem
from .polynomial import Polynomial, polynomial_problem

# the old module's other names, importable as before but kept out of ``import *`` as before
# (multi_indices there would shadow polydg.basis.multi_indices, whose arguments go the other way)
from .builtin import ALIASES, neumann_diffusion_matrix  # noqa: F401
from .contract import Coefficient  # noqa: F401
from .paper_kernel import _paper_source, _sincospi  # noqa: F401
from .polynomial import POLYNOMIAL_KINDS, multi_indices  # noqa: F401

# coefficients from data (#28): importable from here, kept out of ``import *`` (whose names stay the old ones)
from .data import CellData, ElementData, GridData, PointLocation  # noqa: F401
from .coefficient_options import with_coefficients  # noqa: F401

__all__ = [
    "Problem",
    "Polynomial",
    "COEFFICIENTS",
    "BUILTIN_PROBLEMS",
    "as_problem",
    "builtin_names",
    "builtin_problem",
    "polynomial_problem",
    "load_problem",
    "paper_problem",
    "poisson_problem",
    "advection_problem",
    "change_of_type_problem",
    "neumann_problem",
]
