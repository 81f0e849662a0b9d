"""The IP-dG residual of a nonlinear problem and its Jacobian, written pointwise (``DESIGN.md`` section 12).

For the problem

    -div(A(x, u, grad u) grad u) + b(x) . grad u + c(x, u) u = f(x, u)

write F = A grad u (the flux) and S = b . grad u + c u - f.  The residual of an iterate u tested with v is

    R(u; v) = sum_K int_K (F . grad v + S v)
            - sum_F int_F ({F} . [[v]] + {A grad v} . [[u]] - sigma [[u]] . [[v]])      (interior faces)
            - sum_K int_{inflow(K)} (b . n) [u] v                                           (upwind)
            - int_{Dirichlet} (F . n v + (A grad v . n)(u - g_D) - sigma (u - g_D) v)
            - int_{Neumann} g_N v - int_{inflow boundary} (b . n)(u - g_D) v,

which for coefficients free of u is the linear form of ``forms.py`` applied to u, minus the load.
{A grad v} takes A on v's own side, from u there: on an interior face each side has its own u, so
its own A (and its own element and fine cell, ``where``, for data per cell or element).  The penalty
sigma (from a_K at the iterate) and the boundary's split (n.A n > 0, b.n < 0) are frozen at the
iterate: the Jacobian does not differentiate them.

At a quadrature point every term pairs a test trace (v, grad v) with a trial trace (w, grad w), so
with the (1 + d)-vectors t(v) = (v, d_1 v, ..., d_d v) the Jacobian is

    J(u)[w, v] = sum over points  weight * t(v)^T M t(w)   and   R(u; v) = sum  weight * t(v)^T rho

with one (1 + d) x (1 + d) matrix M and one vector rho per point (and, on an interior face, per pair
of sides).  This module computes M and rho from the coefficients (array code, on the host or the
device); the kernels of ``linearized_kernels.py`` contract them with the basis.  Newton's M holds the
derivatives of F and S in u and grad u; Picard's (``newton=False``) freezes the coefficients: M is then
the linear form's, A, b and c at the iterate.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..problem.contract import reads_location
from ..problem.iterate import diffusion_at_iterate, scalar_at_iterate


@dataclass
class PointForms:
    """M (n, ..., D, D) or None (the residual alone) and rho (n, ..., D) at a batch of points.

    Volume and boundary points have one of each; interior-face points one rho per side s and one M per
    pair of sides (s, t): M[:, s, t] pairs the test trace on side s with the trial trace on side t.
    """

    M: Any
    rho: Any


def _dot(a, b):
    """Row-wise dot products of (n, d) arrays (one of them may be (1, d))."""
    return (a * b).sum(axis=1)


def _matvec(A, v):
    """(A v) row by row for A (n or 1, d, d), v (n, d)."""
    return (A * v[:, None, :]).sum(axis=2)


def _rmatvec(A, v):
    """(A^T v) row by row."""
    return (A * v[:, :, None]).sum(axis=1)


def _broadcast(a, n: int, xp):
    return a if a.shape[0] == n else xp.broadcast_to(a, (n,) + a.shape[1:])


class IterateCoefficients:
    """A, b, c, f and their derivatives at points for an iterate (u, grad u), in one array namespace.

    ``newton`` asks for the derivatives; without it (Picard, or the residual alone) coefficients are
    evaluated at the iterate and not differentiated.  Each evaluation may take the points' location
    ``where`` (a :class:`~polydg.problem.data.PointLocation`), for coefficients that read it.
    """

    def __init__(self, problem, xp=np, newton: bool = True):
        self.problem, self.xp, self.newton = problem, xp, newton

    def diffusion(self, x, u, g, where=None):
        p = self.problem
        if not p.has_diffusion:
            return None
        return diffusion_at_iterate(p, x, u, g, self.xp, self.newton, where)

    def scalar(self, name: str, x, u, g, where=None):
        p = self.problem
        if getattr(p, name) is None:
            return None, None
        return scalar_at_iterate(p, name, x, u, g, self.xp, self.newton, where)

    @property
    def sided_diffusion(self) -> bool:
        """Whether A may differ on the two sides of a face (a function of the iterate, or of where a point lies)."""
        p = self.problem
        return bool(p.iterate_arguments("diffusion")) or reads_location(p.diffusion)

    def advection(self, x):
        return self.problem.advection_at(x, self.xp) if self.problem.has_advection else None

    # -- the flux F = A grad u and its derivatives

    @staticmethod
    def flux(D, g):
        """F (n, d), dF/du (n, d) or None, dF/d(grad u) (n, d, d)."""
        F = _matvec(D.A, g)
        dF_du = None if D.dA_du is None else _matvec(D.dA_du, g)
        dF_dg = D.A if D.da_dgrad is None else D.A + g[:, :, None] * D.da_dgrad[:, None, :]
        return F, dF_du, dF_dg


def volume_forms(coefficients: IterateCoefficients, x, u, g, want_block: bool = True, where=None):
    """M (n, D, D) and rho (n, D) at volume points, and a (n,): max_i sum_j |A_ij| (the penalty's a_K).

    M = [[dS/du, dS/dg], [dF/du, dF/dg]], rho = [S, F].
    """
    xp = coefficients.xp
    n, d = x.shape
    D = d + 1
    dtype = x.dtype
    rho = xp.zeros((n, D), dtype=dtype)
    M = xp.zeros((n, D, D), dtype=dtype) if want_block else None
    a = xp.zeros(n, dtype=dtype)
    diff = coefficients.diffusion(x, u, g, where)
    if diff is not None:
        F, dF_du, dF_dg = coefficients.flux(diff, g)
        rho[:, 1:] = F
        a[...] = _broadcast(xp.abs(diff.A).sum(axis=2).max(axis=1), n, xp)
        if want_block:
            M[:, 1:, 1:] = dF_dg
            if dF_du is not None:
                M[:, 1:, 0] = dF_du
    b = coefficients.advection(x)
    S = xp.zeros(n, dtype=dtype)
    dS_du = xp.zeros(n, dtype=dtype)
    if b is not None:
        S += _dot(_broadcast(b, n, xp), g)
        if want_block:
            M[:, 0, 1:] = b
    c, dc = coefficients.scalar("reaction", x, u, g, where)
    if c is not None:
        S += c * u
        dS_du += c
        if dc is not None:
            dS_du += dc * u
    f, df = coefficients.scalar("source", x, u, g, where)
    if f is not None:
        S -= f
        if df is not None:
            dS_du -= df
    rho[:, 0] = S
    if want_block:
        M[:, 0, 0] = dS_du
    return PointForms(M, rho), a


def interior_forms(coefficients: IterateCoefficients, x, normal, sides, sigma, want_block: bool = True,
                   where=None) -> PointForms:
    """M (n, 2, 2, D, D) and rho (n, 2, D) at interior-face points.

    ``normal`` (n, d) points from side 0 to side 1; ``sides`` = ((u0, g0), (u1, g1)), the iterate on each
    side; ``sigma`` (n,) the face's penalty at each point; ``where`` = (where0, where1) or None, the points'
    location seen from each side.  With eps = (+1, -1) and [[u]] = (u0 - u1) n:

        rho_s = [eps_s (sigma [u] - {F}.n) + up_s,  -1/2 [u] A_s^T n]
        up_s  = -(b.n) [u] where eps_s b.n < 0 (the upwind term on the side the flow enters)
    """
    xp = coefficients.xp
    n, d = x.shape
    D = d + 1
    dtype = x.dtype
    (u0, g0), (u1, g1) = sides
    eps = (1.0, -1.0)
    jump = u0 - u1
    rho = xp.zeros((n, 2, D), dtype=dtype)
    M = xp.zeros((n, 2, 2, D, D), dtype=dtype) if want_block else None
    w0, w1 = where if where is not None else (None, None)
    diff0 = coefficients.diffusion(x, u0, g0, w0)
    if diff0 is not None:
        diff1 = coefficients.diffusion(x, u1, g1, w1) if coefficients.sided_diffusion else diff0
        flux = [coefficients.flux(diff0, g0), coefficients.flux(diff1, g1)]
        An = [_rmatvec(_broadcast(D_.A, n, xp), normal) for D_ in (diff0, diff1)]
        mean_flux = 0.5 * (_dot(flux[0][0], normal) + _dot(flux[1][0], normal))
        for s in range(2):
            rho[:, s, 0] = eps[s] * (sigma * jump - mean_flux)
            rho[:, s, 1:] = -0.5 * jump[:, None] * An[s]
        if want_block:
            for s in range(2):
                Ds = (diff0, diff1)[s]
                for t in range(2):
                    F_t, dF_du_t, dF_dg_t = flux[t]
                    m = M[:, s, t]
                    m[:, 0, 0] = sigma * (eps[s] * eps[t])
                    if dF_du_t is not None:
                        m[:, 0, 0] += -0.5 * eps[s] * _dot(dF_du_t, normal)
                    m[:, 0, 1:] = -0.5 * eps[s] * _rmatvec(_broadcast(dF_dg_t, n, xp), normal)
                    m[:, 1:, 0] = -0.5 * eps[t] * An[s]
                if Ds.dA_du is not None:  # -1/2 [u] (dA_s/du w) grad v . n: trial on v's side
                    M[:, s, s, 1:, 0] += -0.5 * jump[:, None] * _rmatvec(Ds.dA_du, normal)
                if Ds.da_dgrad is not None:  # -1/2 [u] (da_s/dg . grad w) grad v . n
                    M[:, s, s, 1:, 1:] += -0.5 * jump[:, None, None] * normal[:, :, None] * Ds.da_dgrad[:, None, :]
    else:
        for s in range(2):
            rho[:, s, 0] = eps[s] * sigma * jump
        if want_block:
            for s in range(2):
                for t in range(2):
                    M[:, s, t, 0, 0] = sigma * (eps[s] * eps[t])
    b = coefficients.advection(x)
    if b is not None:
        bn = _dot(_broadcast(b, n, xp), normal)
        for s in range(2):
            inflow = (eps[s] * bn) < 0
            rho[:, s, 0] += xp.where(inflow, -bn * jump, 0.0)
            if want_block:
                for t in range(2):
                    M[:, s, t, 0, 0] += xp.where(inflow, -bn * eps[t], 0.0)
    return PointForms(M, rho)


def boundary_forms(coefficients: IterateCoefficients, x, normal, u, g, sigma, want_block: bool = True,
                   where=None) -> PointForms:
    """M (n, D, D) and rho (n, D) at boundary-face points (``normal`` outward, ``sigma`` per point, ``where``
    their location or None).

    Split pointwise as the linear forms are: Dirichlet where n.A n > 0 off the Neumann part, Neumann where
    n.A n > 0 on it, inflow where b.n < 0 off the diffusive Neumann part.
    """
    problem, xp = coefficients.problem, coefficients.xp
    n, d = x.shape
    D = d + 1
    dtype = x.dtype
    rho = xp.zeros((n, D), dtype=dtype)
    M = xp.zeros((n, D, D), dtype=dtype) if want_block else None
    gD = problem.dirichlet_at(x, xp) if problem.dirichlet is not None else xp.zeros((1,), dtype=dtype)
    gD = _broadcast(gD, n, xp)
    neumann = _broadcast(problem.neumann_mask(x, normal, xp), n, xp) if problem.has_neumann else None
    diffusive = xp.zeros(n, dtype=bool)
    diff = coefficients.diffusion(x, u, g, where)
    if diff is not None:
        A = _broadcast(diff.A, n, xp)
        An = _rmatvec(A, normal)
        diffusive = _dot(An, normal) > 0
        dirichlet = diffusive if neumann is None else diffusive & ~neumann
        r = xp.where(dirichlet, u - gD, 0.0)
        on = dirichlet.astype(dtype)
        F, dF_du, dF_dg = coefficients.flux(diff, g)
        rho[:, 0] = on * (sigma * r - _dot(F, normal))
        rho[:, 1:] = -r[:, None] * An
        if want_block:
            M[:, 0, 0] = on * sigma
            if dF_du is not None:
                M[:, 0, 0] -= on * _dot(dF_du, normal)
            M[:, 0, 1:] = -on[:, None] * _rmatvec(_broadcast(dF_dg, n, xp), normal)
            M[:, 1:, 0] = -on[:, None] * An
            if diff.dA_du is not None:
                M[:, 1:, 0] -= r[:, None] * _rmatvec(diff.dA_du, normal)
            if diff.da_dgrad is not None:
                M[:, 1:, 1:] -= r[:, None, None] * normal[:, :, None] * diff.da_dgrad[:, None, :]
        if neumann is not None and problem.neumann is not None:
            gN = _broadcast(problem.neumann_at(x, normal, xp), n, xp)
            rho[:, 0] -= xp.where(diffusive & neumann, gN, 0.0)
    b = coefficients.advection(x)
    if b is not None:
        bn = _dot(_broadcast(b, n, xp), normal)
        inflow = bn < 0
        if neumann is not None:
            inflow = inflow & ~(diffusive & neumann)
        rho[:, 0] += xp.where(inflow, -bn * (u - gD), 0.0)
        if want_block:
            M[:, 0, 0] += xp.where(inflow, -bn, 0.0)
    return PointForms(M, rho)
