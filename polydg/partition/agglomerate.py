"""Agglomeration of a fine simplicial mesh into polytopic elements with METIS."""

from __future__ import annotations

import contextlib
import os
import sys

import numpy as np
import pymetis
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components

from ..errors import MeshError, OptionError
from ..mesh.geometry import facet_local_vertices
from ..mesh.polytopic import PolytopicMesh, _row_keys, build_polytopic_mesh
from ..mesh.simplicial import SimplexMesh

#: METIS seed used unless the caller gives one: agglomeration is reproducible.
DEFAULT_SEED = 0
#: the largest seed: METIS takes one of its 64-bit integers (idx_t), NumPy any non-negative integer
MAX_SEED = 2**63 - 1
#: below this many fine cells per element, recursive bisection replaces k-way
RECURSIVE_BELOW = 16


def dual_graph(fine: SimplexMesh) -> sp.csr_matrix:
    """Facet-adjacency graph of the fine cells (symmetric CSR, no self loops)."""
    d = fine.dim
    facets = np.sort(fine.cells[:, facet_local_vertices(d)].reshape(-1, d), axis=1)
    owner = np.repeat(np.arange(fine.n_cells, dtype=np.int64), d + 1)
    key = _row_keys(facets, len(fine.points))
    order = np.argsort(key, kind="stable")
    k = key[order]
    same = np.flatnonzero(k[1:] == k[:-1])
    a, b = owner[order[same]], owner[order[same + 1]]
    n = fine.n_cells
    g = sp.coo_matrix((np.ones(2 * len(a)), (np.r_[a, b], np.r_[b, a])), shape=(n, n)).tocsr()
    g.sum_duplicates()
    return g


def split_disconnected(graph: sp.csr_matrix, parts: np.ndarray) -> np.ndarray:
    """Renumber ``parts`` so that every part is connected in ``graph``.

    A part with k components becomes k parts; ids are consecutive from 0,
    ordered by the smallest cell of each part (deterministic).
    """
    coo = graph.tocoo()
    same = parts[coo.row] == parts[coo.col]
    restricted = sp.csr_matrix((np.ones(int(same.sum())), (coo.row[same], coo.col[same])), shape=graph.shape)
    _, labels = connected_components(restricted, directed=False)
    # order components by their first cell so the numbering is stable
    first = np.full(labels.max() + 1, len(labels), dtype=np.int64)
    np.minimum.at(first, labels, np.arange(len(labels)))
    rank = np.empty_like(first)
    rank[np.argsort(first, kind="stable")] = np.arange(len(first))
    return rank[labels].astype(np.int64)


def checked_seed(seed, what: str) -> int:
    """``seed`` as the Python int METIS takes (pymetis refuses NumPy integers), or a one-line OptionError
    naming ``what`` where it is not an integer from 0 to :data:`MAX_SEED`."""
    if not (isinstance(seed, (int, np.integer)) and not isinstance(seed, bool) and 0 <= seed <= MAX_SEED):
        raise OptionError(f"{what}: seed must be an integer from 0 to 2**63 - 1 (a METIS seed), got {seed!r}")
    return int(seed)


def _count(n_elements) -> int:
    """The number of elements asked for as an int (a whole float such as 6 * 8**3 / 48 taken as it is), or a
    one-line OptionError."""
    if isinstance(n_elements, (int, np.integer)) and not isinstance(n_elements, bool):
        return int(n_elements)
    if isinstance(n_elements, (float, np.floating)) and np.isfinite(n_elements) and n_elements == int(n_elements):
        return int(n_elements)
    raise OptionError(f"agglomerate: the number of elements must be a whole number, got {n_elements!r}")


def agglomerate_cells(fine: SimplexMesh, n_elements: int, *, seed: int = DEFAULT_SEED) -> np.ndarray:
    """Element id of every simplex of ``fine``: METIS parts of the fine cells' dual graph, made connected.

    The fine cells are the simplices, or for polygon input the polygons (``fine.cell_element``): a polygon is
    never split between elements.
    """
    seed = checked_seed(seed, "agglomerate")
    if not isinstance(fine, SimplexMesh):
        raise OptionError(f"agglomerate takes a fine mesh, got {type(fine).__name__}: make one by "
                          "polydg.mesh.from_spec('square:16') or polydg.mesh.load_mesh(path)")
    n_elements = _count(n_elements)
    polygons = fine.cell_element is not None
    n_cells = fine.n_fine_cells
    if n_elements < 1:
        raise MeshError(f"agglomerate: number of elements must be at least 1, got {n_elements}")
    if n_elements > n_cells:
        raise MeshError(f"agglomerate: cannot make {n_elements} elements from {n_cells} "
                        f"{'polygons' if polygons else 'cells'} of {fine.source}")
    graph = dual_graph(fine)
    if polygons:
        graph = _cell_graph(graph, fine.cell_element, n_cells)
    if n_elements == 1:
        parts = np.zeros(n_cells, dtype=np.int64)
    elif n_elements == n_cells:
        parts = np.arange(n_cells, dtype=np.int64)
    else:
        adjacency = pymetis.CSRAdjacency(graph.indptr.astype(np.int64), graph.indices.astype(np.int64))
        # k-way with contiguous parts is the better partition, but its cost
        # grows with the number of parts; with few cells per part recursive
        # bisection is several times faster (docs/performance.md) and its few
        # disconnected parts are split below.
        recursive = n_cells < RECURSIVE_BELOW * n_elements
        with _quiet_c_stdout():
            if recursive:
                _, membership = pymetis.part_graph(n_elements, adjacency=adjacency, recursive=True,
                                                   options=pymetis.Options(seed=seed))
            else:
                try:
                    _, membership = pymetis.part_graph(n_elements, adjacency=adjacency,
                                                       options=pymetis.Options(seed=seed, contig=1))
                except Exception:  # contig fails on disconnected graphs; components are split below
                    _, membership = pymetis.part_graph(n_elements, adjacency=adjacency,
                                                       options=pymetis.Options(seed=seed))
        parts = np.asarray(membership, dtype=np.int64)
        if recursive:
            parts = _split_oversized(graph, split_disconnected(graph, parts), n_cells / n_elements, seed)
    parts = split_disconnected(graph, parts)
    if 1 < n_elements < n_cells:
        # cell centroids summed vertex by vertex: no (cells, d + 1, d) temporary
        centroids = sum(fine.points[fine.cells[:, k]] for k in range(fine.cells.shape[1])) / fine.cells.shape[1]
        if polygons:  # a polygon's place: the mean of its triangles' centroids
            centroids = np.stack([np.bincount(fine.cell_element, weights=centroids[:, k], minlength=n_cells)
                                  for k in range(fine.dim)], axis=1) / np.bincount(fine.cell_element)[:, None]
        parts = z_order_numbering(parts, centroids)
    return parts[fine.cell_element] if polygons else parts


def _cell_graph(graph: sp.csr_matrix, cell_of: np.ndarray, n_cells: int) -> sp.csr_matrix:
    """The adjacency of the cells made of ``graph``'s vertices (vertex i in cell ``cell_of[i]``): two cells
    are adjacent when a vertex of one is adjacent to a vertex of the other."""
    coo = graph.tocoo()
    a, b = cell_of[coo.row], cell_of[coo.col]
    apart = a != b
    return sp.coo_matrix((np.ones(int(apart.sum())), (a[apart], b[apart])), shape=(n_cells, n_cells)).tocsr()


def z_order(points: np.ndarray, bits: int = 21) -> np.ndarray:
    """Morton (Z-order) codes of points: their coordinates, scaled to ``bits``-bit integers, bit-interleaved.

    >>> z_order(np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]), bits=1).tolist()
    [0, 1, 2, 3]
    """
    points = np.asarray(points, dtype=np.float64)
    d = points.shape[1]
    if bits * d > 63:
        raise ValueError(f"z_order: {bits} bits in {d}D do not fit 63 bits")
    lo, hi = points.min(axis=0), points.max(axis=0)
    scaled = (points - lo) / np.where(hi > lo, hi - lo, 1.0) * (2**bits - 1)
    q = np.rint(scaled).astype(np.uint64)
    code = np.zeros(len(points), dtype=np.uint64)
    for bit in range(bits):  # bits x d whole-array operations
        for k in range(d):
            code |= ((q[:, k] >> np.uint64(bit)) & np.uint64(1)) << np.uint64(bit * d + k)
    return code


def z_order_numbering(parts: np.ndarray, cell_centroids: np.ndarray) -> np.ndarray:
    """Renumber parts 0..k-1 along the Z-order curve of their centroids (mean of their cells' centroids).

    METIS numbers its parts in no spatial order, so any contiguous range of
    element ids (a memory-bounded chunk of the assembler, an MPI rank's rows)
    would be scattered over the domain; along the Z-order curve a contiguous
    range of ids is a compact region, and cutting the ids into ranges cuts
    few interfaces (docs/performance.md).  An interface cut by a chunk boundary has its
    quadrature points and coefficients evaluated once per chunk, and one cut
    by a rank boundary is a halo face.  Ties keep the previous order.
    """
    k = int(parts.max()) + 1
    count = np.bincount(parts, minlength=k).astype(np.float64)
    centroid = np.stack([np.bincount(parts, cell_centroids[:, j], minlength=k) for j in range(cell_centroids.shape[1])],
                        axis=1) / count[:, None]
    rank = np.empty(k, dtype=np.int64)
    rank[np.argsort(z_order(centroid), kind="stable")] = np.arange(k)
    return rank[parts]


def _split_oversized(graph: sp.csr_matrix, parts: np.ndarray, target: float, seed: int) -> np.ndarray:
    """Re-partition the few parts that recursive bisection left far above the target size.

    (Bisection into a number of parts that is not a power of two leaves some
    empty branches and so some parts several times too large.)
    """
    sizes = np.bincount(parts)
    oversized = np.flatnonzero(sizes > max(3 * target, 8))
    next_id = int(parts.max()) + 1
    for part in oversized:  # a handful of outliers, not a loop over elements
        cells = np.flatnonzero(parts == part)
        k = int(round(len(cells) / target))
        if k < 2:
            continue
        sub = graph[cells][:, cells].tocsr()
        with _quiet_c_stdout():
            _, membership = pymetis.part_graph(
                k, adjacency=pymetis.CSRAdjacency(sub.indptr.astype(np.int64), sub.indices.astype(np.int64)),
                options=pymetis.Options(seed=seed))
        membership = np.asarray(membership, dtype=np.int64)
        parts[cells] = np.where(membership == 0, part, next_id + membership - 1)
        next_id += k - 1
    return parts


@contextlib.contextmanager
def _quiet_c_stdout():
    """Silence METIS's own printf warnings (e.g. on tiny sub-graphs) at the file-descriptor level."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, ValueError, OSError):  # no real stdout (captured): nothing to silence
        yield
        return
    sys.stdout.flush()
    saved = os.dup(fd)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), fd)
            yield
    finally:
        os.dup2(saved, fd)
        os.close(saved)


def agglomerate(fine: SimplexMesh, n_elements: int, *, seed: int = DEFAULT_SEED) -> PolytopicMesh:
    """Agglomerate ``fine`` into about ``n_elements`` connected polytopic elements.

    METIS may leave a part empty (it is dropped) or disconnected (it is split
    into its components), so the count can differ slightly from the request.

    >>> from polydg.mesh.generators import unit_square
    >>> mesh = agglomerate(unit_square(16), 20)
    >>> float(round(mesh.measure.sum(), 12)), mesh.n_simplices
    (1.0, 512)
    """
    return build_polytopic_mesh(fine, agglomerate_cells(fine, n_elements, seed=seed))
