"""Preconditioners of the Krylov solves: algebraic multigrid (pyamg), block-Jacobi, ILU, Jacobi.

:func:`make_preconditioner` builds the one :func:`~polydg.solve.solve` asks
for by name; ``"auto"`` stands for the one that suits the system
(:func:`choose_preconditioner`).  Each comes back with its name, so that the
solver's ``info`` says what ran.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from ..errors import OptionError
from .system import SolverError, shape_of

#: accepted values of ``solve(..., preconditioner=)``
PRECONDITIONERS = ("auto", "amg", "block-jacobi", "jacobi", "ilu")

#: ``auto`` takes ILU rather than AMG for nonsymmetric 2D systems with fewer unknowns than this: ILU is nearly
#: exact there and cheaper to set up; above it, and in 3D at any size, its set-up and fill grow faster than
#: AMG's (docs/performance.md, Solvers)
ILU_BELOW = 20_000


def pyamg_module() -> Any:
    """The pyamg module, or None when it is not installed (tests patch this)."""
    try:
        import pyamg
    except ImportError:
        return None
    return pyamg


def block_jacobi(matrix: sp.spmatrix, block_sizes: np.ndarray) -> sp.csr_matrix:
    """The block-diagonal inverse of ``matrix`` for consecutive blocks of the given sizes.

    Blocks of equal size are gathered and inverted together (one batched
    ``numpy.linalg.inv`` per distinct size); a singular block gets its
    pseudo-inverse.
    """
    A = sp.csr_matrix(matrix)
    sizes = np.asarray(block_sizes, dtype=np.int64)
    if sizes.sum() != A.shape[0]:
        raise SolverError(f"block sizes sum to {int(sizes.sum())}, the matrix has {A.shape[0]} rows")
    starts = np.zeros(len(sizes), dtype=np.int64)
    np.cumsum(sizes[:-1], out=starts[1:])
    rows, cols, vals = [], [], []
    for m in np.unique(sizes):
        if m == 0:
            continue
        first = starts[sizes == m]
        local = np.arange(m)
        r = np.broadcast_to(first[:, None, None] + local[None, :, None], (len(first), m, m))
        c = np.broadcast_to(first[:, None, None] + local[None, None, :], (len(first), m, m))
        blocks = np.asarray(A[r.ravel(), c.ravel()]).reshape(len(first), m, m)
        try:
            inverse = np.linalg.inv(blocks)
        except np.linalg.LinAlgError:
            inverse = np.linalg.pinv(blocks)
        rows.append(r.ravel())
        cols.append(c.ravel())
        vals.append(inverse.ravel())
    n = A.shape[0]
    return sp.csr_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(n, n))


def jacobi(A: sp.csr_matrix) -> sp.csr_matrix:
    """The inverse of A's diagonal (1 where it is zero)."""
    diagonal = A.diagonal()
    inverse = np.where(diagonal != 0, 1.0 / np.where(diagonal != 0, diagonal, 1.0), 1.0)
    return sp.diags(inverse).tocsr()


def constant_coefficients(space: Any) -> np.ndarray:
    """(n_elements,) coefficient of each element's first (constant) basis
    function that represents the constant 1: ``1 / phi_0``."""
    from ..basis import tabulate

    mesh = space.mesh
    lo, hi = mesh.bbox_min, mesh.bbox_max
    return 1.0 / tabulate(0.5 * (lo + hi), lo, hi, 0)[:, 0]


class AMG:
    """The ``amg`` preconditioner: one p-multigrid step onto the degree <= 1
    modes of every element, then one V-cycle of pyamg's root-node smoothed
    aggregation on them.

    Coarse space: the ``coarse_sizes[K]`` leading dofs of element K (the
    hierarchical basis makes them the degree <= 1 modes, or only the constant
    when the dimension is not known); its matrix is the Galerkin submatrix
    ``A[c, c]``.  Smoother on the fine level: damped (0.7) block-Jacobi on the
    element blocks, once before and once after the coarse correction (a
    symmetric preconditioner for a symmetric A).  When the coarse space is
    everything (degree 1, or no block structure), the V-cycle runs on A itself.
    pyamg's near-nullspace B is the constant function: ``constants[K]`` on the
    first dof of element K (1 when unknown; pyamg's candidate improvement then
    corrects its scaling).
    """

    OMEGA = 0.7

    def __init__(self, pyamg: Any, A: sp.csr_matrix, symmetric: bool, block_sizes: np.ndarray | None,
                 coarse_sizes: np.ndarray | None, constants: np.ndarray | None):
        n = A.shape[0]
        self.A = A
        if block_sizes is None:
            sizes = np.ones(n, dtype=np.int64)
            coarse_sizes = sizes
        else:
            sizes = np.asarray(block_sizes, dtype=np.int64)
            if sizes.sum() != n:
                raise SolverError(f"block sizes sum to {int(sizes.sum())}, the matrix has {n} rows")
            coarse_sizes = sizes if coarse_sizes is None else np.minimum(np.asarray(coarse_sizes, np.int64), sizes)
        starts = np.zeros(len(sizes), dtype=np.int64)
        np.cumsum(sizes[:-1], out=starts[1:])
        self.two_level = bool((coarse_sizes < sizes).any())
        if self.two_level:
            self.coarse = np.repeat(starts, coarse_sizes) + (np.arange(coarse_sizes.sum())
                                                            - np.repeat(np.cumsum(coarse_sizes) - coarse_sizes,
                                                                        coarse_sizes))
            Ac = A[self.coarse][:, self.coarse].tocsr()
            self.smoother = (block_jacobi(A, sizes) * self.OMEGA).tocsr()
        else:
            self.coarse = None
            Ac = A
        # the constant function on the coarse dofs: its coefficient on every element's first dof
        coarse_starts = np.zeros(len(coarse_sizes), dtype=np.int64)
        np.cumsum(coarse_sizes[:-1], out=coarse_starts[1:])
        if Ac.nnz < 2**31 - 1:  # pyamg's kernels want the index arrays of all its matrices alike: int32
            Ac = sp.csr_matrix((Ac.data, Ac.indices.astype(np.int32), Ac.indptr.astype(np.int32)), shape=Ac.shape)
        B = np.zeros((Ac.shape[0], 1))
        B[coarse_starts, 0] = 1.0 if constants is None else np.asarray(constants, dtype=np.float64)
        self.ml = pyamg.aggregation.rootnode_solver(Ac, B=B, symmetry="symmetric" if symmetric else "nonsymmetric")
        summary = f"{len(self.ml.levels)} levels, operator complexity {self.ml.operator_complexity():.2f}"
        if self.two_level:
            modes = "element-constant" if (coarse_sizes == 1).all() else "degree<=1"
            self.description = (f"block-Jacobi smoothing, root-node SA on the {Ac.shape[0]:,} {modes} dofs "
                                f"({summary})")
        else:
            self.description = f"root-node SA on the matrix ({summary})"

    def _vcycle(self, b: np.ndarray) -> np.ndarray:
        """One V-cycle of the pyamg hierarchy from a zero guess (pyamg's own
        ``solve(maxiter=1)`` adds two residual norms on the finest level)."""
        levels = self.ml.levels
        if len(levels) == 1:
            return np.asarray(self.ml.coarse_solver(levels[0].A, b)).reshape(-1)
        xs, bs = [], [b]
        for level in levels[:-1]:
            x = np.zeros_like(bs[-1])
            level.presmoother(level.A, x, bs[-1])
            xs.append(x)
            bs.append(level.R @ (bs[-1] - level.A @ x))
        x = np.asarray(self.ml.coarse_solver(levels[-1].A, bs[-1])).reshape(-1)
        for i in range(len(levels) - 2, -1, -1):
            level = levels[i]
            xs[i] += level.P @ x
            level.postsmoother(level.A, xs[i], bs[i])
            x = xs[i]
        return x

    def __call__(self, r: np.ndarray) -> np.ndarray:
        r = np.asarray(r, dtype=np.float64).reshape(-1)
        if not self.two_level:
            return self._vcycle(r)
        A, S, c = self.A, self.smoother, self.coarse
        x = S @ r
        x[c] += self._vcycle((r - A @ x)[c])
        x += S @ (r - A @ x)
        return x

    def operator(self) -> spla.LinearOperator:
        return spla.LinearOperator(self.A.shape, self.__call__, dtype=np.float64)


def amg(A: sp.csr_matrix, symmetric: bool, block_sizes: np.ndarray | None, space: Any) -> AMG:
    """The :class:`AMG` preconditioner of A: coarse space the degree <= 1 modes of ``space``'s elements,
    the element constants with ``block_sizes`` only, or A itself without either."""
    coarse_sizes = constants = None
    if space is not None:
        from ..basis import n_basis

        coarse_sizes = np.full(len(block_sizes), n_basis(1, space.mesh.dim), dtype=np.int64)
        constants = constant_coefficients(space)
    elif block_sizes is not None:
        coarse_sizes = np.ones(len(block_sizes), dtype=np.int64)
    return AMG(pyamg_module(), A, symmetric, block_sizes, coarse_sizes, constants)


#: an incomplete factorisation that maps A 1 to more than this times 1 in norm is unstable (dropped fill
#: let it blow up): it would break the Krylov method with overflow, so another preconditioner takes its place
ILU_GROWTH_LIMIT = 1e8


def ilu(A: sp.csr_matrix) -> spla.LinearOperator | None:
    """SciPy's incomplete LU as an operator, or None at a singular pivot or when it is unstable
    (its solve of ``A 1`` is non-finite or far larger than 1)."""
    try:
        factor = spla.spilu(A.tocsc(), drop_tol=1e-6, fill_factor=10)
    except RuntimeError:  # singular pivot in the incomplete factorisation
        return None
    ones = np.ones(A.shape[0])
    with np.errstate(all="ignore"):
        image = factor.solve(A @ ones)
    if not np.isfinite(image).all() or np.linalg.norm(image) > ILU_GROWTH_LIMIT * np.linalg.norm(ones):
        return None
    return spla.LinearOperator(A.shape, factor.solve)


def block_jacobi_or_jacobi(A: sp.csr_matrix, block_sizes: np.ndarray | None) -> tuple[Any, str]:
    """Block-Jacobi on the element blocks, Jacobi without them."""
    if block_sizes is not None:
        return block_jacobi(A, block_sizes), "block-jacobi"
    return jacobi(A), "jacobi"


def ilu_or_block_jacobi(A: sp.csr_matrix, block_sizes: np.ndarray | None) -> tuple[Any, str]:
    """ILU, or block-Jacobi (Jacobi) when it fails."""
    M = ilu(A)
    return (M, "ilu") if M is not None else block_jacobi_or_jacobi(A, block_sizes)


def choose_preconditioner(preconditioner: str, symmetric: bool, n: int, dim: int = 2) -> str:
    """The preconditioner ``auto`` stands for: AMG, except ILU for nonsymmetric 2D systems under
    :data:`ILU_BELOW` unknowns; without pyamg, block-Jacobi, or ILU for those small 2D systems."""
    if preconditioner != "auto":
        return preconditioner
    small_nonsymmetric = not symmetric and n < ILU_BELOW and dim == 2
    if pyamg_module() is None:
        return "ilu" if small_nonsymmetric else "block-jacobi"
    return "ilu" if small_nonsymmetric else "amg"


def make_preconditioner(preconditioner: str, A: sp.csr_matrix, symmetric: bool, block_sizes: np.ndarray | None,
                        space: Any) -> tuple[Any, str, dict]:
    """(M, name, extra info) for the named preconditioner (``auto`` chosen by :func:`choose_preconditioner`).

    ILU that fails gives way to AMG when ``auto`` can have it, else to block-Jacobi; ``extra`` has
    ``amg`` (the hierarchy's description) when AMG runs.
    """
    if preconditioner not in PRECONDITIONERS:
        raise OptionError(f"unknown preconditioner {preconditioner!r}; choose one of {', '.join(PRECONDITIONERS)}")
    dim = shape_of(A.shape[0], A.nnz, space, block_sizes)[0]
    choice = choose_preconditioner(preconditioner, symmetric, A.shape[0], dim)
    if choice == "amg" and pyamg_module() is None:
        raise OptionError("preconditioner 'amg' needs pyamg: pip install pyamg (a dependency of polydg)")
    if choice == "ilu":
        M = ilu(A)
        if M is not None:
            return M, "ilu", {}
        choice = "amg" if preconditioner == "auto" and pyamg_module() is not None else "block-jacobi"
    if choice == "amg":
        hierarchy = amg(A, symmetric, block_sizes, space)
        return hierarchy.operator(), "amg", {"amg": hierarchy.description}
    if choice == "jacobi":
        return jacobi(A), "jacobi", {}
    M, name = block_jacobi_or_jacobi(A, block_sizes)
    return M, name, {}


__all__ = ["PRECONDITIONERS", "ILU_BELOW", "AMG", "amg", "block_jacobi", "jacobi", "ilu", "constant_coefficients",
           "choose_preconditioner", "make_preconditioner", "pyamg_module"]
