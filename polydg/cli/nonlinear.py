"""A nonlinear problem's run: Newton (or Picard) on a kept plan, one progress line per iterate.

The table reports the last iterate's assembly (the Jacobian and residual at the solution, per
iteration), the solve row the linear solves summed over the iteration; summary.json's ``nonlinear``
holds the iteration (method, iterations, residuals, updates, steps, seconds per iterate).  With
``--output``, matrix.npz is the Jacobian at the solution and rhs.npy the residual there.
"""

from __future__ import annotations

import argparse
import numpy as np

from ..errors import OptionError
from .inputs import RunOptions
from .outputs import report
from .progress import activity


def check_nonlinear_options(args: argparse.Namespace, opts: RunOptions, problem) -> None:
    """One-line errors, before any mesh work, for options a nonlinear run cannot follow: a precision or
    approach other than the linearisation's, ``--repeat`` (the problem is solved once)."""
    from ..nonlinear.system import linearisation_options

    if not problem.nonlinear or problem.space_time:  # a march: its own checks
        return
    linearisation_options(opts.assembly)
    if args.repeat > 1:
        raise OptionError(f"--repeat times a linear problem's assembly; problem {problem.name!r} is nonlinear, "
                          f"solved once by {args.nonlinear or 'newton'}: drop --repeat {args.repeat}")


def nonlinear_options(args: argparse.Namespace, opts: RunOptions):
    """The iteration's options from ``--nonlinear``, ``--tol``, ``--max-iterations`` (and ``--solve`` for each
    step's linear solve)."""
    from ..nonlinear import NonlinearOptions

    return NonlinearOptions(method=args.nonlinear or "newton", rtol=args.tol, max_iterations=args.max_iterations,
                            linear_solver=opts.method or "auto")


def run_nonlinear(args: argparse.Namespace, opts: RunOptions, problem, space, say, system=None,
                  extra: dict | None = None) -> dict:
    """Solve R(u) = 0 from u = 0 and report; a NonlinearError (no convergence) is one line, exit 2.

    ``system`` is the problem's :class:`~polydg.nonlinear.NonlinearSystem` (default: one process), or rank
    0's side of a :class:`~polydg.distributed.nonlinear.DistributedNonlinearSystem`.
    """
    from ..nonlinear import NonlinearSystem, solve_iteration
    from ..solve import errors

    nonlinear = nonlinear_options(args, opts)
    if system is None:
        system = NonlinearSystem(space, problem, opts.assembly, linear_solver=nonlinear.linear_solver)
    say(f"nonlinear problem {problem.name}: {nonlinear.method} from u = 0 (plan made in {system.plan_seconds:.3f} s)")
    with activity(say, f"{nonlinear.method} iteration"):  # its lines print above the spinner
        result = solve_iteration(system, np.zeros(space.n_dofs), nonlinear, progress=say)
    say(f"{nonlinear.method} converged in {result.iterations} iterations: residual {result.residuals[-1]:.3e} "
        f"(from {result.residuals[0]:.3e})")
    last = result.last
    timings = dict(last.info["timings"])
    timings["jit"] = system.jit_seconds + result.jit
    timings["indices"] = system.plan_seconds  # the plan (pattern, points' rules, chunks) is made once
    assembly = result.last_assembly(system.options)
    solve_info = {"seconds": result.solve_seconds, "solver": f"{nonlinear.method} + {nonlinear.linear_solver}",
                  "method": nonlinear.linear_solver, "iterations": result.iterations}
    errs = None
    if problem.exact is not None:  # the DG norm's A at the exact solution
        errs = errors(space, problem, result.solution, penalty_values=last.face_penalty)
    ranks = system.rank_summary() if hasattr(system, "rank_summary") else {}  # on MPI ranks: per rank, balance
    return report(args, opts, say, space, problem, assembly, timings, (result.solution, solve_info, errs),
                  extra={"nonlinear": result.summary(), **ranks, **(extra or {})})


__all__ = ["nonlinear_options", "run_nonlinear"]
