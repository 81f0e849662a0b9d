"""Coefficients of the discrete solution and their derivatives at points (docs/design.md §6).

A nonlinear problem's diffusion, reaction or source names the iterate's arguments ``u`` (values,
``(n,)``) and ``grad_u`` (gradients, ``(n, d)``) besides x.  Newton's method needs their derivatives
with respect to u and grad u; a problem may give them (``diffusion_du``, ``diffusion_dgrad_u``,
``reaction_du``, ``source_du``, with the coefficient's own arguments), and otherwise they are computed
here by the complex step: for a callable analytic in its argument (polynomials, exp, sin, powers, ...),

    f'(u) = Im f(u + i h) / h,   h = 1e-30,

which has no subtraction and so is exact to round-off for any h this small.  One complex evaluation
gives the value (its real part) and the derivative in u; the derivative in grad u takes one more per
component.  A callable that drops the imaginary part (``abs``, ``np.real``, a cast to float) returns real
values for a complex u: that is caught and reported, with the derivative to give instead.

A diffusion that depends on grad u must be scalar (``a(x, u, grad_u) I``, the p-Laplacian type); one
that depends on u alone may be scalar or a tensor.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

try:
    from numpy.exceptions import ComplexWarning
except ImportError:  # NumPy < 1.25
    from numpy import ComplexWarning

from ..errors import ProblemError

#: the imaginary step of the complex-step derivative
COMPLEX_STEP = 1e-30
#: an imaginary part above this (relative to 1 + |value|) is a complex value, not h times a derivative
COMPLEX_VALUED = 1e-12


@dataclass
class DiffusionAtIterate:
    """A(x, u, grad u) at n points and what Newton needs of it.

    A : (n, d, d), or (1, d, d) when it depends on neither x nor the iterate; (n, 1, 1) for a scalar a of
        the iterate, A = a I (a view of a: the identity is not expanded at every point)
    dA_du : (n, d, d), or (n, 1, 1) for dA/du = a'(u) I; None (A free of u, or not asked for)
    da_dgrad : (n, d) or None: d a / d grad u of a scalar a (A = a I); None when A is free of grad u
    """

    A: Any
    dA_du: Any = None
    da_dgrad: Any = None


def _complex_call(problem, name: str, x, u, grad_u, xp, wrt: str, k: int = 0, where=None):
    """``name``'s callable with an imaginary step on u (``wrt="u"``) or on component k of grad u; returns
    (real part, imaginary part / h).

    Real values back mean a callable free of that argument (derivative 0), or one that dropped the
    imaginary part: a second, real evaluation with the argument moved tells them apart.
    """
    h = COMPLEX_STEP
    if wrt == "u":
        u = u + 1j * h
    else:
        step = xp.zeros(grad_u.shape[1], dtype=np.complex128)
        step[k] = 1j * h
        grad_u = grad_u + step
    with warnings.catch_warnings():  # a cast of the complex argument to float is reported below, once
        warnings.simplefilter("ignore", ComplexWarning)
        value = xp.asarray(problem._call(name, x, u=u, grad_u=grad_u, where=where))
    if value.dtype.kind == "c":
        # an analytic real function's imaginary part is h f'(u), round-off beside its value: more is a value
        # that is complex at real arguments (a logarithm or a root of a negative number), NaN in real arithmetic
        if bool(xp.any(_complex_valued(value, xp))):  # then at the real arguments themselves: complex there?
            plain = xp.asarray(problem._call(name, x, u=u.real + 0j, grad_u=grad_u.real + 0j, where=where))
            bad = _complex_valued(plain, xp) if plain.dtype.kind == "c" else xp.zeros(plain.shape, dtype=bool)
            bad = bad.reshape(len(bad), -1).any(axis=1) if bad.ndim > 1 else bad  # per point (tensors: any entry)
            if bool(xp.any(bad)):
                flat = plain.reshape(len(plain), -1)
                i = int(xp.argmax(bad))
                first = complex(flat[i, int(xp.argmax(_complex_valued(flat[i], xp)))])
                raise ProblemError(
                    f"problem {problem.name!r}: {name} is not real at {int(bad.sum())} of {len(bad)} points (e.g. "
                    f"{first:.6g} at u = {float(u.real.reshape(-1)[i]):.6g}): a logarithm or root of a negative "
                    "number?")
        return value.real, value.imag / h
    # real values: either the callable does not depend on this argument, or it dropped the imaginary part
    u_real, g_real = u.real, grad_u.real
    if wrt == "u":
        moved = problem._call(name, x, u=u_real + 1e-3 * (1 + abs(u_real)), grad_u=g_real, where=where)
    else:
        bump = xp.zeros(g_real.shape[1])
        bump[k] = 1.0
        moved = problem._call(name, x, u=u_real, grad_u=g_real + 1e-3 * (1 + abs(g_real)) * bump, where=where)
    if bool(xp.any(xp.asarray(moved) != value)):
        derivative = f"{name}_du" if wrt == "u" else f"{name}_dgrad_u"
        raise ProblemError(
            f"problem {problem.name!r}: {name} returned real values for a complex {wrt}: its derivative cannot be "
            f"taken by the complex step (abs, a cast to float, ...); give it as {derivative}")
    return value, xp.zeros_like(value)


def _complex_valued(value, xp):
    """Where ``value``'s imaginary part is more than round-off beside its real part (an analytic real
    function's, at a step of h, is h f' there)."""
    return xp.abs(value.imag) > COMPLEX_VALUED * (1 + xp.abs(value.real))


def _checked_like(problem, name: str, value, x, shape: tuple, xp, dtype):
    return problem._checked(name, value, x, shape, xp, dtype)


def diffusion_at_iterate(problem, x, u=None, grad_u=None, xp=np, derivatives: bool = True,
                         where=None) -> DiffusionAtIterate:
    """A at the points for the iterate (u, grad_u) there; with ``derivatives``, dA/du and da/d(grad u).
    ``where`` locates the points (a :class:`~polydg.problem.data.PointLocation`), for a diffusion that
    reads it (data per cell or element).

    The values are checked as :meth:`~polydg.problem.Problem.diffusion_at` checks them (finite, symmetric,
    non-negative diagonal; a scalar a finite and >= 0); the derivatives for shape and finiteness.
    """
    named = problem.iterate_arguments("diffusion")
    if not named:
        return DiffusionAtIterate(problem.diffusion_at(x, xp, where=where))
    x = xp.asarray(x)
    n, d = int(x.shape[0]), int(x.shape[1])
    dtype = x.dtype if x.dtype.kind == "f" else xp.float64
    given_du, given_dg = problem.diffusion_du, problem.diffusion_dgrad_u
    dA = dg = None
    if derivatives and "u" in named and given_du is None:
        value, dA = _complex_call(problem, "diffusion", x, u, grad_u, xp, "u", where=where)
    else:
        value = xp.asarray(problem._call("diffusion", x, u=u, grad_u=grad_u, where=where))
        if derivatives and "u" in named:
            dA = xp.asarray(problem._call("diffusion_du", x, u=u, grad_u=grad_u, where=where))
    scalar = tuple(value.shape) == (n,)
    if "grad_u" in named and not scalar:
        raise ProblemError(
            f"problem {problem.name!r}: a diffusion of grad_u must be scalar, a(x, u, grad_u) returning (n,) "
            f"(the p-Laplacian type); got shape {tuple(value.shape)}")
    if derivatives and "grad_u" in named:
        if given_dg is None:
            dg = xp.stack([_complex_call(problem, "diffusion", x, u, grad_u, xp, "grad_u", k, where)[1]
                           for k in range(d)], axis=1)
        else:
            dg = xp.asarray(problem._call("diffusion_dgrad_u", x, u=u, grad_u=grad_u, where=where))
        dg = _checked_like(problem, "diffusion_dgrad_u", dg, x, (n, d), xp, dtype)
    if scalar:  # a I: symmetric by construction; a must be >= 0
        a = problem._checked("diffusion", value, x, (n,), xp, dtype)
        if n and bool((a < 0).any()):
            i = int(xp.flatnonzero(a < 0)[0])
            problem._fail("diffusion", f"is negative at x = {_format_point(x[i])}: {float(a[i])!r}")
        A = a[:, None, None]
    else:
        A = problem._checked("diffusion", value, x, (n, d, d), xp, dtype)
        problem.check_diffusion_values(A, x, xp)
    if dA is not None:  # a'(u) of a scalar (or a scalar given for a tensor): a'(u) I, kept as (n, 1, 1)
        dA = (_checked_like(problem, "diffusion_du", dA, x, (n,), xp, dtype)[:, None, None]
              if tuple(dA.shape) == (n,) else _checked_like(problem, "diffusion_du", dA, x, (n, d, d), xp, dtype))
    return DiffusionAtIterate(A, dA, dg)


def _format_point(x) -> str:
    return "[" + ", ".join(f"{float(v):.6g}" for v in (x.get() if hasattr(x, "get") else x)) + "]"


def scalar_at_iterate(problem, name: str, x, u=None, grad_u=None, xp=np, derivatives: bool = True, where=None):
    """(value, d value / du) of reaction or source at the points for the iterate; the derivative is None
    when the coefficient is free of u or ``derivatives`` is False.  A reaction or source may name u only."""
    named = problem.iterate_arguments(name)
    at = getattr(problem, f"{name}_at")
    if "grad_u" in named:
        raise ProblemError(f"problem {problem.name!r}: {name} may depend on u, not on grad_u")
    if not named or not derivatives:
        return at(x, xp, u=u, grad_u=grad_u, where=where), None
    x = xp.asarray(x)
    n = int(x.shape[0])
    dtype = x.dtype if x.dtype.kind == "f" else xp.float64
    if getattr(problem, f"{name}_du") is None:
        value, du = _complex_call(problem, name, x, u, grad_u, xp, "u", where=where)
        value = problem._checked(name, value, x, (n,), xp, dtype)
    else:
        value = at(x, xp, u=u, grad_u=grad_u, where=where)
        du = xp.asarray(problem._call(f"{name}_du", x, u=u, grad_u=grad_u, where=where))
    return value, _checked_like(problem, f"{name}_du", du, x, (n,), xp, dtype)
