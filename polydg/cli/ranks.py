"""The command line on several ranks: ``mpiexec -n N python -m polydg.assemble ...``.

Rank 0 reads or generates the mesh, agglomerates it and partitions it; every
rank assembles its rows; rank 0 gathers the matrix (for ``--solve`` and
``--output``), solves, computes the errors and writes and prints the summary.
A space-time problem: rank 0 marches, every rank assembles each slab's rows.
Progress lines come from rank 0 only.
"""

from __future__ import annotations

import argparse
import statistics

import numpy as np

from ..distributed.comm import collective_phase
from ..errors import OptionError
from ..jit import compile_watch
from .inputs import build_mesh, check_memory_early, check_options, chunk_progress, load_run_problem, \
    note_quadrature_simplices, note_replaced_exact, quadrature_simplices
from .content import solution_sample
from .outputs import (check_targets, planned_names, rank_rows_writer, summarise, write_json_summary,
                      write_summary_and_output)
from .nonlinear import check_nonlinear_options
from .spacetime import check_space_time_options, run_space_time
from .steady import name_the_kernels, solve_and_say


def run_distributed(args: argparse.Namespace, comm, say) -> dict | None:
    """Run the command line's job on the ranks of ``comm``; rank 0 returns the summary, the others None."""
    try:
        with compile_watch(say if comm.Get_rank() == 0 else None):  # each rank compiles; rank 0's figure is said
            return _run_distributed(args, comm, say)
    finally:
        if hasattr(say, "close"):
            say.close()


def _run_distributed(args: argparse.Namespace, comm, say) -> dict | None:
    from ..assembly import Workspace
    from ..distributed import assemble_distributed
    from ..mesh import load_mesh
    from ..problem.coefficient_options import replaced, replacements
    from ..space import DGSpace

    rank, size = comm.Get_rank(), comm.Get_size()
    root = rank == 0
    quiet = (lambda message: None)
    tell = say if root else quiet
    with collective_phase(comm):  # before any work: where rank 0 will write
        if root:
            check_targets(args, size)
    opts = check_options(args, tell)  # the same options on every rank: the same error everywhere, printed once
    if args.no_gather and opts.method:
        raise OptionError("--solve needs the whole matrix on rank 0; drop --no-gather")
    if args.no_gather and not args.output:
        raise OptionError("--no-gather writes each rank's rows into --output DIR; give --output")
    space, dim = None, None
    gathers = bool(opts.method or (args.output and not args.no_gather))  # rank 0 will hold the whole matrix
    with collective_phase(comm):
        if root:
            check_memory_early(opts, matrix=gathers)  # rank 0 builds the polytopic mesh in every case
            fine = load_mesh(opts.mesh_spec)
            dim = fine.dim
    dim = comm.bcast(dim, root=0)
    with collective_phase(comm):
        problem = load_run_problem(args.problem, dim)
        # --coefficient: rank 0 read the mesh and its cell data; the others get the replaced coefficients
        fields = replacements(problem, args.coefficient, fine) if root and args.coefficient else None
    given, problem = problem, replaced(problem, comm.bcast(fields, root=0))
    if root:
        note_replaced_exact(given, problem, say)
    with collective_phase(comm):
        check_space_time_options(args, problem)
        check_nonlinear_options(args, opts, problem)
        if problem.space_time and args.no_gather:
            raise OptionError("--no-gather is for steady problems; a space-time march solves every slab on rank 0")
        if problem.nonlinear and args.no_gather:
            raise OptionError("--no-gather is for linear problems; a nonlinear one is solved on rank 0")
        if root:
            note_quadrature_simplices(args, problem, dim, say)
            check_memory_early(opts, fine, matrix=gathers)
    if problem.space_time:
        return _march_on_ranks(args, opts, comm, problem, fine if root else None, say)
    name_the_kernels(dim, problem, opts)
    with collective_phase(comm):
        if root:
            say(f"mesh {opts.mesh_spec}: {fine} on {size} ranks")
            mesh, degree = build_mesh(fine, opts, args.seed, say, quadrature_simplices(args, problem))
            del fine
            space = DGSpace(mesh, degree)
            say(f"DG space: {space}; problem {problem.name}")
    if problem.nonlinear:
        return _nonlinear_on_ranks(args, opts, comm, problem, space, say)
    runs, result = [], None
    workspace = Workspace()
    for r in range(args.repeat):
        previous, result = result, None
        if previous is not None:  # only its partition and parts are reused (each run makes its plan): free its matrix
            previous.matrix = previous.rhs = previous.assembler = None
        result = assemble_distributed(space, problem, comm, opts.assembly, reuse=previous, workspace=workspace,
                                      progress=chunk_progress(tell) if size == 1 else None, say=tell)
        if root:
            runs.append(result.info["timings_max"])
            say(f"assembled {result.info['dofs']:,} dofs on {size} ranks in "
                f"{result.info['timings_max']['total_assembly']:.3f} s (slowest rank)"
                + (f" (run {r + 1}/{args.repeat})" if args.repeat > 1 else ""))
    del workspace
    args.repeat_totals = [t["total_assembly"] for t in runs]  # rank 0's record of the slowest ranks' totals
    gathered = None
    with collective_phase(comm):
        if gathers:
            gathered = result.gather()
        elif root:  # the summary's sizes and options, without the matrix
            from ..assembly import AssemblyResult

            gathered = AssemblyResult(_NnzOnly(sum(r["nnz"] for r in result.info["per_rank"])), np.zeros(0),
                                      np.zeros(0), result.info)
    if root and gathered.info.get("gather_seconds") is not None:  # said when it happened: before the solve
        say(f"gathered the matrix on rank 0 in {gathered.info['gather_seconds']:.3f} s")
    solved = None
    if opts.method:  # rank 0 solves; the ranks compute the errors, each its part
        x, solve_info = None, None
        with collective_phase(comm):  # a failed solve must not leave the ranks waiting for x
            if root:
                x, solve_info = solve_and_say(gathered, opts.method, space, say, problem, opts.assembly)
        errs = result.errors(problem, x) if problem.exact is not None else None
        solved = (x, solve_info, errs)
    summary, sample = None, None
    x, solve_info, _ = solved or (None, None, None)
    if root:
        sample = solution_sample(args, space, x)  # before the compile figure is taken (it may compile)
        timings = {k: statistics.median(t[k] for t in runs) for k in runs[0]}
        for key in ("partition", "distribute"):  # done once, by the first run
            timings[key] = runs[0][key]
        if gathered.info.get("gather_seconds") is not None:  # the matrix to rank 0, for the solve or the output
            timings["gather"] = gathered.info["gather_seconds"]
        info = result.info
        extra = {
            "ranks": size,
            "timings_per_rank": info["timings_per_rank"],
            "balance": info["balance"],
            "per_rank": info["per_rank"],
            "threads_per_rank": _threads(),
        }
        summary = summarise(args, opts, space, problem, gathered, timings, solved, extra)
    if args.no_gather:
        _write_rank_rows(args, comm, result, summary, tell)
    else:  # rank 0 writes, the others wait: a failure or an interrupt on any rank ends them all, cleaned up
        with collective_phase(comm):
            if root:
                write_summary_and_output(args, say, space, gathered, x, summary, solve_info, sample=sample)
    if root and not args.quiet:
        from ..report import format_table

        print(format_table(summary))
    return summary


def _write_rank_rows(args, comm, result, summary: dict | None, tell) -> None:
    """``--no-gather``: each rank writes ``rows-rank<R>.npz`` into rank 0's staging folder inside DIR,
    rank 0 adds summary.json and publishes the set (see :mod:`polydg.cli.targets`)."""
    from ..report import write_json
    from .targets import OutputDirectory

    root = comm.Get_rank() == 0
    target, staging = (OutputDirectory(args.output), None) if root else (None, None)
    try:
        with collective_phase(comm):
            if root:
                staging = target.stage()
                if getattr(comm, "watch", None) is not None:  # a job ended while rank 0 waits inside MPI
                    comm.watch.at_abort(lambda: target.discard(target.staging))
        staging = comm.bcast(staging, root=0)
        with collective_phase(comm):
            rank_rows_writer(result)(staging / f"rows-rank{comm.Get_rank()}.npz")
        with collective_phase(comm):
            if root:
                write_json(staging / "summary.json", summary)
                target.publish(staging, planned_names(args, comm.Get_size()))
                if args.json:
                    write_json_summary(args.json, summary)
    except BaseException:
        if root:
            target.discard(staging)
        raise
    tell(f"each rank wrote its rows into {args.output}")


def _march_on_ranks(args, opts, comm, problem, fine, say) -> dict | None:
    """Space-time: rank 0 marches (meshes, bottom loads, solves), every rank assembles each slab's rows."""
    from ..distributed.spacetime import SlabAssembler, follow_march

    dim = comm.bcast(fine.dim if fine is not None else None, root=0)
    if comm.Get_rank() != 0:
        follow_march(comm, problem, dim)
        return None
    assembler = SlabAssembler(comm, problem, dim)
    try:
        name_the_kernels(dim, problem, opts)
        mesh, degree = build_mesh(fine, opts, args.seed, say)
        summary = run_space_time(args, opts, problem, mesh, degree, say, assembler=assembler)
    except BaseException as error:
        assembler.done(error)
        raise
    assembler.done()
    return summary


def _nonlinear_on_ranks(args, opts, comm, problem, space, say) -> dict | None:
    """Newton (or Picard) on rank 0, every rank linearising its rows at each iterate."""
    from ..distributed.comm import RankFailure
    from ..distributed.nonlinear import DistributedNonlinearSystem
    from .nonlinear import nonlinear_options, run_nonlinear

    root = comm.Get_rank() == 0
    system = DistributedNonlinearSystem(space, problem, comm, opts.assembly, say=say if root else None,
                                        linear_solver=nonlinear_options(args, opts).linear_solver)
    if not root:
        system.follow()
        return None
    try:
        summary = run_nonlinear(args, opts, problem, space, say, system=system,
                                extra={"ranks": comm.Get_size(), "threads_per_rank": _threads()})
    except RankFailure:
        raise
    except BaseException:
        system.finish()
        raise
    system.finish()
    return summary


class _NnzOnly:
    """Stands in for the matrix in the summary when it was not gathered."""

    def __init__(self, nnz: int):
        self.nnz = nnz


def _threads() -> int:
    import numba

    return int(numba.get_num_threads())


__all__ = ["run_distributed"]
