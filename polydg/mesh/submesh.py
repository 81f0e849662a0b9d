"""One rank's part of a polytopic mesh: its elements and, around them, the halo.

A rank assembles the rows of the elements it owns.  For that it needs their
sub-simplices and faces, and of each neighbour across the partition boundary
only what the face terms read: bounding box, measure, diameter and the shared
faces (docs/design.md §11).  :func:`rank_submesh` cuts exactly that out of
the whole mesh.

Local elements and faces keep the global mesh's relative order, so every
compiled kernel visits an owned element's sub-simplices, neighbours and faces
in the same order as on one process: each owned row is the same sum, bit for
bit.  Halo elements own no sub-simplices (empty ranges) and no boundary
faces; their other faces are left out.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .polytopic import PolytopicMesh


@dataclass
class RankMesh:
    """A rank's sub-mesh and its maps to the whole mesh.

    mesh : the owned and halo elements as a :class:`PolytopicMesh` (global order)
    elements : (n_local,) global id of each local element
    owned : (n_owned,) local ids of the owned elements (increasing)
    faces : (n_local_faces,) global id of each local face
    """

    mesh: PolytopicMesh
    elements: np.ndarray
    owned: np.ndarray
    faces: np.ndarray

    @property
    def halo(self) -> np.ndarray:
        """Local ids of the halo elements (neighbours owned by other ranks)."""
        mask = np.ones(len(self.elements), dtype=bool)
        mask[self.owned] = False
        return np.flatnonzero(mask)


def _ranges(starts: np.ndarray, stops: np.ndarray) -> np.ndarray:
    """Concatenate arange(starts[i], stops[i]), vectorised."""
    lengths = stops - starts
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    return (np.repeat(starts - (np.cumsum(lengths) - lengths), lengths) + np.arange(total)).astype(np.int64)


def rank_submesh(mesh: PolytopicMesh, owned: np.ndarray) -> RankMesh:
    """The part of ``mesh`` that the rank owning the elements ``owned`` (global ids) needs.

    >>> from polydg.mesh import unit_square, build_polytopic_mesh
    >>> m = build_polytopic_mesh(unit_square(2))
    >>> part = rank_submesh(m, [0, 1])
    >>> part.elements.tolist(), part.owned.tolist(), part.mesh.n_simplices
    ([0, 1, 2, 4, 5], [0, 1], 2)
    """
    owned = np.unique(np.asarray(owned, dtype=np.int64))
    n_el, n_int = mesh.n_elements, mesh.n_interior_faces
    is_owned = np.zeros(n_el, dtype=bool)
    is_owned[owned] = True

    # faces: interfaces with an owned side (whole, in order), then the owned elements' boundary faces
    ie = mesh.interface_elements
    keep = is_owned[ie[:, 0]] | is_owned[ie[:, 1]]
    inner = _ranges(mesh.interface_offsets[:-1][keep], mesh.interface_offsets[1:][keep])
    boundary = n_int + np.flatnonzero(is_owned[mesh.face_elements[n_int:, 0]])
    faces = np.concatenate([inner, boundary])

    # elements: owned and halo, in global order
    elements = np.union1d(owned, ie[keep].ravel()).astype(np.int64)
    local = np.full(n_el, -1, dtype=np.int64)
    local[elements] = np.arange(len(elements))
    owned_local = local[owned]

    # sub-simplices of the owned elements only
    simplices = _ranges(mesh.element_offsets[owned], mesh.element_offsets[owned + 1])
    count = np.where(is_owned[elements], np.diff(mesh.element_offsets)[elements], 0)
    element_offsets = np.zeros(len(elements) + 1, dtype=np.int64)
    np.cumsum(count, out=element_offsets[1:])
    simplex_local = np.full(mesh.n_simplices, -1, dtype=np.int64)
    simplex_local[simplices] = np.arange(len(simplices))

    # points referenced by them and by the faces, renumbered in order
    points = np.union1d(mesh.simplices[simplices].ravel(), mesh.face_vertices[faces].ravel()).astype(np.int64)
    point_local = np.full(len(mesh.points), -1, dtype=np.int64)
    point_local[points] = np.arange(len(points))

    fe = mesh.face_elements[faces]
    fs = mesh.face_simplices[faces]
    face_elements = np.where(fe >= 0, local[np.maximum(fe, 0)], -1)
    # a halo element's side of a face has no sub-simplex here
    face_simplices = np.where(fs >= 0, simplex_local[np.maximum(fs, 0)], -1)
    n_inner = len(inner)
    interface_offsets = np.zeros(int(keep.sum()) + 1, dtype=np.int64)
    np.cumsum(np.diff(mesh.interface_offsets)[keep], out=interface_offsets[1:])

    sub = PolytopicMesh(
        points=mesh.points[points],
        simplices=point_local[mesh.simplices[simplices]],
        element_offsets=element_offsets,
        simplex_element=local[mesh.simplex_element[simplices]],
        simplex_volume=mesh.simplex_volume[simplices],
        bbox_min=mesh.bbox_min[elements],
        bbox_max=mesh.bbox_max[elements],
        measure=mesh.measure[elements],
        diameter=mesh.diameter[elements],
        face_vertices=point_local[mesh.face_vertices[faces]],
        face_elements=np.ascontiguousarray(face_elements),
        face_simplices=np.ascontiguousarray(face_simplices),
        face_measure=mesh.face_measure[faces],
        face_normal=mesh.face_normal[faces],
        face_tag=mesh.face_tag[faces],
        n_interior_faces=n_inner,
        interface_elements=local[ie[keep]],
        interface_offsets=interface_offsets,
        source=f"{mesh.source} (part of {len(owned)} elements)",
        # fine cells keep the whole mesh's numbering: the halo side of a face has its cell, not its sub-simplex
        simplex_cell=None if mesh.simplex_cell is None else mesh.simplex_cell[simplices],
        face_cells=None if mesh.face_cells is None else mesh.face_cells[faces],
        n_fine_cells=mesh.n_fine_cells,
    )
    return RankMesh(mesh=sub, elements=elements, owned=owned_local, faces=faces)
