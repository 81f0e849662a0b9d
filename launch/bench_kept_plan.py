"""A kept plan: the first assembly of an ``Assembler`` against its later ones (issue #28, item 3).

Cases (``--case``):

* ``default``: the command line's default run (``python -m polydg.assemble`` with no options):
  paper-2d on square:64 agglomerated into 256 elements (seed 0), coarse quadrature simplices, p = 2.
* ``table5``: the paper's Table 5 shape at p = 1: paper-3d on cube:N agglomerated into
  1,570,000 (N / 102)^3 elements (the full size is N = 102, 6.58M dofs; ``--size`` N, default 55:
  about 1.04M dofs).

For each case, in one process: a fresh ``assemble()`` (untimed: it loads the kernels and touches
the process's memory once), then ``--repeat`` rounds of [a fresh ``assemble()``; a new
``Assembler``'s first assembly; ``--later`` later assemblies of the same assembler], the problem
alternating between the case's problem and the same problem with its diffusion scaled by 2 (other
coefficients, same space).  Reported: seconds and seconds per million dofs of each stage (the
median over the rounds; for "later", over all later assemblies), and whether the later matrices
equal fresh ones bit for bit.

Run:  OMP_NUM_THREADS=1 NUMBA_NUM_THREADS=1 python launch/bench_kept_plan.py --case all --json kept.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time

import numpy as np

from polydg.assembly import Assembler, Workspace, assemble
from polydg.mesh import build_polytopic_mesh, from_spec
from polydg.mesh.quadrature_simplices import quadrature_mesh
from polydg.partition import agglomerate, agglomerate_cells
from polydg.problem import builtin_problem
from polydg.space import DGSpace

STAGES = ("element_kernel", "interior_kernel", "boundary_kernel", "inflow_kernel", "total_kernels", "indices",
          "values", "quadrature_points", "coefficients", "penalty", "total_assembly")


def default_case():
    """The default run's space and problem (polydg/cli/parser.py: square:64, 256 elements, p = 2, paper)."""
    fine = from_spec("square:64")
    mesh = build_polytopic_mesh(fine, agglomerate_cells(fine, 256, seed=0))
    mesh = quadrature_mesh(mesh, "coarse")
    return DGSpace(mesh, 2), builtin_problem("paper", 2), "square:64 / 256, coarse, p = 2"


def table5_case(size: int):
    n_el = round(1_570_000 * (size / 102) ** 3)
    mesh = agglomerate(from_spec(f"cube:{size}"), n_el)
    return DGSpace(mesh, 1), builtin_problem("paper-3d", 3), f"cube:{size} / {n_el:,} asked, p = 1"


def scaled(problem, factor: float):
    """``problem`` with its diffusion times ``factor``: other coefficients on the same space."""
    diffusion = problem.diffusion
    if callable(diffusion):
        return dataclasses.replace(problem, name=f"{problem.name}-x{factor:g}",
                                   diffusion=lambda x, _a=diffusion: factor * np.asarray(_a(x)))
    return dataclasses.replace(problem, name=f"{problem.name}-x{factor:g}",
                               diffusion=factor * np.asarray(diffusion))


def same_bits(a, b) -> bool:
    return (a.matrix.data.tobytes() == b.matrix.data.tobytes() and a.matrix.indices.tobytes() == b.matrix.indices.tobytes()
            and a.rhs.tobytes() == b.rhs.tobytes())


def run_case(space, problem, repeat: int, later: int) -> dict:
    problems = [problem, scaled(problem, 2.0)]
    workspace = Workspace()
    assemble(space, problem, workspace=workspace)  # untimed: kernels loaded, memory touched once
    fresh_runs, first_runs, later_runs, bitwise, info = [], [], [], True, {}
    for _ in range(repeat):
        fresh_runs.append(assemble(space, problem, workspace=workspace).info["timings"])
        assembler = Assembler(space)
        first = assembler.assemble(problem)
        first_runs.append(first.info["timings"])
        info = first.info
        del first
        for k in range(later):
            p = problems[(k + 1) % 2]
            result = assembler.assemble(p)
            later_runs.append(result.info["timings"])
            info = result.info
            if k < 2:  # the kept plan's matrices are fresh ones, bit for bit
                bitwise &= same_bits(result, assemble(space, p, workspace=workspace))
            del result
        del assembler
    mdofs = space.n_dofs / 1e6

    def med(runs):
        return {k: statistics.median(t[k] for t in runs) for k in STAGES}

    out = {"dofs": space.n_dofs, "elements": space.mesh.n_elements, "sub_elements": space.mesh.n_simplices,
           "chunks": info["chunks"], "points": info["plan"]["points"],
           "points_bytes": info["plan"]["points_bytes"], "bitwise": bitwise}
    for name, runs in (("fresh", fresh_runs), ("first", first_runs), ("later", later_runs)):
        m = med(runs)
        out[name] = {"seconds": m, "s_per_mdof": {k: v / mdofs for k, v in m.items()}}
    return out


def print_case(label: str, res: dict) -> None:
    print(f"\n{label}: {res['dofs']:,} dofs, {res['elements']:,} elements, {res['sub_elements']:,} sub-simplices, "
          f"{res['chunks']} chunk(s); points {res['points']} ({res['points_bytes'] / 2**20:.1f} MB); "
          f"later == fresh bit for bit: {res['bitwise']}")
    print(f"{'stage':<18} {'fresh s':>9} {'first s':>9} {'later s':>9} {'fresh s/Md':>11} {'first s/Md':>11} "
          f"{'later s/Md':>11}")
    for k in STAGES:
        print(f"{k:<18} " + " ".join(f"{res[n]['seconds'][k]:>9.4f}" for n in ("fresh", "first", "later")) + " "
              + " ".join(f"{res[n]['s_per_mdof'][k]:>11.4f}" for n in ("fresh", "first", "later")))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--case", choices=("default", "table5", "all"), default="all")
    parser.add_argument("--size", type=int, default=55, help="N of cube:N for the Table 5 shape (full: 102)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--later", type=int, default=4, help="later assemblies per assembler")
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args()
    results = {}
    cases = ["default", "table5"] if args.case == "all" else [args.case]
    for case in cases:
        t = time.perf_counter()
        space, problem, label = default_case() if case == "default" else table5_case(args.size)
        print(f"{case}: {label}, mesh in {time.perf_counter() - t:.1f} s", file=sys.stderr)
        results[case] = dict(run_case(space, problem, args.repeat, args.later), label=label)
        print_case(f"{case} ({label})", results[case])
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
