"""What a solved run leaves to look at: the discrete solution itself, as ParaView reads it.

A DG solution is a polynomial on each element, discontinuous across
elements.  :func:`sample_solution` gives every sub-simplex of the mesh its
own copies of its vertices, with the solution's values there (from the
basis, :func:`polydg.solve.evaluate`), so that a VTU file
(:meth:`SolutionSample.write_vtu`) shows the polynomial of each element,
with the jumps between elements, and the element id and degree as cell data.
A space-time slab is seen at its end: :func:`sample_top` samples the slab
solution on its top faces, the spatial mesh at t_n; :class:`SlabSeries`
writes each slab's sample as the march goes and a ``.pvd`` collection that
lists them (ParaView's time series).

>>> from polydg.mesh import unit_square, build_polytopic_mesh
>>> from polydg.space import DGSpace
>>> space = DGSpace(build_polytopic_mesh(unit_square(2)), 1)
>>> sample = sample_solution(space, np.ones(space.n_dofs) * 0)
>>> sample.cells.shape, sample.points.shape  # 8 triangles, 3 copies of a vertex each
((8, 3), (24, 3))
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from .mesh.output import write_pvd, write_simplex_vtu

#: a writer of one output file: called with the file's path
Writer = Callable[[Path], None]


@dataclass
class SolutionSample:
    """The DG solution at the vertices of each sub-simplex (their own copies: discontinuous across elements).

    points : (m (k + 1), 3) the vertices, simplex by simplex (z = 0 in 2D)
    cells : (m, k + 1) the simplices, ``cells[s] = (k + 1) s + (0, ..., k)``
    values : (m (k + 1),) the solution at the points
    element, degree : (m,) the element of each simplex and its degree
    vertex : (m (k + 1),) the mesh's number of each point (copies share it): where simplices meet
    time : the time of a slab's top (None for a steady solution)
    """

    points: np.ndarray
    cells: np.ndarray
    values: np.ndarray
    element: np.ndarray
    degree: np.ndarray
    vertex: np.ndarray
    time: float | None = None

    def write_vtu(self, path: str | os.PathLike, values: np.ndarray | None = None) -> None:
        """Write the sample (or other ``values`` on its points) as a VTU file of triangles or tetrahedra."""
        write_simplex_vtu(path, self.points, self.cells, point_data={"solution": self.values if values is None
                                                                    else values},
                          cell_data={"element": self.element, "degree": self.degree})


def _sample(space: Any, solution: np.ndarray, simplices: np.ndarray, elements: np.ndarray,
            dim: int, time: float | None = None) -> SolutionSample:
    """The solution at the vertices of ``simplices`` (rows of point ids of ``space.mesh``), each in its element."""
    from .solve import evaluate

    mesh = space.mesh
    k1 = simplices.shape[1]
    at = mesh.points[simplices.ravel()]  # the points where the solution is evaluated (slabs: with their time)
    values = evaluate(space, np.asarray(solution, dtype=np.float64), at, np.repeat(elements, k1))
    points = np.zeros((len(at), 3))
    points[:, :dim] = at[:, :dim]
    cells = np.arange(len(at), dtype=np.int64).reshape(-1, k1)
    return SolutionSample(points, cells, values, np.asarray(elements, dtype=np.int64),
                          np.asarray(space.degree)[elements].astype(np.int64),
                          np.asarray(simplices, dtype=np.int64).ravel(), time)


def sample_solution(space: Any, solution: np.ndarray) -> SolutionSample:
    """The solution with coefficients ``solution`` on every sub-simplex of ``space.mesh`` (2D or 3D)."""
    mesh = space.mesh
    if mesh.dim not in (2, 3):
        raise ValueError(f"sample_solution samples 2D and 3D meshes; a {mesh.dim}D slab is seen by sample_top")
    return _sample(space, solution, mesh.simplices, mesh.simplex_element, mesh.dim)


def write_mesh_vtu(path: str | os.PathLike, space: Any) -> None:
    """The sub-simplices of ``space.mesh`` (2D, 3D) with each one's element and degree (a run without a solution)."""
    mesh = space.mesh
    points = np.zeros((len(mesh.points), 3))
    points[:, :mesh.dim] = mesh.points[:, :3]
    write_simplex_vtu(path, points, mesh.simplices, cell_data={
        "element": mesh.simplex_element, "degree": np.asarray(space.degree)[mesh.simplex_element].astype(np.int64)})


def top_faces(mesh: Any) -> np.ndarray:
    """The boundary faces of a slab mesh at its end time (outward normal +t)."""
    n_int = mesh.n_interior_faces
    return n_int + np.flatnonzero(mesh.face_normal[n_int:, -1] == 1.0)


def sample_top(space: Any, solution: np.ndarray) -> SolutionSample:
    """A space-time slab's solution at the slab's end: on its top faces (the spatial mesh's sub-simplices at
    t_n), each in the slab element below it (with local steps, the element's last step)."""
    mesh = space.mesh
    top = top_faces(mesh)
    t = float(mesh.points[mesh.face_vertices[top[0], 0], -1]) if len(top) else None
    return _sample(space, solution, mesh.face_vertices[top], mesh.face_elements[top, 0], mesh.dim - 1, t)


class SlabSeries:
    """The solution at the end of each slab of a march (:meth:`add` per slab), written into ``directory`` as
    one VTU file per slab as it comes, and a ``.pvd`` collection listing them in time (:meth:`files`).

    Only each slab's time and file name are kept, and the last slab's sample: a march of many slabs holds
    one sample, not one per slab.  The command line's ``directory`` is its output set's staging folder,
    published whole at the end (:mod:`polydg.cli.targets`).
    """

    def __init__(self, directory: str | os.PathLike, stem: str = "solution") -> None:
        self.directory, self.stem = Path(directory), stem
        self.steps: list[tuple[float, str]] = []  # (t_n, the slab's file name)
        self.last: SolutionSample | None = None

    def add(self, space: Any, solution: Any, t: float) -> None:
        """Sample slab ``space``'s ``solution`` at its end ``t`` and write it (``<stem>-slab-NNNN.vtu``)."""
        from .backend import to_host

        sample = sample_top(space, to_host(solution))
        name = f"{self.stem}-slab-{len(self.steps) + 1:04d}.vtu"
        sample.write_vtu(self.directory / name)
        self.steps.append((float(t), name))
        self.last = sample

    def write_pvd(self) -> Path:
        """Write ``<stem>.pvd`` into ``directory``: the slabs' files so far as one time series (for ParaView);
        its path.  (The command line's output set writes it through :meth:`files`.)"""
        path = self.directory / f"{self.stem}.pvd"
        write_pvd(path, list(self.steps))
        return path

    def files(self) -> list[tuple[str, Writer]]:
        """``(name, writer)`` of each slab's file, written already into ``directory`` (its writer checks that
        the path is that file), and of ``<stem>.pvd`` listing them."""
        out: list[tuple[str, Writer]] = [(name, self._written(name)) for _, name in self.steps]
        out.append((f"{self.stem}.pvd", lambda path: write_pvd(path, list(self.steps))))
        return out

    def _written(self, name: str) -> Writer:
        def check(path: Path) -> None:
            if not Path(path).samefile(self.directory / name):
                raise ValueError(f"{name} was written into {self.directory}, not {Path(path).parent}")
        return check


__all__ = ["SlabSeries", "SolutionSample", "Writer", "sample_solution", "sample_top", "top_faces",
           "write_mesh_vtu"]
