"""Distribution of the polytopic elements over MPI ranks (docs/design.md §11).

METIS splits the element graph so that every rank has about the same kernel
work, not the same number of elements: vertex weights are the estimated work
of each element's volume and face terms, edge weights the fine facets on the
interface (what both ranks compute twice).
"""

from __future__ import annotations

import numpy as np
import pymetis

from ..assembly.plan import face_rule_degrees
from ..assembly.points import point_counts
from ..errors import OptionError
from ..quadrature import default_degree
from .agglomerate import DEFAULT_SEED, _quiet_c_stdout, checked_seed

#: METIS takes integer weights: the largest element's work becomes at most this
WEIGHT_RESOLUTION = 10_000


def element_work(space, quadrature_extra: int = 0) -> np.ndarray:
    """Estimated kernel work of every element (float64, arbitrary units).

    Volume: sub-simplices x quadrature points x n_K^2 (one block per point).
    Faces: per fine facet and point, n_K (n_K + n_N) for an interior face
    (the row's two blocks), n_K^2 on the boundary.
    """
    mesh = space.mesh
    d = mesh.dim
    nb = space.element_dofs.astype(np.float64)
    q = default_degree(space.degree, quadrature_extra)
    work = np.diff(mesh.element_offsets) * point_counts(d, q) * nb**2
    fe = mesh.face_elements
    points = point_counts(d - 1, face_rule_degrees(space.degree, fe, quadrature_extra)).astype(np.float64)
    inner = fe[:, 1] >= 0
    a, b = fe[inner, 0], fe[inner, 1]
    pair = nb[a] + nb[b]
    work += np.bincount(a, points[inner] * nb[a] * pair, minlength=mesh.n_elements)
    work += np.bincount(b, points[inner] * nb[b] * pair, minlength=mesh.n_elements)
    edge = fe[~inner, 0]
    work += np.bincount(edge, points[~inner] * nb[edge] ** 2, minlength=mesh.n_elements)
    return work


def rank_partition(space, n_ranks: int, *, weighted: bool = True, quadrature_extra: int = 0,
                   seed: int = DEFAULT_SEED) -> np.ndarray:
    """The rank of every element: a METIS k-way partition of the element graph.

    With ``weighted`` (the default) the vertex weights are
    :func:`element_work` and the edge weights the number of fine facets on
    each interface; without, every element and interface counts one.  Every
    rank gets at least one element.

    >>> from polydg.mesh import unit_square
    >>> from polydg.partition import agglomerate
    >>> from polydg.space import DGSpace
    >>> space = DGSpace(agglomerate(unit_square(8), 40), 1)
    >>> ranks = rank_partition(space, 4)
    >>> sorted(set(ranks.tolist()))
    [0, 1, 2, 3]
    """
    seed = checked_seed(seed, "rank_partition")
    mesh = space.mesh
    n_el = mesh.n_elements
    if n_ranks < 1:
        raise OptionError(f"need at least one rank, got {n_ranks}")
    if n_ranks > n_el:
        raise OptionError(f"cannot split {n_el} elements over {n_ranks} ranks (at least one element per rank)")
    if n_ranks == 1:
        return np.zeros(n_el, dtype=np.int64)
    offsets, neighbours = mesh.element_neighbours()
    kwargs = {}
    if weighted:
        work = element_work(space, quadrature_extra)
        kwargs["vweights"] = np.maximum(np.rint(work * (WEIGHT_RESOLUTION / work.max())), 1).astype(np.int64)
        # edge weights in the adjacency's order: the facets of each interface, both directions
        facets = np.diff(mesh.interface_offsets)
        ia, ib = mesh.interface_elements[:, 0], mesh.interface_elements[:, 1]
        rows = np.concatenate([ia, ib])
        cols = np.concatenate([ib, ia])
        order = np.lexsort((cols, rows))
        kwargs["eweights"] = np.concatenate([facets, facets])[order].astype(np.int64)
    adjacency = pymetis.CSRAdjacency(offsets.astype(np.int64), neighbours.astype(np.int64))
    with _quiet_c_stdout():
        _, membership = pymetis.part_graph(n_ranks, adjacency=adjacency, options=pymetis.Options(seed=seed), **kwargs)
    parts = np.asarray(membership, dtype=np.int64)
    if np.bincount(parts, minlength=n_ranks).min() == 0:
        # METIS may leave a part empty on tiny or disconnected graphs: cut the element order by work instead
        work = element_work(space, quadrature_extra) if weighted else np.ones(n_el)
        cum = np.cumsum(work)
        parts = np.minimum((cum - work / 2) * n_ranks // cum[-1], n_ranks - 1).astype(np.int64)
        parts = np.maximum.accumulate(parts)
        if np.bincount(parts, minlength=n_ranks).min() == 0:  # still empty: equal element counts
            parts = np.arange(n_el, dtype=np.int64) * n_ranks // n_el
    return parts


def balance(values: np.ndarray) -> float:
    """max / mean of per-rank values (1 is perfect balance)."""
    values = np.asarray(values, dtype=np.float64)
    mean = values.mean()
    return float(values.max() / mean) if mean > 0 else 1.0
