"""What one rank is handed and what it makes of it, without MPI (docs/design.md §11).

:func:`rank_parts` cuts a DG space into one :class:`RankPart` per rank: the
rank's sub-mesh (:func:`polydg.mesh.submesh.rank_submesh`), degrees, dof
numbers and penalty weights, and the owners of its halo elements.  The MPI
layer (``assembly.py``) only moves these objects, exchanges the halo's a_K
(:mod:`.halo`) and assembles each part's rows with the single-process plan and
passes.

Two numberings of the dofs exist:

* the single-process numbering (element by element, in the mesh's order),
  in which a gathered matrix equals the one-process matrix bit for bit;
* the rank numbering: elements rank by rank, each rank's in mesh order, so
  that rank r owns the contiguous rows ``row_range`` (the PETSc MPIAIJ
  layout).  A rank's own matrix is given in it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from ..assembly.result import csr_as_given
from ..assembly.penalty import diffusion_bound, penalty_from_weights, penalty_weights
from ..assembly.scope import AssemblyScope
from ..mesh.submesh import RankMesh, rank_submesh
from ..space import DGSpace
from ..threads import parallel_range, range_kernel
from .halo import HaloExchange


@dataclass
class RankPart:
    """One rank's share of the assembly (everything in the sub-mesh's local element order).

    submesh : the rank's :class:`~polydg.mesh.submesh.RankMesh`
    degree : (n_local,) polynomial degree of each local element
    dof_offsets : (n_local,) first dof of each local element, single-process numbering
    rank_dof_offsets : (n_local,) first dof of each local element, rank numbering
    penalty_weights : (n_local_faces, 2) :func:`~polydg.assembly.penalty.penalty_weights` of the local faces
    rank, ranks : this rank and the number of ranks
    row_range : (first, last + 1) of the rank's rows in the rank numbering
    n_elements, n_dofs, n_faces : sizes of the whole problem
    face_penalty : (n_local_faces,) sigma_F of the local faces when the caller's scope gives it
        (:class:`~polydg.assembly.AssemblyScope`), else None (computed by the ranks)
    load_boundary_faces : (n_local_faces,) bool, the scope's boundary faces of the load alone, or None
    halo_ranks : (n_halo,) the rank owning each halo element (``submesh.halo``'s order)
    """

    submesh: RankMesh
    degree: np.ndarray
    dof_offsets: np.ndarray
    rank_dof_offsets: np.ndarray
    penalty_weights: np.ndarray
    rank: int
    ranks: int
    row_range: tuple[int, int]
    n_elements: int
    n_dofs: int
    n_faces: int
    basis: str = "P"
    face_penalty: np.ndarray | None = None
    load_boundary_faces: np.ndarray | None = None
    halo_ranks: np.ndarray | None = None

    def space(self) -> DGSpace:
        """The DG space on the sub-mesh (its dofs numbered locally)."""
        return DGSpace(self.submesh.mesh, self.degree, basis=self.basis)

    def dof_map(self, space: DGSpace, rank_numbering: bool = False) -> np.ndarray:
        """Global dof of every local dof of ``space``: single-process (default) or rank numbering."""
        first = self.rank_dof_offsets if rank_numbering else self.dof_offsets
        nb = space.element_dofs
        return np.repeat(first - space.dof_offsets[:-1], nb) + np.arange(space.n_dofs, dtype=np.int64)

    def halo_exchange(self) -> HaloExchange:
        """Who sends this rank's halo its values, and to whom it sends its own (:mod:`.halo`)."""
        if self.halo_ranks is None:
            raise ValueError("this RankPart has no halo_ranks (the owner of each halo element): make it with "
                             "rank_parts")
        return HaloExchange.of_submesh(self.submesh, self.halo_ranks, self.rank, self.ranks)


def rank_numbering(ranks: np.ndarray) -> np.ndarray:
    """New id of every element when they are numbered rank by rank (each rank's in mesh order)."""
    order = np.argsort(ranks, kind="stable")
    new = np.empty(len(ranks), dtype=np.int64)
    new[order] = np.arange(len(ranks))
    return new


def rank_parts(space: DGSpace, ranks: np.ndarray, *, penalty_kind: str = "classical",
               scope: AssemblyScope | None = None) -> Iterator[RankPart]:
    """The part of each rank 0, 1, ... in turn (one at a time: the caller sends and drops it).

    The ``scope``'s arrays over the faces of the whole mesh go to each part for its faces: the
    ``face_penalty_scale`` folded into the penalty weights, the ``face_penalty`` and the
    ``load_boundary_faces`` as they are.
    """
    scope = AssemblyScope() if scope is None else scope
    mesh = space.mesh
    ranks = np.asarray(ranks, dtype=np.int64)
    n_ranks = int(ranks.max()) + 1
    new = rank_numbering(ranks)
    nb = space.element_dofs
    rank_offsets = np.zeros(mesh.n_elements + 1, dtype=np.int64)
    np.cumsum(nb[np.argsort(new)], out=rank_offsets[1:])  # dof offsets in the rank numbering, by new id
    rank_first = rank_offsets[new]  # ... by element
    dofs_per_rank = np.bincount(ranks, weights=nb, minlength=n_ranks).astype(np.int64)
    row_ends = np.cumsum(dofs_per_rank)
    weights = scoped_penalty_weights(space, penalty_kind, scope)
    for r in range(n_ranks):
        sub = rank_submesh(mesh, np.flatnonzero(ranks == r))
        e = sub.elements
        w, sigma, load_faces = face_arrays(weights, scope, sub.faces)
        yield RankPart(submesh=sub, degree=space.degree[e], dof_offsets=space.dof_offsets[e],
                       rank_dof_offsets=rank_first[e], penalty_weights=w, rank=r, ranks=n_ranks,
                       row_range=(int(row_ends[r] - dofs_per_rank[r]), int(row_ends[r])),
                       n_elements=mesh.n_elements, n_dofs=space.n_dofs, n_faces=mesh.n_faces,
                       basis=getattr(space, "basis", "P"), face_penalty=sigma, load_boundary_faces=load_faces,
                       halo_ranks=ranks[e[sub.halo]])


def scoped_penalty_weights(space: DGSpace, penalty_kind: str, scope: AssemblyScope) -> np.ndarray:
    """The penalty weights of every face of ``space``'s mesh, the ``scope``'s ``face_penalty_scale`` folded in."""
    weights = penalty_weights(space.mesh, space.degree, penalty_kind)
    return weights if scope.face_penalty_scale is None else weights * scope.face_penalty_scale[:, None]


def face_arrays(weights: np.ndarray, scope: AssemblyScope,
                faces: np.ndarray) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
    """A part's face arrays: (penalty weights, the scope's ``face_penalty`` and ``load_boundary_faces``, each
    None where the scope has none) of the global ``faces``."""
    return (weights[faces], None if scope.face_penalty is None else scope.face_penalty[faces],
            None if scope.load_boundary_faces is None else scope.load_boundary_faces[faces])


def local_diffusion_bound(part: RankPart, space: DGSpace, problem, quadrature_extra: int) -> np.ndarray:
    """a_K of the owned elements (zero on the halo, which has no sub-simplices here), with the
    rules the one-process plan uses (those of the basis' total degree)."""
    return diffusion_bound(part.submesh.mesh, problem, space.total_degree, quadrature_extra)


def part_face_penalty(part: RankPart, a_bound: np.ndarray, C_sigma: float) -> np.ndarray:
    """sigma_F of the local faces from a_K of every local element (halo included)."""
    return penalty_from_weights(part.penalty_weights, part.submesh.mesh.face_elements, a_bound, C_sigma)


@range_kernel
def _relabel_rows(r_lo, r_hi, indptr, rows, indices, data, new_label, out_indptr, out_indices,
                  out_data):  # pragma: no cover - compiled
    """Output row r is row ``rows[r]`` of the input with its columns relabelled and re-sorted.

    A row's columns are blocks of consecutive numbers in both numberings, so
    the row is cut into runs that stay consecutive under relabelling, the runs
    are sorted by their first new label (few per row: insertion sort), and
    copied.
    """
    longest = 0
    for r in range(r_lo, r_hi):
        longest = max(longest, indptr[rows[r] + 1] - indptr[rows[r]])
    runs = np.empty(longest, dtype=np.int64)  # scratch: where each run starts
    for r in range(r_lo, r_hi):
        a, b = indptr[rows[r]], indptr[rows[r] + 1]
        n_runs = 0
        for k in range(a, b):
            if k == a or new_label[indices[k]] != new_label[indices[k - 1]] + 1:
                # insert the run starting at k by its first new label
                j = n_runs
                while j > 0 and new_label[indices[runs[j - 1]]] > new_label[indices[k]]:
                    runs[j] = runs[j - 1]
                    j -= 1
                runs[j] = k
                n_runs += 1
        out = out_indptr[r]
        for i in range(n_runs):
            k = runs[i]
            while True:
                out_indices[out] = new_label[indices[k]]
                out_data[out] = data[k]
                out += 1
                k += 1
                if k == b or new_label[indices[k]] != new_label[indices[k - 1]] + 1:
                    break


def relabel_rows(indptr: np.ndarray, indices: np.ndarray, data: np.ndarray, new_label: np.ndarray,
                 rows: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The CSR arrays (indptr, indices, data; int64 indices) of the rows ``rows`` (default: all, in order)
    of the CSR arrays given, column j renamed ``new_label[j]`` (a one-to-one map), columns sorted in every
    row.  The output alone is allocated: the input is read where it lies (int64 indices)."""
    indptr = np.asarray(indptr, dtype=np.int64)
    rows = np.arange(len(indptr) - 1, dtype=np.int64) if rows is None else np.asarray(rows, dtype=np.int64)
    out_indptr = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(indptr[rows + 1] - indptr[rows], out=out_indptr[1:])
    out_indices = np.empty(out_indptr[-1], dtype=np.int64)
    out_data = np.empty(out_indptr[-1], dtype=data.dtype)
    parallel_range(_relabel_rows, 0, len(rows), indptr, rows, np.asarray(indices, dtype=np.int64), data,
                   np.ascontiguousarray(new_label, dtype=np.int64), out_indptr, out_indices, out_data)
    return out_indptr, out_indices, out_data


def relabel_columns(matrix: sp.csr_matrix, new_label: np.ndarray, n_cols: int) -> sp.csr_matrix:
    """``matrix`` with column j renamed ``new_label[j]`` (a one-to-one map), columns sorted in every row."""
    indptr, indices, data = relabel_rows(matrix.indptr, matrix.indices, matrix.data, new_label)
    return csr_as_given(data, indices, indptr, (matrix.shape[0], n_cols))


def compile_relabel_kernel() -> None:
    """Compile (or load from Numba's cache) the relabelling kernel, on empty input."""
    z = np.zeros(0, dtype=np.int64)
    for dtype in (np.float64, np.float32):
        _relabel_rows(0, 0, np.zeros(1, np.int64), z, z, np.zeros(0, dtype), z, np.zeros(1, np.int64), z,
                      np.zeros(0, dtype))
