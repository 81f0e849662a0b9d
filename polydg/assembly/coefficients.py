"""The problem's coefficients at a batch of quadrature points, as arrays the kernels read.

:class:`Coefficients` evaluates them on the host (NumPy, threads);
:class:`DeviceCoefficients` where the points are (CuPy arrays on a GPU).

Missing coefficients are a single zero row and constant ones a single row
(never expanded to every point); the others are evaluated by the problem's
vectorised callables, in pieces, on the kernels' threads.
"""

from __future__ import annotations

import warnings
from typing import Callable

import numpy as np

from ..backend import contiguous
from ..errors import PolyDGWarning
from ..threads import run_tasks
from .arguments import BoundaryCoefficients, InteriorCoefficients, VolumeCoefficients
from .workspace import Workspace

#: points per piece of a coefficient evaluation (see :class:`Coefficients`)
COEFFICIENT_PIECE = 131_072


class Coefficients:
    """The problem's coefficients at a batch of points, as kernel-ready arrays.

    Missing coefficients are a single zero row; constant ones a single row.
    A large batch is evaluated in pieces of :data:`COEFFICIENT_PIECE` points,
    every coefficient of a piece before the next piece, so that the piece's
    points are read from memory once and stay in the core's cache for the
    others.  Each value is written into the kernel's array (a ``workspace``
    buffer named after the coefficient, when given) by several threads
    (NumPy's ufuncs release the GIL), straight into place rather than
    copied there afterwards; the piece size was chosen by measurement
    (docs/performance.md).  Coefficient callables must therefore be pure
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

    def volume(self, x: np.ndarray, want_load: bool, want_block: bool = True) -> VolumeCoefficients:
        """A, b, c and f at the volume points; without ``want_block`` (the load alone) A, b, c are zero rows."""
        p, d = self.problem, self.d
        methods = self._A_B() if want_block else {}
        if want_block and p.reaction is not None:
            methods["reaction"] = p.reaction_at
        if want_load and p.source is not None:
            methods["source"] = p.source_at
        v = self._eval(methods, x)
        return VolumeCoefficients(v.get("diffusion", self._zero(d, d)), v.get("advection", self._zero(d)),
                                  v.get("reaction", self._zero()), v.get("source", self._zero()))

    def interior(self, x: np.ndarray) -> InteriorCoefficients:
        d = self.d
        v = self._eval(self._A_B(), x)
        return InteriorCoefficients(v.get("diffusion", self._zero(d, d)), v.get("advection", self._zero(d)))

    def boundary(self, x: np.ndarray, normals: np.ndarray) -> BoundaryCoefficients:
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
        return BoundaryCoefficients(v.get("diffusion", self._zero(d, d)), v.get("advection", self._zero(d)),
                                    v.get("dirichlet", self._zero()), GN, NEU)


# ---------------------------------------------------------------------------
# on the device: the callables receive the backend's arrays (issue #21, item 2)


class HostCoefficientWarning(PolyDGWarning):
    """A coefficient callable works on NumPy arrays only: it is evaluated on the host (said once per callable)."""


#: (problem name, coefficient) pairs already said to run on the host
_NOTICED: set[tuple[str, str]] = set()

#: points of the probe that decides whether a callable runs on the device's arrays
PROBE_POINTS = 4


class DeviceCoefficients:
    """The problem's coefficients at points that live in the array namespace ``xp`` (CuPy on a GPU).

    The same values as :class:`Coefficients`, written once against ``xp``:
    each callable receives ``xp`` arrays (``problem.*_at(x, xp=xp)``), so the
    built-in problems (written with :func:`polydg.backend.array_namespace`)
    are evaluated where the points are.  A user's NumPy-only callable is
    detected on its first use, on the first :data:`PROBE_POINTS` points: if it
    raises on ``xp`` arrays, or returns an array of another namespace (a NumPy
    array), it is evaluated on the host, on a host copy of the points, and its
    values are copied to the device; a :class:`HostCoefficientWarning` says so
    once per process and callable.  With ``xp`` NumPy (the simulator's
    stand-in backend) there is nothing to detect and this is the host's
    evaluation in one piece.  Every result is a contiguous ``xp`` array in
    the working precision; missing coefficients are a single zero row,
    constant ones a single row, as on the host.
    """

    def __init__(self, problem, d: int, dtype, xp):
        self.problem, self.d, self.dtype, self.xp = problem, d, dtype, xp
        self.on_host: dict[str, bool] = {}  # coefficient -> evaluated on the host (decided at its first use)

    # -- where a callable runs

    def _runs_on_host(self, name: str, x, *extra) -> bool:
        if name in self.on_host:
            return self.on_host[name]
        host, xp = False, self.xp
        if xp is not np:
            from ..backend import array_namespace

            k = min(int(x.shape[0]), PROBE_POINTS)
            try:
                value = getattr(self.problem, name)(x[:k], *(e[:k] for e in extra))
            except Exception as exc:  # NumPy-only code meeting a device array: CuPy raises TypeError
                host, why = True, f"raised {type(exc).__name__} on {getattr(xp, '__name__', 'device')} arrays"
            else:
                if array_namespace(value) is not xp:
                    host, why = True, f"returned a {type(value).__module__}.{type(value).__name__}"
            if host and (self.problem.name, name) not in _NOTICED:
                _NOTICED.add((self.problem.name, name))
                warnings.warn(HostCoefficientWarning(
                    f"problem {self.problem.name!r}: {name} {why}; it is evaluated on the host and its values "
                    f"copied to the device (write it with xp = polydg.backend.array_namespace(x) to keep it on "
                    f"the GPU)"), stacklevel=2)
        self.on_host[name] = host
        return host

    def _at(self, name: str, method: str, x, *extra):
        """``problem.<method>(x, *extra, xp)`` in the working precision, on the device or via the host."""
        p, xp = self.problem, self.xp
        evaluate = getattr(p, method)
        if not p.is_constant(name) and self._runs_on_host(name, x, *extra):
            from ..backend import to_host

            value = evaluate(to_host(x), *(to_host(e) for e in extra), xp=np)
            return contiguous(xp, np.asarray(value), self.dtype if value.dtype != bool else np.int8)
        value = evaluate(x, *extra, xp=xp)
        return contiguous(xp, value, dtype=self.dtype if value.dtype != bool else np.int8)

    def values_of(self, name: str, x):
        """``problem.<name>(x)`` for a callable the kernels do not take (``exact``, ``initial``) as a float64
        ``xp`` array: on the device, or on the host for a NumPy-only callable (detected and said as above)."""
        f = getattr(self.problem, name)
        if self._runs_on_host(name, x):
            from ..backend import to_host

            return contiguous(self.xp, np.asarray(f(to_host(x))), np.float64)
        return contiguous(self.xp, f(x), np.float64)

    def _zero(self, *shape):
        return self.xp.zeros((1,) + shape, dtype=self.dtype)

    def _A_B(self, x) -> dict:
        p, v = self.problem, {}
        if p.has_diffusion:
            v["diffusion"] = self._at("diffusion", "diffusion_at", x)
        if p.has_advection:
            v["advection"] = self._at("advection", "advection_at", x)
        return v

    # -- the kernels' arrays, as Coefficients gives them

    def volume(self, x, want_load: bool, want_block: bool = True):
        p, d = self.problem, self.d
        v = self._A_B(x) if want_block else {}  # the load alone: A, b, c are zero rows
        if want_block and p.reaction is not None:
            v["reaction"] = self._at("reaction", "reaction_at", x)
        if want_load and p.source is not None:
            v["source"] = self._at("source", "source_at", x)
        return VolumeCoefficients(v.get("diffusion", self._zero(d, d)), v.get("advection", self._zero(d)),
                                  v.get("reaction", self._zero()), v.get("source", self._zero()))

    def interior(self, x):
        d = self.d
        v = self._A_B(x)
        return InteriorCoefficients(v.get("diffusion", self._zero(d, d)), v.get("advection", self._zero(d)))

    def boundary(self, x, normals):
        p, d, xp = self.problem, self.d, self.xp
        v = self._A_B(x)
        if p.dirichlet is not None:
            v["dirichlet"] = self._at("dirichlet", "dirichlet_at", x)
        if p.is_neumann is not None and p.has_diffusion:
            NEU = self._at("is_neumann", "neumann_mask", x, normals).astype(np.int8)
            GN = (self._at("neumann", "neumann_at", x, normals)
                  if (p.neumann is not None and bool(NEU.any())) else self._zero())
        else:
            NEU, GN = xp.zeros(1, dtype=np.int8), self._zero()
        return BoundaryCoefficients(v.get("diffusion", self._zero(d, d)), v.get("advection", self._zero(d)),
                                    v.get("dirichlet", self._zero()), GN, NEU)
