"""Timing tables in the paper's rows and the JSON summary of a run."""

from __future__ import annotations

import json
import os
import platform
import tempfile
from pathlib import Path

import numpy as np

from .mesh.output import publish

#: the rows of the paper's Tables 1, 2 and 4, then ours
TABLE_ROWS = (
    ("element kernel", "element_kernel"),
    ("interior kernel", "interior_kernel"),
    ("boundary kernel", "boundary_kernel"),
    ("inflow kernel", "inflow_kernel"),
    ("total kernels", "total_kernels"),
    ("indices", "indices"),
    ("total assembly", "total_assembly"),
    ("solve", "solve"),
)
DETAIL_ROWS = (
    ("  values (zeroed)", "values"),
    ("  quadrature points", "quadrature_points"),
    ("  coefficients", "coefficients"),
    ("  u at the points", "iterate"),
    ("  penalty", "penalty"),
    ("  partition (ranks)", "partition"),
    ("  distribute (ranks)", "distribute"),
    ("  gather (ranks)", "gather"),
)


def summary_dict(*, mesh, space, result, options: dict, timings: dict, errors: dict | None = None,
                 solve_info: dict | None = None, ranks: int = 1) -> dict:
    """The content of summary.json (see the command line's --help for the keys)."""
    import numba
    import scipy

    import polydg

    from .threads import thread_count

    stats = mesh.statistics()
    t = {key: float(timings.get(key, 0.0)) for _, key in TABLE_ROWS + DETAIL_ROWS}
    out = {
        "dimension": mesh.dim,
        "elements": mesh.n_elements,
        "sub_elements": mesh.n_simplices,
        "interior_faces": mesh.n_interior_faces,
        "interfaces": mesh.n_interfaces,
        "boundary_faces": mesh.n_boundary_faces,
        "dofs": space.n_dofs,
        "nnz": int(result.matrix.nnz),
        "degree": {"min": space.min_degree, "max": space.max_degree},
        "precision": result.info["precision"],
        "backend": result.info["backend"],
        "device": result.info.get("device", "cpu"),
        "approach": result.info["approach"],
        "ranks": ranks,
        "threads": thread_count(),  # per process (per rank)
        "timings": t,
        "jit_seconds": float(timings.get("jit", 0.0)),
        "mesh": options.get("mesh"),
        "problem": options.get("problem"),
        "penalty": result.info["penalty"],
        "quadrature_extra": result.info["quadrature_extra"],
        "assembly_options": result.info.get("options"),
        "to_device": result.info.get("to_device"),  # host-to-device copies: copies, bytes, seconds (in the stages)
        "quadrature_simplices": options.get("quadrature_simplices", "fine"),
        "memory_budget_mb": _budget(result.info, options),
        "repeat": options.get("repeat", 1),
        "total_assembly_per_repeat": options.get("repeat_totals"),  # in order: the first is the process's first
        "run": options.get("run"),
        "mesh_statistics": stats,
        "versions": {"polydg": polydg.__version__, "numpy": np.__version__, "scipy": scipy.__version__,
                     "numba": numba.__version__, "python": platform.python_version(),
                     **result.info.get("versions", {})},  # the device backend's: CuPy, numba-cuda, CUDA
    }
    if solve_info is not None:
        out["solver"] = {k: v for k, v in solve_info.items() if isinstance(v, (int, float, str, bool))}
    if errors is not None:
        out["errors"] = {k: float(v) for k, v in errors.items()}
    return out


def format_table(summary: dict) -> str:
    """The paper-style table: seconds and seconds per million dofs, then the errors."""
    dofs = summary["dofs"]
    t = summary["timings"]
    d = summary["dimension"]
    shape = f"{d - 1}D + 1 (a slab)" if "slabs" in summary else f"{d}D"  # a march's table is a slab's
    lines = [
        f"mesh {summary.get('mesh')}: {shape}, {summary['elements']:,} elements, "
        f"{summary['sub_elements']:,} sub-simplices, {summary['interior_faces']:,} interior faces on "
        f"{summary['interfaces']:,} interfaces, {summary['boundary_faces']:,} boundary faces",
        f"problem {summary.get('problem')}: degree {summary['degree']['min']}..{summary['degree']['max']}, "
        f"{dofs:,} dofs, nnz {summary['nnz']:,}, {summary['precision']} precision, approach "
        f"{summary['approach']}, backend {summary['backend']}, ranks {summary['ranks']}, "
        f"threads {summary.get('threads', 1)}{' per rank' if summary['ranks'] > 1 else ''}",
        "",
        f"{'':22}{'seconds':>12}{'s / Mdof':>12}",
    ]
    per = 1e6 / max(dofs, 1)
    for label, key in TABLE_ROWS[:7]:
        lines.append(f"{label:22}{t[key]:12.4f}{t[key] * per:12.4f}")
    for label, key in DETAIL_ROWS:
        if key in ("partition", "distribute", "gather") and summary.get("ranks", 1) == 1:
            continue
        if key == "gather" and not t.get(key):  # ranks that kept their rows (no solve, no output, --no-gather)
            continue
        if key == "iterate" and "nonlinear" not in summary:
            continue
        lines.append(f"{label:22}{t[key]:12.4f}{t[key] * per:12.4f}")
    if "solver" in summary:
        lines.append(f"{'solve':22}{t['solve']:12.4f}{t['solve'] * per:12.4f}   ({summary['solver'].get('solver')})")
    sent = summary.get("to_device") or {}
    if sent.get("copies"):
        lines.append(f"{'  to the device':22}{sent['seconds']:12.4f}{sent['seconds'] * per:12.4f}   "
                     f"({sent['copies']} copies, {sent['bytes'] / 2**20:.1f} MiB, within the rows above)")
    lines.append(f"{'(JIT, apart)':22}{summary['jit_seconds']:12.4f}")
    nonlinear = summary.get("nonlinear")
    if nonlinear and "iterations" in nonlinear:  # a steady solve's (a march's line says its own)
        lines.append(f"the stages are the last of {nonlinear['iterations']} {nonlinear['method']} linearisations "
                     "('indices': the plan, made once); 'solve': every step's linear solve")
    totals = summary.get("total_assembly_per_repeat") or []
    if summary.get("repeat", 1) > 1:
        lines.append(f"timings are medians of {summary['repeat']} assemblies (totals "
                     + ", ".join(f"{t:.4f}" for t in totals) + " s; the first also touches its memory first)")
    elif totals:
        lines.append("one assembly, the process's first: it also touches its memory first (--repeat 3 for medians)")
    if summary.get("ranks", 1) > 1:
        b = summary["balance"]
        lines.append(f"each row is its slowest rank's (the rows need not add up); load balance (max / mean over "
                     f"ranks): kernel time {b['kernel_time']:.2f}, estimated work {b['work']:.2f}, nnz {b['nnz']:.2f}, "
                     f"elements {b['elements']:.2f}")
    devices = [r.get("device", "cpu") for r in summary.get("per_rank", [])]
    if any(d != "cpu" for d in devices):  # the GPU backend on several ranks: each rank's device
        lines.append("devices: " + "; ".join(f"rank {r} {d}" for r, d in enumerate(devices)))
    elif summary.get("device", "cpu") != "cpu":
        lines.append(f"device: {summary['device']}")
    if "errors" in summary:
        e = summary["errors"]
        lines.append("")
        lines.append("errors: " + ", ".join(f"{k} {v:.4e}" for k, v in e.items()))
    return "\n".join(lines)


def _budget(info: dict, options: dict) -> float | None:
    """The chunks' memory budget of a run: its assembly's (every assembly records the one it used), else the
    one given."""
    budget = info.get("memory_budget_mb", options.get("memory_budget"))
    return None if budget is None else float(budget)


def json_text(summary: dict) -> str:
    """``summary`` as the JSON text that :func:`write_json` writes (NumPy numbers as numbers)."""
    return json.dumps(summary, indent=1, default=_jsonable) + "\n"


def write_json(path: str | os.PathLike, summary: dict) -> None:
    """Write ``summary`` to ``path`` atomically (a temporary file, then a rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(json_text(summary))
        publish(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _jsonable(value):
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")
