"""The space-time run of ``python -m polydg.assemble`` (``--time-slabs N --final-time T``).

It marches the problem over N equal slabs of (0, T), prints one progress line
per slab, the paper-style table of the last slab that assembled its matrix
(the last slab, unless later ones kept it and assembled their load alone;
compilation is timed apart) and the totals over all slabs, and writes the
summary with the keys ``slabs``, ``final_time``, ``timings_per_slab``,
``timings_all_slabs``, ``errors`` {l2 at T, l2_l2}, ``assembled_per_slab``
("matrix+load", "load" or "none" per slab) and ``table_slab`` (the table's).
``--space-time-basis P|PQ`` picks the space and ``--local-steps M`` (or
``M1:M2``, random per element with ``--seed``) the steps inside each slab;
the summary adds ``space_time_basis`` and ``local_steps`` {min, max,
elements_per_slab} (null without local steps).
"""

from __future__ import annotations

import argparse
from typing import Any, Callable

import numpy as np

from ..errors import OptionError, ProblemError
from ..mesh.quadrature_simplices import DEFAULT_QUADRATURE_SIMPLICES
from ..problem import Problem
from .inputs import RunOptions
from .content import compilation_summary, run_pictures, with_compilation
from .outputs import write_summary_and_output
from .progress import activity
from .targets import OutputDirectory

#: the final time when --final-time is not given
DEFAULT_FINAL_TIME = 1.0


def check_space_time_options(args: argparse.Namespace, problem: Problem) -> None:
    """One-line errors for a space-time run that cannot start (before any mesh work)."""
    if not problem.space_time:
        given = [name for name, value in (("--time-slabs", args.time_slabs), ("--final-time", args.final_time),
                                          ("--space-time-basis", getattr(args, "space_time_basis", None)),
                                          ("--local-steps", getattr(args, "local_steps", None)))
                 if value is not None]
        if given:
            from ..problem.builtin import SPACE_TIME_SIBLINGS

            sibling = SPACE_TIME_SIBLINGS.get(problem.name)
            raise OptionError(f"problem {problem.name!r} is steady: {', '.join(given)} "
                              f"{'is' if len(given) == 1 else 'are'} for space-time problems"
                              + (f" (its space-time form: --problem {sibling})" if sibling else ""))
        return
    if problem.initial is None:
        raise ProblemError(f"space-time problem {problem.name!r} has no initial value (initial)")
    if args.repeat > 1:
        raise OptionError(f"--repeat times a steady problem's assembly; problem {problem.name!r} is marched "
                          f"slab by slab: drop --repeat {args.repeat}")
    if args.time_slabs is None:
        raise OptionError(f"problem {problem.name!r} is a space-time problem: give --time-slabs N "
                          "(and --final-time T)")
    if args.time_slabs < 1:
        raise OptionError(f"--time-slabs must be a positive integer, got {args.time_slabs} "
                          f"(problem {problem.name!r})")
    final_time = DEFAULT_FINAL_TIME if args.final_time is None else args.final_time
    if not (np.isfinite(final_time) and final_time > 0):
        raise OptionError(f"--final-time must be a positive finite number, got {final_time} "
                          f"(problem {problem.name!r})")
    parse_local_steps(getattr(args, "local_steps", None))


def parse_local_steps(text: str | None) -> tuple[int, int] | None:
    """``--local-steps M`` or ``M1:M2`` as (M1, M2) (M: (M, M)); None when not given."""
    if text is None:
        return None
    parts = text.split(":")
    try:
        low, high = int(parts[0]), int(parts[-1])
    except ValueError:
        raise OptionError(f"--local-steps {text!r}: expected an integer M or a range M1:M2") from None
    if len(parts) > 2:
        raise OptionError(f"--local-steps {text!r}: expected an integer M or a range M1:M2")
    if low < 1:
        raise OptionError(f"--local-steps {text!r}: local steps must be >= 1")
    if low > high:
        raise OptionError(f"--local-steps {text!r}: expected M1 <= M2")
    return low, high


def run_space_time(args: argparse.Namespace, opts: RunOptions, problem: Problem, mesh: Any, degree: Any,
                   say: Callable[[str], None], assembler: Any = None) -> dict:
    """March ``problem`` on the spatial polytopic ``mesh`` with the run's assembly options; write, print;
    return the summary.

    ``assembler`` assembles the slabs instead of one process
    (:class:`polydg.distributed.spacetime.SlabAssembler`: all MPI ranks).
    ``--output`` gets the last slab's matrix, load (without the bottom
    term) and solution coefficients, the solution at each slab's end on the
    spatial mesh (``solution-slab-NNNN.vtu``, listed in time by
    ``solution.pvd``; ``solution.vtu`` the last) and, with ``--plot``, the
    pictures.
    """
    from ..output import SlabSeries
    from ..report import format_table, summary_dict
    from ..spacetime.march import march
    from ..spacetime.slab import random_local_steps
    from .nonlinear import nonlinear_options

    final_time = DEFAULT_FINAL_TIME if args.final_time is None else float(args.final_time)
    quadrature_simplices = getattr(args, "quadrature_simplices", None) or DEFAULT_QUADRATURE_SIMPLICES
    steps = parse_local_steps(getattr(args, "local_steps", None))
    if steps is not None:
        steps = steps[0] if steps[0] == steps[1] else random_local_steps(mesh.n_elements, *steps, seed=args.seed)
    # the solution at each slab's end, written as it comes into --output's staging folder: published
    # with the rest at the end, removed if the run stops before
    target = OutputDirectory(args.output) if args.output else None
    series = SlabSeries(target.stage()) if target is not None else None
    watch = getattr(getattr(assembler, "comm", None), "watch", None)  # on ranks: a job ended while rank 0
    if watch is not None and target is not None:  # waits inside MPI removes the staging folder too
        watch.at_abort(lambda: target.discard(target.staging))
    try:
        with activity(say, f"marching over {int(args.time_slabs)} slabs"):  # the slabs' lines print above it
            result = march(mesh, problem, degree, n_slabs=int(args.time_slabs), final_time=final_time,
                           method="direct" if args.solve in (None, "auto") else args.solve,
                           space_time_basis=args.space_time_basis or "P", local_steps=steps, quadrature_simplices=quadrature_simplices, progress=say,
                           assembler=assembler, options=opts.assembly,
                           nonlinear=nonlinear_options(args, opts) if problem.nonlinear else None,
                           on_slab=series.add if series is not None else None)
        per_slab = result.timings
        totals = result.total_timings()
        assembled = result.info["assembled_per_slab"]
        table_slab = max((n for n, what in enumerate(assembled) if what == "matrix+load"), default=len(per_slab) - 1)
        one = with_compilation(dict(per_slab[table_slab]))
        options = {"mesh": opts.mesh_spec, "problem": problem.name, "memory_budget": args.memory_budget, "repeat": 1,
                   "quadrature_simplices": quadrature_simplices if mesh.dim == 2 else "fine"}
        summary = summary_dict(mesh=result.space.mesh, space=result.space, result=result.assembly, options=options,
                               timings=one, errors=result.errors, solve_info=result.info["solver"],
                               ranks=assembler.comm.Get_size() if assembler is not None else 1)
        if "solver" in summary:  # the last slab's solve (the table's timings are table_slab's)
            summary["solver"]["slab"] = len(per_slab)
        summary.update(slabs=int(args.time_slabs), final_time=final_time, space_time_basis=result.space.basis,
                       timings_per_slab=[{k: float(v) for k, v in t.items()} for t in per_slab],
                       timings_all_slabs=totals, factorisations=result.info["factorisations"],
                       assembled_per_slab=assembled, table_slab=table_slab + 1,
                       local_steps=result.info["local_steps"], **compilation_summary())
        if problem.nonlinear:
            summary["nonlinear"] = {"method": args.nonlinear or "newton",
                                    "iterations_per_slab": result.info["nonlinear_iterations_per_slab"]}
        if assembler is not None:  # each slab's timings per rank; the table's are the slowest rank's
            summary.update(timings_per_rank=assembler.rank_timings[-1], rank_timings_per_slab=assembler.rank_timings,
                           balance=result.assembly.info["balance"], per_rank=result.assembly.info["per_rank"])
        files = None
        if args.output:
            files = [("solution.vtu", series.last.write_vtu), *series.files()]
            if getattr(args, "plot", False):
                files += run_pictures(mesh, series.last, summary, result.info["solver"])
        write_summary_and_output(args, say, result.space, result.assembly, result.solution, summary, files=files,
                                 target=target)
    except BaseException:
        if target is not None:
            target.discard(target.staging)
        raise
    if not args.quiet:
        print(format_table(summary))
        loads = assembled.count("load")
        print(f"\n{summary['slabs']} slabs of (0, {final_time:g}), table above: slab {table_slab + 1}; matrix "
              f"assembled in {assembled.count('matrix+load')} slab{'s' if assembled.count('matrix+load') != 1 else ''}"
              f"{f', the load alone in {loads}' if loads else ''}; all slabs: "
              f"assembly {totals.get('total_assembly', 0.0):.4f} s, bottom load {totals.get('trace', 0.0):.4f} s, "
              f"solve {totals.get('solve', 0.0):.4f} s ({_solves(summary, result.info)}), "
              f"total {totals.get('slab', 0.0):.4f} s (the slabs' wall time with their meshes and errors, the "
              f"assemblies' compilation apart)")
    return summary


def _solves(summary: dict, info: dict) -> str:
    """How the march's slabs were solved, for its last line: Newton's or Picard's iterations (a nonlinear
    problem, each iterate its own solve), else the direct solve's factorisations."""
    nonlinear = summary.get("nonlinear")
    if nonlinear:
        steps = sum(nonlinear.get("iterations_per_slab", []))
        return f"{nonlinear.get('method', 'newton')}: {steps} iteration{'s' if steps != 1 else ''}"
    count = info["factorisations"]
    return f"{count} factorisation{'s' if count != 1 else ''}"


__all__ = ["DEFAULT_FINAL_TIME", "check_space_time_options", "parse_local_steps", "run_space_time"]
