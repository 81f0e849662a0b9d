"""Element volume blocks from Legendre moments (the element kernel of Approach 2).

One module though over 600 lines: the tables (:func:`moment_tables`, built once
in Python) and the compiled passes that read them are one contract, the row
layout of the tables being what the passes index, so they change together.

On its bounding box an element's basis functions are scaled tensor products
of Legendre polynomials (``basis.py``),

    phi_i(x) = S_i prod_k P_{a_ik}(xi_k),   xi_k = (2 x_k - lo_k - hi_k) / h_k,

and a product of two Legendre polynomials is again a short Legendre series
(the linearisation P_a P_b = sum_c C(a, b, c) P_c, with |a - b| <= c <= a + b);
so are P_a P'_b and P'_a P'_b.  Every entry of the element's volume block
(2.4) is therefore a fixed combination of a few *moments*

    mu^g_m = sum_q w_q g(x_q) psi_m(x_q),   psi_m = prod_k P_{m_k}(xi_k),

of the coefficients g in {c, b_k, A_kl} (and f for the load):

    block[i, j] = S_i S_j ( sum_m K^c_ijm mu^c_m + sum_k (2 / h_k) sum_m K^{b_k}_ijm mu^{b_k}_m
                            + sum_kl (2 / h_k) (2 / h_l) sum_m K^{A_kl}_ijm mu^{A_kl}_m ),

where the K are products of the 1D coefficients and depend only on (p, d)
(:func:`moment_tables`).  The quadrature is the same as the direct form's,
so the two agree to round-off (tested).  What changes is the work per point:
the direct form contracts nb x nb entries over (d + 1) rows, 2 nb^2 (d + 1)
flops (800 at p = 2 in 3D); here each coefficient meets only the moments it
needs, |m| <= 2p for c, 2p - 1 for b, 2p - 2 for A, p for f: 115
multiply-adds at p = 2 in 3D, and nothing is stored per point and basis
function.  The tables are applied once per element, a sparse product with
367 (p = 2) to 2,366 (p = 3) entries in 3D.

The element kernel of Approach 2 sums an element's points together; the
atomic variant and Approach 1 use the same form one sub-simplex at a time
(the combination then costs more per point: a sub-simplex has 8-35 points
where an element has 30-960), so the three reductions share one volume form.
"""

from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple

import numpy as np
from numba import njit
from numpy.polynomial import legendre as npleg

from ..basis import basis_indices, n_basis
from .batched import A_CONSTANT, A_ISOTROPIC, A_POINTWISE, _FAST

#: points per moment batch: an element's points are summed in runs of this
#: length (most elements need one run); the Legendre table of a run,
#: d x (2p + 1) x MOMENT_BATCH values, stays in the core's L2 cache
MOMENT_BATCH = 256

#: a run is padded with zero-weight points to a multiple of this, so that the
#: compiled point loops (vectorised 4 wide, unrolled 4 times) have no scalar tail
MOMENT_PAD = 16
assert MOMENT_BATCH % MOMENT_PAD == 0  # the padding stays inside the work arrays

#: rows of the moment array mu (rows, NC): c, f, the one diffusion row of A = a I or of a
#: constant A (see :func:`volume_moments_batch`), b_0..b_{d-1}, then A_kl at row B_ROW + d + k d + l
C_ROW, F_ROW, AV_ROW, B_ROW = 0, 1, 2, 3


@njit(cache=True, inline="always")
def moment_rows(d: int) -> int:
    """Rows of the moment array: c, f, the diffusion row, b_0..b_{d-1}, A_kl (k, l < d)."""
    return B_ROW + d + d * d


# --------------------------------------------------------------------------
# the tables (NumPy, once per degree and dimension)


@lru_cache(maxsize=None)
def legendre_product_coefficients(p: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """1D linearisation coefficients for a, b <= p, c <= 2p, shape (p + 1, p + 1, 2p + 1) each.

    C0[a, b, c], C1[a, b, c], C2[a, b, c] are the Legendre coefficients of
    P_a P_b, P_a P'_b and P'_a P'_b:  (2c + 1) / 2 * int_{-1}^{1} (.) P_c.

    >>> C0, C1, C2 = legendre_product_coefficients(1)
    >>> C0[1, 1]            # P_1^2 = xi^2 = 1/3 P_0 + 2/3 P_2
    array([0.33333333, 0.        , 0.66666667])
    >>> C1[1, 1]            # P_1 P_1' = xi = P_1
    array([0., 1., 0.])
    """
    p = int(p)
    x, w = npleg.leggauss(3 * p + 2)  # exact for degree 6p + 3 >= the integrands' 6p
    eye = np.eye(2 * p + 1)
    P = np.array([npleg.legval(x, eye[a]) for a in range(2 * p + 1)])
    dP = np.array([npleg.legval(x, npleg.legder(eye[a])) if a > 0 else 0 * x for a in range(2 * p + 1)])
    half_norm = (2 * np.arange(2 * p + 1) + 1) / 2.0
    a, b, c = np.ogrid[:p + 1, :p + 1, :2 * p + 1]
    out = []
    for derivatives, (left, right) in enumerate(((P, P), (P, dP), (dP, dP))):
        C = np.einsum("aq,bq,cq,q->abc", left[:p + 1], right[:p + 1], P, w) * half_norm
        # the exact zeros: above the product's degree, and every other c (parity)
        degree = a + b - derivatives
        C[(c > degree) | ((degree - c) % 2 == 1) | (np.abs(C) < 1e-13 * np.abs(C).max())] = 0.0
        C.setflags(write=False)
        out.append(C)
    return out[0], out[1], out[2]


class MomentTables(NamedTuple):
    """The constants of the moment form for degrees 0..pmax in d dimensions (see the module docstring).

    psi: (NC, d) multi-indices of the moments, total degree <= 2 pmax, hierarchical.
    counts: (pmax + 1, 4) per degree p: moments of c (|m| <= 2p), b (2p - 1), A (2p - 2), f (p).
    iso_*, full_*: the combination tables, degree p's entries at ``*_start[p]:*_start[p + 1]``,
    grouped by block entry: entries ``*_rows[p, t]:*_rows[p, t + 1]`` make block entry t = i nb + j,
    each ``*_coef`` times the scaled moment ``*_src`` (a flat index into rows of length NC, see
    :data:`C_ROW`); ``*_rows`` is (pmax + 1, nbmax^2 + 1).  ``iso`` has the diagonal A_kk terms only.
    """

    psi: np.ndarray
    counts: np.ndarray
    iso_start: np.ndarray
    iso_rows: np.ndarray
    iso_src: np.ndarray
    iso_coef: np.ndarray
    full_start: np.ndarray
    full_rows: np.ndarray
    full_src: np.ndarray
    full_coef: np.ndarray

    @property
    def n_moments(self) -> int:
        return self.psi.shape[0]


def _n_psi(q: int, d: int) -> int:
    return n_basis(q, d) if q >= 0 else 0


def _block_terms(p: int, d: int, kinds: tuple[int, ...], basis: str = "P") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Entries (ij, m, coef) of one term: direction k uses C0 (kinds[k] = 0), C1 (1: trial derivative),
    C1 transposed (2: test derivative) or C2 (3: both)."""
    C0, C1, C2 = legendre_product_coefficients(p)
    C = (C0, C1, np.transpose(C1, (1, 0, 2)), C2)
    idx = basis_indices(p, d, basis)
    psi = basis_indices(2 * p, d, basis)  # products of two degree-p functions (P_p P_p in P_2p, PQ_p PQ_p in PQ_2p)
    nb = idx.shape[0]
    ij, ms, vals = [], [], []
    for i in range(nb):  # one test function at a time: memory nb x moments, not nb^2 x moments
        val = np.ones((nb, psi.shape[0]))
        for k in range(d):
            val *= C[kinds[k]][idx[i, k], idx[:, k][:, None], psi[:, k][None, :]]
        j, m = np.nonzero(val)
        ij.append(i * nb + j)
        ms.append(m)
        vals.append(val[j, m])
    return np.concatenate(ij).astype(np.int64), np.concatenate(ms).astype(np.int64), np.concatenate(vals)


def _entries(p: int, d: int, nc: int, terms: list[tuple[tuple[int, ...], int]], basis: str = "P",
             counts: np.ndarray | None = None):
    """All terms' entries (ij, src, coef) of a degree-p block, grouped by block entry ij (in term order
    within each), so that the kernel sums each block entry in a register and writes it once.
    With ``counts`` (the degree's c, b, A moment counts), check that every term reads a computed moment."""
    ij, src, coef = [], [], []
    for kinds, row in terms:
        e, m, c = _block_terms(p, d, kinds, basis)
        if counts is not None and len(m):  # 0, 1 or 2 derivatives: the c, b or A moments
            assert m.max() < counts[sum(1 if k in (1, 2) else 2 if k == 3 else 0 for k in kinds)]
        ij.append(e)
        src.append(row * nc + m)
        coef.append(c)
    ij, src, coef = np.concatenate(ij), np.concatenate(src), np.concatenate(coef)
    order = np.argsort(ij, kind="stable")
    return ij[order].astype(np.int64), src[order].astype(np.int64), coef[order]


def moment_counts(p: int, d: int, basis: str = "P") -> list[int]:
    """How many leading moments of ``basis_indices(2 p, d, basis)`` the c, b, A and f terms of a
    degree-p block read: the integrands phi_i phi_j, phi_i d phi_j and d phi_i d phi_j have total degree
    <= 2p, 2p - 1, 2p - 2 (P), and the load needs the basis' own p.  For PQ the moments are PQ_2p,
    ordered by level and then total degree, so a derivative (total degree 4p - 1 or 4p - 2 at most)
    cuts the moments of the highest total degrees off the end of level 2p.
    """
    if basis == "P":
        return [_n_psi(2 * p, d), _n_psi(2 * p - 1, d), _n_psi(2 * p - 2, d), _n_psi(p, d)]
    psi = basis_indices(2 * p, d, basis)
    total = psi.sum(axis=1)
    return [len(psi), int((total <= 4 * p - 1).sum()), int((total <= 4 * p - 2).sum()),
            len(basis_indices(p, d, basis))]


@lru_cache(maxsize=None)
def moment_tables(pmax: int, d: int, dtype=np.float64, basis: str = "P") -> MomentTables:
    """The moment form's tables for every degree 0..pmax of ``basis`` (cached; arrays read-only).

    >>> t = moment_tables(2, 3)
    >>> t.n_moments, t.counts[2].tolist()        # |m| <= 4; c, b, A, f moments at p = 2
    (35, [35, 20, 10, 10])
    >>> int(t.iso_start[3] - t.iso_start[2])    # entries at p = 2 for A = a I
    367
    >>> moment_tables(1, 3, basis="PQ").counts[1].tolist()  # PQ_2: 6 x 3 moments
    [18, 15, 10, 6]
    """
    pmax, d = int(pmax), int(d)
    psi = np.ascontiguousarray(basis_indices(2 * pmax, d, basis))
    nc = psi.shape[0]
    counts = np.array([moment_counts(p, d, basis) for p in range(pmax + 1)], dtype=np.int64)
    ar = B_ROW + d
    mass = [((0,) * d, C_ROW)]
    advection = [(tuple(1 if m == k else 0 for m in range(d)), B_ROW + k) for k in range(d)]

    def diffusion(k: int, l: int) -> tuple[tuple[int, ...], int]:
        # d/dx_k on the test function, d/dx_l on the trial function
        kinds = [0] * d
        if k == l:
            kinds[k] = 3
        else:
            kinds[k], kinds[l] = 2, 1
        return tuple(kinds), ar + k * d + l

    iso = mass + advection + [diffusion(k, k) for k in range(d)]
    full = mass + advection + [diffusion(k, l) for k in range(d) for l in range(d)]
    fields = {}
    nbmax = len(basis_indices(pmax, d, basis))
    for name, terms in (("iso", iso), ("full", full)):
        start = np.zeros(pmax + 2, dtype=np.int64)
        rows = np.empty((pmax + 1, nbmax * nbmax + 1), dtype=np.int64)
        sources, coefficients = [], []  # each degree's, kept until joined (its block entries are not)
        for p in range(pmax + 1):
            ij, src, coef = _entries(p, d, nc, terms, basis, counts[p])
            start[p + 1] = start[p] + len(ij)
            rows[p] = start[p] + np.searchsorted(ij, np.arange(nbmax * nbmax + 1))  # block entry t's entries
            sources.append(src)
            coefficients.append(coef)
        fields[f"{name}_start"] = start
        fields[f"{name}_rows"] = rows
        fields[f"{name}_src"] = np.concatenate(sources)
        del sources
        fields[f"{name}_coef"] = np.concatenate(coefficients, dtype=dtype)
        del coefficients
    tables = MomentTables(psi=psi, counts=counts, **fields)
    for a in tables:
        a.setflags(write=False)
    return tables


# --------------------------------------------------------------------------
# compiled: one run of points, and the block of one element


@njit(cache=True, inline="always")
def legendre_values_batch(x, n, box, rec, qmax, L):  # pragma: no cover - compiled
    """L[k, m, q] = P_m(xi_k(x[:, q])) for m <= qmax, q < n: the plain Legendre values on the box."""
    d = x.shape[0]
    one = x.dtype.type(1)
    for k in range(d):
        a, c = box[k, 0], box[k, 1]
        for q in range(n):
            L[k, 0, q] = one
        if qmax >= 1:
            for q in range(n):
                L[k, 1, q] = a * x[k, q] + c
        for m in range(1, qmax):
            r_a, r_b = rec[0, m], rec[1, m]
            for q in range(n):
                L[k, m + 1, q] = r_a * L[k, 1, q] * L[k, m, q] - r_b * L[k, m - 1, q]


@njit(cache=True, inline="always")
def pad_moment_batch(n, x, w, A, a_kind, b, c, f):  # pragma: no cover - compiled
    """Extend a gathered run of n points with zero-weight copies of its last point to a multiple of
    :data:`MOMENT_PAD`; returns the padded length.  The copies add exact zeros to every moment."""
    d = x.shape[0]
    m = (n + MOMENT_PAD - 1) // MOMENT_PAD * MOMENT_PAD
    zero = x.dtype.type(0)
    for q in range(n, m):
        for k in range(d):
            x[k, q] = x[k, n - 1]
            b[k, q] = zero
        w[q] = zero
        c[q] = zero
        f[q] = zero
    if a_kind == A_ISOTROPIC:
        for q in range(n, m):
            A[0, 0, q] = zero
    elif a_kind == A_POINTWISE:
        for k in range(d):
            for l in range(d):
                for q in range(n, m):
                    A[k, l, q] = zero
    return m


@njit(cache=True, fastmath=_FAST)
def volume_moments_batch(n, L, psi, counts, c, f, b, av, A, a_pointwise, mu):  # pragma: no cover - compiled
    """Add one run's moments: mu[row, m] += sum_q g_q psi_m(x_q) for the weighted coefficient rows g.

    ``c``, ``f`` (n,), ``b`` (d, n), ``av`` (n,) are already multiplied by the
    weights; ``av`` is w a for A = a I, w for another constant A (scaled per
    element), and unused when ``a_pointwise``, where ``A`` (d, d, n) holds
    w A_kl.  ``counts`` are the degree's (c, b, A, f) moment counts: moments
    are hierarchical, so each coefficient needs a prefix of them.  Moments
    below n1 = max(nA, nf) are computed for all rows at once (the extra ones
    are never read), then those of c and b up to nb, then those of c alone.
    """
    d = L.shape[0]
    n_c, n_b, n_a, n_f = counts[0], counts[1], counts[2], counts[3]
    n1 = max(n_a, n_f)
    n2 = max(n1, n_b)
    if d == 2 or d == 3:
        _all_row_moments(n, L, psi, 0, n1, c, f, b, av, mu)
        _c_b_moments(n, L, psi, n1, n2, c, b, mu)
        _row_moments(n, L, psi, n2, n_c, c, mu, C_ROW)
        if a_pointwise:
            for kl in range(d * d):
                _row_moments(n, L, psi, 0, n_a, A[kl // d, kl % d], mu, B_ROW + d + kl)
        return
    # any d: one moment per pass, the product over directions in a loop (used for d = 1)
    zero = L.dtype.type(0)
    for m in range(n_c):
        sc = sf = sa = zero
        for q in range(n):
            v = L[0, psi[m, 0], q]
            for k in range(1, d):
                v *= L[k, psi[m, k], q]
            sc += c[q] * v
            if m < n1:
                sf += f[q] * v
                sa += av[q] * v
            if m < n2:
                for k in range(d):
                    mu[B_ROW + k, m] += b[k, q] * v
            if a_pointwise and m < n_a:
                for kl in range(d * d):
                    mu[B_ROW + d + kl, m] += A[kl // d, kl % d, q] * v
        mu[C_ROW, m] += sc
        if m < n1:
            mu[F_ROW, m] += sf
            mu[AV_ROW, m] += sa


@njit(cache=True, fastmath=_FAST)
def source_moments_batch(n, L, psi, counts, f, mu):  # pragma: no cover - compiled
    """Add one run's moments of the weighted source alone, mu[F_ROW, m] for the load's ``counts[3]``
    moments: the load without the block (a slab whose matrix is kept).  The same sums, point by point,
    as :func:`volume_moments_batch` forms for f, so the two loads agree to round-off."""
    d = L.shape[0]
    if d == 2 or d == 3:
        _row_moments(n, L, psi, 0, counts[3], f, mu, F_ROW)
        return
    zero = L.dtype.type(0)
    for m in range(counts[3]):  # any d (4 in 3D + 1): the product over directions in a loop
        s = zero
        for q in range(n):
            v = L[0, psi[m, 0], q]
            for k in range(1, d):
                v *= L[k, psi[m, k], q]
            s += f[q] * v
        mu[F_ROW, m] += s


# The three passes below share one design: each pass over a run's points
# takes several moments (two when all 5-6 rows are summed, three for c and b,
# four for one row), so that a point's coefficients are loaded once for all
# of them and the 9-12 independent sums keep both FMA units busy; the one or
# two moments left over take a pass each.  One moment per pass would be bound
# by loads and by each pass's set-up and final reduction (docs/performance.md).  The 2D and
# 3D loops are written out so that the product psi_m = prod_k L[k, m_k] has
# no loop of its own.


@njit(cache=True, fastmath=_FAST, inline="always")
def _all_row_moments(n, L, psi, lo, hi, c, f, b, av, mu):  # pragma: no cover - compiled
    """Moments lo:hi of c, f, b_k and the diffusion row, two per pass."""
    d = L.shape[0]
    zero = L.dtype.type(0)
    m = lo
    while m < hi:
        two = m + 1 < hi
        i, j = m, m + 1 if two else m
        c0 = f0 = x0 = y0 = z0 = a0 = c1 = f1 = x1 = y1 = z1 = a1 = zero
        if d == 3:
            i0, i1, i2, j0, j1, j2 = psi[i, 0], psi[i, 1], psi[i, 2], psi[j, 0], psi[j, 1], psi[j, 2]
            if two:
                for q in range(n):
                    v = L[0, i0, q] * L[1, i1, q] * L[2, i2, q]
                    u = L[0, j0, q] * L[1, j1, q] * L[2, j2, q]
                    cq, fq, bx, by, bz, aq = c[q], f[q], b[0, q], b[1, q], b[2, q], av[q]
                    c0 += cq * v
                    f0 += fq * v
                    x0 += bx * v
                    y0 += by * v
                    z0 += bz * v
                    a0 += aq * v
                    c1 += cq * u
                    f1 += fq * u
                    x1 += bx * u
                    y1 += by * u
                    z1 += bz * u
                    a1 += aq * u
            else:
                for q in range(n):
                    v = L[0, i0, q] * L[1, i1, q] * L[2, i2, q]
                    c0 += c[q] * v
                    f0 += f[q] * v
                    x0 += b[0, q] * v
                    y0 += b[1, q] * v
                    z0 += b[2, q] * v
                    a0 += av[q] * v
        else:
            i0, i1, j0, j1 = psi[i, 0], psi[i, 1], psi[j, 0], psi[j, 1]
            if two:
                for q in range(n):
                    v = L[0, i0, q] * L[1, i1, q]
                    u = L[0, j0, q] * L[1, j1, q]
                    cq, fq, bx, by, aq = c[q], f[q], b[0, q], b[1, q], av[q]
                    c0 += cq * v
                    f0 += fq * v
                    x0 += bx * v
                    y0 += by * v
                    a0 += aq * v
                    c1 += cq * u
                    f1 += fq * u
                    x1 += bx * u
                    y1 += by * u
                    a1 += aq * u
            else:
                for q in range(n):
                    v = L[0, i0, q] * L[1, i1, q]
                    c0 += c[q] * v
                    f0 += f[q] * v
                    x0 += b[0, q] * v
                    y0 += b[1, q] * v
                    a0 += av[q] * v
        _add_moment(mu, i, d, c0, x0, y0, z0)
        mu[F_ROW, i] += f0
        mu[AV_ROW, i] += a0
        if two:
            _add_moment(mu, j, d, c1, x1, y1, z1)
            mu[F_ROW, j] += f1
            mu[AV_ROW, j] += a1
        m += 2


@njit(cache=True, fastmath=_FAST, inline="always")
def _c_b_moments(n, L, psi, lo, hi, c, b, mu):  # pragma: no cover - compiled
    """Moments lo:hi of c and b_k, three per pass (then the one or two left, one per pass)."""
    d = L.shape[0]
    zero = L.dtype.type(0)
    m = lo
    while m + 3 <= hi:
        c0 = x0 = y0 = z0 = c1 = x1 = y1 = z1 = c2 = x2 = y2 = z2 = zero
        if d == 3:
            i0, i1, i2 = psi[m, 0], psi[m, 1], psi[m, 2]
            j0, j1, j2 = psi[m + 1, 0], psi[m + 1, 1], psi[m + 1, 2]
            k0, k1, k2 = psi[m + 2, 0], psi[m + 2, 1], psi[m + 2, 2]
            for q in range(n):
                v = L[0, i0, q] * L[1, i1, q] * L[2, i2, q]
                u = L[0, j0, q] * L[1, j1, q] * L[2, j2, q]
                t = L[0, k0, q] * L[1, k1, q] * L[2, k2, q]
                cq, bx, by, bz = c[q], b[0, q], b[1, q], b[2, q]
                c0 += cq * v
                x0 += bx * v
                y0 += by * v
                z0 += bz * v
                c1 += cq * u
                x1 += bx * u
                y1 += by * u
                z1 += bz * u
                c2 += cq * t
                x2 += bx * t
                y2 += by * t
                z2 += bz * t
        else:
            i0, i1, j0, j1, k0, k1 = psi[m, 0], psi[m, 1], psi[m + 1, 0], psi[m + 1, 1], psi[m + 2, 0], psi[m + 2, 1]
            for q in range(n):
                v = L[0, i0, q] * L[1, i1, q]
                u = L[0, j0, q] * L[1, j1, q]
                t = L[0, k0, q] * L[1, k1, q]
                cq, bx, by = c[q], b[0, q], b[1, q]
                c0 += cq * v
                x0 += bx * v
                y0 += by * v
                c1 += cq * u
                x1 += bx * u
                y1 += by * u
                c2 += cq * t
                x2 += bx * t
                y2 += by * t
        _add_moment(mu, m, d, c0, x0, y0, z0)
        _add_moment(mu, m + 1, d, c1, x1, y1, z1)
        _add_moment(mu, m + 2, d, c2, x2, y2, z2)
        m += 3
    while m < hi:
        c0 = x0 = y0 = z0 = zero
        if d == 3:
            i0, i1, i2 = psi[m, 0], psi[m, 1], psi[m, 2]
            for q in range(n):
                v = L[0, i0, q] * L[1, i1, q] * L[2, i2, q]
                c0 += c[q] * v
                x0 += b[0, q] * v
                y0 += b[1, q] * v
                z0 += b[2, q] * v
        else:
            i0, i1 = psi[m, 0], psi[m, 1]
            for q in range(n):
                v = L[0, i0, q] * L[1, i1, q]
                c0 += c[q] * v
                x0 += b[0, q] * v
                y0 += b[1, q] * v
        _add_moment(mu, m, d, c0, x0, y0, z0)
        m += 1


@njit(cache=True, fastmath=_FAST, inline="always")
def _row_moments(n, L, psi, lo, hi, g, mu, row):  # pragma: no cover - compiled
    """mu[row, lo:hi] += the moments of one weighted row g, four per pass (then one per pass)."""
    d = L.shape[0]
    zero = L.dtype.type(0)
    m = lo
    while m + 4 <= hi:
        s0 = s1 = s2 = s3 = zero
        if d == 3:
            i0, i1, i2 = psi[m, 0], psi[m, 1], psi[m, 2]
            j0, j1, j2 = psi[m + 1, 0], psi[m + 1, 1], psi[m + 1, 2]
            k0, k1, k2 = psi[m + 2, 0], psi[m + 2, 1], psi[m + 2, 2]
            l0, l1, l2 = psi[m + 3, 0], psi[m + 3, 1], psi[m + 3, 2]
            for q in range(n):
                gq = g[q]
                s0 += gq * (L[0, i0, q] * L[1, i1, q] * L[2, i2, q])
                s1 += gq * (L[0, j0, q] * L[1, j1, q] * L[2, j2, q])
                s2 += gq * (L[0, k0, q] * L[1, k1, q] * L[2, k2, q])
                s3 += gq * (L[0, l0, q] * L[1, l1, q] * L[2, l2, q])
        else:
            i0, i1, j0, j1 = psi[m, 0], psi[m, 1], psi[m + 1, 0], psi[m + 1, 1]
            k0, k1, l0, l1 = psi[m + 2, 0], psi[m + 2, 1], psi[m + 3, 0], psi[m + 3, 1]
            for q in range(n):
                gq = g[q]
                s0 += gq * (L[0, i0, q] * L[1, i1, q])
                s1 += gq * (L[0, j0, q] * L[1, j1, q])
                s2 += gq * (L[0, k0, q] * L[1, k1, q])
                s3 += gq * (L[0, l0, q] * L[1, l1, q])
        mu[row, m] += s0
        mu[row, m + 1] += s1
        mu[row, m + 2] += s2
        mu[row, m + 3] += s3
        m += 4
    while m < hi:
        s0 = zero
        if d == 3:
            i0, i1, i2 = psi[m, 0], psi[m, 1], psi[m, 2]
            for q in range(n):
                s0 += g[q] * (L[0, i0, q] * L[1, i1, q] * L[2, i2, q])
        else:
            i0, i1 = psi[m, 0], psi[m, 1]
            for q in range(n):
                s0 += g[q] * (L[0, i0, q] * L[1, i1, q])
        mu[row, m] += s0
        m += 1


@njit(cache=True, inline="always")
def _add_moment(mu, m, d, c, x, y, z):  # pragma: no cover - compiled
    """Add moment m of c and of b's components x, y (and z in 3D)."""
    mu[C_ROW, m] += c
    mu[B_ROW, m] += x
    mu[B_ROW + 1, m] += y
    if d == 3:
        mu[B_ROW + 2, m] += z


@njit(cache=True, inline="always")
def block_from_moments(p, nb, counts, mu, mus, a_kind, A, box, scale, table, rows, src, coef, S, block,
                       vec):  # pragma: no cover - compiled
    """block[i, j] = S_i S_j sum_e coef[e] mus[src[e]] and vec[i] = S_i mu_f[i] for one element of degree p.

    ``mus`` receives the element's scaled moments: b_k times 2 / h_k (``box[k, 0]``),
    A_kl times (2 / h_k)(2 / h_l) (and, for a constant A, times A_kl; for A = a I
    the one accumulated row serves every A_kk).  ``rows``, ``src``, ``coef``
    are the tables, iso or full to match ``a_kind``: the terms of block entry
    t = i nb + j are ``rows[p, t]:rows[p, t + 1]``.
    """
    d = box.shape[0]
    n_c, n_b, n_a = counts[0], counts[1], counts[2]
    ar = B_ROW + d
    for m in range(n_c):
        mus[C_ROW, m] = mu[C_ROW, m]
    for k in range(d):
        h = box[k, 0]
        for m in range(n_b):
            mus[B_ROW + k, m] = h * mu[B_ROW + k, m]
    for k in range(d):
        for l in range(d):
            if a_kind == A_ISOTROPIC and k != l:
                continue
            src_row = AV_ROW if a_kind != A_POINTWISE else ar + k * d + l
            h = box[k, 0] * box[l, 0]
            if a_kind == A_CONSTANT:
                h *= A[k, l, 0]
            for m in range(n_a):
                mus[ar + k * d + l, m] = h * mu[src_row, m]
    flat = mus.ravel()
    load_from_moments(nb, mu, scale, table, S, vec)
    # each block entry's few terms summed in a register, not scattered term by term into an array
    # of nb^2 sums: no store and reload per term
    zero = mu.dtype.type(0)
    for i in range(nb):
        for j in range(nb):
            t = i * nb + j
            s = zero
            for e in range(rows[p, t], rows[p, t + 1]):
                s += coef[e] * flat[src[e]]
            block[i, j] = S[i] * S[j] * s


@njit(cache=True, inline="always")
def load_from_moments(nb, mu, scale, table, S, vec):  # pragma: no cover - compiled
    """vec[i] = S_i mu_f[i], the load int f phi_i of one element, with S_i = prod_k scale[k, table[i, k]]
    its basis functions' scales (left in ``S`` for the block)."""
    d = scale.shape[0]
    for i in range(nb):
        s = scale[0, table[i, 0]]
        for k in range(1, d):
            s *= scale[k, table[i, k]]
        S[i] = s
        vec[i] = s * mu[F_ROW, i]
