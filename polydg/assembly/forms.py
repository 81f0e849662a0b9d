"""The IP-dG bilinear form and load, one quadrature point at a time.

These are the paper's eqs. (2.4) and (2.5) written pointwise: each function
adds ``w * (integrand)`` for all test functions i and trial functions j at one
quadrature point into a local block.  They hold only scalar arithmetic and
array indexing, so Numba compiles them for the CPU loops in ``kernels.py``
and numba-cuda can compile the same source as GPU device functions.

Notation (rows i = test functions v, columns j = trial functions w):

* ``phi[i]``, ``gradT[:, i]``: basis values and gradients at the point;
* ``A`` (d, d), ``b`` (d,), ``c``: the coefficients at the point;
* ``n``: the unit normal pointing OUT of the element whose rows are assembled;
* ``sigma``: the discontinuity penalty of the face.
"""

from __future__ import annotations

from numba import njit


@njit(cache=True, inline="always")
def trial_side(w, phi, gradT, nb, A, b, c, ag, bg):  # pragma: no cover - compiled
    """The trial side of :func:`volume_point` at one point: ``ag`` (d, nb) = w A grad phi_j and ``bg`` (nb,)
    = w (b . grad phi_j + c phi_j), so that block[i, j] += phi_i bg[j] + sum_k gradT[k, i] ag[k, j]."""
    d = gradT.shape[0]
    for j in range(nb):
        bg[j] = c * phi[j]
    for k in range(d):
        bk = b[k]
        for j in range(nb):
            bg[j] += bk * gradT[k, j]
        a0 = A[k, 0]
        for j in range(nb):
            ag[k, j] = a0 * gradT[0, j]
        for m in range(1, d):
            akm = A[k, m]
            for j in range(nb):
                ag[k, j] += akm * gradT[m, j]
        for j in range(nb):
            ag[k, j] *= w
    for j in range(nb):
        bg[j] *= w


@njit(cache=True, inline="always")
def volume_point(w, phi, gradT, nb, A, b, c, block, ag, bg):  # pragma: no cover - compiled
    """block[i, j] += w (A grad phi_j . grad phi_i + (b . grad phi_j + c phi_j) phi_i).

    ``gradT[k, j]`` is d phi_j / d x_k.  The trial side is contracted with the
    coefficients first (:func:`trial_side`); every loop over j then runs along
    contiguous memory, so the compiler vectorises it:
    block[i, :] += phi_i bg + sum_k gradT[k, i] ag[k, :].
    """
    d = gradT.shape[0]
    trial_side(w, phi, gradT, nb, A, b, c, ag, bg)
    if d == 3:
        # two rows at a time: each loaded trial value feeds two rows
        for i in range(0, nb - 1, 2):
            p, g0, g1, g2 = phi[i], gradT[0, i], gradT[1, i], gradT[2, i]
            q, h0, h1, h2 = phi[i + 1], gradT[0, i + 1], gradT[1, i + 1], gradT[2, i + 1]
            for j in range(nb):
                a, b0, b1, b2 = bg[j], ag[0, j], ag[1, j], ag[2, j]
                block[i, j] += p * a + g0 * b0 + g1 * b1 + g2 * b2
                block[i + 1, j] += q * a + h0 * b0 + h1 * b1 + h2 * b2
        if nb % 2 == 1:
            i = nb - 1
            p, g0, g1, g2 = phi[i], gradT[0, i], gradT[1, i], gradT[2, i]
            for j in range(nb):
                block[i, j] += p * bg[j] + g0 * ag[0, j] + g1 * ag[1, j] + g2 * ag[2, j]
    elif d == 2:
        for i in range(nb):
            p, g0, g1 = phi[i], gradT[0, i], gradT[1, i]
            for j in range(nb):
                block[i, j] += p * bg[j] + g0 * ag[0, j] + g1 * ag[1, j]
    else:
        for i in range(nb):
            for j in range(nb):
                t = phi[i] * bg[j]
                for k in range(d):
                    t += gradT[k, i] * ag[k, j]
                block[i, j] += t


@njit(cache=True, inline="always")
def load_point(w, phi, nb, f, vec):  # pragma: no cover - compiled
    """vec[i] += w f phi_i  (the source term of eq. 2.5)."""
    for i in range(nb):
        vec[i] += w * f * phi[i]


@njit(cache=True, inline="always")
def normal_flux(gradT, nb, An, out):  # pragma: no cover - compiled
    """out[j] = (A grad phi_j) . n = grad phi_j . (A n), A symmetric; gradT[k, j] = d phi_j / d x_k."""
    d = gradT.shape[0]
    a0 = An[0]
    for j in range(nb):
        out[j] = gradT[0, j] * a0
    for k in range(1, d):
        ak = An[k]
        for j in range(nb):
            out[j] += gradT[k, j] * ak


@njit(cache=True, inline="always")
def interior_face_point(w, phiK, fluxK, nbK, phiN, fluxN, nbN, bn, sigma, bKK, bKN):  # pragma: no cover
    """The rows of element K at one point of a face shared with N.

    With n the normal out of K, [[w]] = (w_K - w_N) n and
    {A grad w} = (A grad w_K + A grad w_N) / 2, the SIP terms of (2.4) for a
    test function v_K are

        -1/2 (A grad w_K.n) v_K - 1/2 (A grad v_K.n) w_K + sigma w_K v_K    (block KK)
        -1/2 (A grad w_N.n) v_K + 1/2 (A grad v_K.n) w_N - sigma w_N v_K    (block KN)

    and where b.n < 0 (inflow into K) the upwind term -(b.n)(w_K - w_N) v_K.
    ``fluxK``/``fluxN`` hold (A grad phi).n on each side.
    """
    up = -bn if bn < 0 else 0.0 * bn
    for i in range(nbK):
        vi = w * phiK[i]
        gi = 0.5 * w * fluxK[i]
        for j in range(nbK):
            bKK[i, j] += (sigma + up) * phiK[j] * vi - 0.5 * fluxK[j] * vi - gi * phiK[j]
        for j in range(nbN):
            bKN[i, j] += -(sigma + up) * phiN[j] * vi - 0.5 * fluxN[j] * vi + gi * phiN[j]


@njit(cache=True, inline="always")
def dirichlet_point(w, phi, flux, nb, sigma, gD, block, vec):  # pragma: no cover - compiled
    """Nitsche/SIP terms on the diffusive Dirichlet boundary (n outward):

    block: -(A grad w.n) v - (A grad v.n) w + sigma w v;
    load:  -gD (A grad v.n) + sigma gD v.
    """
    for i in range(nb):
        vi = w * phi[i]
        gi = w * flux[i]
        for j in range(nb):
            block[i, j] += sigma * phi[j] * vi - flux[j] * vi - gi * phi[j]
        vec[i] += gD * (sigma * vi - gi)


@njit(cache=True, inline="always")
def dirichlet_load_point(w, phi, flux, nb, sigma, gD, vec):  # pragma: no cover - compiled
    """The load of :func:`dirichlet_point` alone, the same arithmetic: vec[i] += gD (sigma v_i - (A grad v_i.n))."""
    for i in range(nb):
        vec[i] += gD * (sigma * (w * phi[i]) - w * flux[i])


@njit(cache=True, inline="always")
def inflow_point(w, phi, nb, bn, gD, block, vec):  # pragma: no cover - compiled
    """Upwind terms on the inflow boundary (b.n < 0, n outward):

    block: -(b.n) w v;  load: -(b.n) gD v.
    """
    for i in range(nb):
        vi = -bn * w * phi[i]
        for j in range(nb):
            block[i, j] += phi[j] * vi
        vec[i] += gD * vi


@njit(cache=True, inline="always")
def inflow_load_point(w, phi, nb, bn, gD, vec):  # pragma: no cover - compiled
    """The load of :func:`inflow_point` alone, the same arithmetic: vec[i] += -(b.n) gD v_i."""
    for i in range(nb):
        vec[i] += gD * (-bn * w * phi[i])


@njit(cache=True, inline="always")
def neumann_point(w, phi, nb, gN, vec):  # pragma: no cover - compiled
    """vec[i] += w gN v_i on the Neumann boundary."""
    for i in range(nb):
        vec[i] += w * gN * phi[i]
