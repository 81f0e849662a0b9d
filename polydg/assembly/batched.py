"""The interior-face form for a batch of quadrature points, and the gathers (CPU).

``forms.py`` writes the bilinear form one point at a time, which is what a
GPU thread wants.  On a CPU core that order is slow: every point reloads and
stores the whole nb x nb block for only a few multiply-adds per entry.
Here the face integrals are written as one small matrix product per batch,

    block[i, j] += sum_r T[i, r] U[j, r],

where r runs over (component, point) pairs of up to :data:`BATCH` points:
``T`` holds the test functions' values and normal fluxes at the points,
``U`` the trial functions already multiplied by the weights and
coefficients.  (The volume blocks need no such product: ``moments.py``
forms them from moments of the coefficients; they share the gather of the
points and coefficients here.)  Each entry is then a dot product along contiguous memory,
computed 4 x 4 entries at a time so that every loaded value feeds four
multiply-adds; this is what brings the kernels near the machine's
matrix-product rate (see ``launch/bench_assembly.py``).

Sums run in a fixed order for each element, so results stay bitwise
reproducible for any chunking and thread count; they differ from the
pointwise forms only by round-off (tested).
"""

from __future__ import annotations

import math

from numba import njit

#: points per batch: large enough for long dot products, small enough that
#: T and U stay in the core's L1/L2 cache (at p = 3 in 3D: 2 x 20 x 256 doubles).
BATCH = 64

#: a face batch of n points is padded to a multiple of PAD (see :func:`pad_face_batch`)
PAD = 4


#: reassociation lets the compiler vectorise the dot products' sums; the order
#: it picks is fixed at compile time, so results stay deterministic
_FAST = {"reassoc", "contract", "nsz"}


@njit(cache=True, fastmath=_FAST)
def contract(T, U, R, nr, nc, block):  # pragma: no cover - compiled
    """block[i, j] += sum_{r < R} T[i, r] U[j, r] for i < nr, j < nc: :func:`contract_span` from 0."""
    contract_span(T, U, 0, R, nr, nc, block)


@njit(cache=True, fastmath=_FAST)
def contract_span(T, U, r0, r1, nr, nc, block):  # pragma: no cover - compiled
    """block[i, j] += sum_{r0 <= r < r1} T[i, r] U[j, r] for i < nr, j < nc.

    4 x 4 entries at a time where they fit (every loaded value feeds four
    multiply-adds, twice as many as 2 x 2 tiles), the remaining rows and
    columns 2 x 2 at a time.
    """
    i4 = nr // 4 * 4
    j4 = nc // 4 * 4
    _contract_quads(T, U, r0, r1, i4, j4, block)
    _contract_pairs(T, U, r0, r1, 0, i4, j4, nc, block)
    _contract_pairs(T, U, r0, r1, i4, nr, 0, nc, block)


@njit(cache=True, fastmath=_FAST, inline="always")
def _contract_quads(T, U, r0, r1, i_end, j_end, block):  # pragma: no cover - compiled
    """:func:`contract_span` for i < i_end, j < j_end (multiples of 4), 4 x 4 entries at a time."""
    zero = T.dtype.type(0)
    for i in range(0, i_end, 4):
        for j in range(0, j_end, 4):
            s00 = s01 = s02 = s03 = s10 = s11 = s12 = s13 = zero
            s20 = s21 = s22 = s23 = s30 = s31 = s32 = s33 = zero
            for r in range(r0, r1):
                t0, t1, t2, t3 = T[i, r], T[i + 1, r], T[i + 2, r], T[i + 3, r]
                u0, u1, u2, u3 = U[j, r], U[j + 1, r], U[j + 2, r], U[j + 3, r]
                s00 += t0 * u0
                s01 += t0 * u1
                s02 += t0 * u2
                s03 += t0 * u3
                s10 += t1 * u0
                s11 += t1 * u1
                s12 += t1 * u2
                s13 += t1 * u3
                s20 += t2 * u0
                s21 += t2 * u1
                s22 += t2 * u2
                s23 += t2 * u3
                s30 += t3 * u0
                s31 += t3 * u1
                s32 += t3 * u2
                s33 += t3 * u3
            block[i, j] += s00
            block[i, j + 1] += s01
            block[i, j + 2] += s02
            block[i, j + 3] += s03
            block[i + 1, j] += s10
            block[i + 1, j + 1] += s11
            block[i + 1, j + 2] += s12
            block[i + 1, j + 3] += s13
            block[i + 2, j] += s20
            block[i + 2, j + 1] += s21
            block[i + 2, j + 2] += s22
            block[i + 2, j + 3] += s23
            block[i + 3, j] += s30
            block[i + 3, j + 1] += s31
            block[i + 3, j + 2] += s32
            block[i + 3, j + 3] += s33


@njit(cache=True, fastmath=_FAST, inline="always")
def _contract_pairs(T, U, r0, r1, i0, i1, j0, j1, block):  # pragma: no cover - compiled
    """:func:`contract_span` for i0 <= i < i1, j0 <= j < j1, 2 x 2 entries at a time (then the odd row, column)."""
    zero = T.dtype.type(0)
    for i in range(i0, i1 - 1, 2):
        for j in range(j0, j1 - 1, 2):
            s00 = zero
            s01 = zero
            s10 = zero
            s11 = zero
            for r in range(r0, r1):
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
        if (j1 - j0) % 2 == 1:
            j = j1 - 1
            s0 = zero
            s1 = zero
            for r in range(r0, r1):
                u = U[j, r]
                s0 += T[i, r] * u
                s1 += T[i + 1, r] * u
            block[i, j] += s0
            block[i + 1, j] += s1
    if (i1 - i0) % 2 == 1:
        i = i1 - 1
        for j in range(j0, j1):
            s = zero
            for r in range(r0, r1):
                s += T[i, r] * U[j, r]
            block[i, j] += s


@njit(cache=True, inline="always")
def legendre_batch(x, n, box, scale, rec, pmax, L, dL):  # pragma: no cover - compiled
    """L[k, m, q], dL[k, m, q]: the scaled 1D Legendre factors of the box basis at the points x[:, q], q < n.

    The recurrence of :func:`polydg.basis.eval_basis_point_scaled`, with the
    point index innermost so that every loop runs along contiguous memory,
    run on the scaled values themselves (its coefficients absorb the scale
    factors): one pass per degree and direction, no pass for the constant
    and none to scale each degree afterwards, since on faces of 4-16 points
    the passes' set-up, not their arithmetic, is most of the cost.
    """
    d = x.shape[0]
    zero = x.dtype.type(0)
    for k in range(d):
        a, c, s0 = box[k, 0], box[k, 1], scale[k, 0]
        if pmax == 0:
            for q in range(n):
                L[k, 0, q] = s0
                dL[k, 0, q] = zero
            continue
        s1 = scale[k, 1]
        ds1 = s1 * a
        for q in range(n):
            L[k, 0, q] = s0
            dL[k, 0, q] = zero
            L[k, 1, q] = s1 * (a * x[k, q] + c)
            dL[k, 1, q] = ds1
        for m in range(1, pmax):
            # with S_m = s_m P_m and D_m = s_m a P_m':  S_{m+1} = s_{m+1} (r_a xi P_m - r_b P_{m-1}),
            # D_{m+1} = s_{m+1} a (P_{m-1}' + (2m + 1) P_m)
            up = scale[k, m + 1]
            f1, f0 = up * rec[0, m] / scale[k, m], up * rec[1, m] / scale[k, m - 1]
            g0, g1 = up / scale[k, m - 1], (2 * m + 1) * up * a / scale[k, m]
            for q in range(n):
                xi = a * x[k, q] + c
                L[k, m + 1, q] = f1 * xi * L[k, m, q] - f0 * L[k, m - 1, q]
                dL[k, m + 1, q] = g0 * dL[k, m - 1, q] + g1 * L[k, m, q]


#: how :func:`gather_volume_coefficients` left the diffusion of a batch
A_ISOTROPIC, A_CONSTANT, A_POINTWISE = 0, 1, 2


@njit(cache=True, inline="always")
def _weighted_copy(r0, n, w, G, constant, out):  # pragma: no cover - compiled
    """out[q] = w[q] G[r0 + q] (or w[q] G[0] for a constant), a loop without a branch inside."""
    if constant:
        g = G[0]
        for q in range(n):
            out[q] = w[q] * g
    else:
        Gv = G[r0:r0 + n]  # indexed by q alone: see gather_volume_coefficients
        for q in range(n):
            out[q] = w[q] * Gv[q]


@njit(cache=True, inline="always")
def _weighted_diffusion(r0, n, w, A, Ab):  # pragma: no cover - compiled
    """Ab[k, l, q] = w[q] A[r0 + q, k, l]: a diffusion that varies from point to point, weighted."""
    d = Ab.shape[0]
    Av = A[r0:r0 + n]
    for q in range(n):
        for k in range(d):
            for m in range(d):
                Ab[k, m, q] = w[q] * Av[q, k, m]


@njit(cache=True, inline="always")
def gather_volume_coefficients(r0, n, X, W, A, B, C, F, want_load, x, w, Ab, Bb, Cb, Fb):  # pragma: no cover
    """Copy the batch's points and weights point-innermost, and its coefficients times the weights.

    Coefficients have one row per point, or one constant row.  Returns how
    the diffusion was left in ``Ab``: a constant multiple of the identity as
    the weighted scalar in ``Ab[0, 0, :]`` (A_ISOTROPIC), another constant
    matrix once, unweighted, in ``Ab[:, :, 0]`` (A_CONSTANT), or per point,
    weighted (A_POINTWISE).
    """
    d = x.shape[0]
    one_a, one_b, one_c, one_f = A.shape[0] == 1, B.shape[0] == 1, C.shape[0] == 1, F.shape[0] == 1
    a_kind = A_POINTWISE
    if one_a:
        a_kind = A_ISOTROPIC
        for k in range(d):
            for m in range(d):
                Ab[k, m, 0] = A[0, k, m]
                if (k == m and A[0, k, m] != A[0, 0, 0]) or (k != m and A[0, k, m] != 0):
                    a_kind = A_CONSTANT
    # the points, weights and coefficients are read in one pass when all vary
    # (the usual case), else one pass per array; each loop streams contiguous
    # memory, with the choice between a constant and a pointwise coefficient
    # made outside it (not one loop per component with the choice inside).
    # The loops index views of the batch's rows by the loop counter: Numba
    # wraps a negative index, and the select that X[r0 + q] costs in the
    # address keeps LLVM from vectorising the loop.  The fused loops read the
    # (n, d) rows of X and B as flat vectors (indexed (q, k), the
    # de-interleaving was not vectorised), and write A = a I's weighted row in
    # the same pass (launch/profile_element_kernel.py; docs/performance.md).
    # (A constant's slice is empty and unused.)
    Xv, Wv, Bv = X[r0:r0 + n], W[r0:r0 + n], B[r0:r0 + n]
    fused = not one_b and not one_c and want_load and not one_f
    if fused and (d == 2 or d == 3):
        Xf, Bf = Xv.ravel(), Bv.ravel()
        Cv, Fv = C[r0:r0 + n], F[r0:r0 + n]
        # Ab[0, 0, :] = w a in every case, a branch-free loop; then a constant matrix's
        # first entry is put back and a pointwise A is weighted over it
        a = A[0, 0, 0]
        av = Ab[0, 0]
        if d == 3:
            for q in range(n):
                wq = Wv[q]
                w[q] = wq
                x[0, q] = Xf[3 * q]
                x[1, q] = Xf[3 * q + 1]
                x[2, q] = Xf[3 * q + 2]
                Bb[0, q] = wq * Bf[3 * q]
                Bb[1, q] = wq * Bf[3 * q + 1]
                Bb[2, q] = wq * Bf[3 * q + 2]
                Cb[q] = wq * Cv[q]
                Fb[q] = wq * Fv[q]
                av[q] = a * wq
        else:
            for q in range(n):
                wq = Wv[q]
                w[q] = wq
                x[0, q] = Xf[2 * q]
                x[1, q] = Xf[2 * q + 1]
                Bb[0, q] = wq * Bf[2 * q]
                Bb[1, q] = wq * Bf[2 * q + 1]
                Cb[q] = wq * Cv[q]
                Fb[q] = wq * Fv[q]
                av[q] = a * wq
        if a_kind == A_CONSTANT:
            Ab[0, 0, 0] = a
        elif a_kind == A_POINTWISE:
            _weighted_diffusion(r0, n, w, A, Ab)
        return a_kind
    if d == 3:
        for q in range(n):
            w[q] = Wv[q]
            x[0, q] = Xv[q, 0]
            x[1, q] = Xv[q, 1]
            x[2, q] = Xv[q, 2]
    elif d == 2:
        for q in range(n):
            w[q] = Wv[q]
            x[0, q] = Xv[q, 0]
            x[1, q] = Xv[q, 1]
    else:
        for q in range(n):
            w[q] = Wv[q]
        for k in range(d):
            for q in range(n):
                x[k, q] = Xv[q, k]
    if a_kind == A_ISOTROPIC:
        a = A[0, 0, 0]
        for q in range(n):
            Ab[0, 0, q] = a * w[q]
    elif a_kind == A_POINTWISE:
        _weighted_diffusion(r0, n, w, A, Ab)
    if one_b:
        for k in range(d):
            bk = B[0, k]
            for q in range(n):
                Bb[k, q] = w[q] * bk
    elif d == 3:
        for q in range(n):
            wq = w[q]
            Bb[0, q] = wq * Bv[q, 0]
            Bb[1, q] = wq * Bv[q, 1]
            Bb[2, q] = wq * Bv[q, 2]
    elif d == 2:
        for q in range(n):
            wq = w[q]
            Bb[0, q] = wq * Bv[q, 0]
            Bb[1, q] = wq * Bv[q, 1]
    else:
        for k in range(d):
            for q in range(n):
                Bb[k, q] = w[q] * Bv[q, k]
    _weighted_copy(r0, n, w, C, one_c, Cb)
    if want_load:
        _weighted_copy(r0, n, w, F, one_f, Fb)
    return a_kind


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
    # points, weights and the upwind weight in one pass when b varies (faces
    # have few points: one loop instead of 2 + d, and no choice inside it)
    fused = not const_b and d == 3
    if fused:
        n0, n1, n2 = n[0], n[1], n[2]
        for i in range(m):
            r = r0 + i
            w[q0 + i] = W[r]
            x[0, q0 + i] = X[r, 0]
            x[1, q0 + i] = X[r, 1]
            x[2, q0 + i] = X[r, 2]
            bn = B[r, 0] * n0 + B[r, 1] * n1 + B[r, 2] * n2
            coef[q0 + i] = sigma_f - bn if bn < 0 else sigma_f
    elif d == 2 and not const_b:
        fused = True
        n0, n1 = n[0], n[1]
        for i in range(m):
            r = r0 + i
            w[q0 + i] = W[r]
            x[0, q0 + i] = X[r, 0]
            x[1, q0 + i] = X[r, 1]
            bn = B[r, 0] * n0 + B[r, 1] * n1
            coef[q0 + i] = sigma_f - bn if bn < 0 else sigma_f
    else:
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
    if fused:
        return
    if const_b:
        bn = B[0, 0] * n[0]
        for k in range(1, d):
            bn += B[0, k] * n[k]
        c = sigma_f - bn if bn < 0 else sigma_f
        for i in range(m):
            coef[q0 + i] = c
    else:
        for i in range(m):
            bn = B[r0 + i, 0] * n[0]
            for k in range(1, d):
                bn += B[r0 + i, k] * n[k]
            coef[q0 + i] = sigma_f - bn if bn < 0 else sigma_f


@njit(cache=True, inline="always")
def pad_face_batch(n, x, w, An, coef):  # pragma: no cover - compiled
    """Pad the n gathered face points to a multiple of :data:`PAD`; returns the padded size.

    The padding slots repeat the last point with weight 0, so they add
    exactly nothing, and every vector loop over the batch then runs without
    a remainder.  An interface has few points (about 12 at p = 2 in 3D,
    often one triangle of 4 at p = 1), so the remainder loops would be a
    large share of the work; :data:`PAD` is the width of the 256-bit vectors
    the compiler uses here, which does not double a 4-point interface.
    Volume batches, mostly full, are not padded (docs/performance.md).
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
def basis_flux_batch(x, n, box, scale, rec, pmax, indices, nb, L, dL, An, S):  # pragma: no cover - compiled
    """S[i, 2q] = phi_i(x_q) and S[i, 2q + 1] = (A grad phi_i) . n = grad phi_i . (A n)_q  (A symmetric), q < n.

    Each point's value and flux sit side by side, so that any run of points
    q0 <= q < q1 is the contiguous columns [2 q0, 2 q1): one segment of a
    batch contracts as one range (:func:`contract_span`), not as two short
    ranges of values and fluxes.

    What a face needs of its basis functions, straight from the 1D factors:
    the gradient rows are never stored, and no second pass turns them into
    fluxes (docs/performance.md).
    """
    legendre_batch(x, n, box, scale, rec, pmax, L, dL)
    values_and_fluxes(L, dL, n, indices, nb, An, S)


@njit(cache=True, inline="always")
def point_box(lo, hi, q0, q1, boxes):  # pragma: no cover - compiled
    """boxes[k, :, q] = (2 / h_k, -(lo_k + hi_k) / h_k, sqrt(1 / h_k)) for q0 <= q < q1: one element's box,
    for :func:`basis_flux_boxes`."""
    one = boxes.dtype.type(1)
    for k in range(boxes.shape[0]):
        inv_h = one / (hi[k] - lo[k])
        a, c, s0 = 2 * inv_h, -(lo[k] + hi[k]) * inv_h, math.sqrt(inv_h)
        for q in range(q0, q1):
            boxes[k, 0, q] = a
            boxes[k, 1, q] = c
            boxes[k, 2, q] = s0


@njit(cache=True, inline="always")
def legendre_batch_boxes(x, n, boxes, rec, pmax, L, dL):  # pragma: no cover - compiled
    """:func:`legendre_batch` for points 0 <= q < n each in its own box (``boxes`` from :func:`point_box`).

    The ratios of the scale factors, s_{m+1} / s_m = sqrt((2m + 3) / (2m + 1)),
    do not depend on the box, so the recurrence's coefficients are per
    degree and only a, c, s_0 are per point.
    """
    d = x.shape[0]
    zero = x.dtype.type(0)
    sqrt3 = math.sqrt(x.dtype.type(3))
    for k in range(d):
        for q in range(n):
            L[k, 0, q] = boxes[k, 2, q]
            dL[k, 0, q] = zero
        if pmax == 0:
            continue
        for q in range(n):
            a, s1 = boxes[k, 0, q], sqrt3 * boxes[k, 2, q]
            L[k, 1, q] = s1 * (a * x[k, q] + boxes[k, 1, q])
            dL[k, 1, q] = s1 * a
        for m in range(1, pmax):
            r1 = math.sqrt(x.dtype.type(2 * m + 3) / (2 * m + 1))  # s_{m+1} / s_m
            r2 = math.sqrt(x.dtype.type(2 * m + 3) / (2 * m - 1))  # s_{m+1} / s_{m-1}
            f1, f0, g1 = r1 * rec[0, m], r2 * rec[1, m], (2 * m + 1) * r1
            for q in range(n):
                a = boxes[k, 0, q]
                xi = a * x[k, q] + boxes[k, 1, q]
                L[k, m + 1, q] = f1 * xi * L[k, m, q] - f0 * L[k, m - 1, q]
                dL[k, m + 1, q] = r2 * dL[k, m - 1, q] + g1 * a * L[k, m, q]


@njit(cache=True, inline="always")
def basis_flux_boxes(x, n, boxes, rec, pmax, indices, nb, L, dL, An, S):  # pragma: no cover - compiled
    """:func:`basis_flux_batch` for points 0 <= q < n each in its own box: the neighbours of one element
    across several interfaces, in one pass."""
    legendre_batch_boxes(x, n, boxes, rec, pmax, L, dL)
    values_and_fluxes(L, dL, n, indices, nb, An, S)


@njit(cache=True, inline="always")
def values_and_fluxes(L, dL, n, indices, nb, An, S):  # pragma: no cover - compiled
    """S[i, 2q] = phi_i and S[i, 2q + 1] = grad phi_i . (A n)_q from the 1D factors L, dL, q < n."""
    d = L.shape[0]
    if d == 3:
        for i in range(nb):
            a0, a1, a2 = indices[i, 0], indices[i, 1], indices[i, 2]
            for q in range(n):
                l0, l1, l2 = L[0, a0, q], L[1, a1, q], L[2, a2, q]
                l12 = l1 * l2
                S[i, 2 * q] = l0 * l12
                S[i, 2 * q + 1] = (dL[0, a0, q] * l12 * An[0, q]
                                   + l0 * (dL[1, a1, q] * l2 * An[1, q] + l1 * dL[2, a2, q] * An[2, q]))
    elif d == 2:
        for i in range(nb):
            a0, a1 = indices[i, 0], indices[i, 1]
            for q in range(n):
                l0, l1 = L[0, a0, q], L[1, a1, q]
                S[i, 2 * q] = l0 * l1
                S[i, 2 * q + 1] = dL[0, a0, q] * l1 * An[0, q] + l0 * dL[1, a1, q] * An[1, q]
    else:
        for i in range(nb):
            for q in range(n):
                v = L[0, indices[i, 0], q]
                for k in range(1, d):
                    v *= L[k, indices[i, k], q]
                S[i, 2 * q] = v
                flux = 0 * v
                for k in range(d):
                    g = dL[k, indices[i, k], q] * An[k, q]
                    for m in range(d):
                        if m != k:
                            g *= L[m, indices[i, m], q]
                    flux += g
                S[i, 2 * q + 1] = flux


@njit(cache=True, inline="always")
def interior_trial_batch(S, n, nb, w, coef, sign, U):  # pragma: no cover - compiled
    """Trial rows of one side of an interior face, for :func:`contract` with the test rows S_K of K.

    With S[j, 2q] = phi_j, S[j, 2q + 1] = (A grad phi_j).n on the trial side (from :func:`basis_flux_batch`)
    and c_q = sigma + upwind weight (see
    :func:`polydg.assembly.forms.interior_face_point`):

        sign = +1 (block KK): U[j, 2q] = w (c phi_j - flux_j / 2),  U[j, 2q + 1] = -w phi_j / 2;
        sign = -1 (block KN): U[j, 2q] = w (-c phi_j - flux_j / 2), U[j, 2q + 1] = +w phi_j / 2,

    for the points q < n.
    """
    half = S.dtype.type(0.5)
    for j in range(nb):
        for q in range(n):
            wq = w[q]
            U[j, 2 * q] = wq * (sign * coef[q] * S[j, 2 * q] - half * S[j, 2 * q + 1])
            U[j, 2 * q + 1] = -sign * half * wq * S[j, 2 * q]
