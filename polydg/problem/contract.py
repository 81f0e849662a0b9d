"""The Problem contract (docs/design.md §1 and §6), and any object that meets it.

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

Diffusion, reaction and source may also depend on the discrete solution (a
nonlinear problem): a callable whose signature names a parameter ``u``
receives the iterate's values at the points, one that names ``grad_u`` its
gradient ``(n, d)``, e.g. ``diffusion(x, u)`` returning a(u) ``(n,)``,
``reaction(x, u)``, ``source(x, u)``, ``diffusion(x, u, grad_u)``
(p-Laplacian type; then a scalar a).  Their derivatives may be given as
``diffusion_du``, ``diffusion_dgrad_u`` (``(n, d)``), ``reaction_du`` and
``source_du`` (same arguments); when absent they are computed pointwise
(:mod:`~polydg.problem.iterate`).  Advection and boundary data stay
functions of x.

Diffusion, reaction and source may also read where each point lies: a
callable that names a parameter ``where`` receives a
:class:`~polydg.problem.data.PointLocation` (element and fine cell of each
point; on an interior face, of the side whose trace is taken).  Data per fine
cell or per element (:mod:`~polydg.problem.data`) are such callables.

The assembler asks for coefficient values through the ``*_at`` methods, which
check shape and finiteness and raise :class:`~polydg.errors.ProblemError` with
a one-line message naming the problem, the coefficient and what is wrong.
Constants come back as arrays with a leading axis of length 1 and are never
expanded to n points: the kernels broadcast them.

The contract is also a protocol: :func:`~polydg.problem.protocol.as_problem`
turns any object with some of these attributes (a plain class or instance, a
module) into a :class:`Problem`, so user code need not import polydg to define
one.
"""

from __future__ import annotations

import inspect
import itertools
from dataclasses import dataclass
from typing import Any, Callable, Union

import numpy as np

from ..errors import DimensionError, ProblemError

Coefficient = Union[None, float, np.ndarray, Callable[..., Any]]

#: the coefficient fields of a Problem, in the order of the PDE
COEFFICIENTS = (
    "diffusion", "advection", "reaction", "source", "dirichlet", "neumann", "is_neumann",
    "exact", "exact_gradient",
)

#: the coefficients that may depend on the iterate u (and grad u), and their optional derivatives
ITERATE_COEFFICIENTS = ("diffusion", "reaction", "source")
DERIVATIVES = ("diffusion_du", "diffusion_dgrad_u", "reaction_du", "source_du")

#: the iterate's arguments a coefficient callable may name
ITERATE_ARGUMENTS = ("u", "grad_u")

#: why each of the other coefficients is not a function of the iterate, for the message refusing one that is
_FUNCTION_OF_X = {
    "advection": "a nonlinear advection needs a numerical flux, which polydg does not provide",
    "dirichlet": "boundary data are functions of x: polydg solves no nonlinear boundary conditions",
    "neumann": "boundary data are functions of x and the normal: polydg solves no nonlinear boundary conditions",
    "is_neumann": "it marks the Neumann boundary, a function of x and the normal",
    "exact": "the exact solution is a function of x",
    "exact_gradient": "the exact solution's gradient is a function of x",
    "initial": "the initial value is a function of x",
}

#: the argument through which a coefficient callable reads where each point lies (its element and fine cell)
LOCATION_ARGUMENT = "where"

#: relative tolerance of the symmetry / semi-definiteness checks on A
_SYMMETRY_TOL = 1e-10


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


def _format_point(x: np.ndarray) -> str:
    return "[" + ", ".join(f"{float(v):.6g}" for v in x) + "]"


def _to_numpy(a: Any) -> np.ndarray:
    """A host copy of a NumPy or CuPy array (for error messages only)."""
    return np.asarray(a.get() if hasattr(a, "get") else a)


def _default_mesh(d: int) -> str:
    """The mesh suggested for a problem posed in ``d`` dimensions (:attr:`Problem.default_mesh`)."""
    return "square:32" if d == 2 else "cube:8"


def _parameters(function: Any) -> tuple[str, ...]:
    """The names of a callable's parameters; () for a constant, a builtin or a ufunc (a function of x alone)."""
    if not callable(function):
        return ()
    try:
        return tuple(inspect.signature(function).parameters)
    except (TypeError, ValueError):
        return ()


def iterate_arguments(function: Any) -> tuple[str, ...]:
    """The iterate's arguments (``u``, ``grad_u``) that a coefficient callable names; () for a function of x.

    >>> iterate_arguments(lambda x, u: 1 + u**2), iterate_arguments(lambda x: x[:, 0])
    (('u',), ())
    """
    parameters = _parameters(function)
    return tuple(a for a in ITERATE_ARGUMENTS if a in parameters)


def reads_location(function: Any) -> bool:
    """True when a coefficient callable names ``where`` (data per cell or element, :mod:`polydg.problem.data`).

    >>> reads_location(lambda x, where: where.cell * 1.0), reads_location(lambda x: x[:, 0])
    (True, False)
    """
    return LOCATION_ARGUMENT in _parameters(function)


def _holds_text(value: Any) -> bool:
    """Whether an array or a sequence holds text ("1.0", which NumPy would read as a number)."""
    if not isinstance(value, (list, tuple, np.ndarray)):
        return False
    try:
        kind = np.asarray(value).dtype.kind
        return kind in "SU" or (kind == "O" and any(isinstance(v, (str, bytes)) for v in np.ravel(value)))
    except (TypeError, ValueError):  # ragged: not an array of numbers anyway, said below
        return False


def _wrong_kind(name: str, value: Any) -> str | None:
    """What is wrong with ``value`` as the coefficient ``name`` (a callable, a constant or None); None if nothing.

    Shared by :class:`Problem` and :func:`as_problem`, so that a plain object
    is held to exactly the rules of a Problem.  Shapes are checked later,
    when the dimension is known.
    """
    if value is None or callable(value):
        if callable(value) and name not in ITERATE_COEFFICIENTS + DERIVATIVES:
            named = iterate_arguments(value)
            only = f"only {', '.join(ITERATE_COEFFICIENTS[:-1])} and {ITERATE_COEFFICIENTS[-1]} may"
            if named:
                return (f"names the iterate ({', '.join(named)}): {only} depend on it; "
                        f"{_FUNCTION_OF_X.get(name, 'it is a function of x')}")
            if reads_location(value):
                why = " (an upwind flux needs one b.n on a face)" if name == "advection" else ""
                return (f"reads where a point lies (data per cell or element): {only}{why}; data on a grid "
                        "(GridData) is a function of x")
        return None
    if name in DERIVATIVES:
        return f"must be a callable or None, got {type(value).__name__}"
    if name in ("exact", "exact_gradient"):
        return f"must be a callable of x or None, got {type(value).__name__}"
    if name == "is_neumann":
        if isinstance(value, (bool, np.bool_)):
            return None
        return f"must be a callable, a bool or None, got {type(value).__name__}"
    if isinstance(value, (str, bytes)) or _holds_text(value):
        return f"must be a callable, a number or an array, got {type(value).__name__}"  # "1.0" is no number
    try:
        array = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        return f"must be a callable, a number or an array, got {type(value).__name__}"
    if not np.isfinite(array).all():
        return f"constant {array.tolist()} is not finite"
    return None


def _indefinite(M: Any, xp: Any) -> Any:
    """Which of the symmetric tensors M (n, d, d), entries at most 1 in size, are not positive semi-definite:
    those with a principal minor below -1e-10 (Sylvester's criterion for semi-definiteness: all of them)."""
    d = M.shape[1]
    bad = xp.zeros(M.shape[0], dtype=bool)
    for k in range(1, d + 1):
        for rows in itertools.combinations(range(d), k):
            bad |= _minor(M, rows, rows) < -_SYMMETRY_TOL
    return bad


def _minor(M: Any, rows: tuple, cols: tuple) -> Any:
    """det M[:, rows][:, :, cols] for every tensor, by cofactors along the first row (d <= 4: a few
    array operations, no per-point LAPACK call)."""
    if len(rows) == 1:
        return M[:, rows[0], cols[0]]
    total = 0.0
    for c, col in enumerate(cols):
        rest = cols[:c] + cols[c + 1:]
        term = M[:, rows[0], col] * _minor(M, rows[1:], rest)
        total = total + term if c % 2 == 0 else total - term
    return total


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
    space_time : bool
        True when the last coordinate of x is time (a space-time slab,
        docs/design.md §10); stored for the space-time assembly.
    initial : Coefficient
        The initial value u_0(x) of a space-time problem (a number or a function of x; a march needs one);
        stored for the space-time assembly.
    diffusion_du, diffusion_dgrad_u, reaction_du, source_du : callable or None
        Derivatives of coefficients of the iterate with respect to u and
        grad u, with the coefficient's own arguments (None: computed
        pointwise, see :mod:`polydg.problem.iterate`).
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
    # new fields go last: Problem(name, diffusion, ...) may be called positionally
    space_time: bool = False
    initial: Coefficient = None
    diffusion_du: Callable[..., Any] | None = None
    diffusion_dgrad_u: Callable[..., Any] | None = None
    reaction_du: Callable[..., Any] | None = None
    source_du: Callable[..., Any] | None = None

    def __post_init__(self) -> None:
        self.name = str(self.name)
        if self.dim is not None and self.dim not in (2, 3, 4):
            raise ProblemError(f"problem {self.name!r}: dim must be 2, 3, 4 or None, got {self.dim!r}")
        for name in COEFFICIENTS + ("initial",) + DERIVATIVES:
            what = _wrong_kind(name, getattr(self, name))
            if what:
                self._fail(name, what)
        if not isinstance(self.space_time, (bool, np.bool_)):
            self._fail("space_time", f"must be a bool, got {type(self.space_time).__name__}")

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

    def iterate_arguments(self, name: str) -> tuple[str, ...]:
        """The iterate's arguments (``u``, ``grad_u``) that coefficient ``name`` takes; () for x alone."""
        return iterate_arguments(getattr(self, name))

    @property
    def located(self) -> bool:
        """True when a coefficient reads where its points lie (``where``: data per cell or element)."""
        return any(reads_location(getattr(self, name)) for name in ITERATE_COEFFICIENTS)

    @property
    def nonlinear(self) -> bool:
        """True when a coefficient depends on the iterate (see the module docstring)."""
        return any(self.iterate_arguments(name) for name in ITERATE_COEFFICIENTS)

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
            raise DimensionError(f"problem {self.name!r} is {self.dim}D, the mesh is {d}D", self.dim, d)
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

    def _call(self, name: str, *args: Any, **iterate: Any) -> Any:
        """``name``'s callable at ``args``, with the iterate's arrays among ``iterate`` that it names.

        User code: its NumPy floating-point warnings are not shown (a non-finite value it returns is
        refused by :meth:`_checked`), its exceptions and ``sys.exit`` become the problem's one-line fault."""
        function = getattr(self, name)
        wanted = iterate_arguments(function) if name in ITERATE_COEFFICIENTS + DERIVATIVES else ()
        missing = [a for a in wanted if iterate.get(a) is None]
        if missing:
            raise ProblemError(
                f"problem {self.name!r}: {name} depends on the iterate ({', '.join(wanted)}): a nonlinear problem "
                f"is solved by polydg.nonlinear.solve_nonlinear (command line: --nonlinear newton|picard), not assembled once")
        if name in ITERATE_COEFFICIENTS + DERIVATIVES and reads_location(function):
            if iterate.get(LOCATION_ARGUMENT) is None:
                raise ProblemError(
                    f"problem {self.name!r}: {name} reads where each point lies (data per cell or element): it is "
                    "evaluated by polydg.assembly.assemble or polydg.nonlinear.solve_nonlinear, which give each "
                    "point's element and cell, not at bare points")
            wanted = wanted + (LOCATION_ARGUMENT,)
        try:
            with np.errstate(all="ignore"):
                return function(*args, **{a: iterate[a] for a in wanted})
        except ProblemError:
            raise
        except (Exception, SystemExit) as exc:  # user code: report it as the problem's fault
            n = args[0].shape[0] if hasattr(args[0], "shape") else "?"
            if isinstance(exc, SystemExit):
                raise ProblemError(f"problem {self.name!r}: {name} called sys.exit({exc.code!r}) at {n} points") \
                    from None
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
            wanted = f"({n},) for a(x) I or {expected}" if name == "diffusion" else f"{expected}"
            self._fail(name, f"returned shape {tuple(value.shape)} for {n} points in {d}D, expected {wanted}")
        value = value.astype(dtype, copy=False)
        # the sum is one pass with no temporary; only a non-finite sum (a NaN or
        # inf, or finite values overflowing) needs the point-by-point scan
        with np.errstate(all="ignore"):  # the sum of finite values may overflow: only the scan decides
            total = value.sum() if n else 0.0
        if n and not bool(xp.isfinite(total)) and bool((bad := ~xp.isfinite(value)).any()):
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

    def diffusion_at(self, x: Any, xp: Any = np, *, u: Any = None, grad_u: Any = None, where: Any = None) -> Any:
        """A at the points: ``(n, d, d)``, or ``(1, d, d)`` when constant.

        A callable may also return ``(n,)``, read as ``a(x) I``.  Values are
        checked for finiteness, symmetry and positive semi-definiteness
        (:meth:`check_diffusion_values`).  ``u`` (n,) and ``grad_u`` (n, d) are the
        iterate at the points, ``where`` their :class:`~polydg.problem.data.PointLocation`,
        for a diffusion that names them.
        """
        x, n, d = self._points(x, xp)
        dtype = self._dtype(x, xp)
        if self.is_constant("diffusion"):
            return self._constant("diffusion", d, (d, d), xp, dtype)
        value = xp.asarray(self._call("diffusion", x, u=u, grad_u=grad_u, where=where))
        if tuple(value.shape) == (n,):  # a(x) I: a checked first, so that inf * 0 off the diagonal is no NaN
            a = self._checked("diffusion", value, x, (n,), xp, dtype)
            value = a[:, None, None] * xp.eye(d, dtype=a.dtype)
        A = self._checked("diffusion", value, x, (n, d, d), xp, dtype)
        self.check_diffusion_values(A, x, xp)
        return A

    def diffusion_values_at(self, x: Any, *, where: Any = None) -> np.ndarray:
        """A callable diffusion's values at the points as they come, (n,) for a(x) I or (n, d, d), in
        floating point and finite; a constant's (1, d, d).  What a bound of A needs (the penalty's
        a_K), without the a(x) I that :meth:`diffusion_at` builds or its symmetry checks, which the
        assembly makes where it reads A.  Values of another shape or type, or not finite, go through
        :meth:`diffusion_at`, for its one-line error.
        """
        x, n, d = self._points(x, np)
        if self.is_constant("diffusion"):
            return self.diffusion_at(x)
        value = self._call("diffusion", x, where=where)
        try:
            value = np.asarray(value)
        except Exception:
            value = None
        if (value is not None and value.dtype.kind in "biuf" and tuple(value.shape) in ((n,), (n, d, d))
                and (n == 0 or bool(np.isfinite(value.sum())))):
            return value.astype(self._dtype(x, np), copy=False)
        return self.diffusion_at(x, where=where)

    def check_diffusion_values(self, A: Any, x: Any, xp: Any = np) -> None:
        """Refuse diffusion values ``A`` (n, d, d) at the points ``x`` that are not symmetric positive
        semi-definite, as for a constant: one line naming the first such point.

        Symmetry within a relative 1e-10, semi-definiteness at every point:
        every principal minor of the tensor scaled to entries of at most 1
        must be >= -1e-10 (array operations over the points, about the cost
        of the symmetry test in 2D and 3D; a batched ``eigvalsh`` costs
        several times more).
        """
        n = int(A.shape[0])
        if not n:
            return
        with np.errstate(all="ignore"):
            scale = xp.abs(A).reshape(n, -1).max(axis=1)
            asym = xp.abs(A - xp.swapaxes(A, 1, 2)).reshape(n, -1).max(axis=1) > _SYMMETRY_TOL * scale
            bad, what = asym, "not symmetric"
            if not bool(asym.any()):
                bad, what = _indefinite(A / xp.where(scale > 0, scale, 1.0)[:, None, None], xp), \
                    "not positive semi-definite"
        if bool(bad.any()):
            i = int(xp.flatnonzero(bad)[0])
            self._fail("diffusion", f"is {what} at x = {_format_point(_to_numpy(x[i]))}: {_to_numpy(A[i]).tolist()}")

    def advection_at(self, x: Any, xp: Any = np) -> Any:
        """b at the points: ``(n, d)``, or ``(1, d)`` when constant."""
        x, n, d = self._points(x, xp)
        dtype = self._dtype(x, xp)
        if self.is_constant("advection"):
            return self._constant("advection", d, (d,), xp, dtype)
        return self._checked("advection", self._call("advection", x), x, (n, d), xp, dtype)

    def _scalar_at(self, name: str, x: Any, xp: Any, *extra: Any, **iterate: Any) -> Any:
        x, n, d = self._points(x, xp)
        dtype = self._dtype(x, xp)
        if self.is_constant(name):
            return self._constant(name, d, (), xp, dtype)
        return self._checked(name, self._call(name, x, *extra, **iterate), x, (n,), xp, dtype)

    def reaction_at(self, x: Any, xp: Any = np, *, u: Any = None, grad_u: Any = None, where: Any = None) -> Any:
        """c at the points: ``(n,)``, or ``(1,)`` when constant (``u``, ``grad_u``: the iterate there;
        ``where``: their location)."""
        return self._scalar_at("reaction", x, xp, u=u, grad_u=grad_u, where=where)

    def source_at(self, x: Any, xp: Any = np, *, u: Any = None, grad_u: Any = None, where: Any = None) -> Any:
        """f at the points: ``(n,)``, or ``(1,)`` when constant (``u``, ``grad_u``: the iterate there;
        ``where``: their location)."""
        return self._scalar_at("source", x, xp, u=u, grad_u=grad_u, where=where)

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
