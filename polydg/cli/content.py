"""What a run's files hold beside the matrix and load, and its compile figure: the solution on the
sub-simplices (:mod:`polydg.output`), the pictures of ``--plot`` (:mod:`polydg.plot`), and the figure of
the run's :func:`polydg.jit.compile_watch` for the table and summary.json.

Each file is a ``(name, writer)`` that :func:`polydg.cli.outputs.write_output` calls with the file's path
in its temporary folder.
"""

from __future__ import annotations

import argparse


def solution_sample(args: argparse.Namespace, space, x):
    """The solution on the sub-simplices (:func:`polydg.output.sample_solution`) when the run writes it."""
    if not args.output or x is None:
        return None
    from ..output import sample_solution

    return sample_solution(space, x)


def mesh_writer(space):
    """The mesh's sub-simplices with their element and degree (a run that did not solve)."""
    from ..output import write_mesh_vtu

    return lambda path: write_mesh_vtu(path, space)


def with_compilation(timings: dict) -> dict:
    """``timings`` with ``jit`` the run's compile figure (:func:`polydg.jit.current_watch`), said now."""
    from ..jit import current_watch

    watch = current_watch()
    if watch is not None:
        timings["jit"] = watch.finish()
    return timings


def compilation_summary() -> dict:
    """summary.json's ``jit``: what compiled, and how long, by part."""
    from ..jit import current_watch

    watch = current_watch()
    return {"jit": watch.summary()} if watch is not None else {}


def run_pictures(mesh, sample, summary: dict, solve_info: dict | None) -> list:
    """``--plot``: the run's PNGs as (file name, writer) (:func:`polydg.plot.run_pictures`)."""
    from ..plot import run_pictures as pictures

    return pictures(mesh, sample, summary, solve_info)


__all__ = ["compilation_summary", "mesh_writer", "run_pictures", "solution_sample", "with_compilation"]
