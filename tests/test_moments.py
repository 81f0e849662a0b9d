"""The moment form of the element volume blocks (assembly/moments.py).

It must give the direct form's blocks and loads to round-off for every
dimension, degree, kind of diffusion (A = a I, another constant, pointwise),
point counts below, at and above a run of MOMENT_BATCH points, and in the
whole assembly for mixed degrees.
"""

import numpy as np
import pytest
from numba import njit
from numpy.polynomial import legendre as npleg

from polydg.assembly import kernels as K
from polydg.assembly.arguments import Points, VolumeCoefficients
from polydg.assembly.assembler import assemble
from polydg.assembly.moments import MOMENT_BATCH, MOMENT_PAD, legendre_product_coefficients, moment_rows, moment_tables
from polydg.basis import element_box_tables, legendre_recurrence, multi_indices, tabulate_both
from polydg.mesh import from_spec
from polydg.partition import agglomerate
from polydg.problem import builtin_problem
from polydg.space import DGSpace


@pytest.mark.parametrize("p", [0, 1, 2, 3, 5])
def test_legendre_products_are_short_legendre_series(p):
    C0, C1, C2 = legendre_product_coefficients(p)
    x = np.linspace(-1, 1, 41)
    eye = np.eye(2 * p + 1)
    P = np.array([npleg.legval(x, eye[a]) for a in range(2 * p + 1)])
    dP = np.array([npleg.legval(x, npleg.legder(eye[a])) for a in range(2 * p + 1)])
    for a in range(p + 1):
        for b in range(p + 1):
            np.testing.assert_allclose(C0[a, b] @ P, P[a] * P[b], atol=1e-12)
            np.testing.assert_allclose(C1[a, b] @ P, P[a] * dP[b], atol=1e-11)
            np.testing.assert_allclose(C2[a, b] @ P, dP[a] * dP[b], atol=1e-10)
            # the degree bound that makes the moments hierarchical
            assert not C0[a, b, a + b + 1:].any() and not C1[a, b, a + b:].any()
            assert not C2[a, b, max(a + b - 1, 0):].any()


@njit(cache=True)
def _moment_block(X, W, A, B, C, F, lo, hi, p, table, rec, tabs):  # pragma: no cover - compiled
    """One element's block and load through the kernels' moment steps, in X's precision."""
    d, dt = X.shape[1], X.dtype
    nb = table.shape[0]
    L, xb, w, Ab, Bb, Cb, Fb, mu, mus, block, vec, S = K._moment_scratch(d, nb, p, tabs.psi.shape[0], X)
    box, scale = np.empty((d, 2), dt), np.empty((d, p + 1), dt)
    element_box_tables(lo, hi, p, box, scale)
    a_kind = K.volume_moments(0, X.shape[0], Points(np.zeros(2, np.int64), X, W), VolumeCoefficients(A, B, C, F),
                              True, True, box, rec, p, tabs, (L, xb, w, Ab, Bb, Cb, Fb), mu)
    K.volume_block(p, nb, tabs, mu, mus, a_kind, Ab, box, scale, table, S, block, vec)
    return block, vec, a_kind


@njit(cache=True)
def _pointwise_block(X, W, A, B, C, F, lo, hi, p, table, rec):  # pragma: no cover - compiled
    """The same block and load with the per-point forms of forms.py (the GPU's form)."""
    d, dt = X.shape[1], X.dtype
    nb = table.shape[0]
    box, scale = np.empty((d, 2), dt), np.empty((d, p + 1), dt)
    element_box_tables(lo, hi, p, box, scale)
    leg, dleg, phi, grad = K._basis_scratch(d, nb, p, X)
    ag, bg = np.empty((d, nb), dt), np.empty(nb, dt)
    block, vec = np.zeros((nb, nb), dt), np.zeros(nb, dt)
    K.simplex_accumulate(0, X.shape[0], X, W, VolumeCoefficients(A, B, C, F), (box, scale, p, nb), rec, table, True,
                         (leg, dleg, phi, grad, ag, bg), block, vec)
    return block, vec


def _direct(X, W, A, B, C, F, lo, hi, p):
    """sum_q w (c phi_i phi_j + phi_i b.grad phi_j + grad phi_i . A grad phi_j), sum_q w f phi_i, in NumPy."""
    n, d = X.shape
    phi, grad = tabulate_both(X, np.broadcast_to(lo, (n, d)), np.broadcast_to(hi, (n, d)), p)
    A = np.broadcast_to(A, (n, d, d))
    B, C, F = np.broadcast_to(B, (n, d)), np.broadcast_to(C, (n,)), np.broadcast_to(F, (n,))
    adv = np.einsum("qk,qjk->qj", B, grad)
    block = np.einsum("q,qi,qj->ij", W * C, phi, phi) + np.einsum("q,qi,qj->ij", W, phi, adv)
    block += np.einsum("q,qik,qkl,qjl->ij", W, grad, A, grad)
    return block, phi.T @ (W * F)


@pytest.mark.parametrize("d,p", [(1, 0), (1, 3), (2, 0), (2, 1), (2, 2), (2, 3), (3, 0), (3, 1), (3, 2), (3, 3),
                                 (3, 4)])
@pytest.mark.parametrize("n_points", [1, MOMENT_PAD + 3, MOMENT_BATCH, 2 * MOMENT_BATCH + 37])
@pytest.mark.parametrize("diffusion", ["pointwise", "constant", "isotropic", "isotropic, constant b c f"])
def test_moment_blocks_match_the_direct_sums(d, p, n_points, diffusion):
    rng = np.random.default_rng(100 * d + 10 * p + n_points)
    lo = rng.uniform(-1, 0, d)
    hi = lo + rng.uniform(0.3, 2, d)
    X = lo + (hi - lo) * rng.random((n_points, d))
    W = rng.random(n_points)
    M = rng.normal(size=(n_points, d, d))
    A = np.einsum("nij,nkj->nik", M, M) + np.eye(d)
    B, C, F = rng.normal(size=(n_points, d)), rng.normal(size=n_points), rng.normal(size=n_points)
    if diffusion == "constant":
        A = A[:1].copy()
    elif diffusion == "isotropic":
        A = 0.7 * np.eye(d)[None]
    elif diffusion == "isotropic, constant b c f":
        A, B, C, F = 0.7 * np.eye(d)[None], B[:1].copy(), C[:1].copy(), F[:1].copy()
    table = np.ascontiguousarray(multi_indices(p, d))
    tabs = moment_tables(p, d)
    block, vec, a_kind = _moment_block(X, W, A, B, C, F, lo, hi, p, table, legendre_recurrence(2 * p), tabs)
    # one point makes a "pointwise" A one constant row; in 1D every constant A is a multiple of I
    expected = 2 if A.shape[0] > 1 else 0 if (d == 1 or diffusion.startswith("isotropic")) else 1
    assert a_kind == expected
    ref, ref_vec = _direct(X, W, A, B, C, F, lo, hi, p)
    assert np.abs(ref).max() > 0
    np.testing.assert_allclose(block, ref, rtol=0, atol=1e-12 * np.abs(ref).max())
    np.testing.assert_allclose(vec, ref_vec, rtol=0, atol=1e-12 * np.abs(ref_vec).max())
    # and the per-point forms (forms.py, what a GPU thread runs) give the same sums
    point, point_vec = _pointwise_block(X, W, A, B, C, F, lo, hi, p, table, legendre_recurrence(p))
    np.testing.assert_allclose(point, ref, rtol=0, atol=1e-12 * np.abs(ref).max())
    np.testing.assert_allclose(point_vec, ref_vec, rtol=0, atol=1e-12 * np.abs(ref_vec).max())


def test_moment_tables_shapes_and_prefixes():
    t = moment_tables(3, 3)
    assert t.psi.shape == (84, 3) and t.psi.dtype == np.int64
    # counts per degree: c (2p), b (2p - 1), A (2p - 2), f (p)
    assert t.counts.tolist() == [[1, 0, 0, 1], [10, 4, 1, 4], [35, 20, 10, 10], [84, 56, 35, 20]]
    # each degree's entries are grouped by block entry, every one of its nb^2 entries has a term, and the
    # groups tile the degree's range; sources stay in the moment array
    for p, nb in enumerate([1, 4, 10, 20]):
        rows = t.iso_rows[p, :nb * nb + 1]
        assert rows[0] == t.iso_start[p] and rows[-1] == t.iso_start[p + 1]
        assert (np.diff(rows) > 0).all()
        assert (t.iso_rows[p, nb * nb:] == t.iso_start[p + 1]).all()  # nothing past the degree's block
    assert t.iso_src.max() < moment_rows(3) * 84 and t.full_src.max() < moment_rows(3) * 84
    assert t.full_start[-1] > t.iso_start[-1]  # off-diagonal A_kl terms
    with pytest.raises(ValueError):
        t.iso_coef[0] = 1.0  # cached, so read-only
    assert moment_tables(2, 2, np.float32).iso_coef.dtype == np.float32


@pytest.mark.parametrize("problem_name", ["paper-3d", "change-of-type", "advection", "neumann"])
def test_reductions_agree_in_3d_with_mixed_degrees(problem_name):
    # the element kernel (an element's points at once) and the per-sub-simplex
    # blocks of the atomic variant share the moment form but not its sums
    mesh = agglomerate(from_spec("cube:4"), 12)
    degree = np.random.default_rng(1).integers(0, 4, size=mesh.n_elements)
    space = DGSpace(mesh, degree)
    problem = builtin_problem(problem_name, 3)
    rows, atomic = assemble(space, problem), assemble(space, problem, approach="atomic")
    scale = np.abs(atomic.matrix).max()
    assert abs(rows.matrix - atomic.matrix).max() <= 1e-13 * scale
    np.testing.assert_allclose(rows.rhs, atomic.rhs, rtol=0, atol=1e-13 * np.abs(atomic.rhs).max())


@pytest.mark.parametrize("d,p", [(2, 3), (3, 3)])
def test_moment_form_is_as_accurate_as_the_pointwise_form_in_single_precision(d, p):
    # the moments sum high-degree Legendre values, then combine them: in float32
    # that must not lose accuracy against the per-point sums
    rng = np.random.default_rng(d + p)
    lo = rng.uniform(-1, 0, d)
    hi = lo + rng.uniform(0.3, 2, d)
    X = lo + (hi - lo) * rng.random((300, d))
    W, B, C, F = rng.random(300), rng.normal(size=(300, d)), rng.normal(size=300), rng.normal(size=300)
    A = 0.01 * np.eye(d)[None]
    ref, ref_vec = _direct(X, W, A, B, C, F, lo, hi, p)
    table = np.ascontiguousarray(multi_indices(p, d))
    single = [a.astype(np.float32) for a in (X, W, A, B, C, F, lo, hi)]
    moment, moment_vec, _ = _moment_block(*single, p, table, legendre_recurrence(2 * p, np.float32),
                                          moment_tables(p, d, np.float32))
    point, point_vec = _pointwise_block(*single, p, table, legendre_recurrence(p, np.float32))
    assert moment.dtype == np.float32
    err = {name: np.abs(b.astype(np.float64) - ref).max() / np.abs(ref).max()
           for name, b in (("moment", moment), ("pointwise", point))}
    assert 0 < err["moment"] <= 2 * err["pointwise"] + 1e-7 and err["moment"] < 1e-5, err
    assert np.abs(moment_vec - ref_vec).max() <= 1e-5 * np.abs(ref_vec).max()


def test_volume_kernels_refuse_a_short_recurrence():
    # a recurrence of degree p (enough for the basis) is too short for the moments (2p)
    table = np.ascontiguousarray(multi_indices(2, 3))
    with pytest.raises(ValueError, match="legendre_recurrence"):
        K._check_moment_arguments(table, legendre_recurrence(2))
    K._check_moment_arguments(table, legendre_recurrence(4))


@pytest.mark.parametrize("d, p", [(2, 12), (3, 6)])
def test_the_memory_estimate_of_the_moment_tables_covers_their_making(d, p):
    """The assembly's refusal before allocating counts the tables' peak while they are made, not the
    arrays they keep (a degree-30 run was killed by the system after an estimate a fifth of its use)."""
    import tracemalloc

    from polydg.assembly.memory import moment_table_bytes

    tracemalloc.start()
    try:
        moment_tables.__wrapped__(p, d)  # not the cached tables: made here
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak <= moment_table_bytes(p, d) <= 3 * peak
