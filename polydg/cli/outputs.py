"""What a run writes and prints: ``--output DIR`` (never half-written), each rank's rows (``--no-gather``),
the summary (``--json``, DIR/summary.json) and the paper-style table."""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np

from .content import compilation_summary, mesh_writer, run_pictures, solution_sample, with_compilation
from .inputs import RunOptions, quadrature_simplices


def report(args: argparse.Namespace, opts: RunOptions, say, space, problem, result, timings: dict,
           solved: tuple | None = None, extra: dict | None = None) -> dict:
    """Write ``--output`` and ``--json``, print the table; returns the summary.

    ``solved`` = (x, solve_info, errors) when the run solved; ``extra`` adds keys to the summary
    (the ranks' run: ``ranks``, ``timings_per_rank``, ...).
    """
    from ..report import format_table, summary_dict, write_json

    x, solve_info, errs = solved or (None, None, None)
    if solve_info is not None:
        timings["solve"] = solve_info["seconds"]
    sample = solution_sample(args, space, x)  # evaluated before the compile figure is taken
    options = {"mesh": opts.mesh_spec, "problem": problem.name, "memory_budget": args.memory_budget,
               "repeat": args.repeat,
               "quadrature_simplices": quadrature_simplices(args, problem) if space.mesh.dim == 2 else "fine"}
    summary = summary_dict(mesh=space.mesh, space=space, result=result, options=options,
                           timings=with_compilation(timings), errors=errs, solve_info=solve_info,
                           ranks=(extra or {}).get("ranks", 1))
    summary.update(extra or {})
    summary.update(compilation_summary())
    if args.output:
        files = [("solution.vtu", sample.write_vtu) if sample is not None else ("mesh.vtu", mesh_writer(space))]
        if getattr(args, "plot", False):
            files += run_pictures(space.mesh, sample, summary, solve_info)
        write_output(Path(args.output), space, result, x, summary, files)
        say(f"wrote {args.output}")
    if args.json:
        write_json(args.json, summary)
    if not args.quiet:
        print(format_table(summary))
    return summary


def write_output(directory: Path, space, result, x, summary, files: list = ()) -> None:
    """Write every output file into a temporary folder, then move them in: never half-written.

    ``files``: the run's other files as (name, writer), each writer called with its path in the folder
    (the solution on the sub-simplices, a slab series, pictures).
    """
    import scipy.sparse as sp

    from ..backend import to_host
    from ..report import write_json

    directory = directory.resolve()
    directory.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{directory.name}-", dir=directory.parent))
    try:
        matrix = result.matrix
        if not sp.issparse(matrix):  # a cupyx matrix (--backend cupy): copied to the host once, here
            matrix = matrix.get()
        sp.save_npz(tmp / "matrix.npz", matrix)
        np.save(tmp / "rhs.npy", to_host(result.rhs))
        if x is not None:
            np.save(tmp / "solution.npy", x)
        for name, write in files:
            write(tmp / name)
        write_json(tmp / "summary.json", summary)
        directory.mkdir(exist_ok=True)
        for f in tmp.iterdir():
            os.replace(f, directory / f.name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def write_rank_rows(directory: Path, result, comm) -> None:
    """Each rank writes ``rows-rank<R>.npz`` (its rows in the rank numbering: data, indices, indptr,
    shape, row_range, dofs = the single-process number of each row, rhs).

    Written under a temporary name and renamed only when every rank has
    written its file: a failure leaves no partial set behind.
    """
    from ..distributed.comm import collective_phase

    directory = directory.resolve()
    if comm.Get_rank() == 0:
        directory.mkdir(parents=True, exist_ok=True)
    comm.Barrier()
    final = directory / f"rows-rank{comm.Get_rank()}.npz"
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{final.name}-", suffix=".npz")
    os.close(fd)
    try:
        with collective_phase(comm):
            m = result.matrix
            np.savez(tmp, data=m.data, indices=m.indices, indptr=m.indptr, shape=np.array(m.shape),
                     row_range=np.array(result.row_range), dofs=result.dofs, rhs=result.rhs)
        os.replace(tmp, final)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


__all__ = ["report", "write_output", "write_rank_rows"]
