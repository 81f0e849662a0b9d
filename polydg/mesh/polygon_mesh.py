"""Polygon meshes given directly: merge near-duplicate points, triangulate polygons.

A polygon mesh arrives as points plus polygons in CSR form (``offsets``,
``connectivity``).  Points closer than a tolerance relative to the mesh size
are merged first, so that neighbouring polygons share their vertices and
edges match.  Each polygon then becomes triangles, its sub-simplices: convex
polygons (the common case) by a fan, all at once; non-convex ones by
shapely's constrained Delaunay triangulation, which never leaves the polygon.
"""

from __future__ import annotations

import numpy as np
import shapely
from numba import njit
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components
from scipy.spatial import cKDTree

from ..errors import MeshError
from .simplicial import MAX_COORDINATE, SimplexMesh

#: merge tolerance relative to the median polygon edge length
MERGE_TOL = 1e-6


def merge_near_duplicates(points: np.ndarray, connectivity: np.ndarray, tol: float) -> tuple[np.ndarray, np.ndarray]:
    """Merge points closer than ``tol``; returns (points, remapped connectivity).

    Groups are the connected components of the "closer than tol" graph; each
    group keeps its first point (deterministic).
    """
    n = len(points)
    if tol <= 0 or n < 2:
        return points, connectivity
    pairs = cKDTree(points).query_pairs(tol, output_type="ndarray")
    if len(pairs) == 0:
        return points, connectivity
    graph = coo_matrix((np.ones(len(pairs)), (pairs[:, 0], pairs[:, 1])), shape=(n, n))
    _, label = connected_components(graph, directed=False)
    first = np.full(label.max() + 1, n, dtype=np.int64)
    np.minimum.at(first, label, np.arange(n))
    order = np.argsort(first, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    return points[np.sort(first)], rank[label][connectivity].astype(np.int64)


def _drop_repeated_vertices(offsets: np.ndarray, conn: np.ndarray, source: str) -> tuple[np.ndarray, np.ndarray]:
    """Remove consecutive repeated vertices (cyclically) left by merging."""
    n_poly = len(offsets) - 1
    poly = np.repeat(np.arange(n_poly), np.diff(offsets))
    nxt = np.arange(len(conn)) + 1
    nxt[offsets[1:] - 1] = offsets[:-1]  # wrap around within each polygon
    keep = conn != conn[nxt]
    counts = np.bincount(poly[keep], minlength=n_poly)
    if (counts < 3).any():
        c = int(np.flatnonzero(counts < 3)[0])
        raise MeshError(f"{source}: polygon {c} has fewer than 3 distinct vertices "
                        f"{conn[offsets[c]:offsets[c + 1]].tolist()} after merging near-duplicate points")
    new_offsets = np.zeros(n_poly + 1, dtype=np.int64)
    np.cumsum(counts, out=new_offsets[1:])
    return new_offsets, conn[keep]


def _signed_areas(points, offsets, conn):
    nxt = np.arange(len(conn)) + 1
    nxt[offsets[1:] - 1] = offsets[:-1]
    a, b = points[conn], points[conn[nxt]]
    cross = a[:, 0] * b[:, 1] - a[:, 1] * b[:, 0]
    return 0.5 * np.add.reduceat(cross, offsets[:-1]), nxt


def triangulate_polygons(points: np.ndarray, offsets: np.ndarray, conn: np.ndarray,
                         source: str = "<polygons>") -> tuple[np.ndarray, np.ndarray]:
    """Triangles (n, 3) and the polygon of each, for 2D polygons in CSR form.

    Works for non-convex polygons: no triangle leaves its polygon and the
    triangles' areas add up to the polygon's.
    """
    offsets = np.asarray(offsets, dtype=np.int64)
    conn = np.asarray(conn, dtype=np.int64)
    n_poly = len(offsets) - 1
    sizes = np.diff(offsets)
    area, nxt = _signed_areas(points, offsets, conn)
    tiny = np.abs(area) <= 1e-14 * np.maximum(_bbox_diag(points) ** 2, 1e-300)
    if tiny.any():
        c = int(np.flatnonzero(tiny)[0])
        raise MeshError(f"{source}: polygon {c} has zero area (vertices {conn[offsets[c]:offsets[c + 1]].tolist()})")
    # orient every polygon counter-clockwise
    conn = _reverse_where(conn, offsets, area < 0)
    area = np.abs(area)
    # convex: every turn is a left turn (collinear vertices allowed)
    prv = np.arange(len(conn)) - 1
    prv[offsets[:-1]] = offsets[1:] - 1
    nxt = np.arange(len(conn)) + 1
    nxt[offsets[1:] - 1] = offsets[:-1]
    p0, p1, p2 = points[conn[prv]], points[conn], points[conn[nxt]]
    turn = (p1[:, 0] - p0[:, 0]) * (p2[:, 1] - p1[:, 1]) - (p1[:, 1] - p0[:, 1]) * (p2[:, 0] - p1[:, 0])
    poly_of = np.repeat(np.arange(n_poly), sizes)
    scale = np.repeat(area, sizes)
    right_turn = turn < -1e-12 * scale
    convex = np.bincount(poly_of[right_turn], minlength=n_poly) == 0
    # a fan's apex must not lie on the line of an edge it is joined to: a corner (a strict left turn) whose
    # neighbours are corners too, not vertices on a straight side (hanging vertices of agglomerated meshes)
    corner = turn > 1e-12 * scale
    apex_ok = corner & corner[prv] & corner[nxt]
    position = np.arange(len(conn)) - np.repeat(offsets[:-1], sizes)
    apex = np.full(n_poly, np.iinfo(np.int64).max)
    candidates = np.flatnonzero(apex_ok)
    np.minimum.at(apex, poly_of[candidates], position[candidates])  # the first such vertex (v0 where it is one)
    fanned = convex & (apex < np.iinfo(np.int64).max)

    # fans for convex polygons: (v_a, v_{a+i}, v_{a+i+1}), i = 1 .. k-2, from the apex a
    cp = np.flatnonzero(fanned)
    k = sizes[cp] - 2
    fan_poly = np.repeat(cp, k)
    local = np.arange(int(k.sum())) - np.repeat(np.cumsum(k) - k, k) + 1
    base, size, a = offsets[fan_poly], sizes[fan_poly], apex[fan_poly]
    fan = np.stack([conn[base + a], conn[base + (a + local) % size], conn[base + (a + local + 1) % size]], axis=1)

    tris, owner = [fan], [fan_poly]
    ncp = np.flatnonzero(~fanned)  # non-convex, or convex with no apex (straight sides everywhere): triangulated
    if len(ncp):
        t, o = _constrained_triangulation(points, offsets, conn, ncp, source)
        tris.append(t)
        owner.append(o)
    tri = np.concatenate(tris).astype(np.int64)
    own = np.concatenate(owner).astype(np.int64)
    order = np.argsort(own, kind="stable")
    return tri[order], own[order]


def _bbox_diag(points):
    return float(np.linalg.norm(points.max(axis=0) - points.min(axis=0))) if len(points) else 1.0


def _reverse_where(conn, offsets, flip):
    if not flip.any():
        return conn
    conn = conn.copy()
    sizes = np.diff(offsets)
    pos = np.arange(len(conn))
    poly = np.repeat(np.arange(len(sizes)), sizes)
    mirrored = offsets[poly] + (offsets[poly + 1] - 1 - pos)
    sel = flip[poly]
    conn[pos[sel]] = conn.copy()[mirrored[sel]]
    return conn


def _constrained_triangulation(points, offsets, conn, polys, source):
    """Constrained Delaunay triangles of the listed polygons (non-convex, or with no fan apex), as vertex ids."""
    sizes = np.diff(offsets)[polys]
    vids = conn[np.repeat(offsets[polys], sizes) + np.arange(int(sizes.sum())) - np.repeat(np.cumsum(sizes) - sizes, sizes)]
    geoms = shapely.polygons(shapely.linearrings(points[vids], indices=np.repeat(np.arange(len(polys)), sizes)))
    invalid = ~shapely.is_valid(geoms)
    if invalid.any():
        c = int(polys[np.flatnonzero(invalid)[0]])
        raise MeshError(f"{source}: polygon {c} is self-intersecting ({shapely.is_valid_reason(geoms[invalid][0])})")
    collections = shapely.constrained_delaunay_triangles(geoms)
    parts, part_index = shapely.get_parts(collections, return_index=True)
    coords = shapely.get_coordinates(shapely.get_exterior_ring(parts)).reshape(len(parts), 4, 2)[:, :3]
    poly_of_tri = polys[part_index]
    # vertex ids: match (polygon, x, y) exactly against the polygon's vertices
    vpoly = np.repeat(polys, sizes)
    keys = np.column_stack([vpoly, points[vids]])
    queries = np.column_stack([np.repeat(poly_of_tri, 3), coords.reshape(-1, 2)])
    table = np.concatenate([keys, queries])
    _, inverse = np.unique(table, axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    lookup = np.full(inverse.max() + 1, -1, dtype=np.int64)
    lookup[inverse[: len(keys)]] = vids
    tri = lookup[inverse[len(keys):]].reshape(-1, 3)
    if (tri < 0).any():  # pragma: no cover - shapely returned a point that is not a vertex
        raise MeshError(f"{source}: could not triangulate a non-convex polygon")
    # shapely's triangles may be clockwise: orient them
    a, b, c3 = points[tri[:, 0]], points[tri[:, 1]], points[tri[:, 2]]
    cw = (b[:, 0] - a[:, 0]) * (c3[:, 1] - a[:, 1]) - (b[:, 1] - a[:, 1]) * (c3[:, 0] - a[:, 0]) < 0
    tri[cw, 1], tri[cw, 2] = tri[cw, 2], tri[cw, 1].copy()
    return tri, poly_of_tri


def polygon_mesh(points: np.ndarray, offsets: np.ndarray, connectivity: np.ndarray, *, source: str = "<polygons>",
                 merge_tol: float = MERGE_TOL) -> SimplexMesh:
    """The triangulated :class:`SimplexMesh` of a 2D polygon mesh, ``cell_element`` = polygon id.

    ``merge_tol`` is relative to the median polygon edge length; 0 disables
    merging.
    """
    points = np.asarray(points, dtype=np.float64)
    offsets = np.asarray(offsets, dtype=np.int64)
    conn = np.asarray(connectivity, dtype=np.int64)
    if points.ndim != 2 or points.shape[1] != 2:
        raise MeshError(f"{source}: polygon meshes must be 2D, got points of shape {points.shape}")
    bad = ~np.isfinite(points).all(axis=1)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise MeshError(f"{source}: point {i} has a non-finite coordinate {points[i].tolist()}")
    huge = (np.abs(points) > MAX_COORDINATE).any(axis=1)
    if huge.any():  # checked before the edge lengths and areas below, which would overflow
        i = int(np.flatnonzero(huge)[0])
        raise MeshError(f"{source}: point {i} has a coordinate beyond {MAX_COORDINATE:.0e} in magnitude "
                        f"{points[i].tolist()}")
    if len(offsets) < 2:
        raise MeshError(f"{source}: the mesh has no polygons")
    if offsets[0] != 0 or (np.diff(offsets) < 0).any() or offsets[-1] != len(conn):
        raise MeshError(f"{source}: polygon offsets are not increasing from 0 to {len(conn)}")
    small = np.diff(offsets) < 3
    if small.any():
        c = int(np.flatnonzero(small)[0])
        raise MeshError(f"{source}: polygon {c} has {int(np.diff(offsets)[c])} vertices (at least 3 needed)")
    if len(conn) and (conn.min() < 0 or conn.max() >= len(points)):
        j = int(np.flatnonzero((conn < 0) | (conn >= len(points)))[0])
        c = int(np.searchsorted(offsets, j, side="right") - 1)
        raise MeshError(f"{source}: polygon {c} refers to point {int(conn[j])}, out of range "
                        f"(the mesh has {len(points)} points)")
    nxt = np.arange(len(conn)) + 1
    nxt[offsets[1:] - 1] = offsets[:-1]
    edge = np.linalg.norm(points[conn[nxt]] - points[conn], axis=1)
    tol = merge_tol * float(np.median(edge)) if merge_tol > 0 else 0.0
    points, conn = merge_near_duplicates(points, conn, tol)
    offsets, conn = _drop_repeated_vertices(offsets, conn, source)
    tri, owner = triangulate_polygons(points, offsets, conn, source)
    used = np.unique(tri)
    remap = np.full(len(points), -1, dtype=np.int64)
    remap[used] = np.arange(len(used))
    return SimplexMesh(points[used], remap[tri], cell_element=owner, source=source)


@njit(cache=True)
def count_prefixed_to_csr(values, n_rows):  # pragma: no cover - compiled
    """Legacy VTK cell lists ``k i1 .. ik k i1 ..`` to (offsets, connectivity); -1 offsets on truncation."""
    offsets = np.zeros(n_rows + 1, dtype=np.int64)
    pos = 0
    for r in range(n_rows):
        if pos >= values.shape[0]:
            offsets[0] = -1
            return offsets, values[:0]
        k = values[pos]
        if k < 0 or k > values.shape[0] - pos - 1:  # not pos + 1 + k, which can overflow
            offsets[0] = -1
            offsets[1] = r
            return offsets, values[:0]
        offsets[r + 1] = offsets[r] + k
        pos += 1 + k
    conn = np.empty(offsets[n_rows], dtype=np.int64)
    pos = 0
    for r in range(n_rows):
        k = values[pos]
        for j in range(k):
            conn[offsets[r] + j] = values[pos + 1 + j]
        pos += 1 + k
    return offsets, conn
