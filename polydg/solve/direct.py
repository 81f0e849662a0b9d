"""The direct solve: a fill-reducing ordering, SuperLU's sparse LU, and a check of the result.

A DG matrix is a graph of dense element blocks, so the ordering that keeps
the factor small is a nested dissection of the *element* graph (METIS, on
one vertex per element instead of one per dof), each element's dofs kept
together.  SuperLU then factorises the permuted matrix with the pivots on
the diagonal preferred (``SymmetricMode``, threshold 0.01): the pattern of a
DG matrix is symmetric, and SuperLU's default partial pivoting would undo
the ordering.  The residual is checked; a few steps of iterative refinement
bring a weakly pivoted factor to full accuracy, and a factor that stays
inaccurate is redone with SuperLU's own COLAMD ordering and partial
pivoting.  docs/performance.md (Direct or iterative) compares the orderings.
"""

from __future__ import annotations

import time
from typing import Callable

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from numba import njit

from ..errors import OptionError
from .system import SolverError, relative_residual

#: accepted values of ``solve(..., ordering=)``: ``auto`` is nested-dissection; the others are SuperLU's
#: own orderings (``permc_spec``): mmd-at-plus-a (a symmetric ordering) with the diagonal pivots preferred,
#: as SuperLU advises for it, the column orderings colamd, mmd-ata and natural with partial pivoting
ORDERINGS = ("auto", "nested-dissection", "colamd", "mmd-at-plus-a", "mmd-ata", "natural")

_PERMC_SPEC = {"colamd": "COLAMD", "mmd-at-plus-a": "MMD_AT_PLUS_A", "mmd-ata": "MMD_ATA", "natural": "NATURAL"}

#: the diagonal pivot threshold of the nested-dissection factorisation: a diagonal entry at least this
#: fraction of its column's largest is taken as the pivot, so that the ordering holds
DIAGONAL_PIVOT_THRESHOLD = 0.01

#: refine the direct solution while its relative residual is above this (a step costs one pair of
#: triangular solves, far less than the factorisation)
REFINE_ABOVE = 1e-12
#: a factor whose solution stays above this residual after refinement is redone with partial pivoting
REFACTOR_ABOVE = 1e-8
REFINEMENT_STEPS = 3


def element_graph(A: sp.spmatrix, block_sizes: np.ndarray) -> sp.csr_matrix:
    """The graph of A's blocks (consecutive blocks of ``block_sizes`` rows and columns): blocks I and J
    adjacent when A has an entry in (I, J) or (J, I); no self loops."""
    sizes = np.asarray(block_sizes, dtype=np.int64)
    n, m = A.shape[0], len(sizes)
    if n != int(sizes.sum()):
        raise SolverError(f"block sizes sum to {int(sizes.sum())}, the matrix has {n} rows")
    A = sp.csr_matrix(A)
    starts = np.zeros(m + 1, dtype=np.int64)
    np.cumsum(sizes, out=starts[1:])
    owner = np.repeat(np.arange(m, dtype=np.int64), sizes)
    indptr = np.zeros(m + 1, dtype=np.int64)
    _block_neighbours(A.indptr.astype(np.int64), A.indices, starts, owner, indptr, np.zeros(0, dtype=np.int64))
    np.cumsum(indptr, out=indptr)
    neighbours = np.empty(indptr[-1], dtype=np.int64)
    _block_neighbours(A.indptr.astype(np.int64), A.indices, starts, owner, indptr, neighbours)
    rows = sp.csr_matrix((np.ones(len(neighbours), dtype=np.int32), neighbours, indptr), shape=(m, m))
    graph = (rows + rows.T).tocsr()  # (I, J) or (J, I); the pattern is what counts: METIS reads the indices only
    graph.sort_indices()
    return graph


@njit(cache=True, nogil=True)
def _block_neighbours(indptr, indices, starts, owner, graph_indptr, neighbours):  # pragma: no cover - compiled
    """The blocks J != I that block row I has entries in, each once.  With no ``neighbours`` to fill, their
    count per block row goes to ``graph_indptr[I + 1]``; else ``graph_indptr`` holds the offsets and they are
    written in the order met."""
    m = len(starts) - 1
    seen = np.full(m, -1, dtype=np.int64)
    fill = len(neighbours) > 0
    for block in range(m):
        at = graph_indptr[block]
        for r in range(starts[block], starts[block + 1]):
            for k in range(indptr[r], indptr[r + 1]):
                other = owner[indices[k]]
                if other != block and seen[other] != block:
                    seen[other] = block
                    if fill:
                        neighbours[at] = other
                        at += 1
                    else:
                        graph_indptr[block + 1] += 1


def nested_dissection(A: sp.spmatrix, block_sizes: np.ndarray | None) -> np.ndarray:
    """A fill-reducing permutation of A's dofs (``A[p][:, p]`` is factorised): METIS nested dissection
    of the block graph, each block's dofs kept together and in order (one block per dof without
    ``block_sizes``)."""
    import pymetis

    n = A.shape[0]
    sizes = np.ones(n, dtype=np.int64) if block_sizes is None else np.asarray(block_sizes, dtype=np.int64)
    graph = element_graph(A, sizes)
    if graph.shape[0] <= 1 or graph.nnz == 0:
        return np.arange(n, dtype=np.int64)
    adjacency = pymetis.CSRAdjacency(graph.indptr.astype(np.int64), graph.indices.astype(np.int64))
    order, _ = pymetis.nested_dissection(adjacency=adjacency, options=pymetis.Options(seed=0))
    order = np.asarray(order, dtype=np.int64)
    starts = np.zeros(len(sizes), dtype=np.int64)
    np.cumsum(sizes[:-1], out=starts[1:])
    counts = sizes[order]
    return np.repeat(starts[order], counts) + (np.arange(n, dtype=np.int64) - np.repeat(np.cumsum(counts) - counts,
                                                                                          counts))


class Factorisation:
    """SuperLU's factors of A, in the ordering chosen: ``solve(b)`` solves ``A x = b``, refined."""

    def __init__(self, A: sp.csr_matrix, ordering: str, block_sizes: np.ndarray | None):
        self.A, self.ordering = A, ordering
        if ordering == "nested-dissection":
            self.permutation = nested_dissection(A, block_sizes)
            permuted = A[self.permutation][:, self.permutation].tocsc()
            self.lu = spla.splu(permuted, permc_spec="NATURAL", diag_pivot_thresh=DIAGONAL_PIVOT_THRESHOLD,
                                options={"SymmetricMode": True})
        elif ordering == "mmd-at-plus-a":
            self.permutation = None
            self.lu = spla.splu(A.tocsc(), permc_spec=_PERMC_SPEC[ordering],
                                diag_pivot_thresh=DIAGONAL_PIVOT_THRESHOLD, options={"SymmetricMode": True})
        else:
            self.permutation = None
            self.lu = spla.splu(A.tocsc(), permc_spec=_PERMC_SPEC[ordering])

    @property
    def factor_nnz(self) -> int:
        """Entries of L and U together."""
        return int(self.lu.L.nnz + self.lu.U.nnz)

    def _apply(self, b: np.ndarray) -> np.ndarray:
        if self.permutation is None:
            return self.lu.solve(b)
        x = np.empty_like(b)
        x[self.permutation] = self.lu.solve(b[self.permutation])
        return x

    def solve(self, b: np.ndarray) -> tuple[np.ndarray, float, int]:
        """(x, relative residual, refinement steps taken)."""
        x = self._apply(b)
        residual, steps = relative_residual(self.A, x, b), 0
        while steps < REFINEMENT_STEPS and np.isfinite(residual) and residual > REFINE_ABOVE:
            refined = x + self._apply(b - self.A @ x)
            refined_residual = relative_residual(self.A, refined, b)
            if not refined_residual < residual:
                break
            x, residual, steps = refined, refined_residual, steps + 1
        return x, residual, steps


def direct_solve(A: sp.csr_matrix, b: np.ndarray, ordering: str = "auto", block_sizes: np.ndarray | None = None,
                 progress: Callable[[str], None] | None = None) -> tuple[np.ndarray, dict]:
    """Solve A x = b by sparse LU in the given ordering; ``(x, info)`` with ``solver``, ``ordering``,
    ``factor_nnz``, ``factor_seconds`` (the ordering and the factorisation), ``refinement_steps`` and
    ``residual`` (and ``fallback`` when the factor had to be redone with COLAMD and partial pivoting)."""
    if ordering not in ORDERINGS:
        raise OptionError(f"unknown ordering {ordering!r}; choose one of {', '.join(ORDERINGS)}")
    ordering = "nested-dissection" if ordering == "auto" else ordering
    if progress is not None:
        progress(f"factorising {A.shape[0]:,} dofs (nnz {A.nnz:,}, {ordering} ordering) ...")
    failures, factor_seconds = [], 0.0
    for attempt in (ordering,) if ordering == "colamd" else (ordering, "colamd"):
        start = time.perf_counter()
        factor = _factorise(A, attempt, block_sizes)
        factor_seconds += time.perf_counter() - start
        if factor is None:
            failures.append(f"{attempt}: exactly singular pivot")
            continue
        x, residual, steps = factor.solve(b)
        if not (np.isfinite(x).all() and residual <= REFACTOR_ABOVE):
            failures.append(f"{attempt}: residual {residual:.1e}")
            continue
        info = {"solver": "splu", "ordering": attempt, "factor_nnz": factor.factor_nnz,
                "factor_seconds": factor_seconds, "refinement_steps": steps, "residual": residual}
        if failures:
            info["fallback"] = "; ".join(failures) + ", refactorised with colamd and partial pivoting"
        return x, info
    raise SolverError(f"direct solve failed ({'; '.join(failures)})",
                      advice="is the matrix singular? check that the boundary conditions determine the solution")


def _factorise(A: sp.csr_matrix, ordering: str, block_sizes: np.ndarray | None) -> Factorisation | None:
    """The factorisation, or None at an exactly singular pivot; MemoryError as a SolverError that says
    what to try."""
    try:
        return Factorisation(A, ordering, block_sizes)
    except RuntimeError:  # SuperLU: "Factor is exactly singular"
        return None
    except MemoryError as exc:
        raise SolverError(f"direct solve ran out of memory factorising {A.shape[0]:,} dofs (nnz {A.nnz:,})",
                          advice="try the iterative solve (--solve iterative; method='iterative')") from exc


__all__ = ["ORDERINGS", "Factorisation", "direct_solve", "element_graph", "nested_dissection"]
