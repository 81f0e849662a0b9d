"""The volume and interior-face forms for a batch of quadrature points (CPU).

``forms.py`` writes the bilinear form one point at a time, which is what a
GPU thread wants.  On a CPU core that order is slow: every point reloads and
stores the whole nb x nb block for only (d + 1) multiply-adds per entry.
Here the same integrals are written as one small matrix product per batch,

    block[i, j] += sum_r T[i, r] U[j, r],

where r runs over (component, point) pairs of up to :data:`BATCH` points:
``T`` holds the test functions' values (and gradients, or normal fluxes) at
the points, ``U`` the trial functions already multiplied by the weights and
coefficients.  Each entry is then a dot product along contiguous memory,
computed 2 x 2 entries at a time so that every loaded value feeds two
multiply-adds; this is what brings the kernels near the machine's
matrix-product rate (see ``launch/bench_assembly.py``).

Sums run in a fixed order for each element, so results stay bitwise
reproducible for any chunking and thread count; they differ from the
pointwise forms only by round-off (tested).
"""

from __future__ import annotations

from numba import njit

#: points per batch: large enough for long dot products, small enough that
#: T and U stay in the core's L1/L2 cache (at p = 3 in 3D: 2 x 20 x 256 doubles).
BATCH = 64

#: a face batch of n points is padded to a multiple of PAD (see :func:`pad_face_batch`)
PAD = 8


#: reassociation lets the compiler vectorise the dot products' sums; the order
#: it picks is fixed at compile time, so results stay deterministic
_FAST = {"reassoc", "contract", "nsz"}


@njit(cache=True, fastmath=_FAST)
def contract(T, U, R, nr, nc, block):  # pragma: no cover - compiled
    """block[i, j] += sum_{r < R} T[i, r] U[j, r] for i < nr, j < nc."""
    zero = T.dtype.type(0)
    for i in range(0, nr - 1, 2):
        for j in range(0, nc - 1, 2):
            s00 = zero
            s01 = zero
            s10 = zero
            s11 = zero
            for r in range(R):
                t0 = T[i, r]
                t1 = T[i + 1, r]
                u0 = U[j, r]
                u1 = U[j + 1, r]
                s00 += t0 * u0
                s01 += t0 * u1
                s10 += t1 * u0
                s11 += t1 * u1
            block[i, j] += s00
            block[i, j + 1] += s01
            block[i + 1, j] += s10
            block[i + 1, j + 1] += s11
        if nc % 2 == 1:
            j = nc - 1
            s0 = zero
            s1 = zero
            for r in range(R):
                u = U[j, r]
                s0 += T[i, r] * u
                s1 += T[i + 1, r] * u
            block[i, j] += s0
            block[i + 1, j] += s1
    if nr % 2 == 1:
        i = nr - 1
        for j in range(nc):
            s = zero
            for r in range(R):
                s += T[i, r] * U[j, r]
            block[i, j] += s


@njit(cache=True, inline="always")
def legendre_batch(x, n, box, scale, rec, pmax, L, dL):  # pragma: no cover - compiled
    """L[k, m, q], dL[k, m, q]: the scaled 1D Legendre factors of the box basis at the points x[:, q].

    The recurrence of :func:`polydg.basis.eval_basis_point_scaled`, with the
    point index innermost so that every loop runs along contiguous memory.
    """
    d = x.shape[0]
    one = x.dtype.type(1)
    zero = x.dtype.type(0)
    for k in range(d):
        a, c = box[k, 0], box[k, 1]
        for q in range(n):
            L[k, 0, q] = one
            dL[k, 0, q] = zero
        if pmax >= 1:
            for q in range(n):
                L[k, 1, q] = a * x[k, q] + c
                dL[k, 1, q] = one
        for m in range(1, pmax):
            r_a, r_b, two_m1 = rec[0, m], rec[1, m], x.dtype.type(2 * m + 1)
            for q in range(n):
                xi = L[k, 1, q]
                L[k, m + 1, q] = r_a * xi * L[k, m, q] - r_b * L[k, m - 1, q]
                dL[k, m + 1, q] = dL[k, m - 1, q] + two_m1 * L[k, m, q]
        for m in range(pmax + 1):
            s = scale[k, m]
            ds = s * a
            for q in range(n):
                L[k, m, q] *= s
                dL[k, m, q] *= ds


@njit(cache=True, inline="always")
def basis_batch(x, n, box, scale, rec, pmax, indices, nb, L, dL, T):  # pragma: no cover - compiled
    """T[i, q] = phi_i(x_q) and T[i, (k + 1) n + q] = d phi_i / d x_k (x_q) at the points x[:, q], q < n."""
    d = x.shape[0]
    legendre_batch(x, n, box, scale, rec, pmax, L, dL)
    if d == 3:
        for i in range(nb):
            a0, a1, a2 = indices[i, 0], indices[i, 1], indices[i, 2]
            for q in range(n):
                l0, l1, l2 = L[0, a0, q], L[1, a1, q], L[2, a2, q]
                l12 = l1 * l2
                T[i, q] = l0 * l12
                T[i, n + q] = dL[0, a0, q] * l12
                T[i, 2 * n + q] = l0 * dL[1, a1, q] * l2
                T[i, 3 * n + q] = l0 * l1 * dL[2, a2, q]
    elif d == 2:
        for i in range(nb):
            a0, a1 = indices[i, 0], indices[i, 1]
            for q in range(n):
                l0, l1 = L[0, a0, q], L[1, a1, q]
                T[i, q] = l0 * l1
                T[i, n + q] = dL[0, a0, q] * l1
                T[i, 2 * n + q] = l0 * dL[1, a1, q]
    else:
        for i in range(nb):
            for q in range(n):
                v = L[0, indices[i, 0], q]
                for k in range(1, d):
                    v *= L[k, indices[i, k], q]
                T[i, q] = v
                for k in range(d):
                    g = dL[k, indices[i, k], q]
                    for m in range(d):
                        if m != k:
                            g *= L[m, indices[i, m], q]
                    T[i, (k + 1) * n + q] = g


@njit(cache=True, inline="always")
def volume_trial_batch(T, n, nb, w, A, const_A, b, c, U):  # pragma: no cover - compiled
    """U[j, q] = w (c phi_j + b . grad phi_j), U[j, (k + 1) n + q] = w (A grad phi_j)_k at the batch points.

    ``w`` (n,), ``A`` (d, d, n), ``b`` (d, n), ``c`` (n,) are the batch's
    weights and coefficients (with ``const_A``, A[:, :, 0] holds a constant
    A); with ``T`` from :func:`basis_batch`, :func:`contract` (T, U) adds the
    volume term of (2.4), the sum of
    :func:`polydg.assembly.forms.volume_point` over the points.
    """
    d = A.shape[0]
    # one loop per dimension, so that the point loop is the innermost (vectorised)
    if d == 3:
        for j in range(nb):
            for q in range(n):
                U[j, q] = w[q] * (c[q] * T[j, q] + b[0, q] * T[j, n + q] + b[1, q] * T[j, 2 * n + q]
                                  + b[2, q] * T[j, 3 * n + q])
    elif d == 2:
        for j in range(nb):
            for q in range(n):
                U[j, q] = w[q] * (c[q] * T[j, q] + b[0, q] * T[j, n + q] + b[1, q] * T[j, 2 * n + q])
    else:
        for j in range(nb):
            for q in range(n):
                s = c[q] * T[j, q]
                for k in range(d):
                    s += b[k, q] * T[j, (k + 1) * n + q]
                U[j, q] = w[q] * s
    if const_A and d == 3:
        # the common case (constant diffusion) gets its own loop: scalars, no gathers
        a00, a01, a02, a10, a11, a12, a20, a21, a22 = (A[0, 0, 0], A[0, 1, 0], A[0, 2, 0], A[1, 0, 0], A[1, 1, 0],
                                                       A[1, 2, 0], A[2, 0, 0], A[2, 1, 0], A[2, 2, 0])
        for j in range(nb):
            for q in range(n):
                g0, g1, g2 = T[j, n + q], T[j, 2 * n + q], T[j, 3 * n + q]
                wq = w[q]
                U[j, n + q] = wq * (a00 * g0 + a01 * g1 + a02 * g2)
                U[j, 2 * n + q] = wq * (a10 * g0 + a11 * g1 + a12 * g2)
                U[j, 3 * n + q] = wq * (a20 * g0 + a21 * g1 + a22 * g2)
    elif const_A and d == 2:
        a00, a01, a10, a11 = A[0, 0, 0], A[0, 1, 0], A[1, 0, 0], A[1, 1, 0]
        for j in range(nb):
            for q in range(n):
                g0, g1 = T[j, n + q], T[j, 2 * n + q]
                wq = w[q]
                U[j, n + q] = wq * (a00 * g0 + a01 * g1)
                U[j, 2 * n + q] = wq * (a10 * g0 + a11 * g1)
    else:
        for j in range(nb):
            for k in range(d):
                for q in range(n):
                    qa = 0 if const_A else q
                    s = A[k, 0, qa] * T[j, n + q]
                    for m in range(1, d):
                        s += A[k, m, qa] * T[j, (m + 1) * n + q]
                    U[j, (k + 1) * n + q] = w[q] * s


@njit(cache=True, fastmath=_FAST)
def load_batch(T, n, nb, w, f, vec):  # pragma: no cover - compiled
    """vec[i] += sum_q w_q f_q phi_i(x_q): the source term of (2.5) over the batch."""
    for i in range(nb):
        s = T.dtype.type(0)
        for q in range(n):
            s += w[q] * f[q] * T[i, q]
        vec[i] += s


@njit(cache=True, inline="always")
def gather_volume_coefficients(r0, n, X, W, A, B, C, F, want_load, x, w, Ab, Bb, Cb, Fb):  # pragma: no cover
    """Copy the batch's points, weights and coefficients point-innermost.

    Coefficients have one row per point, or one constant row; a constant A
    is copied once, into Ab[:, :, 0] (see :func:`volume_trial_batch`).
    """
    d = x.shape[0]
    one_a, one_b, one_c, one_f = A.shape[0] == 1, B.shape[0] == 1, C.shape[0] == 1, F.shape[0] == 1
    for k in range(d):
        for m in range(d):
            Ab[k, m, 0] = A[0, k, m]
    for q in range(n):
        r = r0 + q
        w[q] = W[r]
        for k in range(d):
            x[k, q] = X[r, k]
        rb = 0 if one_b else r
        if not one_a:
            for k in range(d):
                for m in range(d):
                    Ab[k, m, q] = A[r, k, m]
        for k in range(d):
            Bb[k, q] = B[rb, k]
        Cb[q] = C[0 if one_c else r]
        if want_load:
            Fb[q] = F[0 if one_f else r]


# --------------------------------------------------------------------------
# interior faces


@njit(cache=True, inline="always")
def gather_face_points(q0, r0, m, X, W, A, B, n, sigma_f, x, w, An, coef):  # pragma: no cover - compiled
    """Batch slots q0:q0+m <- points r0:r0+m of one interior face with unit normal ``n`` (out of K).

    An[:, q] = A n, and coef[q] = sigma + max(-b.n, 0): the penalty plus the
    upwind weight where the flow enters K.  The points of a face are
    consecutive, so each quantity is one loop over them (vectorised), and a
    constant A or b is applied to the normal once per face.
    """
    d = x.shape[0]
    const_a, const_b = A.shape[0] == 1, B.shape[0] == 1
    for i in range(m):
        w[q0 + i] = W[r0 + i]
    for k in range(d):
        for i in range(m):
            x[k, q0 + i] = X[r0 + i, k]
    if const_a:
        for k in range(d):
            s = A[0, k, 0] * n[0]
            for l in range(1, d):
                s += A[0, k, l] * n[l]
            for i in range(m):
                An[k, q0 + i] = s
    else:
        for k in range(d):
            for i in range(m):
                s = A[r0 + i, k, 0] * n[0]
                for l in range(1, d):
                    s += A[r0 + i, k, l] * n[l]
                An[k, q0 + i] = s
    for i in range(m):
        rb = 0 if const_b else r0 + i
        bn = B[rb, 0] * n[0]
        for k in range(1, d):
            bn += B[rb, k] * n[k]
        coef[q0 + i] = sigma_f - bn if bn < 0 else sigma_f


@njit(cache=True, inline="always")
def pad_face_batch(n, x, w, An, coef):  # pragma: no cover - compiled
    """Pad the n gathered face points to a multiple of :data:`PAD`; returns the padded size.

    The padding slots repeat the last point with weight 0, so they add
    exactly nothing, and every vector loop over the batch then runs without
    a remainder.  An interface has few points (12 on average at p = 2 in
    3D): padded to 16, the interior kernel was measured 1.35x faster at
    p = 2.  (Volume batches, mostly full, were measured slower padded.)
    """
    m = (n + PAD - 1) // PAD * PAD
    for q in range(n, m):
        w[q] = 0
        coef[q] = 0
        for k in range(x.shape[0]):
            x[k, q] = x[k, n - 1]
            An[k, q] = 0
    return m


@njit(cache=True, inline="always")
def flux_batch(T, n, nb, An):  # pragma: no cover - compiled
    """Turn the gradient rows of ``T`` (from :func:`basis_batch`) into normal fluxes, in place:

    T[i, n + q] = (A grad phi_i) . n = grad phi_i . (A n)  (A symmetric).
    """
    d = An.shape[0]
    # one loop per term, the point loop innermost (measured 1.3x faster than
    # one loop summing the terms: each loop then reads rows other than the
    # one it updates in place, and vectorises)
    for i in range(nb):
        for q in range(n):
            T[i, n + q] *= An[0, q]
        for k in range(1, d):
            for q in range(n):
                T[i, n + q] += T[i, (k + 1) * n + q] * An[k, q]


@njit(cache=True, inline="always")
def interior_trial_batch(S, n, nb, w, coef, sign, U):  # pragma: no cover - compiled
    """Trial rows of one side of an interior face, for :func:`contract` with the test rows S_K of K.

    With S[j, q] = phi_j, S[j, n + q] = (A grad phi_j).n on the trial side
    and c_q = sigma + upwind weight (see
    :func:`polydg.assembly.forms.interior_face_point`):

        sign = +1 (block KK): U[j, q] = w (c phi_j - flux_j / 2),  U[j, n + q] = -w phi_j / 2;
        sign = -1 (block KN): U[j, q] = w (-c phi_j - flux_j / 2), U[j, n + q] = +w phi_j / 2.
    """
    half = S.dtype.type(0.5)
    for j in range(nb):
        for q in range(n):
            wq = w[q]
            U[j, q] = wq * (sign * coef[q] * S[j, q] - half * S[j, n + q])
            U[j, n + q] = -sign * half * wq * S[j, q]
