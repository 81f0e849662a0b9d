"""The linear system itself: the checks before a solve, symmetry, the true residual, and the
errors and warnings every solver raises.

A solve either returns a solution that meets its tolerance or raises one
:class:`SolverError` whose one-line message says what to try; what NumPy and
SciPy warn on the way (overflow in a preconditioner, an ill-conditioned
factor) never reaches the user as extra lines: :func:`quiet_numerics`
collects it, and the solver puts it into its ``info`` or its error message.
"""

from __future__ import annotations

import contextlib
import math
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import scipy.sparse as sp

from ..errors import PolyDGError, PolyDGWarning, one_line


class SolverError(PolyDGError):
    """The linear solver failed: singular matrix, no convergence, non-finite data.

    ``failure`` says what happened, ``advice`` what to try; the message is both.  A caller that knows the
    cause (the CLI, on values that overflow) names it with the failure alone.

    >>> str(SolverError("direct solve failed", advice="is the matrix singular?"))
    'direct solve failed; is the matrix singular?'
    """

    def __init__(self, failure: str, advice: str = ""):
        super().__init__(f"{failure}; {advice}" if advice else failure)
        self.failure, self.advice = failure, advice


class SolverWarning(PolyDGWarning):
    """A solve the caller forced will be slow or may not fit in memory (the direct one beyond its crossover)."""


def check_system(A: Any, b: Any, xp: Any) -> None:
    """Refuse, in one line, a system that cannot be solved: A not square, b of another length, non-finite
    entries (host or device arrays, ``xp`` their namespace)."""
    n = A.shape[0]
    if A.shape[0] != A.shape[1]:
        raise SolverError(f"matrix of shape {A.shape} is not square")
    if b.shape[0] != n:
        raise SolverError(f"right-hand side has length {b.shape[0]}, the matrix has {n} rows")
    if not bool(xp.isfinite(A.data).all()):
        raise SolverError("matrix has non-finite entries")
    if not bool(xp.isfinite(b).all()):
        raise SolverError("right-hand side has non-finite entries")


def is_symmetric(matrix: sp.spmatrix, rtol: float = 1e-12) -> bool:
    """True when ||A - A^T||_F <= rtol ||A||_F (one sparse subtraction, O(nnz))."""
    A = sp.csr_matrix(matrix)
    if A.shape[0] != A.shape[1]:
        return False
    norm = np.sqrt(np.sum(np.abs(A.data) ** 2))
    diff = (A - A.T).tocsr()
    return bool(np.sqrt(np.sum(np.abs(diff.data) ** 2)) <= rtol * norm)


def relative_residual(A: sp.csr_matrix, x: np.ndarray, b: np.ndarray) -> float:
    """||b - A x|| / ||b|| (||b - A x|| when b = 0)."""
    nb = np.linalg.norm(b)
    r = np.linalg.norm(b - A @ x)
    return float(r / nb) if nb > 0 else float(r)


#: entries per row of a DG matrix on an agglomerated mesh, per (dimension, degree): the element's dofs times
#: one plus its neighbours; they tell a system of unknown dimension and degree (docs/performance.md)
TYPICAL_FILL = {(2, 1): 14.5, (2, 2): 29.1, (2, 3): 48.5, (3, 1): 36.7, (3, 2): 97.9, (3, 3): 195.8}


def shape_of(n: int, nnz: int, space: Any = None, block_sizes: Any = None) -> tuple[int, int, int, bool]:
    """(dimension, degree, elements, known) of a DG system of ``n`` dofs and ``nnz`` entries, the dimension
    in 2..3 and the degree in 1..3 (the range of :data:`TYPICAL_FILL`).

    From ``space`` when given (the degree whose basis size is nearest the mean dofs per element); else
    guessed (``known`` False) from the mean size of the ``block_sizes`` and the entries per row, or from
    the entries per row alone: the nearest entry of :data:`TYPICAL_FILL`.
    """
    from ..basis import n_basis

    per_row = max(nnz / max(n, 1), 1e-9)
    if space is not None:
        dim, elements = min(max(int(space.mesh.dim), 2), 3), max(int(space.mesh.n_elements), 1)
        mean = n / elements
        degree = min((p for d, p in TYPICAL_FILL if d == dim), key=lambda p: abs(math.log(n_basis(p, dim) / mean)))
        return dim, degree, elements, True
    if block_sizes is not None and len(block_sizes):
        mean = n / len(block_sizes)
        _, dim, degree = min((abs(math.log(n_basis(p, d) / mean)) + 0.1 * abs(math.log(fill / per_row)), d, p)
                             for (d, p), fill in TYPICAL_FILL.items())
        return dim, degree, len(block_sizes), False
    _, dim, degree = min((abs(math.log(fill / per_row)), d, p) for (d, p), fill in TYPICAL_FILL.items())
    return dim, degree, max(round(n / n_basis(degree, dim)), 1), False


def matrix_blocks(A: sp.csr_matrix) -> np.ndarray:
    """The sizes of the runs of consecutive rows with one sparsity pattern (the same length, first and last
    column): an element's rows in a DG matrix, so the element blocks of a matrix given without its space
    (two neighbouring elements of one pattern count as one block: a guess of the shape, not a partition)."""
    A = A if A.has_sorted_indices else A.sorted_indices()
    n = A.shape[0]
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    starts, ends = A.indptr[:-1].astype(np.int64), A.indptr[1:].astype(np.int64)
    nonempty = ends > starts
    first = np.where(nonempty, A.indices[np.minimum(starts, max(A.nnz - 1, 0))], -1) if A.nnz else np.full(n, -1)
    last = np.where(nonempty, A.indices[np.maximum(ends - 1, 0)], -1) if A.nnz else np.full(n, -1)
    change = np.ones(n, dtype=bool)
    change[1:] = (np.diff(ends - starts) != 0) | (np.diff(first) != 0) | (np.diff(last) != 0)
    return np.diff(np.append(np.flatnonzero(change), n)).astype(np.int64)


@contextlib.contextmanager
def quiet_numerics(heard: list[str]) -> Iterator[None]:
    """Silence NumPy's floating-point warnings and collect every warning raised inside (one line each,
    repeats left out) into ``heard``: a solver reports them in its ``info`` or its error, not as lines
    of their own."""
    with warnings.catch_warnings(record=True) as caught, np.errstate(all="ignore"):
        warnings.simplefilter("always")
        try:
            yield
        finally:
            for w in caught:
                text = f"{w.category.__name__}: {one_line(w.message)}"
                if text not in heard:
                    heard.append(text)
