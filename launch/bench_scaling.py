"""Weak scaling of one process: seconds per million dofs of each assembly stage against the problem size.

The shape is the paper's Table 5 at p = 1 (``--mesh cube:102 --agglomerate
1570000 --degree 1 --problem paper-3d``, 6.58M dofs): cube:N (6 N^3 tets)
agglomerated into about 1570000 (N / 102)^3 elements (about 4 tets each),
for several N.  One assembly's cost should grow linearly with the problem,
so every stage's s / Mdof should stay flat across N (docs/performance.md,
"One process against the problem size").

Each mesh is built once (cube:102: 2.2 min and 7.5 GB with METIS) and kept
as a pickle in ``--cache`` (default /tmp/polydg-scaling); each size is timed
in a child process of its own (one big process at a time, and the sizes do
not share the allocator's history): the first assembly of the process
(fresh memory, as in one run of the command line; its kernels' loading is
timed apart as JIT) is reported apart from the median of the ``--repeat``
ones after it.  Besides the stages, "untimed" is the total less every
stage, "(sys)" the process's system seconds (page faults).  ``--clock cpu``
times every stage in CPU seconds of the process (all threads): on a
machine shared with other jobs, wall seconds measure their load too.  With
POLYDG_SCALING_FRESH_WORKSPACE=1 every repeat gets a new Workspace.

Run:  NUMBA_NUM_THREADS=1 python launch/bench_scaling.py --repeat 2 --clock cpu --json scaling.json
      python launch/bench_scaling.py --sizes 55 102 --repeat 2
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

# polydg from this checkout (the script's folder, not the repository, is first on sys.path)
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

ROWS = ("element_kernel", "interior_kernel", "boundary_kernel", "total_kernels", "indices", "values",
        "quadrature_points", "coefficients", "penalty", "untimed", "total_assembly", "system")
SHORT = {"element_kernel": "element", "interior_kernel": "interior", "boundary_kernel": "boundary",
         "total_kernels": "kernels", "quadrature_points": "q.points", "coefficients": "coeffs",
         "total_assembly": "TOTAL", "system": "(sys)"}


def elements_for(n: int) -> int:
    """The element count asked for cube:n, in the ratio of the paper-shape case (cube:102 into 1570000)."""
    return int(round(1_570_000 * (n / 102) ** 3))


def mesh_path(cache: Path, n: int) -> Path:
    return cache / f"cube{n}-agg{elements_for(n)}.pkl"


def build(n: int, cache: Path) -> Path:
    """Build (once) and pickle the agglomerated mesh of cube:n."""
    path = mesh_path(cache, n)
    if path.exists():
        return path
    from polydg.mesh import from_spec
    from polydg.partition import agglomerate

    t = time.perf_counter()
    mesh = agglomerate(from_spec(f"cube:{n}"), elements_for(n))
    print(f"cube:{n}: built {mesh.n_elements:,} elements in {time.perf_counter() - t:.1f} s", file=sys.stderr,
          flush=True)
    cache.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as f:
        pickle.dump(mesh, f, protocol=pickle.HIGHEST_PROTOCOL)
    os.replace(tmp, path)
    return path


def use_cpu_clock() -> None:
    """Make the assembler's stage timings CPU seconds of the process (all threads) instead of wall seconds.

    On a machine shared with other jobs, wall time depends on how many cores
    the others leave free; the process's CPU time (user and system: page
    faults included) much less.  With several threads a stage's CPU time is
    the sum over threads (the work, not the critical path).
    """
    import types

    from polydg.assembly import assembler, passes, plan, timing

    clock = types.SimpleNamespace(perf_counter=time.process_time)
    for module in (assembler, passes, plan, timing):
        module.time = clock


def time_one(path: Path, degree: int, repeat: int, budget: float, clock: str = "wall") -> dict:
    """Time ``repeat`` assemblies of paper-3d on the pickled mesh (after one warm-up); medians per stage.

    The first assembly of the process (``first``: fresh memory, as in one run of
    the command line) is reported apart from the repeats.
    """
    import numpy as np

    import polydg
    from polydg.assembly import Workspace, assemble
    from polydg.assembly.timing import untimed
    from polydg.problem import builtin_problem
    from polydg.space import DGSpace
    from polydg.threads import thread_count

    if clock == "cpu":
        use_cpu_clock()
    with open(path, "rb") as f:
        mesh = pickle.load(f)
    space = DGSpace(mesh, degree)
    problem = builtin_problem("paper-3d", 3)
    runs, jit, first = [], 0.0, None
    fresh = os.environ.get("POLYDG_SCALING_FRESH_WORKSPACE") == "1"
    workspace = Workspace()
    for r in range(repeat + 1):
        result = None
        cpu, wall, ru = time.process_time(), time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
        result = assemble(space, problem, memory_budget_mb=budget, workspace=Workspace() if fresh else workspace)
        # CPU seconds of the process (all threads, system time included) against wall seconds: on a shared
        # machine, wall time with fewer cores than threads free is not the code's
        result.info["timings"]["cpu"] = time.process_time() - cpu
        result.info["timings"]["wall"] = time.perf_counter() - wall
        ru2 = resource.getrusage(resource.RUSAGE_SELF)
        result.info["timings"]["system"] = ru2.ru_stime - ru.ru_stime  # page faults are system time
        result.info["timings"]["minor_faults"] = ru2.ru_minflt - ru.ru_minflt
        t = result.info["timings"]
        t["untimed"] = untimed(t)
        jit += result.info["timings"]["jit"]
        if r > 0:
            runs.append(result.info["timings"])
        else:
            first = result.info["timings"]
    t = {k: statistics.median(run[k] for run in runs) for k in runs[0]}
    return {"mesh": path.name, "elements": mesh.n_elements, "sub_elements": mesh.n_simplices,
            "interior_faces": mesh.n_interior_faces, "dofs": space.n_dofs, "nnz": int(result.matrix.nnz),
            "chunks": result.info["chunks"], "clock": clock, "threads": thread_count(), "degree": degree,
            "budget_mb": budget, "timings": t, "first": first, "runs": runs, "jit": jit,
            "matrix_sum": float(np.abs(result.matrix.data).sum()),
            # bits of the values and load, folded: equal across versions and thread counts for the same matrices
            "data_xor": int(np.bitwise_xor.reduce(result.matrix.data.view(np.int64))),
            "rhs_xor": int(np.bitwise_xor.reduce(result.rhs.view(np.int64))),
            "polydg": polydg.__file__}


def table(results: list[dict], which: str = "timings") -> str:
    """Seconds and s / Mdof per stage: the median of the repeats (``timings``) or the first run (``first``)."""
    head = ["N", "Mdofs", "chunks"] + [SHORT.get(k, k) for k in ROWS]
    what = "median of the repeats" if which == "timings" else "first assembly of the process"
    lines = [f"{results[0]['clock'] if results else ''} seconds, {what} (s / Mdof below)",
             " ".join(f"{h:>9}" for h in head)]
    for r in results:
        mdof = r["dofs"] / 1e6
        n = r["mesh"].split("-")[0][4:]
        lines.append(" ".join([f"{n:>9}", f"{mdof:9.3f}", f"{r['chunks']:9d}"]
                              + [f"{r[which][k]:9.3f}" for k in ROWS]))
        lines.append(" ".join([f"{'':>9}", f"{'':>9}", f"{'/Mdof':>9}"]
                              + [f"{r[which][k] / mdof:9.3f}" for k in ROWS]))
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[40, 55, 70, 88, 102],
                   help="N of cube:N (default 40 55 70 88 102; METIS fails on cube:85 at this ratio)")
    p.add_argument("--degree", type=int, default=1)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--memory-budget", type=float, default=1024.0, metavar="MB")
    p.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                   help="stage timings in wall seconds (default) or CPU seconds of the process (a shared machine)")
    p.add_argument("--cache", type=Path, default=Path("/tmp/polydg-scaling"))
    p.add_argument("--json", help="write the results as JSON")
    p.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(time_one(args.child, args.degree, args.repeat, args.memory_budget, args.clock)))
        return
    results = []
    for n in args.sizes:
        path = build(n, args.cache)
        out = subprocess.run([sys.executable, __file__, "--child", str(path), "--degree", str(args.degree),
                              "--repeat", str(args.repeat), "--memory-budget", str(args.memory_budget),
                              "--clock", args.clock],
                             stdout=subprocess.PIPE, text=True, check=True)
        results.append(json.loads(out.stdout.strip().splitlines()[-1]))
        print(table(results[-1:]), file=sys.stderr, flush=True)
    print(table(results, "first"))
    print(table(results))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
