"""Direct against iterative solves, and the direct solve's orderings: the figures of the crossover table
``polydg.solve.choice.DIRECT_BELOW``.

Cases: ``square:N`` (2D) and ``cube:N`` (3D) agglomerated into E elements
(about 4 triangles or 8 tetrahedra per element, the command line's
ratios), degree p, problem paper-2d / paper-3d (nonsymmetric) or poisson
(symmetric).  Each solve runs in its own process (``--worker``), so that
its peak memory (growth of the resident set over the loaded system) is its
own; one BLAS and Numba thread.  Variants: ``iterative`` (``solve(...,
"iterative", space=space)``: CG or GMRES with AMG, or ILU where ``auto``
takes it), ``iterative:PRECONDITIONER`` and ``direct:ORDERING`` (``solve(...,
"direct", ordering=ORDERING)``).  Times are the solve's CPU seconds
(one thread: its wall time on an idle machine), printed with the wall
seconds.  In every (case family, variant) series, sizes go up and a
variant slower than ``--limit`` CPU seconds is not run on larger sizes;
every variant runs on one size before the next size comes (interleaved).

Run:  python launch/bench_direct.py --store /tmp/systems --json direct.json
      python launch/bench_direct.py --dims 3 --degrees 2 --elements 500,1500,4000 \\
          --variants iterative,direct:nested-dissection,direct:colamd
"""

from __future__ import annotations

import os

if __name__ == "__main__":
    for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
        os.environ.setdefault(_var, "1")

import argparse
import json
import math
import pickle
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

VARIANTS = ("iterative", "direct:nested-dissection", "direct:colamd", "direct:mmd-at-plus-a", "direct:mmd-ata")


def mesh_spec(dim: int, elements: int) -> str:
    """The fine mesh agglomerated into ``elements``: about 4 triangles or 8 tetrahedra each."""
    if dim == 2:
        return f"square:{math.ceil(math.sqrt(2 * elements))}"
    return f"cube:{math.ceil((8 * elements / 6) ** (1 / 3))}"


def case_name(dim: int, elements: int, degree: int, problem: str) -> str:
    return f"{dim}d-E{elements}-p{degree}-{problem}"


def system(name: str, store: str | None):
    """(matrix, rhs, space) of a case: read from ``store`` when it is there, else assembled (and stored)."""
    import scipy.sparse as sp

    if store and Path(store, f"{name}.npz").exists():
        with open(Path(store, f"{name}.space.pkl"), "rb") as f:
            space = pickle.load(f)
        return sp.load_npz(Path(store, f"{name}.npz")).tocsr(), np.load(Path(store, f"{name}.rhs.npy")), space
    from polydg.assembly import assemble
    from polydg.mesh import from_spec
    from polydg.partition import agglomerate
    from polydg.problem import builtin_problem
    from polydg.space import DGSpace

    dim, elements, degree, problem = name.split("-", 3)
    dim, elements, degree = int(dim[0]), int(elements[1:]), int(degree[1:])
    space = DGSpace(agglomerate(from_spec(mesh_spec(dim, elements)), elements, seed=0), degree)
    result = assemble(space, builtin_problem(problem, dim))
    A = result.matrix.tocsr()
    if store:
        Path(store).mkdir(parents=True, exist_ok=True)
        sp.save_npz(Path(store, f"{name}.npz"), A)
        np.save(Path(store, f"{name}.rhs.npy"), result.rhs)
        with open(Path(store, f"{name}.space.pkl"), "wb") as f:
            pickle.dump(space, f)
    return A, result.rhs, space


def worker(name: str, variant: str, store: str | None) -> dict:
    """One solve of one case, in this process: its figures as a dict."""
    import pyamg  # noqa: F401  (imported before the clock starts, as in a run that assembled first)
    import pymetis  # noqa: F401

    from polydg.solve import SolverError, constant_coefficients, solve

    A, b, space = system(name, store)
    constant_coefficients(space)  # its basis kernel compiled (or read from the cache) before the clock starts
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    method, _, option = variant.partition(":")  # direct:ORDERING or iterative:PRECONDITIONER
    choice = {"ordering" if method == "direct" else "preconditioner": option or "auto"}
    start, cpu = time.perf_counter(), time.process_time()
    try:
        x, info = solve(A, b, method, space=space, **choice)
    except SolverError as exc:
        return {"case": name, "variant": variant, "failed": str(exc), "seconds": time.perf_counter() - start}
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"case": name, "variant": variant, "dofs": int(A.shape[0]), "nnz": int(A.nnz), "seconds": seconds,
            "cpu_seconds": cpu, "residual": info["residual"], "solver": info["solver"],
            "iterations": info.get("iterations", 0),
            "factor_nnz": info.get("factor_nnz", 0), "fallback": info.get("fallback", ""),
            "peak_mb": max(peak - before, 0) / 1024}


def run_worker(name: str, variant: str, args: argparse.Namespace) -> dict | None:
    """One solve in its own process; prints its row and appends it to ``--json``."""
    out = subprocess.run([sys.executable, __file__, "--worker", name, variant]
                         + (["--store", args.store] if args.store else []),
                         capture_output=True, text=True, env=os.environ)
    if out.returncode != 0:
        print(f"{name} {variant}: failed: {out.stderr.strip().splitlines()[-1:]}", flush=True)
        return None
    row = json.loads(out.stdout.strip().splitlines()[-1])
    if "failed" in row:
        print(f"{name:26} {variant:26} {row['failed']}", flush=True)
    else:
        print(f"{name:26} {variant:26} {row['dofs']:>9,} {row['nnz']:>11,} {row['seconds']:8.3f} s "
              f"(cpu {row['cpu_seconds']:8.3f} s) "
              f"LU {row['factor_nnz']:>12,} its {row['iterations']:>4} res {row['residual']:.1e} "
              f"peak {row['peak_mb']:7.0f} MB {row['fallback']}", flush=True)
    if args.json:
        with open(args.json, "a") as f:
            f.write(json.dumps(row) + "\n")
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dims", default="2,3")
    ap.add_argument("--degrees", default="1,2,3")
    ap.add_argument("--elements", default="", help="element counts (default: per dimension, see the code)")
    ap.add_argument("--problems", default="paper,poisson", help="paper (paper-2d / paper-3d) and/or poisson")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--limit", type=float, default=60.0,
                    help="a variant slower than this (CPU seconds) is not run on larger sizes")
    ap.add_argument("--max-dofs", type=float, default=5e5, help="cases larger than this are left out")
    ap.add_argument("--store", help="folder of assembled systems: read when there, written otherwise")
    ap.add_argument("--json", help="append one JSON line per solve to this file")
    ap.add_argument("--worker", nargs=2, metavar=("CASE", "VARIANT"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(*args.worker, args.store)))
        return 0
    from polydg.basis import n_basis

    default_elements = {2: (256, 1000, 4000, 16000, 64000), 3: (500, 1500, 4000, 10000, 20000, 25000)}
    variants = args.variants.split(",")
    for dim in (int(d) for d in args.dims.split(",")):
        elements = [int(e) for e in args.elements.split(",")] if args.elements else default_elements[dim]
        for degree in (int(p) for p in args.degrees.split(",")):
            for problem in args.problems.split(","):
                problem = f"paper-{dim}d" if problem == "paper" else problem
                stopped: set[str] = set()  # variants slower than --limit on a smaller size
                for E in elements:  # every variant on one size before the next size: interleaved
                    if E * n_basis(degree, dim) > args.max_dofs:
                        break
                    for variant in (v for v in variants if v not in stopped):
                        row = run_worker(case_name(dim, E, degree, problem), variant, args)
                        if row is None or "failed" in row or row["cpu_seconds"] > args.limit:
                            stopped.add(variant)
    return 0


if __name__ == "__main__":
    sys.exit(main())
