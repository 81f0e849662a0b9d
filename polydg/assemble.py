"""``python -m polydg.assemble``: assemble (and solve) an IP-dG system from the command line.

With no arguments it runs a small 2D default (the paper's 2D problem on a
unit square of 8,192 triangles agglomerated into 256 polygons, p = 2, solved
directly) and prints what it did.  Run ``python -m polydg.assemble --help``
for the options.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from .backend import quiet_openmp_workers
from .errors import OptionError, PolyDGError
from .jit import announce_compilation

DEFAULT_MESH = "square:64"
DEFAULT_AGGLOMERATE = 256

EPILOG = """\
examples:
  python -m polydg.assemble
      the default: paper-2d on square:64 agglomerated into 256 elements, p = 2, solved
  python -m polydg.assemble --mesh cube:16 --agglomerate 3000 --degree 2 --problem paper-3d --solve
  python -m polydg.assemble --mesh ../shared/meshes/unit_square_voronoi_1000_cells.vtk \\
      --degree 1:3 --seed 4 --problem poisson --solve iterative --output out/
  python -m polydg.assemble --mesh oscillating-square:200 --agglomerate 2000 --approach 1 --repeat 3
  python -m polydg.assemble --problem my_problems.py:convection --mesh square:32 --json run.json

meshes: square:N, cube:N, oscillating-square:N (options :perturb=F:seed=S), or a file
  (Gmsh .msh, VTU and other meshio formats, legacy VTK POLYDATA polygons).
problems: paper-2d, paper-3d, poisson, advection, change-of-type, neumann,
  polynomial:P[:KIND[:SEED]], path/to/file.py:NAME or package.module:NAME;
  space-time (with --time-slabs N [--final-time T]): paper-2d1, paper-3d1.
output (--output DIR): matrix.npz (scipy.sparse.save_npz), rhs.npy, solution.npy (with --solve),
  solution.vtu (element id, degree, element means of the solution), summary.json.
MPI: mpiexec -n N python -m polydg.assemble ... assembles on N ranks (one thread each unless
  NUMBA_NUM_THREADS / OMP_NUM_THREADS is set); rank 0 reads, partitions, gathers and writes.
exit codes: 0 success, 2 bad input (one line on stderr), 1 internal error.
"""


class _ArgumentParser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit code 2, like every other input error
        raise OptionError(message)


def build_parser() -> argparse.ArgumentParser:
    from .mesh.quadrature_simplices import DEFAULT_QUADRATURE_SIMPLICES, QUADRATURE_SIMPLICES

    p = _ArgumentParser(prog="python -m polydg.assemble", description=__doc__.split("\n\n")[0],
                        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    g = p.add_argument_group("problem")
    g.add_argument("--mesh", help=f"generator spec or mesh file (default {DEFAULT_MESH})")
    g.add_argument("--agglomerate", type=int, metavar="N",
                   help=f"agglomerate the fine cells into about N elements with METIS; 0 keeps the input cells "
                        f"(default {DEFAULT_AGGLOMERATE} for the default mesh, else 0)")
    g.add_argument("--degree", default="2", metavar="P|P1:P2",
                   help="polynomial degree, or random degrees in [P1, P2] per element (default 2)")
    g.add_argument("--seed", type=int, default=0, help="seed of the random degrees (default 0)")
    g.add_argument("--problem", default="paper",
                   help="built-in name, file.py:NAME or module:NAME (default paper, i.e. paper-2d / paper-3d)")
    a = p.add_argument_group("assembly")
    a.add_argument("--precision", default="double", choices=("double", "single"))
    a.add_argument("--approach", default="2", choices=("2", "atomic", "1"),
                   help="2: reproducible row kernels (default); atomic: scatter-add; 1: COO baseline")
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
    a.add_argument("--quadrature-simplices", default=DEFAULT_QUADRATURE_SIMPLICES, choices=QUADRATURE_SIMPLICES,
                   help="volume quadrature on each 2D element's fine triangles, or on coarse ones: the element "
                        f"re-triangulated from its boundary vertices, fewer and faster (default "
                        f"{DEFAULT_QUADRATURE_SIMPLICES}; 3D meshes keep their tetrahedra)")
    a.add_argument("--memory-budget", type=float, default=1024.0, metavar="MB",
                   help="working memory of one chunk of quadrature points (default 1024)")
    a.add_argument("--repeat", type=int, default=1, metavar="N", help="report the median of N assemblies")
    t = p.add_argument_group("space-time (DESIGN.md section 6)")
    t.add_argument("--time-slabs", type=int, metavar="N",
                   help="march a space-time problem (e.g. paper-2d1) over N equal time slabs")
    t.add_argument("--final-time", type=float, metavar="T", help="end of the time interval (0, T) (default 1)")
    t.add_argument("--space-time-basis", choices=("P", "PQ"), metavar="P|PQ",
                   help="P: total degree p in (x, t) (default); PQ: degree p in t times total degree p in x")
    t.add_argument("--local-steps", metavar="M|M1:M2",
                   help="M time steps per element inside each slab, or random in [M1, M2] per element (--seed)")
    o = p.add_argument_group("solve and output")
    o.add_argument("--solve", nargs="?", const="direct", choices=("direct", "iterative"),
                   help="solve with SciPy, or with cupyx on the device under --backend cupy (default direct; the "
                        "default run solves)")
    o.add_argument("--output", metavar="DIR", help="write matrix.npz, rhs.npy, solution.npy/.vtu, summary.json")
    o.add_argument("--no-gather", action="store_true",
                   help="on several ranks: each rank writes its rows to DIR/rows-rank<R>.npz instead of rank 0 "
                        "gathering the matrix (no --solve)")
    o.add_argument("--json", metavar="PATH", help="write the summary as JSON")
    o.add_argument("--quiet", action="store_true", help="print nothing but errors")
    o.add_argument("--debug", action="store_true", help="show tracebacks")
    return p


def parse_degree(text: str) -> tuple[int, int]:
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


class _Progress:
    def __init__(self, quiet: bool):
        self.quiet = quiet
        self.start = time.perf_counter()

    def __call__(self, message: str) -> None:
        if not self.quiet:
            print(f"[{time.perf_counter() - self.start:7.2f} s] {message}", file=sys.stderr, flush=True)


def check_options(args: argparse.Namespace, say=None) -> dict:
    """The options that need more than argparse's checks, validated (the same on every rank)."""
    from .backend import resolve_backend

    default_run = args.mesh is None
    n_agg = args.agglomerate if args.agglomerate is not None else (DEFAULT_AGGLOMERATE if default_run else 0)
    lo, hi = parse_degree(args.degree)
    for name, value, low in (("--repeat", args.repeat, 1), ("--agglomerate", n_agg, 0),
                             ("--quadrature-extra", args.quadrature_extra, 0)):
        if value < low:
            raise OptionError(f"{name} must be >= {low}, got {value}")
    if not args.memory_budget > 0:
        raise OptionError(f"--memory-budget must be positive, got {args.memory_budget}")
    if not args.penalty > 0:
        raise OptionError(f"--penalty must be positive, got {args.penalty}")
    return {"mesh_spec": args.mesh or DEFAULT_MESH, "n_agg": n_agg, "degrees": (lo, hi),
            "method": args.solve or ("direct" if default_run else None), "backend": resolve_backend(args.backend, say=say)}


def build_mesh(fine, opts: dict, seed: int, say, quadrature_simplices: str = "fine"):
    """The polytopic mesh (agglomerated or not) with the ``quadrature_simplices`` sub-simplices, and the
    degrees (one, or random per element).

    A space-time march chooses its own (timed with the slab meshes): it passes "fine".
    """
    from .mesh import build_polytopic_mesh
    from .mesh.quadrature_simplices import quadrature_mesh
    from .partition import agglomerate_cells

    if opts["n_agg"] > 0:
        mesh = build_polytopic_mesh(fine, agglomerate_cells(fine, opts["n_agg"], seed=seed))
        say(f"agglomerated {fine.n_cells:,} cells into {mesh.n_elements:,} elements")
    else:
        mesh = build_polytopic_mesh(fine)
        say(f"polytopic mesh: {mesh.n_elements:,} elements")
    if quadrature_simplices != "fine" and mesh.dim == 2:
        n_fine = mesh.n_simplices
        mesh = quadrature_mesh(mesh, quadrature_simplices)
        say(f"{quadrature_simplices} quadrature simplices: {n_fine:,} -> {mesh.n_simplices:,} sub-triangles")
    lo, hi = opts["degrees"]
    degree = lo if lo == hi else np.random.default_rng(seed).integers(lo, hi + 1, size=mesh.n_elements)
    return mesh, degree


def chunk_progress(say):
    def progress(stage: str, done: int, total: int) -> None:
        if total > 1:
            say(f"  {stage}: chunk {done}/{total}")
    return progress


def run(args: argparse.Namespace) -> dict:
    from .assembly import Workspace, assemble
    from .mesh import load_mesh
    from .problem import load_problem
    from .space import DGSpace
    from .spacetime.command import check_space_time_options, run_space_time

    say = _Progress(args.quiet)
    opts = check_options(args, say)
    mesh_spec = opts["mesh_spec"]
    fine = load_mesh(mesh_spec)
    problem = load_problem(args.problem, fine.dim)  # before the first progress line: bad input is one line
    check_space_time_options(args, problem)
    say(f"mesh {mesh_spec}: {fine}")
    kernels = f"{fine.dim + 1}D space-time assembly kernels" if problem.space_time else f"{fine.dim}D assembly kernels"
    # numba reports every compilation; the first one of polydg's kernels prints a line, and the total its time
    with announce_compilation(say, kernels):
        mesh, degree = build_mesh(fine, opts, args.seed, say,
                                  "fine" if problem.space_time else args.quadrature_simplices)
        if problem.space_time:  # slab after slab: polydg/spacetime
            return run_space_time(args, problem, mesh, degree, mesh_spec, args.solve, say, _write_output)
        space = DGSpace(mesh, degree)
        say(f"DG space: {space}; problem {problem.name}")
        runs, result = [], None
        workspace = Workspace()  # the repeats reuse the quadrature points' and coefficients' arrays
        for r in range(args.repeat):
            result = None  # free the previous matrix first
            result = assemble(space, problem, approach=args.approach, precision=args.precision, penalty=args.penalty,
                              penalty_kind=args.penalty_kind, quadrature_extra=args.quadrature_extra,
                              memory_budget_mb=args.memory_budget, backend=opts["backend"],
                              progress=chunk_progress(say), workspace=workspace,
                              # on a GPU the matrix stays there: solved there, copied once for --output
                              to_host=args.to_host or opts["backend"] != "cupy")
            runs.append(result.info["timings"])
            say(f"assembled {space.n_dofs:,} dofs, nnz {result.matrix.nnz:,} in "
                f"{result.info['timings']['total_assembly']:.3f} s" + (f" (run {r + 1}/{args.repeat})" if args.repeat > 1 else ""))
        del workspace  # its memory goes back before the solve
        timings = {k: statistics.median(t[k] for t in runs) for k in runs[0]}
        return finish(args, opts, say, space, problem, result, timings)


def solve_and_say(result, method: str, space, say) -> tuple[np.ndarray, dict]:
    from .solve import solve

    from .backend import to_host

    x, solve_info = solve(result.matrix, result.rhs, method, space=space)
    where = " on the device" if solve_info.get("device") else ""
    say(f"solved{where} ({solve_info.get('solver')}) in {solve_info['seconds']:.3f} s, "
        f"residual {solve_info.get('residual', float('nan')):.2e}")
    return to_host(x), solve_info  # a device solution copied to the host once (errors, output)


def finish(args: argparse.Namespace, opts: dict, say, space, problem, result, timings: dict,
           extra: dict | None = None, solved: tuple | None = None) -> dict:
    """Solve (when asked), compute the errors, and write and print the summary.

    ``solved`` = (x, solve_info, errors) when the caller solved already (the ranks' run).
    """
    from .report import format_table, summary_dict, write_json
    from .solve import errors

    x, solve_info, errs = solved or (None, None, None)
    if opts["method"] and solved is None:
        x, solve_info = solve_and_say(result, opts["method"], space, say)
        if problem.exact is not None:
            errs = errors(space, problem, x, penalty_values=result.face_penalty)
    if solve_info is not None:
        timings["solve"] = solve_info["seconds"]
    options = {"mesh": opts["mesh_spec"], "problem": problem.name, "memory_budget": args.memory_budget,
               "repeat": args.repeat,
               "quadrature_simplices": args.quadrature_simplices if space.mesh.dim == 2 else "fine"}
    summary = summary_dict(mesh=space.mesh, space=space, result=result, options=options, timings=timings,
                           errors=errs, solve_info=solve_info, ranks=(extra or {}).get("ranks", 1))
    summary.update(extra or {})
    if args.output:
        _write_output(Path(args.output), space, result, x, summary)
        say(f"wrote {args.output}")
    if args.json:
        write_json(args.json, summary)
    if not args.quiet:
        print(format_table(summary))
    return summary


def _write_output(directory: Path, space, result, x, summary) -> None:
    """Write every output file into a temporary folder, then move them in: never half-written."""
    import scipy.sparse as sp

    from .mesh.output import write_vtu
    from .report import write_json
    from .solve import element_means

    directory = directory.resolve()
    directory.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{directory.name}-", dir=directory.parent))
    try:
        from .backend import to_host

        matrix = result.matrix
        if not sp.issparse(matrix):  # a cupyx matrix (--backend cupy): copied to the host once, here
            matrix = matrix.get()
        sp.save_npz(tmp / "matrix.npz", matrix)
        np.save(tmp / "rhs.npy", to_host(result.rhs))
        cell_data = {"degree": space.degree}
        if x is not None:
            np.save(tmp / "solution.npy", x)
            cell_data["solution_mean"] = element_means(space, x)
        write_vtu(tmp / "solution.vtu", space.mesh, cell_data)
        write_json(tmp / "summary.json", summary)
        directory.mkdir(exist_ok=True)
        for f in tmp.iterdir():
            os.replace(f, directory / f.name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit code: 0 success, 2 bad input (one line on stderr), 1 internal error.

    polydg's warnings about the input (e.g. what meshio said about a mesh file
    it read nonetheless) are printed as one line each, and not at all with
    ``--quiet``.
    """
    import warnings

    from .errors import PolyDGWarning, one_line

    argv = sys.argv[1:] if argv is None else argv
    quiet_openmp_workers()  # before the first parallel kernel (see its docstring)
    debug = "--debug" in argv
    quiet = "--quiet" in argv
    show_other_warnings = warnings.showwarning
    comm = None

    def show_warning(message, category, filename, lineno, file=None, line=None):
        if not issubclass(category, PolyDGWarning):
            show_other_warnings(message, category, filename, lineno, file, line)
        elif not quiet and (comm is None or comm.Get_rank() == 0):
            print(f"polydg.assemble: warning: {one_line(message)}", file=sys.stderr)

    def report(message: str, exc: BaseException, code: int) -> int:
        """Print once (rank 0, or the failing rank when the others cannot know); end every rank."""
        from .distributed.comm import RankFailure, abort

        known_everywhere = isinstance(exc, (RankFailure, OptionError))
        if comm is None or comm.Get_size() == 1:
            print(message, file=sys.stderr)
        elif known_everywhere:
            if comm.Get_rank() == 0:
                print(message, file=sys.stderr)
        else:  # the other ranks may wait for this one in a collective: end them all
            abort(comm, code, f"{message} (rank {comm.Get_rank()})")
        return code

    try:
        with warnings.catch_warnings():
            warnings.showwarning = show_warning
            if any(a in ("-h", "--help") for a in argv):
                build_parser().print_help()
                return 0
            from .distributed.comm import launched_ranks

            if launched_ranks() > 1:  # started by mpiexec with several ranks
                from .distributed.comm import one_thread_per_rank, world

                comm = world()
                one_thread_per_rank()
            args = build_parser().parse_args(argv)
            quiet = args.quiet
            if comm is not None and comm.Get_size() > 1:
                from .distributed.command import run_distributed

                run_distributed(args, comm, _Progress(args.quiet))
            else:
                run(args)
        return 0
    except PolyDGError as exc:
        if debug:
            raise
        from .distributed.comm import RankFailure

        code = 1 if isinstance(exc, RankFailure) and not exc.input_error else 2
        kind = "error" if code == 2 else "internal error"
        return report(f"polydg.assemble: {kind}: {one_line(exc)}", exc, code)
    except KeyboardInterrupt:
        print("polydg.assemble: interrupted", file=sys.stderr)
        return 130
    except MemoryError as exc:
        if debug:
            raise
        return report("polydg.assemble: error: out of memory (lower --memory-budget or the problem size)", exc, 1)
    except Exception as exc:  # an internal error: one line unless --debug
        if debug:
            raise
        msg = str(exc).splitlines()[0] if str(exc) else ""
        return report(f"polydg.assemble: internal error: {type(exc).__name__}: {msg} (run with --debug for the "
                      "traceback)", exc, 1)


if __name__ == "__main__":
    sys.exit(main())
