"""Bounding-box Legendre bases: ordering, orthonormality, derivatives, precision, GPU compile."""

from __future__ import annotations

import itertools
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from polydg.basis import (
    eval_basis_point,
    eval_basis_point_inline,
    legendre_values,
    multi_indices,
    n_basis,
    tabulate,
    tabulate_both,
    tabulate_gradients,
)
from polydg.errors import OptionError

REPO = Path(__file__).resolve().parents[1]


def random_box(rng, d):
    lo = rng.uniform(-3, 3, size=d)
    hi = lo + rng.uniform(0.05, 4, size=d)
    return lo, hi


def random_points(rng, lo, hi, n):
    return lo + (hi - lo) * rng.uniform(size=(n, len(lo)))


def reference_basis(x, lo, hi, p):
    """Independent reference: numpy.polynomial.legendre, per multi-index."""
    from numpy.polynomial import legendre as L

    d = len(lo)
    h = hi - lo
    xi = (2 * x - lo - hi) / h
    idx = multi_indices(p, d)
    vals = np.ones((len(x), len(idx)))
    grads = np.ones((len(x), len(idx), d))
    for i, alpha in enumerate(idx):
        for k, a in enumerate(alpha):
            c = np.zeros(a + 1)
            c[a] = math.sqrt((2 * a + 1) / h[k])
            v = L.legval(xi[:, k], c)
            dv = L.legval(xi[:, k], L.legder(c)) * 2 / h[k]
            vals[:, i] *= v
            for m in range(d):
                grads[:, i, m] *= dv if m == k else v
    return vals, grads


# --------------------------------------------------------------------------
# index sets


@pytest.mark.parametrize("d", [1, 2, 3, 4])
def test_multi_indices_order_and_prefix(d):
    for p in range(8):
        idx = multi_indices(p, d)
        assert idx.dtype == np.int64 and idx.shape == (n_basis(p, d), d) == (math.comb(p + d, d), d)
        assert not idx.flags.writeable
        assert multi_indices(p, d) is idx  # cached
        totals = idx.sum(axis=1)
        assert np.all(np.diff(totals) >= 0) and totals.max() == p
        assert len({tuple(r) for r in idx.tolist()}) == len(idx)
        for t in range(p + 1):
            block = [tuple(r) for r in idx[totals == t].tolist()]
            assert block == sorted(block, reverse=True)  # descending lexicographic
        np.testing.assert_array_equal(multi_indices(p + 1, d)[: len(idx)], idx)  # hierarchical


def test_multi_indices_documented_examples():
    assert multi_indices(2, 2).tolist() == [[0, 0], [1, 0], [0, 1], [2, 0], [1, 1], [0, 2]]
    assert multi_indices(1, 3).tolist() == [[0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1]]
    assert n_basis(3, 3) == 20 and n_basis(0, 4) == 1 and n_basis(5, 4) == 126


def test_bad_input():
    with pytest.raises(ValueError):
        multi_indices(-1, 2)
    with pytest.raises(ValueError):
        tabulate(np.zeros((3, 5)), np.zeros(5), np.ones(5), 1)
    with pytest.raises(ValueError):
        tabulate(np.zeros((3, 2)), np.zeros(3), np.ones(3), 1)
    with pytest.raises(OptionError):
        tabulate(np.zeros((3, 2)), np.zeros(2), np.ones(2), -1)


# --------------------------------------------------------------------------
# mathematics


@pytest.mark.parametrize("d", [1, 2, 3, 4])
@pytest.mark.parametrize("p", range(6))
def test_orthonormal_on_box(d, p):
    rng = np.random.default_rng(10 * d + p)
    lo, hi = random_box(rng, d)
    # tensor Gauss-Legendre with p + 1 points per direction: exact for degree 2p per variable
    t, w1 = np.polynomial.legendre.leggauss(p + 1)
    nodes = [lo[k] + (hi[k] - lo[k]) * (t + 1) / 2 for k in range(d)]
    weights = [w1 * (hi[k] - lo[k]) / 2 for k in range(d)]
    X = np.array(list(itertools.product(*nodes)))
    W = np.prod(np.array(list(itertools.product(*weights))), axis=1)
    V = tabulate(X, lo, hi, p)
    gram = V.T @ (W[:, None] * V)
    np.testing.assert_allclose(gram, np.eye(n_basis(p, d)), rtol=0, atol=1e-12)


@pytest.mark.parametrize("d", [1, 2, 3, 4])
def test_values_and_gradients_against_numpy_legendre(d):
    rng = np.random.default_rng(d)
    for p in range(7):
        lo, hi = random_box(rng, d)
        x = random_points(rng, lo, hi, 50)
        vals, grads = tabulate_both(x, lo, hi, p)
        rv, rg = reference_basis(x, lo, hi, p)
        np.testing.assert_allclose(vals, rv, rtol=1e-12, atol=1e-12 * np.abs(rv).max())
        np.testing.assert_allclose(grads, rg, rtol=1e-12, atol=1e-12 * np.abs(rg).max())
        np.testing.assert_array_equal(tabulate(x, lo, hi, p), vals)
        np.testing.assert_array_equal(tabulate_gradients(x, lo, hi, p), grads)


@pytest.mark.parametrize("d", [1, 2, 3, 4])
def test_gradients_against_central_differences(d):
    rng = np.random.default_rng(100 + d)
    p = 4
    lo, hi = random_box(rng, d)
    x = random_points(rng, lo, hi, 20)
    grads = tabulate_gradients(x, lo, hi, p)
    for k in range(d):
        step = 1e-5 * (hi[k] - lo[k])
        e = np.zeros(d)
        e[k] = step
        fd = (tabulate(x + e, lo, hi, p) - tabulate(x - e, lo, hi, p)) / (2 * step)
        np.testing.assert_allclose(grads[:, :, k], fd, rtol=0, atol=1e-7 * np.abs(grads).max())


def test_endpoint_values_stable():
    """At xi = +-1: L_n(1) = 1, L_n(-1) = (-1)^n, L'_n(+-1) = (+-1)^(n+1) n (n + 1) / 2."""
    p = 15
    lo, hi = np.array([0.0]), np.array([2.0])  # h = 2, so d/dx = d/dxi
    vals, grads = tabulate_both(np.array([[2.0], [0.0]]), lo, hi, p)
    n = np.arange(p + 1)
    s = np.sqrt((2 * n + 1) / 2.0)
    np.testing.assert_allclose(vals[0], s, rtol=1e-14)
    np.testing.assert_allclose(vals[1], s * (-1.0) ** n, rtol=1e-14)
    np.testing.assert_allclose(grads[0, :, 0], s * n * (n + 1) / 2, rtol=1e-13)
    np.testing.assert_allclose(grads[1, :, 0], s * (-1.0) ** (n + 1) * n * (n + 1) / 2, rtol=1e-13)


def test_legendre_values_helper():
    xi = np.linspace(-1, 1, 7)
    ref = np.stack([np.polynomial.legendre.Legendre.basis(n)(xi) for n in range(6)], axis=-1)
    np.testing.assert_allclose(legendre_values(xi, 5), ref, atol=1e-14)


@pytest.mark.parametrize("d", [1, 2, 3, 4])
@pytest.mark.parametrize("p", [0, 1, 2, 3, 4])
def test_polynomial_reproduction(d, p):
    """A random polynomial of total degree p is fitted exactly; one of degree p + 1 is not."""
    rng = np.random.default_rng(7 * d + p)
    lo, hi = random_box(rng, d)
    x = random_points(rng, lo, hi, 3 * n_basis(p + 1, d))
    c = (lo + hi) / 2

    def poly(degree):
        expo = multi_indices(degree, d)
        coef = rng.normal(size=len(expo))
        coef[-1] = 1.0  # a genuine top-degree term
        return np.prod((x - c)[:, None, :] ** expo[None], axis=2) @ coef

    V = tabulate(x, lo, hi, p)
    for degree, exact in ((p, True), (p + 1, False)):
        f = poly(degree)
        coef, *_ = np.linalg.lstsq(V, f, rcond=None)
        residual = np.abs(V @ coef - f).max() / np.abs(f).max()
        assert (residual <= 1e-10) if exact else (residual > 1e-6), (degree, residual)


def test_per_box_points_and_broadcast_box_agree():
    rng = np.random.default_rng(5)
    d, p = 3, 3
    boxes = [random_box(rng, d) for _ in range(4)]
    xs = [random_points(rng, lo, hi, 6) for lo, hi in boxes]
    X = np.vstack(xs)
    LO = np.repeat([b[0] for b in boxes], 6, axis=0)
    HI = np.repeat([b[1] for b in boxes], 6, axis=0)
    vals, grads = tabulate_both(X, LO, HI, p)
    for j, (lo, hi) in enumerate(boxes):
        v, g = tabulate_both(xs[j], lo, hi, p)
        np.testing.assert_array_equal(vals[6 * j: 6 * j + 6], v)
        np.testing.assert_array_equal(grads[6 * j: 6 * j + 6], g)


def test_per_point_kernel_with_larger_table_and_scratch():
    """Kernels pass the table of the max degree P and scratch sized for P; only nb rows are used."""
    rng = np.random.default_rng(9)
    d, p, P = 3, 2, 5
    lo, hi = random_box(rng, d)
    x = random_points(rng, lo, hi, 5)
    table = np.ascontiguousarray(multi_indices(P, d))
    nb = n_basis(p, d)
    leg = np.full((d, P + 1), np.nan)
    dleg = np.full((d, P + 1), np.nan)
    phi = np.full(n_basis(P, d), np.nan)
    grad = np.full((n_basis(P, d), d), np.nan)
    vals, grads = tabulate_both(x, lo, hi, p)
    for i in range(len(x)):
        eval_basis_point(x[i], lo, hi, p, table, nb, leg, dleg, phi, grad)
        np.testing.assert_array_equal(phi[:nb], vals[i])
        np.testing.assert_array_equal(grad[:nb], grads[i])
        assert np.all(np.isnan(phi[nb:]))  # nothing written past nb


@pytest.mark.parametrize("d", [1, 2, 3, 4, 5])
def test_per_point_kernel_all_dimensions_and_inline_variant(d):
    """Direct calls, including the general-d product path (d = 5), and the inlined twin."""
    import numba

    @numba.njit
    def run(f_inline, x, lo, hi, p, table, nb, phi_out, grad_out):
        dd = x.shape[1]
        leg = np.empty((dd, p + 1))
        dleg = np.empty((dd, p + 1))
        for i in range(x.shape[0]):
            if f_inline:
                eval_basis_point_inline(x[i], lo, hi, p, table, nb, leg, dleg, phi_out[i], grad_out[i])
            else:
                eval_basis_point(x[i], lo, hi, p, table, nb, leg, dleg, phi_out[i], grad_out[i])

    rng = np.random.default_rng(70 + d)
    p = 3
    lo, hi = random_box(rng, d)
    x = random_points(rng, lo, hi, 10)
    table = np.ascontiguousarray(multi_indices(p, d))
    nb = len(table)
    rv, rg = reference_basis(x, lo, hi, p)
    results = []
    for f_inline in (False, True):
        phi = np.empty((len(x), nb))
        grad = np.empty((len(x), nb, d))
        run(f_inline, x, lo, hi, p, table, nb, phi, grad)
        np.testing.assert_allclose(phi, rv, rtol=1e-12, atol=1e-12 * np.abs(rv).max())
        np.testing.assert_allclose(grad, rg, rtol=1e-12, atol=1e-12 * np.abs(rg).max())
        results.append((phi, grad))
    np.testing.assert_array_equal(results[0][0], results[1][0])
    np.testing.assert_array_equal(results[0][1], results[1][1])


def test_empty_point_set():
    v, g = tabulate_both(np.zeros((0, 2)), np.zeros(2), np.ones(2), 2)
    assert v.shape == (0, 6) and g.shape == (0, 6, 2)


# --------------------------------------------------------------------------
# float32


@pytest.mark.parametrize("d", [1, 2, 3, 4])
def test_float32_close_to_float64(d):
    rng = np.random.default_rng(50 + d)
    p = 5
    lo, hi = random_box(rng, d)
    x = random_points(rng, lo, hi, 200)
    v64, g64 = tabulate_both(x, lo, hi, p)
    v32, g32 = tabulate_both(x.astype(np.float32), lo.astype(np.float32), hi.astype(np.float32), p)
    assert v32.dtype == np.float32 and g32.dtype == np.float32
    # inputs rounded to float32 too, so compare with a relative error floor ~1e-5
    assert np.abs(v32 - v64).max() <= 1e-5 * np.abs(v64).max()
    assert np.abs(g32 - g64).max() <= 1e-5 * np.abs(g64).max()


def test_mixed_precision_inputs_promote_to_float64():
    x = np.full((2, 2), 0.3, dtype=np.float32)
    assert tabulate(x, np.zeros(2), np.ones(2), 1).dtype == np.float64


# --------------------------------------------------------------------------
# GPU: the same Python source as a numba-cuda device function

_CUDASIM_SCRIPT = textwrap.dedent(
    """
    import numpy as np
    from numba import cuda
    from numba.cuda import simulator
    assert cuda.jit is simulator.jit, "not running under the simulator"
    from polydg.basis import eval_basis_point, multi_indices, n_basis, tabulate_both

    device_eval = cuda.jit(device=True)(eval_basis_point.py_func)
    D, P = 3, 3
    NB = n_basis(P, D)

    @cuda.jit
    def kernel(x, lo, hi, table, phi, grad):
        i = cuda.grid(1)
        if i < x.shape[0]:
            leg = cuda.local.array((D, P + 1), dtype=np.float64)
            dleg = cuda.local.array((D, P + 1), dtype=np.float64)
            device_eval(x[i], lo, hi, P, table, NB, leg, dleg, phi[i], grad[i])

    rng = np.random.default_rng(0)
    lo = np.array([-1.0, 0.5, 2.0]); hi = np.array([0.5, 2.0, 2.25])
    x = lo + (hi - lo) * rng.uniform(size=(5, D))
    phi = np.zeros((5, NB)); grad = np.zeros((5, NB, D))
    table = cuda.to_device(np.ascontiguousarray(multi_indices(P, D)))  # read-only host array: explicit transfer
    kernel[1, 8](x, lo, hi, table, phi, grad)
    v, g = tabulate_both(x, lo, hi, P)
    err = max(np.abs(phi - v).max(), np.abs(grad - g).max())
    assert err <= 1e-13 * max(np.abs(v).max(), np.abs(g).max()), err
    print("CUDASIM-OK", err)
    """
)


def test_device_function_under_cuda_simulator():
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    probe = subprocess.run([sys.executable, "-c", "from numba import cuda; cuda.jit"], env=env,
                           capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"numba.cuda simulator unavailable: {probe.stderr.strip().splitlines()[-1:]}")
    out = subprocess.run([sys.executable, "-c", _CUDASIM_SCRIPT], env=env, capture_output=True, text=True,
                         cwd=str(REPO), timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "CUDASIM-OK" in out.stdout


@pytest.mark.parametrize("precision", ["float64", "float32"])
def test_device_function_typechecks_for_cuda(precision):
    """numba-cuda front end (typing + lowering to NVVM IR), no GPU or NVVM needed.

    The float32 version must contain no double-precision arithmetic at all.
    """
    try:
        import numba
        from numba.cuda import compiler
    except Exception as exc:  # pragma: no cover - depends on the install
        pytest.skip(f"numba-cuda not importable: {exc}")
    if not hasattr(compiler, "compile_cuda"):  # pragma: no cover
        pytest.skip("numba-cuda has no compile_cuda front end in this version")
    T = getattr(numba, precision)
    i64 = numba.int64
    args = (T[::1], T[::1], T[::1], i64, i64[:, ::1], i64, T[:, ::1], T[:, ::1], T[::1], T[:, ::1])
    cres = compiler.compile_cuda(eval_basis_point.py_func, numba.types.void, args, cc=(8, 0))
    ir = cres.library.get_llvm_str()
    if precision == "float32":
        assert "double" not in ir
    else:
        assert "double" in ir
