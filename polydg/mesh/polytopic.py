"""The polytopic mesh as a struct of arrays (docs/design.md §4).

Elements are unions of fine simplices ("sub-simplices").  Faces are the fine
facets that lie on element boundaries; facets inside one element are dropped.
Interior faces come first, sorted by interface (unique element pair
``e1 < e2``); boundary faces follow, sorted by element.

Everything is int64 / float64 and built with whole-array NumPy: no Python loop
over cells, facets or elements.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit
from scipy.spatial import cKDTree

from ..errors import MeshError, OptionError
from ..threads import parallel_range, range_kernel
from .geometry import facet_local_vertices, facet_normals, max_edge_lengths, signed_volumes
from .simplicial import SimplexMesh

#: relative size below which a simplex counts as degenerate (|vol| / longest_edge^d)
DEGENERATE_TOL = 1e-10


@dataclass
class PolytopicMesh:
    """A polygonal (2D) or polyhedral (3D) mesh, every array indexed by id (4D: a space-time slab
    over a 3D mesh, :mod:`polydg.spacetime.slab`).

    Sub-simplices
        ``points`` (n_points, d); ``simplices`` (n_sub, d+1), positively
        oriented and sorted by owning element; ``element_offsets``
        (n_elements+1,) so that element e owns
        ``simplices[element_offsets[e]:element_offsets[e+1]]``;
        ``simplex_element`` (n_sub,); ``simplex_volume`` (n_sub,).
    Elements
        ``bbox_min``, ``bbox_max`` (n_elements, d); ``measure``,
        ``diameter`` (n_elements,).
    Faces (fine facets on element boundaries)
        ``face_vertices`` (n_faces, d); ``face_elements`` (n_faces, 2) with -1
        in the second column on the boundary; ``face_simplices`` (n_faces, 2)
        the adjacent sub-simplex on each side (-1 outside);
        ``face_measure`` (n_faces,); ``face_normal`` (n_faces, d) unit, from
        the first element to the second (outward on the boundary);
        ``face_tag`` (n_faces,) boundary tag (0 untagged, -1 on interior
        faces).  Faces ``[0, n_interior_faces)`` are interior.
    Interfaces
        ``interface_elements`` (n_interfaces, 2) with e1 < e2, lexicographically
        sorted; ``interface_offsets`` (n_interfaces+1,) into the interior faces.
    Fine cells (the input's cells, :class:`~polydg.mesh.simplicial.SimplexMesh`)
        ``simplex_cell`` (n_sub,) the fine cell each sub-simplex lies in (-1
        where it spans several: coarse quadrature simplices); ``face_cells``
        (n_faces, 2) the fine cell on each side of each face (-1 outside);
        ``n_fine_cells`` their number.  A rank's sub-mesh keeps the whole
        mesh's numbering.  Where data per fine cell is read
        (:class:`~polydg.problem.data.CellData`).
    """

    points: np.ndarray
    simplices: np.ndarray
    element_offsets: np.ndarray
    simplex_element: np.ndarray
    simplex_volume: np.ndarray
    bbox_min: np.ndarray
    bbox_max: np.ndarray
    measure: np.ndarray
    diameter: np.ndarray
    face_vertices: np.ndarray
    face_elements: np.ndarray
    face_simplices: np.ndarray
    face_measure: np.ndarray
    face_normal: np.ndarray
    face_tag: np.ndarray
    n_interior_faces: int
    interface_elements: np.ndarray
    interface_offsets: np.ndarray
    source: str = "<array>"
    simplex_cell: np.ndarray | None = None
    face_cells: np.ndarray | None = None
    n_fine_cells: int = 0

    # ------------------------------------------------------------------ sizes
    @property
    def dim(self) -> int:
        return int(self.points.shape[1])

    @property
    def n_elements(self) -> int:
        return int(self.element_offsets.shape[0] - 1)

    @property
    def n_simplices(self) -> int:
        return int(self.simplices.shape[0])

    @property
    def n_faces(self) -> int:
        return int(self.face_elements.shape[0])

    @property
    def n_boundary_faces(self) -> int:
        return self.n_faces - self.n_interior_faces

    @property
    def n_interfaces(self) -> int:
        return int(self.interface_elements.shape[0])

    @property
    def boundary_faces(self) -> slice:
        return slice(self.n_interior_faces, self.n_faces)

    def simplex_vertices(self) -> np.ndarray:
        """(n_sub, d+1, d) coordinates of every sub-simplex's vertices."""
        return self.points[self.simplices]

    def face_vertex_coordinates(self, faces: slice | np.ndarray = slice(None)) -> np.ndarray:
        """(n, d, d) coordinates of the vertices of the selected faces."""
        return self.points[self.face_vertices[faces]]

    def element_neighbours(self) -> tuple[np.ndarray, np.ndarray]:
        """CSR (offsets, neighbours) of the element adjacency graph, sorted."""
        a, b = self.interface_elements[:, 0], self.interface_elements[:, 1]
        rows = np.concatenate([a, b])
        cols = np.concatenate([b, a])
        order = np.lexsort((cols, rows))
        counts = np.bincount(rows, minlength=self.n_elements)
        offsets = np.zeros(self.n_elements + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        return offsets, cols[order].astype(np.int64)

    def element_boundary_vertices(self) -> tuple[np.ndarray, np.ndarray]:
        """CSR (offsets, vertex ids) of the vertices on each element's boundary."""
        return boundary_vertices(self.face_vertices, self.face_elements, self.n_elements)

    def statistics(self) -> dict:
        """Mesh statistics in the rows of the paper's Table 3."""
        sub_per_el = np.diff(self.element_offsets)
        faces_per_el = np.bincount(
            self.face_elements[self.face_elements >= 0].ravel(), minlength=self.n_elements
        )

        def mmm(a: np.ndarray) -> dict:
            return {"min": int(a.min()), "mean": float(a.mean()), "max": int(a.max())}

        return {
            "dimension": self.dim,
            "elements": self.n_elements,
            "sub_elements": self.n_simplices,
            "interior_faces": self.n_interior_faces,
            "interfaces": self.n_interfaces,
            "boundary_faces": self.n_boundary_faces,
            "sub_elements_per_element": mmm(sub_per_el),
            "faces_per_element": mmm(faces_per_el),
        }

    def __repr__(self) -> str:
        s = self.statistics()
        return (
            f"PolytopicMesh({self.dim}D, {s['elements']} elements, {s['sub_elements']} sub-simplices, "
            f"{s['interior_faces']} interior faces on {s['interfaces']} interfaces, "
            f"{s['boundary_faces']} boundary faces, source={self.source!r})"
        )


# ---------------------------------------------------------------------------
# construction


def _row_keys(rows: np.ndarray, n_values: int) -> np.ndarray:
    """int64 keys of integer rows with entries in [0, ``n_values``): equal rows have equal keys, and the
    keys order as the rows do lexicographically (a stable sort by key is a stable sort of the rows).

    The columns are shifted into the key one at a time; where the next would overflow 63 bits, the key
    so far is first replaced by its dense rank (:func:`_dense_ranks`, a sort), and the column by its own
    where even that leaves too few bits.  Keys are therefore comparable within one call only: rows to be
    matched are keyed together.
    """
    bits = _bit_width(n_values)
    key = np.zeros(len(rows), dtype=np.int64)
    key_bits = 0
    for column in rows.T:
        column_bits = bits
        if key_bits + column_bits > 63:
            key, n_keys = _dense_ranks(key)
            key_bits = _bit_width(n_keys)
        if key_bits + column_bits > 63:
            column, n_column_values = _dense_ranks(column)
            column_bits = _bit_width(n_column_values)
        key = (key << column_bits) | column
        key_bits += column_bits
    return key


def _bit_width(n_values: int) -> int:
    """Bits that hold the values 0, ..., n_values - 1 (at least one)."""
    return max(int(n_values - 1).bit_length(), 1)


def _dense_ranks(key: np.ndarray) -> tuple[np.ndarray, int]:
    """(rank of each key among the distinct keys, number of distinct keys): equal keys, equal ranks, in
    the keys' order (a sort: NumPy's hashing unique is slower on millions of keys)."""
    order = np.argsort(key)
    sorted_key = key[order]
    rank = np.empty(len(key), dtype=np.int64)
    if len(key) == 0:
        return rank, 0
    sorted_rank = np.cumsum(np.r_[True, sorted_key[1:] != sorted_key[:-1]]) - 1
    rank[order] = sorted_rank
    return rank, int(sorted_rank[-1]) + 1


def _orient_and_check(fine: SimplexMesh) -> tuple[np.ndarray, np.ndarray]:
    """Positively orient the cells; raise on degenerate ones.  Returns (cells, |volumes|)."""
    cells = fine.cells.copy()
    vertices = fine.points[cells]
    volume = signed_volumes(vertices)
    scale = max_edge_lengths(vertices) ** fine.dim
    degenerate = np.abs(volume) <= DEGENERATE_TOL * scale
    if degenerate.any():
        c = int(np.flatnonzero(degenerate)[0])
        raise MeshError(
            f"{fine.source}: cell {c} is degenerate (measure {volume[c]:.3e}, vertices "
            f"{cells[c].tolist()} at {fine.points[cells[c]].tolist()}); "
            f"{int(degenerate.sum())} degenerate cells in all"
        )
    inverted = volume < 0
    cells[inverted, 0], cells[inverted, 1] = cells[inverted, 1], cells[inverted, 0].copy()
    return cells, np.abs(volume)


def _check_unmatched_interior(
    fine: SimplexMesh, facets: np.ndarray, cells_of: np.ndarray, normals: np.ndarray, h: float
) -> None:
    """Raise if a boundary facet overlaps another boundary facet face to face.

    Such a pair lies inside the domain: a hanging node or points that should
    have been merged.  Candidates are facets j whose centroid lies within
    facet i's own size of i's centroid (:func:`_facet_neighbours`).
    """
    if len(facets) < 2:
        return
    x = fine.points[facets]
    centroid = x.mean(axis=1)
    for i, j in _facet_neighbours(centroid, max_edge_lengths(x)):
        _raise_if_on_facet(fine, facets, cells_of, normals, h, x, centroid, i, j)


#: candidate pairs examined at once by :func:`_check_unmatched_interior` (bounds its memory)
FACET_PAIRS_PER_BATCH = 1 << 22


def _facet_neighbours(centroid: np.ndarray, size: np.ndarray):
    """Batches of directed pairs (i, j), j != i, with |c_j - c_i| <= size_i.

    Each facet is searched within its own size: a radius of the largest
    facet for all of them (a space-time slab's side faces are as long as the
    time step, its top and bottom triangles as small as the mesh) made
    billions of pairs.  Facets are taken in order of size, in batches of
    about :data:`FACET_PAIRS_PER_BATCH` pairs whose sizes differ by at most 2x.
    """
    tree = cKDTree(centroid)
    counts = tree.query_ball_point(centroid, r=size, return_length=True)
    order = np.argsort(size, kind="stable")
    sorted_size = size[order]
    cum = np.cumsum(counts[order])
    start = 0
    while start < len(order):
        base = cum[start - 1] if start else 0
        stop = int(np.searchsorted(cum, base + FACET_PAIRS_PER_BATCH, side="right"))
        # a batch searches within its largest size: no facet more than twice its first one's
        stop = min(stop, int(np.searchsorted(sorted_size, 2 * sorted_size[start], side="right")))
        stop = max(stop, start + 1)
        rows = order[start:stop]
        found = cKDTree(centroid[rows]).sparse_distance_matrix(tree, max_distance=float(size[rows].max()),
                                                               output_type="ndarray")
        i, j = rows[found["i"]], found["j"]
        keep = (found["v"] <= size[i]) & (i != j)
        yield i[keep], j[keep]
        start = stop


def _raise_if_on_facet(fine: SimplexMesh, facets: np.ndarray, cells_of: np.ndarray, normals: np.ndarray,
                       h: float, x: np.ndarray, centroid: np.ndarray, i: np.ndarray, j: np.ndarray) -> None:
    """Raise if the centroid of facet j lies on facet i, of opposite normal, for a pair (i, j)."""
    opposite = np.einsum("ni,ni->n", normals[i], normals[j]) < -1 + 1e-8
    i, j = i[opposite], j[opposite]
    off_plane = np.abs(np.einsum("ni,ni->n", centroid[j] - x[i, 0], normals[i]))
    close = off_plane <= 1e-8 * h
    i, j = i[close], j[close]
    if len(i) == 0:
        return
    d = fine.dim
    if d == 2:
        t = x[i, 1] - x[i, 0]
        s = np.einsum("ni,ni->n", centroid[j] - x[i, 0], t) / np.einsum("ni,ni->n", t, t)
        inside = (s > 1e-9) & (s < 1 - 1e-9)
    else:  # the centroid's coordinates in facet i's edges e_k (rows of E): the Gram system E E^T lam = E r
        E = x[i, 1:] - x[i, :1]  # (m, d-1, d)
        r = centroid[j] - x[i, 0]
        g = np.einsum("nki,nli->nkl", E, E)
        rhs = np.einsum("nki,ni->nk", E, r)
        lam = np.linalg.solve(g, rhs[..., None])[..., 0]
        inside = (lam > 1e-9).all(axis=1) & (lam.sum(axis=1) < 1 - 1e-9)
    if inside.any():
        a, b = int(i[inside][0]), int(j[inside][0])
        raise MeshError(
            f"{fine.source}: unmatched facet inside the domain: facet {facets[b].tolist()} of cell "
            f"{int(cells_of[b])} lies on facet {facets[a].tolist()} of cell {int(cells_of[a])} "
            f"near {centroid[b].round(12).tolist()} without sharing its vertices "
            "(hanging node, or near-duplicate points that were not merged)"
        )


@range_kernel
def _diameters(e_lo, e_hi, offsets, vertices, points, out):  # pragma: no cover - compiled
    """out[e]: the largest distance between two of the listed vertices of element e."""
    d = points.shape[1]
    for e in range(e_lo, e_hi):
        best = 0.0
        for a in range(offsets[e], offsets[e + 1]):
            pa = vertices[a]
            for b in range(a + 1, offsets[e + 1]):
                pb = vertices[b]
                s = 0.0
                for k in range(d):
                    t = points[pa, k] - points[pb, k]
                    s += t * t
                if s > best:
                    best = s
        out[e] = np.sqrt(best)


def boundary_vertices(face_vertices: np.ndarray, face_elements: np.ndarray,
                      n_elements: int) -> tuple[np.ndarray, np.ndarray]:
    """CSR (offsets, vertex ids) of the vertices on each element's boundary, sorted.

    The vertices of each element's faces gathered by element (a counting pass), then each element's short
    list sorted and its repeats dropped on every core: no sort of all the (element, vertex) keys.
    """
    fv = np.ascontiguousarray(face_vertices, dtype=np.int64)
    fe = np.ascontiguousarray(face_elements, dtype=np.int64)
    listed = np.zeros(n_elements + 1, dtype=np.int64)
    vertices = _gather_face_vertices(fv, fe, listed)
    distinct = np.empty(n_elements, dtype=np.int64)
    parallel_range(_sort_distinct, 0, n_elements, listed, vertices, distinct)
    offsets = np.zeros(n_elements + 1, dtype=np.int64)
    np.cumsum(distinct, out=offsets[1:])
    out = np.empty(int(offsets[-1]), dtype=np.int64)
    parallel_range(_copy_prefixes, 0, n_elements, listed, vertices, offsets, out)
    return offsets, out


@njit(cache=True)
def _gather_face_vertices(face_vertices, face_elements, listed):  # pragma: no cover - compiled
    """The vertices of every face of each element, element by element (a counting sort); ``listed`` (zeros,
    n_elements + 1) receives each element's list's offsets."""
    k = face_vertices.shape[1]
    for f in range(face_vertices.shape[0]):
        for side in range(2):
            if face_elements[f, side] >= 0:
                listed[face_elements[f, side] + 1] += k
    for e in range(1, listed.shape[0]):
        listed[e] += listed[e - 1]
    out = np.empty(listed[-1], dtype=np.int64)
    at = listed[:-1].copy()
    for f in range(face_vertices.shape[0]):
        for side in range(2):
            e = face_elements[f, side]
            if e >= 0:
                for j in range(k):
                    out[at[e]] = face_vertices[f, j]
                    at[e] += 1
    return out


@range_kernel
def _copy_prefixes(e_lo, e_hi, listed, vertices, offsets, out):  # pragma: no cover - compiled
    for e in range(e_lo, e_hi):
        a = listed[e]
        for m in range(offsets[e + 1] - offsets[e]):
            out[offsets[e] + m] = vertices[a + m]


@range_kernel
def _sort_distinct(e_lo, e_hi, offsets, vertices, distinct):  # pragma: no cover - compiled
    """Sort each element's list in place, its distinct ids first; distinct[e]: how many."""
    for e in range(e_lo, e_hi):
        a, b = offsets[e], offsets[e + 1]
        if b - a > 64:
            vertices[a:b] = np.sort(vertices[a:b])
        else:  # a short list: insertion sort in place, no allocation per element
            for k in range(a + 1, b):
                v = vertices[k]
                i = k - 1
                while i >= a and vertices[i] > v:
                    vertices[i + 1] = vertices[i]
                    i -= 1
                vertices[i + 1] = v
        m = 0
        for k in range(a, b):
            if m == 0 or vertices[k] != vertices[a + m - 1]:
                vertices[a + m] = vertices[k]
                m += 1
        distinct[e] = m


#: the peak memory (bytes) per fine cell of agglomerating a fine mesh and building its polytopic mesh, by
#: dimension, as measured (docs/performance.md, "Memory")
BUILD_BYTES_PER_CELL = {2: 450, 3: 680}
#: the share of :func:`build_bytes` a refusal goes by, so that it is sure whatever the mesh's shape
SURE_SHARE = 0.75


def build_bytes(dim: int, cells: int) -> int:
    """About the peak memory that agglomerating ``cells`` fine simplices of dimension ``dim`` and building
    their :class:`PolytopicMesh` take (:data:`BUILD_BYTES_PER_CELL`)."""
    return int(BUILD_BYTES_PER_CELL[3 if dim >= 3 else 2] * int(cells))


def require_polytopic(mesh, taker: str) -> None:
    """Refuse anything but a :class:`PolytopicMesh` where ``taker`` ("DGSpace takes a PolytopicMesh") needs
    one, in one line saying how to make it of the fine mesh a user most likely passed."""
    if not isinstance(mesh, PolytopicMesh):
        raise OptionError(f"{taker}, got {type(mesh).__name__}: make one of a fine mesh by "
                          "polydg.partition.agglomerate(fine, n) or polydg.mesh.build_polytopic_mesh(fine) (each "
                          "cell an element, or each polygon of a polygon mesh file, as polydg.mesh.load_mesh reads it)")


def build_polytopic_mesh(fine: SimplexMesh, cell_element: np.ndarray | None = None) -> PolytopicMesh:
    """Build the :class:`PolytopicMesh` whose element e is the union of the
    fine cells c with ``cell_element[c] == e``.

    ``cell_element`` defaults to ``fine.cell_element`` and then to one element
    per cell.  Element ids must be 0..n_elements-1, each used at least once.

    >>> from polydg.mesh.generators import unit_square
    >>> m = build_polytopic_mesh(unit_square(2))
    >>> m.n_elements, m.n_interior_faces, m.n_boundary_faces, float(round(m.measure.sum(), 12))
    (8, 8, 8, 1.0)
    """
    d = fine.dim
    if cell_element is None:
        cell_element = fine.cell_element
    if cell_element is None:
        cell_element = np.arange(fine.n_cells, dtype=np.int64)
    cell_element = np.asarray(cell_element, dtype=np.int64)
    if cell_element.shape != (fine.n_cells,):
        raise MeshError(f"{fine.source}: need one element id per cell, got shape {cell_element.shape}")
    if cell_element.min() < 0:
        raise MeshError(f"{fine.source}: negative element id {int(cell_element.min())}")
    n_el = int(cell_element.max()) + 1
    count = np.bincount(cell_element, minlength=n_el)
    if (count == 0).any():
        e = int(np.flatnonzero(count == 0)[0])
        raise MeshError(f"{fine.source}: element {e} is empty (no cell has that element id)")

    cells, volume = _orient_and_check(fine)
    order = np.argsort(cell_element, kind="stable")
    simplices = cells[order]
    simplex_element = cell_element[order]
    simplex_volume = volume[order]
    simplex_cell = fine.fine_cell()[order]
    original_cell = order  # for messages
    offsets = np.zeros(n_el + 1, dtype=np.int64)
    np.cumsum(count, out=offsets[1:])
    n_sub = len(simplices)
    P = fine.points

    # --- fine facets and their matching --------------------------------
    local = facet_local_vertices(d)
    facets = simplices[:, local].reshape(-1, d)  # facet k of simplex s at row s*(d+1)+k
    owner = np.repeat(np.arange(n_sub, dtype=np.int64), d + 1)
    opposite = simplices.reshape(-1)  # the vertex opposite facet k is local vertex k
    sorted_rows = np.sort(facets, axis=1)
    # the tagged boundary facets are found among the facets by key: keyed in the same call
    keys = _row_keys(np.concatenate([sorted_rows, np.sort(fine.boundary_facets, axis=1)]), len(P))
    key, tagged_key = keys[: len(sorted_rows)], keys[len(sorted_rows):]
    perm = np.argsort(key, kind="stable")
    key_sorted = key[perm]
    starts = np.flatnonzero(np.r_[True, key_sorted[1:] != key_sorted[:-1]])
    multiplicity = np.diff(np.r_[starts, len(key_sorted)])
    if (multiplicity > 2).any():
        g = int(np.flatnonzero(multiplicity > 2)[0])
        rows = perm[starts[g]: starts[g] + multiplicity[g]]
        raise MeshError(
            f"{fine.source}: facet {sorted_rows[rows[0]].tolist()} is shared by "
            f"{int(multiplicity[g])} cells {original_cell[owner[rows]].tolist()} (at most 2 allowed)"
        )
    paired = multiplicity == 2
    first = perm[starts[paired]]
    second = perm[starts[paired] + 1]
    single = perm[starts[~paired]]

    n_raw, _ = facet_normals(P[facets[single]])
    outward = np.einsum("ni,ni->n", n_raw, P[facets[single]].mean(axis=1) - P[opposite[single]]) > 0
    n_raw[~outward] *= -1
    h_mean = float((simplex_volume.sum() / n_sub) ** (1.0 / d))
    if not fine.facets_match:
        _check_unmatched_interior(fine, sorted_rows[single], original_cell[owner[single]], n_raw, h_mean)

    # --- interior faces: matched facets between different elements --------
    ea, eb = simplex_element[owner[first]], simplex_element[owner[second]]
    between = ea != eb
    fa, fb = first[between], second[between]
    ea, eb = ea[between], eb[between]
    swap = ea > eb
    f1 = np.where(swap, fb, fa)
    f2 = np.where(swap, fa, fb)
    e1 = np.minimum(ea, eb)
    e2 = np.maximum(ea, eb)
    pair_key = e1 * n_el + e2
    iorder = np.argsort(pair_key, kind="stable")
    f1, f2, e1, e2, pair_key = f1[iorder], f2[iorder], e1[iorder], e2[iorder], pair_key[iorder]
    n_int = len(f1)
    if n_int:
        istart = np.flatnonzero(np.r_[True, pair_key[1:] != pair_key[:-1]])
    else:
        istart = np.zeros(0, dtype=np.int64)
    interface_elements = np.stack([e1[istart], e2[istart]], axis=1).astype(np.int64)
    interface_offsets = np.r_[istart, n_int].astype(np.int64)

    # --- boundary faces ---------------------------------------------------
    b_el = simplex_element[owner[single]]
    border = np.argsort(b_el, kind="stable")
    fbnd = single[border]
    b_tag = np.zeros(len(fbnd), dtype=np.int64)
    if len(fine.boundary_facets):
        bkey = key[fbnd]
        tag_order = np.argsort(tagged_key, kind="stable")
        pos = np.searchsorted(tagged_key[tag_order], bkey)
        pos = np.minimum(pos, len(tag_order) - 1)
        hit = tagged_key[tag_order][pos] == bkey
        b_tag[hit] = fine.boundary_tags[tag_order[pos[hit]]]

    # --- assemble face arrays ---------------------------------------------
    face_rows = np.concatenate([f1, fbnd])
    face_vertices = sorted_rows[face_rows]
    face_simplices = np.stack([owner[face_rows], np.r_[owner[f2], np.full(len(fbnd), -1, np.int64)]], 1)
    face_elements = np.stack([np.r_[e1, b_el[border]], np.r_[e2, np.full(len(fbnd), -1, np.int64)]], 1)
    xf = P[face_vertices]
    normal, face_measure = facet_normals(xf)
    towards = np.einsum("ni,ni->n", normal, xf.mean(axis=1) - P[opposite[face_rows]]) > 0
    normal[~towards] *= -1
    face_tag = np.r_[np.full(n_int, -1, np.int64), b_tag]

    # --- element geometry ---------------------------------------------------
    xs = P[simplices]
    bbox_min = np.minimum.reduceat(xs.min(axis=1), offsets[:-1], axis=0)
    bbox_max = np.maximum.reduceat(xs.max(axis=1), offsets[:-1], axis=0)
    measure = np.bincount(simplex_element, weights=simplex_volume, minlength=n_el)
    # the diameter is attained at vertices on the element boundary
    ev_off, ev_v = boundary_vertices(face_vertices, face_elements, n_el)
    diameter = np.zeros(n_el)
    parallel_range(_diameters, 0, n_el, ev_off, ev_v, P, diameter)

    return PolytopicMesh(
        points=P,
        simplices=simplices,
        element_offsets=offsets,
        simplex_element=simplex_element,
        simplex_volume=simplex_volume,
        bbox_min=bbox_min,
        bbox_max=bbox_max,
        measure=measure,
        diameter=diameter,
        face_vertices=np.ascontiguousarray(face_vertices),
        face_elements=np.ascontiguousarray(face_elements),
        face_simplices=np.ascontiguousarray(face_simplices),
        face_measure=face_measure,
        face_normal=np.ascontiguousarray(normal),
        face_tag=face_tag,
        n_interior_faces=int(n_int),
        interface_elements=interface_elements,
        interface_offsets=interface_offsets,
        source=fine.source,
        simplex_cell=simplex_cell,
        face_cells=np.where(face_simplices >= 0, simplex_cell[np.maximum(face_simplices, 0)], -1),
        n_fine_cells=fine.n_fine_cells,
    )
