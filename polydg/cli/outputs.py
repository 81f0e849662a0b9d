"""What a run writes and prints: ``--output DIR``, each rank's rows (``--no-gather``), the summary
(``--json``, DIR/summary.json) and the paper-style table.

The *content* is here: :func:`output_files` lists the files of ``--output``
as ``(name, writer)`` pairs (what they hold beside the matrix and load:
:mod:`polydg.cli.content`) and :func:`planned_names` the names a run may
write (checked before it starts).  How they are written (whole or not at
all, never beside an earlier run's files, never over a user's) is
:mod:`polydg.cli.targets`.
"""

from __future__ import annotations

import argparse
import sys
from contextlib import contextmanager, redirect_stdout
from contextvars import ContextVar
from pathlib import Path
from typing import Callable

import numpy as np

from .content import compilation_summary, mesh_writer, run_pictures, solution_sample, with_compilation
from .inputs import RunOptions, quadrature_simplices
from .targets import STANDARD_OUTPUT, OutputDirectory, check_directory, check_file, write_file


def planned_names(args: argparse.Namespace, ranks: int = 1) -> list[str]:
    """The files ``--output DIR`` may hold after this run (see :func:`output_files`): checked before the run
    starts, so a superset of what it writes."""
    if getattr(args, "no_gather", False):
        return [f"rows-rank{r}.npz" for r in range(ranks)] + ["summary.json"]
    # solution.npy whenever the run may solve: --solve, the default run, a march, a nonlinear problem (whose
    # problem is not read yet when the targets are checked)
    names = ["matrix.npz", "rhs.npy", "solution.npy", "solution.vtu", "mesh.vtu", "summary.json"]
    slabs = getattr(args, "time_slabs", None)
    if slabs:
        names += [f"solution-slab-{n + 1:04d}.vtu" for n in range(int(slabs))] + ["solution.pvd"]
    if getattr(args, "plot", False):
        names += ["mesh.png", "solution.png", "timings.png", "residuals.png"]
    return names


def check_targets(args: argparse.Namespace, ranks: int = 1) -> None:
    """``--output`` and ``--json`` can be written: one-line errors before any mesh is read."""
    check_directory(args.output, planned_names(args, ranks), "--output")
    check_file(args.json, "--json")


def output_files(space, result, x, summary, files: list = ()) -> list[tuple[str, Callable[[Path], None]]]:
    """The files of ``--output DIR``, as (name, writer(path)) pairs: matrix.npz, rhs.npy,
    solution.npy (with a solution), the run's ``files`` (the solution on the sub-simplices or the mesh,
    a slab series, pictures), summary.json."""
    import scipy.sparse as sp

    from ..backend import to_host
    from ..report import write_json

    matrix = result.matrix
    if not sp.issparse(matrix):  # a cupyx matrix (--backend cupy): copied to the host once, here
        matrix = matrix.get()
    out = [("matrix.npz", lambda path: sp.save_npz(path, matrix)),
           ("rhs.npy", lambda path: np.save(path, to_host(result.rhs)))]
    if x is not None:
        out.append(("solution.npy", lambda path: np.save(path, x)))
    return out + list(files) + [("summary.json", lambda path: write_json(path, summary))]


def write_output(directory: Path | OutputDirectory, space, result, x, summary, files: list = ()) -> None:
    """Write :func:`output_files` into ``directory`` (a path, or an :class:`OutputDirectory` whose staging
    folder holds files written already), replacing its previous set whole."""
    target = directory if isinstance(directory, OutputDirectory) else OutputDirectory(directory)
    target.write(output_files(space, result, x, summary, files))


def rank_rows_writer(result) -> Callable[[Path], None]:
    """The writer of ``rows-rank<R>.npz``: the rank's rows in the rank numbering (data, indices, indptr,
    shape, row_range, dofs = the single-process number of each row, rhs), with ``format`` as
    ``scipy.sparse.save_npz`` writes it, so that ``scipy.sparse.load_npz`` reads the rows as a CSR matrix."""
    def write(path: Path) -> None:
        m = result.matrix
        with open(path, "wb") as fh:
            np.savez(fh, format=np.array(b"csr"), data=m.data, indices=m.indices, indptr=m.indptr,
                     shape=np.array(m.shape), row_range=np.array(result.row_range), dofs=result.dofs, rhs=result.rhs)
    return write


def summarise(args: argparse.Namespace, opts: RunOptions, space, problem, result, timings: dict,
              solved: tuple | None = None, extra: dict | None = None) -> dict:
    """The run's summary (summary.json, ``--json``).

    ``solved`` = (x, solve_info, errors) when the run solved; ``extra`` adds keys to the summary
    (the ranks' run: ``ranks``, ``timings_per_rank``, ...).
    """
    from ..report import summary_dict

    x, solve_info, errs = solved or (None, None, None)
    if solve_info is not None:
        timings["solve"] = solve_info["seconds"]
    options = {"mesh": opts.mesh_spec, "problem": problem.name, "memory_budget": args.memory_budget,
               "repeat": args.repeat, "repeat_totals": getattr(args, "repeat_totals", None), "run": run_record(args),
               "quadrature_simplices": quadrature_simplices(args, problem) if space.mesh.dim == 2 else "fine"}
    summary = summary_dict(mesh=space.mesh, space=space, result=result, options=options,
                           timings=with_compilation(timings), errors=errs, solve_info=solve_info,
                           ranks=(extra or {}).get("ranks", 1))
    summary.update(extra or {})
    summary.update(compilation_summary())
    return summary


def write_summary_and_output(args: argparse.Namespace, say, space, result, x, summary: dict,
                             solve_info: dict | None = None, files: list | None = None, sample=None,
                             target: OutputDirectory | None = None) -> None:
    """``--output`` (the whole set) and ``--json``.  ``files``: the run's own files beside the matrix
    (by default the solution on the sub-simplices, ``sample`` when sampled already, or the mesh, and with
    ``--plot`` the pictures); ``target``: ``--output``'s :class:`OutputDirectory` when the run staged it."""
    from ..report import write_json

    if args.output:
        if files is None:
            sample = sample if sample is not None else solution_sample(args, space, x)
            files = [("solution.vtu", sample.write_vtu) if sample is not None else ("mesh.vtu", mesh_writer(space))]
            if getattr(args, "plot", False):
                files += run_pictures(space.mesh, sample, summary, solve_info)
        write_output(target if target is not None else Path(args.output), space, result, x, summary, files)
        say(f"wrote {args.output}")
    if args.json:
        write_json_summary(args.json, summary)


def write_json_summary(target: str, summary: dict) -> None:
    """``--json PATH``: the summary written whole (beside, then renamed); ``--json -``: on standard output
    (the one :func:`summary_on_stdout` kept)."""
    from ..report import json_text, write_json

    if target == STANDARD_OUTPUT:
        out = _SUMMARY_OUT.get() or sys.stdout
        out.write(json_text(summary))
        out.flush()
    else:
        write_file(target, lambda path: write_json(path, summary))


#: standard output while :func:`summary_on_stdout` sends the rest to standard error
_SUMMARY_OUT: ContextVar = ContextVar("summary_out", default=None)


@contextmanager
def summary_on_stdout(args: argparse.Namespace):
    """With ``--json -``, the run's standard output is the summary alone, so that it parses: everything else
    the run prints there (the table, a problem file's or a solver's own lines) goes to standard error."""
    if getattr(args, "json", None) != STANDARD_OUTPUT:
        yield
        return
    token = _SUMMARY_OUT.set(sys.stdout)
    try:
        with redirect_stdout(sys.stderr):
            yield
    finally:
        _SUMMARY_OUT.reset(token)


def report(args: argparse.Namespace, opts: RunOptions, say, space, problem, result, timings: dict,
           solved: tuple | None = None, extra: dict | None = None) -> dict:
    """Write ``--output`` and ``--json``, print the table; returns the summary (see :func:`summarise`)."""
    from ..report import format_table

    x, solve_info, _ = solved or (None, None, None)
    sample = solution_sample(args, space, x)  # before the compile figure is taken (it may compile)
    summary = summarise(args, opts, space, problem, result, timings, solved, extra)
    write_summary_and_output(args, say, space, result, x, summary, solve_info, sample=sample)
    if not args.quiet:
        print(format_table(summary))
    return summary


def run_record(args) -> dict:
    """What a summary needs to run the same job again: the command's words, the seeds and targets it was given,
    the host, and the sources' digest (the kernel cache's key, which names this process's cache directory)."""
    import platform

    import polydg

    cpu = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as lines:
            cpu = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), "")
    except OSError:
        pass
    return {"argv": getattr(args, "argv", None), "seed": args.seed, "agglomerate": args.agglomerate,
            "host": platform.node(), "machine": platform.machine(), "cpu": cpu or platform.processor(),
            "polydg_sources": polydg.CACHE_DIRECTORY.name.removeprefix("polydg-")}


__all__ = ["check_targets", "output_files", "planned_names", "rank_rows_writer", "report", "run_record",
           "summarise", "summary_on_stdout", "write_json_summary", "write_output", "write_summary_and_output"]
