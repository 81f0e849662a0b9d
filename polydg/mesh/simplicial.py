"""Fine simplicial meshes: triangles in 2D, tetrahedra in 3D.

A :class:`SimplexMesh` is the input from which polytopic meshes are built,
either by agglomeration (many fine cells per element) or directly (a polygon
mesh whose polygons are triangulated, ``cell_element`` saying which polygon
each triangle came from).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import MeshError

#: the largest coordinate magnitude accepted: far beyond any physical length, and small
#: enough that products of up to six coordinates (volumes, moments) cannot overflow
MAX_COORDINATE = 1e50


def _indices(values, source: str, name: str, what: str) -> np.ndarray:
    """``values`` as contiguous int64, or a one-line MeshError where an entry is not a whole number below 2**62
    (a float index would be cut to an integer without a word); ``what`` the entries are ("vertex numbers")."""
    array = np.asarray(values)
    if array.dtype.kind == "f":
        whole = np.isfinite(array) & (array == np.round(array)) & (np.abs(array) < 2.0**62)
        if not whole.all():
            where = tuple(int(i) for i in np.argwhere(~whole)[0])
            raise MeshError(f"{source}: {name} must be whole {what}; entry {where} is {float(array[where]):g}")
    elif array.size and array.dtype.kind not in "iub":
        raise MeshError(f"{source}: {name} must be {what} (integers), got {array.dtype} values")
    return np.ascontiguousarray(array, dtype=np.int64)


@dataclass
class SimplexMesh:
    """A conforming simplicial mesh as plain arrays.

    Attributes
    ----------
    points : (n_points, d) float64
        Vertex coordinates, d = 2 or 3 (4: the slabs of space-time over 3D meshes,
        :mod:`polydg.spacetime.slab`).
    cells : (n_cells, d + 1) int64
        Vertex indices of each simplex.
    boundary_facets : (n_tagged, d) int64
        Vertex indices of tagged boundary facets (e.g. Gmsh physical lines /
        surfaces); may be empty.
    boundary_tags : (n_tagged,) int64
        Tag of each row of ``boundary_facets``.  Untagged boundary facets get
        tag 0 when the polytopic mesh is built.
    cell_element : (n_cells,) int64 or None
        For polygon/polyhedron input: the element each simplex belongs to.
        ``None`` for a plain simplicial mesh.
    source : str
        Where the mesh came from (file name or generator spec), used in
        error messages.
    cell_data : dict of str to array
        Named values per fine cell (a mesh file's cell data, read through
        meshio), each with one row per fine cell.
    facets_match : bool
        True where the maker knows every interior facet to be shared face to
        face (a mesh polydg derives from a checked one: a space-time slab's
        prisms); building a polytopic mesh then skips its search for
        unmatched facets inside the domain (hanging nodes), the costliest
        check of a slab's build.  False (the default) for input.

    The *fine cells* are the cells of the input: the simplices themselves,
    or for polygon input the polygons (``cell_element``).  Data per fine
    cell (:class:`~polydg.problem.data.CellData`) is given on them.
    """

    points: np.ndarray
    cells: np.ndarray
    boundary_facets: np.ndarray = field(default=None)  # type: ignore[assignment]
    boundary_tags: np.ndarray = field(default=None)  # type: ignore[assignment]
    cell_element: np.ndarray | None = None
    source: str = "<array>"
    cell_data: dict = field(default_factory=dict)
    facets_match: bool = False

    def __post_init__(self) -> None:
        self.points = np.ascontiguousarray(self.points, dtype=np.float64)
        if self.points.ndim != 2 or self.points.shape[1] not in (2, 3, 4):
            raise MeshError(
                f"{self.source}: points must have shape (n, 2), (n, 3) or (n, 4), "
                f"got {self.points.shape}"
            )
        d = self.points.shape[1]
        self.cells = _indices(self.cells, self.source, "cells", "vertex numbers")
        if self.cells.ndim != 2 or self.cells.shape[1] != d + 1:
            raise MeshError(
                f"{self.source}: a {d}D simplicial mesh needs cells with {d + 1} "
                f"vertices, got array of shape {self.cells.shape}"
            )
        if self.boundary_facets is None:
            self.boundary_facets = np.zeros((0, d), dtype=np.int64)
        if self.boundary_tags is None:
            self.boundary_tags = np.zeros(len(self.boundary_facets), dtype=np.int64)
        self.boundary_facets = _indices(self.boundary_facets, self.source, "boundary_facets",
                                        "vertex numbers").reshape(-1, d)
        self.boundary_tags = _indices(self.boundary_tags, self.source, "boundary_tags", "tags").reshape(-1)
        if self.cell_element is not None:
            self.cell_element = _indices(self.cell_element, self.source, "cell_element", "element numbers")
        self.cell_data = {str(name): np.asarray(values) for name, values in dict(self.cell_data).items()}
        self.check()

    @property
    def dim(self) -> int:
        return int(self.points.shape[1])

    def __repr__(self) -> str:
        kind = {2: "triangles", 3: "tetrahedra"}.get(self.dim, f"{self.dim}-simplices")
        extra = f", {int(self.cell_element.max()) + 1} polygons" if self.cell_element is not None else ""
        return (f"SimplexMesh({self.n_cells} {kind}, {len(self.points)} points, "
                f"{len(self.boundary_tags)} tagged boundary facets{extra}, source={self.source!r})")

    @property
    def n_cells(self) -> int:
        return int(self.cells.shape[0])

    @property
    def n_fine_cells(self) -> int:
        """The number of fine cells: polygons for polygon input, else simplices (the class docstring)."""
        return int(self.cell_element.max()) + 1 if self.cell_element is not None else self.n_cells

    def fine_cell(self) -> np.ndarray:
        """(n_cells,) the fine cell of each simplex: its polygon for polygon input, else itself."""
        return self.cell_element if self.cell_element is not None else np.arange(self.n_cells, dtype=np.int64)

    def check(self) -> None:
        """Raise :class:`MeshError` on NaN/inf or huge coordinates, or bad indices."""
        bad = ~np.isfinite(self.points).all(axis=1)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise MeshError(
                f"{self.source}: point {i} has a non-finite coordinate "
                f"{self.points[i].tolist()} ({int(bad.sum())} such points)"
            )
        huge = (np.abs(self.points) > MAX_COORDINATE).any(axis=1)
        if huge.any():
            i = int(np.flatnonzero(huge)[0])
            raise MeshError(
                f"{self.source}: point {i} has a coordinate beyond {MAX_COORDINATE:.0e} in magnitude "
                f"{self.points[i].tolist()}"
            )
        if self.n_cells == 0:
            raise MeshError(f"{self.source}: the mesh has no cells")
        n = len(self.points)
        out = (self.cells < 0) | (self.cells >= n)
        if out.any():
            c = int(np.flatnonzero(out.any(axis=1))[0])
            raise MeshError(
                f"{self.source}: cell {c} refers to a point index out of range "
                f"{self.cells[c].tolist()} (the mesh has {n} points)"
            )
        rep = np.sort(self.cells, axis=1)
        dup = (rep[:, 1:] == rep[:, :-1]).any(axis=1)
        if dup.any():
            c = int(np.flatnonzero(dup)[0])
            raise MeshError(
                f"{self.source}: cell {c} repeats a vertex {self.cells[c].tolist()} "
                "(degenerate simplex)"
            )
        if self.cell_element is not None and len(self.cell_element) != self.n_cells:
            raise MeshError(
                f"{self.source}: cell_element has {len(self.cell_element)} entries "
                f"for {self.n_cells} cells"
            )
        for name, values in self.cell_data.items():
            if values.ndim == 0 or len(values) != self.n_fine_cells:
                raise MeshError(f"{self.source}: cell data {name!r} has {values.shape[0] if values.ndim else 0} rows "
                                f"for {self.n_fine_cells} cells")
