"""The source term f of the paper's section 4.2 problem, compiled.

It runs at every quadrature point of every assembly of ``paper-2d`` and
``paper-3d`` (:func:`~polydg.problem.builtin.paper_problem`), which made it,
as a NumPy expression with the library's sin and cos, the most expensive
step of assembling paper-3d; so it is a Numba kernel with its own sin(pi x)
and cos(pi x).  The kernel has an explicit signature: it is compiled (or
loaded from polydg's cache) when this module is imported, so no JIT time
lands inside an assembly.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

#: Taylor coefficients of sin(pi r) and cos(pi r) in powers of r^2: on |r| <= 1/4
#: the first omitted terms are below 1e-19, so only rounding remains
_SINPI = tuple((-1) ** j * math.pi ** (2 * j + 1) / math.factorial(2 * j + 1) for j in range(9))
_COSPI = tuple((-1) ** j * math.pi ** (2 * j) / math.factorial(2 * j) for j in range(10))


@njit(cache=True, inline="always")
def _sincospi(x):  # pragma: no cover - compiled
    """(sin(pi x), cos(pi x)) by range reduction to |r| <= 1/4 and two polynomials.

    x = k/2 + r with k the integer nearest 2x (x - k/2 is exact), then the
    quarter turn k mod 4 swaps and signs the pair.  No library call, so the
    loop around it vectorises, and within 4e-16 of the true values
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
    """f of :func:`~polydg.problem.builtin.paper_problem` at the points x (n, d):

    f = (eps d pi^2 + 3 + prod_k x_k) u + pi sum_k (1 + x_k) cos(pi x_k) prod_{j != k} sin(pi x_j),
    u = prod_k sin(pi x_k).

    Two passes over blocks of points: the sines and cosines of all
    coordinates (one vectorised loop, see :func:`_sincospi`), then the
    products per point, with none of the dozen (n, d) temporaries of the
    NumPy expression.  ``nogil`` lets the assembler split large batches over
    threads.  Fused multiply-adds (``contract``) in the polynomials keep the
    error bound of :func:`_sincospi`; the product pass is written out for
    d = 2 and 3 because a loop over k kept it from vectorising.
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
