"""What the arguments become: one :class:`RunOptions` (with the run's one
:class:`~polydg.assembly.AssemblyOptions`), the polytopic mesh and its degrees (the progress lines:
:mod:`~polydg.cli.progress`)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..errors import OptionError
from .parser import DEFAULT_AGGLOMERATE, DEFAULT_MESH, parse_degree
from .progress import Progress, chunk_progress

if TYPE_CHECKING:
    from ..assembly import AssemblyOptions


@dataclass(frozen=True)
class RunOptions:
    """The checked choices of a run (the same on every rank).

    mesh_spec : the mesh generator spec or file
    agglomerate : about this many elements by METIS, 0 keeps the input cells
    degrees : (P1, P2), one degree when P1 == P2, else random per element
    method : "auto", "direct" or "iterative" to solve (:func:`polydg.solve.solve`), None not to
    assembly : the options of every assembly of the run (steady, on ranks, per slab)
    """

    mesh_spec: str
    agglomerate: int
    degrees: tuple[int, int]
    method: str | None
    assembly: AssemblyOptions


def check_options(args: argparse.Namespace, say=None) -> RunOptions:
    """The options that need more than argparse's checks, validated (the same on every rank); the backend
    resolved ("auto": ``say`` hears which)."""
    from ..assembly import AssemblyOptions
    from ..backend import resolve_backend

    default_run = args.mesh is None
    n_agg = args.agglomerate if args.agglomerate is not None else (DEFAULT_AGGLOMERATE if default_run else 0)
    lo, hi = parse_degree(args.degree)
    for name, value, low in (("--repeat", args.repeat, 1), ("--agglomerate", n_agg, 0),
                             ("--quadrature-extra", args.quadrature_extra, 0),
                             ("--max-iterations", getattr(args, "max_iterations", 1), 1)):
        if value < low:
            raise OptionError(f"{name} must be >= {low}, got {value}")
    tol = getattr(args, "tol", 0.0)
    if not (np.isfinite(tol) and tol >= 0):
        raise OptionError(f"--tol must be a finite number >= 0, got {tol}")
    for name, value in (("--memory-budget", args.memory_budget), ("--penalty", args.penalty),
                        ("--timeout", getattr(args, "timeout", None))):
        if value is not None and not (np.isfinite(value) and value > 0):
            raise OptionError(f"{name} must be a positive finite number, got {value}")
    from ..partition.agglomerate import MAX_SEED

    if not 0 <= args.seed <= MAX_SEED:
        raise OptionError(f"--seed must be an integer from 0 to 2**63 - 1 (METIS's 64-bit seed), got {args.seed}")
    if getattr(args, "memory_limit", None) is not None:
        import os

        from ..assembly.memory import LIMIT_VARIABLE, parse_size

        parse_size(args.memory_limit, "--memory-limit")
        os.environ[LIMIT_VARIABLE] = args.memory_limit  # for every assembly of the run (and its ranks)
    if getattr(args, "plot", False):
        if not args.output:
            raise OptionError("--plot writes its pictures into --output DIR; give --output")
        if getattr(args, "no_gather", False):
            raise OptionError("--plot needs the whole run on rank 0; drop --no-gather")
        from ..plot import pyplot

        pyplot()  # matplotlib is there, or one line naming the extra, before any work
    backend = resolve_backend(args.backend, say=say)
    if args.to_host and backend == "numpy" and args.backend != "auto":  # said, not refused (as --backend auto is)
        import warnings

        from ..errors import PolyDGWarning

        warnings.warn("--to-host is for a GPU backend: the CPU's matrix is on the host already", PolyDGWarning)
    assembly = AssemblyOptions(approach=args.approach, precision=args.precision, penalty=args.penalty,
                               penalty_kind=args.penalty_kind, quadrature_extra=args.quadrature_extra,
                               memory_budget_mb=args.memory_budget, backend=backend, to_host=args.to_host)
    return RunOptions(mesh_spec=args.mesh or DEFAULT_MESH, agglomerate=n_agg, degrees=(lo, hi),
                      method=args.solve or ("auto" if default_run else None), assembly=assembly)


def load_run_problem(spec: str, dim: int):
    """The problem of ``--problem`` in ``dim`` dimensions; a problem of another dimension is one line that says
    which mesh it needs."""
    from ..errors import DimensionError
    from ..problem import load_problem

    try:
        return load_problem(spec, dim)
    except DimensionError as exc:
        generator = {2: "square:N", 3: "cube:N"}.get(exc.problem_dim)
        if generator is None:
            raise
        raise DimensionError(f"{exc}: give a {exc.problem_dim}D mesh, e.g. --mesh {generator}", exc.problem_dim,
                             exc.mesh_dim) from None


def quadrature_simplices(args: argparse.Namespace, problem) -> str:
    """The run's sub-simplices: the fine cells for a space-time march (it chooses its own) and for data per
    fine cell (each point in one cell), else ``--quadrature-simplices``."""
    from ..mesh.quadrature_simplices import DEFAULT_QUADRATURE_SIMPLICES
    from ..problem.data import uses_cell_data

    if problem.space_time or uses_cell_data(problem):
        return "fine"
    return args.quadrature_simplices or DEFAULT_QUADRATURE_SIMPLICES


def note_replaced_exact(given, problem, say) -> None:
    """Say so where ``--coefficient`` voided the problem's exact solution: the run gives no errors."""
    if getattr(given, "exact", None) is not None and getattr(problem, "exact", None) is None:
        say(f"--coefficient replaces {given.name}'s coefficients: its exact solution no longer holds, so no "
            "errors are computed")


def note_quadrature_simplices(args: argparse.Namespace, problem, dim: int, say) -> None:
    """Say so where ``--quadrature-simplices coarse``, given, gives way to the fine cells (data per fine cell)
    on a 2D mesh (3D meshes keep their tetrahedra in any case)."""
    from ..problem.data import uses_cell_data

    if args.quadrature_simplices == "coarse" and dim == 2 and not problem.space_time and uses_cell_data(problem):
        say("--quadrature-simplices coarse: data per fine cell is read on the fine cells (each quadrature point "
            "in one cell), so the fine cells are the quadrature simplices")


def check_memory_early(opts: RunOptions, fine=None, matrix: bool = True) -> None:
    """Refuse a run whose polytopic mesh, or (with ``matrix``) whose matrix, cannot fit, from the sizes known
    before the polytopic mesh.

    Without ``fine``: a generator's spec (``cube:40``) gives them exactly,
    before the mesh is made; with it (a file), its cells or polygons.  The
    mesh's building is estimated per fine cell
    (:func:`polydg.mesh.polytopic.build_bytes`, refused above the room by a
    margin: :data:`~polydg.mesh.polytopic.SURE_SHARE`); each element has at least
    the lower degree's dofs and a mesh of n elements at least n - 1
    interfaces, so the matrix's estimate is a lower bound and its refusal is
    sure; the assembly checks the exact figure again
    (:mod:`polydg.assembly.memory`).
    """
    from types import SimpleNamespace

    from ..assembly.memory import available_memory, check_early, early_estimate, format_bytes
    from ..errors import MemoryLimitError
    from ..mesh.generators import is_generator_spec, spec_sizes
    from ..mesh.polytopic import SURE_SHARE, build_bytes

    if fine is None:
        if not is_generator_spec(opts.mesh_spec):
            return
        dim, cells, interior = spec_sizes(opts.mesh_spec)
        elements = cells
    else:  # a file: its cells (or polygons), at least one interface fewer than elements
        dim, cells = fine.dim, fine.n_cells
        elements = cells if fine.cell_element is None else int(fine.cell_element.max(initial=-1)) + 1
        interior = elements - 1
    room, source = available_memory()
    if room is not None and SURE_SHARE * build_bytes(dim, cells) > room:
        fits = _largest_generated(opts.mesh_spec, room) if fine is None else None
        raise MemoryLimitError(f"building the polytopic mesh of {opts.mesh_spec}'s {cells:,} cells needs about "
                               f"{format_bytes(build_bytes(dim, cells))}, {format_bytes(room)} is available "
                               f"({source})" + (f"; what fits: {fits}" if fits else ""))
    if not matrix:
        return
    if opts.agglomerate > 0:
        elements = min(opts.agglomerate, elements)
        interior = min(interior, elements - 1)
    interior = max(interior, 0)
    low, high = opts.degrees
    estimate = early_estimate(dim, elements, interior, low, high, opts.assembly.precision)
    check_early(estimate, SimpleNamespace(mesh=SimpleNamespace(dim=dim, n_elements=elements), max_degree=low,
                                          basis="P"))


def _largest_generated(spec: str, room: int) -> str | None:
    """The generator's spec of the most cells per side whose polytopic mesh fits ``room`` bytes, if any."""
    from ..mesh.generators import parse_spec, spec_sizes
    from ..mesh.polytopic import build_bytes

    name, n, _ = parse_spec(spec)
    rest = spec.split(":", 2)[2:]

    def fits(k: int) -> bool:
        dim, cells, _ = spec_sizes(f"{name}:{k}")
        return build_bytes(dim, cells) <= room

    lo, hi = 0, n  # fits(lo) (or lo == 0), not fits(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return ":".join([name, str(lo), *rest]) if lo >= 1 else None


def build_mesh(fine, opts: RunOptions, seed: int, say, quadrature_simplices: str = "fine"):
    """The polytopic mesh (agglomerated or not) with the ``quadrature_simplices`` sub-simplices, and the
    degrees (one, or random per element).

    A space-time march chooses its own (timed with the slab meshes): it passes "fine".
    """
    from ..mesh import build_polytopic_mesh
    from ..mesh.quadrature_simplices import quadrature_mesh
    from ..partition import agglomerate_cells

    if opts.agglomerate > 0:
        mesh = build_polytopic_mesh(fine, agglomerate_cells(fine, opts.agglomerate, seed=seed))
        say(f"agglomerated {fine.n_cells:,} cells into {mesh.n_elements:,} elements")
    else:
        mesh = build_polytopic_mesh(fine)
        say(f"polytopic mesh: {mesh.n_elements:,} elements")
    if quadrature_simplices != "fine" and mesh.dim == 2:
        n_fine = mesh.n_simplices
        mesh = quadrature_mesh(mesh, quadrature_simplices)
        say(f"{quadrature_simplices} quadrature simplices: {n_fine:,} -> {mesh.n_simplices:,} sub-triangles")
    lo, hi = opts.degrees
    degree = lo if lo == hi else np.random.default_rng(seed).integers(lo, hi + 1, size=mesh.n_elements)
    return mesh, degree


__all__ = ["Progress", "RunOptions", "build_mesh", "check_memory_early", "check_options", "chunk_progress",
           "load_run_problem"]
