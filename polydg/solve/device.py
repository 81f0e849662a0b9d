"""Linear solves where the matrix is: a ``cupyx.scipy.sparse`` matrix (the GPU backend's result) solved on
the device with CuPy's own sparse solvers, without a copy to the host.

The same code runs on NumPy and SciPy (``xp=numpy``), which is how the tests
check it without a GPU.  No AMG or ILU on the device: the Krylov methods are
preconditioned by block-Jacobi on the element blocks (:func:`block_jacobi_on`).
"""

from __future__ import annotations

import contextlib
import math
import time
from typing import Any, Callable

import numpy as np

from .system import SolverError, check_system


def _tolerance_keyword(function: Callable) -> str:
    """``rtol`` (SciPy >= 1.12, CuPy >= 14) or ``tol`` (CuPy 13 and older): the relative tolerance's keyword."""
    import inspect

    try:
        return "rtol" if "rtol" in inspect.signature(function).parameters else "tol"
    except (TypeError, ValueError):
        return "rtol"


def _counts_cycles(sparse_linalg: Any) -> bool:
    """Whether ``sparse_linalg.gmres`` is CuPy's: maxiter in inner iterations, its callback once per restart."""
    return sparse_linalg.__name__.split(".")[0] == "cupyx"


def _singular_blocks_raise(xp: Any):
    """A context in which ``xp.linalg.inv`` of a batch with a singular block raises: NumPy always does; CuPy
    only under ``cupyx.errstate(linalg="raise")``, and otherwise returns undefined values for that block."""
    if xp.__name__.split(".")[0] != "cupy":
        return contextlib.nullcontext()
    import cupyx

    return cupyx.errstate(linalg="raise")


def is_symmetric_on(xp: Any, A: Any) -> bool:
    """:func:`~polydg.solve.system.is_symmetric` of a CSR matrix in the array namespace ``xp``."""
    norm = float(xp.sqrt(xp.sum(xp.abs(A.data) ** 2)))
    diff = (A - A.T.tocsr()).tocsr()
    return float(xp.sqrt(xp.sum(xp.abs(diff.data) ** 2))) <= 1e-12 * norm


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
    check_system(A, b, xp)
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
            raise SolverError("direct solve produced non-finite values", advice="is the matrix singular?")
    else:
        if symmetric is None:
            symmetric = is_symmetric_on(xp, A)
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
            # SciPy's maxiter counts restart cycles and its "pr_norm" callback comes every inner iteration;
            # CuPy's maxiter counts inner iterations, whole cycles of ``restart``, and its callback once a cycle
            cycles = _counts_cycles(sparse_linalg)
            x, status = sparse_linalg.gmres(A, b, restart=restart,
                                            maxiter=maxiter if cycles else max(1, math.ceil(maxiter / restart)), M=M,
                                            callback=callback, callback_type="pr_norm", atol=0.0,
                                            **{_tolerance_keyword(sparse_linalg.gmres): tol})
            info["solver"] = f"gmres({restart})+{name}"
            info["iterations"] += count[0] * (min(restart, n) if cycles else 1)
        if status != 0 or not bool(xp.isfinite(x).all()):
            raise SolverError(f"iterative solve on the device ({info['solver']}) did not converge in "
                              f"{info['iterations']} iterations: relative residual "
                              f"{residual(xp.nan_to_num(x)):.3e} > tol {tol:g}",
                              advice="try the direct solve (--solve direct; method='direct') or the host's AMG "
                                     "(--to-host; to_host=True)")
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
    from ..assembly.device_pattern import segment_owner
    from ..backend import to_host

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
            with _singular_blocks_raise(xp):
                inverse = xp.linalg.inv(D)
        except Exception:  # a singular block
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


__all__ = ["solve_on_device", "block_jacobi_on", "is_symmetric_on"]
