"""The IP-dG residual of a nonlinear problem and its Jacobian, written pointwise (docs/design.md §8).

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
its own A (and its own element and fine cell, ``where``, for data per cell or element).  The penalty sigma (from a_K at the iterate) and the boundary's split (n.A n > 0, b.n < 0)
are frozen at the iterate: the Jacobian does not differentiate them.

At a quadrature point every term pairs a test trace (v, grad v) with a trial trace (w, grad w), so
with the (1 + d)-vectors t(v) = (v, d_1 v, ..., d_d v) the Jacobian is

    J(u)[w, v] = sum over points  weight * t(v)^T M t(w)   and   R(u; v) = sum  weight * t(v)^T rho

with one (1 + d) x (1 + d) matrix M and one vector rho per point (on an interior face, one rho per
side s and one M per pair of sides (s, t): test trace on side s, trial trace on side t).  Newton's M:

    volume:  M = [[dS/du, b^T], [dF/du, dF/dgrad u]],   rho = [S, F],
             dF/du = (dA/du) grad u,   dF/dgrad u = A + grad u (da/dgrad u)^T  (a scalar a of grad u)

and the faces' likewise (the functions below).  Picard's M is the same with the derivatives of the
coefficients left out (dA/du, da/dgrad u, dc/du, df/du zero): the linear form at the iterate's A, b, c.

Two steps: the problem's coefficients are evaluated at the points as arrays (:class:`CoefficientsAtIterate`,
user code, on the host or the device), then M and rho are formed point by point by the functions here,
which hold only scalar arithmetic: Numba compiles them into CPU loops (:func:`volume_forms` and the
others) and numba-cuda into device kernels (``cuda_linearized.py``).  Coefficients absent, constant or
not differentiated are one-row arrays (zero when absent), never expanded to the points; a scalar
diffusion a(u) (and its a'(u)) is kept as (n, 1, 1), a I read entry by entry (:func:`_entry`).  The
outputs (M, rho, a) are taken from the executor's workspace where it has one: the same memory for every
chunk and iterate.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numba import njit

from ..backend import contiguous
from ..problem.contract import reads_location
from ..problem.iterate import diffusion_at_iterate, scalar_at_iterate
from ..threads import parallel_range, range_kernel


@dataclass
class PointForms:
    """M (n, ..., D, D) or None (the residual alone) and rho (n, ..., D) at a batch of points; ``bordered``:
    M's lower-right d x d blocks are zero (face points where A is free of grad u)."""

    M: Any
    rho: Any
    bordered: bool = False


@dataclass
class DiffusionValues:
    """A (n or 1, d, d), dA/du (n or 1, d, d) and da/d(grad u) (n or 1, d) at points; zeros (one row) where a
    derivative is absent or not asked for.  A and dA/du are (n or 1, 1, 1) where they are a scalar times
    the identity."""

    A: Any
    dA: Any
    dag: Any


class XOnlyValues:
    """Coefficient values that depend on x alone (not on u or grad u), kept from one linearisation of a
    system to the next: a batch of points (named by its pass and first element) is the same at every
    iterate, and so are such values there.  Kept for one problem, up to ``limit_bytes`` in all (values
    beyond it are computed at every iterate)."""

    def __init__(self, limit_bytes: float):
        self.limit, self.values, self.nbytes, self.problem = limit_bytes, {}, 0, None

    def get(self, problem, key: tuple, compute):
        """The value kept under ``key`` for ``problem``, or ``compute()`` (kept while within the limit)."""
        if problem is not self.problem:
            self.values, self.nbytes, self.problem = {}, 0, problem
        value = self.values.get(key)
        if value is None:
            value = compute()
            if self.nbytes + value.nbytes <= self.limit:
                # a view (of buffers that the next batch overwrites, say) is kept as a copy
                self.values[key] = value if value.base is None else value.copy()
                self.nbytes += value.nbytes
        return value


class CoefficientsAtIterate:
    """The problem's coefficients (and, for Newton, their derivatives in u and grad u) at points, for an
    iterate given there, in the array namespace ``xp``.  ``newton=False`` (Picard, or the residual alone)
    evaluates them at the iterate without derivatives.  ``where`` locates the points (a
    :class:`~polydg.problem.data.PointLocation`, or None) for coefficients that read it.  The forms'
    outputs come from ``workspace`` (a :class:`~polydg.assembly.workspace.Workspace`) when one is given;
    with ``x_only`` (:class:`XOnlyValues`), the values free of u and grad u at the batch named by
    ``batch`` (set by the passes) are computed once per system."""

    def __init__(self, problem, xp=np, newton: bool = True, workspace=None, x_only: XOnlyValues | None = None):
        self.problem, self.xp, self.newton, self.workspace, self.x_only = problem, xp, newton, workspace, x_only
        self.batch = None

    def _x_only(self, name: str, compute):
        if self.x_only is None or self.batch is None:
            return compute()
        return self.x_only.get(self.problem, (self.batch, name), compute)

    def _zeros(self, *shape):
        return self.xp.zeros((1,) + shape)

    def empty(self, name: str, shape: tuple):
        """An uninitialised float64 array: the workspace's buffer ``name`` (valid until its next take), or new."""
        if self.workspace is None:
            return self.xp.empty(shape)
        return self.workspace.take(name, shape, np.float64)

    @property
    def sided_diffusion(self) -> bool:
        """Whether A may differ on the two sides of a face: a function of the iterate, or of where a point lies."""
        p = self.problem
        return bool(p.iterate_arguments("diffusion")) or reads_location(p.diffusion)

    def diffusion(self, x, u, g, where=None, side: int = 0) -> DiffusionValues:
        """A and its derivatives at the points, seen from ``side`` (of an interior face)."""
        d = int(x.shape[1])
        if not self.problem.has_diffusion:
            return DiffusionValues(self._zeros(1, 1), self._zeros(1, 1), self._zeros(d))
        if not self.problem.iterate_arguments("diffusion"):
            A = self._x_only(f"diffusion{side}", lambda: contiguous(self.xp,
                diffusion_at_iterate(self.problem, x, xp=self.xp, where=where).A, dtype=np.float64))
            return DiffusionValues(A, self._zeros(1, 1), self._zeros(d))
        v = diffusion_at_iterate(self.problem, x, u, g, self.xp, self.newton, where)
        xp = self.xp
        return DiffusionValues(contiguous(xp, v.A, dtype=np.float64),
                               self._zeros(1, 1) if v.dA_du is None else contiguous(xp, v.dA_du),
                               self._zeros(d) if v.da_dgrad is None else contiguous(xp, v.da_dgrad))

    def advection(self, x):
        p, xp = self.problem, self.xp
        if not p.has_advection:
            return self._zeros(int(x.shape[1]))
        return self._x_only("advection", lambda: contiguous(xp, p.advection_at(x, xp), dtype=np.float64))

    def scalar(self, name: str, x, u, g, where=None):
        """(value, d value/du) of reaction or source: one-row zeros where absent."""
        if getattr(self.problem, name) is None:
            return self._zeros(), self._zeros()
        if not self.problem.iterate_arguments(name):
            return self._x_only(name, lambda: contiguous(self.xp,
                scalar_at_iterate(self.problem, name, x, xp=self.xp, where=where)[0], dtype=np.float64)), self._zeros()
        value, du = scalar_at_iterate(self.problem, name, x, u, g, self.xp, self.newton, where)
        xp = self.xp
        return (contiguous(xp, value, dtype=np.float64),
                self._zeros() if du is None else contiguous(xp, du, dtype=np.float64))

    def boundary_data(self, x, normal):
        """g_D, g_N and the Neumann mask (int8) at boundary points: one-row zeros where absent."""
        p, xp, kept = self.problem, self.xp, self._x_only
        gD = (kept("dirichlet", lambda: contiguous(xp, p.dirichlet_at(x, xp), dtype=np.float64))
              if p.dirichlet is not None else self._zeros())
        if p.has_neumann and p.has_diffusion:
            neu = kept("neumann_mask", lambda: contiguous(xp, p.neumann_mask(x, normal, xp)).astype(np.int8))
            gN = (kept("neumann", lambda: contiguous(xp, p.neumann_at(x, normal, xp), dtype=np.float64))
                  if p.neumann is not None else self._zeros())
        else:
            neu, gN = xp.zeros(1, dtype=np.int8), self._zeros()
        return gD, gN, neu


# ---------------------------------------------------------------------------
# the forms at one point (scalar arithmetic: compiled for the CPU here, for the GPU in cuda_linearized.py)


@njit(cache=True, inline="always")
def _row(r, a):  # pragma: no cover - compiled
    return r if a.shape[0] > 1 else 0


@njit(cache=True, inline="always")
def _entry(A, r, k, m):  # pragma: no cover - compiled
    """A[r, k, m] of a tensor (n, d, d), or of a I stored as a (n, 1, 1): a times the identity's entry, the
    same number as the expanded tensor's."""
    if A.shape[1] == 1:
        return A[r, 0, 0] * (1.0 if k == m else 0.0)
    return A[r, k, m]


@njit(cache=True, inline="always")
def volume_point(r, A, dA, dag, b, c, dc, f, df, u, g, want, M, rho):  # pragma: no cover - compiled
    """M[r], rho[r] at volume point r; returns a = max_k sum_m |A_km| there (the penalty's bound)."""
    d = g.shape[1]
    rA, rdA, rg, rb = _row(r, A), _row(r, dA), _row(r, dag), _row(r, b)
    ur = u[r]
    S = c[_row(r, c)] * ur - f[_row(r, f)]
    a = 0.0 * ur
    for k in range(d):
        S += b[rb, k] * g[r, k]
        F = 0.0 * ur
        row_sum = 0.0 * ur
        for m in range(d):
            F += _entry(A, rA, k, m) * g[r, m]
            row_sum += abs(_entry(A, rA, k, m))
        a = max(a, row_sum)
        rho[r, 1 + k] = F
    rho[r, 0] = S
    if want:
        M[r, 0, 0] = c[_row(r, c)] + dc[_row(r, dc)] * ur - df[_row(r, df)]
        for k in range(d):
            M[r, 0, 1 + k] = b[rb, k]
            dF = 0.0 * ur
            for m in range(d):
                dF += _entry(dA, rdA, k, m) * g[r, m]
                M[r, 1 + k, 1 + m] = _entry(A, rA, k, m) + g[r, k] * dag[rg, m]
            M[r, 1 + k, 0] = dF
    return a


@njit(cache=True, inline="always")
def _normal_products(r, A, dA, g, n, An, dAn):  # pragma: no cover - compiled
    """An = A^T n and dAn = dA^T n at point r; returns (F . n, (dA g) . n)."""
    d = g.shape[1]
    rA, rdA = _row(r, A), _row(r, dA)
    Fn = 0.0 * n[0]
    dFn = 0.0 * n[0]
    for k in range(d):
        s = 0.0 * n[0]
        t = 0.0 * n[0]
        for m in range(d):
            s += _entry(A, rA, m, k) * n[m]
            t += _entry(dA, rdA, m, k) * n[m]
        An[k] = s
        dAn[k] = t
        Fn += s * g[r, k]
        dFn += t * g[r, k]
    return Fn, dFn


@njit(cache=True, inline="always")
def interior_point(r, A0, dA0, dag0, A1, dA1, dag1, b, u0, g0, u1, g1, normal, sigma, want, M, rho,
                   An0, dAn0, An1, dAn1):  # pragma: no cover - compiled
    """M[r] (2, 2, D, D) and rho[r] (2, D) at interior-face point r; ``normal`` (n, d) points from side 0 to
    side 1, eps = (+1, -1), [u] = u0 - u1:

        rho_s = [eps_s (sigma [u] - {F}.n) + up_s,  -1/2 [u] A_s^T n],
        up_s = -(b.n) [u] where eps_s b.n < 0 (the side the flow enters),

    and M the derivatives of rho_s in the trial traces of side t (module docstring).
    """
    d = g0.shape[1]
    n = normal[r]
    jump = u0[r] - u1[r]
    F0n, dF0n = _normal_products(r, A0, dA0, g0, n, An0, dAn0)
    F1n, dF1n = _normal_products(r, A1, dA1, g1, n, An1, dAn1)
    mean = 0.5 * (F0n + F1n)
    rb = _row(r, b)
    bn = 0.0 * jump
    for k in range(d):
        bn += b[rb, k] * n[k]
    s_r = sigma[r]
    for s in range(2):
        es = 1.0 - 2.0 * s
        An = An0 if s == 0 else An1
        up = -bn * jump if es * bn < 0 else 0.0 * jump
        rho[r, s, 0] = es * (s_r * jump - mean) + up
        for k in range(d):
            rho[r, s, 1 + k] = -0.5 * jump * An[k]
    if not want:
        return
    for s in range(2):
        es = 1.0 - 2.0 * s
        An_s = An0 if s == 0 else An1
        dAn_s = dAn0 if s == 0 else dAn1
        dag_s = dag0 if s == 0 else dag1
        rg_s = _row(r, dag_s)
        for t in range(2):
            et = 1.0 - 2.0 * t
            A_t = A0 if t == 0 else A1
            g_t = g0 if t == 0 else g1
            dag_t = dag0 if t == 0 else dag1
            dFn_t = dF0n if t == 0 else dF1n
            rA_t, rg_t = _row(r, A_t), _row(r, dag_t)
            m00 = s_r * es * et - 0.5 * es * dFn_t
            if es * bn < 0:
                m00 += -bn * et
            M[r, s, t, 0, 0] = m00
            # (dF_t/dgrad u)^T n = A_t^T n + dag_t (g_t . n)
            gn = 0.0 * jump
            for k in range(d):
                gn += g_t[r, k] * n[k]
            for k in range(d):
                An_t_k = 0.0 * jump
                for m in range(d):
                    An_t_k += _entry(A_t, rA_t, m, k) * n[m]
                M[r, s, t, 0, 1 + k] = -0.5 * es * (An_t_k + dag_t[rg_t, k] * gn)
                m_k0 = -0.5 * et * An_s[k]
                if s == t:
                    m_k0 += -0.5 * jump * dAn_s[k]
                M[r, s, t, 1 + k, 0] = m_k0
                for m in range(d):
                    M[r, s, t, 1 + k, 1 + m] = -0.5 * jump * n[k] * dag_s[rg_s, m] if s == t else 0.0 * jump


@njit(cache=True, inline="always")
def boundary_point(r, A, dA, dag, b, u, g, normal, sigma, gD, gN, neu, want, M, rho, An, dAn):  # pragma: no cover
    """M[r] and rho[r] at boundary-face point r (``normal`` outward), split as the linear forms are:
    Dirichlet where n.A n > 0 off the Neumann part, Neumann where n.A n > 0 on it, inflow where b.n < 0
    off the diffusive Neumann part."""
    d = g.shape[1]
    D = d + 1
    n = normal[r]
    Fn, dFn = _normal_products(r, A, dA, g, n, An, dAn)
    ana = 0.0 * Fn
    for k in range(d):
        ana += An[k] * n[k]
    neumann = neu[_row(r, neu)] != 0
    diffusive = ana > 0
    for a in range(D):
        rho[r, a] = 0.0 * Fn
    if want:
        for a in range(D):
            for c in range(D):
                M[r, a, c] = 0.0 * Fn
    ur = u[r]
    g_D = gD[_row(r, gD)]
    if diffusive and not neumann:
        res = ur - g_D
        s_r = sigma[r]
        rho[r, 0] = s_r * res - Fn
        for k in range(d):
            rho[r, 1 + k] = -res * An[k]
        if want:
            rg = _row(r, dag)
            gn = 0.0 * Fn
            for k in range(d):
                gn += g[r, k] * n[k]
            M[r, 0, 0] = s_r - dFn
            for k in range(d):
                M[r, 0, 1 + k] = -(An[k] + dag[rg, k] * gn)
                M[r, 1 + k, 0] = -An[k] - res * dAn[k]
                for m in range(d):
                    M[r, 1 + k, 1 + m] = -res * n[k] * dag[rg, m]
    elif diffusive:
        rho[r, 0] = -gN[_row(r, gN)]
    rb = _row(r, b)
    bn = 0.0 * Fn
    for k in range(d):
        bn += b[rb, k] * n[k]
    if bn < 0 and not (diffusive and neumann):
        rho[r, 0] += -bn * (ur - g_D)
        if want:
            M[r, 0, 0] += -bn


# ---------------------------------------------------------------------------
# the CPU loops over a batch's points


@range_kernel
def _volume_loop(r_lo, r_hi, A, dA, dag, b, c, dc, f, df, u, g, want, M, rho, a):  # pragma: no cover - compiled
    for r in range(r_lo, r_hi):
        a[r] = volume_point(r, A, dA, dag, b, c, dc, f, df, u, g, want, M, rho)


@range_kernel
def _interior_loop(r_lo, r_hi, A0, dA0, dag0, A1, dA1, dag1, b, u0, g0, u1, g1, normal, sigma, want, M,
                   rho):  # pragma: no cover - compiled
    d = g0.shape[1]
    An0, dAn0, An1, dAn1 = np.empty(d), np.empty(d), np.empty(d), np.empty(d)
    for r in range(r_lo, r_hi):
        interior_point(r, A0, dA0, dag0, A1, dA1, dag1, b, u0, g0, u1, g1, normal, sigma, want, M, rho,
                       An0, dAn0, An1, dAn1)


@range_kernel
def _boundary_loop(r_lo, r_hi, A, dA, dag, b, u, g, normal, sigma, gD, gN, neu, want, M,
                   rho):  # pragma: no cover - compiled
    d = g.shape[1]
    An, dAn = np.empty(d), np.empty(d)
    for r in range(r_lo, r_hi):
        boundary_point(r, A, dA, dag, b, u, g, normal, sigma, gD, gN, neu, want, M, rho, An, dAn)


#: the CPU loops of each kind of point; the device's are in ``cuda_linearized.py``
HOST_LOOPS = {"volume": _volume_loop, "interior": _interior_loop, "boundary": _boundary_loop}


def run_on_host(kind: str, n: int, *args) -> None:
    """Run the CPU loop of ``kind`` ("volume", "interior", "boundary") over points 0:n on the kernels' threads."""
    parallel_range(HOST_LOOPS[kind], 0, n, *args)


def _outputs(coefficients: CoefficientsAtIterate, n: int, side: tuple, D: int, want: bool):
    rho = coefficients.empty("rho", (n,) + side + (D,))
    shape = side + side + (D, D)
    M = coefficients.empty("M", (n,) + shape) if want else coefficients.xp.zeros((1,) + shape)
    return M, rho


def volume_forms(coefficients: CoefficientsAtIterate, x, u, g, want: bool = True, run=run_on_host, where=None):
    """M (n, D, D) and rho (n, D) at volume points (M None without ``want``), and a (n,): the penalty's
    max_k sum_m |A_km| at each point.  ``run(kind, n, *arrays)`` runs the point loop where the arrays are;
    ``where`` locates the points (or None)."""
    n, d = int(x.shape[0]), int(x.shape[1])
    diff = coefficients.diffusion(x, u, g, where)
    c, dc = coefficients.scalar("reaction", x, u, g, where)
    f, df = coefficients.scalar("source", x, u, g, where)
    M, rho = _outputs(coefficients, n, (), d + 1, want)
    a = coefficients.empty("a", (n,))
    run("volume", n, diff.A, diff.dA, diff.dag, coefficients.advection(x), c, dc, f, df, u, g, want, M, rho, a)
    return PointForms(M if want else None, rho), a


def interior_forms(coefficients: CoefficientsAtIterate, x, normal, sides, sigma, want: bool = True,
                   run=run_on_host, where=None) -> PointForms:
    """M (n, 2, 2, D, D) and rho (n, 2, D) at interior-face points; ``sides`` = ((u0, g0), (u1, g1)), the
    iterate on each side; ``sigma`` (n,) the penalty at each point; ``where`` = (where0, where1), the
    points' location seen from each side, or None."""
    xp = coefficients.xp
    n, d = int(x.shape[0]), int(x.shape[1])
    (u0, g0), (u1, g1) = sides
    w0, w1 = where if where is not None else (None, None)
    diff0 = coefficients.diffusion(x, u0, g0, w0, 0)  # both sides see one A unless it is sided
    diff1 = coefficients.diffusion(x, u1, g1, w1, 1) if coefficients.sided_diffusion else diff0
    M, rho = _outputs(coefficients, n, (2,), d + 1, want)
    run("interior", n, diff0.A, diff0.dA, diff0.dag, diff1.A, diff1.dA, diff1.dag, coefficients.advection(x), u0, g0,
        u1, g1, contiguous(xp, normal), sigma, want, M, rho)
    # M[s, t]'s lower-right block is -1/2 [u] n (da/dgrad u)^T on the diagonal pairs, 0 elsewhere
    bordered = all(dag.shape[0] == 1 and not bool(xp.any(dag)) for dag in (diff0.dag, diff1.dag))
    return PointForms(M if want else None, rho, bordered)


def boundary_forms(coefficients: CoefficientsAtIterate, x, normal, u, g, sigma, want: bool = True,
                   run=run_on_host, where=None) -> PointForms:
    """M (n, D, D) and rho (n, D) at boundary-face points (``normal`` outward, ``sigma`` per point, ``where``
    their location or None)."""
    xp = coefficients.xp
    n, d = int(x.shape[0]), int(x.shape[1])
    diff = coefficients.diffusion(x, u, g, where)
    gD, gN, neu = coefficients.boundary_data(x, normal)
    M, rho = _outputs(coefficients, n, (), d + 1, want)
    run("boundary", n, diff.A, diff.dA, diff.dag, coefficients.advection(x), u, g, contiguous(xp, normal),
        sigma, gD, gN, neu, want, M, rho)
    return PointForms(M if want else None, rho)
