"""``solve(matrix, rhs)``: the one entry to the linear solves.

It checks the system, chooses the method when asked to (``method="auto"``,
:mod:`~polydg.solve.choice`), runs the direct (:mod:`~polydg.solve.direct`)
or the iterative solve (:mod:`~polydg.solve.krylov`) on the host, or the
device's solve (:mod:`~polydg.solve.device`) for a matrix on the GPU, and
returns the solution with an ``info`` dict that says what ran and why.
"""

from __future__ import annotations

import math
import time
import warnings
from typing import Any, Callable

import numpy as np
import scipy.sparse as sp

from ..errors import OptionError
from .choice import METHODS, choose_method, direct_concerns, direct_fits
from .direct import ORDERINGS, direct_solve
from .krylov import iterative_solve
from . import preconditioners
from .preconditioners import PRECONDITIONERS
from .system import SolverError, SolverWarning, check_system, is_symmetric, matrix_blocks, quiet_numerics


def solve(matrix: sp.spmatrix, rhs: np.ndarray, method: str = "auto", *, symmetric: bool | None = None,
          tol: float = 1e-10, maxiter: int | None = None, block_sizes: np.ndarray | None = None,
          restart: int = 50, preconditioner: str = "auto", space: Any = None, ordering: str = "auto",
          progress: Callable[[str], None] | None = None) -> tuple[np.ndarray, dict]:
    """Solve ``matrix @ x = rhs``; returns ``(x, info)``.

    Parameters
    ----------
    method : "auto", "direct" or "iterative"
        auto: direct where it is the faster one and its factor fits in the
        free memory (below the crossover of
        :data:`~polydg.solve.choice.DIRECT_BELOW` for the system's dimension,
        degree (from ``space``) and symmetry), iterative otherwise; the
        choice and its reason are in ``info["method"]`` and
        ``info["choice_reason"]``.  An iterative solve it chose that fails
        gives way to the direct one where its factor fits
        (``info["fallback"]`` says why).
        direct: sparse LU (SuperLU) in the ``ordering``; a
        :class:`SolverWarning` when the table estimates it far slower than
        the iterative solve or its factor larger than the free memory.
        iterative: CG if the matrix is symmetric (falling back to GMRES if CG
        fails), otherwise GMRES(restart), with the ``preconditioner``.
    preconditioner : "auto", "amg", "block-jacobi", "jacobi" or "ilu"
        Used by the iterative method only.

        * amg (pyamg): one p-multigrid step (damped block-Jacobi smoothing on
          the element blocks) onto the degree <= 1 modes of every element,
          then a V-cycle of pyamg's root-node smoothed aggregation there (on
          the matrix itself at degree 1).  The degree <= 1 modes need
          ``space``; with ``block_sizes`` only, the coarse space is the
          element constants.
        * block-jacobi: the inverse of the element blocks (``block_sizes``),
          or jacobi (the diagonal) without them.
        * ilu: SciPy's ``spilu`` (drop tolerance 1e-6, fill factor 10),
          block-Jacobi when it meets a singular pivot or is unstable.
        * auto: amg, except for nonsymmetric 2D systems of fewer than
          ``ILU_BELOW`` (20,000) unknowns, where ILU is nearly exact and
          cheaper (AMG if it fails).  Without pyamg: ILU there, block-Jacobi
          otherwise.
    ordering : "auto", "nested-dissection", "colamd", "mmd-at-plus-a", "mmd-ata" or "natural"
        The direct solve's fill-reducing ordering; auto is nested dissection
        of the element graph (:mod:`~polydg.solve.direct`).
    block_sizes : array or None
        Dofs of each element, consecutive (``space.element_dofs``): the
        blocks of block-Jacobi, AMG and the nested dissection.  Taken from
        ``space`` when not given.
    space : DGSpace or None
        The space the system was assembled on: gives ``block_sizes``, the
        dimension and degree (the automatic choice), the degree <= 1 modes
        of each element and the constant function's coefficients (pyamg's
        near-nullspace).
    symmetric : bool or None
        None: test ||A - A^T||_F <= 1e-12 ||A||_F.
    tol : float
        Relative residual ||b - A x|| / ||b|| the Krylov method must reach.
    maxiter : int or None
        Most Krylov iterations (GMRES: inner iterations, rounded up to whole
        restart cycles; a CG that fails falls back to GMRES with the same
        limit); default ``max(1000, n)``.
    progress : callable or None
        Called with one short line: when the factorisation starts, and every
        few seconds of Krylov iterations (the iteration and the residual);
        with ``method="auto"`` first with the choice and its reason.

    A ``cupyx.scipy.sparse`` matrix (the GPU backend's result) is solved on
    the device by :func:`~polydg.solve.device.solve_on_device` (CG / GMRES
    with block-Jacobi on the element blocks, or
    ``cupyx.scipy.sparse.linalg.spsolve``); ``x`` is then a CuPy array.

    The system is solved in double precision whatever the matrix dtype.
    ``info`` has ``method`` (the one that ran), ``choice_reason`` (with
    auto), ``solver`` (e.g. ``splu``, ``cg+amg``, ``gmres(50)+ilu``),
    ``seconds`` (all of it), ``residual`` (true relative residual) and
    ``symmetric``; the direct solve also ``ordering``, ``factor_nnz``,
    ``factor_seconds``; the iterative one ``preconditioner``,
    ``setup_seconds``, ``krylov_seconds``, ``iterations`` and with amg
    ``amg`` (a description of the hierarchy); ``numerics`` lists what NumPy
    or SciPy warned on the way, as one string.
    Raises :class:`SolverError` (one line, with what to try) on a singular
    matrix, non-finite data or no convergence, and
    :class:`~polydg.errors.OptionError` on an unknown method, ordering or
    preconditioner, amg without pyamg, a tol outside (0, 1) or a maxiter
    below 1.

    >>> import numpy as np, scipy.sparse as sp
    >>> x, info = solve(sp.diags([2.0, 4.0]).tocsr(), np.array([2.0, 4.0]))
    >>> x.tolist(), info["method"], info["solver"]
    ([1.0, 1.0], 'direct', 'splu')
    """
    start = time.perf_counter()
    if method not in METHODS:
        raise OptionError(f"unknown solve method {method!r}; choose one of {', '.join(METHODS)}")
    if ordering not in ORDERINGS:
        raise OptionError(f"unknown ordering {ordering!r}; choose one of {', '.join(ORDERINGS)}")
    if preconditioner not in PRECONDITIONERS:
        raise OptionError(f"unknown preconditioner {preconditioner!r}; choose one of {', '.join(PRECONDITIONERS)}")
    if isinstance(tol, bool) or not (isinstance(tol, (int, float, np.integer, np.floating)) and 0 < tol < 1):
        raise OptionError(f"tol must be a number in (0, 1), the relative residual to reach, got {tol!r}")
    if maxiter is not None and (isinstance(maxiter, bool) or not isinstance(maxiter, (int, np.integer))
                                or maxiter < 1):
        raise OptionError(f"maxiter must be a positive integer or None, got {maxiter!r}")
    if method == "iterative" and preconditioner == "amg" and preconditioners.pyamg_module() is None:
        raise OptionError("preconditioner 'amg' needs pyamg: pip install pyamg (a dependency of polydg)")
    if block_sizes is None and space is not None:
        block_sizes = space.element_dofs
    from ..backend import device_sparse_modules

    on_device = device_sparse_modules(matrix)
    if on_device is not None:  # a cupyx matrix (assemble(backend="cupy")): solved where it is
        from .device import solve_on_device

        from .device import is_symmetric_on

        xp, linalg = on_device
        if method != "iterative" and symmetric is None:
            symmetric = is_symmetric_on(xp, matrix)
        # the table is the host's; the device's memory is not checked here
        method, reason = _resolve(method, matrix.shape[0], int(matrix.nnz), symmetric, space, block_sizes,
                                  free_bytes=math.inf)
        _say_choice(progress, method, reason)
        x, info = solve_on_device(matrix, rhs, method, xp=xp, sparse_linalg=linalg, symmetric=symmetric, tol=tol,
                                  maxiter=maxiter, restart=restart, block_sizes=block_sizes)
        return x, _with_reason(info, reason, start)
    A = sp.csr_matrix(matrix, dtype=np.float64)
    b = np.asarray(rhs, dtype=np.float64).reshape(-1)
    check_system(A, b, np)
    n = A.shape[0]
    if space is not None and space.n_dofs != n:
        raise SolverError(f"the space has {space.n_dofs} dofs, the matrix has {n} rows")
    if n == 0:
        return np.zeros(0), {"method": "direct" if method == "auto" else method, "iterations": 0, "solver": "none",
                             "seconds": 0.0, "residual": 0.0, "symmetric": True}
    if method != "iterative" and symmetric is None:  # the choice depends on it; the iterative solve uses it
        symmetric = is_symmetric(A)
    # the shape of the table: the space's, else the given blocks, else the blocks read off the matrix
    shape_blocks = block_sizes if block_sizes is not None or space is not None else matrix_blocks(A)
    method, reason = _resolve(method, n, A.nnz, symmetric, space, shape_blocks)
    _say_choice(progress, method, reason)
    heard: list[str] = []
    with quiet_numerics(heard):
        if method == "direct":
            x, info = direct_solve(A, b, ordering, block_sizes, progress)
            info["symmetric"] = bool(symmetric)
        else:
            try:
                x, info = iterative_solve(A, b, symmetric=symmetric, tol=tol, maxiter=maxiter, restart=restart,
                                          preconditioner=preconditioner, block_sizes=block_sizes, space=space,
                                          progress=progress)
            except SolverError as exc:  # chosen, not asked for: the direct solve where its factor fits
                if reason is None or not direct_fits(n, A.nnz, bool(symmetric), space, shape_blocks):
                    raise
                if progress is not None:
                    progress(f"{exc.failure}; solving directly instead")
                method = "direct"
                x, info = direct_solve(A, b, ordering, block_sizes, progress)
                info.update(symmetric=bool(symmetric), fallback=f"{exc.failure}; solved directly instead")
    info = {"method": method, "iterations": 0, **info}
    if heard:
        info["numerics"] = "; ".join(heard)
    return x, _with_reason(info, reason, start)


def _resolve(method: str, n: int, nnz: int, symmetric: bool | None, space: Any, block_sizes: Any,
             free_bytes: float | None = None) -> tuple[str, str | None]:
    """(the method to run, the reason of an automatic choice); a forced direct solve that the table finds
    far too slow or too large is warned about (:class:`SolverWarning`)."""
    if method == "auto":
        return choose_method(n, nnz, bool(symmetric), space, block_sizes, free_bytes)
    if method == "direct":
        concern = direct_concerns(n, nnz, bool(symmetric), space, block_sizes, free_bytes)
        if concern is not None:
            warnings.warn(f"{concern}: method='auto' (--solve auto) would take the iterative solve",
                          SolverWarning, stacklevel=3)
    return method, None


def _say_choice(progress: Callable[[str], None] | None, method: str, reason: str | None) -> None:
    if progress is not None and reason is not None:
        progress(f"{method} solve chosen: {reason}")


def _with_reason(info: dict, reason: str | None, start: float) -> dict:
    if reason is not None:
        info["choice_reason"] = reason
    info["seconds"] = time.perf_counter() - start
    return info


__all__ = ["solve", "SolverError", "SolverWarning"]
