"""Problems with a polynomial exact solution, which DG spaces of high enough degree reproduce.

:func:`polynomial_problem` (``polynomial:P[:KIND[:SEED]]`` on the command
line) builds f from u exactly, by differentiating the :class:`Polynomial`,
so the discrete solution equals u to round-off when every element has
degree >= P (docs/design.md §15): a test of the assembly with no
discretisation error in the way.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from ..backend import array_namespace
from ..errors import ProblemError
from .contract import Problem, _default_mesh


@dataclass(frozen=True)
class Polynomial:
    """p(x) = sum_m coeff[m] prod_k x_k ** exponents[m, k], evaluated vectorised.

    >>> p = Polynomial(np.array([2.0, 3.0]), np.array([[0, 0], [1, 2]]))   # 2 + 3 x y^2
    >>> float(p(np.array([[2.0, 1.0]]))[0]), float(p.derivative(1)(np.array([[2.0, 1.0]]))[0])
    (8.0, 12.0)
    """

    coeff: np.ndarray
    exponents: np.ndarray

    @property
    def dim(self) -> int:
        return int(self.exponents.shape[1])

    @property
    def degree(self) -> int:
        return int(self.exponents.sum(axis=1).max(initial=0))

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """p at the points ``x`` (n, d), in their array namespace (NumPy, or CuPy on the GPU)."""
        xp = array_namespace(x)
        x = xp.asarray(x, dtype=np.float64)
        n = x.shape[0]
        powers = x[:, :, None] ** xp.arange(self.degree + 1)  # (n, d, degree+1)
        monomials = xp.ones((n, len(self.coeff)))
        for k in range(self.dim):  # d factors of every monomial
            monomials *= powers[:, k, xp.asarray(self.exponents[:, k])]
        # summed term by term, the same at each point however many points come at once (a matrix-vector
        # product's summation order depends on the batch: the ranks' loads would differ in the last bits)
        out = xp.zeros(n)
        for k, c in enumerate(self.coeff.tolist()):
            out += c * monomials[:, k]
        return out

    def derivative(self, k: int) -> "Polynomial":
        """d p / d x_k."""
        e = self.exponents[:, k]
        keep = e > 0
        exponents = self.exponents[keep].copy()
        exponents[:, k] -= 1
        return Polynomial(self.coeff[keep] * e[keep], exponents)

    def gradient(self, x: np.ndarray) -> np.ndarray:
        """(n, d) gradient at the points."""
        return array_namespace(x).stack([self.derivative(k)(x) for k in range(self.dim)], axis=1)

    def __add__(self, other: "Polynomial") -> "Polynomial":
        return Polynomial(np.r_[self.coeff, other.coeff], np.r_[self.exponents, other.exponents]).simplified()

    def __mul__(self, scalar: float) -> "Polynomial":
        return Polynomial(self.coeff * float(scalar), self.exponents)

    __rmul__ = __mul__

    def simplified(self) -> "Polynomial":
        """Equal monomials merged, zero terms dropped, ordered by total degree."""
        if len(self.coeff) == 0:
            return self
        unique, inverse = np.unique(self.exponents, axis=0, return_inverse=True)
        coeff = np.bincount(inverse.reshape(-1), weights=self.coeff, minlength=len(unique))
        keep = coeff != 0
        unique, coeff = unique[keep], coeff[keep]
        order = np.lexsort(unique.T[::-1].tolist() + [unique.sum(axis=1)])
        return Polynomial(coeff[order], unique[order])

    @staticmethod
    def zero(dim: int) -> "Polynomial":
        return Polynomial(np.zeros(0), np.zeros((0, dim), dtype=np.int64))


def multi_indices(dim: int, degree: int) -> np.ndarray:
    """All exponents of total degree <= ``degree`` in ``dim`` variables, by total degree."""
    grid = np.array(list(itertools.product(range(degree + 1), repeat=dim)), dtype=np.int64).reshape(-1, dim)
    grid = grid[grid.sum(axis=1) <= degree]
    return grid[np.lexsort(grid.T[::-1].tolist() + [grid.sum(axis=1)])]


POLYNOMIAL_KINDS = ("diffusion", "advection-reaction", "mixed")


def polynomial_problem(dim: int, degree: int, kind: str = "mixed", seed: int = 0) -> Problem:
    """A problem whose exact solution is a fixed random polynomial of total degree ``degree``.

    The coefficients of u (uniform in [-1, 1], one per monomial of degree
    <= ``degree``) and of the PDE come from ``numpy.random.default_rng(seed)``.
    All PDE coefficients are constant:

    * ``diffusion``: A = 1/2 I + M M^T (SPD, M uniform in [-1/2, 1/2]^{dxd}), b = 0, c = 0;
    * ``advection-reaction``: A = 0, b with |b_k| in [1/2, 3/2] and random signs, c = 1;
    * ``mixed``: A = 1/2 I + M M^T / 10, b as above, c = 1.

    With constant A, div(A grad u) = A : Hess(u), so f is itself a polynomial,

        f = -sum_kl A_kl d_kl u + sum_k b_k d_k u + c u,

    built exactly from the derivatives of u.  Dirichlet data g_D = u on the
    whole boundary.  DG solutions with degree >= ``degree`` on every element
    reproduce u to round-off (docs/design.md §15).
    """
    if kind not in POLYNOMIAL_KINDS:
        raise ProblemError(f"polynomial problem: unknown kind {kind!r}; known: {', '.join(POLYNOMIAL_KINDS)}")
    if dim not in (2, 3, 4):
        raise ProblemError(f"polynomial problem: dimension must be 2, 3 or 4, got {dim!r}")
    if degree < 0:
        raise ProblemError(f"polynomial problem: degree must be >= 0, got {degree}")
    rng = np.random.default_rng(seed)
    exponents = multi_indices(dim, degree)
    u = Polynomial(rng.uniform(-1.0, 1.0, len(exponents)), exponents)
    M = rng.uniform(-0.5, 0.5, (dim, dim))
    b = rng.uniform(0.5, 1.5, dim) * rng.choice([-1.0, 1.0], dim)
    if kind == "diffusion":
        A, b, c = 0.5 * np.eye(dim) + M @ M.T, None, None
    elif kind == "advection-reaction":
        A, c = None, 1.0
    else:
        A, c = 0.5 * np.eye(dim) + 0.1 * M @ M.T, 1.0

    grad = [u.derivative(k) for k in range(dim)]
    f = Polynomial.zero(dim)
    if A is not None:
        for k in range(dim):
            for l in range(dim):
                f = f + (-A[k, l]) * grad[k].derivative(l)
    if b is not None:
        for k in range(dim):
            f = f + b[k] * grad[k]
    if c is not None:
        f = f + c * u

    def exact_gradient(x):
        return array_namespace(x).stack([g(x) for g in grad], axis=1)

    return Problem(
        name=f"polynomial:{degree}:{kind}:{seed}",
        diffusion=A,
        advection=b,
        reaction=c,
        source=f,
        dirichlet=u,
        exact=u,
        exact_gradient=exact_gradient,
        description=f"random polynomial of degree {degree} in {dim}D, {kind} with constant coefficients "
                    f"(seed {seed})",
        default_mesh=_default_mesh(dim),
        dim=dim,
    )

