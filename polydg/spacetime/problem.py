"""The steady (d+1)-dimensional problem of one space-time slab (paper eq. 2.9, docs/design.md §10).

A space-time problem is

    u_t - div_x(a grad_x u) + w . grad_x u + c u = f   in Omega x (0, T),
    u = g_D on the lateral boundary (diffusive or inflow part),  u(., 0) = u_0,

given as a :class:`~polydg.problem.Problem` with ``space_time=True``: its
callables take points (n, d+1) with time last; ``diffusion`` returns the
SPATIAL a, (n,) (a I) or (n, d, d), or is a scalar / (d, d) constant;
``advection`` the spatial w, (n, d) or a (d,) constant; ``reaction``,
``source``, ``dirichlet`` and ``exact`` return (n,); ``initial`` is u_0 of
spatial points (n, d) or a constant.

In the variables y = (x, t) this is a steady problem with A = diag(a, 0) and
b = (w, 1): :func:`slab_problem` returns it, for the steady assembler.  Its
boundary conditions come out right by themselves: on the top face
(n = e_t) b.n = 1 (outflow, nothing), on the bottom face (n = -e_t)
n.A n = 0 and b.n = -1 (inflow), on lateral faces n = (n_x, 0) and the
spatial classification is unchanged.  The bottom face's inflow value, the
previous slab's solution, is not a pointwise coefficient here: it is added
as its own load vector (:mod:`polydg.spacetime.trace`), so ``dirichlet``
of the slab problem is zero on the bottom face.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ..backend import array_namespace
from ..errors import ProblemError
from ..problem import Problem

#: relative distance to t0 (in slab lengths) below which a boundary point is on the bottom face
BOTTOM_TOL = 1e-9


def _diffusion(problem: Problem, d: int) -> Any:
    """diag(a, 0) from the spatial a: a constant stays a constant."""
    a = problem.diffusion
    if a is None:
        return None

    def embed(value: np.ndarray, n: int) -> np.ndarray:
        xp = array_namespace(value)  # the points' arrays: CuPy's on a GPU
        A = xp.zeros((n, d + 1, d + 1), dtype=np.result_type(value.dtype, np.float64))  # complex for Newton's step
        if value.shape == (n,):
            A[:, xp.arange(d), xp.arange(d)] = value[:, None]
        elif value.shape == (n, d, d):
            A[:, :d, :d] = value
        else:
            raise ProblemError(f"problem {problem.name!r}: diffusion returned shape {value.shape} for {n} "
                               f"space-time points, expected the spatial ({n},) or ({n}, {d}, {d})")
        return A

    if not callable(a):
        array = np.asarray(a, dtype=np.float64)
        if array.ndim == 0:
            array = array * np.eye(d)
        if array.shape != (d, d):
            raise ProblemError(f"problem {problem.name!r}: constant diffusion has shape {array.shape}, "
                               f"expected a scalar or the spatial ({d}, {d})")
        return embed(array[None], 1)[0]

    named = problem.iterate_arguments("diffusion")
    if not named:
        def diffusion(y: np.ndarray) -> np.ndarray:
            return embed(_as_array(problem._call("diffusion", y), y, np.float64), len(y))
        return diffusion
    return _of_iterate(lambda y, u, grad_u: embed(_as_array(problem._call("diffusion", y, u=u, grad_u=grad_u), y),
                                                  len(y)), named, d)


def _as_array(value, y, dtype=None):
    """A coefficient's value as an array of the kind of the points ``y`` (CuPy's on a GPU)."""
    return array_namespace(y).asarray(value, dtype=dtype)


def _of_iterate(evaluate: Callable, named: tuple, d: int) -> Callable:
    """A slab coefficient of the iterate with the spatial coefficient's arguments: ``grad_u`` of the slab is
    the space-time gradient, of which the spatial coefficient sees the first d components."""
    if named == ("u",):
        return lambda y, u: evaluate(y, u, None)
    if named == ("grad_u",):
        return lambda y, grad_u: evaluate(y, None, grad_u[:, :d])
    return lambda y, u, grad_u: evaluate(y, u, grad_u[:, :d])


def _diffusion_derivatives(problem: Problem, d: int) -> tuple[Any, Any]:
    """diffusion_du and diffusion_dgrad_u of the slab, from the spatial problem's (None where it has none)."""
    du = dg = None
    if problem.diffusion_du is not None:
        named = problem.iterate_arguments("diffusion_du")

        def embed(value, n):
            xp = array_namespace(value)
            A = xp.zeros((n, d + 1, d + 1), dtype=np.result_type(value.dtype, np.float64))
            if value.shape == (n,):
                A[:, xp.arange(d), xp.arange(d)] = value[:, None]
            else:
                A[:, :d, :d] = value
            return A

        du = _of_iterate(lambda y, u, g: embed(_as_array(problem._call("diffusion_du", y, u=u, grad_u=g), y), len(y)),
                         named, d)
    if problem.diffusion_dgrad_u is not None:
        named = problem.iterate_arguments("diffusion_dgrad_u")

        def extend(value):  # no dependence on the time derivative
            xp = array_namespace(value)
            return xp.column_stack([value, xp.zeros(len(value), dtype=value.dtype)])

        dg = _of_iterate(lambda y, u, g: extend(_as_array(problem._call("diffusion_dgrad_u", y, u=u, grad_u=g), y)),
                         named, d)
    return du, dg


def _advection(problem: Problem, d: int) -> Any:
    """(w, 1) from the spatial w: a constant stays a constant."""
    w = problem.advection
    if not callable(w):
        spatial = np.zeros(d) if w is None else np.asarray(w, dtype=np.float64).reshape(-1)
        if spatial.shape != (d,):
            raise ProblemError(f"problem {problem.name!r}: constant advection has shape {spatial.shape}, "
                               f"expected the spatial ({d},)")
        return np.append(spatial, 1.0)

    def advection(y: np.ndarray) -> np.ndarray:
        xp = array_namespace(y)
        value = xp.asarray(problem._call("advection", y), dtype=np.float64)
        if value.shape != (len(y), d):
            raise ProblemError(f"problem {problem.name!r}: advection returned shape {value.shape} for {len(y)} "
                               f"space-time points, expected the spatial ({len(y)}, {d})")
        return xp.column_stack([value, xp.ones(len(y))])

    return advection


def _lateral_dirichlet(problem: Problem, t0: float, t1: float) -> Any:
    """g_D on the lateral boundary, zero on the bottom face (whose inflow value is a load of its own)."""
    g = problem.dirichlet
    if g is None or (not callable(g) and not np.any(np.asarray(g) != 0)):
        return g  # zero everywhere, the bottom included
    tol = BOTTOM_TOL * (t1 - t0)

    def dirichlet(y: np.ndarray) -> np.ndarray:
        n, xp = len(y), array_namespace(y)
        value = xp.asarray(problem._call("dirichlet", y) if callable(g) else xp.full(n, float(g)), dtype=np.float64)
        if value.shape != (n,):
            raise ProblemError(f"problem {problem.name!r}: dirichlet returned shape {value.shape} for {n} "
                               f"points, expected ({n},)")
        return xp.where(xp.abs(y[:, -1] - t0) <= tol, 0.0, value)

    return dirichlet


def check_space_time(problem: Problem) -> None:
    """Raise :class:`ProblemError` unless ``problem`` can be marched in time."""
    if not problem.space_time:
        raise ProblemError(f"problem {problem.name!r} is steady (space_time is False): it has no time to march in")
    if problem.initial is None:
        raise ProblemError(f"space-time problem {problem.name!r} has no initial value (initial)")
    if not callable(problem.initial) and np.ndim(problem.initial) != 0:
        raise ProblemError(f"space-time problem {problem.name!r}: initial must be a number or a function of x, got "
                           f"an array of shape {np.shape(problem.initial)} (a function of the points' x is the "
                           "way to give values that vary)")


def slab_problem(problem: Problem, d: int, t0: float, t1: float) -> Problem:
    """The steady (d+1)-dimensional :class:`Problem` of the slab Omega x (t0, t1).

    A = diag(a, 0), b = (w, 1); reaction, source, exact and the Neumann
    data pass through (they already take space-time points); dirichlet is
    g_D off the bottom face and 0 on it (see the module docstring).  A
    coefficient of the iterate stays one (a nonlinear slab): its u is the
    slab's, its grad_u the spatial part of the slab's gradient.
    """
    check_space_time(problem)
    diffusion_du, diffusion_dgrad_u = _diffusion_derivatives(problem, d)
    return Problem(
        name=problem.name,
        diffusion=_diffusion(problem, d),
        advection=_advection(problem, d),
        reaction=problem.reaction,
        source=problem.source,
        dirichlet=_lateral_dirichlet(problem, t0, t1),
        neumann=problem.neumann,
        is_neumann=problem.is_neumann,
        exact=problem.exact,
        description=f"slab ({t0:g}, {t1:g}) of {problem.description or problem.name}",
        dim=d + 1,
        diffusion_du=diffusion_du,
        diffusion_dgrad_u=diffusion_dgrad_u,
        reaction_du=problem.reaction_du,
        source_du=problem.source_du,
    )


def initial_values(problem: Problem, x: Any, evaluate: Callable[[Any], Any] | None = None) -> Any:
    """u_0 at spatial points x (n, d): (n,), checked; in x's array namespace when ``evaluate`` (x -> values,
    e.g. on the device) is given, else NumPy."""
    u0: Callable[..., Any] | Any = problem.initial
    n = len(x)
    xp = array_namespace(x)
    if not callable(u0):
        return xp.full(n, 0.0 if u0 is None else float(np.asarray(u0, dtype=np.float64)))
    try:
        value = np.asarray(u0(x), dtype=np.float64) if evaluate is None else evaluate(x)
    except ProblemError:
        raise
    except Exception as exc:
        raise ProblemError(f"problem {problem.name!r}: initial raised {type(exc).__name__} at {n} points: "
                           f"{str(exc).splitlines()[0] if str(exc) else ''}") from exc
    if tuple(value.shape) != (n,):
        raise ProblemError(f"problem {problem.name!r}: initial returned shape {tuple(value.shape)} for {n} "
                           f"spatial points, expected ({n},)")
    if not bool(array_namespace(value).isfinite(value).all()):
        raise ProblemError(f"problem {problem.name!r}: initial returned non-finite values")
    return value


__all__ = ["BOTTOM_TOL", "check_space_time", "slab_problem", "initial_values"]
