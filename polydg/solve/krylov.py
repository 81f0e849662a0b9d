"""The iterative solve: CG for a symmetric matrix, GMRES(restart) otherwise or when CG fails, with a
preconditioner from :mod:`~polydg.solve.preconditioners`.

Progress: a ``progress`` callable gets a line with the iteration and the
relative residual at most every :data:`PROGRESS_SECONDS` of iterating, so
that a long solve shows it is moving and a short one says nothing.

GMRES that stalls (its preconditioned residual falls by less than
:data:`STALL_FACTOR` over a window of :data:`STALL_WINDOW` iterations, or
four restart cycles if longer) stops there rather than at ``maxiter``: a
restarted GMRES that has stalled does not recover, and the caller (the
automatic choice) can still take the direct solve.
"""

from __future__ import annotations

import math
import time
from typing import Any, Callable

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from . import preconditioners
from .preconditioners import ilu_or_block_jacobi, make_preconditioner
from .system import SolverError, is_symmetric, relative_residual

#: seconds of iterating between two progress lines
PROGRESS_SECONDS = 2.0

#: GMRES stops as stalled when its residual falls by less than this factor over a window of iterations
STALL_FACTOR = 0.5
#: the shortest window of iterations over which GMRES must make :data:`STALL_FACTOR`
STALL_WINDOW = 200


class _Stalled(Exception):
    """Raised from GMRES's callback to stop a stalled iteration."""


class _Monitor:
    """Counts the Krylov iterations and sends a progress line now and then."""

    def __init__(self, label: str, A: sp.csr_matrix, b: np.ndarray, progress: Callable[[str], None] | None,
                 stall_window: int | None = None):
        self.label, self.A, self.b, self.progress = label, A, b, progress
        self.count = 0
        self.last = time.perf_counter()
        self.stall_window = stall_window
        self.checkpoint = math.inf  # the residual at the start of the current window
        self.residual = math.nan  # the last preconditioned residual heard (GMRES)

    def __call__(self, value: Any) -> None:
        """CG passes the iterate, GMRES (``callback_type="pr_norm"``) its relative preconditioned residual."""
        self.count += 1
        if np.ndim(value) == 0:
            self.residual = float(value)
            if self.stall_window and self.count % self.stall_window == 0:
                if not self.residual < STALL_FACTOR * self.checkpoint and math.isfinite(self.checkpoint):
                    raise _Stalled
                self.checkpoint = self.residual
        if self.progress is None or time.perf_counter() - self.last < PROGRESS_SECONDS:
            return
        if np.ndim(value) == 0:
            residual = f"preconditioned relative residual {float(value):.2e}"
        else:
            residual = f"relative residual {relative_residual(self.A, np.asarray(value), self.b):.2e}"
        self.progress(f"{self.label}: iteration {self.count}, {residual}")
        self.last = time.perf_counter()


def krylov(method: str, A: sp.csr_matrix, b: np.ndarray, M: Any, tol: float, maxiter: int, restart: int,
           monitor: _Monitor) -> tuple[np.ndarray, int]:
    """(x, SciPy's status) of CG or GMRES(restart) from a zero guess; ``monitor`` counts the iterations."""
    if method == "cg":
        x, status = spla.cg(A, b, rtol=tol, atol=0.0, maxiter=maxiter, M=M, callback=monitor)
    else:
        restart = max(1, min(restart, maxiter))
        cycles = max(1, math.ceil(maxiter / restart))
        monitor.stall_window = max(STALL_WINDOW, 4 * restart)
        try:
            x, status = spla.gmres(A, b, rtol=tol, atol=0.0, restart=restart, maxiter=cycles, M=M,
                                   callback=monitor, callback_type="pr_norm")
        except _Stalled:
            return None, -1
    return x, int(status)


def _stopped(method: str, x: np.ndarray, count: int, limit: int | None = None, *, cycles: int = 0,
             restart: int = 0) -> str:
    """How ``method`` (CG, with its ``limit`` of iterations, or GMRES, with its ``cycles`` of up to
    ``restart`` iterations) stopped without converging after ``count`` iterations."""
    if not np.isfinite(x).all():
        return f"{method} gave a non-finite iterate after {count} iterations"
    if cycles:  # SciPy's GMRES may end a cycle early (a small preconditioned residual, a breakdown)
        return (f"{method} stopped after {count} iterations (its limit: {cycles} restart cycles of up to {restart} "
                "iterations)")
    if count >= limit:
        return f"{method} stopped at its limit of {limit} iterations"
    return f"{method} stopped after {count} iterations (its limit: {limit})"


def iterative_solve(A: sp.csr_matrix, b: np.ndarray, *, symmetric: bool | None, tol: float, maxiter: int | None,
                    restart: int, preconditioner: str, block_sizes: np.ndarray | None, space: Any,
                    progress: Callable[[str], None] | None = None) -> tuple[np.ndarray, dict]:
    """Solve A x = b to the relative residual ``tol``; ``(x, info)`` (see :func:`polydg.solve.solve`).

    A CG that fails goes on with GMRES: with the same AMG or ILU preconditioner, or with ILU after
    block-Jacobi.  Raises :class:`SolverError` (one line, with what to try) when it does not converge.
    """
    n = A.shape[0]
    symmetric = is_symmetric(A) if symmetric is None else bool(symmetric)
    info: dict = {"symmetric": symmetric, "iterations": 0}
    maxiter = int(maxiter) if maxiter is not None else max(1000, n)
    setup = time.perf_counter()
    M, name, extra = make_preconditioner(preconditioner, A, symmetric, block_sizes, space)
    info.update(extra)
    info["setup_seconds"] = time.perf_counter() - setup
    info["preconditioner"] = name
    krylov_start = time.perf_counter()
    x, status = None, 1
    cg_solver, cg_failure = "", ""  # where CG did not converge: its solver and how it stopped
    if symmetric:
        info["solver"] = f"cg+{name}"
        monitor = _Monitor(info["solver"], A, b, progress)
        x, status = krylov("cg", A, b, M, tol, maxiter, restart, monitor)
        info["iterations"] = monitor.count
        if status != 0 or not np.isfinite(x).all():
            cg_solver, cg_failure = f"{info['solver']}, then ", f"{_stopped('CG', x, monitor.count, maxiter)}; "
            info["fallback"] = f"CG stopped after {monitor.count} iterations (residual " \
                               f"{relative_residual(A, np.nan_to_num(x), b):.3e}); tried GMRES"
            if name not in ("amg", "ilu"):  # block-Jacobi gives way to ILU
                setup = time.perf_counter()
                M, name = ilu_or_block_jacobi(A, block_sizes)
                setup = time.perf_counter() - setup
                info["setup_seconds"] += setup
                krylov_start += setup
                info["preconditioner"] = name
    if status != 0 or x is None or not np.isfinite(x).all():
        info["solver"] = f"gmres({restart})+{name}"
        monitor = _Monitor(info["solver"], A, b, progress)
        x, status = krylov("gmres", A, b, M, tol, maxiter, restart, monitor)
        info["iterations"] += monitor.count
    info["krylov_seconds"] = time.perf_counter() - krylov_start
    if status != 0 or x is None or not np.isfinite(x).all():
        gmres = f"GMRES({restart})" + (" then" if cg_failure else "")
        if x is None:
            gmres_failure = (f"{gmres} stalled at preconditioned relative residual {monitor.residual:.3e} (less "
                             f"than {1 / STALL_FACTOR:g}x lower in {monitor.stall_window} iterations) after "
                             f"{monitor.count} iterations")
        else:
            cycles = max(1, math.ceil(maxiter / max(1, min(restart, maxiter))))  # as krylov() runs it
            gmres_failure = (f"{_stopped(gmres, x, monitor.count, cycles=cycles, restart=restart)}: relative "
                             f"residual {relative_residual(A, np.nan_to_num(x), b):.3e} > tol {tol:g}")
            if math.isfinite(monitor.residual):  # what GMRES itself saw, with the preconditioner
                gmres_failure += f" (preconditioned {monitor.residual:.3e})"
        hints = ["the direct solve (--solve direct; method='direct')"]
        if name != "amg" and preconditioners.pyamg_module() is None:
            hints.append("installing pyamg for the amg preconditioner")
        elif name != "amg":
            hints.append("preconditioner='amg'")
        if monitor.count >= maxiter:
            hints.append(f"more than maxiter={maxiter} iterations (in Python)")
        raise SolverError(f"iterative solve ({cg_solver}{info['solver']}) did not converge: {cg_failure}"
                          f"{gmres_failure}", advice=f"try {' or '.join(hints)}")
    info["residual"] = relative_residual(A, x, b)
    return x, info


__all__ = ["PROGRESS_SECONDS", "STALL_FACTOR", "STALL_WINDOW", "iterative_solve", "krylov"]
