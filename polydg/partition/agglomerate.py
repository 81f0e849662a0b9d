"""Agglomeration of a fine simplicial mesh into polytopic elements with METIS."""

from __future__ import annotations

import numpy as np
import pymetis
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components

from ..errors import MeshError
from ..mesh.geometry import facet_local_vertices
from ..mesh.polytopic import PolytopicMesh, _row_keys, build_polytopic_mesh
from ..mesh.simplicial import SimplexMesh

#: METIS seed used unless the caller gives one: agglomeration is reproducible.
DEFAULT_SEED = 0


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


def agglomerate_cells(fine: SimplexMesh, n_elements: int, *, seed: int = DEFAULT_SEED) -> np.ndarray:
    """Element id of every fine cell: METIS parts of the dual graph, made connected."""
    if n_elements < 1:
        raise MeshError(f"agglomerate: number of elements must be at least 1, got {n_elements}")
    if n_elements > fine.n_cells:
        raise MeshError(
            f"agglomerate: cannot make {n_elements} elements from {fine.n_cells} cells of {fine.source}"
        )
    graph = dual_graph(fine)
    if n_elements == 1:
        parts = np.zeros(fine.n_cells, dtype=np.int64)
    elif n_elements == fine.n_cells:
        parts = np.arange(fine.n_cells, dtype=np.int64)
    else:
        opts = pymetis.Options(seed=seed, contig=1)
        adjacency = pymetis.CSRAdjacency(graph.indptr.astype(np.int64), graph.indices.astype(np.int64))
        try:
            _, membership = pymetis.part_graph(n_elements, adjacency=adjacency, options=opts)
        except Exception:  # contig fails on disconnected graphs; components are split below anyway
            opts = pymetis.Options(seed=seed)
            _, membership = pymetis.part_graph(n_elements, adjacency=adjacency, options=opts)
        parts = np.asarray(membership, dtype=np.int64)
    return split_disconnected(graph, parts)


def agglomerate(fine: SimplexMesh, n_elements: int, *, seed: int = DEFAULT_SEED) -> PolytopicMesh:
    """Agglomerate ``fine`` into about ``n_elements`` connected polytopic elements.

    METIS may leave a part empty (it is dropped) or disconnected (it is split
    into its components), so the count can differ slightly from the request.

    >>> from polydg.mesh.generators import unit_square
    >>> mesh = agglomerate(unit_square(16), 20)
    >>> round(mesh.measure.sum(), 12), mesh.n_simplices
    (1.0, 512)
    """
    return build_polytopic_mesh(fine, agglomerate_cells(fine, n_elements, seed=seed))
