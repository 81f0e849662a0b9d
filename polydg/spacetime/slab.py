"""One space-time slab as a (d+1)-dimensional polytopic mesh (DESIGN.md section 6).

The slab Omega x (t0, t1) over a 2D polytopic mesh is cut into prisms
(sub-triangle x (t0, t1)), each prism into 3 tetrahedra.  Element e of the
slab is the union of the prisms over element e's sub-triangles, i.e. the
space-time element K_e x (t0, t1), so element numbers agree with the spatial
mesh's and with every other slab's.

Conformity: a prism's 3 rectangular sides are each cut along one diagonal,
and two neighbouring prisms share a side, so they must pick the same
diagonal.  The rule used depends only on the side's two global vertex
numbers i < j: the diagonal joins the bottom copy of i to the top copy of j.
With a triangle's vertices sorted, a < b < c, the three tetrahedra

    (a0, b0, c0, c1), (a0, b0, b1, c1), (a0, a1, b1, c1)

cut the sides (a, b), (b, c), (a, c) along a0-b1, b0-c1, a0-c1: that rule.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..errors import MeshError
from ..mesh.polytopic import PolytopicMesh, build_polytopic_mesh
from ..mesh.simplicial import SimplexMesh

#: the 3 tetrahedra of a prism over the sorted triangle (a, b, c): indices into
#: (a0, b0, c0, a1, b1, c1), bottom copies first (see the module docstring)
PRISM_TETRAHEDRA = np.array([[0, 1, 2, 5], [0, 1, 4, 5], [0, 3, 4, 5]], dtype=np.int64)


def prism_tetrahedra(triangles: np.ndarray, n_points: int) -> np.ndarray:
    """(3 n, 4) tetrahedra of the prisms over ``triangles`` (n, 3), conforming across shared sides.

    Point i is the bottom copy of spatial point i, ``i + n_points`` its top copy.
    """
    tri = np.sort(np.asarray(triangles, dtype=np.int64), axis=1)  # the rule needs a < b < c
    corners = np.concatenate([tri, tri + n_points], axis=1)  # (n, 6): a0 b0 c0 a1 b1 c1
    return corners[:, PRISM_TETRAHEDRA].reshape(-1, 4)


def slab_mesh(space_mesh: PolytopicMesh, t0: float, t1: float) -> PolytopicMesh:
    """The polytopic mesh of the slab ``space_mesh`` x (t0, t1), time as the last coordinate.

    Element e is K_e x (t0, t1); its sub-simplices are the 3 tetrahedra of
    each prism over K_e's sub-triangles.  Only 2D spatial meshes for now
    (3D + 1 needs a 4-simplex split of the prism over a tetrahedron).
    """
    if space_mesh.dim != 2:
        raise MeshError(f"space-time slabs are built over 2D meshes only, the mesh is {space_mesh.dim}D")
    t0, t1 = float(t0), float(t1)
    if not t1 > t0:
        raise MeshError(f"a time slab needs t1 > t0, got ({t0}, {t1})")
    n = len(space_mesh.points)
    points = np.concatenate([
        np.column_stack([space_mesh.points, np.full(n, t0)]),
        np.column_stack([space_mesh.points, np.full(n, t1)]),
    ])
    cells = prism_tetrahedra(space_mesh.simplices, n)
    fine = SimplexMesh(points, cells, source=f"{space_mesh.source} x ({t0:g}, {t1:g})")
    return build_polytopic_mesh(fine, np.repeat(space_mesh.simplex_element, 3))


def shifted_slab(mesh: PolytopicMesh, shift: float) -> PolytopicMesh:
    """``mesh`` moved by ``shift`` in time (its last coordinate).

    Every other array (volumes, faces, normals, diameters) is invariant under
    the shift, so a march with slabs of equal length builds one slab mesh and
    shifts it.
    """
    points = mesh.points.copy()
    points[:, -1] += shift
    bbox_min, bbox_max = mesh.bbox_min.copy(), mesh.bbox_max.copy()
    bbox_min[:, -1] += shift
    bbox_max[:, -1] += shift
    return dataclasses.replace(mesh, points=points, bbox_min=bbox_min, bbox_max=bbox_max)


__all__ = ["PRISM_TETRAHEDRA", "prism_tetrahedra", "slab_mesh", "shifted_slab"]
