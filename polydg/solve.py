"""Linear solves of the assembled system, DG error norms and point evaluation.

* :func:`solve`: SciPy's sparse LU (direct) or a preconditioned Krylov method
  (iterative: CG for symmetric matrices, GMRES otherwise, preconditioned by
  algebraic multigrid when pyamg is installed, else by block-Jacobi / ILU as
  before), with setup and iteration times, iterations and the true residual
  in ``info``.
* :func:`errors`: the L2 error, the broken H1 seminorm error and the DG-norm
  error of a discrete solution against the problem's exact solution, by
  quadrature on the sub-simplices and the faces of the polytopic mesh.
* :func:`evaluate`, :func:`element_means`: the DG function at given points,
  and its mean value on every element.

Everything over elements, sub-simplices, faces and quadrature points is
vectorised: the only Python loops run over the distinct polynomial degrees
and over memory-bounded chunks.
"""

from __future__ import annotations

import math
import time
from typing import Any, Callable

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from .errors import OptionError, PolyDGError

#: default penalty constant of :func:`errors` when no per-face values are given
DEFAULT_PENALTY = 10.0


class SolverError(PolyDGError):
    """The linear solver failed: singular matrix, no convergence, non-finite data."""


# ---------------------------------------------------------------------------
# linear solves


def is_symmetric(matrix: sp.spmatrix, rtol: float = 1e-12) -> bool:
    """True when ||A - A^T||_F <= rtol ||A||_F (one sparse subtraction, O(nnz))."""
    A = sp.csr_matrix(matrix)
    if A.shape[0] != A.shape[1]:
        return False
    norm = np.sqrt(np.sum(np.abs(A.data) ** 2))
    diff = (A - A.T).tocsr()
    return bool(np.sqrt(np.sum(np.abs(diff.data) ** 2)) <= rtol * norm)


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


def _jacobi(A: sp.csr_matrix) -> sp.csr_matrix:
    diagonal = A.diagonal()
    inverse = np.where(diagonal != 0, 1.0 / np.where(diagonal != 0, diagonal, 1.0), 1.0)
    return sp.diags(inverse).tocsr()


#: accepted values of ``solve(..., preconditioner=)``
PRECONDITIONERS = ("auto", "amg", "block-jacobi", "jacobi", "ilu")


def _pyamg() -> Any:
    """The pyamg module, or None when it is not installed (tests patch this)."""
    try:
        import pyamg
    except ImportError:
        return None
    return pyamg


def constant_coefficients(space: Any) -> np.ndarray:
    """(n_elements,) coefficient of each element's first (constant) basis
    function that represents the constant 1: ``1 / phi_0``."""
    tabulate, _, _ = _basis()
    mesh = space.mesh
    lo, hi = mesh.bbox_min, mesh.bbox_max
    return 1.0 / tabulate(0.5 * (lo + hi), lo, hi, 0)[:, 0]


class _AMG:
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


def _ilu(A: sp.csr_matrix) -> Any:
    """SciPy's incomplete LU as an operator, or None at a singular pivot."""
    try:
        ilu = spla.spilu(A.tocsc(), drop_tol=1e-6, fill_factor=10)
    except RuntimeError:  # singular pivot in the incomplete factorisation
        return None
    return spla.LinearOperator(A.shape, ilu.solve)


def _ilu_or_block_jacobi(A: sp.csr_matrix, block_sizes: np.ndarray | None) -> tuple[Any, str]:
    M = _ilu(A)
    return (M, "ilu") if M is not None else _block_jacobi_or_jacobi(A, block_sizes)


def _block_jacobi_or_jacobi(A: sp.csr_matrix, block_sizes: np.ndarray | None) -> tuple[Any, str]:
    if block_sizes is not None:
        return block_jacobi(A, block_sizes), "block-jacobi"
    return _jacobi(A), "jacobi"


#: ``auto`` takes ILU rather than AMG for nonsymmetric systems with fewer unknowns than this
ILU_BELOW = 20_000


def _choose_preconditioner(preconditioner: str, symmetric: bool, n: int) -> str:
    """The preconditioner ``auto`` stands for (see :func:`solve`)."""
    if preconditioner != "auto":
        return preconditioner
    if _pyamg() is None:
        return "block-jacobi" if symmetric else "ilu"
    return "ilu" if not symmetric and n < ILU_BELOW else "amg"


def _relative_residual(A: sp.csr_matrix, x: np.ndarray, b: np.ndarray) -> float:
    nb = np.linalg.norm(b)
    r = np.linalg.norm(b - A @ x)
    return float(r / nb) if nb > 0 else float(r)


def _krylov(method: str, A: sp.csr_matrix, b: np.ndarray, M: Any, tol: float, maxiter: int,
            restart: int) -> tuple[np.ndarray, int, int]:
    count = [0]

    def callback(_: Any) -> None:
        count[0] += 1

    if method == "cg":
        x, status = spla.cg(A, b, rtol=tol, atol=0.0, maxiter=maxiter, M=M, callback=callback)
    else:
        restart = max(1, min(restart, maxiter))
        cycles = max(1, math.ceil(maxiter / restart))
        x, status = spla.gmres(A, b, rtol=tol, atol=0.0, restart=restart, maxiter=cycles, M=M,
                               callback=callback, callback_type="pr_norm")
    return x, int(status), count[0]


def solve(matrix: sp.spmatrix, rhs: np.ndarray, method: str = "direct", *, symmetric: bool | None = None,
          tol: float = 1e-10, maxiter: int | None = None, block_sizes: np.ndarray | None = None,
          restart: int = 50, preconditioner: str = "auto", space: Any = None) -> tuple[np.ndarray, dict]:
    """Solve ``matrix @ x = rhs``; returns ``(x, info)``.

    Parameters
    ----------
    method : "direct" or "iterative"
        direct: sparse LU (SuperLU, ``scipy.sparse.linalg.splu`` on CSC).
        iterative: CG if the matrix is symmetric (falling back to GMRES if CG
        fails), otherwise GMRES(restart), with the ``preconditioner``.
    preconditioner : "auto", "amg", "block-jacobi", "jacobi" or "ilu"
        Used by the iterative method only.

        * amg (needs pyamg, ``pip install polydg[solvers]``): one p-multigrid
          step (damped block-Jacobi smoothing on the element blocks) onto
          the degree <= 1 modes of every element, then a V-cycle of pyamg's
          root-node smoothed aggregation there (on the matrix itself at
          degree 1).  The degree <= 1 modes need ``space``; with
          ``block_sizes`` only, the coarse space is the element constants.
        * block-jacobi: the inverse of the element blocks (``block_sizes``),
          or jacobi (the diagonal) without them.
        * ilu: SciPy's ``spilu`` (drop tolerance 1e-6, fill factor 10),
          block-Jacobi when it meets a singular pivot.
        * auto, with pyamg: amg, except for nonsymmetric systems of fewer
          than ``ILU_BELOW`` (20,000) unknowns, where ILU is nearly exact and
          cheaper (AMG if its factorisation fails).  Without pyamg:
          block-Jacobi (CG) for symmetric matrices and ILU (GMRES) otherwise,
          as before.  The rule follows ``launch/bench_solvers.py`` (poisson
          and paper-2d, p = 1 to 3).
        A CG that fails goes on with GMRES: with the same AMG preconditioner,
        or with ILU after block-Jacobi.
    block_sizes : array or None
        Dofs of each element, consecutive (``space.element_dofs``): the
        blocks of block-Jacobi and AMG.  Taken from ``space`` when not given.
    space : DGSpace or None
        The space the system was assembled on: gives ``block_sizes``, the
        degree <= 1 modes of each element and the constant function's
        coefficients (pyamg's near-nullspace).
    symmetric : bool or None
        None: test ||A - A^T||_F <= 1e-12 ||A||_F.
    tol : float
        Relative residual ||b - A x|| / ||b|| the Krylov method must reach.
    maxiter : int or None
        Most Krylov iterations (GMRES: inner iterations, rounded up to whole
        restart cycles; a CG that fails falls back to GMRES with the same
        limit); default ``max(1000, n)``.

    A ``cupyx.scipy.sparse`` matrix (the GPU backend's result) is solved on
    the device by :func:`solve_on_device` (CG / GMRES with block-Jacobi on
    the element blocks, or ``cupyx.scipy.sparse.linalg.spsolve``); ``x`` is
    then a CuPy array.

    The system is solved in double precision whatever the matrix dtype.
    ``info`` has ``method``, ``solver`` (e.g. ``cg+amg``,
    ``gmres(50)+ilu``), ``preconditioner``, ``seconds`` (all of it),
    ``setup_seconds`` (the preconditioner's setup), ``krylov_seconds``,
    ``iterations``, ``residual`` (true relative residual) and ``symmetric``;
    with amg also ``amg`` (a description of the hierarchy).
    Raises :class:`SolverError` on a singular matrix, non-finite data or no
    convergence (with the residual reached), and
    :class:`~polydg.errors.OptionError` on an unknown preconditioner or amg
    without pyamg.
    """
    start = time.perf_counter()
    if method not in ("direct", "iterative"):
        raise SolverError(f"unknown solve method {method!r} (direct or iterative)")
    from .backend import device_sparse_modules

    on_device = device_sparse_modules(matrix)
    if on_device is not None:  # a cupyx matrix (assemble(backend="cupy")): solved where it is
        xp, linalg = on_device
        if block_sizes is None and space is not None:
            block_sizes = space.element_dofs
        return solve_on_device(matrix, rhs, method, xp=xp, sparse_linalg=linalg, symmetric=symmetric, tol=tol,
                               maxiter=maxiter, restart=restart, block_sizes=block_sizes)
    if preconditioner not in PRECONDITIONERS:
        raise OptionError(f"unknown preconditioner {preconditioner!r}; choose one of {', '.join(PRECONDITIONERS)}")
    if method == "iterative" and preconditioner == "amg" and _pyamg() is None:
        raise OptionError("preconditioner 'amg' needs pyamg: pip install 'polydg[solvers]' (or pyamg>=5)")
    A = sp.csr_matrix(matrix, dtype=np.float64)
    b = np.asarray(rhs, dtype=np.float64).reshape(-1)
    _check_system(A, b, np)
    n = A.shape[0]
    if space is not None:
        if space.n_dofs != n:
            raise SolverError(f"the space has {space.n_dofs} dofs, the matrix has {n} rows")
        if block_sizes is None:
            block_sizes = space.element_dofs
    info: dict = {"method": method, "iterations": 0}
    if n == 0:
        info.update(solver="none", seconds=0.0, residual=0.0, symmetric=True)
        return np.zeros(0), info

    if method == "direct":
        try:
            lu = spla.splu(A.tocsc())
        except RuntimeError as exc:
            raise SolverError(f"direct solve failed: {exc} (is the matrix singular?)") from exc
        x = lu.solve(b)
        info["solver"] = "splu"
        info["symmetric"] = symmetric
        if not np.isfinite(x).all():
            raise SolverError("direct solve produced non-finite values (singular matrix?)")
    else:
        if symmetric is None:
            symmetric = is_symmetric(A)
        info["symmetric"] = bool(symmetric)
        maxiter = int(maxiter) if maxiter is not None else max(1000, n)
        choice = _choose_preconditioner(preconditioner, bool(symmetric), n)
        setup = time.perf_counter()
        M = None
        if choice == "ilu":
            M, name = _ilu(A), "ilu"
            if M is None:  # a singular pivot: AMG if auto can have it, else block-Jacobi as before
                choice = "amg" if preconditioner == "auto" and _pyamg() is not None else "block-jacobi"
        if choice == "amg":
            coarse_sizes = constants = None
            if space is not None:
                from .basis import n_basis

                coarse_sizes = np.full(len(block_sizes), n_basis(1, space.mesh.dim), dtype=np.int64)
                constants = constant_coefficients(space)
            elif block_sizes is not None:
                coarse_sizes = np.ones(len(block_sizes), dtype=np.int64)
            amg = _AMG(_pyamg(), A, bool(symmetric), block_sizes, coarse_sizes, constants)
            M, name = amg.operator(), "amg"
            info["amg"] = amg.description
        elif choice == "jacobi":
            M, name = _jacobi(A), "jacobi"
        elif choice == "block-jacobi":
            M, name = _block_jacobi_or_jacobi(A, block_sizes)
        info["setup_seconds"] = time.perf_counter() - setup
        info["preconditioner"] = name
        krylov = time.perf_counter()
        x, status = None, 1
        if symmetric:
            x, status, iterations = _krylov("cg", A, b, M, tol, maxiter, restart)
            info["solver"] = f"cg+{name}"
            info["iterations"] = iterations
            if status != 0 or not np.isfinite(x).all():
                info["fallback"] = f"CG stopped after {iterations} iterations (residual " \
                                   f"{_relative_residual(A, np.nan_to_num(x), b):.3e}); tried GMRES"
                if name not in ("amg", "ilu"):  # as before: block-Jacobi gives way to ILU
                    setup = time.perf_counter()
                    M, name = _ilu_or_block_jacobi(A, block_sizes)
                    setup = time.perf_counter() - setup
                    info["setup_seconds"] += setup
                    krylov += setup
                    info["preconditioner"] = name
        if status != 0 or x is None or not np.isfinite(x).all():
            x, status, iterations = _krylov("gmres", A, b, M, tol, maxiter, restart)
            info["solver"] = f"gmres({restart})+{name}"
            info["iterations"] = info["iterations"] + iterations
        info["krylov_seconds"] = time.perf_counter() - krylov
        if status != 0 or not np.isfinite(x).all():
            residual = _relative_residual(A, np.nan_to_num(x), b)
            raise SolverError(
                f"iterative solve ({info['solver']}) did not converge in {info['iterations']} iterations: "
                f"relative residual {residual:.3e} > tol {tol:g}"
            )
    info["residual"] = _relative_residual(A, x, b)
    info["seconds"] = time.perf_counter() - start
    return x, info


# ---------------------------------------------------------------------------
# linear solves where the matrix is (the GPU)


def _tolerance_keyword(function: Callable) -> str:
    """``rtol`` (SciPy >= 1.12, CuPy >= 13) or ``tol`` (older CuPy): the relative tolerance's keyword."""
    import inspect

    try:
        return "rtol" if "rtol" in inspect.signature(function).parameters else "tol"
    except (TypeError, ValueError):
        return "rtol"


def _check_system(A: Any, b: Any, xp: Any) -> None:
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


def solve_on_device(matrix: Any, rhs: Any, method: str = "direct", *, xp: Any, sparse_linalg: Any,
                    symmetric: bool | None = None, tol: float = 1e-10, maxiter: int | None = None,
                    restart: int = 50, block_sizes: Any = None) -> tuple[Any, dict]:
    """Solve ``matrix @ x = rhs`` with the sparse solvers of the matrix's own library; ``x`` stays there.

    ``xp`` and ``sparse_linalg`` are ``cupy`` and ``cupyx.scipy.sparse.linalg``
    for a matrix on the GPU (what :func:`solve` passes), or ``numpy`` and
    ``scipy.sparse.linalg`` (the same logic on the host, for tests).
    ``direct``: ``sparse_linalg.spsolve``.  ``iterative``: CG when the
    matrix is symmetric (``symmetric=None``: tested as :func:`is_symmetric`
    does), GMRES(restart) otherwise or when CG fails, preconditioned by
    block-Jacobi on the element blocks (``block_sizes``: the dofs of each
    element, consecutive; :func:`block_jacobi_on`) or, without them or with a
    singular block, Jacobi.  No AMG or ILU on the device.  ``info`` as
    :func:`solve`'s, with ``device: True``.
    """
    start = time.perf_counter()
    A = matrix.astype(np.float64) if matrix.dtype != np.float64 else matrix
    b = xp.asarray(rhs, dtype=np.float64).reshape(-1)
    _check_system(A, b, xp)
    n = A.shape[0]
    info: dict = {"method": method, "iterations": 0, "device": True}

    def residual(x) -> float:
        nb = float(xp.linalg.norm(b))
        r = float(xp.linalg.norm(b - A @ x))
        return r / nb if nb > 0 else r

    if method == "direct":
        x = sparse_linalg.spsolve(A.tocsr(), b)
        info.update(solver="spsolve", symmetric=symmetric)
        if not bool(xp.isfinite(x).all()):
            raise SolverError("direct solve produced non-finite values (singular matrix?)")
    else:
        if symmetric is None:
            norm = float(xp.sqrt(xp.sum(xp.abs(A.data) ** 2)))
            diff = (A - A.T.tocsr()).tocsr()
            symmetric = float(xp.sqrt(xp.sum(xp.abs(diff.data) ** 2))) <= 1e-12 * norm
        info["symmetric"] = bool(symmetric)
        maxiter = int(maxiter) if maxiter is not None else max(1000, n)
        apply, name = (block_jacobi_on(xp, A, block_sizes), "block-jacobi") if block_sizes is not None else (None, "")
        if apply is None:
            diagonal = A.diagonal()
            if bool((diagonal != 0).all()):
                inverse = 1.0 / diagonal
                apply, name = (lambda r: inverse * r), "jacobi"
        M = None if apply is None else sparse_linalg.LinearOperator((n, n), matvec=lambda r: apply(r.reshape(-1)),
                                                                     dtype=np.float64)
        info["preconditioner"] = name = name if M is not None else "none"
        count = [0]

        def callback(_: Any) -> None:
            count[0] += 1

        x, status = None, 1
        if symmetric:
            x, status = sparse_linalg.cg(A, b, maxiter=maxiter, M=M, callback=callback, atol=0.0,
                                         **{_tolerance_keyword(sparse_linalg.cg): tol})
            info.update(solver=f"cg+{name}", iterations=count[0])
            if status != 0 or not bool(xp.isfinite(x).all()):
                info["fallback"] = f"CG stopped after {count[0]} iterations; tried GMRES"
        if status != 0 or x is None or not bool(xp.isfinite(x).all()):
            count[0] = 0
            restart = max(1, min(restart, maxiter))
            x, status = sparse_linalg.gmres(A, b, restart=restart, maxiter=max(1, math.ceil(maxiter / restart)), M=M,
                                            callback=callback, callback_type="pr_norm", atol=0.0,
                                            **{_tolerance_keyword(sparse_linalg.gmres): tol})
            info["solver"] = f"gmres({restart})+{name}"
            info["iterations"] += count[0]
        if status != 0 or not bool(xp.isfinite(x).all()):
            raise SolverError(f"iterative solve on the device ({info['solver']}) did not converge in "
                              f"{info['iterations']} iterations: relative residual "
                              f"{residual(xp.nan_to_num(x)):.3e} > tol {tol:g}")
    info["residual"] = residual(x)
    info["seconds"] = time.perf_counter() - start
    return x, info


def block_jacobi_on(xp: Any, A: Any, block_sizes: Any) -> Callable[[Any], Any] | None:
    """r -> D^{-1} r with D the diagonal blocks of the CSR matrix A (consecutive blocks of ``block_sizes``
    rows: the element blocks of a DG matrix), in A's array namespace ``xp``; None when the sizes do not add up
    to A's rows or a block is singular.

    The blocks are gathered from A's entries whose row and column fall in one
    block, inverted as one batched ``xp.linalg.inv`` per block size and
    applied as one batched product per block size: nothing per element in
    Python.  Setup memory is a few arrays of A's nnz.
    """
    from .assembly.device_pattern import segment_owner
    from .backend import to_host

    sizes = xp.asarray(block_sizes, dtype=np.int64)
    first = xp.zeros(len(sizes) + 1, dtype=np.int64)
    xp.cumsum(sizes, out=first[1:])
    n = A.shape[0]
    if A.shape[1] != n or int(first[-1]) != n:
        return None
    block_of_row = segment_owner(xp, first, n)
    row = segment_owner(xp, xp.asarray(A.indptr, dtype=np.int64), int(A.nnz))
    col = xp.asarray(A.indices, dtype=np.int64)
    inside = block_of_row[row] == block_of_row[col]
    row, col, value = row[inside], col[inside], A.data[inside]
    block = block_of_row[row]
    groups = []  # per block size b: (row indices (K, b), inverse blocks (K, b, b))
    for b in np.unique(to_host(sizes)):
        members = xp.flatnonzero(sizes == b)
        slot = xp.full(len(sizes), -1, dtype=np.int64)
        slot[members] = xp.arange(len(members), dtype=np.int64)
        mine = sizes[block] == b
        D = xp.zeros((len(members), int(b), int(b)), dtype=np.float64)
        base = first[block[mine]]
        D[slot[block[mine]], row[mine] - base, col[mine] - base] = value[mine]
        try:
            inverse = xp.linalg.inv(D)
        except Exception:  # a singular block (NumPy raises; CuPy returns non-finite values)
            return None
        if not bool(xp.isfinite(inverse).all()):
            return None
        groups.append((first[members][:, None] + xp.arange(int(b), dtype=np.int64), inverse))

    def apply(r: Any) -> Any:
        out = xp.empty_like(r)
        for rows, inverse in groups:
            out[rows] = xp.einsum("kij,kj->ki", inverse, r[rows])
        return out

    return apply


# ---------------------------------------------------------------------------
# the DG function at points


def _basis() -> tuple[Callable, Callable, Callable]:
    """(tabulate, tabulate_gradients, n_basis) from polydg.basis."""
    from . import basis

    return basis.tabulate, basis.tabulate_gradients, basis.n_basis


def _kind(space: Any) -> str:
    """The space's basis, "P" (total degree) or "PQ" (space-time); spaces without one are P."""
    return getattr(space, "basis", "P")


def _size(space: Any, p: int) -> int:
    """Basis functions of degree p in the space's basis."""
    from .basis import basis_size

    return basis_size(int(p), space.mesh.dim, _kind(space))


def _total(space: Any, p: int) -> int:
    """The total degree of the space's degree-p functions (p for P, 2p for PQ): rules follow it."""
    return 2 * int(p) if _kind(space) == "PQ" else int(p)


def _simplex_rule(k: int, q: int) -> tuple[np.ndarray, np.ndarray]:
    """Barycentric points (nq, k+1) and weights (nq,) summing to 1 on the k-simplex."""
    from .quadrature import simplex_rule

    lam, w = simplex_rule(k, int(q))
    return np.asarray(lam, dtype=np.float64), np.asarray(w, dtype=np.float64)


def _coefficients(space: Any, solution: np.ndarray, elements: np.ndarray, nb: int) -> np.ndarray:
    """(k, nb) coefficients of the given elements, zero-padded to ``nb`` basis
    functions (the basis is hierarchical: degree p is a prefix of degree P >= p)."""
    local = np.arange(nb)
    index = space.dof_offsets[elements][:, None] + local
    valid = local < space.element_dofs[elements][:, None]
    return np.where(valid, solution[np.where(valid, index, 0)], 0.0)


def _values(space: Any, solution: np.ndarray, x: np.ndarray, elements: np.ndarray, p: int,
            gradients: bool) -> tuple[np.ndarray, np.ndarray | None]:
    """u_h (and grad u_h) at points x (n, d) lying in ``elements`` (n,), with the
    degree-p basis (p >= the degree of every element involved)."""
    tabulate, tabulate_gradients, _ = _basis()
    mesh = space.mesh
    nb = _size(space, p)
    lo, hi = mesh.bbox_min[elements], mesh.bbox_max[elements]
    c = _coefficients(space, solution, elements, nb)
    value = np.einsum("nb,nb->n", tabulate(x, lo, hi, p, _kind(space)), c)
    grad = np.einsum("nbd,nb->nd", tabulate_gradients(x, lo, hi, p, _kind(space)), c) if gradients else None
    return value, grad


def _chunks(n: int, per_item: int, budget_mb: float) -> list[slice]:
    size = max(1, int(budget_mb * 2**20 / 8 / max(per_item, 1)))
    return [slice(a, min(a + size, n)) for a in range(0, n, size)]


def evaluate(space: Any, solution: np.ndarray, points: np.ndarray, elements: np.ndarray, *,
             gradient: bool = False, memory_budget_mb: float = 256.0) -> np.ndarray | tuple:
    """The DG function with coefficients ``solution`` at ``points`` (n, d), point i
    taken in element ``elements[i]`` (the caller knows it lies there).

    Returns the values (n,), or ``(values, gradients (n, d))`` with ``gradient=True``.
    """
    points = np.asarray(points, dtype=np.float64)
    elements = np.asarray(elements, dtype=np.int64)
    solution = np.asarray(solution, dtype=np.float64)
    n, d = points.shape
    values = np.empty(n)
    grads = np.empty((n, d)) if gradient else None
    degree = space.degree[elements]
    for p in np.unique(degree):
        members = np.flatnonzero(degree == p)
        per_point = _size(space, p) * (d + 2)
        for part in _chunks(len(members), per_point, memory_budget_mb):
            rows = members[part]
            v, g = _values(space, solution, points[rows], elements[rows], int(p), gradient)
            values[rows] = v
            if gradient:
                grads[rows] = g
    return (values, grads) if gradient else values


# ---------------------------------------------------------------------------
# quadrature on sub-simplices and faces


def _simplex_batches(space: Any, extra: int, budget_mb: float, factor: int = 2):
    """Yield (simplices, x (k*nq, d), weights (k*nq,), elements (k*nq,), p, nq) per degree
    and chunk, with the rule of degree ``factor * P + extra`` on sub-simplices of degree p, P the
    total degree of their functions (p; 2p for PQ)."""
    mesh = space.mesh
    d = mesh.dim
    simplex_degree = space.degree[mesh.simplex_element]
    for p in np.unique(simplex_degree):
        p = int(p)
        lam, w = _simplex_rule(d, factor * _total(space, p) + extra)
        nq = len(w)
        members = np.flatnonzero(simplex_degree == p)
        for part in _chunks(len(members), nq * _size(space, p) * (d + 2), budget_mb):
            s = members[part]
            x = np.einsum("qj,kjd->kqd", lam, mesh.points[mesh.simplices[s]]).reshape(-1, d)
            weight = (mesh.simplex_volume[s][:, None] * w[None, :]).ravel()
            yield s, x, weight, np.repeat(mesh.simplex_element[s], nq), p, nq


def _face_batches(space: Any, faces: np.ndarray, extra: int, budget_mb: float):
    """Yield (faces, x, weights, P, nq) over the given faces, grouped by the
    larger degree P of the adjacent elements."""
    mesh = space.mesh
    d = mesh.dim
    fe = mesh.face_elements[faces]
    P = np.maximum(space.degree[fe[:, 0]], np.where(fe[:, 1] >= 0, space.degree[np.maximum(fe[:, 1], 0)], 0))
    for p in np.unique(P):
        p = int(p)
        lam, w = _simplex_rule(d - 1, 2 * _total(space, p) + extra)
        nq = len(w)
        members = faces[P == p]
        for part in _chunks(len(members), nq * _size(space, p) * 4, budget_mb):
            f = members[part]
            x = np.einsum("qj,kjd->kqd", lam, mesh.points[mesh.face_vertices[f]]).reshape(-1, d)
            weight = (mesh.face_measure[f][:, None] * w[None, :]).ravel()
            yield f, x, weight, p, nq


def _quadratic_form(v: np.ndarray, A: np.ndarray) -> np.ndarray:
    """v_n^T A_n v_n for v (n, d) and A (n, d, d) or (1, d, d)."""
    return np.einsum("ni,ni->n", (v[:, None, :] @ A)[:, 0, :], v)


def _normal_diffusion(A: np.ndarray, normal: np.ndarray) -> np.ndarray:
    return _quadratic_form(normal, A)


def errors(space: Any, problem: Any, solution: np.ndarray, *, penalty_values: np.ndarray | None = None,
           quadrature_extra: int = 2, memory_budget_mb: float = 256.0, faces: np.ndarray | None = None) -> dict:
    """Errors of the DG solution against ``problem.exact``: ``{"l2", "h1", "dg"}``.

    With e = u - u_h, quadrature of degree 2 p_K + ``quadrature_extra`` on
    every sub-simplex and 2 max(p_K1, p_K2) + ``quadrature_extra`` on faces:

        l2^2 = sum_K ||e||^2_{L2(K)}
        h1^2 = sum_K ||grad e||^2_{L2(K)}                        (broken H1 seminorm)
        dg^2 = sum_K ||A^{1/2} grad e||^2_{L2(K)}
             + sum_{F interior} sigma_F ||[[e]]||^2_F
             + sum_{F on the boundary} sigma_F ||e||^2_{F ∩ diffusive Dirichlet}
             + 1/2 sum_{F interior} || |b.n|^{1/2} [[e]] ||^2_F
             + 1/2 sum_{F on the boundary} || |b.n|^{1/2} e ||^2_F

    where [[e]] = e_K1 - e_K2 = u_h,K2 - u_h,K1 (u is continuous), the
    diffusive Dirichlet part is {n.A n > 0 and not is_neumann}, pointwise, and
    sigma_F is ``penalty_values[F]`` (one per face, as the assembler reports
    it) or by default the classical 10 a_F max(p_K, 1)^2 / min(h_K) with a_F
    the largest n.A n at the face's quadrature points.  The keys h1 and dg
    are left out when the problem has no ``exact_gradient``.

    ``faces`` (a boolean mask over the faces) limits the face sums to those
    faces: one MPI rank's share, whose squares the ranks add up.
    """
    mesh = space.mesh
    solution = np.asarray(solution, dtype=np.float64).reshape(-1)
    if solution.shape[0] != space.n_dofs:
        raise SolverError(f"solution has {solution.shape[0]} entries, the space has {space.n_dofs} dofs")
    if penalty_values is not None:
        penalty_values = np.asarray(penalty_values, dtype=np.float64).reshape(-1)
        if penalty_values.shape[0] != mesh.n_faces:
            raise SolverError(f"penalty_values has {penalty_values.shape[0]} entries, the mesh has "
                              f"{mesh.n_faces} faces")
    with_gradient = problem.exact_gradient is not None
    l2 = h1 = energy = jumps = 0.0

    # --- volume terms ------------------------------------------------------
    for _, x, weight, elements, p, _ in _simplex_batches(space, quadrature_extra, memory_budget_mb):
        uh, guh = _values(space, solution, x, elements, p, with_gradient)
        e = problem.exact_at(x) - uh
        l2 += float(weight @ e**2)
        if with_gradient:
            ge = problem.exact_gradient_at(x) - guh
            h1 += float(weight @ np.einsum("nd,nd->n", ge, ge))
            energy += float(weight @ _quadratic_form(ge, problem.diffusion_at(x)))

    # --- face terms ----------------------------------------------------------
    if with_gradient:
        h = mesh.diameter
        chosen = np.ones(mesh.n_faces, dtype=bool) if faces is None else np.asarray(faces, dtype=bool)
        for interior, face_range in ((True, np.arange(mesh.n_interior_faces)),
                                     (False, np.arange(mesh.n_interior_faces, mesh.n_faces))):
            face_range = face_range[chosen[face_range]]
            if len(face_range) == 0:
                continue
            for f, x, weight, p, nq in _face_batches(space, face_range, quadrature_extra, memory_budget_mb):
                e1 = np.repeat(mesh.face_elements[f, 0], nq)
                normal = np.repeat(mesh.face_normal[f], nq, axis=0)
                u1, _ = _values(space, solution, x, e1, p, False)
                if interior:
                    e2 = np.repeat(mesh.face_elements[f, 1], nq)
                    u2, _ = _values(space, solution, x, e2, p, False)
                    jump = u1 - u2
                else:
                    jump = problem.exact_at(x) - u1
                nAn = np.broadcast_to(_normal_diffusion(problem.diffusion_at(x), normal), jump.shape)
                if penalty_values is not None:
                    sigma = np.repeat(penalty_values[f], nq)
                else:
                    a_face = nAn.reshape(-1, nq).max(axis=1)
                    fe = mesh.face_elements[f]
                    h_face = np.where(fe[:, 1] >= 0, np.minimum(h[fe[:, 0]], h[np.maximum(fe[:, 1], 0)]),
                                      h[fe[:, 0]])
                    sigma = np.repeat(DEFAULT_PENALTY * a_face * max(p, 1) ** 2 / h_face, nq)
                if interior:
                    penalised = np.ones(jump.shape, dtype=bool)
                else:
                    neumann = np.broadcast_to(problem.neumann_mask(x, normal), jump.shape)
                    penalised = (nAn > 0) & ~neumann
                jumps += float(weight @ np.where(penalised, sigma * jump**2, 0.0))
                if problem.has_advection:
                    bn = np.einsum("nd,nd->n", np.broadcast_to(problem.advection_at(x), x.shape), normal)
                    jumps += 0.5 * float(weight @ (np.abs(bn) * jump**2))

    result = {"l2": math.sqrt(l2)}
    if with_gradient:
        result.update(h1=math.sqrt(h1), dg=math.sqrt(energy + jumps))
    return result


def element_means(space: Any, solution: np.ndarray, *, memory_budget_mb: float = 256.0) -> np.ndarray:
    """(n_elements,) mean value of the DG function on each element, (1/|K|) int_K u_h,
    by a quadrature exact for degree p_K on the sub-simplices."""
    mesh = space.mesh
    solution = np.asarray(solution, dtype=np.float64).reshape(-1)
    integral = np.zeros(mesh.n_elements)
    for _, x, weight, elements, p, _ in _simplex_batches(space, 0, memory_budget_mb, factor=1):
        uh, _ = _values(space, solution, x, elements, p, False)
        integral += np.bincount(elements, weights=weight * uh, minlength=mesh.n_elements)
    return integral / mesh.measure


__all__ = ["solve", "SolverError", "PRECONDITIONERS", "is_symmetric", "block_jacobi", "constant_coefficients",
           "errors", "evaluate", "element_means"]
