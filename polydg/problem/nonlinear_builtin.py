"""Built-in nonlinear problems (docs/design.md §6): the reference problems used by other codes.

* ``quasilinear``: -div((1 + u^2) grad u) = f with a manufactured smooth solution (FEniCSx's tutorial,
  dolfin_dg): the convergence test of the nonlinear path;
* ``cubic``: -Laplace u + 3 u^3 = 1, u = 0 on the boundary (NGSolve's nonlinear tutorial);
* ``bratu``: -Laplace u = e^u, u = 0 on the boundary (below the fold at lambda ~ 6.8 in 2D);
* ``fisher-kpp``: the space-time u_t - Laplace u = u (1 - u) + f with the manufactured solution
  u = (prod_k cos(pi x_k) + 2) e^(-t) (lymph's test), in 2D + 1 and 3D + 1.

The callables are array code (``xp`` of their arguments), so they run on the device too.
"""

from __future__ import annotations

import numpy as np

from ..backend import array_namespace
from .contract import Problem, _default_mesh


def quasilinear_problem(d: int) -> Problem:
    """-div((1 + u^2) grad u) = f in (0, 1)^d, u = g_D on the boundary, with the exact solution

        u = x_0 + S,   S = prod_k sin(pi x_k),

    so grad u = e_0 + grad S, Laplace u = -d pi^2 S and f = -(1 + u^2) Laplace u - 2 u |grad u|^2.
    """

    def parts(x):
        xp = array_namespace(x)
        s, c = xp.sin(np.pi * x), xp.cos(np.pi * x)
        S = xp.prod(s, axis=1)
        grad = xp.stack([np.pi * c[:, k] * xp.prod(xp.concatenate([s[:, :k], s[:, k + 1:]], axis=1), axis=1)
                         for k in range(d)], axis=1)
        return S, grad

    def exact(x):
        return x[:, 0] + parts(x)[0]

    def exact_gradient(x):
        grad = parts(x)[1]
        grad[:, 0] += 1.0
        return grad

    def source(x):
        S, _ = parts(x)
        u, g = exact(x), exact_gradient(x)
        return (1 + u**2) * d * np.pi**2 * S - 2 * u * (g**2).sum(axis=1)

    return Problem(
        name="quasilinear", diffusion=lambda x, u: 1 + u**2, diffusion_du=lambda x, u: 2 * u, source=source,
        dirichlet=exact, exact=exact, exact_gradient=exact_gradient, dim=d, default_mesh=_default_mesh(d),
        description="-div((1 + u^2) grad u) = f, u = x + prod sin(pi x_k) (manufactured)")


def cubic_problem(d: int) -> Problem:
    """-Laplace u + 3 u^3 = 1 in (0, 1)^d, u = 0 on the boundary: the reaction c(u) u with c(u) = 3 u^2."""
    return Problem(
        name="cubic", diffusion=1.0, reaction=lambda x, u: 3 * u**2, reaction_du=lambda x, u: 6 * u, source=1.0,
        dim=d, default_mesh=_default_mesh(d), description="-Laplace u + 3 u^3 = 1, u = 0 on the boundary")


def bratu_problem(d: int) -> Problem:
    """-Laplace u = e^u in (0, 1)^d, u = 0 on the boundary (the lower branch, reached from u = 0)."""

    def source(x, u):
        return array_namespace(u).exp(u)

    return Problem(name="bratu", diffusion=1.0, source=source, source_du=source, dim=d,
                   default_mesh=_default_mesh(d), description="-Laplace u = e^u (Bratu), u = 0 on the boundary")


def fisher_kpp_problem(d: int) -> Problem:
    """u_t - Laplace u = u (1 - u) + f on (0, 1)^d x (0, T) with the exact solution

        u = (C + 2) e^(-t),   C = prod_k cos(pi x_k),

    so u_t = -u, -Laplace u = d pi^2 C e^(-t) and f = -u + d pi^2 C e^(-t) - u (1 - u).  As a reaction
    term c(u) u with c(u) = u - 1; g_D = u on the boundary, u_0 = C + 2.  The callables take space-time
    points (n, d + 1), time last; ``initial`` spatial points.
    """

    def space_part(x):
        xp = array_namespace(x)
        return xp.prod(xp.cos(np.pi * x[:, :d]), axis=1)

    def exact(y):
        return (space_part(y) + 2.0) * array_namespace(y).exp(-y[:, d])

    def source(y):
        u = exact(y)
        return -u + d * np.pi**2 * space_part(y) * array_namespace(y).exp(-y[:, d]) - u * (1 - u)

    return Problem(
        name="fisher-kpp", diffusion=1.0, reaction=lambda y, u: u - 1.0, reaction_du=lambda y, u: 1.0 + 0.0 * u,
        source=source, dirichlet=exact, exact=exact, dim=d, space_time=True,
        initial=lambda x: space_part(x) + 2.0, default_mesh=_default_mesh(d),
        description="u_t - Laplace u = u (1 - u) + f (Fisher-KPP), u = (prod cos(pi x_k) + 2) e^-t")


__all__ = ["quasilinear_problem", "cubic_problem", "bratu_problem", "fisher_kpp_problem"]
