"""Reference quadrature rules: exactness to round-off, positivity, conventions."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from polydg.errors import OptionError
from polydg.quadrature import (
    conical_points_per_direction,
    default_degree,
    gauss_line_rule,
    prism_rule,
    simplex_rule,
)
from polydg.quadrature_rules import EXPLICIT

QS = range(13)
FAMILIES = ("auto", "conical")


def exponents(d: int, degree: int) -> np.ndarray:
    """All exponent tuples of total degree exactly ``degree`` in d variables."""
    return np.array([a for a in itertools.product(range(degree + 1), repeat=d) if sum(a) == degree],
                    dtype=np.int64).reshape(-1, d)


def monomial_average(a) -> float:
    """Average over the unit simplex of prod x_k^a_k: d! prod a_k! / (d + |a|)!."""
    d = len(a)
    return math.factorial(d) * math.prod(math.factorial(int(k)) for k in a) / math.factorial(d + int(sum(a)))


def max_rel_error(bary: np.ndarray, w: np.ndarray, degree: int) -> float:
    """Largest relative error of the rule over the monomials of total degree ``degree``."""
    d = bary.shape[1] - 1
    x = bary[:, 1:]
    err = 0.0
    for a in exponents(d, degree):
        approx = w @ np.prod(x ** a, axis=1)
        exact = monomial_average(a)
        err = max(err, abs(approx - exact) / exact)
    return err


def exactness_degree(bary, w, limit=30) -> int:
    """Largest k such that the rule is exact (1e-13) for all degrees <= k."""
    k = 0
    while k <= limit and max_rel_error(bary, w, k) <= 1e-13:
        k += 1
    return k - 1


# --------------------------------------------------------------------------
# simplex rules


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("q", QS)
@pytest.mark.parametrize("d", [1, 2, 3])
def test_simplex_rule_exact_for_monomials(d, q, family):
    bary, w = simplex_rule(d, q, family)
    for degree in range(q + 1):
        assert max_rel_error(bary, w, degree) <= 1e-13, (d, q, degree)


@pytest.mark.parametrize("q", range(10))
def test_4d_simplex_rule_exact_for_monomials(q):
    """The pentatopes of 3D + 1 slabs: the collapsed Gauss-Jacobi rule of every degree 2p + 1 + extra used
    (p <= 3), positive weights, points inside, exact on every monomial of degree <= q."""
    bary, w = simplex_rule(4, q)
    assert len(w) == conical_points_per_direction(q) ** 4
    assert w.min() > 0 and bary.min() > 0 and abs(w.sum() - 1) < 1e-14
    for degree in range(q + 1):
        assert max_rel_error(bary, w, degree) <= 1e-13, (q, degree)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("q", QS)
@pytest.mark.parametrize("d", [0, 1, 2, 3])
def test_simplex_rule_shape_positivity_and_inside(d, q, family):
    bary, w = simplex_rule(d, q, family)
    assert bary.dtype == np.float64 and w.dtype == np.float64
    assert bary.ndim == 2 and bary.shape[1] == d + 1 and w.shape == (bary.shape[0],)
    assert np.all(w > 0)
    assert abs(w.sum() - 1.0) <= 1e-14
    assert np.all(bary >= 0.0)
    np.testing.assert_allclose(bary.sum(axis=1), 1.0, rtol=0, atol=1e-15)
    # read-only and cached
    assert not bary.flags.writeable and not w.flags.writeable
    assert simplex_rule(d, q, family)[0] is bary


def test_point_simplex_rule():
    bary, w = simplex_rule(0, 5)
    assert bary.tolist() == [[1.0]] and w.tolist() == [1.0]


@pytest.mark.parametrize("q", QS)
def test_conical_rule_size_and_degree(q):
    n = conical_points_per_direction(q)
    assert 2 * n - 1 >= q and 2 * (n - 1) - 1 < q
    for d in (1, 2, 3):
        bary, w = simplex_rule(d, q, "conical")
        assert len(w) == n ** d
        # the conical product is exact to degree 2n - 1 exactly: the next degree fails,
        # so for odd q (the default 2p + 1) degree q + 1 is NOT integrated exactly
        assert exactness_degree(bary, w) == 2 * n - 1
        if q % 2 == 1:
            assert max_rel_error(bary, w, q + 1) > 1e-10


# Measured exactness of the rules chosen by family="auto" (q = 0..12).  A stored
# rule of a higher degree may serve q (none does at present for d = 2, 3), and the
# conical product of an even q (d = 1: the Gauss rule; d = 2, 3 beyond the stored
# rules) is exact to q + 1.
AUTO_DEGREE = {
    1: [1, 1, 3, 3, 5, 5, 7, 7, 9, 9, 11, 11, 13],
    2: [1, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 13],
    3: [1, 1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 11, 13],
}
AUTO_SIZE = {
    2: [1, 1, 3, 4, 6, 7, 11, 12, 16, 19, 24, 27, 49],
    3: [1, 1, 4, 6, 11, 14, 23, 31, 44, 57, 216, 216, 343],
}


@pytest.mark.parametrize("d", [1, 2, 3])
def test_auto_rules_exactness_degree_is_as_documented(d):
    """The next degree after the rule's exactness must fail: the check can fail."""
    measured = [exactness_degree(*simplex_rule(d, q)) for q in QS]
    assert measured == AUTO_DEGREE[d]
    for q in QS:
        bary, w = simplex_rule(d, q)
        assert max_rel_error(bary, w, measured[q] + 1) > 1e-10


@pytest.mark.parametrize("d", [2, 3])
def test_auto_rules_never_larger_than_conical(d):
    sizes = [len(simplex_rule(d, q)[1]) for q in QS]
    assert sizes == AUTO_SIZE[d]
    for q in QS:
        assert sizes[q] <= len(simplex_rule(d, q, "conical")[1])


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("q", QS)
@pytest.mark.parametrize("d", [0, 1, 2, 3])
def test_simplex_rule_points_strictly_inside(d, q, family):
    """Every barycentric coordinate of every rule is >= 1e-6 (no point on or next to a face)."""
    bary, _ = simplex_rule(d, q, family)
    assert bary.min() >= 1e-6


def _explicit_rules():
    return [(d, g) for d in sorted(EXPLICIT) for g in sorted(EXPLICIT[d])]


@pytest.mark.parametrize("d, degree", _explicit_rules())
def test_explicit_rules(d, degree):
    """Every stored explicit rule (used or not by "auto"): exact to its degree, positive, inside."""
    bary_t, w_t = EXPLICIT[d][degree]
    bary, w = np.array(bary_t, dtype=np.float64), np.array(w_t, dtype=np.float64)
    assert bary.shape == (len(w), d + 1) and all(len(row) == d + 1 for row in bary_t)
    assert np.all(w > 0)
    assert abs(w.sum() - 1.0) <= 1e-14
    assert bary.min() >= 1e-6
    np.testing.assert_allclose(bary.sum(axis=1), 1.0, rtol=0, atol=1e-15)
    for k in range(degree + 1):
        assert max_rel_error(bary, w, k) <= 1e-13, (d, degree, k)
    assert max_rel_error(bary, w, degree + 1) > 1e-10  # stored at its true degree
    # no two points coincide (a merged pair would be a smaller rule)
    gaps = np.linalg.norm(bary[:, None, :] - bary[None, :, :], axis=2) + np.eye(len(w))
    assert gaps.min() > 1e-3


def _docstring_table() -> dict[int, list[int]]:
    """The point counts of the module docstring's table ("triangle", "tetrahedron" rows)."""
    import polydg.quadrature as module

    rows = {}
    for line in module.__doc__.splitlines():
        words = line.split()
        if words and words[0] in ("triangle", "tetrahedron"):
            counts = []
            for word in words[1:]:
                if not word.isdigit():
                    break
                counts.append(int(word))
            rows[2 if words[0] == "triangle" else 3] = counts
    return rows


def test_docstring_point_count_table():
    table = _docstring_table()
    assert sorted(table) == [2, 3]
    for d, counts in table.items():
        assert len(counts) >= 10  # q = 0..9 at least
        assert counts == [len(simplex_rule(d, q)[1]) for q in range(len(counts))], d


def _barycentric_polynomial_average(linear_forms: np.ndarray) -> float:
    """Exact average over a simplex of prod_j (sum_k c_jk lambda_k).

    linear_forms: (m, d+1) coefficients of each affine factor in barycentric
    coordinates.  Expands the product into barycentric monomials and uses
    avg(prod lambda_k^b_k) = d! prod b_k! / (d + |b|)!.
    """
    d1 = linear_forms.shape[1]
    poly = {(0,) * d1: 1.0}
    for c in linear_forms:
        new: dict[tuple[int, ...], float] = {}
        for b, coef in poly.items():
            for k in range(d1):
                bb = list(b)
                bb[k] += 1
                key = tuple(bb)
                new[key] = new.get(key, 0.0) + coef * c[k]
        poly = new
    d = d1 - 1
    return sum(coef * math.factorial(d) * math.prod(math.factorial(x) for x in b) / math.factorial(d + sum(b))
               for b, coef in poly.items())


@pytest.mark.parametrize("q", QS)
@pytest.mark.parametrize("d", [1, 2, 3])
def test_physical_simplex_affine_map(d, q):
    """int_S f = |S| sum_q w_q f(sum_k bary_qk v_k) for a product of q random affine functions."""
    rng = np.random.default_rng(1000 * d + q)
    V = rng.normal(size=(d + 1, d))  # random physical simplex
    measure = abs(np.linalg.det(V[1:] - V[0])) / math.factorial(d)
    forms = rng.normal(size=(q, d)), rng.normal(size=q)  # l_j(x) = g_j . x + c_j
    coeffs = forms[0] @ V.T + forms[1][:, None]  # l_j(v_k): barycentric coefficients
    exact = measure * _barycentric_polynomial_average(coeffs)
    scale = measure * np.prod(np.abs(coeffs).max(axis=1))
    for family in FAMILIES:
        bary, w = simplex_rule(d, q, family)
        x = bary @ V
        f = np.prod(x @ forms[0].T + forms[1], axis=1)
        approx = measure * (w @ f)
        assert abs(approx - exact) <= 1e-13 * scale, (family, approx, exact)


def test_simplex_rule_rejects_bad_input():
    with pytest.raises(OptionError):
        simplex_rule(2, -1)
    with pytest.raises(OptionError):
        simplex_rule(-1, 2)
    with pytest.raises(OptionError):
        simplex_rule(2, 2, "nonsense")


# --------------------------------------------------------------------------
# line and prism rules


@pytest.mark.parametrize("q", range(21))
def test_gauss_line_rule(q):
    t, w = gauss_line_rule(q)
    assert t.shape == w.shape == (conical_points_per_direction(q),)
    assert np.all(w > 0) and abs(w.sum() - 1) <= 1e-14
    assert np.all((t > 0) & (t < 1)) and np.all(np.diff(t) > 0)
    assert not t.flags.writeable
    for k in range(q + 1):
        assert abs(w @ t ** k - 1.0 / (k + 1)) <= 1e-14 * (1.0 / (k + 1)) + 1e-15, k
    n = len(t)
    # exact to 2n - 1 and not beyond: the points are the roots of the shifted
    # Legendre polynomial P_n(2t - 1), whose square (degree 2n) has integral 1/(2n + 1)
    P_n = np.polynomial.legendre.Legendre.basis(n)(2 * t - 1)
    assert abs(w @ P_n ** 2) <= 1e-14  # the rule gives 0, the exact value is 1 / (2n + 1)


@pytest.mark.parametrize("q", range(8))
@pytest.mark.parametrize("d", [1, 2, 3])
def test_prism_rule(d, q):
    bary, t, w = prism_rule(d, q)
    assert bary.shape == (len(w), d + 1) and t.shape == w.shape
    assert abs(w.sum() - 1) <= 1e-14 and np.all(w > 0)
    x = bary[:, 1:]
    for total in range(q + 1):
        for b in range(total + 1):
            for a in exponents(d, total - b):
                exact = monomial_average(a) / (b + 1)
                approx = w @ (np.prod(x ** a, axis=1) * t ** b)
                assert abs(approx - exact) <= 1e-13 * exact


# --------------------------------------------------------------------------
# default degree


def test_default_degree():
    assert default_degree(0) == 1
    assert default_degree(3) == 7
    assert default_degree(2, extra=3) == 8
    assert isinstance(default_degree(np.int64(2)), int)
    arr = default_degree(np.array([0, 1, 4]), 2)
    assert arr.dtype == np.int64 and arr.tolist() == [3, 5, 11]
    with pytest.raises(OptionError):
        default_degree(1, extra=-1)
    with pytest.raises(OptionError):
        default_degree(-1)


def test_a_rule_past_its_size_limits_is_one_line_before_anything_is_allocated():
    from polydg.space import DGSpace
    from polydg.mesh import build_polytopic_mesh, from_spec

    for d, q in ((2, 100_005), (3, 300), (1, 10**9)):
        with pytest.raises(OptionError, match=rf"a quadrature rule exact to degree {q} on the {d}-simplex needs "
                                              r"[0-9,]+ points \([0-9,]+ along a direction; at most"):
            simplex_rule(d, q) if d > 1 else gauss_line_rule(q)
    with pytest.raises(OptionError, match="polynomial degree must be from 0 to 1000, got 5000 on element 0"):
        DGSpace(build_polytopic_mesh(from_spec("square:1")), 5000)


@pytest.mark.parametrize("degree, shown", [(2.5, "2.5"), (True, "True"), ("2", "'2'"), (float("nan"), "nan"),
                                           (float("inf"), "inf"),
                                           (np.full(2, 1.7), "an array of float64")])
def test_a_degree_that_is_not_a_whole_number_is_refused_not_truncated(degree, shown):
    from polydg.mesh import build_polytopic_mesh, from_spec
    from polydg.space import DGSpace

    mesh = build_polytopic_mesh(from_spec("square:1"))
    if np.ndim(degree):
        degree = np.full(mesh.n_elements, degree[0])
    with pytest.raises(OptionError) as caught:
        DGSpace(mesh, degree)
    assert str(caught.value) == f"polynomial degrees must be integers, got {shown}"
    assert DGSpace(mesh, 2.0).max_degree == 2 and DGSpace(mesh, np.full(mesh.n_elements, 3.0)).min_degree == 3


def test_a_space_of_high_degree_warns_once_of_its_conditioning():
    import warnings

    from polydg import space as space_module
    from polydg.errors import ConditioningWarning
    from polydg.mesh import build_polytopic_mesh, from_spec
    from polydg.space import DGSpace

    mesh = build_polytopic_mesh(from_spec("square:1"))
    space_module._WARNED_DEGREES.discard(13)
    with pytest.warns(ConditioningWarning, match="degree 13: above about p = 10") as caught:
        DGSpace(mesh, 13)
    assert caught[0].filename == __file__
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        DGSpace(mesh, 13)  # once per process: not again for each slab or rank's part
        DGSpace(mesh, 10)  # up to p = 10: nothing said
