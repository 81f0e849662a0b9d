"""Reference quadrature rules: simplices of any exactness degree, segments, prisms.

Conventions
-----------
A simplex rule is ``(bary, w)``: ``bary`` of shape (nq, d+1) holds barycentric
coordinates (rows sum to 1, all entries >= 0; column k belongs to vertex k)
and ``w`` of shape (nq,) holds weights that sum to 1.  On a physical simplex
S with vertices v_0..v_d,

    int_S f  ~=  |S| * sum_q w_q f(sum_k bary_qk v_k),

exact when f is a polynomial of total degree <= q.  (Equivalently, the rule
computes the *average* of f over S.)  All returned arrays are float64,
read-only and cached: do not modify them.

Construction
------------
For every d and q the collapsed Gauss-Jacobi rule (Stroud's conical
product; Duffy's map from the cube) is available.  With t in [0,1]^d,

    x_1 = t_1,  x_2 = (1 - t_1) t_2,  ...,  x_d = (1 - t_1)...(1 - t_{d-1}) t_d,
    lambda_0 = (1 - t_1)...(1 - t_d),  lambda_k = x_k (k = 1..d),

the Jacobian is prod_{k<d} (1 - t_k)^(d-k), and a polynomial of total degree
q in x has degree <= q in each t_k.  So a Gauss-Jacobi rule with weight
(1 - t)^(d-k) and n = ceil((q + 1) / 2) points (exact to degree 2n - 1 >= q)
in direction k gives an n^d-point rule of exactness q with positive weights
and interior points.

Where a rule with positive weights and interior points is stored and has
fewer points, it is used instead (``family="auto"``, the default).  Two
tables are stored:

* fully symmetric rules (orbit form, ``_SYMMETRIC`` below): triangles of
  degree 2, 4, 5 (Radon), 6, 8, 9 (Dunavant) and tetrahedra of degree 2,
  5 (14-point, Walkington / Keast), 6 (Keast, 24-point) and 7 (35-point;
  found by a bounded least-squares search over the orbit structure
  S4 + S31 + S22 + 2 S211, which has exactly as many unknowns as there are
  S4-invariant moment conditions).  All orbit parameters were refined to
  40 digits by Newton's method on the moment equations of all monomials up
  to their degree.
* explicit rules without symmetry (``polydg.quadrature_rules.EXPLICIT``):
  triangles of degree 6, 7, 10, 11 (11, 12, 24, 27 points) and
  tetrahedra of degree 3, 4, 6, 7, 8, 9 (6, 11, 23, 31, 44, 57 points).  They were found by launch/find_quadrature_rules.py
  (see its docstring): least squares from random starts on the moment
  equations in the orthonormal Proriol-Koornwinder-Dubiner basis, the
  points in collapsed coordinates bounded to the simplex and the weights
  bounded below by 0, then Gauss-Newton with minimum-norm steps at 50
  digits to a residual below 1e-40; 20 significant digits are stored.
  Every weight is positive and every barycentric coordinate >= 1e-6.  The
  map to a physical simplex is affine, so the missing symmetry costs no
  exactness; only the (round-off or, for non-polynomial integrands,
  quadrature) error depends on the order of a simplex's vertices.

These replace the symmetric triangle rule of degree 6 and the tetrahedral
rules of degree 6 and 7, which stay in the table.  tests/test_quadrature.py
checks every stored rule to round-off (all monomials up to its degree).
``family="conical"`` always gives the conical product.

Point counts with ``family="auto"`` (q = 0..12):

    q            0  1  2  3  4  5  6  7   8   9  10  11  12
    triangle     1  1  3  4  6  7 11 12  16  19  24  27  49   (conical n^2: 1 1 4 4 9 9 16 16 25 25 36 36 49)
    tetrahedron  1  1  4  6 11 14 23 31  44  57 216 216 343   (conical n^3: 1 1 8 8 27 27 64 64 125 125 216 216 343)

and the conical product beyond.
"""

from __future__ import annotations

import itertools
import math
from functools import lru_cache

import numpy as np
from scipy.special import roots_jacobi

from .errors import OptionError
from .quadrature_rules import EXPLICIT

__all__ = [
    "simplex_rule",
    "gauss_line_rule",
    "prism_rule",
    "default_degree",
    "conical_points_per_direction",
]


# --------------------------------------------------------------------------
# default exactness degree


def default_degree(p, extra: int = 0):
    """Default exactness degree 2p + 1 + extra (elementwise for arrays of p).

    The volume integrands c u v and (b . grad u) v have degree <= 2p for
    constant coefficients (and A grad u . grad v has 2p - 2); the +1 keeps
    them exact for coefficients linear in x (and the face terms, whose
    integrands are of the same degrees, likewise).  ``extra`` is headroom the
    user adds for non-polynomial coefficients or data.  Accepts an int
    (returns an int) or an integer array (returns an int64 array).
    """
    if np.ndim(extra) != 0 or int(extra) < 0:
        raise OptionError(f"extra quadrature degree must be an integer >= 0, got {extra!r}")
    if np.ndim(p) == 0:
        p_int = int(p)
        if p_int < 0:
            raise OptionError(f"polynomial degree must be >= 0, got {p!r}")
        return 2 * p_int + 1 + int(extra)
    p_arr = np.asarray(p, dtype=np.int64)
    if p_arr.size and p_arr.min() < 0:
        raise OptionError("polynomial degrees must be >= 0")
    return 2 * p_arr + (1 + int(extra))


# --------------------------------------------------------------------------
# 1D Gauss-Jacobi building block


#: the most points of one rule (a sub-simplex's or a face's): a degree past this is an input error
MAX_RULE_POINTS = 1 << 20
#: the most Gauss points along one direction (their Golub-Welsch matrix is n x n)
MAX_LINE_POINTS = 2048


def _check_rule_size(d: int, q: int, points: int, line: int) -> None:
    """A one-line OptionError for a rule of ``points`` points (``line`` along a direction) past the limits."""
    if points > MAX_RULE_POINTS or line > MAX_LINE_POINTS:
        raise OptionError(f"a quadrature rule exact to degree {q} on the {d}-simplex needs {points:,} points "
                          f"({line:,} along a direction; at most {MAX_RULE_POINTS:,} and {MAX_LINE_POINTS:,}): lower "
                          "the polynomial degree or the quadrature extra degree")


def conical_points_per_direction(q: int) -> int:
    """n = ceil((q + 1) / 2): the fewest Gauss points exact to degree q."""
    return (int(q) + 2) // 2


@lru_cache(maxsize=None)
def _gauss_jacobi01(n: int, alpha: int) -> tuple[np.ndarray, np.ndarray]:
    """n-point Gauss rule on [0, 1] for the weight (1 - t)^alpha, weights summing to 1."""
    x, w = roots_jacobi(n, alpha, 0.0)
    t = 0.5 * (1.0 + x)
    order = np.argsort(t)
    t, w = t[order], w[order]
    return t, w / w.sum()


def _readonly(*arrays: np.ndarray) -> tuple[np.ndarray, ...]:
    out = []
    for a in arrays:
        a = np.ascontiguousarray(a, dtype=np.float64)
        a.setflags(write=False)
        out.append(a)
    return tuple(out)


def _conical_rule(d: int, q: int) -> tuple[np.ndarray, np.ndarray]:
    """Collapsed Gauss-Jacobi rule on the d-simplex (module docstring)."""
    if d == 0:
        return np.ones((1, 1)), np.ones(1)
    n = conical_points_per_direction(q)
    rules = [_gauss_jacobi01(n, d - 1 - k) for k in range(d)]  # t_1 .. t_d
    grids = np.meshgrid(*[r[0] for r in rules], indexing="ij")
    t = np.stack([g.ravel() for g in grids], axis=1)  # (n^d, d)
    wgrids = np.meshgrid(*[r[1] for r in rules], indexing="ij")
    w = np.prod(np.stack([g.ravel() for g in wgrids], axis=1), axis=1)
    bary = np.empty((t.shape[0], d + 1))
    rest = np.ones(t.shape[0])  # (1 - t_1)...(1 - t_{k-1})
    for k in range(d):
        bary[:, k + 1] = rest * t[:, k]
        rest = rest * (1.0 - t[:, k])
    bary[:, 0] = rest
    return bary, w


# --------------------------------------------------------------------------
# fully symmetric rules (orbit form)
#
# An orbit is (kind, params, weight); each point of the orbit gets `weight`
# (weights are normalised to sum 1 over the simplex).  Barycentric patterns:
#   triangle     S3: (1/3,1/3,1/3)  S21(a): (a,a,1-2a)  S111(a,b): (a,b,1-a-b)
#   tetrahedron  S4: (1/4,...)      S31(a): (a,a,a,1-3a)  S22(a): (a,a,1/2-a,1/2-a)
#                S211(a,b): (a,a,b,1-2a-b)
# Parameters refined to 40 digits by Newton on the moment equations; the
# strings below carry 20 significant digits.

_S15 = math.sqrt(15.0)
_S5 = math.sqrt(5.0)

_SYMMETRIC: dict[int, dict[int, list[tuple[str, tuple[float, ...], float]]]] = {
    2: {
        2: [("S21", (1.0 / 6.0,), 1.0 / 3.0)],
        4: [
            ("S21", (0.09157621350977074346,), 0.10995174365532186764),
            ("S21", (0.44594849091596488632,), 0.22338158967801146570),
        ],
        5: [  # Radon's 7-point rule, closed form
            ("S3", (), 9.0 / 40.0),
            ("S21", ((6.0 - _S15) / 21.0,), (155.0 - _S15) / 1200.0),
            ("S21", ((6.0 + _S15) / 21.0,), (155.0 + _S15) / 1200.0),
        ],
        6: [
            ("S21", (0.063089014491502228340,), 0.050844906370206816921),
            ("S21", (0.24928674517091042129,), 0.11678627572637936603),
            ("S111", (0.053145049844816947353, 0.31035245103378440542), 0.082851075618373575194),
        ],
        8: [
            ("S3", (), 0.14431560767778716825),
            ("S21", (0.45929258829272315603,), 0.095091634267284624794),
            ("S21", (0.17056930775176020662,), 0.10321737053471825028),
            ("S21", (0.050547228317030975458,), 0.032458497623198080311),
            ("S111", (0.0083947774099576053372, 0.26311282963463811342), 0.027230314174434994265),
        ],
        9: [
            ("S3", (), 0.097135796282798833819),
            ("S21", (0.48968251919873762778,), 0.031334700227139070537),
            ("S21", (0.43708959149293663727,), 0.077827541004774279317),
            ("S21", (0.18820353561903273024,), 0.079647738927210253033),
            ("S21", (0.044729513394452709865,), 0.025577675658698031262),
            ("S111", (0.036838412054736283635, 0.22196298916076569568), 0.043283539377289377289),
        ],
    },
    3: {
        2: [("S31", ((5.0 - _S5) / 20.0,), 0.25)],
        5: [
            ("S31", (0.092735250310891226402,), 0.073493043116361949544),
            ("S31", (0.31088591926330060980,), 0.11268792571801585080),
            ("S22", (0.045503704125649649492,), 0.042546020777081466438),
        ],
        6: [
            ("S31", (0.21460287125915202929,), 0.039922750258167492100),
            ("S31", (0.040673958534611353116,), 0.010077211055320642948),
            ("S31", (0.32233789014227551034,), 0.055357181543654722095),
            ("S211", (0.063661001875017525299, 0.26967233145831580803), 0.048214285714285714286),
        ],
        7: [  # 35 points, positive weights, interior points (found here, see docstring)
            ("S4", (), 0.095485289464130848861),
            ("S31", (0.31570114977820279942,), 0.042329581209967029076),
            ("S22", (0.050489822598396368763,), 0.031896927832857579934),
            ("S211", (0.18883383102600104774, 0.57517163758700002348), 0.037207130728334621370),
            ("S211", (0.021265472541483245989, 0.14663881381848494690), 0.0081107708299033415661),
        ],
    },
}


def _orbit(kind: str, params: tuple[float, ...]) -> np.ndarray:
    """All distinct permutations of one orbit's base point, shape (m, d+1)."""
    if kind == "S3":
        labels, values = (0, 0, 0), (1.0 / 3.0,)
    elif kind == "S21":
        (a,) = params
        labels, values = (0, 0, 1), (a, 1.0 - 2.0 * a)
    elif kind == "S111":
        a, b = params
        labels, values = (0, 1, 2), (a, b, 1.0 - a - b)
    elif kind == "S4":
        labels, values = (0, 0, 0, 0), (0.25,)
    elif kind == "S31":
        (a,) = params
        labels, values = (0, 0, 0, 1), (a, 1.0 - 3.0 * a)
    elif kind == "S22":
        (a,) = params
        labels, values = (0, 0, 1, 1), (a, 0.5 - a)
    elif kind == "S211":
        a, b = params
        labels, values = (0, 0, 1, 2), (a, b, 1.0 - 2.0 * a - b)
    else:  # pragma: no cover - table is fixed
        raise ValueError(kind)
    patterns = sorted(set(itertools.permutations(labels)))
    return np.array([[values[i] for i in pat] for pat in patterns])


def _symmetric_rule(d: int, degree: int) -> tuple[np.ndarray, np.ndarray]:
    pts, wts = [], []
    for kind, params, weight in _SYMMETRIC[d][degree]:
        o = _orbit(kind, params)
        pts.append(o)
        wts.append(np.full(len(o), weight))
    return np.vstack(pts), np.concatenate(wts)


def _symmetric_size(d: int, degree: int) -> int:
    return sum(len(_orbit(kind, params)) for kind, params, _ in _SYMMETRIC[d][degree])


def _explicit_rule(d: int, degree: int) -> tuple[np.ndarray, np.ndarray]:
    bary, w = EXPLICIT[d][degree]
    return np.array(bary, dtype=np.float64), np.array(w, dtype=np.float64)


# --------------------------------------------------------------------------
# public rules


@lru_cache(maxsize=None)
def simplex_rule(d: int, q: int, family: str = "auto") -> tuple[np.ndarray, np.ndarray]:
    """Quadrature on the d-simplex exact for total degree <= q.

    Returns ``(bary, w)``: barycentric coordinates (nq, d+1) and weights (nq,)
    summing to 1 (module docstring).  d = 0 gives the single point (1.0,)
    with weight 1.  ``family``: "auto" (fewest points among the conical
    product and the stored symmetric and explicit rules of degree >= q;
    on ties symmetric before explicit before conical, then the lower
    degree) or "conical" (always the collapsed Gauss-Jacobi product).
    """
    d, q = int(d), int(q)
    if d < 0:
        raise OptionError(f"simplex dimension must be >= 0, got {d}")
    if q < 0:
        raise OptionError(f"quadrature degree must be >= 0, got {q}")
    if family not in ("auto", "conical"):
        raise OptionError(f"unknown quadrature family {family!r} (use 'auto' or 'conical')")
    # (points, preference on ties, degree, family): symmetric, then explicit, then conical
    candidates = [(conical_points_per_direction(q) ** d, 2, q, "conical")]
    if family == "auto":
        candidates += [(_symmetric_size(d, g), 0, g, "symmetric") for g in _SYMMETRIC.get(d, {}) if g >= q]
        candidates += [(len(rule[1]), 1, g, "explicit") for g, rule in EXPLICIT.get(d, {}).items() if g >= q]
    points, _, degree, kind = min(candidates)
    _check_rule_size(d, q, points, conical_points_per_direction(q) if kind == "conical" else 0)
    if kind == "symmetric":
        bary, w = _symmetric_rule(d, degree)
    elif kind == "explicit":
        bary, w = _explicit_rule(d, degree)
    else:
        bary, w = _conical_rule(d, q)
    return _readonly(bary, w)


@lru_cache(maxsize=None)
def gauss_line_rule(q: int) -> tuple[np.ndarray, np.ndarray]:
    """Gauss-Legendre rule on [0, 1] exact to degree q: points (n,), weights (n,) summing to 1.

    n = ceil((q + 1) / 2); points ascending, strictly inside (0, 1).
    """
    q = int(q)
    if q < 0:
        raise OptionError(f"quadrature degree must be >= 0, got {q}")
    _check_rule_size(1, q, conical_points_per_direction(q), conical_points_per_direction(q))
    t, w = _gauss_jacobi01(conical_points_per_direction(q), 0)
    return _readonly(t, w)


@lru_cache(maxsize=None)
def prism_rule(d: int, q: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rule on the prism S x [0, 1] (S a d-simplex), exact for total degree <= q in (x, t).

    Tensor product of ``simplex_rule(d, q)`` and ``gauss_line_rule(q)``
    (a monomial x^a t^b of total degree <= q has |a| <= q and b <= q).
    Returns ``(bary (n, d+1), t (n,), w (n,))``, weights summing to 1, the
    simplex index varying slowest.  On S x [t0, t1]:
    int f ~= |S| (t1 - t0) sum w f(sum_k bary_k v_k, t0 + t (t1 - t0)).
    """
    bary_s, w_s = simplex_rule(d, q)
    t_l, w_l = gauss_line_rule(q)
    bary = np.repeat(bary_s, len(t_l), axis=0)
    t = np.tile(t_l, len(w_s))
    w = np.outer(w_s, w_l).ravel()
    return _readonly(bary, t, w)
