"""The direct solve's fill-reducing ordering against the whole direct solve (one thread).

The nested dissection (``polydg.solve.direct.nested_dissection``: the element graph, then METIS) runs
before every factorisation, so every Newton step pays it. Cases: paper-2d / paper-3d on ``square:N`` /
``cube:N`` agglomerated into E elements, degree p; each timed ``--repeat`` times after one untimed run
(the median printed).

Run:  OMP_NUM_THREADS=1 python launch/bench_ordering.py
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np

CASES = (("square:128", 4000, 2), ("square:256", 16000, 1), ("cube:16", 2000, 2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    from polydg.assembly import assemble
    from polydg.mesh import from_spec
    from polydg.partition import agglomerate
    from polydg.problem import builtin_problem
    from polydg.solve.direct import direct_solve, nested_dissection
    from polydg.space import DGSpace

    for spec, elements, degree in CASES:
        space = DGSpace(agglomerate(from_spec(spec), elements), degree)
        d = space.mesh.dim
        result = assemble(space, builtin_problem(f"paper-{d}d", d))
        A = result.matrix.tocsr()
        ordering, solve = [], []
        for _ in range(args.repeat + 1):
            t = time.perf_counter()
            nested_dissection(A, space.element_dofs)
            ordering.append(time.perf_counter() - t)
            t = time.perf_counter()
            direct_solve(A, result.rhs, "auto", space.element_dofs)
            solve.append(time.perf_counter() - t)
        print(f"{spec} in {elements:,} p = {degree}: {space.n_dofs:,} dofs, {A.nnz:,} nonzeros: ordering "
              f"{np.median(ordering[1:]):.4f} s, direct solve {np.median(solve[1:]):.3f} s", flush=True)


if __name__ == "__main__":
    main()
