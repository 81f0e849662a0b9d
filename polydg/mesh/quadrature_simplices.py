"""Fewer sub-simplices for quadrature: each polygon re-triangulated from its boundary (issue #19).

An agglomerated polygon K is the union of its fine triangles, but the
volume integrals over K only need *some* triangulation of K.  The fine
triangles number V_b + 2 V_i - 2 (+ 2 per hole), V_b and V_i the boundary
and interior fine vertices of K; a triangulation whose vertices are K's
boundary vertices only has V_b - 2 (+ 2 per hole): the paper's remark that
about as many simplices as faces suffice.  ``coarse`` quadrature simplices
are the constrained Delaunay triangulation of each polygon (shapely / GEOS,
no added points), whose edges include every fine boundary edge: the faces,
and so a space-time slab's lateral faces, are unchanged, and every
construction over sub-triangles (prisms, local time steps, trace rules)
applies as it is.

A triangulation is kept only where it is proved right: every triangle
positively oriented and not degenerate, and its directed edges cancelling
in pairs except K's boundary edges, each met exactly once in the
boundary's own direction.  Those two facts make the triangles' indicator
functions sum to K's (the chain's boundary is dK, each triangle counts +1),
i.e. they tile K; their areas summing to |K| is checked as well.  Elements
whose boundary is not a set of simple loops (they touch themselves at a
vertex), that are disconnected, that failed any check, or that would gain
nothing (no interior vertex) keep their fine triangles.

3D (polyhedra) would need a constrained tetrahedralisation: a 3D mesh is
returned unchanged.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import shapely
from numba import njit

from ..errors import OptionError
from .output import oriented_boundary_edges
from .polytopic import DEGENERATE_TOL, PolytopicMesh, _dense_ranks, _row_keys

#: the choices of ``quadrature_simplices`` (``--quadrature-simplices``)
QUADRATURE_SIMPLICES = ("fine", "coarse")
#: what march() and the command line use unless told (docs/performance.md: coarse is faster on every
#: agglomerated Table 4 case)
DEFAULT_QUADRATURE_SIMPLICES = "coarse"
#: relative tolerance of the per-element area check  sum |T| = |K|
AREA_TOL = 1e-12


def quadrature_mesh(mesh: PolytopicMesh, quadrature_simplices: str) -> PolytopicMesh:
    """``mesh`` with the sub-simplices chosen by ``quadrature_simplices`` ("fine": as it is; "coarse":
    :func:`coarse_quadrature_mesh`, 2D only: a 3D mesh is returned unchanged)."""
    if quadrature_simplices not in QUADRATURE_SIMPLICES:
        raise OptionError(f"unknown quadrature simplices {quadrature_simplices!r}; choose "
                          f"{' or '.join(QUADRATURE_SIMPLICES)}")
    if quadrature_simplices == "fine" or mesh.dim != 2:
        return mesh
    return coarse_quadrature_mesh(mesh)


def coarse_quadrature_mesh(mesh: PolytopicMesh) -> PolytopicMesh:
    """The 2D ``mesh`` with each element's sub-triangles replaced by a triangulation of its boundary
    vertices (the module docstring); elements, faces, interfaces and element geometry unchanged.

    ``face_simplices`` then names the new triangle on each side of a face.

    >>> from polydg.mesh import unit_square
    >>> from polydg.partition import agglomerate
    >>> fine = agglomerate(unit_square(8), 4)
    >>> coarse = coarse_quadrature_mesh(fine)
    >>> fine.n_simplices, coarse.n_simplices, bool(np.allclose(coarse.measure, fine.measure))
    (128, 56, True)
    """
    if mesh.dim != 2:
        raise OptionError(f"coarse quadrature simplices are built for 2D meshes, the mesh is {mesh.dim}D")
    n_el = mesh.n_elements
    element, edges = oriented_boundary_edges(mesh)  # sorted by element, then start vertex
    edge_offsets = np.zeros(n_el + 1, dtype=np.int64)
    np.cumsum(np.bincount(element, minlength=n_el), out=edge_offsets[1:])

    loops = boundary_loops(edge_offsets, edges, n_el)
    polygon = loops.simple & _one_outer_loop(mesh.points, loops, n_el)
    # worth it where K has a fine vertex off its boundary (V_i > 0): a polygon of V_b boundary vertices and h
    # holes has T = V_b + 2 V_i - 2 + 2 h fine triangles (Euler), its coarse triangulation V_b - 2 + 2 h
    fine_count = np.diff(mesh.element_offsets)
    holes = np.bincount(loops.element, minlength=n_el) - 1
    candidates = polygon & (fine_count > np.diff(edge_offsets) - 2 + 2 * holes)
    if not candidates.any():  # e.g. one element per fine triangle
        return mesh
    triangles, owner = _constrained_triangles(mesh.points, loops, candidates)
    good = candidates & tiles_elements(mesh, triangles, owner, element, edges)
    good &= np.bincount(owner[good[owner]], minlength=n_el) < fine_count  # never more than the fine ones

    keep_coarse = good[owner]
    keep_fine = ~good[mesh.simplex_element]
    simplices = np.concatenate([triangles[keep_coarse], mesh.simplices[keep_fine]])
    simplex_element = np.concatenate([owner[keep_coarse], mesh.simplex_element[keep_fine]])
    order = np.argsort(simplex_element, kind="stable")
    simplices, simplex_element = simplices[order], simplex_element[order]
    offsets = np.zeros(n_el + 1, dtype=np.int64)
    np.cumsum(np.bincount(simplex_element, minlength=n_el), out=offsets[1:])
    return dataclasses.replace(
        mesh,
        simplices=np.ascontiguousarray(simplices),
        element_offsets=offsets,
        simplex_element=simplex_element,
        simplex_volume=np.abs(_signed_areas(mesh.points[simplices])),
        face_simplices=_face_simplices(mesh, simplices, simplex_element),
        simplex_cell=_simplex_cells(mesh, simplex_element, good),
    )


def _simplex_cells(mesh: PolytopicMesh, simplex_element: np.ndarray, coarse: np.ndarray) -> np.ndarray | None:
    """The fine cell of each new sub-triangle: its old one where the element kept its fine triangles; where
    it was re-triangulated, the element's fine cell if it lies in one (an unagglomerated polygon), else -1."""
    if mesh.simplex_cell is None:
        return None
    starts = mesh.element_offsets[:-1]
    low = np.minimum.reduceat(mesh.simplex_cell, starts)
    single = low == np.maximum.reduceat(mesh.simplex_cell, starts)
    cell = np.where(single, low, -1)[simplex_element]
    kept = ~coarse[simplex_element]
    cell[kept] = mesh.simplex_cell[~coarse[mesh.simplex_element]]  # both in element order, stably sorted
    return cell


# ---------------------------------------------------------------------------
# boundary loops


@dataclasses.dataclass
class BoundaryLoops:
    """Each 2D element's boundary as closed vertex loops, the element on their left.

    ``vertices`` lists the loops one after another, element by element
    (element e's loops fill the same range as its edges); loop l is
    ``vertices[offsets[l]:offsets[l + 1]]`` of element ``element[l]``.
    ``simple[e]`` is False where e's boundary is not a disjoint union of
    loops (a vertex with two outgoing edges: e touches itself there); its
    loops are then left out.
    """

    vertices: np.ndarray
    offsets: np.ndarray
    element: np.ndarray
    simple: np.ndarray


@njit(cache=True)
def _walk_loops(edge_offsets, start, end, vertices, loop_first, loop_element, simple):  # pragma: no cover - compiled
    """Chain each element's boundary edges (sorted by start) into loops; returns the number of loops."""
    n_loops = 0
    visited = np.zeros(start.shape[0], dtype=np.bool_)
    for e in range(edge_offsets.shape[0] - 1):
        a, b = edge_offsets[e], edge_offsets[e + 1]
        for i in range(a, b - 1):
            if start[i] == start[i + 1]:  # two edges leave one vertex: not simple loops
                simple[e] = False
        if not simple[e]:
            continue
        first_loop = n_loops
        pos = a
        for i in range(a, b):
            if visited[i]:
                continue
            loop_first[n_loops] = pos
            loop_element[n_loops] = e
            n_loops += 1
            cur = i
            while True:
                visited[cur] = True
                vertices[pos] = start[cur]
                pos += 1
                lo, hi = a, b  # the edge that starts where this one ends
                while lo < hi:
                    mid = (lo + hi) // 2
                    if start[mid] < end[cur]:
                        lo = mid + 1
                    else:
                        hi = mid
                if lo >= b or start[lo] != end[cur]:
                    simple[e] = False
                    break
                cur = lo
                if visited[cur]:
                    break
            if not simple[e] or cur != i:  # an open chain, or one that closed elsewhere than it began
                simple[e] = False
                n_loops = first_loop
                break
    return n_loops


def boundary_loops(edge_offsets: np.ndarray, edges: np.ndarray, n_elements: int) -> BoundaryLoops:
    """The :class:`BoundaryLoops` of counter-clockwise boundary ``edges`` (n, 2), sorted by element
    (CSR ``edge_offsets``) and start vertex."""
    vertices = np.zeros(len(edges), dtype=np.int64)
    loop_first = np.zeros(len(edges) + 1, dtype=np.int64)
    loop_element = np.zeros(len(edges), dtype=np.int64)
    simple = np.ones(n_elements, dtype=np.bool_)
    n_loops = _walk_loops(edge_offsets, np.ascontiguousarray(edges[:, 0]), np.ascontiguousarray(edges[:, 1]),
                          vertices, loop_first, loop_element, simple)
    element = loop_element[:n_loops]
    # a loop ends where the next one begins, or at its element's last edge
    next_first = np.r_[loop_first[1:n_loops], 0]
    last_of_element = np.r_[element[1:] != element[:-1], True] if n_loops else np.zeros(0, dtype=bool)
    ends = np.where(last_of_element, edge_offsets[element + 1], next_first)
    lengths = ends - loop_first[:n_loops]
    take = _ranges(loop_first[:n_loops], ends)
    offsets = np.zeros(n_loops + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return BoundaryLoops(vertices[take], offsets, element, simple)


def _ranges(starts: np.ndarray, stops: np.ndarray) -> np.ndarray:
    """Concatenated arange(starts[i], stops[i])."""
    lengths = stops - starts
    first = np.cumsum(lengths) - lengths
    return (np.repeat(starts - first, lengths) + np.arange(int(lengths.sum()))).astype(np.int64)


def _loop_areas(points: np.ndarray, loops: BoundaryLoops) -> np.ndarray:
    """Signed area of every loop (positive: counter-clockwise, the outer boundary; negative: a hole)."""
    v = loops.vertices
    nxt = np.arange(len(v)) + 1
    nxt[loops.offsets[1:] - 1] = loops.offsets[:-1]
    a, b = points[v], points[v[nxt]]
    cross = a[:, 0] * b[:, 1] - a[:, 1] * b[:, 0]
    return 0.5 * np.add.reduceat(cross, loops.offsets[:-1]) if len(v) else np.zeros(0)


def _one_outer_loop(points: np.ndarray, loops: BoundaryLoops, n_elements: int) -> np.ndarray:
    """Per element: exactly one counter-clockwise loop (a connected polygon, with any holes)."""
    outer = _loop_areas(points, loops) > 0
    return np.bincount(loops.element[outer], minlength=n_elements) == 1


# ---------------------------------------------------------------------------
# triangulation and its proof


def _constrained_triangles(points: np.ndarray, loops: BoundaryLoops, elements: np.ndarray
                           ) -> tuple[np.ndarray, np.ndarray]:
    """(triangles (n, 3) counter-clockwise vertex ids, element of each): GEOS's constrained Delaunay
    triangulation of the polygons of the ``elements`` mask (outer loop, then holes)."""
    chosen = elements[loops.element]
    if not chosen.any():
        return np.zeros((0, 3), dtype=np.int64), np.zeros(0, dtype=np.int64)
    lengths = np.diff(loops.offsets)[chosen]
    loop_element = loops.element[chosen]
    outer_first = np.lexsort((_loop_areas(points, loops)[chosen] < 0, loop_element))  # each polygon's shell first
    lengths, loop_element = lengths[outer_first], loop_element[outer_first]
    vids = loops.vertices[_ranges(loops.offsets[:-1][chosen][outer_first],
                                  loops.offsets[1:][chosen][outer_first])]
    polygon_of_loop = np.cumsum(np.r_[True, loop_element[1:] != loop_element[:-1]]) - 1
    rings = shapely.linearrings(points[vids], indices=np.repeat(np.arange(len(lengths)), lengths))
    polygons = shapely.polygons(rings, indices=polygon_of_loop)
    polygon_element = loop_element[np.r_[True, loop_element[1:] != loop_element[:-1]]]
    valid = shapely.is_valid(polygons)  # GEOS may refuse an invalid one: such elements keep their fine triangles
    polygons, polygon_element = polygons[valid], polygon_element[valid]
    coords, polygon_index = shapely.get_coordinates(shapely.constrained_delaunay_triangles(polygons),
                                                    return_index=True)
    coords = coords.reshape(-1, 4, 2)[:, :3]  # closed rings of 4 points: the triangles' corners
    owner = polygon_element[polygon_index[::4]]
    tri = _match_vertices(points, coords.reshape(-1, 2)).reshape(-1, 3)
    unmatched = (tri < 0).any(axis=1)  # not expected: GEOS adds no points; such elements are dropped
    if unmatched.any():
        bad = np.zeros(len(elements), dtype=bool)
        bad[owner[unmatched]] = True
        tri, owner = tri[~bad[owner]], owner[~bad[owner]]
    clockwise = _signed_areas(points[tri]) < 0
    tri[clockwise, 1], tri[clockwise, 2] = tri[clockwise, 2], tri[clockwise, 1].copy()
    return tri, owner


def _match_vertices(points: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """The id of the point equal to each query (n, 2) (exactly: GEOS returns the coordinates it was given),
    -1 where none is."""
    key = points[:, 0] + 1j * points[:, 1]  # NumPy orders complex numbers lexicographically: (x, y)
    order = np.argsort(key)
    sorted_key = key[order]
    query = queries[:, 0] + 1j * queries[:, 1]
    pos = np.minimum(np.searchsorted(sorted_key, query), len(key) - 1)
    return np.where(sorted_key[pos] == query, order[pos], -1)


def _signed_areas(corners: np.ndarray) -> np.ndarray:
    """Signed areas of triangles given as (n, 3, 2) corners (positive: counter-clockwise)."""
    u, v = corners[:, 1] - corners[:, 0], corners[:, 2] - corners[:, 0]
    return 0.5 * (u[:, 0] * v[:, 1] - u[:, 1] * v[:, 0])


def tiles_elements(mesh: PolytopicMesh, triangles: np.ndarray, owner: np.ndarray, edge_element: np.ndarray,
                   edges: np.ndarray) -> np.ndarray:
    """Per element: whether its ``triangles`` (counter-clockwise, ``owner`` their element) tile it exactly.

    Checks (the module docstring): every triangle non-degenerate and
    positively oriented; per (element, undirected edge) the triangles'
    directed edges sum to the element's boundary ``edges`` (counter-clockwise,
    of element ``edge_element``), each boundary edge an edge of exactly one
    triangle; the areas sum to |K| to :data:`AREA_TOL`.  Elements without
    triangles are False.
    """
    n_el, n = mesh.n_elements, len(mesh.points)
    ok = np.bincount(owner, minlength=n_el) > 0
    corners = mesh.points[triangles]
    area = _signed_areas(corners)
    longest = np.max([np.linalg.norm(corners[:, i] - corners[:, j], axis=1) for i, j in ((0, 1), (1, 2), (0, 2))],
                     axis=0) if len(triangles) else np.zeros(0)
    flat = area <= DEGENERATE_TOL * longest**2
    ok[owner[flat]] = False

    # directed edges as (element, low, high) rows with +1 along low -> high, -1 against
    tri_rows, tri_sign = _edge_rows(np.repeat(owner, 3), triangles.ravel(), np.roll(triangles, -1, axis=1).ravel())
    bnd_rows, bnd_sign = _edge_rows(edge_element, edges[:, 0], edges[:, 1])
    rows = np.concatenate([tri_rows, bnd_rows])
    inverse, n_keys = _dense_ranks(_row_keys(rows, max(n, n_el)))
    net = np.bincount(inverse, weights=np.r_[tri_sign, -bnd_sign], minlength=n_keys)
    ok[rows[net[inverse] != 0, 0]] = False  # an edge left over: not a tiling
    in_triangles = np.bincount(inverse[: len(tri_rows)], minlength=n_keys)
    ok[edge_element[in_triangles[inverse[len(tri_rows):]] != 1]] = False

    total = np.bincount(owner, weights=area, minlength=n_el)
    ok &= np.abs(total - mesh.measure) <= AREA_TOL * mesh.measure
    return ok


def _edge_rows(element: np.ndarray, u: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Directed edges u -> v of ``element`` as rows (element, low, high) and +1 (u < v) or -1."""
    return np.column_stack([element, np.minimum(u, v), np.maximum(u, v)]), np.where(u < v, 1, -1)


def _face_simplices(mesh: PolytopicMesh, simplices: np.ndarray, simplex_element: np.ndarray) -> np.ndarray:
    """(n_faces, 2): on each side of each face, the new sub-triangle that has the face as an edge."""
    n_el = mesh.n_elements
    edge_rows = np.concatenate([_edge_rows(simplex_element, simplices[:, i], simplices[:, j])[0]
                                for i, j in ((0, 1), (1, 2), (0, 2))])
    edge_simplex = np.tile(np.arange(len(simplices), dtype=np.int64), 3)
    sides = [np.flatnonzero(mesh.face_elements[:, side] >= 0) for side in (0, 1)]
    face_rows = [_edge_rows(mesh.face_elements[f, side], mesh.face_vertices[f, 0], mesh.face_vertices[f, 1])[0]
                 for side, f in enumerate(sides)]
    key = _row_keys(np.concatenate([edge_rows, *face_rows]), max(len(mesh.points), n_el))
    edge_key, face_key = key[: len(edge_rows)], key[len(edge_rows):]
    order = np.argsort(edge_key, kind="stable")
    edge_key, edge_simplex = edge_key[order], edge_simplex[order]
    pos = np.minimum(np.searchsorted(edge_key, face_key), len(edge_key) - 1)
    if (edge_key[pos] != face_key).any():  # pragma: no cover - tiles_elements proved every face an edge
        raise AssertionError("a face is not an edge of its element's sub-triangles")
    out = np.full(mesh.face_elements.shape, -1, dtype=np.int64)
    out[sides[0], 0] = edge_simplex[pos[: len(sides[0])]]
    out[sides[1], 1] = edge_simplex[pos[len(sides[0]):]]
    return out


__all__ = ["QUADRATURE_SIMPLICES", "DEFAULT_QUADRATURE_SIMPLICES", "BoundaryLoops", "boundary_loops", "coarse_quadrature_mesh", "quadrature_mesh",
           "tiles_elements"]
