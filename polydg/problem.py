"""The Problem contract (DESIGN.md sections 1 and 9) and the built-in problems.

A :class:`Problem` describes

    -div(A grad u) + b . grad u + c u = f   in Omega,

with u = g_D on the Dirichlet / inflow boundary and (A grad u) . n = g_N on
the Neumann boundary.  Each coefficient is one of

* ``None``: zero (for ``is_neumann``: no Neumann boundary at all);
* a constant: a scalar for reaction / source / dirichlet / neumann, a
  ``(d, d)`` matrix or a scalar ``a`` (meaning ``a I``) for diffusion, a
  ``(d,)`` vector for advection, a bool for ``is_neumann``;
* a vectorised callable of the points ``x`` of shape ``(n, d)`` returning
  diffusion ``(n, d, d)`` (or ``(n,)``, meaning ``a(x) I``), advection
  ``(n, d)``, reaction / source / dirichlet ``(n,)``; ``neumann(x, normal)``
  ``(n,)`` and ``is_neumann(x, normal)`` a bool ``(n,)`` mask, ``normal``
  being the unit outward normal ``(n, d)``.

The assembler asks for coefficient values through the ``*_at`` methods, which
check shape and finiteness and raise :class:`~polydg.errors.ProblemError` with
a one-line message naming the problem, the coefficient and what is wrong.
Constants come back as arrays with a leading axis of length 1 and are never
expanded to n points: the kernels broadcast them.

Problems are found by :func:`load_problem`: a built-in name (see
:data:`BUILTIN_PROBLEMS`, :func:`builtin_problem`), ``polynomial:P[:KIND[:SEED]]``
(:func:`polynomial_problem`), ``path/to/file.py:NAME`` or
``package.module:NAME``.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import itertools
import os
import sys
from dataclasses import dataclass
from typing import Any, Callable, Union

import math

import numpy as np
from numba import njit

from .errors import ProblemError, capture_output

Coefficient = Union[None, float, np.ndarray, Callable[..., Any]]

#: the coefficient fields of a Problem, in the order of the PDE
COEFFICIENTS = (
    "diffusion", "advection", "reaction", "source", "dirichlet", "neumann", "is_neumann",
    "exact", "exact_gradient",
)

#: relative tolerance of the symmetry / semi-definiteness checks on A
_SYMMETRY_TOL = 1e-10


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


def _format_point(x: np.ndarray) -> str:
    return "[" + ", ".join(f"{float(v):.6g}" for v in x) + "]"


def _to_numpy(a: Any) -> np.ndarray:
    """A host copy of a NumPy or CuPy array (for error messages only)."""
    return np.asarray(a.get() if hasattr(a, "get") else a)


# ---------------------------------------------------------------------------
# the contract


@dataclass
class Problem:
    """An advection-diffusion-reaction problem with its boundary data.

    Attributes
    ----------
    name : str
        Used in every error message.
    diffusion, advection, reaction, source, dirichlet : Coefficient
        A(x), b(x), c(x), f(x), g_D(x); see the module docstring for the
        accepted forms.  ``None`` means zero.
    neumann : callable ``(x, normal) -> (n,)``, scalar or None
        g_N on the Neumann part of the diffusive boundary.
    is_neumann : callable ``(x, normal) -> bool (n,)``, bool or None
        Where the diffusive boundary is Neumann (None: nowhere).
    exact, exact_gradient : callable or None
        The exact solution ``(n,)`` and its gradient ``(n, d)``, for errors.
    description : str
        One line for ``--help`` and reports.
    default_mesh : str
        A suggested mesh spec, e.g. ``"square:32"``.
    dim : 2, 3 or None
        The space dimension the problem is written for (None: any).
    """

    name: str
    diffusion: Coefficient = None
    advection: Coefficient = None
    reaction: Coefficient = None
    source: Coefficient = None
    dirichlet: Coefficient = None
    neumann: Coefficient = None
    is_neumann: Coefficient = None
    exact: Callable[..., Any] | None = None
    exact_gradient: Callable[..., Any] | None = None
    description: str = ""
    default_mesh: str = "square:32"
    dim: int | None = None

    def __post_init__(self) -> None:
        self.name = str(self.name)
        if self.dim is not None and self.dim not in (2, 3, 4):
            raise ProblemError(f"problem {self.name!r}: dim must be 2, 3, 4 or None, got {self.dim!r}")
        for name in COEFFICIENTS:
            value = getattr(self, name)
            if value is None or callable(value):
                continue
            if name in ("exact", "exact_gradient"):
                self._fail(name, f"must be a callable of x or None, got {type(value).__name__}")
            if name == "is_neumann":
                if not isinstance(value, (bool, np.bool_)):
                    self._fail(name, f"must be a callable, a bool or None, got {type(value).__name__}")
                continue
            try:
                array = np.asarray(value, dtype=np.float64)
            except (TypeError, ValueError):
                self._fail(name, f"must be a callable, a number or an array, got {type(value).__name__}")
            if not np.isfinite(array).all():
                self._fail(name, f"constant {array.tolist()} is not finite")

    # ------------------------------------------------------------ reporting
    def _fail(self, coefficient: str, what: str) -> None:
        raise ProblemError(f"problem {self.name!r}: {coefficient} {what}")

    # ------------------------------------------------------------ properties
    def is_constant(self, name: str) -> bool:
        """True when coefficient ``name`` is a constant or None (never a callable)."""
        if name not in COEFFICIENTS:
            raise ProblemError(f"problem {self.name!r}: no coefficient called {name!r}")
        return not callable(getattr(self, name))

    def _nonzero(self, name: str) -> bool:
        value = getattr(self, name)
        if value is None:
            return False
        if callable(value):
            return True
        return bool(np.any(np.asarray(value) != 0))

    @property
    def has_diffusion(self) -> bool:
        """False when A is None or a zero constant (a purely hyperbolic problem)."""
        return self._nonzero("diffusion")

    @property
    def has_advection(self) -> bool:
        """False when b is None or a zero constant."""
        return self._nonzero("advection")

    @property
    def has_reaction(self) -> bool:
        return self._nonzero("reaction")

    @property
    def has_neumann(self) -> bool:
        """True when some boundary points may be Neumann."""
        return self._nonzero("is_neumann")

    @property
    def has_exact(self) -> bool:
        return self.exact is not None

    def check_dimension(self, d: int) -> None:
        """Raise when the problem cannot be posed in ``d`` dimensions."""
        if self.dim is not None and self.dim != d:
            raise ProblemError(f"problem {self.name!r} is {self.dim}D, the mesh is {d}D")
        if d not in (2, 3, 4):
            raise ProblemError(f"problem {self.name!r}: dimension {d} is not supported (2, 3 or 4)")
        x = np.zeros((0, d))
        for name in ("diffusion", "advection", "reaction", "source", "dirichlet"):
            if self.is_constant(name):
                getattr(self, f"{name}_at")(x)

    # ------------------------------------------------------------ evaluation
    def _points(self, x: Any, xp: Any) -> tuple[Any, int, int]:
        x = xp.asarray(x)
        if x.ndim != 2:
            raise ProblemError(f"problem {self.name!r}: points must have shape (n, d), got {tuple(x.shape)}")
        n, d = int(x.shape[0]), int(x.shape[1])
        if self.dim is not None and d != self.dim:
            raise ProblemError(f"problem {self.name!r} is {self.dim}D, the mesh is {d}D")
        return x, n, d

    @staticmethod
    def _dtype(x: Any, xp: Any) -> Any:
        return x.dtype if x.dtype.kind == "f" else xp.float64

    def _call(self, name: str, *args: Any) -> Any:
        function = getattr(self, name)
        try:
            return function(*args)
        except ProblemError:
            raise
        except Exception as exc:  # user code: report it as the problem's fault
            n = args[0].shape[0] if hasattr(args[0], "shape") else "?"
            raise ProblemError(
                f"problem {self.name!r}: {name} raised {type(exc).__name__} at {n} points: {_one_line(exc)}"
            ) from exc

    def _checked(self, name: str, value: Any, x: Any, expected: tuple, xp: Any, dtype: Any) -> Any:
        """``value`` as a floating array of shape ``expected``, all finite."""
        n, d = int(x.shape[0]), int(x.shape[1])
        try:
            value = xp.asarray(value)
        except Exception:
            self._fail(name, f"returned {type(value).__name__}, expected an array of shape {expected}")
        if value.dtype.kind not in "biuf":
            self._fail(name, f"returned values of dtype {value.dtype}, expected real numbers")
        if tuple(value.shape) != expected:
            self._fail(name, f"returned shape {tuple(value.shape)} for {n} points in {d}D, expected {expected}")
        value = value.astype(dtype, copy=False)
        # the sum is one pass with no temporary; only a non-finite sum (a NaN or
        # inf, or finite values overflowing) needs the point-by-point scan
        if n and not bool(xp.isfinite(value.sum())) and bool((bad := ~xp.isfinite(value)).any()):
            per_point = bad.reshape(n, -1).any(axis=1)
            i = int(xp.flatnonzero(per_point)[0])
            kind = "NaN" if bool(xp.isnan(value[i]).any()) else "inf"
            self._fail(name, f"returned {kind} at x = {_format_point(_to_numpy(x[i]))} "
                             f"({int(per_point.sum())} of {n} points)")
        return value

    def _constant(self, name: str, d: int, shape: tuple, xp: Any, dtype: Any) -> Any:
        """The constant coefficient ``name`` as an array of shape ``(1,) + shape``."""
        value = getattr(self, name)
        if value is None:
            return xp.zeros((1,) + shape, dtype=dtype)
        array = np.asarray(value, dtype=np.float64)
        if name == "diffusion" and array.ndim == 0:
            array = array * np.eye(d)
        if array.shape == (1,) + shape:
            array = array[0]
        if array.shape != shape:
            allowed = "a scalar or " if name == "diffusion" else ""
            self._fail(name, f"constant has shape {array.shape}, expected {allowed}{shape} in {d}D")
        if name == "diffusion":
            scale = float(np.abs(array).max()) if array.size else 0.0
            if np.abs(array - array.T).max(initial=0.0) > _SYMMETRY_TOL * scale:
                self._fail(name, f"constant {array.tolist()} is not symmetric")
            if np.linalg.eigvalsh(array).min() < -_SYMMETRY_TOL * scale:
                self._fail(name, f"constant {array.tolist()} is not positive semi-definite")
        return xp.asarray(array[None], dtype=dtype)

    def diffusion_at(self, x: Any, xp: Any = np) -> Any:
        """A at the points: ``(n, d, d)``, or ``(1, d, d)`` when constant.

        A callable may also return ``(n,)``, read as ``a(x) I``.  Values are
        checked for finiteness, symmetry and a non-negative diagonal.
        """
        x, n, d = self._points(x, xp)
        dtype = self._dtype(x, xp)
        if self.is_constant("diffusion"):
            return self._constant("diffusion", d, (d, d), xp, dtype)
        value = xp.asarray(self._call("diffusion", x))
        if tuple(value.shape) == (n,):
            value = value[:, None, None] * xp.eye(d, dtype=value.dtype if value.dtype.kind == "f" else dtype)
        A = self._checked("diffusion", value, x, (n, d, d), xp, dtype)
        if n:
            scale = xp.abs(A).reshape(n, -1).max(axis=1)
            asym = xp.abs(A - xp.swapaxes(A, 1, 2)).reshape(n, -1).max(axis=1) > _SYMMETRY_TOL * scale
            negative = (xp.diagonal(A, axis1=1, axis2=2) < -_SYMMETRY_TOL * scale[:, None]).any(axis=1)
            for bad, what in ((asym, "not symmetric"), (negative, "not positive semi-definite (negative diagonal)")):
                if bool(bad.any()):
                    i = int(xp.flatnonzero(bad)[0])
                    self._fail("diffusion", f"is {what} at x = {_format_point(_to_numpy(x[i]))}: "
                                            f"{_to_numpy(A[i]).tolist()}")
        return A

    def advection_at(self, x: Any, xp: Any = np) -> Any:
        """b at the points: ``(n, d)``, or ``(1, d)`` when constant."""
        x, n, d = self._points(x, xp)
        dtype = self._dtype(x, xp)
        if self.is_constant("advection"):
            return self._constant("advection", d, (d,), xp, dtype)
        return self._checked("advection", self._call("advection", x), x, (n, d), xp, dtype)

    def _scalar_at(self, name: str, x: Any, xp: Any, *extra: Any) -> Any:
        x, n, d = self._points(x, xp)
        dtype = self._dtype(x, xp)
        if self.is_constant(name):
            return self._constant(name, d, (), xp, dtype)
        return self._checked(name, self._call(name, x, *extra), x, (n,), xp, dtype)

    def reaction_at(self, x: Any, xp: Any = np) -> Any:
        """c at the points: ``(n,)``, or ``(1,)`` when constant."""
        return self._scalar_at("reaction", x, xp)

    def source_at(self, x: Any, xp: Any = np) -> Any:
        """f at the points: ``(n,)``, or ``(1,)`` when constant."""
        return self._scalar_at("source", x, xp)

    def dirichlet_at(self, x: Any, xp: Any = np) -> Any:
        """g_D at the points: ``(n,)``, or ``(1,)`` when constant."""
        return self._scalar_at("dirichlet", x, xp)

    def _normals(self, x: Any, normal: Any, xp: Any) -> Any:
        normal = xp.asarray(normal)
        if tuple(normal.shape) != tuple(x.shape):
            raise ProblemError(
                f"problem {self.name!r}: normals of shape {tuple(normal.shape)} given for points of shape "
                f"{tuple(x.shape)}"
            )
        return normal

    def neumann_at(self, x: Any, normal: Any, xp: Any = np) -> Any:
        """g_N at boundary points with unit outward normals: ``(n,)`` or ``(1,)``."""
        x, n, d = self._points(x, xp)
        normal = self._normals(x, normal, xp)
        return self._scalar_at("neumann", x, xp, normal)

    def neumann_mask(self, x: Any, normal: Any, xp: Any = np) -> Any:
        """Where the diffusive boundary is Neumann: bool ``(n,)``, or ``(1,)`` when constant."""
        x, n, d = self._points(x, xp)
        normal = self._normals(x, normal, xp)
        rule = self.is_neumann
        if rule is None or not callable(rule):
            return xp.full((1,), bool(rule), dtype=bool)
        value = self._call("is_neumann", x, normal)
        try:
            value = xp.asarray(value)
        except Exception:
            self._fail("is_neumann", f"returned {type(value).__name__}, expected a bool array of shape {(n,)}")
        if tuple(value.shape) != (n,):
            self._fail("is_neumann", f"returned shape {tuple(value.shape)} for {n} points in {d}D, expected {(n,)}")
        if value.dtype != bool:
            if value.dtype.kind not in "iuf" or not bool(((value == 0) | (value == 1)).all()):
                self._fail("is_neumann", f"returned values of dtype {value.dtype} that are not 0/1, "
                                         "expected a bool mask")
            value = value != 0
        return value

    def exact_at(self, x: Any, xp: Any = np) -> Any:
        """The exact solution at the points: ``(n,)``."""
        x, n, d = self._points(x, xp)
        if self.exact is None:
            raise ProblemError(f"problem {self.name!r} has no exact solution")
        return self._checked("exact", self._call("exact", x), x, (n,), xp, self._dtype(x, xp))

    def exact_gradient_at(self, x: Any, xp: Any = np) -> Any:
        """The gradient of the exact solution at the points: ``(n, d)``."""
        x, n, d = self._points(x, xp)
        if self.exact_gradient is None:
            raise ProblemError(f"problem {self.name!r} has no exact_gradient")
        return self._checked("exact_gradient", self._call("exact_gradient", x), x, (n, d), xp,
                             self._dtype(x, xp))

    def validate(self, x: Any, normal: Any | None = None, xp: Any = np) -> None:
        """Evaluate every coefficient at the sample points ``x`` (and the boundary
        data with ``normal`` when given), raising :class:`ProblemError` on the
        first misbehaving one.  A cheap early check before a long assembly."""
        self.check_dimension(int(xp.asarray(x).shape[1]))
        self.diffusion_at(x, xp)
        self.advection_at(x, xp)
        self.reaction_at(x, xp)
        self.source_at(x, xp)
        self.dirichlet_at(x, xp)
        if normal is not None:
            self.neumann_mask(x, normal, xp)
            self.neumann_at(x, normal, xp)
        if self.exact is not None:
            self.exact_at(x, xp)
        if self.exact_gradient is not None:
            self.exact_gradient_at(x, xp)


# ---------------------------------------------------------------------------
# building blocks of the built-in solutions


def _products_without(factors: np.ndarray) -> np.ndarray:
    """``out[:, k] = prod_{j != k} factors[:, j]`` for (n, m) factors (no division).

    Prefix and suffix products: 3 m multiplications per row, no copies of the input.
    """
    n, m = factors.shape
    out = np.empty((n, m))
    out[:, 0] = 1.0
    for k in range(1, m):  # m = d columns, not a loop over points
        np.multiply(out[:, k - 1], factors[:, k - 1], out=out[:, k])
    suffix = np.ones(n)
    for k in range(m - 1, -1, -1):
        out[:, k] *= suffix
        suffix *= factors[:, k]
    return out


def _pair_products_without(factors: np.ndarray) -> np.ndarray:
    """``out[:, k, l] = prod_{j not in {k, l}} factors[:, j]`` for k != l (diagonal: 0)."""
    n, m = factors.shape
    out = np.zeros((n, m, m))
    for k, l in itertools.combinations(range(m), 2):
        out[:, k, l] = out[:, l, k] = np.prod(np.delete(factors, [k, l], axis=1), axis=1)
    return out


def _default_mesh(d: int) -> str:
    return "square:32" if d == 2 else "cube:8"


# --- paper ------------------------------------------------------------------


#: Taylor coefficients of sin(pi r) and cos(pi r) in powers of r^2: on |r| <= 1/4
#: the first omitted terms are below 1e-19, so only rounding remains
_SINPI = tuple((-1) ** j * math.pi ** (2 * j + 1) / math.factorial(2 * j + 1) for j in range(9))
_COSPI = tuple((-1) ** j * math.pi ** (2 * j) / math.factorial(2 * j) for j in range(10))


@njit(cache=True, inline="always")
def _sincospi(x):  # pragma: no cover - compiled
    """(sin(pi x), cos(pi x)) by range reduction to |r| <= 1/4 and two polynomials.

    x = k/2 + r with k the integer nearest 2x (x - k/2 is exact), then the
    quarter turn k mod 4 swaps and signs the pair.  No library call: 3-4x
    faster than math.sin and math.cos, and within 4e-16 of the true values
    (tested against long double), closer than NumPy's sin(pi * x), since
    pi x is never rounded.
    """
    k = math.floor(2.0 * x + 0.5)
    r = x - 0.5 * k
    z = r * r
    s0, s1, s2, s3, s4, s5, s6, s7, s8 = _SINPI
    c0, c1, c2, c3, c4, c5, c6, c7, c8, c9 = _COSPI
    s = r * (s0 + z * (s1 + z * (s2 + z * (s3 + z * (s4 + z * (s5 + z * (s6 + z * (s7 + z * s8))))))))
    c = c0 + z * (c1 + z * (c2 + z * (c3 + z * (c4 + z * (c5 + z * (c6 + z * (c7 + z * (c8 + z * c9))))))))
    q = int(k) & 3
    sin_x = c if q & 1 else s
    cos_x = s if q & 1 else c
    return (-sin_x if q & 2 else sin_x), (-cos_x if (q + 1) & 2 else cos_x)


@njit("float64[::1](float64[:, ::1], float64)", cache=True, nogil=True, fastmath={"contract"})
def _paper_source(x, eps):  # pragma: no cover - compiled
    """f of :func:`paper_problem` at the points x (n, d):

    f = (eps d pi^2 + 3 + prod_k x_k) u + pi sum_k (1 + x_k) cos(pi x_k) prod_{j != k} sin(pi x_j),
    u = prod_k sin(pi x_k).

    Two passes: the sines and cosines of all coordinates (one vectorised
    loop, see :func:`_sincospi`), then the products per point.  As a NumPy
    expression this made a dozen (n, d) temporaries, and with the library's
    sin and cos it was still the most expensive step of assembling
    paper-3d.  ``nogil`` lets the assembler split large batches over
    threads; compiled (or loaded from the cache) at import, so that no JIT
    time lands inside an assembly.  Fused multiply-adds (``contract``) in
    the polynomials, and the product pass written out for d = 2 and 3 (a
    loop over k kept it from vectorising): 9.6 -> 6.0 ns per point in 2D,
    13.9 -> 8.9 in 3D, one core, with the same error bound.
    """
    n, d = x.shape
    if d != 2 and d != 3:  # paper_problem exists in 2D and 3D only
        raise ValueError("the paper source is written out for d = 2 and 3")
    flat = x.ravel()
    out = np.empty(n)
    block = 512  # points per pass: the sines and cosines stay in L1, and no (n, d) temporaries
    S = np.empty(block * d)
    C = np.empty(block * d)
    k0 = eps * d * math.pi**2 + 3.0
    for start in range(0, n, block):
        m = min(block, n - start)
        base = start * d
        for i in range(m * d):
            S[i], C[i] = _sincospi(flat[base + i])
        X = flat[base:base + m * d]
        o = out[start:start + m]
        # the product rule, one factor at a time: after factor k, u is the
        # product of the first k sines and g the sum of the (1 + x_j) d_j u / pi
        # terms of that product (no division, no branches)
        if d == 2:
            for i in range(m):
                x0, x1, s0, s1 = X[2 * i], X[2 * i + 1], S[2 * i], S[2 * i + 1]
                g = (1.0 + x0) * C[2 * i] * s1 + (1.0 + x1) * C[2 * i + 1] * s0
                o[i] = (k0 + x0 * x1) * (s0 * s1) + math.pi * g
        else:
            for i in range(m):
                x0, x1, x2 = X[3 * i], X[3 * i + 1], X[3 * i + 2]
                s0, s1, s2 = S[3 * i], S[3 * i + 1], S[3 * i + 2]
                u = s0 * s1
                g = (1.0 + x0) * C[3 * i] * s1 + (1.0 + x1) * C[3 * i + 1] * s0
                g = g * s2 + (1.0 + x2) * C[3 * i + 2] * u
                o[i] = (k0 + x0 * x1 * x2) * (u * s2) + math.pi * g
    return out


def _column_product(x: np.ndarray) -> np.ndarray:
    """prod_k x[:, k] by d - 1 column multiplications (np.prod along a short axis is several times slower)."""
    out = x[:, 0].copy()
    for k in range(1, x.shape[1]):  # d columns, not a loop over points
        out *= x[:, k]
    return out


def paper_problem(d: int) -> Problem:
    """The paper's section 4.2 problem in ``d`` = 2 or 3 dimensions.

    On (0, 1)^d: A = eps I with eps = 0.01, b = 1 + x (b_k = 1 + x_k),
    c = 3 + prod_k x_k, and the exact solution

        u = prod_k sin(pi x_k),   d_k u = pi cos(pi x_k) prod_{j != k} sin(pi x_j).

    Derivation of f.  A is constant, so -div(A grad u) = -eps Laplace(u), and
    each factor gives d_kk u = -pi^2 u, so -eps Laplace(u) = eps d pi^2 u:

        f = eps d pi^2 u + sum_k (1 + x_k) d_k u + (3 + prod_k x_k) u.

    u = 0 on the boundary (g_D = 0), and since A > 0 the whole boundary is
    diffusive Dirichlet.
    """
    if d not in (2, 3):
        raise ProblemError(f"problem 'paper-{d}d' exists in 2D and 3D only, not {d}D")
    eps = 0.01

    def exact(x):
        return np.prod(np.sin(np.pi * x), axis=1)

    def exact_gradient(x):
        return np.pi * np.cos(np.pi * x) * _products_without(np.sin(np.pi * x))

    def advection(x):
        return 1.0 + x

    def reaction(x):
        out = _column_product(x)
        out += 3.0
        return out

    def source(x):
        # this runs at every quadrature point of the mesh: compiled (see _paper_source)
        return _paper_source(np.ascontiguousarray(x, dtype=np.float64), eps)

    b_text = ", ".join(f"1+{v}" for v in "xyz"[:d])
    c_text = "3+" + "".join("xyz"[:d])
    u_text = " ".join(f"sin(pi {v})" for v in "xyz"[:d])
    return Problem(
        name=f"paper-{d}d",
        diffusion=eps,
        advection=advection,
        reaction=reaction,
        source=source,
        dirichlet=exact,
        exact=exact,
        exact_gradient=exact_gradient,
        description=f"paper section 4.2: A = 0.01 I, b = ({b_text}), c = {c_text}, u = {u_text}",
        default_mesh=_default_mesh(d),
        dim=d,
    )


# --- poisson ----------------------------------------------------------------


def poisson_problem(d: int) -> Problem:
    """Poisson's equation with non-trivial Dirichlet data on every side.

    A = I, b = 0, c = 0 on (0, 1)^d, with t_k = pi x_k + pi/4 and

        u = exp(x_0) prod_{k>=1} sin(t_k),
        d_0 u = u,   d_k u = pi exp(x_0) cos(t_k) prod_{j>=1, j != k} sin(t_j)  (k >= 1).

    Derivation of f: d_00 u = u and d_kk u = -pi^2 u for k >= 1, so
    Laplace(u) = (1 - (d-1) pi^2) u and

        f = -Laplace(u) = ((d - 1) pi^2 - 1) u.

    The phase pi/4 keeps g_D = u away from zero on every side of the box
    (sin(pi/4) = -sin(5 pi/4) = 1/sqrt 2).
    """

    def exact(x):
        return np.exp(x[:, 0]) * np.prod(np.sin(np.pi * x[:, 1:] + np.pi / 4), axis=1)

    def exact_gradient(x):
        t = np.pi * x[:, 1:] + np.pi / 4
        rest = np.pi * np.exp(x[:, :1]) * np.cos(t) * _products_without(np.sin(t))
        return np.concatenate([exact(x)[:, None], rest], axis=1)

    def source(x):
        return ((d - 1) * np.pi**2 - 1.0) * exact(x)

    u_text = "exp(x) " + " ".join(f"sin(pi {v} + pi/4)" for v in "yzt"[: d - 1])
    return Problem(
        name="poisson",
        diffusion=1.0,
        source=source,
        dirichlet=exact,
        exact=exact,
        exact_gradient=exact_gradient,
        description=f"-Laplace u = f on (0,1)^{d}, u = {u_text} (non-zero Dirichlet data)",
        default_mesh=_default_mesh(d),
        dim=d,
    )


# --- advection --------------------------------------------------------------


def advection_problem(d: int) -> Problem:
    """Pure advection-reaction, b . grad u + u = f, with non-zero inflow data.

    A = 0, b = (1, 1/2, 1/4)[:d] (constant), c = 1 on (0, 1)^d, and

        u = 1 + sin(pi x_0) prod_{k>=1} cos(pi x_k),
        d_0 u = pi cos(pi x_0) prod_{k>=1} cos(pi x_k),
        d_k u = -pi sin(pi x_0) sin(pi x_k) prod_{j>=1, j != k} cos(pi x_j)  (k >= 1).

    Derivation of f: there is no diffusion, so f = b . grad u + u.

    The inflow boundary is {x_k = 0} (all b_k > 0), where g_D = u is 1 on
    x_0 = 0 and 1 + sin(pi x_0) (...) on the others; the faces x_k = 1 are
    outflow and carry no condition.
    """
    if d > 4:
        raise ProblemError(f"problem 'advection' is defined up to 4D, not {d}D")
    b = np.array([1.0, 0.5, 0.25, 0.125])[:d]

    def exact(x):
        return 1.0 + np.sin(np.pi * x[:, 0]) * np.prod(np.cos(np.pi * x[:, 1:]), axis=1)

    def exact_gradient(x):
        s0, c0 = np.sin(np.pi * x[:, :1]), np.cos(np.pi * x[:, :1])
        ck, sk = np.cos(np.pi * x[:, 1:]), np.sin(np.pi * x[:, 1:])
        g0 = np.pi * c0 * np.prod(ck, axis=1, keepdims=True)
        gk = -np.pi * s0 * sk * _products_without(ck)
        return np.concatenate([g0, gk], axis=1)

    def source(x):
        return exact_gradient(x) @ b + exact(x)

    return Problem(
        name="advection",
        advection=b,
        reaction=1.0,
        source=source,
        dirichlet=exact,
        exact=exact,
        exact_gradient=exact_gradient,
        description=f"b.grad u + u = f, b = {tuple(b.tolist())}, u = 1 + sin(pi x) prod cos(pi x_k), "
                    "inflow data on x_k = 0",
        default_mesh=_default_mesh(d),
        dim=d,
    )


# --- change of type -----------------------------------------------------------


def change_of_type_problem(d: int) -> Problem:
    """A problem that is hyperbolic on x_0 < 1/2 and elliptic on x_0 > 1/2.

    A = a(x) I with a(x) = alpha m(x)^2, m = max(x_0 - 1/2, 0), alpha = 0.1
    (C^1: grad a = (2 alpha m, 0, ..., 0) is continuous), b = (1, ..., 1),
    c = 1 on (0, 1)^d, with t_k = pi x_k + pi/4 and the smooth solution

        u = prod_k sin(t_k),   d_k u = pi cos(t_k) prod_{j != k} sin(t_j).

    Derivation of f: div(a grad u) = grad a . grad u + a Laplace(u), and
    Laplace(u) = -d pi^2 u, so

        f = alpha m^2 d pi^2 u - 2 alpha m d_0 u + sum_k d_k u + u.

    Boundary: where a > 0 (x_0 > 1/2 parts, and x_0 = 1) the boundary is
    diffusive Dirichlet; elsewhere it is inflow (x_0 = 0 and x_k = 0 with
    x_0 < 1/2) or outflow, g_D = u.
    """
    alpha = 0.1

    def a(x):
        return alpha * np.maximum(x[:, 0] - 0.5, 0.0) ** 2

    def diffusion(x):
        return a(x)[:, None, None] * np.eye(x.shape[1])

    def exact(x):
        return np.prod(np.sin(np.pi * x + np.pi / 4), axis=1)

    def exact_gradient(x):
        t = np.pi * x + np.pi / 4
        return np.pi * np.cos(t) * _products_without(np.sin(t))

    def source(x):
        m = np.maximum(x[:, 0] - 0.5, 0.0)
        u, g = exact(x), exact_gradient(x)
        return alpha * m**2 * d * np.pi**2 * u - 2 * alpha * m * g[:, 0] + g.sum(axis=1) + u

    return Problem(
        name="change-of-type",
        diffusion=diffusion,
        advection=np.ones(d),
        reaction=1.0,
        source=source,
        dirichlet=exact,
        exact=exact,
        exact_gradient=exact_gradient,
        description="A = 0.1 max(x-1/2, 0)^2 I (hyperbolic for x < 1/2), b = (1, ..., 1), c = 1, "
                    "u = prod sin(pi x_k + pi/4)",
        default_mesh=_default_mesh(d),
        dim=d,
    )


# --- mixed Dirichlet / Neumann ------------------------------------------------


def neumann_diffusion_matrix(d: int) -> np.ndarray:
    """The constant anisotropic SPD matrix of the ``neumann`` problem.

    diag(1, 1/2, ..., 1/2) with A_01 = A_10 = 1/4 and A_{k,k+1} = A_{k+1,k}
    = 1/8 for k >= 1: strictly diagonally dominant, hence SPD.
    """
    A = np.diag([1.0] + [0.5] * (d - 1))
    A[0, 1] = A[1, 0] = 0.25
    for k in range(1, d - 1):
        A[k, k + 1] = A[k + 1, k] = 0.125
    return A


def neumann_problem(d: int) -> Problem:
    """Anisotropic diffusion with Neumann data on x_0 = 1, Dirichlet elsewhere.

    A = :func:`neumann_diffusion_matrix` (constant, with off-diagonal terms),
    b = 0, c = 0 on (0, 1)^d; t_k = pi x_k + pi/4 and, as in ``poisson``,

        u = exp(x_0) S,  S = prod_{k>=1} sin(t_k),
        d_0 u = u,  d_k u = pi exp(x_0) cos(t_k) prod_{j>=1, j != k} sin(t_j).

    Its Hessian H (by hand): H_00 = u, H_0k = H_k0 = d_k u, H_kk = -pi^2 u,
    H_kl = pi^2 exp(x_0) cos(t_k) cos(t_l) prod_{j>=1, j not in {k,l}} sin(t_j)
    for k != l >= 1.  A is constant, so div(A grad u) = A : H and

        f = -sum_ij A_ij H_ij.

    Neumann data g_N = (A grad u) . n on the face x_0 = 1 (outward normal
    e_0, recognised by n_0 > 1/2), Dirichlet g_D = u on the other faces.
    """
    A = neumann_diffusion_matrix(d)

    def exact(x):
        return np.exp(x[:, 0]) * np.prod(np.sin(np.pi * x[:, 1:] + np.pi / 4), axis=1)

    def exact_gradient(x):
        t = np.pi * x[:, 1:] + np.pi / 4
        rest = np.pi * np.exp(x[:, :1]) * np.cos(t) * _products_without(np.sin(t))
        return np.concatenate([exact(x)[:, None], rest], axis=1)

    def hessian(x):
        t = np.pi * x[:, 1:] + np.pi / 4
        u, g = exact(x), exact_gradient(x)
        H = np.zeros((len(x), d, d))
        H[:, 0, 0] = u
        H[:, 0, 1:] = H[:, 1:, 0] = g[:, 1:]
        cos_t = np.cos(t)
        H[:, 1:, 1:] = (np.pi**2 * np.exp(x[:, 0])[:, None, None] * cos_t[:, :, None] * cos_t[:, None, :]
                        * _pair_products_without(np.sin(t)))
        idx = np.arange(1, d)
        H[:, idx, idx] = -np.pi**2 * u[:, None]
        return H

    def source(x):
        return -np.einsum("ij,nij->n", A, hessian(x))

    def neumann(x, normal):
        return np.einsum("nj,ij,ni->n", exact_gradient(x), A, normal)

    def is_neumann(x, normal):
        return normal[:, 0] > 0.5

    return Problem(
        name="neumann",
        diffusion=A,
        source=source,
        dirichlet=exact,
        neumann=neumann,
        is_neumann=is_neumann,
        exact=exact,
        exact_gradient=exact_gradient,
        description="anisotropic constant A, u = exp(x) prod sin(pi x_k + pi/4); Neumann on x = 1, "
                    "Dirichlet elsewhere",
        default_mesh=_default_mesh(d),
        dim=d,
    )


# ---------------------------------------------------------------------------
# polynomials


@dataclass(frozen=True)
class Polynomial:
    """p(x) = sum_m coeff[m] prod_k x_k ** exponents[m, k], evaluated vectorised.

    >>> p = Polynomial(np.array([2.0, 3.0]), np.array([[0, 0], [1, 2]]))   # 2 + 3 x y^2
    >>> float(p(np.array([[2.0, 1.0]]))[0]), float(p.derivative(1)(np.array([[2.0, 1.0]]))[0])
    (8.0, 12.0)
    """

    coeff: np.ndarray
    exponents: np.ndarray

    @property
    def dim(self) -> int:
        return int(self.exponents.shape[1])

    @property
    def degree(self) -> int:
        return int(self.exponents.sum(axis=1).max(initial=0))

    def __call__(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        n = x.shape[0]
        powers = x[:, :, None] ** np.arange(self.degree + 1)  # (n, d, degree+1)
        monomials = np.ones((n, len(self.coeff)))
        for k in range(self.dim):  # d factors of every monomial
            monomials *= powers[:, k, self.exponents[:, k]]
        return monomials @ self.coeff

    def derivative(self, k: int) -> "Polynomial":
        """d p / d x_k."""
        e = self.exponents[:, k]
        keep = e > 0
        exponents = self.exponents[keep].copy()
        exponents[:, k] -= 1
        return Polynomial(self.coeff[keep] * e[keep], exponents)

    def gradient(self, x: np.ndarray) -> np.ndarray:
        """(n, d) gradient at the points."""
        return np.stack([self.derivative(k)(x) for k in range(self.dim)], axis=1)

    def __add__(self, other: "Polynomial") -> "Polynomial":
        return Polynomial(np.r_[self.coeff, other.coeff], np.r_[self.exponents, other.exponents]).simplified()

    def __mul__(self, scalar: float) -> "Polynomial":
        return Polynomial(self.coeff * float(scalar), self.exponents)

    __rmul__ = __mul__

    def simplified(self) -> "Polynomial":
        """Equal monomials merged, zero terms dropped, ordered by total degree."""
        if len(self.coeff) == 0:
            return self
        unique, inverse = np.unique(self.exponents, axis=0, return_inverse=True)
        coeff = np.bincount(inverse.reshape(-1), weights=self.coeff, minlength=len(unique))
        keep = coeff != 0
        unique, coeff = unique[keep], coeff[keep]
        order = np.lexsort(unique.T[::-1].tolist() + [unique.sum(axis=1)])
        return Polynomial(coeff[order], unique[order])

    @staticmethod
    def zero(dim: int) -> "Polynomial":
        return Polynomial(np.zeros(0), np.zeros((0, dim), dtype=np.int64))


def multi_indices(dim: int, degree: int) -> np.ndarray:
    """All exponents of total degree <= ``degree`` in ``dim`` variables, by total degree."""
    grid = np.array(list(itertools.product(range(degree + 1), repeat=dim)), dtype=np.int64).reshape(-1, dim)
    grid = grid[grid.sum(axis=1) <= degree]
    return grid[np.lexsort(grid.T[::-1].tolist() + [grid.sum(axis=1)])]


POLYNOMIAL_KINDS = ("diffusion", "advection-reaction", "mixed")


def polynomial_problem(dim: int, degree: int, kind: str = "mixed", seed: int = 0) -> Problem:
    """A problem whose exact solution is a fixed random polynomial of total degree ``degree``.

    The coefficients of u (uniform in [-1, 1], one per monomial of degree
    <= ``degree``) and of the PDE come from ``numpy.random.default_rng(seed)``.
    All PDE coefficients are constant:

    * ``diffusion``: A = 1/2 I + M M^T (SPD, M uniform in [-1/2, 1/2]^{dxd}), b = 0, c = 0;
    * ``advection-reaction``: A = 0, b with |b_k| in [1/2, 3/2] and random signs, c = 1;
    * ``mixed``: A = 1/2 I + M M^T / 10, b as above, c = 1.

    With constant A, div(A grad u) = A : Hess(u), so f is itself a polynomial,

        f = -sum_kl A_kl d_kl u + sum_k b_k d_k u + c u,

    built exactly from the derivatives of u.  Dirichlet data g_D = u on the
    whole boundary.  DG solutions with degree >= ``degree`` on every element
    reproduce u to round-off (DESIGN.md section 10).
    """
    if kind not in POLYNOMIAL_KINDS:
        raise ProblemError(f"polynomial problem: unknown kind {kind!r}; known: {', '.join(POLYNOMIAL_KINDS)}")
    if dim not in (2, 3, 4):
        raise ProblemError(f"polynomial problem: dimension must be 2, 3 or 4, got {dim!r}")
    if degree < 0:
        raise ProblemError(f"polynomial problem: degree must be >= 0, got {degree}")
    rng = np.random.default_rng(seed)
    exponents = multi_indices(dim, degree)
    u = Polynomial(rng.uniform(-1.0, 1.0, len(exponents)), exponents)
    M = rng.uniform(-0.5, 0.5, (dim, dim))
    b = rng.uniform(0.5, 1.5, dim) * rng.choice([-1.0, 1.0], dim)
    if kind == "diffusion":
        A, b, c = 0.5 * np.eye(dim) + M @ M.T, None, None
    elif kind == "advection-reaction":
        A, c = None, 1.0
    else:
        A, c = 0.5 * np.eye(dim) + 0.1 * M @ M.T, 1.0

    grad = [u.derivative(k) for k in range(dim)]
    f = Polynomial.zero(dim)
    if A is not None:
        for k in range(dim):
            for l in range(dim):
                f = f + (-A[k, l]) * grad[k].derivative(l)
    if b is not None:
        for k in range(dim):
            f = f + b[k] * grad[k]
    if c is not None:
        f = f + c * u

    def exact_gradient(x):
        return np.stack([g(x) for g in grad], axis=1)

    return Problem(
        name=f"polynomial:{degree}:{kind}:{seed}",
        diffusion=A,
        advection=b,
        reaction=c,
        source=f,
        dirichlet=u,
        exact=u,
        exact_gradient=exact_gradient,
        description=f"random polynomial of degree {degree} in {dim}D, {kind} with constant coefficients "
                    f"(seed {seed})",
        default_mesh=_default_mesh(dim),
        dim=dim,
    )


# ---------------------------------------------------------------------------
# registry and loading


#: built-in problems: name -> (builder taking d, dimensions it exists in or None = any)
BUILTIN_PROBLEMS: dict[str, tuple[Callable[[int], Problem], tuple[int, ...] | None]] = {
    "paper-2d": (lambda d: paper_problem(2), (2,)),
    "paper-3d": (lambda d: paper_problem(3), (3,)),
    "poisson": (poisson_problem, None),
    "advection": (advection_problem, None),
    "change-of-type": (change_of_type_problem, None),
    "neumann": (neumann_problem, None),
}

#: names accepted besides BUILTIN_PROBLEMS: ``paper`` (paper-2d or paper-3d by
#: dimension) and ``polynomial:P[:KIND[:SEED]]``
ALIASES = ("paper", "polynomial:P[:KIND[:SEED]]")


def builtin_names() -> list[str]:
    return list(BUILTIN_PROBLEMS) + list(ALIASES)


def _parse_polynomial(name: str, dim: int) -> Problem:
    parts = name.split(":")
    if len(parts) < 2 or len(parts) > 4:
        raise ProblemError(f"problem spec {name!r}: expected polynomial:DEGREE[:KIND[:SEED]]")
    try:
        degree = int(parts[1])
        seed = int(parts[3]) if len(parts) > 3 else 0
    except ValueError:
        raise ProblemError(f"problem spec {name!r}: degree and seed must be integers") from None
    kind = parts[2] if len(parts) > 2 else "mixed"
    return polynomial_problem(dim, degree, kind, seed)


def builtin_problem(name: str, dim: int | None = None) -> Problem:
    """The built-in problem ``name`` in ``dim`` dimensions.

    ``dim=None`` takes the problem's own dimension (paper-2d: 2, paper-3d: 3)
    and 2 for the dimension-independent ones.  ``paper`` means paper-2d or
    paper-3d by dimension; ``polynomial:P[:KIND[:SEED]]`` is
    :func:`polynomial_problem` (KIND defaults to mixed, SEED to 0).
    """
    if name == "paper":
        name = f"paper-{dim or 2}d"
    if name.startswith("polynomial"):
        return _parse_polynomial(name, dim or 2)
    if name not in BUILTIN_PROBLEMS:
        raise ProblemError(f"unknown problem {name!r}; built-in problems: {', '.join(builtin_names())}, "
                           "or path/to/file.py:NAME, or package.module:NAME")
    build, dims = BUILTIN_PROBLEMS[name]
    if dim is None:
        dim = dims[0] if dims else 2
    if dims is not None and dim not in dims:
        raise ProblemError(f"problem {name!r} is {dims[0]}D, the mesh is {dim}D")
    if dim not in (2, 3, 4):
        raise ProblemError(f"problem {name!r}: dimension {dim} is not supported (2, 3 or 4)")
    return build(dim)


def _run_user_code(function: Callable[[], Any], failed: Callable[[BaseException], str]) -> Any:
    """``function()``, user code, with what it prints and warns held back until it is done.

    When it returns, its output is shown as if it had not been held back; when
    it raises, the output becomes part of the one-line :class:`ProblemError`
    whose message is ``failed(exc)``.
    """
    with capture_output() as said:
        try:
            result, failure = function(), None
        except BaseException as exc:  # SystemExit included: a problem file must not end the program
            result, failure = None, exc
    if failure is None:
        said.replay()
        return result
    if isinstance(failure, KeyboardInterrupt):
        said.replay()
        raise failure
    message = str(failure) if isinstance(failure, ProblemError) else failed(failure)
    output = said.summary()
    raise ProblemError(message + (f" (its output: {output})" if output else "")) from failure


def _import_failure(where: str, path: str | None) -> Callable[[BaseException], str]:
    """How an import of ``where`` (the file ``path``, if one) failed, in one line."""

    def describe(exc: BaseException) -> str:
        if isinstance(exc, SyntaxError):
            elsewhere = f" in {exc.filename}" if exc.filename and exc.filename != path else ""
            line = f" at line {exc.lineno}" if exc.lineno else ""
            return f"{where}: syntax error{elsewhere}{line}: {_one_line(exc.msg)}"
        return f"{where}: import failed: {type(exc).__name__}: {_one_line(exc)}"

    return describe


def _import_file(path: str) -> Any:
    where = f"problem file {path!r}"
    if not os.path.exists(path):
        raise ProblemError(f"{where} not found")
    if not os.path.isfile(path):
        raise ProblemError(f"{where} is not a file")
    module_name = "_polydg_problem_" + "".join(c if c.isalnum() else "_" for c in os.path.abspath(path))
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ProblemError(f"{where} cannot be imported (not a Python file?)")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        _run_user_code(lambda: spec.loader.exec_module(module), _import_failure(where, path))
    except BaseException:
        sys.modules.pop(module_name, None)
        raise
    return module


def _import_module(name: str) -> Any:
    where = f"problem module {name!r}"

    def failed(exc: BaseException) -> str:
        if isinstance(exc, ModuleNotFoundError) and exc.name and name.startswith(exc.name):
            return f"{where} not found"
        return _import_failure(where, None)(exc)

    return _run_user_code(lambda: importlib.import_module(name), failed)


def _accepts_argument(function: Callable[..., Any]) -> bool:
    try:
        params = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return True
    return any(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL) for p in params)


def load_problem(spec: str, dim: int | None = None) -> Problem:
    """Find a problem by its spec and check it fits ``dim`` dimensions.

    ``spec`` is a built-in name (:func:`builtin_problem`), or
    ``path/to/file.py:NAME`` (the file is imported by path), or
    ``package.module:NAME``.  NAME (default ``problem`` for a bare ``.py``
    path) is a :class:`Problem` or a callable returning one, called with
    ``dim`` when it takes an argument.

    >>> load_problem("paper", 3).name
    'paper-3d'
    """
    spec = str(spec).strip()
    if not spec:
        raise ProblemError("empty problem spec")
    head = spec.split(":")[0]
    if head in BUILTIN_PROBLEMS or head in ("paper", "polynomial"):
        problem = builtin_problem(spec, dim)
    else:
        target, sep, attribute = spec.rpartition(":")
        if not sep or (os.sep in attribute or attribute.endswith(".py")):
            target, attribute = spec, ""
        is_file = target.endswith(".py") or os.sep in target or "/" in target
        if not is_file and not sep:
            raise ProblemError(f"unknown problem {spec!r}; built-in problems: {', '.join(builtin_names())}, "
                               "or path/to/file.py:NAME, or package.module:NAME")
        attribute = attribute or "problem"
        where = f"problem file {target!r}" if is_file else f"problem module {target!r}"
        module = _import_file(target) if is_file else _import_module(target)
        if not hasattr(module, attribute):
            found = sorted(k for k, v in vars(module).items() if isinstance(v, Problem))
            hint = f" (Problem objects there: {', '.join(found)})" if found else ""
            raise ProblemError(f"{where} has no attribute {attribute!r}{hint}")
        obj = getattr(module, attribute)
        if not isinstance(obj, Problem):
            if not callable(obj):
                raise ProblemError(f"{where}: {attribute} is a {type(obj).__name__}, expected a "
                                   "polydg.problem.Problem or a callable returning one")
            factory = obj
            call = f"{attribute}({'' if dim is None else dim})"
            obj = _run_user_code(lambda: factory(dim) if _accepts_argument(factory) else factory(),
                                 lambda exc: f"{where}: {call} raised {type(exc).__name__}: {_one_line(exc)}")
            if not isinstance(obj, Problem):
                raise ProblemError(f"{where}: {attribute}() returned a {type(obj).__name__}, expected a "
                                   "polydg.problem.Problem")
        problem = obj
    if dim is not None:
        problem.check_dimension(dim)
    return problem


__all__ = [
    "Problem",
    "Polynomial",
    "COEFFICIENTS",
    "BUILTIN_PROBLEMS",
    "builtin_names",
    "builtin_problem",
    "polynomial_problem",
    "load_problem",
    "paper_problem",
    "poisson_problem",
    "advection_problem",
    "change_of_type_problem",
    "neumann_problem",
]
