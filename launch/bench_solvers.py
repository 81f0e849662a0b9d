"""Iterative solver benchmark: AMG against block-Jacobi (and ILU) preconditioning.

For each problem (``--problems``), degree (``--degrees``) and size
(``--dofs``, the number of dofs asked), the unit square ``square:N`` is
agglomerated into about ``dofs / n_basis(p)`` elements (about four triangles
per element, ``N = ceil(sqrt(2 M))``), the system assembled once, and
:func:`polydg.solve.solve` run with ``method="iterative"`` and each
preconditioner (``--preconditioners``):

* ``amg``: ``preconditioner="amg", space=space`` (block-Jacobi smoothing,
  root-node smoothed aggregation on the degree <= 1 modes);
* ``amg-blocks``: ``preconditioner="amg", block_sizes=space.element_dofs``,
  what ``python -m polydg.assemble --solve iterative`` passes (coarse space:
  the element constants);
* ``block-jacobi``: ``preconditioner="block-jacobi"`` (CG or GMRES);
* ``ilu``: ``preconditioner="ilu"`` (GMRES; the nonsymmetric default without
  pyamg), run on nonsymmetric matrices only unless named with ``--ilu-symmetric``.

Reported per row, as medians of ``--repeat`` runs: Krylov iterations, the
preconditioner's setup time, the Krylov time ("solve") and their total, and
the true relative residual.  A run slower than ``--single-above`` seconds is
not repeated.  A solve that does not converge within ``--maxiter`` iterations
is reported as such with its time.  The solutions of one case are compared
with each other (``max diff``: largest relative difference to the first
converged one).  Run as a script, it sets OPENBLAS_NUM_THREADS,
OMP_NUM_THREADS and MKL_NUM_THREADS to 1 unless they are set (the table's
first line says what they were); the assembly's own threads are untouched
and not timed.

Run:  python launch/bench_solvers.py --dofs 1e4,1e5 --repeat 3 --json solvers.json
      python launch/bench_solvers.py --dofs 1e6 --preconditioners amg,amg-blocks --repeat 1
"""

from __future__ import annotations

import os

if __name__ == "__main__":
    # before NumPy is imported: SciPy's GMRES makes many small BLAS calls, and OpenBLAS's threads
    # made it up to ten times slower on this loaded 2-core machine; one BLAS thread unless set
    for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_var, "1")

import argparse
import json
import math
import statistics
import sys
import time

import numpy as np

from polydg.assembly import assemble
from polydg.basis import n_basis
from polydg.mesh import from_spec
from polydg.partition import agglomerate
from polydg.problem import builtin_problem
from polydg.solve import SolverError, is_symmetric, solve
from polydg.space import DGSpace

PRECONDITIONERS = ("amg", "amg-blocks", "block-jacobi", "ilu")


def build(dofs: int, p: int, seed: int = 0):
    """(mesh spec, DG space) of about ``dofs`` dofs at degree ``p`` on the unit square."""
    elements = max(1, round(dofs / n_basis(p, 2)))
    n = math.ceil(math.sqrt(2 * elements))
    spec = f"square:{n}"
    mesh = agglomerate(from_spec(spec), elements, seed=seed)
    return f"{spec} -> {mesh.n_elements}", DGSpace(mesh, p)


def solve_once(name: str, result, space, maxiter: int) -> dict:
    kwargs = {"maxiter": maxiter}
    if name == "amg":
        kwargs.update(preconditioner="amg", space=space)
    elif name == "amg-blocks":
        kwargs.update(preconditioner="amg", block_sizes=space.element_dofs)
    else:
        kwargs.update(preconditioner=name, block_sizes=space.element_dofs)
    start = time.perf_counter()
    try:
        x, info = solve(result.matrix, result.rhs, "iterative", **kwargs)
    except SolverError as exc:
        return {"converged": False, "total": time.perf_counter() - start, "message": str(exc), "x": None}
    return {"converged": True, "x": x, "iterations": info["iterations"], "setup": info["setup_seconds"],
            "solve": info["krylov_seconds"], "total": info["seconds"], "residual": info["residual"],
            "solver": info["solver"], "amg": info.get("amg", "")}


def run_case(problem_name: str, p: int, dofs: int, names: list[str], args: argparse.Namespace) -> list[dict]:
    t = time.perf_counter()
    mesh_text, space = build(dofs, p, args.seed)
    result = assemble(space, builtin_problem(problem_name, 2))
    symmetric = is_symmetric(result.matrix)
    print(f"# {problem_name} p={p} {mesh_text} elements, {space.n_dofs:,} dofs, nnz {result.matrix.nnz:,}, "
          f"{'symmetric' if symmetric else 'nonsymmetric'} (built in {time.perf_counter() - t:.1f} s)",
          file=sys.stderr, flush=True)
    rows, reference = [], None
    for name in names:
        if name == "ilu" and symmetric and not args.ilu_symmetric:
            continue
        runs = []
        for r in range(args.repeat):
            out = solve_once(name, result, space, args.maxiter)
            runs.append(out)
            print(f"#   {name}: run {r + 1}: " + (f"{out['iterations']} its, setup {out['setup']:.3f} s, solve "
                                                   f"{out['solve']:.3f} s" if out["converged"] else
                                                   f"no convergence in {out['total']:.1f} s"),
                  file=sys.stderr, flush=True)
            if not out["converged"] or out["total"] > args.single_above:
                break
        row = {"problem": problem_name, "p": p, "dofs": space.n_dofs, "elements": space.mesh.n_elements,
               "nnz": int(result.matrix.nnz), "mesh": mesh_text, "symmetric": symmetric, "preconditioner": name,
               "runs": len(runs), "converged": all(o["converged"] for o in runs)}
        if row["converged"]:
            row.update(solver=runs[0]["solver"], amg=runs[0]["amg"],
                       iterations=int(statistics.median(o["iterations"] for o in runs)),
                       setup=statistics.median(o["setup"] for o in runs),
                       solve=statistics.median(o["solve"] for o in runs),
                       total=statistics.median(o["total"] for o in runs),
                       residual=max(o["residual"] for o in runs))
            x = runs[-1]["x"]
            if reference is None:
                reference = x
            row["max_diff"] = float(np.linalg.norm(x - reference) / np.linalg.norm(reference))
        else:
            row.update(total=runs[-1]["total"], message=runs[-1]["message"])
        rows.append(row)
    return rows


def format_rows(rows: list[dict]) -> str:
    head = (f"{'problem':9} {'p':>1} {'dofs':>9} {'preconditioner':14} {'iters':>6} {'setup s':>8} {'solve s':>8} "
            f"{'total s':>8} {'residual':>9} {'max diff':>9} {'runs':>4}")
    lines = [head, "-" * len(head)]
    for r in rows:
        if r["converged"]:
            lines.append(f"{r['problem']:9} {r['p']:>1} {r['dofs']:>9,} {r['preconditioner']:14} {r['iterations']:>6} "
                         f"{r['setup']:>8.3f} {r['solve']:>8.3f} {r['total']:>8.3f} {r['residual']:>9.1e} "
                         f"{r['max_diff']:>9.1e} {r['runs']:>4}")
        else:
            lines.append(f"{r['problem']:9} {r['p']:>1} {r['dofs']:>9,} {r['preconditioner']:14} "
                         f"{'no convergence within --maxiter':>35} {r['total']:>8.1f} {'':>9} {'':>9} {r['runs']:>4}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--problems", default="poisson,paper-2d", help="built-in 2D problems, comma-separated")
    ap.add_argument("--degrees", default="1,2,3", help="polynomial degrees, comma-separated")
    ap.add_argument("--dofs", default="1e4,1e5", help="sizes asked (dofs), comma-separated, e.g. 1e4,1e5,1e6")
    ap.add_argument("--preconditioners", default=",".join(PRECONDITIONERS),
                    help=f"comma-separated, of {', '.join(PRECONDITIONERS)}")
    ap.add_argument("--repeat", type=int, default=3, help="runs per row; the table has medians")
    ap.add_argument("--single-above", type=float, default=30.0,
                    help="a run longer than this (seconds) is not repeated")
    ap.add_argument("--maxiter", type=int, default=5000, help="Krylov iteration limit of every solve")
    ap.add_argument("--ilu-symmetric", action="store_true", help="run ilu on symmetric matrices too")
    ap.add_argument("--seed", type=int, default=0, help="METIS seed of the agglomeration")
    ap.add_argument("--json", help="write the rows to this file")
    args = ap.parse_args(argv)
    names = [s for s in args.preconditioners.split(",") if s]
    for name in names:
        if name not in PRECONDITIONERS:
            ap.error(f"unknown preconditioner {name!r}; choose from {', '.join(PRECONDITIONERS)}")
    if args.repeat < 1:
        ap.error("--repeat must be >= 1")
    print(", ".join(f"{v}={os.environ.get(v, '(unset)')}" for v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")))
    rows = []
    for dofs in (int(float(s)) for s in args.dofs.split(",")):
        for p in (int(s) for s in args.degrees.split(",")):
            for problem_name in args.problems.split(","):
                rows.extend(run_case(problem_name, p, dofs, names, args))
    print(format_rows(rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
