"""Search for and refine the explicit simplex quadrature rules of polydg/quadrature_rules.py.

Not imported by the package: this script only documents (and reproduces)
where the stored numbers come from.

What it does, for each target (d, q, n) = (dimension, exactness degree,
number of points):

1. Search (float64).  The unknowns are the n points in collapsed (Duffy)
   coordinates t in [0, 1]^d and the n weights w >= 0; the equations are the
   moment conditions sum_i w_i phi_k(t_i) = delta_k0 for the orthonormal
   Proriol-Koornwinder-Dubiner basis phi_k of total degree <= q (whose
   averages over the simplex vanish except the constant's), so the system is
   well conditioned.  scipy.optimize.least_squares (trust-region reflective,
   bounds t in [0, 1], w >= 0, analytic Jacobian) from random starts
   (points uniform in the simplex, equal weights).  A start "succeeds" when
   the residual is below 1e-13, all weights are > 0 and every barycentric
   coordinate is >= 1e-6.  A start that converges with a point on (or
   within 1e-6 of) the boundary is solved again from there with the bounds
   tightened to margin <= t <= 1 - margin (margin^d just above 1e-6), which
   moves it along the solution set (the system is underdetermined) into
   the interior when it can.  Of the acceptable rules among a fixed number
   of starts, the one whose points are farthest from the faces is kept.

2. Refinement (mpmath, 50 digits).  Gauss-Newton with minimum-norm steps on
   the same moment equations: the residual is evaluated at 50 digits, the
   minimum-norm step of the (well conditioned) Jacobian is solved in float64
   and added at 50 digits (mixed-precision iterative refinement: every step
   gains about 14 digits), until the residual is below 1e-40.  The points are
   then converted to barycentric coordinates at 50 digits and written with
   20 significant digits, so the float64 values are correctly rounded.

3. Verification (float64): every monomial x^a with |a| <= q against its
   exact average d! a! / (d + |a|)!; weights > 0, barycentric >= 1e-6.

Usage (from the repository root; needs mpmath, which is not a polydg
dependency but comes with SymPy):

    python launch/find_quadrature_rules.py                 # all TARGETS, prints a summary
    python launch/find_quadrature_rules.py --write         # ... and rewrites polydg/quadrature_rules.py
    python launch/find_quadrature_rules.py --only 3:7:31   # one target d:q:n[:seed[:tries]] (default 0:20)
    python launch/find_quadrature_rules.py --only 3:7:30:0:150 -v   # a smaller size, every start printed
    python launch/find_quadrature_rules.py --write --cache /tmp/qr   # resumable (refined rules kept as JSON)

Random starts use fixed seeds (numpy default_rng(seed) per target) and a
fixed number of starts, so a rerun with the same NumPy / SciPy writes the
same rules.  Running time, one core (OMP_NUM_THREADS=1): about 10 minutes
for all TARGETS (tetrahedron degree 9: 3 min, 8: 2 min, the triangles
1 min together); the per-target times are printed.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
import time
from pathlib import Path

import mpmath as mp
import numpy as np
from scipy.optimize import least_squares

# (d, q, n, seed, tries): the stored rules.  For each, `tries` random starts
# from numpy.random.default_rng(seed); of the acceptable results the one with
# the largest smallest barycentric coordinate is kept.  Smaller n were tried
# (a few minutes each) without success: tetrahedron q = 3 with 5 points
# (1500 starts), q = 4 with 10, q = 6 with 22, q = 7 with 30 (150 starts),
# q = 8 with 42 and 43, q = 9 with 55 and 56 (20-35 starts; some converged
# with a point on a face), q = 10 with 74 and 75; triangle q = 6 with 10,
# q = 10 with 23, q = 11 with 26, q = 12 with 31 (100-200 starts); q = 8
# with 15 and q = 9 with 18 (300-400 starts) did not beat the stored
# symmetric rules of 16 and 19 points.
TARGETS = [
    (3, 3, 6, 0, 20),
    (3, 4, 11, 0, 20),
    (3, 6, 23, 0, 40),
    (3, 7, 31, 0, 40),
    (3, 8, 44, 0, 30),
    (3, 9, 57, 0, 30),
    (2, 6, 11, 0, 20),
    (2, 7, 12, 0, 20),
    (2, 10, 24, 0, 20),
    (2, 11, 27, 0, 20),
]
# Searched, not yet stored (the full --write run with them was stopped): tetrahedron
# q = 10, 11, 12 with 76, 94, 120 points (6, 4, 4 starts), triangle q = 12 with 32.
# Add them to TARGETS and rerun with --write to store them.

OUT = Path(__file__).resolve().parents[1] / "polydg" / "quadrature_rules.py"
MIN_BARY = 1e-6


# --------------------------------------------------------------------------
# orthonormal (PKD) basis in collapsed coordinates, float64 or mpmath


def jacobi_all(nmax: int, a: int, b: int, x):
    """[P_0^{(a,b)}(x), ..., P_nmax^{(a,b)}(x)] by the three-term recurrence (integer coefficients).

    x: a float array or an object array of mpf; the arithmetic follows x.
    """
    P = [x * 0 + 1]
    if nmax >= 1:
        P.append(((a + b + 2) * x + (a - b)) / 2)
    for n in range(1, nmax):
        s = 2 * n + a + b
        c1 = 2 * (n + 1) * (n + a + b + 1) * s
        c2 = (s + 1) * (s + 2) * s
        c3 = (s + 1) * (a * a - b * b)
        c4 = 2 * (n + a) * (n + b) * (s + 2)
        P.append(((c2 * x + c3) * P[n] - c4 * P[n - 1]) / c1)
    return P


def multi_indices(d: int, q: int) -> list[tuple[int, ...]]:
    """(n_1, ..., n_d) with sum <= q, graded by total degree."""
    out = []
    for total in range(q + 1):
        out += [a for a in itertools.product(range(total + 1), repeat=d) if sum(a) == total][::-1]
    return out


class Basis:
    """phi_n(t) = c_n prod_k P_{n_k}^{(alpha_k, 0)}(2 t_k - 1) (1 - t_k)^{m_k},

    m_k = n_{k+1} + ... + n_d, alpha_k = 2 m_k + d - k (k = 1..d), with the
    Duffy map x_1 = t_1, x_k = (1 - t_1)...(1 - t_{k-1}) t_k of
    polydg.quadrature (Jacobian prod (1 - t_k)^(d - k)).  c_n makes the
    basis orthonormal for the *average* over the simplex, so phi_0 = 1 and
    avg(phi_n) = 0 for n != 0.
    """

    def __init__(self, d: int, q: int):
        self.d, self.q = d, q
        self.idx = multi_indices(d, q)
        self.m = [[sum(n[k + 1:]) for k in range(d)] for n in self.idx]
        self.alpha = [[2 * self.m[j][k] + d - 1 - k for k in range(d)] for j in range(len(self.idx))]
        # squared norms: avg(phi^2) = d! prod 1 / (2 n_k + alpha_k + 1)
        self.norm2 = [math.factorial(d) / math.prod(2 * n[k] + al[k] + 1 for k in range(d))
                      for n, al in zip(self.idx, self.alpha)]

    def eval(self, t, grad: bool = False, use_mp: bool = False):
        """V (nb, np) and, with grad, dV (d, nb, np): derivatives in t_k.  t: (np, d)."""
        d, q = self.d, self.q
        npts = t.shape[0]
        one_minus = [1 - t[:, k] for k in range(d)]
        xs = [2 * t[:, k] - 1 for k in range(d)]
        cache, dcache, pw = {}, {}, {}
        for k in range(d):
            for al in set(a[k] for a in self.alpha):
                cache[k, al] = jacobi_all(q, al, 0, xs[k])
                if grad:
                    dcache[k, al] = jacobi_all(max(q - 1, 0), al + 1, 1, xs[k])
            pw[k] = [one_minus[k] * 0 + 1]
            for _ in range(q):
                pw[k].append(pw[k][-1] * one_minus[k])
        dt = object if use_mp else float
        V = np.empty((len(self.idx), npts), dtype=dt)
        dV = np.empty((d, len(self.idx), npts), dtype=dt) if grad else None
        for j, n in enumerate(self.idx):
            c = mp.sqrt(1 / mp.mpf(self.norm2[j])) if use_mp else 1.0 / math.sqrt(self.norm2[j])
            f, df = [], []
            for k in range(d):
                al, m = self.alpha[j][k], self.m[j][k]
                P = cache[k, al][n[k]]
                f.append(P * pw[k][m])
                if grad:
                    dP = (n[k] + al + 1) * dcache[k, al][n[k] - 1] if n[k] > 0 else 0 * P
                    g = dP * pw[k][m]
                    if m > 0:
                        g = g - m * P * pw[k][m - 1]
                    df.append(g)
            V[j] = c * math.prod(f) if not use_mp else c * np.prod(np.array(f, dtype=object), axis=0)
            if grad:
                for k in range(d):
                    prod = df[k]
                    for kk in range(d):
                        if kk != k:
                            prod = prod * f[kk]
                    dV[k, j] = c * prod
        return V, dV


def t_to_bary(t):
    """Collapsed coordinates (np, d) -> barycentric (np, d+1) (works for mpf object arrays)."""
    npts, d = t.shape
    bary = np.empty((npts, d + 1), dtype=t.dtype)
    rest = t[:, 0] * 0 + 1
    for k in range(d):
        bary[:, k + 1] = rest * t[:, k]
        rest = rest * (1 - t[:, k])
    bary[:, 0] = rest
    return bary


def bary_to_t(bary):
    npts, d1 = bary.shape
    d = d1 - 1
    t = np.empty((npts, d))
    rest = np.ones(npts)
    for k in range(d):
        t[:, k] = np.where(rest > 0, bary[:, k + 1] / np.maximum(rest, 1e-300), 0.5)
        rest = rest - bary[:, k + 1]
    return np.clip(t, 0.0, 1.0)


# --------------------------------------------------------------------------
# search (float64)


class Problem:
    def __init__(self, d: int, q: int):
        self.d, self.q = d, q
        self.basis = Basis(d, q)
        self.rhs = np.zeros(len(self.basis.idx))
        self.rhs[0] = 1.0

    def split(self, z, n):
        return z[: n * self.d].reshape(n, self.d), z[n * self.d:]

    def fun(self, z, n):
        t, w = self.split(z, n)
        V, _ = self.basis.eval(t)
        return V @ w - self.rhs

    def jac(self, z, n):
        t, w = self.split(z, n)
        V, dV = self.basis.eval(t, grad=True)
        Jt = (dV * w).transpose(1, 2, 0).reshape(V.shape[0], n * self.d)
        return np.hstack([Jt, V])

    def solve(self, t0, w0, max_nfev=400, margin=0.0):
        """least_squares from (t0, w0) with bounds margin <= t <= 1 - margin, w >= 0."""
        n = len(w0)
        z0 = np.concatenate([t0.ravel(), w0])
        lo = np.concatenate([np.full(n * self.d, margin), np.zeros(n)])
        hi = np.concatenate([np.full(n * self.d, 1.0 - margin), np.full(n, np.inf)])
        z0 = np.clip(z0, lo + 1e-12, np.where(np.isfinite(hi), hi - 1e-12, np.inf))
        res = least_squares(self.fun, z0, jac=self.jac, bounds=(lo, hi), args=(n,), method="trf",
                            ftol=1e-15, xtol=1e-15, gtol=1e-15, max_nfev=max_nfev, x_scale="jac")
        t, w = self.split(res.x, n)
        return t, w, float(np.linalg.norm(res.fun))

    def acceptable(self, t, w, resid, tol=1e-13):
        bary = t_to_bary(t)
        return resid < tol and w.min() > 0 and bary.min() >= MIN_BARY


def random_start(rng, n, d):
    lam = rng.dirichlet(np.ones(d + 1), size=n)
    return bary_to_t(lam), np.full(n, 1.0 / n)


def search_random(prob: Problem, n: int, rng, tries: int, verbose=True):
    """`tries` random starts; the acceptable rule whose points are farthest from the faces.

    A start that converges (residual < 1e-13) with a point on or next to
    the boundary (smallest barycentric coordinate < 1e-6) is solved again
    from there with the bounds margin <= t <= 1 - margin, where margin^d is
    slightly above 1e-6 (so every barycentric coordinate, a product of d
    factors t or 1 - t, stays >= 1e-6): this moves the rule along the
    solution manifold (the system is underdetermined) into the interior,
    when it can.  Returns (t, w, number of acceptable rules found) or
    (None, None, 0).
    """
    found = []
    margin = (1.01 * MIN_BARY) ** (1.0 / prob.d)
    for k in range(1, tries + 1):
        t0, w0 = random_start(rng, n, prob.d)
        t, w, r = prob.solve(t0, w0)
        note = ""
        if r < 1e-13 and not prob.acceptable(t, w, r):
            t, w, r = prob.solve(t, w, margin=margin)
            note = " (pushed inside)"
        ok = prob.acceptable(t, w, r)
        if verbose:
            print(f"    try {k}: residual {r:.2e}  min w {w.min():.2e}  min bary {t_to_bary(t).min():.2e}"
                  f"{note}{'  ok' if ok else ''}", flush=True)
        if ok:
            found.append((t_to_bary(t).min(), t, w))
    if not found:
        return None, None, 0
    _, t, w = max(found, key=lambda f: f[0])
    return t, w, len(found)


# --------------------------------------------------------------------------
# refinement (mpmath) and verification (float64)


def refine(prob: Problem, t, w, dps=50, tol=1e-40, max_iter=30):
    """Gauss-Newton with minimum-norm steps: residual at `dps` digits, step in float64."""
    mp.mp.dps = dps
    n = len(w)
    tm = np.array([[mp.mpf(float(v)) for v in row] for row in t], dtype=object)
    wm = np.array([mp.mpf(float(v)) for v in w], dtype=object)
    rhs = np.array([mp.mpf(1)] + [mp.mpf(0)] * (len(prob.rhs) - 1), dtype=object)
    for it in range(max_iter):
        V, _ = prob.basis.eval(tm, use_mp=True)
        r = V.dot(wm) - rhs
        rn = max(abs(v) for v in r)
        if rn < tol:
            break
        J = prob.jac(np.concatenate([tm.astype(float).ravel(), wm.astype(float)]), n)
        step = np.linalg.lstsq(J, -r.astype(float), rcond=None)[0]
        tm = tm + np.array([mp.mpf(float(v)) for v in step[: n * prob.d]], dtype=object).reshape(n, prob.d)
        wm = wm + np.array([mp.mpf(float(v)) for v in step[n * prob.d:]], dtype=object)
    else:
        raise RuntimeError(f"refinement did not converge (residual {rn})")
    bary = t_to_bary(tm)
    return bary, wm, rn, it


def monomial_errors(bary: np.ndarray, w: np.ndarray, q: int) -> float:
    """Max relative error over all monomials x^a, |a| <= q (x = barycentric columns 1..d)."""
    d = bary.shape[1] - 1
    x = bary[:, 1:]
    err = 0.0
    for a in itertools.product(range(q + 1), repeat=d):
        if sum(a) > q:
            continue
        exact = math.factorial(d) * math.prod(math.factorial(k) for k in a) / math.factorial(d + sum(a))
        err = max(err, abs(w @ np.prod(x ** np.array(a), axis=1) - exact) / exact)
    return err


def to_strings(bary_mp, w_mp, digits=20):
    """Rows as (barycentric strings, weight string), 20 significant digits, heaviest weight first."""
    def fmt(v):
        return mp.nstr(v, digits, min_fixed=-4, max_fixed=1, strip_zeros=False)

    rows = [([fmt(v) for v in b], fmt(wi)) for b, wi in zip(bary_mp, w_mp)]
    order = sorted(range(len(rows)), key=lambda i: (-float(w_mp[i]), [float(v) for v in bary_mp[i]]))
    return [rows[i] for i in order]


# --------------------------------------------------------------------------
# driver

HEADER = '''"""Explicit (not necessarily symmetric) simplex quadrature rules.

Generated by launch/find_quadrature_rules.py (see its docstring: random-start
least-squares search on the orthonormal moment equations, refinement to 40+
digits by Gauss-Newton at 50 digits, 20 significant digits stored here).
Do not edit by hand.

``EXPLICIT[d][q] = (bary, weights)``: barycentric rows (d + 1 entries,
column k belongs to vertex k) and weights summing to 1; every weight is
positive, every barycentric coordinate >= 1e-6, and the rule is exact for
every polynomial of total degree <= q.
"""

EXPLICIT: dict[int, dict[int, tuple[tuple[tuple[float, ...], ...], tuple[float, ...]]]] = {
'''


def write_module(rules: dict) -> None:
    lines = [HEADER]
    for d in sorted(rules):
        lines.append(f"    {d}: {{\n")
        for q in sorted(rules[d]):
            rows = rules[d][q]
            lines.append(f"        {q}: (  # {len(rows)} points\n            (\n")
            for b, _ in rows:
                lines.append("                (" + ", ".join(b) + "),\n")
            lines.append("            ),\n            (\n")
            for _, wi in rows:
                lines.append(f"                {wi},\n")
            lines.append("            ),\n        ),\n")
        lines.append("    },\n")
    lines.append("}\n")
    OUT.write_text("".join(lines))


def run_target(d, q, n, seed, tries, verbose, cache=None):
    if cache is not None:
        path = Path(cache) / f"rule_d{d}_q{q}_n{n}_seed{seed}_tries{tries}.json"
        if path.exists():
            rows = [(list(b), wi) for b, wi in json.loads(path.read_text())]
            print(f"d={d} q={q} n={n}: from {path}", flush=True)
            return rows
    prob = Problem(d, q)
    rng = np.random.default_rng(seed)
    t0 = time.perf_counter()
    t, w, nfound = search_random(prob, n, rng, tries, verbose)
    search_s = time.perf_counter() - t0
    if t is None:
        print(f"d={d} q={q} n={n}: none of {tries} starts (seed {seed}) gave an acceptable rule "
              f"({search_s:.0f} s)", flush=True)
        return None
    t0 = time.perf_counter()
    bary_mp, w_mp, rn, iters = refine(prob, t, w)
    refine_s = time.perf_counter() - t0
    rows = to_strings(bary_mp, w_mp)
    bary = np.array([[float(v) for v in b] for b, _ in rows])
    wf = np.array([float(wi) for _, wi in rows])
    err = monomial_errors(bary, wf, q)
    print(f"d={d} q={q} n={n}: {nfound} of {tries} starts (seed {seed}) acceptable, search {search_s:.1f} s; "
          f"refined to residual {float(rn):.1e} in {iters} steps ({refine_s:.1f} s); float64: max rel "
          f"moment error {err:.1e}, min w {wf.min():.3e}, min bary {bary.min():.3e}", flush=True)
    assert err < 1e-13 and wf.min() > 0 and bary.min() >= MIN_BARY
    if cache is not None:
        Path(cache).mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(rows))
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", action="append", default=[],
                    help="d:q:n[:seed[:tries]] instead of the stored TARGETS (repeatable)")
    ap.add_argument("--write", action="store_true", help=f"rewrite {OUT.relative_to(OUT.parents[1])}")
    ap.add_argument("--cache", metavar="DIR", help="keep each refined rule in DIR (JSON) and reuse it on a "
                    "later run: resumes an interrupted run")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every start")
    args = ap.parse_args(argv)
    targets = TARGETS
    if args.only:
        targets = []
        for s in args.only:
            parts = [int(v) for v in s.split(":")]
            targets.append(tuple(parts) + (0, 20)[len(parts) - 3:])
    rules: dict = {}
    t_all = time.perf_counter()
    for d, q, n, seed, tries in targets:
        rows = run_target(d, q, n, seed, tries, args.verbose, args.cache)
        if rows is not None:
            rules.setdefault(d, {})[q] = rows
    print(f"total {time.perf_counter() - t_all:.0f} s")
    if args.write:
        if sum(len(v) for v in rules.values()) == len(targets):
            write_module(rules)
            print(f"wrote {OUT}")
        else:
            print("not all targets found: nothing written", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
