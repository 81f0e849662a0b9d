"""The one-process run: read, agglomerate, assemble (``--repeat`` times), solve, report.

A space-time problem goes to :mod:`polydg.cli.spacetime` from here, after the mesh.
"""

from __future__ import annotations

import argparse
import os
import statistics
import warnings

import numpy as np

from ..errors import PolyDGWarning
from ..jit import compile_watch
from .inputs import Progress, build_mesh, check_memory_early, check_options, chunk_progress, load_run_problem, \
    note_quadrature_simplices, note_replaced_exact, quadrature_simplices
from .outputs import check_targets, report
from .nonlinear import check_nonlinear_options
from .spacetime import check_space_time_options, run_space_time


def run(args: argparse.Namespace) -> dict:
    """Run the command line's job in this process; returns the summary."""
    for flag, given in (("--no-gather", getattr(args, "no_gather", False)),
                        ("--timeout", getattr(args, "timeout", None))):
        if given:  # said, not refused: a job script may pass the same flags to any number of ranks
            warnings.warn(f"{flag} is for MPI ranks (mpiexec -n N): one process ignores it", PolyDGWarning)
    args.no_gather = False  # one process holds the whole matrix: it writes the one-process files
    check_targets(args)  # before any work: where the run writes
    say = Progress(args.quiet)
    try:  # numba reports every compilation: the first of polydg's says a line, the report the total
        with compile_watch(say):
            return _run(args, say)
    finally:
        say.close()


def _run(args: argparse.Namespace, say) -> dict:
    from ..assembly import Workspace, assemble
    from ..mesh import load_mesh
    from ..problem import with_coefficients
    from ..space import DGSpace

    opts = check_options(args, say)
    check_memory_early(opts)  # a generator's sizes, before it generates
    fine = load_mesh(opts.mesh_spec)
    problem = load_run_problem(args.problem, fine.dim)  # before the first progress line: bad input is one line
    given, problem = problem, with_coefficients(problem, args.coefficient, fine)
    note_replaced_exact(given, problem, say)
    check_space_time_options(args, problem)
    check_nonlinear_options(args, opts, problem)
    note_quadrature_simplices(args, problem, fine.dim, say)
    check_memory_early(opts, fine)
    say(f"mesh {opts.mesh_spec}: {fine}")
    name_the_kernels(fine.dim, problem, opts)
    mesh, degree = build_mesh(fine, opts, args.seed, say, quadrature_simplices(args, problem))
    if problem.space_time:  # slab after slab
        return run_space_time(args, opts, problem, mesh, degree, say)
    space = DGSpace(mesh, degree)
    say(f"DG space: {space}; problem {problem.name}")
    if problem.nonlinear:  # Newton or Picard on a kept plan
        from .nonlinear import run_nonlinear

        return run_nonlinear(args, opts, problem, space, say)
    runs, result = [], None
    workspace = Workspace()  # the repeats reuse the quadrature points' and coefficients' arrays
    for r in range(args.repeat):
        result = None  # free the previous matrix first
        # on a GPU the matrix stays there (unless --to-host): solved there, copied once for --output
        result = assemble(space, problem, opts.assembly, progress=chunk_progress(say), workspace=workspace)
        runs.append(result.info["timings"])
        say(f"assembled {space.n_dofs:,} dofs, nnz {result.matrix.nnz:,} in "
            f"{result.info['timings']['total_assembly']:.3f} s" + (f" (run {r + 1}/{args.repeat})" if args.repeat > 1 else ""))
    del workspace  # its memory goes back before the solve
    timings = {k: statistics.median(t[k] for t in runs) for k in runs[0]}
    args.repeat_totals = [t["total_assembly"] for t in runs]
    solved = None
    if opts.method:
        from ..solve import errors

        x, solve_info = solve_and_say(result, opts.method, space, say, problem, opts.assembly)
        errs = errors(space, problem, x, penalty_values=result.face_penalty) if problem.exact is not None else None
        solved = (x, solve_info, errs)
    return report(args, opts, say, space, problem, result, timings, solved)


def name_the_kernels(dim: int, problem, opts) -> None:
    """Tell the run's compile watch what it compiles: the dimension of the kernels (d + 1 for a space-time
    problem), and approach 1's own."""
    from ..jit import current_watch

    watch = current_watch()
    if watch is not None:
        kind = f"{dim + 1}D space-time" if problem.space_time else f"{dim}D"
        watch.what = f"the {kind} kernels" + (", approach 1" if opts.assembly.approach == "1" else "")


def solve_and_say(result, method: str, space, say, problem=None, options=None) -> tuple[np.ndarray, dict]:
    """Solve the assembled system (on the device for a device matrix) and say how; x on the host.

    A direct solve whose factors cannot fit is refused first; what the
    solver prints itself (SuperLU's out-of-memory line) becomes part of its
    one-line error; a solution or residual that is not finite is refused,
    naming the coefficient (of ``problem``) or the penalty (of ``options``) whose size overflows.
    """
    import scipy.sparse as sp

    from ..assembly.finite import HUGE, likely_cause
    from ..assembly.memory import check_direct_solve
    from ..backend import to_host
    from ..errors import NonFiniteError, PolyDGError, capture_output
    from ..solve import SolverError, solve

    if method == "direct" and sp.issparse(result.matrix):
        check_direct_solve(result.matrix, space.mesh.dim)
    failure = None
    with os.fdopen(os.dup(2), "w", buffering=1) as terminal:  # the solve's progress, live, past the capture
        progress = (lambda line: say(line, file=terminal)) if isinstance(say, Progress) else say
        with capture_output() as said, np.errstate(all="ignore"):
            try:
                x, solve_info = solve(result.matrix, result.rhs, method, space=space, progress=progress)
            except (PolyDGError, MemoryError, RuntimeError) as exc:
                failure = exc
    if failure is None:
        said.replay()
        x = to_host(x)  # a device solution copied to the host once (errors, output)
        if np.isfinite(x).all() and np.isfinite(solve_info.get("residual", 0.0)):
            where = " on the device" if solve_info.get("device") else ""
            steps = solve_info.get("iterations") if solve_info.get("method") == "iterative" else None
            say(f"solved{where} ({solve_info.get('solver')}) in {solve_info['seconds']:.3f} s"
                f"{'' if steps is None else f', {steps} iterations'}, residual {solve_info.get('residual', 0.0):.2e}")
            return x, solve_info
        what = "solution" if not np.isfinite(x).all() else "residual"
        failure = NonFiniteError(f"the solve ({solve_info.get('solver')}) gave a non-finite {what}")
    with np.errstate(all="ignore"):
        largest = max(float(np.abs(to_host(result.matrix.data)).max(initial=0.0)),
                      float(np.abs(to_host(result.rhs)).max(initial=0.0)))
    printed = f" ({said.summary()})" if said.summary() else ""
    cause = ""
    if largest > HUGE or isinstance(failure, NonFiniteError):  # finite data whose products may overflow
        if problem is not None and options is not None:
            cause = likely_cause(space, problem, options, result.face_penalty)
        if not cause.startswith("the values overflow") and largest > HUGE:
            cause = (f"the matrix and load reach {largest:.3g}, too large for double precision's products and sums "
                     "(lower --penalty or scale the coefficients)")
    if cause.startswith("the values overflow") or largest > HUGE:  # the cause first, the solver's advice dropped
        raise NonFiniteError(f"{cause}; {getattr(failure, 'failure', failure)}{printed}") from failure
    if printed:
        if isinstance(failure, SolverError):  # what the solver printed belongs to the failure, before the advice
            raise SolverError(f"{failure.failure}{printed}", advice=failure.advice) from failure
        try:
            raise type(failure)(f"{failure}{printed}") from failure
        except TypeError:  # an exception that takes other arguments: as it is
            pass
    raise failure


__all__ = ["name_the_kernels", "run", "solve_and_say"]
