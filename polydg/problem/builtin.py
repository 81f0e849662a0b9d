"""The built-in problems, manufactured solutions on the unit box, and their registry.

Each ``*_problem(d)`` builds a :class:`~polydg.problem.contract.Problem`
whose source f and boundary data come from a known exact solution u (the
derivation of f is in each docstring), so that errors can be measured.
:data:`BUILTIN_PROBLEMS` maps the names ``--problem`` accepts to them, and
:func:`builtin_problem` also knows ``paper`` and ``polynomial:P[:KIND[:SEED]]``
(:mod:`polydg.problem.polynomial`).

Every callable is written against the array namespace of its points
(``xp = array_namespace(x)``, :func:`polydg.backend.array_namespace`): NumPy
arrays give NumPy arrays, and with the GPU backend CuPy arrays give CuPy
arrays, so the coefficients are evaluated on the device.  The NumPy results
are bitwise those of the earlier NumPy-only code.
"""

from __future__ import annotations

import itertools
from typing import Callable

import numpy as np

from ..backend import array_namespace
from ..errors import DimensionError, ProblemError
from .contract import Problem, _default_mesh
from .nonlinear_builtin import bratu_problem, cubic_problem, fisher_kpp_problem, quasilinear_problem
from .paper_kernel import _paper_source
from .polynomial import polynomial_problem

# ---------------------------------------------------------------------------
# building blocks of the built-in solutions


def _products_without(factors: np.ndarray) -> np.ndarray:
    """``out[:, k] = prod_{j != k} factors[:, j]`` for (n, m) factors (no division).

    Prefix and suffix products: 3 m multiplications per row, no copies of the input.
    """
    xp = array_namespace(factors)
    n, m = factors.shape
    out = xp.empty((n, m), dtype=factors.dtype)
    out[:, 0] = 1.0
    for k in range(1, m):  # m = d columns, not a loop over points
        xp.multiply(out[:, k - 1], factors[:, k - 1], out=out[:, k])
    suffix = xp.ones(n, dtype=factors.dtype)
    for k in range(m - 1, -1, -1):
        out[:, k] *= suffix
        suffix *= factors[:, k]
    return out


def _pair_products_without(factors: np.ndarray) -> np.ndarray:
    """``out[:, k, l] = prod_{j not in {k, l}} factors[:, j]`` for k != l (diagonal: 0)."""
    xp = array_namespace(factors)
    n, m = factors.shape
    out = xp.zeros((n, m, m), dtype=factors.dtype)
    for k, l in itertools.combinations(range(m), 2):
        product = xp.ones(n, dtype=factors.dtype)
        for j in range(m):  # the other columns in order (m <= 3: at most one factor, as np.prod gave)
            if j not in (k, l):
                product = product * factors[:, j]
        out[:, k, l] = out[:, l, k] = product
    return out


# --- paper ------------------------------------------------------------------


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
        xp = array_namespace(x)
        return xp.prod(xp.sin(np.pi * x), axis=1)

    def exact_gradient(x):
        xp = array_namespace(x)
        return np.pi * xp.cos(np.pi * x) * _products_without(xp.sin(np.pi * x))

    def advection(x):
        return 1.0 + x

    def reaction(x):
        out = _column_product(x)
        out += 3.0
        return out

    def source(x):
        xp = array_namespace(x)
        if xp is np:  # this runs at every quadrature point of the mesh: compiled (see _paper_source)
            return _paper_source(np.ascontiguousarray(x, dtype=np.float64), eps)
        # another namespace (CuPy): the same formula as array code, f = (eps d pi^2 + c) u + b . grad u
        u, grad = exact(x), exact_gradient(x)
        return (eps * d * np.pi**2 + reaction(x)) * u + ((1.0 + x) * grad).sum(axis=1)

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
        xp = array_namespace(x)
        return xp.exp(x[:, 0]) * xp.prod(xp.sin(np.pi * x[:, 1:] + np.pi / 4), axis=1)

    def exact_gradient(x):
        xp = array_namespace(x)
        t = np.pi * x[:, 1:] + np.pi / 4
        rest = np.pi * xp.exp(x[:, :1]) * xp.cos(t) * _products_without(xp.sin(t))
        return xp.concatenate([exact(x)[:, None], rest], axis=1)

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
        xp = array_namespace(x)
        return 1.0 + xp.sin(np.pi * x[:, 0]) * xp.prod(xp.cos(np.pi * x[:, 1:]), axis=1)

    def exact_gradient(x):
        xp = array_namespace(x)
        s0, c0 = xp.sin(np.pi * x[:, :1]), xp.cos(np.pi * x[:, :1])
        ck, sk = xp.cos(np.pi * x[:, 1:]), xp.sin(np.pi * x[:, 1:])
        g0 = np.pi * c0 * xp.prod(ck, axis=1, keepdims=True)
        gk = -np.pi * s0 * sk * _products_without(ck)
        return xp.concatenate([g0, gk], axis=1)

    def source(x):
        xp = array_namespace(x)
        return exact_gradient(x) @ xp.asarray(b) + exact(x)

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
        return alpha * array_namespace(x).maximum(x[:, 0] - 0.5, 0.0) ** 2

    def exact(x):
        xp = array_namespace(x)
        return xp.prod(xp.sin(np.pi * x + np.pi / 4), axis=1)

    def exact_gradient(x):
        xp = array_namespace(x)
        t = np.pi * x + np.pi / 4
        return np.pi * xp.cos(t) * _products_without(xp.sin(t))

    def source(x):
        m = array_namespace(x).maximum(x[:, 0] - 0.5, 0.0)
        u, g = exact(x), exact_gradient(x)
        return alpha * m**2 * d * np.pi**2 * u - 2 * alpha * m * g[:, 0] + g.sum(axis=1) + u

    return Problem(
        name="change-of-type",
        diffusion=a,  # (n,): a(x) I
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
        xp = array_namespace(x)
        return xp.exp(x[:, 0]) * xp.prod(xp.sin(np.pi * x[:, 1:] + np.pi / 4), axis=1)

    def exact_gradient(x):
        xp = array_namespace(x)
        t = np.pi * x[:, 1:] + np.pi / 4
        rest = np.pi * xp.exp(x[:, :1]) * xp.cos(t) * _products_without(xp.sin(t))
        return xp.concatenate([exact(x)[:, None], rest], axis=1)

    def hessian(x):
        xp = array_namespace(x)
        t = np.pi * x[:, 1:] + np.pi / 4
        u, g = exact(x), exact_gradient(x)
        H = xp.zeros((len(x), d, d), dtype=u.dtype)
        H[:, 0, 0] = u
        H[:, 0, 1:] = H[:, 1:, 0] = g[:, 1:]
        cos_t = xp.cos(t)
        H[:, 1:, 1:] = (np.pi**2 * xp.exp(x[:, 0])[:, None, None] * cos_t[:, :, None] * cos_t[:, None, :]
                        * _pair_products_without(xp.sin(t)))
        idx = xp.arange(1, d)
        H[:, idx, idx] = -np.pi**2 * u[:, None]
        return H

    def source(x):
        xp = array_namespace(x)
        return -xp.einsum("ij,nij->n", xp.asarray(A), hessian(x))

    def neumann(x, normal):
        xp = array_namespace(x, normal)
        return xp.einsum("nj,ij,ni->n", exact_gradient(x), xp.asarray(A), normal)

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


# --- space-time -----------------------------------------------------------------


def paper_space_time_problem(d: int = 2) -> Problem:
    """The paper's 2D + 1 parabolic problem (section 4.1, Table 4), a space-time problem.

    u_t - div(a grad u) + w . grad u + c u = f on (0, 1)^2 x (0, T) with
    a = I, w = 0, c = 1 and the exact solution

        u = S (1 - t),   S = sin(pi x) sin(pi y).

    Derivation of f: u_t = -S and -Laplace(u) = 2 pi^2 S (1 - t), so

        f = -S + (2 pi^2 + 1) S (1 - t).

    u_0 = u(x, 0) = S, g_D = u (zero on the boundary of the square).  The
    callables take space-time points (n, 3), time last; ``initial`` takes
    spatial points (n, 2); ``dim`` is the spatial dimension.
    """
    if d != 2:
        raise ProblemError(f"problem 'paper-2d1' exists over 2D meshes only, not {d}D")

    def space_part(x):
        xp = array_namespace(x)
        return xp.sin(np.pi * x[:, 0]) * xp.sin(np.pi * x[:, 1])

    def exact(y):
        return space_part(y) * (1.0 - y[:, 2])

    def source(y):
        S = space_part(y)
        return -S + (2 * np.pi**2 + 1.0) * S * (1.0 - y[:, 2])

    return Problem(
        name="paper-2d1",
        diffusion=1.0,
        reaction=1.0,
        source=source,
        dirichlet=exact,
        exact=exact,
        description="paper section 4.1 (2D + 1): u_t - Laplace u + u = f, u = sin(pi x) sin(pi y) (1 - t)",
        default_mesh=_default_mesh(2),
        dim=2,
        space_time=True,
        initial=space_part,
    )


def paper_space_time_3d_problem(d: int = 3) -> Problem:
    """The 3D + 1 analogue of ``paper-2d1``: paper-3d's coefficients and paper-2d1's time factor.

    u_t - div(a grad u) + w . grad u + c u = f on (0, 1)^3 x (0, T) with the
    spatial part of paper-3d's coefficients, a = eps I (eps = 0.01),
    w = (1 + x, 1 + y, 1 + z), c = 3 + x y z, and the exact solution

        u = S (1 - t),   S = sin(pi x) sin(pi y) sin(pi z).

    Derivation of f: u_t = -S, and the spatial operator applied to S is
    paper-3d's source f_3d (:func:`paper_problem`), linear in u, so

        f = -S + (1 - t) f_3d(x).

    u_0 = S, g_D = u (zero on the boundary of the cube).  The callables take
    space-time points (n, 4), time last; ``initial`` takes spatial points
    (n, 3); ``dim`` is the spatial dimension.
    """
    if d != 3:
        raise ProblemError(f"problem 'paper-3d1' exists over 3D meshes only, not {d}D")
    eps = 0.01

    def space_part(x):
        return _column_product(np.sin(np.pi * x[:, :3]))

    def exact(y):
        return space_part(y) * (1.0 - y[:, 3])

    def advection(y):
        return 1.0 + y[:, :3]

    def reaction(y):
        out = _column_product(y[:, :3])
        out += 3.0
        return out

    def source(y):
        steady = _paper_source(np.ascontiguousarray(y[:, :3], dtype=np.float64), eps)
        return (1.0 - y[:, 3]) * steady - space_part(y)

    return Problem(
        name="paper-3d1",
        diffusion=eps,
        advection=advection,
        reaction=reaction,
        source=source,
        dirichlet=exact,
        exact=exact,
        description="3D + 1 analogue of paper-2d1 with paper-3d's coefficients: u_t - 0.01 Laplace u "
                    "+ (1+x, 1+y, 1+z) . grad u + (3+xyz) u = f, u = sin(pi x) sin(pi y) sin(pi z) (1 - t)",
        default_mesh=_default_mesh(3),
        dim=3,
        space_time=True,
        initial=space_part,
    )


# ---------------------------------------------------------------------------
# the registry


#: built-in problems: name -> (builder taking d, dimensions it exists in or None = any)
BUILTIN_PROBLEMS: dict[str, tuple[Callable[[int], Problem], tuple[int, ...] | None]] = {
    "paper-2d": (lambda d: paper_problem(2), (2,)),
    "paper-3d": (lambda d: paper_problem(3), (3,)),
    "poisson": (poisson_problem, None),
    "advection": (advection_problem, None),
    "change-of-type": (change_of_type_problem, None),
    "neumann": (neumann_problem, None),
    "paper-2d1": (paper_space_time_problem, (2,)),
    "paper-3d1": (paper_space_time_3d_problem, (3,)),
    # nonlinear (nonlinear_builtin.py)
    "quasilinear": (quasilinear_problem, None),
    "cubic": (cubic_problem, None),
    "bratu": (bratu_problem, None),
    "fisher-kpp": (fisher_kpp_problem, None),
}

#: names accepted besides BUILTIN_PROBLEMS: ``paper`` (paper-2d or paper-3d by
#: dimension) and ``polynomial:P[:KIND[:SEED]]``
ALIASES = ("paper", "polynomial:P[:KIND[:SEED]]")


#: the space-time problem that poses a steady one in time (the hint of a steady problem given --time-slabs)
SPACE_TIME_SIBLINGS = {"paper-2d": "paper-2d1", "paper-3d": "paper-3d1"}


def builtin_names() -> list[str]:
    return list(BUILTIN_PROBLEMS) + list(ALIASES)


def did_you_mean(name: str) -> str:
    """`` (did you mean 'x'?)`` for the built-in names closest to a misspelled ``name``, else "".

    >>> did_you_mean("poison")
    " (did you mean 'poisson'?)"
    """
    import difflib

    names = list(BUILTIN_PROBLEMS) + ["paper", "polynomial"]
    close = difflib.get_close_matches(str(name).split(":")[0], names, n=2, cutoff=0.6)
    return f" (did you mean {' or '.join(repr(c) for c in close)}?)" if close else ""


def unknown_problem(name: str) -> ProblemError:
    """The error of a problem name that is neither built in nor a file or module."""
    return ProblemError(f"unknown problem {name!r}{did_you_mean(name)}; built-in problems: "
                        f"{', '.join(builtin_names())}, or path/to/file.py:NAME, or package.module:NAME")


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
        raise unknown_problem(name)
    build, dims = BUILTIN_PROBLEMS[name]
    if dim is None:
        dim = dims[0] if dims else 2
    if dims is not None and dim not in dims:
        raise DimensionError(f"problem {name!r} is {dims[0]}D, the mesh is {dim}D", dims[0], dim)
    if dim not in (2, 3, 4):
        raise ProblemError(f"problem {name!r}: dimension {dim} is not supported (2, 3 or 4)")
    return build(dim)
