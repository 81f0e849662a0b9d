"""Where a device assembly's time goes: one assembly of a bench case under cProfile, every CUDA launch blocking.

    python launch/gpu_profile.py TEXT [TEXT ...] [--approach auto] [--out DIR] [--top 40] [--simulator]

For each of ``launch/gpu_run.py``'s bench cases whose label holds one of the TEXTs: build it, assemble it
twice (the first compiles), then profile a third assembly.  ``CUDA_LAUNCH_BLOCKING=1`` (set here before
CUDA starts) makes each kernel launch and CuPy call return only when the device has finished it, so the
profile charges device time to the Python line that queued it rather than to the next synchronisation;
the totals are therefore a little above an unprofiled run's.  Writes ``profile-<case>.json`` (the stage
timings, the functions with the most own and cumulative time) and ``profile-<case>.txt`` (pstats' table)
into DIR (default ``$OUT`` or ``gpu-results``).  ``--simulator`` profiles the simulator's tiny cases (the
cudasim backend) so that the script is tested on a CPU machine.
"""

from __future__ import annotations

import os

os.environ.setdefault("CUDA_LAUNCH_BLOCKING", "1")  # before anything starts CUDA

import argparse  # noqa: E402
import cProfile  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import pstats  # noqa: E402
import re  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))


def _rows(stats: pstats.Stats, key: str, top: int) -> list[dict]:
    """The ``top`` functions by ``key`` ("tottime" or "cumtime"), as dicts."""
    index = {"tottime": 2, "cumtime": 3}[key]
    entries = sorted(stats.stats.items(), key=lambda kv: kv[1][index], reverse=True)[:top]
    return [{"function": f"{Path(file).name}:{line}:{name}", "calls": int(nc), "tottime": round(tt, 6),
             "cumtime": round(ct, 6)} for (file, line, name), (_, nc, tt, ct, _) in entries]


def profile_case(label: str, build, approach: str, backend: str, top: int, out: Path) -> dict:
    from polydg.assembly import Workspace, assemble

    t = time.perf_counter()
    space, problem = build()
    built = time.perf_counter() - t
    workspace = Workspace()
    for _ in range(2):  # the first compiles; the second is what a later assembly costs
        result = assemble(space, problem, backend=backend, approach=approach, workspace=workspace)
    unprofiled = dict(result.info["timings"])
    del result
    profiler = cProfile.Profile()
    profiler.enable()
    result = assemble(space, problem, backend=backend, approach=approach, workspace=workspace)
    profiler.disable()
    stats = pstats.Stats(profiler)
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(top)
    slug = re.sub(r"[^A-Za-z0-9]+", "-", label).strip("-")
    record = {"label": label, "dofs": int(space.n_dofs), "approach": result.info["approach"], "backend": backend,
              "launch_blocking": os.environ.get("CUDA_LAUNCH_BLOCKING"), "build_seconds": built,
              "timings_blocking_unprofiled": unprofiled, "timings_profiled": dict(result.info["timings"]),
              "by_own_time": _rows(stats, "tottime", top), "by_cumulative_time": _rows(stats, "cumtime", top)}
    (out / f"profile-{slug}.json").write_text(json.dumps(record, indent=1))
    (out / f"profile-{slug}.txt").write_text(text.getvalue())
    return record


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("labels", nargs="+", metavar="TEXT", help="bench labels holding this text (e.g. 'cube:64')")
    ap.add_argument("--approach", default="auto")
    ap.add_argument("--out", default=os.environ.get("OUT") or str(Path(__file__).resolve().parents[1] /
                                                                   "gpu-results"))
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("--simulator", action="store_true", help="the cudasim backend on the simulator's tiny cases")
    args = ap.parse_args(argv)
    if args.simulator:
        os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
    from gpu_run import bench_cases

    backend = "cudasim" if args.simulator else "cupy"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    done = 0
    for label, table, build, *_ in bench_cases(args.simulator, quick=False):
        if table == "nonlinear" or not any(text in label for text in args.labels):
            continue
        r = profile_case(label, build, args.approach, backend, args.top, out)
        t = r["timings_profiled"]
        print(f"profile {label}: {r['dofs']:,} dofs, {r['approach']}, total {t['total_assembly']:.4f} s "
              f"(indices {t['indices']:.4f}, penalty {t['penalty']:.4f}, values {t['values']:.4f}); "
              "most own time: " + ", ".join(f"{f['function']} {f['tottime']:.4f}" for f in r["by_own_time"][:5]),
              flush=True)
        done += 1
    if not done:
        print(f"gpu_profile: no bench case's label holds any of {args.labels}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
