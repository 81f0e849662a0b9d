"""Pictures of a run (PNG, matplotlib: ``pip install 'polydg[plot]'``): the mesh, the solution, the
timings and the residual histories.

* :func:`plot_mesh`: the polytopic elements, coloured (2D), or the elements' faces on the boundary (3D);
* :func:`plot_solution`: the discrete solution of a :class:`~polydg.output.SolutionSample`, each
  sub-triangle shaded from its vertices' values (2D), or on a plane through the middle (3D);
* :func:`plot_timings`: the seconds of the timing table's rows as bars;
* :func:`plot_residuals`: residual histories (Newton's, a Krylov solve's) on a log scale.

:func:`run_pictures` lists those a run has, as ``(file name, writer)``, for the command line's ``--plot``.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from .errors import OptionError

#: the resolution of every picture
DPI = 110


def pyplot():
    """matplotlib's pyplot on the Agg backend (files, no window); an OptionError names the extra when missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise OptionError("pictures need matplotlib: pip install 'polydg[plot]'") from None
    return plt


def plot_mesh(mesh: Any, path: str | os.PathLike, *, title: str | None = None) -> None:
    """The polytopic mesh: elements coloured and their boundaries drawn (2D), or its boundary faces coloured by
    element (3D)."""
    if mesh.dim == 2:
        from .mesh.output import plot_mesh as plot_mesh_2d

        pyplot()
        plot_mesh_2d(mesh, path, title=title, dpi=DPI)
        return
    n_int = mesh.n_interior_faces
    triangles = mesh.points[mesh.face_vertices[n_int:]]
    element = mesh.face_elements[n_int:, 0]
    colour = np.random.default_rng(0).permutation(mesh.n_elements)[element] % 20
    _surface(triangles, colour, path, title or f"{mesh.n_elements:,} elements (the boundary)", cmap="tab20",
             colorbar=False)


def plot_solution(sample: Any, path: str | os.PathLike, *, title: str | None = None) -> None:
    """The solution of ``sample`` (:class:`~polydg.output.SolutionSample`), each triangle shaded from its
    vertices' values (discontinuous across elements): in 2D on the mesh, in 3D on the plane z = (middle of
    the domain), cut through the tetrahedra (values interpolated linearly along the cut edges)."""
    title = title or "solution"
    if sample.cells.shape[1] == 3:
        triangles, values = sample.points[sample.cells][..., :2], sample.values[sample.cells]
        axes = ("x", "y")
    else:
        z = sample.points[:, 2]
        level = 0.5 * (z.min() + z.max())
        triangles, values = slice_tetrahedra(sample.points[sample.cells], sample.values[sample.cells], 2, level)
        triangles = triangles[..., :2]
        title += f" on z = {level:.3g}"
        axes = ("x", "y")
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.2, 4.4))
    xy = triangles.reshape(-1, 2)
    shaded = ax.tripcolor(xy[:, 0], xy[:, 1], np.arange(len(xy)).reshape(-1, 3), values.reshape(-1),
                          shading="gouraud", cmap="viridis")
    fig.colorbar(shaded, ax=ax, shrink=0.85)
    ax.set_aspect("equal")
    ax.set_xlabel(axes[0])
    ax.set_ylabel(axes[1])
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)


def slice_tetrahedra(corners: np.ndarray, values: np.ndarray, axis: int, level: float
                     ) -> tuple[np.ndarray, np.ndarray]:
    """The cut of tetrahedra (corners (m, 4, 3), values at them (m, 4)) by the plane x_axis = level, as
    triangles (n, 3, 3) with values (n, 3), linear along each cut edge.

    >>> tet = np.array([[[0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1.0]]])
    >>> tri, val = slice_tetrahedra(tet, tet[..., 2], 2, 0.5)
    >>> tri.shape, bool(np.allclose(val, 0.5))
    ((1, 3, 3), True)
    """
    s = corners[..., axis] - level
    order = np.argsort(s, axis=1, kind="stable")
    c = np.take_along_axis(corners, order[..., None], axis=1)
    v = np.take_along_axis(values, order, axis=1)
    s = np.take_along_axis(s, order, axis=1)
    below = (s < 0).sum(axis=1)

    def cut(k, i, j):  # the points where edges (i, j) of tetrahedra k cross the plane
        t = s[k, i] / np.where(s[k, i] == s[k, j], 1.0, s[k, i] - s[k, j])
        return c[k, i] + t[:, None] * (c[k, j] - c[k, i]), v[k, i] + t * (v[k, j] - v[k, i])

    triangles, tri_values = [], []
    for edges, count in ((((0, 1), (0, 2), (0, 3)), 1), (((0, 3), (1, 3), (2, 3)), 3)):
        k = np.flatnonzero(below == count)
        cuts = [cut(k, i, j) for i, j in edges]
        triangles.append(np.stack([p for p, _ in cuts], axis=1))
        tri_values.append(np.stack([w for _, w in cuts], axis=1))
    k = np.flatnonzero(below == 2)  # a quadrilateral, as two triangles
    quad = [cut(k, i, j) for i, j in ((0, 2), (0, 3), (1, 3), (1, 2))]
    for a, b, d in ((0, 1, 2), (0, 2, 3)):
        triangles.append(np.stack([quad[a][0], quad[b][0], quad[d][0]], axis=1))
        tri_values.append(np.stack([quad[a][1], quad[b][1], quad[d][1]], axis=1))
    return np.concatenate(triangles), np.concatenate(tri_values)


def _surface(triangles: np.ndarray, colour: np.ndarray, path, title: str, *, cmap: str, colorbar: bool) -> None:
    """Triangles (n, 3, 3) in 3D, coloured by ``colour`` (n,)."""
    plt = pyplot()
    from matplotlib import cm, colors
    from mpl_toolkits.mplot3d.art3d import Poly3DCollection

    fig = plt.figure(figsize=(5.2, 4.4))
    ax = fig.add_subplot(projection="3d")
    norm = colors.Normalize(vmin=float(colour.min()), vmax=float(colour.max()) if colour.max() > colour.min()
                            else float(colour.min()) + 1.0)
    mapper = cm.ScalarMappable(norm=norm, cmap=cmap)
    ax.add_collection3d(Poly3DCollection(triangles, facecolors=mapper.to_rgba(colour), edgecolors="none"))
    low, high = triangles.reshape(-1, 3).min(axis=0), triangles.reshape(-1, 3).max(axis=0)
    ax.set_xlim(low[0], high[0])
    ax.set_ylim(low[1], high[1])
    ax.set_zlim(low[2], high[2])
    ax.set_box_aspect(np.maximum(high - low, 1e-12))
    if colorbar:
        fig.colorbar(mapper, ax=ax, shrink=0.7)
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)


def plot_timings(summary: dict, path: str | os.PathLike) -> None:
    """The timing table's rows (seconds) as horizontal bars, compilation apart."""
    from .report import DETAIL_ROWS, TABLE_ROWS

    t = summary["timings"]
    rows = [(label.strip(), float(t.get(key, 0.0))) for label, key in TABLE_ROWS + DETAIL_ROWS
            if float(t.get(key, 0.0)) > 0 and (key != "solve" or "solver" in summary)]
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 0.3 * len(rows) + 1.4))
    labels = [label for label, _ in rows][::-1]
    seconds = [s for _, s in rows][::-1]
    ax.barh(labels, seconds, color=["tab:orange" if "total" in label else "tab:blue" for label in labels])
    ax.set_xlabel("seconds")
    jit = summary.get("jit_seconds", 0.0)
    ax.set_title(f"{summary.get('problem')} on {summary.get('mesh')}: {summary['dofs']:,} dofs"
                 + (f" (compilation apart: {jit:.1f} s)" if jit else ""), fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)


def plot_residuals(histories: dict[str, list[float]], path: str | os.PathLike) -> None:
    """Each residual history against its iteration, on a log scale."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.2, 3.6))
    for name, values in histories.items():
        values = np.asarray(values, dtype=np.float64)
        ax.semilogy(np.arange(len(values)), np.maximum(values, np.finfo(float).tiny), marker="o", ms=3, label=name)
    ax.set_xlabel("iteration")
    ax.set_ylabel("residual")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)


def residual_histories(summary: dict, solve_info: dict | None = None) -> dict[str, list[float]]:
    """The residual histories a run has: Newton's (summary's ``nonlinear.residuals``) and a Krylov solve's
    (its info's ``residuals``, when the solver records them)."""
    out = {}
    nonlinear = summary.get("nonlinear") or {}
    if len(nonlinear.get("residuals") or []) > 1:
        out[f"{nonlinear.get('method', 'newton')} (nonlinear residual)"] = list(nonlinear["residuals"])
    krylov = (solve_info or {}).get("residuals")
    if krylov is not None and len(krylov) > 1:
        out[f"{(solve_info or {}).get('solver', 'Krylov')} (relative residual)"] = list(krylov)
    return out


def run_pictures(mesh: Any, sample: Any, summary: dict, solve_info: dict | None = None) -> list[tuple[str, Any]]:
    """``(file name, writer)`` of a run's pictures: mesh.png, solution.png (with a ``sample``), timings.png
    (drawn from ``summary`` when written) and residuals.png (where there is a history)."""
    files = [("mesh.png", lambda path: plot_mesh(mesh, path))]
    if sample is not None:
        title = "solution" if sample.time is None else f"solution at t = {sample.time:g}"
        files.append(("solution.png", lambda path: plot_solution(sample, path, title=title)))
    files.append(("timings.png", lambda path: plot_timings(summary, path)))
    histories = residual_histories(summary, solve_info)
    if histories:
        files.append(("residuals.png", lambda path: plot_residuals(histories, path)))
    return files


__all__ = ["plot_mesh", "plot_residuals", "plot_solution", "plot_timings", "pyplot",
           "residual_histories", "run_pictures", "slice_tetrahedra"]
