"""The batched CPU face forms (assembly/batched.py) against the pointwise forms (assembly/forms.py).

The pointwise forms are the mathematics as written in the paper (and what a
GPU thread runs); the batched ones reorder the same sums for SIMD.  They must
agree to round-off, for every dimension, degree, constant or varying
coefficient, and batch sizes that do and do not fill a batch.  (The volume
blocks' moment form is tested in test_moments.py.)
"""

import numpy as np
import pytest
from numba import njit

from polydg.assembly import kernels as K
from polydg.assembly.arguments import InteriorCoefficients
from polydg.assembly.batched import BATCH, contract
from polydg.basis import legendre_recurrence, multi_indices


def _box(rng, d, p):
    lo = rng.uniform(-1, 0, d)
    hi = lo + rng.uniform(0.5, 2, d)
    box = np.empty((d, 2))
    scale = np.empty((d, p + 1))
    from polydg.basis import element_box_tables
    element_box_tables(lo, hi, p, box, scale)
    return lo, hi, box, scale


@pytest.mark.parametrize("nr,nc,R", [(1, 1, 1), (4, 4, 24), (10, 6, 200), (7, 11, 33), (20, 20, 256), (9, 13, 17)])
def test_contract_is_a_matrix_product(nr, nc, R):
    rng = np.random.default_rng(nr * nc + R)
    T, U = rng.normal(size=(nr + 2, R + 3)), rng.normal(size=(nc + 1, R + 3))
    block = rng.normal(size=(nr + 1, nc + 2))
    expected = block.copy()
    expected[:nr, :nc] += T[:nr, :R] @ U[:nc, :R].T
    contract(T, U, R, nr, nc, block)
    np.testing.assert_allclose(block, expected, rtol=1e-13, atol=1e-13)


@njit(cache=True)
def _face_both(X, W, A, B, normal, sigma, boxK, scaleK, pK, nbK, boxN, scaleN, pN, nbN, rec, table):
    d = X.shape[1]
    pmax = max(pK, pN)
    nbmax = max(nbK, nbN)
    n = np.empty(d)
    An = np.empty(d)
    leg, dleg, phiK, gradK = K._basis_scratch(d, nbmax, pmax, X)
    _, _, phiN, gradN = K._basis_scratch(d, nbmax, pmax, X)
    fluxK, fluxN = np.empty(nbmax), np.empty(nbmax)
    refKK, refKN = np.zeros((nbK, nbK)), np.zeros((nbK, nbN))
    for k in range(d):
        n[k] = -normal[0, k]  # the normal out of K
    side_K, side_N = (boxK, scaleK, pK, nbK), (boxN, scaleN, pN, nbN)
    K.interior_face_accumulate(n, sigma[0], 0, X.shape[0], X, W, InteriorCoefficients(A, B), side_K, side_N, rec,
                               table, (An, leg, dleg, phiK, gradK, fluxK, phiN, gradN, fluxN), refKK, refKN)
    SK, SN = np.empty((nbmax, 2 * BATCH)), np.empty((nbmax, 2 * BATCH))
    U = np.empty((nbmax, 2 * BATCH))
    L, dL = np.empty((d, pmax + 1, BATCH)), np.empty((d, pmax + 1, BATCH))
    xb, Anb = np.empty((d, BATCH)), np.empty((d, BATCH))
    w, coef = np.empty(BATCH), np.empty(BATCH)
    outKK, outKN = np.zeros((nbK, nbK)), np.zeros((nbK, nbN))
    # gathered in runs of up to 5 points, as the kernels gather face by face:
    # runs start mid-batch and batches fill across runs
    q = 0
    r = 0
    while r < X.shape[0]:
        m = min(5, BATCH - q, X.shape[0] - r)
        K.gather_face_points(q, r, m, X, W, A, B, n, sigma[0], xb, w, Anb, coef)
        q += m
        r += m
        if q == BATCH or r == X.shape[0]:
            K._interior_batch_flush(q, (xb, w, Anb, coef), side_K, side_N, rec, table, (L, dL, SK, SN, U), outKK,
                                    outKN)
            q = 0
    return refKK, refKN, outKK, outKN


@pytest.mark.parametrize("d,pK,pN", [(2, 1, 1), (2, 3, 1), (3, 2, 2), (3, 1, 3), (3, 0, 2)])
@pytest.mark.parametrize("n_points", [1, 6, BATCH + 1, 2 * BATCH + 3])
@pytest.mark.parametrize("constant", [False, True])
def test_interior_face_batches_match_pointwise_form(d, pK, pN, n_points, constant):
    rng = np.random.default_rng(d + 7 * pK + 3 * pN + n_points)
    loK, hiK, boxK, scaleK = _box(rng, d, pK)
    _, _, boxN, scaleN = _box(rng, d, pN)
    X = loK + (hiK - loK) * rng.random((n_points, d))
    W = rng.random(n_points)
    M = rng.normal(size=(n_points, d, d))
    A = np.einsum("nij,nkj->nik", M, M)
    B = rng.normal(size=(n_points, d))  # both signs of b.n: the upwind switch is exercised
    normal = rng.normal(size=(1, d))
    normal /= np.linalg.norm(normal)
    if constant:  # one row each: A n and b.n once per face; b.n = -1 with the normal used (out of K): upwind on
        A, B = A[:1].copy(), normal.copy()
    pmax = max(pK, pN)
    table = multi_indices(pmax, d).astype(np.int64)
    nbK, nbN = len(multi_indices(pK, d)), len(multi_indices(pN, d))
    refKK, refKN, outKK, outKN = _face_both(X, W, A, B, normal, np.array([3.5]), boxK, scaleK, pK, nbK, boxN,
                                            scaleN, pN, nbN, legendre_recurrence(pmax), table)
    for out, ref in ((outKK, refKK), (outKN, refKN)):
        assert np.abs(ref).max() > 0
        np.testing.assert_allclose(out, ref, rtol=1e-11, atol=1e-12 * np.abs(ref).max())
