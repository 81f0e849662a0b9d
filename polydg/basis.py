"""Bounding-box Legendre bases of total degree <= p (docs/design.md §5).

On element K with bounding box [lo, hi] (in d = 1..4 dimensions) the basis is
the set of tensor products of scaled Legendre polynomials

    phi_alpha(x) = prod_k  s_{a_k}(h_k) L_{a_k}(xi_k),        |alpha| = sum_k a_k <= p,

    xi_k = (2 x_k - lo_k - hi_k) / h_k,   h_k = hi_k - lo_k,
    s_n(h) = sqrt((2 n + 1) / h),

with L_n the Legendre polynomials on [-1, 1].  Because
int_{-1}^{1} L_m L_n = 2 delta_mn / (2n + 1), the basis is orthonormal on the
box: int_box phi_alpha phi_beta dx = delta_alpha,beta.  It is evaluated
directly in physical coordinates (no reference map); gradients are

    d phi_alpha / d x_k = s_{a_k} (2 / h_k) L'_{a_k}(xi_k) prod_{m != k} s_{a_m} L_{a_m}(xi_m).

Ordering (hierarchical): multi-indices are sorted by total degree first, and
within one total degree in *descending lexicographic* order, e.g. in 2D

    (0,0) | (1,0) (0,1) | (2,0) (1,1) (0,2) | (3,0) (2,1) (1,2) (0,3) | ...

and in 3D degree 1 is (1,0,0) (0,1,0) (0,0,1).  The degree-p list is a prefix
of the degree-(p+1) list, so one table ``multi_indices(P, d)`` serves every
element of degree p <= P (use its first ``n_basis(p, d)`` rows).

Two faces:

* :func:`eval_basis_point` -- the per-point kernel, compiled with Numba for
  the CPU and (``numba.cuda.jit(device=True)(eval_basis_point.py_func)``) for
  the GPU; scalar arithmetic and indexing only, no allocation.  It runs in
  the floating type of its arguments (float64 or float32).
* :func:`tabulate` / :func:`tabulate_gradients` -- NumPy-facing, a parallel
  loop over points calling the same per-point kernel.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numba
import numpy as np

from .errors import OptionError
from .threads import parallel_range, range_kernel

__all__ = [
    "BASES",
    "multi_indices",
    "n_basis",
    "pq_multi_indices",
    "n_basis_pq",
    "basis_indices",
    "basis_size",
    "total_degree",
    "eval_basis_point",
    "eval_basis_point_inline",
    "tabulate",
    "tabulate_gradients",
    "tabulate_both",
    "legendre_values",
]


# --------------------------------------------------------------------------
# index sets


def n_basis(p: int, d: int) -> int:
    """Number of polynomials of total degree <= p in d variables: C(p + d, d)."""
    if p < 0 or d < 0:
        raise OptionError(f"need p >= 0 and d >= 0, got p={p}, d={d}")
    return math.comb(int(p) + int(d), int(d))


def _compositions_desc(total: int, d: int):
    """All d-tuples of non-negative ints summing to ``total``, descending lexicographic."""
    if d == 1:
        yield (total,)
        return
    for first in range(total, -1, -1):
        for rest in _compositions_desc(total - first, d - 1):
            yield (first,) + rest


@lru_cache(maxsize=None)
def multi_indices(p: int, d: int) -> np.ndarray:
    """Multi-indices alpha (|alpha| <= p) in d dimensions, shape (C(p+d, d), d), int64.

    Ordered by total degree, then descending lexicographically within a
    degree (hierarchical: ``multi_indices(p, d)`` is a prefix of
    ``multi_indices(p + 1, d)``).  Cached; the returned array is read-only.
    """
    p, d = int(p), int(d)
    if p < 0 or d < 1:
        raise OptionError(f"need p >= 0 and d >= 1, got p={p}, d={d}")
    rows = [alpha for total in range(p + 1) for alpha in _compositions_desc(total, d)]
    out = np.array(rows, dtype=np.int64).reshape(len(rows), d)
    assert out.shape[0] == n_basis(p, d)
    out.setflags(write=False)
    return out


# --------------------------------------------------------------------------
# the space-time index set PQ_p: degree p in t (the last variable) times total degree p in x

#: the index sets a space can use: "P" (total degree p, the default) and
#: "PQ" (degree p in the last variable, time, times total degree p in the others)
BASES = ("P", "PQ")


def n_basis_pq(p: int, d: int) -> int:
    """Number of polynomials of degree <= p in the last variable times total degree <= p in the
    other d - 1: C(p + d - 1, d - 1) (p + 1)."""
    if p < 0 or d < 1:
        raise OptionError(f"need p >= 0 and d >= 1, got p={p}, d={d}")
    return math.comb(int(p) + int(d) - 1, int(d) - 1) * (int(p) + 1)


@lru_cache(maxsize=None)
def pq_multi_indices(p: int, d: int) -> np.ndarray:
    """Multi-indices of PQ_p in d variables, time last: |alpha_x| <= p and alpha_t <= p.

    Ordered by the PQ level max(|alpha_x|, alpha_t), then by total degree,
    then descending lexicographically, so that ``pq_multi_indices(p, d)`` is
    a prefix of ``pq_multi_indices(p + 1, d)`` (hierarchical, as the kernels
    and the moment tables need: one table serves every degree <= p) and
    P_1 is a prefix of PQ_1 (the solvers' coarse modes).  The last row is
    (0, ..., 0, p, p): its largest entry is p, the largest 1D degree.
    Cached; the returned array is read-only.

    >>> pq_multi_indices(1, 2).tolist()
    [[0, 0], [1, 0], [0, 1], [1, 1]]
    """
    p, d = int(p), int(d)
    if p < 0 or d < 1:
        raise OptionError(f"need p >= 0 and d >= 1, got p={p}, d={d}")
    box = multi_indices(2 * p, d)  # total degree <= 2p holds PQ_p; its order is the tie-break
    spatial, time = box[:, :-1].sum(axis=1), box[:, -1]
    level = np.maximum(spatial, time)
    keep = np.flatnonzero(level <= p)
    # stable sort by (level, total degree): within both, the order of multi_indices (descending lexicographic)
    order = keep[np.lexsort((box[keep].sum(axis=1), level[keep]))]
    out = np.ascontiguousarray(box[order])
    assert out.shape[0] == n_basis_pq(p, d)
    out.setflags(write=False)
    return out


def basis_indices(p: int, d: int, basis: str = "P") -> np.ndarray:
    """The multi-index table of ``basis`` ("P" or "PQ") of degree p in d variables (hierarchical)."""
    return multi_indices(p, d) if basis == "P" else pq_multi_indices(p, d) if basis == "PQ" else _bad_basis(basis)


def basis_size(p: int, d: int, basis: str = "P") -> int:
    """Number of basis functions of ``basis`` of degree p in d variables."""
    return n_basis(p, d) if basis == "P" else n_basis_pq(p, d) if basis == "PQ" else _bad_basis(basis)


def total_degree(p, basis: str = "P"):
    """The total degree of the functions of ``basis`` of degree p (int or array): p for P, 2p for PQ.

    Quadrature exactness is set from it (products of two basis functions
    reach twice this degree).
    """
    return p if basis == "P" else 2 * p if basis == "PQ" else _bad_basis(basis)


def _bad_basis(basis: object):
    raise OptionError(f"unknown basis {basis!r}; choose one of {', '.join(BASES)}")


# --------------------------------------------------------------------------
# per-point kernel (CPU njit; GPU device function from .py_func)


@numba.njit(cache=True, fastmath=False)
def eval_basis_point(x, lo, hi, pmax, indices, nb, leg, dleg, phi, grad):  # pragma: no cover - compiled
    """Values and gradients of the first ``nb`` basis functions at one point.

    Parameters (all float arrays of one floating type, float64 or float32;
    the arithmetic is done in that type)
    ----------
    x : (d,) the point.  lo, hi : (d,) the bounding box corners.
    pmax : largest 1D degree needed (the element degree p).
    indices : (nb_total, d) int64 multi-index table, ``multi_indices(P, d)``
        with P >= pmax; only the first ``nb`` rows are used.
    nb : number of basis functions to evaluate (``n_basis(pmax, d)``).
    leg, dleg : (d, >= pmax + 1) scratch; on return
        leg[k, n] = s_n(h_k) L_n(xi_k), dleg[k, n] = s_n(h_k) (2 / h_k) L'_n(xi_k).
    phi : (>= nb,) output values.  grad : (>= nb, d) output gradients.

    Legendre recurrences (stable on the closed interval, also at xi = +-1):

        (n + 1) L_{n+1} = (2n + 1) xi L_n - n L_{n-1},
        L'_{n+1}        = L'_{n-1} + (2n + 1) L_n.

    Work: O(d pmax) for the 1D tables (one division and pmax + 1 square
    roots per direction), O(nb d) for the products (written out with
    scalars for d <= 4; prefix/suffix products for larger d).  No allocation, no exceptions, no NumPy
    calls, so the Python source also compiles as a numba-cuda device
    function.
    """
    d = x.shape[0]
    one = x.dtype.type(1)
    two = x.dtype.type(2)
    for k in range(d):
        h = hi[k] - lo[k]
        inv_h = one / h
        xi = (x[k] + x[k] - lo[k] - hi[k]) * inv_h
        dxi = two * inv_h  # d xi / d x_k
        # n = 0
        leg[k, 0] = math.sqrt(inv_h)
        dleg[k, 0] = x.dtype.type(0)
        if pmax >= 1:
            s = math.sqrt(x.dtype.type(3) * inv_h)
            leg[k, 1] = s * xi
            dleg[k, 1] = s * dxi
            l_prev = one  # L_{n-1}
            l_cur = xi  # L_n
            dl_prev = x.dtype.type(0)  # L'_{n-1}
            dl_cur = one  # L'_n
            for n in range(1, pmax):
                fn = x.dtype.type(n)
                c = fn + fn + one  # 2n + 1
                l_next = (c * xi * l_cur - fn * l_prev) / (fn + one)
                dl_next = dl_prev + c * l_cur
                s = math.sqrt((c + two) * inv_h)  # sqrt((2(n+1) + 1) / h)
                leg[k, n + 1] = s * l_next
                dleg[k, n + 1] = (s * dxi) * dl_next
                l_prev = l_cur
                l_cur = l_next
                dl_prev = dl_cur
                dl_cur = dl_next
    # products; d = 1..4 spelled out with scalars (no round trips through
    # memory), any other d by suffix / prefix products through grad[i, :]
    if d == 3:
        for i in range(nb):
            a0 = indices[i, 0]
            a1 = indices[i, 1]
            a2 = indices[i, 2]
            l0 = leg[0, a0]
            l1 = leg[1, a1]
            l2 = leg[2, a2]
            l12 = l1 * l2
            phi[i] = l0 * l12
            grad[i, 0] = dleg[0, a0] * l12
            grad[i, 1] = l0 * dleg[1, a1] * l2
            grad[i, 2] = l0 * l1 * dleg[2, a2]
    elif d == 4:
        for i in range(nb):
            a0 = indices[i, 0]
            a1 = indices[i, 1]
            a2 = indices[i, 2]
            a3 = indices[i, 3]
            l0 = leg[0, a0]
            l1 = leg[1, a1]
            l2 = leg[2, a2]
            l3 = leg[3, a3]
            l01 = l0 * l1
            l23 = l2 * l3
            phi[i] = l01 * l23
            grad[i, 0] = dleg[0, a0] * l1 * l23
            grad[i, 1] = l0 * dleg[1, a1] * l23
            grad[i, 2] = l01 * dleg[2, a2] * l3
            grad[i, 3] = l01 * l2 * dleg[3, a3]
    elif d == 2:
        for i in range(nb):
            a0 = indices[i, 0]
            a1 = indices[i, 1]
            l0 = leg[0, a0]
            l1 = leg[1, a1]
            phi[i] = l0 * l1
            grad[i, 0] = dleg[0, a0] * l1
            grad[i, 1] = l0 * dleg[1, a1]
    elif d == 1:
        for i in range(nb):
            a0 = indices[i, 0]
            phi[i] = leg[0, a0]
            grad[i, 0] = dleg[0, a0]
    else:
        for i in range(nb):
            # suffix products: grad[i, k] = prod_{m > k} leg[m, a_m]
            grad[i, d - 1] = one
            for k in range(d - 2, -1, -1):
                grad[i, k] = grad[i, k + 1] * leg[k + 1, indices[i, k + 1]]
            # prefix products, completing d/dx_k = prefix_k * dleg_k * suffix_k
            pre = one
            for k in range(d):
                a = indices[i, k]
                grad[i, k] = grad[i, k] * (pre * dleg[k, a])
                pre = pre * leg[k, a]
            phi[i] = pre


@numba.njit(cache=True, inline="always")
def element_box_tables(lo, hi, pmax, box, scale):  # pragma: no cover - compiled
    """Per-element constants of the box basis, so that points need no sqrt or division.

    box[k, 0] = 2 / h_k and box[k, 1] = -(lo_k + hi_k) / h_k (so xi_k = box[k, 0] x_k + box[k, 1]);
    scale[k, n] = sqrt((2n + 1) / h_k).
    """
    d = lo.shape[0]
    one = box.dtype.type(1)
    two = box.dtype.type(2)
    for k in range(d):
        inv_h = one / (hi[k] - lo[k])
        box[k, 0] = two * inv_h
        box[k, 1] = -(lo[k] + hi[k]) * inv_h
        for n in range(pmax + 1):
            scale[k, n] = math.sqrt(box.dtype.type(2 * n + 1) * inv_h)


def legendre_recurrence(pmax: int, dtype=np.float64) -> np.ndarray:
    """rec[0, n] = (2n + 1) / (n + 1), rec[1, n] = n / (n + 1): (n+1) L_{n+1} = (2n+1) xi L_n - n L_{n-1}."""
    n = np.arange(max(pmax, 1) + 1, dtype=np.float64)
    return np.ascontiguousarray(np.stack([(2 * n + 1) / (n + 1), n / (n + 1)]), dtype=dtype)


@numba.njit(cache=True, inline="always")
def eval_basis_point_scaled(x, box, scale, rec, pmax, indices, nb, leg, dleg, phi, gradT):  # pragma: no cover
    """:func:`eval_basis_point` with the element's constants precomputed.

    ``box`` and ``scale`` come from :func:`element_box_tables`, ``rec`` from
    :func:`legendre_recurrence`.  Same values as :func:`eval_basis_point` up
    to round-off, with only multiplications and additions per point.
    Gradients come out transposed, ``gradT[k, i]`` = d phi_i / d x_k, so
    that the kernels' loops over basis functions run along contiguous memory.
    """
    d = x.shape[0]
    zero = x.dtype.type(0)
    one = x.dtype.type(1)
    for k in range(d):
        xi = box[k, 0] * x[k] + box[k, 1]
        dxi = box[k, 0]
        leg[k, 0] = scale[k, 0]
        dleg[k, 0] = zero
        if pmax >= 1:
            leg[k, 1] = scale[k, 1] * xi
            dleg[k, 1] = scale[k, 1] * dxi
            l_prev = one
            l_cur = xi
            dl_prev = zero
            dl_cur = one
            for n in range(1, pmax):
                l_next = rec[0, n] * xi * l_cur - rec[1, n] * l_prev
                dl_next = dl_prev + x.dtype.type(2 * n + 1) * l_cur
                leg[k, n + 1] = scale[k, n + 1] * l_next
                dleg[k, n + 1] = (scale[k, n + 1] * dxi) * dl_next
                l_prev = l_cur
                l_cur = l_next
                dl_prev = dl_cur
                dl_cur = dl_next
    if d == 3:
        for i in range(nb):
            a0 = indices[i, 0]
            a1 = indices[i, 1]
            a2 = indices[i, 2]
            l0 = leg[0, a0]
            l1 = leg[1, a1]
            l2 = leg[2, a2]
            l12 = l1 * l2
            phi[i] = l0 * l12
            gradT[0, i] = dleg[0, a0] * l12
            gradT[1, i] = l0 * dleg[1, a1] * l2
            gradT[2, i] = l0 * l1 * dleg[2, a2]
    elif d == 2:
        for i in range(nb):
            a0 = indices[i, 0]
            a1 = indices[i, 1]
            l0 = leg[0, a0]
            l1 = leg[1, a1]
            phi[i] = l0 * l1
            gradT[0, i] = dleg[0, a0] * l1
            gradT[1, i] = l0 * dleg[1, a1]
    else:
        for i in range(nb):
            gradT[d - 1, i] = one
            for k in range(d - 2, -1, -1):
                gradT[k, i] = gradT[k + 1, i] * leg[k + 1, indices[i, k + 1]]
            pre = one
            for k in range(d):
                a = indices[i, k]
                gradT[k, i] = gradT[k, i] * (pre * dleg[k, a])
                pre = pre * leg[k, a]
            phi[i] = pre


#: The same kernel, inlined into its Numba callers at the IR level
#: (``inline="always"``): saves the call with its ten array arguments, a large
#: part of the basis cost at low degree.  Costs compile time in every caller;
#: results are bitwise identical.
eval_basis_point_inline = numba.njit(inline="always", fastmath=False)(eval_basis_point.py_func)


# --------------------------------------------------------------------------
# NumPy-facing tabulation


@range_kernel
def _tabulate_kernel(i0, i1, points, lo, hi, pmax, indices, nb, want_grad, values, grads):  # pragma: no cover - compiled
    """values[i, :nb] (and grads[i, :nb, :] when want_grad) at the points i0 <= i < i1."""
    d = points.shape[1]
    leg = np.empty((d, pmax + 1), dtype=points.dtype)
    dleg = np.empty((d, pmax + 1), dtype=points.dtype)
    gscratch = np.empty((nb, d), dtype=points.dtype)
    for i in range(i0, i1):
        # one inlined call site (each costs compile time): the gradients go to grads[i] or to scratch
        g = grads[i] if want_grad else gscratch
        eval_basis_point_inline(points[i], lo[i], hi[i], pmax, indices, nb, leg, dleg, values[i], g)


def _prepare(points, lo, hi) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    points = np.asarray(points)
    lo = np.asarray(lo)
    hi = np.asarray(hi)
    dtype = np.result_type(points.dtype, lo.dtype, hi.dtype, np.float32)
    if dtype not in (np.float32, np.float64):
        dtype = np.dtype(np.float64)
    if points.ndim != 2:
        raise ValueError(f"points must have shape (n, d), got {points.shape}")
    n, d = points.shape
    if not 1 <= d <= 4:
        raise ValueError(f"dimension d must be 1..4, got {d}")
    for name, box in (("lo", lo), ("hi", hi)):
        if box.shape not in ((d,), (n, d)):
            raise ValueError(f"{name} must have shape ({d},) or ({n}, {d}), got {box.shape}")
    points = np.ascontiguousarray(points, dtype=dtype)
    lo = np.ascontiguousarray(np.broadcast_to(lo, (n, d)), dtype=dtype)
    hi = np.ascontiguousarray(np.broadcast_to(hi, (n, d)), dtype=dtype)
    return points, lo, hi


def _run(points, lo, hi, p: int, want_grad: bool, basis: str = "P"):
    p = int(p)
    points, lo, hi = _prepare(points, lo, hi)
    if p < 0:
        raise OptionError(f"degree must be >= 0, got {p}")
    n, d = points.shape
    indices = np.ascontiguousarray(basis_indices(p, d, basis))
    nb = indices.shape[0]
    values = np.empty((n, nb), dtype=points.dtype)
    grads = np.empty((n, nb, d) if want_grad else (0, nb, d), dtype=points.dtype)
    if n:
        parallel_range(_tabulate_kernel, 0, n, points, lo, hi, p, indices, nb, want_grad, values, grads)
    return values, (grads if want_grad else None)


def tabulate(points: np.ndarray, lo: np.ndarray, hi: np.ndarray, p: int, basis: str = "P") -> np.ndarray:
    """Basis values phi_alpha(x_i), shape (n, basis_size(p, d, basis)).

    points : (n, d); lo, hi : (d,) (one box for all points) or (n, d) (a box
    per point).  Computed in float32 if all inputs are float32, else float64.
    Columns follow :func:`basis_indices` order (:func:`multi_indices` for P).
    """
    return _run(points, lo, hi, p, False, basis)[0]


def tabulate_gradients(points: np.ndarray, lo: np.ndarray, hi: np.ndarray, p: int, basis: str = "P") -> np.ndarray:
    """Basis gradients d phi_alpha / d x_k at x_i, shape (n, basis_size(p, d, basis), d)."""
    return _run(points, lo, hi, p, True, basis)[1]


def tabulate_both(points: np.ndarray, lo: np.ndarray, hi: np.ndarray, p: int,
                  basis: str = "P") -> tuple[np.ndarray, np.ndarray]:
    """(values (n, nb), gradients (n, nb, d)) in one pass."""
    return _run(points, lo, hi, p, True, basis)


def legendre_values(xi: np.ndarray, n: int) -> np.ndarray:
    """Unscaled Legendre polynomials L_0..L_n at xi in [-1, 1], shape xi.shape + (n + 1,)."""
    xi = np.asarray(xi, dtype=np.float64)
    out = np.empty(xi.shape + (n + 1,))
    out[..., 0] = 1.0
    if n >= 1:
        out[..., 1] = xi
    for m in range(1, n):
        out[..., m + 1] = ((2 * m + 1) * xi * out[..., m] - m * out[..., m - 1]) / (m + 1)
    return out
