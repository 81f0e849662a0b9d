"""The problem's coefficients at a batch of quadrature points, as arrays the kernels read.

Missing coefficients are a single zero row and constant ones a single row
(never expanded to every point); the others are evaluated by the problem's
vectorised callables, in pieces, on the kernels' threads.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from ..threads import run_tasks
from .workspace import Workspace

#: points per piece of a coefficient evaluation (see :class:`Coefficients`)
COEFFICIENT_PIECE = 131_072


class Coefficients:
    """The problem's coefficients at a batch of points, as kernel-ready arrays.

    Missing coefficients are a single zero row; constant ones a single row.
    A large batch is evaluated in pieces of :data:`COEFFICIENT_PIECE` points,
    every coefficient of a piece before the next piece, so that the piece's
    points are read from memory once and stay in the core's cache for the
    others (b, c and f of 2M points at 2D p = 1, 2 threads: 14.5 -> 12.2 ms).  Each
    value is written into the kernel's array (a ``workspace`` buffer named
    after the coefficient, when given) by several threads (NumPy's ufuncs
    release the GIL).  Measured on paper-3d, 2 threads, against two whole
    halves copied afterwards: 6M volume points 0.15 -> 0.11 s, 5M face
    points 0.048 -> 0.024 s (pieces of 16k points: 0.155 / 0.040 s; 128k
    best; 256k no better).  Coefficient callables must therefore be pure
    functions of their arguments, as the Problem contract asks; ``threads=1``
    evaluates the pieces in order on the calling thread.
    """

    def __init__(self, problem, d: int, dtype, threads: int, workspace: Workspace | None = None):
        self.problem, self.d, self.dtype, self.threads = problem, d, dtype, threads
        self.workspace = workspace

    def _eval(self, methods: dict[str, Callable], x: np.ndarray) -> dict[str, np.ndarray]:
        """``{name: method(x)}`` cast to the working precision, piece by piece for large batches.

        The pieces are tasks of :func:`~polydg.threads.run_tasks` on
        ``threads`` threads; a piece's ProblemError is re-raised after all
        threads have stopped.
        """
        n = len(x)
        out = {name: np.ascontiguousarray(method(x), dtype=self.dtype)
               for name, method in methods.items() if self.problem.is_constant(name) or n <= COEFFICIENT_PIECE}
        pieces = {name: method for name, method in methods.items() if name not in out}
        if not pieces:
            return out
        for name, method in pieces.items():
            shape = (n,) + method(x[:1]).shape[1:]  # the value shape per point, from one point
            out[name] = np.empty(shape, self.dtype) if self.workspace is None else self.workspace.take(
                name, shape, self.dtype)
        cuts = list(range(0, n, COEFFICIENT_PIECE)) + [n]

        def piece(k: int) -> None:
            lo, hi = cuts[k], cuts[k + 1]
            for name, method in pieces.items():
                out[name][lo:hi] = method(x[lo:hi])

        run_tasks(piece, len(cuts) - 1, self.threads)
        return out

    def _A_B(self) -> dict[str, Callable]:
        """The callables of A and b, for the coefficients the problem has."""
        p = self.problem
        methods = {}
        if p.has_diffusion:
            methods["diffusion"] = p.diffusion_at
        if p.has_advection:
            methods["advection"] = p.advection_at
        return methods

    def _zero(self, *shape) -> np.ndarray:
        return np.zeros((1,) + shape, self.dtype)

    def volume(self, x: np.ndarray, want_load: bool):
        p, d = self.problem, self.d
        methods = self._A_B()
        if p.reaction is not None:
            methods["reaction"] = p.reaction_at
        if want_load and p.source is not None:
            methods["source"] = p.source_at
        v = self._eval(methods, x)
        return (v.get("diffusion", self._zero(d, d)), v.get("advection", self._zero(d)),
                v.get("reaction", self._zero()), v.get("source", self._zero()))

    def interior(self, x: np.ndarray):
        d = self.d
        v = self._eval(self._A_B(), x)
        return v.get("diffusion", self._zero(d, d)), v.get("advection", self._zero(d))

    def boundary(self, x: np.ndarray, normals: np.ndarray):
        p, d = self.problem, self.d
        methods = self._A_B()
        if p.dirichlet is not None:
            methods["dirichlet"] = p.dirichlet_at
        v = self._eval(methods, x)
        if p.is_neumann is not None and p.has_diffusion:
            NEU = np.ascontiguousarray(p.neumann_mask(x, normals), dtype=np.int8)
            GN = (np.ascontiguousarray(p.neumann_at(x, normals), dtype=self.dtype)
                  if (p.neumann is not None and NEU.any()) else self._zero())
        else:
            NEU, GN = np.zeros(1, dtype=np.int8), self._zero()
        return (v.get("diffusion", self._zero(d, d)), v.get("advection", self._zero(d)),
                v.get("dirichlet", self._zero()), GN, NEU)
