"""The GPU bench's cases (``launch/gpu_run.py``, stage ``bench``) assembled on this machine's CPU.

The denominators of the issue's GPU-over-CPU ratios: the same builders (meshes, degrees, problems) as
the GPU rows, the default approach, double precision, the median of ``--repeat`` assemblies after a
warm-up (compilation apart), on the threads Numba has here::

    python launch/cpu_baseline.py --only table2 "mesh 1" --repeat 3 --json cpu.json

The GPU figures these divide are in docs/performance.md; this prints the CPU's per case.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
for _p in (REPO / "launch", REPO):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", nargs="+", metavar="TEXT", help="the cases whose label holds one of these")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", help="write the figures to this file")
    ap.add_argument("--tiny", action="store_true", help="the simulator's tiny cases instead (checks the script)")
    args = ap.parse_args(argv)

    import numba

    from gpu_run import bench_cases

    from polydg.assembly import Workspace, assemble
    from polydg.assembly.timing import untimed

    rows = {}
    for label, table, build, _paper, _target, _cpu in bench_cases(simulator=args.tiny, quick=False):
        if table == "nonlinear" or (args.only and not any(text in label for text in args.only)):
            continue
        t = time.perf_counter()
        space, problem = build()
        built = time.perf_counter() - t
        workspace = Workspace()
        first = assemble(space, problem, workspace=workspace)
        runs = [assemble(space, problem, workspace=workspace).info["timings"] for _ in range(args.repeat)]
        med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        med["unstaged"] = untimed(med)  # what no stage timed
        rows[label] = {"dofs": int(space.n_dofs), "elements": int(space.mesh.n_elements),
                       "approach": first.info["approach"], "threads": numba.get_num_threads(),
                       "build_seconds": built, **med}
        del first, workspace
        print(f"{label}: {space.n_dofs:,} dofs, total {med['total_assembly']:.4f} s (kernels "
              f"{med['total_kernels']:.4f}, {numba.get_num_threads()} threads)", flush=True)
        if args.json:
            Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
