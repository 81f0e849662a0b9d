"""Strong scaling of the assembly over MPI ranks (issue #20): one mesh, 1 to 16 ranks.

For each case and degree the driver runs, for every rank count R of
``--ranks``,

    OMP_NUM_THREADS=T NUMBA_NUM_THREADS=T mpiexec -n R python -m polydg.assemble --mesh MESH \\
        --agglomerate N --problem PROBLEM --degree P --backend B --repeat K --json DIR/CASE-pP/ranks-R.json --quiet

(T = ``--threads``, default 1: the ranks, not threads, share the cores, and
the 1-rank baseline must run on one thread too; NUMBA_NUM_THREADS is set as
well because the 1-rank run takes the single-process path, where Numba
would otherwise use every core), then reads the JSON files back and prints,
per case:

* seconds of each phase (the slowest rank's, median of ``--repeat``):
  partition (METIS over the ranks and building each rank's part), distribute
  (sending the parts), element / interior / boundary / inflow kernels,
  indices (the sparsity pattern and the column relabelling), total assembly
  (the kernels, indices, values, quadrature points and coefficients; not the
  partition and distribution), and "+ partition", the total assembly plus
  partition plus distribute: what a run on R ranks adds up to;
* speed-up S = T(1) / T(R) and parallel efficiency E = S / R of each phase
  against the 1-rank run (partition and distribute do not exist there);
* load balance (max / mean over ranks) of kernel time, nnz, elements and the
  partition's estimated work, and the halo elements summed over ranks.

Runs with more ranks than this machine's cores are marked ``*``
(oversubscribed: they work, slower).  The ``others`` column is the number
of cores that other processes kept busy during the run, on average (the
machine's busy CPU time from /proc/stat less the run's own; stored in the
run's JSON under ``bench_mpi`` with the command and its wall time): on a
shared machine other jobs show up in the timings, and this says which runs
to distrust.  A figure (time per phase against ranks on log-log axes with
the ideal T(1) / R, parallel efficiency, load balance) is written to
``DIR/CASE-pP.png`` when matplotlib is importable (``pip install -e
".[plot]"``), and every figure printed to ``DIR/summary.json``.

Cases (``--case``; ``--mesh`` / ``--agglomerate`` override the size):

* ``3d``: paper-3d on cube:24 (82,944 tetrahedra) agglomerated into
  16,738 elements (16,000 asked; 167k dofs at p = 2);
* ``2d``: paper-2d on square:384 (294,912 triangles) agglomerated into
  37,818 elements (36,000 asked; 227k dofs at p = 2).

Each run takes a few seconds on a 2-core machine.  For the paper's Table 5
shape on a cluster, e.g. ``--mesh cube:102 --agglomerate 1570000 --degree 1``
(6.6M dofs).

Run:  python launch/bench_mpi.py --case all --ranks 1,2,4 --repeat 5      # docs/performance.md's figures
      python launch/bench_mpi.py --case all --degree 1 2 --ranks 1,2,4,8,16 --repeat 3 --out mpi-scaling
      python launch/bench_mpi.py --case 3d --mesh cube:12 --agglomerate 2000 --ranks 1,2,4 --repeat 5
      python launch/bench_mpi.py --report-only --out mpi-scaling       # tables and figures of earlier runs
      python launch/bench_mpi.py --launcher "srun --mpi=pmi2" --backend auto --ranks 1,2,4,8 --dry-run

Needs mpi4py and an ``mpiexec`` (``pip install -e ".[mpi]"``: the mpich
wheel brings one).  The rank counts run in increasing order: after a
change to polydg's sources the first run (1 rank) compiles the kernels,
about a minute, and the later ones load them from the cache instead of
compiling on every rank at once; the timings exclude compilation either
way (its seconds are the ``jit`` column).  In a Slurm allocation,
``--launcher srun`` starts the ranks (see launch/slurm_polydg.sh).  With 1
rank ``python -m polydg.assemble`` runs its single-process path, whose JSON
has no per-rank figures: its balance is 1.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

CASES = {
    "3d": {"mesh": "cube:24", "agglomerate": 16_000, "problem": "paper-3d"},
    "2d": {"mesh": "square:384", "agglomerate": 36_000, "problem": "paper-2d"},
}
#: phases of the tables and the figure: JSON ``timings`` key -> label
PHASES = {
    "partition": "partition",
    "distribute": "distribute",
    "element_kernel": "element",
    "interior_kernel": "interior",
    "boundary_kernel": "boundary",
    "inflow_kernel": "inflow",
    "indices": "indices",
    "total_assembly": "total",
    "with_partition": "+ partition",
}
#: phases that exist in the 1-rank run, hence have a speed-up
SCALED = ("element_kernel", "interior_kernel", "boundary_kernel", "inflow_kernel", "indices", "total_assembly",
          "with_partition")
BALANCE = ("kernel_time", "nnz", "elements", "work")


def launcher_command(launcher: str) -> list[str]:
    """The launcher's words with its program resolved, or exit with how to install one."""
    words = shlex.split(launcher)
    program = shutil.which(words[0])
    if program is None:
        sys.exit(f"bench_mpi.py: '{words[0]}' not found on PATH; install MPI with pip install 'polydg[mpi]' "
                 "(or pip install -e \".[mpi]\" in a checkout), or name another launcher with --launcher")
    return [program, *words[1:]]


def run_command(launcher: list[str], ranks: int, case: dict, degree: int, args, out: Path) -> list[str]:
    """The ``mpiexec -n R python -m polydg.assemble ...`` command of one run."""
    return [*launcher, "-n", str(ranks), sys.executable, "-m", "polydg.assemble", "--mesh", case["mesh"],
            "--agglomerate", str(case["agglomerate"]), "--problem", case["problem"], "--degree", str(degree),
            "--backend", args.backend, "--repeat", str(args.repeat), "--json", str(out), "--quiet"]


def run_all(args, cases: dict[str, dict]) -> None:
    """Run every case, degree and rank count, one JSON each (stops at the first failed run)."""
    launcher = shlex.split(args.launcher) if args.dry_run else launcher_command(args.launcher)
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), NUMBA_NUM_THREADS=str(args.threads))
    for name, case in cases.items():
        for p in args.degree:
            folder = args.out / f"{name}-p{p}"
            if not args.dry_run:
                # a folder holds one series: an earlier series' files (another size, other ranks) would mix in
                folder.mkdir(parents=True, exist_ok=True)
                for old in folder.glob("ranks-*.json"):
                    old.unlink()
            for r in args.ranks:
                cmd = run_command(launcher, r, case, p, args, folder / f"ranks-{r}.json")
                line = f"OMP_NUM_THREADS={args.threads} NUMBA_NUM_THREADS={args.threads} {shlex.join(cmd)}"
                print(line, flush=True)
                if args.dry_run:
                    continue
                busy, ours, start = busy_cpu_seconds(), children_cpu_seconds(), time.perf_counter()
                done = subprocess.run(cmd, env=env)
                if done.returncode != 0:
                    sys.exit(f"bench_mpi.py: run failed with exit code {done.returncode}: {line}")
                wall = time.perf_counter() - start
                others = (busy_cpu_seconds() - busy - (children_cpu_seconds() - ours)) / wall
                ran = note_run(folder / f"ranks-{r}.json", line, wall, others)
                if ran != r:  # e.g. srun with a PMI that polydg does not see: R independent one-process runs
                    sys.exit(f"bench_mpi.py: polydg ran on {ran} rank(s) where {r} were started; check that "
                             f"the launcher matches mpi4py's MPI: {line}")


def busy_cpu_seconds() -> float:
    """CPU seconds the whole machine has been busy since boot (Linux /proc/stat; NaN elsewhere)."""
    try:
        with open("/proc/stat") as fh:
            ticks = [int(x) for x in fh.readline().split()[1:]]
    except OSError:
        return float("nan")
    idle = ticks[3] + ticks[4]  # idle, iowait; steal (another VM's use of our cores) counts as busy
    return (sum(ticks) - idle) / os.sysconf("SC_CLK_TCK")


def children_cpu_seconds() -> float:
    """CPU seconds of this process's finished children and their descendants (mpiexec and its ranks)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def note_run(path: Path, line: str, wall: float, others: float) -> int:
    """Add the command, its wall time and the cores other processes kept busy meanwhile to the run's JSON.

    Returns the number of ranks polydg says it ran on.

    On a shared machine other jobs' load shows up in the timings; ``others``
    (busy CPU seconds of the machine not spent by the run, per second of the
    run) says which runs to distrust.
    """
    with open(path) as fh:
        summary = json.load(fh)
    summary["bench_mpi"] = {"command": line, "wall_seconds": wall, "other_cores_busy": others}
    with open(path, "w") as fh:
        json.dump(summary, fh, indent=1)
    return int(summary.get("ranks", 1))


def load_runs(folder: Path) -> dict[int, dict]:
    """rank count -> that run's JSON summary, for every ``ranks-R.json`` in ``folder``."""
    runs = {}
    for path in folder.glob("ranks-*.json"):
        with open(path) as fh:
            summary = json.load(fh)
        runs[int(summary.get("ranks", 1))] = summary
    return dict(sorted(runs.items()))


def scaling(runs: dict[int, dict]) -> dict:
    """Seconds, speed-up, efficiency and balance per rank count, against the 1-rank run where there is one."""
    rows = {}
    for r, s in runs.items():
        t = dict(s["timings"])
        # absent from the single-process path's JSON: nothing to partition or send
        t.setdefault("partition", 0.0)
        t.setdefault("distribute", 0.0)
        t["with_partition"] = t["total_assembly"] + t["partition"] + t["distribute"]
        bal = s.get("balance", dict.fromkeys(BALANCE, 1.0))  # one rank: balanced by definition
        per_rank = s.get("per_rank", [])
        rows[r] = {"seconds": {k: t.get(k, 0.0) for k in PHASES}, "balance": {k: bal[k] for k in BALANCE},
                   "halo": sum(x["halo"] for x in per_rank), "jit": s.get("jit_seconds", 0.0),
                   "others": s.get("bench_mpi", {}).get("other_cores_busy", float("nan")),
                   "threads": s.get("threads_per_rank"), "dofs": s["dofs"], "nnz": s["nnz"]}
    if 1 in rows:
        base = rows[1]["seconds"]
        for r, row in rows.items():
            row["speedup"] = {k: base[k] / row["seconds"][k] for k in SCALED if row["seconds"][k] > 0}
            row["efficiency"] = {k: v / r for k, v in row["speedup"].items()}
    return rows


def print_case(tag: str, runs: dict[int, dict], rows: dict, cores: int) -> None:
    """The three tables of one case: seconds, speed-up / efficiency, balance."""
    first = next(iter(runs.values()))
    print(f"\n{tag}: {first['mesh']} -> {first['elements']:,} elements, problem {first['problem']}, "
          f"p = {first['degree']['max']}, {first['dofs']:,} dofs, nnz {first['nnz']:,}; median of "
          f"{first.get('repeat', 1)}, the slowest rank's seconds; {cores} cores (* = oversubscribed)")

    def label(r: int) -> str:
        return f"{r}{'*' if r > cores else ''}"

    print(f"{'ranks':>6}" + "".join(f"{v:>12}" for v in PHASES.values()) + f"{'jit':>8}{'others':>8}")
    for r, row in rows.items():
        print(f"{label(r):>6}" + "".join(f"{row['seconds'][k]:12.4f}" for k in PHASES)
              + f"{row['jit']:8.1f}{row['others']:8.2f}")
    if 1 in rows:
        print("speed-up S = T(1) / T(R) and parallel efficiency S / R")
        print(f"{'ranks':>6}" + "".join(f"{PHASES[k]:>14}" for k in SCALED))
        for r, row in rows.items():
            cells = [f"{row['speedup'][k]:.2f} {row['efficiency'][k]:5.0%}" if k in row["speedup"] else "-"
                     for k in SCALED]
            print(f"{label(r):>6}" + "".join(f"{c:>14}" for c in cells))
    print("load balance (max / mean over ranks)")
    print(f"{'ranks':>6}{'kernel time':>13}{'nnz':>8}{'elements':>10}{'work':>8}{'halo elements':>15}")
    for r, row in rows.items():
        b = row["balance"]
        print(f"{label(r):>6}{b['kernel_time']:13.3f}{b['nnz']:8.3f}{b['elements']:10.3f}{b['work']:8.3f}"
              f"{row['halo']:15,}")


def plot_case(tag: str, rows: dict, path: Path) -> bool:
    """Time per phase (log-log, ideal T(1) / R), efficiency and balance against ranks; False without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")  # a file, no display
        import matplotlib.pyplot as plt
        from matplotlib.ticker import NullLocator
    except ImportError:
        return False
    ranks = list(rows)
    fig, (ax_t, ax_e, ax_b) = plt.subplots(1, 3, figsize=(15, 4.5))
    for k, name in PHASES.items():
        points = [(r, rows[r]["seconds"][k]) for r in ranks if rows[r]["seconds"][k] > 0]
        if points:
            style = "-o" if k in ("total_assembly", "with_partition") else "--."
            ax_t.plot(*zip(*points), style, label=name)
    if 1 in rows:
        t1 = rows[1]["seconds"]["total_assembly"]
        ax_t.plot(ranks, [t1 / r for r in ranks], "k:", label="ideal T(1) / R")
        for k in ("total_assembly", "with_partition", "element_kernel", "interior_kernel", "indices"):
            ax_e.plot(ranks, [rows[r]["efficiency"].get(k, float("nan")) for r in ranks], "-o", label=PHASES[k])
        ax_e.axhline(1.0, color="k", linestyle=":")
        ax_e.set_ylim(0, 1.2)
    ax_t.set_yscale("log")
    ax_t.set(ylabel="seconds (slowest rank)", title=f"{tag}: time per phase")
    ax_e.set(ylabel="T(1) / (R T(R))", title="parallel efficiency")
    for k in BALANCE:
        ax_b.plot(ranks, [rows[r]["balance"][k] for r in ranks], "-o", label=k.replace("_", " "))
    ax_b.axhline(1.0, color="k", linestyle=":")
    ax_b.set(ylabel="max / mean over ranks", title="load balance")
    for ax in (ax_t, ax_e, ax_b):
        ax.set_xscale("log", base=2)
        ax.set_xticks(ranks, [str(r) for r in ranks])  # rank counts, not powers of two
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xlabel("ranks")
        ax.legend(fontsize=7, ncol=2 if ax is ax_t else 1)
        ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def report(out: Path) -> None:
    """Tables, figures and ``summary.json`` of every case folder in ``out``."""
    if not out.is_dir():
        sys.exit(f"bench_mpi.py: no folder {out}")
    cores = os.cpu_count() or 1
    summary = {"cores": cores, "cases": {}}
    for folder in sorted(p for p in out.iterdir() if p.is_dir()):
        runs = load_runs(folder)
        if not runs:
            continue
        rows = scaling(runs)
        print_case(folder.name, runs, rows, cores)
        png = out / f"{folder.name}.png"
        if plot_case(folder.name, rows, png):
            print(f"figure: {png}")
        summary["cases"][folder.name] = {str(r): row for r, row in rows.items()}
    if not summary["cases"]:
        sys.exit(f"bench_mpi.py: no ranks-R.json files under {out}/*/")
    with open(out / "summary.json", "w") as fh:
        json.dump(summary, fh, indent=1)


def rank_list(text: str) -> list[int]:
    """``1,2,4`` -> [1, 2, 4] (positive, increasing: the first run warms the compile cache)."""
    ranks = sorted({int(x) for x in text.split(",") if x.strip()})
    if not ranks or ranks[0] < 1:
        raise argparse.ArgumentTypeError("rank counts must be positive integers, e.g. 1,2,4")
    return ranks


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--case", choices=(*CASES, "all"), default="3d")
    ap.add_argument("--mesh", help="mesh spec instead of the case's (with one --case)")
    ap.add_argument("--agglomerate", type=int, metavar="N", help="elements asked of METIS instead of the case's")
    ap.add_argument("--degree", type=int, nargs="+", choices=(1, 2, 3), default=[2])
    ap.add_argument("--ranks", type=rank_list, default=[1, 2, 4, 8, 16], help="rank counts (default 1,2,4,8,16)")
    ap.add_argument("--repeat", type=int, default=3, help="assemblies per run; the median is reported")
    ap.add_argument("--threads", type=int, default=1, help="Numba / OpenMP threads per rank (default 1)")
    ap.add_argument("--backend", choices=("numpy", "cupy", "auto"), default="numpy",
                    help="polydg's --backend: cupy puts node-local rank r on GPU r mod the node's GPUs")
    ap.add_argument("--launcher", default="mpiexec", help="launcher and its options, -n R is appended "
                    "(e.g. 'mpiexec --oversubscribe' for Open MPI, 'srun --mpi=pmi2' in a Slurm allocation)")
    ap.add_argument("--out", type=Path, default=Path("mpi-scaling"), help="folder of the JSON files and figures")
    ap.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    ap.add_argument("--report-only", action="store_true", help="run nothing: tables and figures of --out's files")
    args = ap.parse_args()
    names = list(CASES) if args.case == "all" else [args.case]
    if (args.mesh or args.agglomerate is not None) and len(names) > 1:
        ap.error("--mesh and --agglomerate need one --case")
    cases = {}
    for name in names:
        case = dict(CASES[name])
        if args.mesh:
            case["mesh"] = args.mesh
        if args.agglomerate is not None:
            case["agglomerate"] = args.agglomerate
        cases[name] = case
    if not args.report_only:
        run_all(args, cases)
        if args.dry_run:
            return
    report(args.out)


if __name__ == "__main__":
    main()
