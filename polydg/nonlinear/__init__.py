"""Nonlinear problems: R(u) = 0 for coefficients of the discrete solution (docs/design.md §8).

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

import dataclasses
import difflib

import numpy as np

from ..assembly.options import AssemblyOptions, assembly_options
from ..errors import OptionError
from .newton import NONLINEAR_METHODS, NonlinearError, NonlinearOptions, NonlinearResult, solve_iteration
from .system import NonlinearSystem

__all__ = ["NONLINEAR_METHODS", "NonlinearError", "NonlinearOptions", "NonlinearResult", "NonlinearSystem",
           "solve_nonlinear"]


def solve_nonlinear(space, problem, u0: np.ndarray | None = None, options: AssemblyOptions | None = None, *,
                    nonlinear: NonlinearOptions | None = None, progress=None, **choices) -> NonlinearResult:
    """Solve R(u) = 0 for ``problem`` on ``space`` from ``u0`` (default zero) by Newton (or Picard).

    ``options`` are the assembly's (:class:`~polydg.assembly.AssemblyOptions`), ``nonlinear`` the
    iteration's (:class:`NonlinearOptions`); ``choices`` are fields of either, by name (e.g.
    ``method="picard", penalty=20``).  ``progress`` gets one line per iterate.  Raises
    :class:`NonlinearError` when the iteration diverges or does not converge.
    """
    options, nonlinear = split_choices(options, nonlinear, choices)
    system = NonlinearSystem(space, problem, options, linear_solver=nonlinear.linear_solver)
    u0 = np.zeros(space.n_dofs) if u0 is None else u0
    return solve_iteration(system, u0, nonlinear, progress)


def split_choices(options: AssemblyOptions | None, nonlinear: NonlinearOptions | None, choices: dict):
    """The assembly's and the iteration's options, with ``choices`` (fields of either) over them."""
    iteration = {f.name for f in dataclasses.fields(NonlinearOptions)}
    assembly = {f.name for f in dataclasses.fields(AssemblyOptions)}
    unknown = set(choices) - iteration - assembly
    if unknown:
        name = sorted(unknown)[0]
        close = difflib.get_close_matches(name, sorted(iteration | assembly), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise OptionError(f"unknown option {name!r}{hint}; the nonlinear options are {', '.join(sorted(iteration))} "
                          f"and the assembly's {', '.join(sorted(assembly))}")
    options = assembly_options(options, {k: v for k, v in choices.items() if k in assembly})
    picked = {k: v for k, v in choices.items() if k in iteration}
    nonlinear = dataclasses.replace(nonlinear or NonlinearOptions(), **picked) if picked else (
        nonlinear or NonlinearOptions())
    return options, nonlinear
