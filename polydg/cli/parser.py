"""The command line's arguments: :func:`build_parser` (``python -m polydg.assemble --help``)."""

from __future__ import annotations

import argparse

from ..errors import OptionError

DESCRIPTION = """\
Assemble (and solve) an interior-penalty discontinuous Galerkin system on a
polytopic mesh and print the timing table: progress lines go to stderr, the
table to stdout. With no options: the paper's 2D problem, solved."""
DEFAULT_MESH = "square:64"
DEFAULT_AGGLOMERATE = 256

EPILOG = """\
examples:
  python -m polydg.assemble
      the default: paper-2d on square:64 agglomerated into 256 elements, p = 2, solved
  python -m polydg.assemble --mesh cube:16 --agglomerate 3000 --degree 2 --problem paper-3d --solve
  python -m polydg.assemble --mesh mesh.vtk --degree 1:3 --seed 4 --problem poisson --solve iterative --output out/
  python -m polydg.assemble --mesh oscillating-square:200 --agglomerate 2000 --approach 1 --repeat 3
  python -m polydg.assemble --problem my_problems.py:convection --mesh square:32 --json run.json
  python -m polydg.assemble --problem paper-2d1 --time-slabs 8 --output out/ --plot

meshes: square:N, cube:N, oscillating-square:N (options :perturb=F:seed=S), or a file
  (Gmsh .msh, VTU and other meshio formats, legacy VTK POLYDATA polygons).
problems: paper-2d, paper-3d, poisson, advection, change-of-type, neumann,
  polynomial:P[:KIND[:SEED]], path/to/file.py:NAME or package.module:NAME;
  space-time (with --time-slabs N [--final-time T]): paper-2d1, paper-3d1;
  nonlinear (Newton by default): quasilinear, cubic, bratu; space-time fisher-kpp.
output (--output DIR): matrix.npz (scipy.sparse.save_npz), rhs.npy, summary.json, and
  with a solve solution.npy and solution.vtu (the solution at the vertices of every
  sub-simplex, discontinuous across elements, with element id and degree), else mesh.vtu;
  a space-time march also solution-slab-NNNN.vtu (each slab's end) and solution.pvd (the
  time series for ParaView); --plot adds mesh.png, solution.png, timings.png, residuals.png.
  The set replaces the previous run's whole (listed in DIR/.polydg-output); files polydg
  did not write are left alone.
table: seconds per stage and per million dofs (s / Mdof); compilation is timed apart.
threads: NUMBA_NUM_THREADS, else OMP_NUM_THREADS, else every core (shared among the
  ranks of a node); summary.json's "threads" and the table's header say how many ran.
MPI: mpiexec -n N python -m polydg.assemble ... assembles on N ranks; rank 0 reads,
  partitions, gathers, solves and writes.
exit codes: 0 success, 2 bad input (one line on stderr), 130 interrupted (143 SIGTERM),
  1 otherwise (an internal error, out of memory, a --timeout).
"""


class _ArgumentParser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit code 2, like every other input error
        raise OptionError(message)


def build_parser() -> argparse.ArgumentParser:
    from ..mesh.quadrature_simplices import DEFAULT_QUADRATURE_SIMPLICES, QUADRATURE_SIMPLICES
    from ..problem.coefficient_options import SPEC_HELP

    p = _ArgumentParser(prog="python -m polydg.assemble", description=DESCRIPTION,
                        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    g = p.add_argument_group("problem")
    g.add_argument("--mesh", help=f"generator spec or mesh file (default {DEFAULT_MESH})")
    g.add_argument("--agglomerate", type=int, metavar="N",
                   help=f"agglomerate the fine cells into about N elements with METIS; 0 keeps the input cells "
                        f"(default {DEFAULT_AGGLOMERATE} for the default mesh, else 0)")
    g.add_argument("--degree", default="2", metavar="P|P1:P2",
                   help="polynomial degree, or random degrees in [P1, P2] per element (default 2)")
    g.add_argument("--seed", type=int, default=0,
                   help="seed of the random degrees and local steps, also handed to METIS (default 0)")
    g.add_argument("--problem", default="paper",
                   help="built-in name, file.py:NAME or module:NAME (default paper, i.e. paper-2d / paper-3d)")
    g.add_argument("--coefficient", action="append", default=[], metavar="NAME=SPEC",
                   help=f"replace a coefficient of the problem by data or a number: {SPEC_HELP}")
    a = p.add_argument_group("assembly")
    a.add_argument("--precision", default="double", choices=("double", "single"),
                   help="floating point of the assembly: double (default) or single (float32; the solve is in "
                        "double)")
    # the registered reductions (polydg.assembly.reductions), written out so that parsing imports no compiled
    # layer; tests/test_reductions.py checks that they agree
    a.add_argument("--approach", default="auto", choices=("auto", "2", "atomic", "1", "ordered", "blocks"),
                   help="auto (default): the reproducible reduction for the mesh and device (2, or on a GPU "
                        "blocks for agglomerated meshes and large bases); 2: reproducible row kernels; atomic: scatter-add; 1: "
                        "COO baseline; ordered: on a GPU, entity blocks summed per element in a fixed order "
                        "(reproducible); blocks: on a GPU, a thread block per element, a thread per entry of its "
                        "rows (reproducible)")
    a.add_argument("--backend", default="numpy", choices=("numpy", "cupy", "auto"),
                   help="numpy (default), cupy (GPU: the matrix stays on the device and --solve solves there), "
                        "or auto (cupy when a GPU is usable)")
    a.add_argument("--to-host", action="store_true",
                   help="with --backend cupy: copy the matrix to the host after assembly (solve with SciPy)")
    a.add_argument("--penalty", type=float, default=10.0, metavar="C", help="penalty constant C_sigma (default 10)")
    a.add_argument("--penalty-kind", default="classical", choices=("classical", "paper"),
                   help="sigma = C a p^2 / h (classical, default) or the paper's Appendix A")
    a.add_argument("--quadrature-extra", type=int, default=0, metavar="K",
                   help="exactness degree 2p + 1 + K (default 0; raise for rough coefficients)")
    a.add_argument("--quadrature-simplices", default=None, choices=QUADRATURE_SIMPLICES,
                   help="volume quadrature on each 2D element's fine triangles, or on coarse ones: the element "
                        f"re-triangulated from its boundary vertices, fewer and faster (default "
                        f"{DEFAULT_QUADRATURE_SIMPLICES}; 3D meshes keep their tetrahedra)")
    a.add_argument("--memory-budget", type=float, default=None, metavar="MB",
                   help="working memory of one chunk of quadrature points (default 1024 on the CPU, 4096 on a GPU)")
    a.add_argument("--memory-limit", metavar="SIZE",
                   help="the memory the run may use, e.g. 4G or 512M: a run estimated to need more is refused "
                        "before it allocates (default: the memory available, or $POLYDG_MEMORY_LIMIT)")
    a.add_argument("--repeat", type=int, default=1, metavar="N",
                   help="report the median of N assemblies (the first also touches its memory first: 3 or more "
                        "for timings)")
    t = p.add_argument_group("space-time (problems with time: dG in time, slab by slab)")
    t.add_argument("--time-slabs", type=int, metavar="N",
                   help="march a space-time problem (e.g. paper-2d1) over N equal time slabs")
    t.add_argument("--final-time", type=float, metavar="T", help="end of the time interval (0, T) (default 1)")
    t.add_argument("--space-time-basis", choices=("P", "PQ"), metavar="P|PQ",
                   help="P: total degree p in (x, t) (default); PQ: degree p in t times total degree p in x")
    t.add_argument("--local-steps", metavar="M|M1:M2",
                   help="M time steps per element inside each slab, or random in [M1, M2] per element (--seed)")
    n = p.add_argument_group("nonlinear problems (a coefficient of u: e.g. --problem quasilinear)")
    n.add_argument("--nonlinear", choices=("newton", "picard"),
                   help="Newton with the exact Jacobian and a line search (default), or Picard (coefficients "
                        "frozen at each iterate)")
    n.add_argument("--tol", type=float, default=1e-10, metavar="RTOL",
                   help="stop when the residual falls below RTOL times the first one (default 1e-10)")
    n.add_argument("--max-iterations", type=int, default=30, metavar="N",
                   help="give up (exit 2) after N iterations (default 30)")
    o = p.add_argument_group("solve and output")
    o.add_argument("--solve", nargs="?", const="auto", choices=("auto", "direct", "iterative"),
                   help="solve: auto (the default of --solve: direct below a measured size, else AMG-preconditioned "
                        "Krylov), direct (sparse LU), iterative; with cupyx on the device under --backend cupy "
                        "(the default run solves)")
    o.add_argument("--output", metavar="DIR",
                   help="write the matrix, load, summary and solution files into DIR (see output: below)")
    o.add_argument("--plot", action="store_true",
                   help="with --output: also PNG pictures of the mesh, the solution, the timings and residual "
                        "histories (needs matplotlib: pip install 'polydg[plot]')")
    o.add_argument("--no-gather", action="store_true",
                   help="on several ranks: each rank writes its rows to DIR/rows-rank<R>.npz instead of rank 0 "
                        "gathering the matrix (no --solve)")
    o.add_argument("--json", metavar="PATH",
                   help="write the summary as JSON (-: on standard output, and the table on standard error)")
    o.add_argument("--timeout", type=float, metavar="SECONDS",
                   help="on several ranks: end them all when one keeps the others waiting longer than SECONDS "
                        "at one synchronisation point (default: no limit)")
    o.add_argument("--quiet", action="store_true", help="print nothing but errors")
    o.add_argument("--debug", action="store_true", help="show tracebacks")
    return p


def parse_degree(text: str) -> tuple[int, int]:
    """``--degree P`` or ``P1:P2`` as (P1, P2) (P: (P, P)).

    >>> parse_degree("1:3")
    (1, 3)
    """
    parts = text.split(":")
    try:
        lo, hi = (int(parts[0]), int(parts[0])) if len(parts) == 1 else (int(parts[0]), int(parts[1]))
    except ValueError:
        raise OptionError(f"--degree {text!r}: expected an integer P or a range P1:P2") from None
    if len(parts) > 2 or lo > hi:
        raise OptionError(f"--degree {text!r}: expected P or P1:P2 with P1 <= P2")
    if lo < 0:
        raise OptionError(f"--degree {text!r}: polynomial degree must be >= 0")
    return lo, hi


