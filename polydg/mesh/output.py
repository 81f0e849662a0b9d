"""Mesh output: VTU through meshio (readable by ParaView) and a quick picture.

2D: one polygon cell per element, its vertices in counter-clockwise order
along the element boundary (elements whose boundary is not a single simple
loop, e.g. with a hole, are written as their triangles instead).
3D: the fine tetrahedra, with the element id as cell data.

:func:`write_simplex_vtu` writes data on triangles or tetrahedra whose
vertices may repeat (a discontinuous field, :mod:`polydg.output`), and
:func:`write_pvd` a ParaView collection of such files (a time series).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np
from numba import njit

from .polytopic import PolytopicMesh


def oriented_boundary_edges(mesh: PolytopicMesh) -> tuple[np.ndarray, np.ndarray]:
    """(element, edge (a, b)) for every boundary edge of every 2D element, counter-clockwise."""
    fe = mesh.face_elements
    inner = fe[:, 1] >= 0
    element = np.concatenate([fe[:, 0], fe[inner, 1]])
    sign = np.concatenate([np.ones(mesh.n_faces), -np.ones(int(inner.sum()))])
    edges = np.concatenate([mesh.face_vertices, mesh.face_vertices[inner]])
    normal = np.concatenate([mesh.face_normal, mesh.face_normal[inner]]) * sign[:, None]
    t = mesh.points[edges[:, 1]] - mesh.points[edges[:, 0]]
    # counter-clockwise around the element: the outward normal is to the right
    flip = t[:, 1] * normal[:, 0] - t[:, 0] * normal[:, 1] < 0
    edges[flip] = edges[flip][:, ::-1]
    order = np.lexsort((edges[:, 0], element))
    return element[order], edges[order]


@njit(cache=True)
def _walk_loops(offsets, start, end, n_points, loops, ok):  # pragma: no cover - compiled
    """Chain each element's edges into one loop; ok[e] = False when that fails."""
    for e in range(offsets.shape[0] - 1):
        a, b = offsets[e], offsets[e + 1]
        k = b - a
        cur = a
        for step in range(k):
            loops[a + step] = start[cur]
            target = end[cur]
            # the edge starting at `target` (edges of e sorted by start)
            lo, hi = a, b
            while lo < hi:
                mid = (lo + hi) // 2
                if start[mid] < target:
                    lo = mid + 1
                else:
                    hi = mid
            if lo >= b or start[lo] != target or (lo + 1 < b and start[lo + 1] == target):
                ok[e] = False
                break
            cur = lo
            if cur == a and step < k - 1:  # closed early: more than one loop
                ok[e] = False
                break


def element_polygons(mesh: PolytopicMesh) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(offsets, vertex loops, ok) of the 2D elements' boundaries."""
    element, edges = oriented_boundary_edges(mesh)
    offsets = np.zeros(mesh.n_elements + 1, dtype=np.int64)
    np.cumsum(np.bincount(element, minlength=mesh.n_elements), out=offsets[1:])
    loops = np.empty(len(edges), dtype=np.int64)
    ok = np.ones(mesh.n_elements, dtype=np.bool_)
    _walk_loops(offsets, np.ascontiguousarray(edges[:, 0]), np.ascontiguousarray(edges[:, 1]), len(mesh.points),
                loops, ok)
    return offsets, loops, ok


def publish(tmp: str | os.PathLike, path: str | os.PathLike) -> None:
    """Give a finished temporary file the usual permissions (mkstemp makes it 0600) and move it into place."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)
    os.replace(tmp, path)


def write_vtu(path: str | os.PathLike, mesh: PolytopicMesh, cell_data: dict[str, np.ndarray] | None = None) -> None:
    """Write ``mesh`` with per-element ``cell_data`` (and the element id) to a VTU file.

    A 4D mesh (a 3D + 1 space-time slab) is written as its top time plane:
    the tetrahedra of its top faces, each with its element's data.

    The file appears complete or not at all (written to a temporary file,
    then renamed).
    """
    import meshio

    path = Path(path)
    data = {"element": np.arange(mesh.n_elements, dtype=np.int64)}
    for name, values in (cell_data or {}).items():
        values = np.asarray(values)
        if values.shape[0] != mesh.n_elements:
            raise ValueError(f"cell data {name!r} has {values.shape[0]} values for {mesh.n_elements} elements")
        data[name] = values
    if mesh.dim == 2:
        offsets, loops, ok = element_polygons(mesh)
        blocks, block_elements = [], []
        sizes = np.diff(offsets)
        good = np.flatnonzero(ok)
        for size in np.unique(sizes[good]):  # one block per polygon size (a handful)
            members = good[sizes[good] == size]
            rows = offsets[members][:, None] + np.arange(size)
            blocks.append(("polygon" if size > 4 else {3: "triangle", 4: "quad"}[int(size)], loops[rows]))
            block_elements.append(members)
        bad = np.flatnonzero(~ok)
        if len(bad):
            sub = np.flatnonzero(np.isin(mesh.simplex_element, bad))
            blocks.append(("triangle", mesh.simplices[sub]))
            block_elements.append(mesh.simplex_element[sub])
        points = np.column_stack([mesh.points, np.zeros(len(mesh.points))])
    elif mesh.dim == 3:
        blocks = [("tetra", mesh.simplices)]
        block_elements = [mesh.simplex_element]
        points = mesh.points
    else:  # a space-time slab over a 3D mesh: VTU has no 4-simplices, so its top time plane, as tetrahedra
        top = mesh.n_interior_faces + np.flatnonzero(mesh.face_normal[mesh.boundary_faces, -1] == 1.0)
        blocks = [("tetra", mesh.face_vertices[top])]
        block_elements = [mesh.face_elements[top, 0]]
        points = np.ascontiguousarray(mesh.points[:, :3])
    cell_data_out = {name: [values[e] for e in block_elements] for name, values in data.items()}
    _write_atomically(path, lambda tmp: meshio.write(tmp, meshio.Mesh(points, blocks, cell_data=cell_data_out),
                                                      file_format="vtu"))


def write_simplex_vtu(path: str | os.PathLike, points: np.ndarray, cells: np.ndarray,
                      point_data: dict[str, np.ndarray] | None = None,
                      cell_data: dict[str, np.ndarray] | None = None) -> None:
    """Write triangles (``cells`` (m, 3)) or tetrahedra ((m, 4)) of ``points`` (n, 3) with data per point and
    per cell to a VTU file, complete or not at all.

    Points may repeat (a discontinuous field: each cell its own copies of its vertices).
    """
    import meshio

    cells = np.asarray(cells, dtype=np.int64)
    kind = {3: "triangle", 4: "tetra"}.get(cells.shape[1])
    if kind is None:
        raise ValueError(f"cells of {cells.shape[1]} vertices: write_simplex_vtu writes triangles and tetrahedra")
    out = meshio.Mesh(np.asarray(points, dtype=np.float64), [(kind, cells)], point_data=dict(point_data or {}),
                      cell_data={name: [np.asarray(v)] for name, v in (cell_data or {}).items()})
    _write_atomically(Path(path), lambda tmp: meshio.write(tmp, out, file_format="vtu"))


def write_pvd(path: str | os.PathLike, entries: list[tuple[float, str]]) -> None:
    """A ParaView collection (``.pvd``): the files ``entries = [(time, file name relative to path's folder)]``
    as one time series."""
    from xml.sax.saxutils import quoteattr

    lines = ['<?xml version="1.0"?>', '<VTKFile type="Collection" version="0.1" byte_order="LittleEndian">',
             "  <Collection>"]
    lines += [f'    <DataSet timestep="{float(t)!r}" group="" part="0" file={quoteattr(str(name))}/>'
              for t, name in entries]
    lines += ["  </Collection>", "</VTKFile>", ""]
    _write_atomically(Path(path), lambda tmp: Path(tmp).write_text("\n".join(lines)))


def _write_atomically(path: Path, write) -> None:
    """``write(tmp)`` into a temporary file beside ``path``, then renamed to it: complete or not at all."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=path.suffix, dir=path.parent, prefix=f".{path.stem}-")
    os.close(fd)
    try:
        write(tmp)
        publish(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def plot_mesh(mesh: PolytopicMesh, path: str | os.PathLike, *, title: str | None = None, dpi: int = 110) -> None:
    """A PNG of a 2D polytopic mesh: elements coloured, their boundaries drawn."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.collections import LineCollection
    except ImportError:  # pragma: no cover
        raise ImportError("plot_mesh needs matplotlib: pip install 'polydg[plot]'") from None
    if mesh.dim != 2:
        raise ValueError("plot_mesh draws 2D meshes only")
    colour = np.random.default_rng(0).permutation(mesh.n_elements)[mesh.simplex_element]
    fig, ax = plt.subplots(figsize=(4.2, 4.2))
    ax.tripcolor(mesh.points[:, 0], mesh.points[:, 1], mesh.simplices, facecolors=colour, cmap="tab20",
                 edgecolors="none")
    segments = mesh.points[mesh.face_vertices]
    ax.add_collection(LineCollection(segments, colors="k", linewidths=0.6))
    ax.set_aspect("equal")
    ax.set_axis_off()
    if title:
        ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
