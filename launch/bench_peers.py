"""polydg against scikit-fem (and NGSolve when importable): one thread each, the same DG system.

Both libraries assemble the same SIPG / upwind system on the same triangles
(2D) or tetrahedra (3D), one DG element per simplex (polydg's
``--agglomerate 0``: ``DGSpace(build_polytopic_mesh(fine), p)``), full
polynomials P_p on every simplex, quadrature exact to degree 2p + 1 on cells
and facets (polydg's default; scikit-fem's ``intorder=2p+1``):

    sum_K int_K (eps grad u . grad v + (b . grad u) v)
  + sum_F int_F (sigma_F [[u]] [[v]] - {eps grad u . n} [[v]] - {eps grad v . n} [[u]])
  + sum_K int_{dK inflow} |b . n_K| (u_K - u_outside) v_K        (u_outside = g_D on the boundary)

with Dirichlet data g_D on the whole boundary (Nitsche terms on the
boundary faces), [[u]] = u_K1 - u_K2, {.} the mean, and the classical penalty
of polydg, sigma_F = C_sigma eps max(p, 1)^2 / min(h_K1, h_K2) with h_K the
element's diameter (its longest edge) and C_sigma = 10 (``--penalty``), passed
to scikit-fem as a per-facet array.  Problems (``--problem``):

* ``diffusion``: -Laplace u = f (eps = 1, b = 0);
* ``advection-diffusion``: -eps Laplace u + b . grad u = f, eps = 0.01,
  b = (1, 1/2, 1/4)[:d] (constant wind).

Exact solutions: the timings use the smooth u = exp(x) prod_k sin(pi x_k + pi/4)
(f and g_D from it, evaluated at every quadrature point by the same NumPy
expressions in both libraries).  ``--check`` also uses the polynomial
u = (1/2 + x + 0.7 y + 0.4 z)^(p+1): with it every integrand of the system
is a polynomial of degree <= 2p + 1, both libraries integrate everything
exactly, and their discrete solutions must agree to round-off.  It solves
both systems on small meshes and compares the solutions (the bases differ,
so solutions, not matrices): the L2 norm of their difference (at the points
of a rule of degree 2p + 3, polydg's solution evaluated in the same
simplex) and their L2 errors against u; then the errors and rates for the
smooth u, whose integrals neither library computes exactly.

Timing: everything runs on one thread (OMP_NUM_THREADS, OPENBLAS_NUM_THREADS,
MKL_NUM_THREADS and NUMBA_NUM_THREADS are set to 1 before NumPy is
imported, and numba.set_num_threads(1)).  Mesh construction is not timed
(polydg: ``build_polytopic_mesh`` and ``DGSpace``; scikit-fem: the mesh and
its facet connectivity, and the cell diameters).  Timed, from the mesh to
a CSR matrix and a load vector:

* polydg: ``assemble(space, problem)`` (a fresh call each time: no reused
  workspace), after one untimed call that compiles the kernels or loads them
  from Numba's cache;
* scikit-fem: building its bases (cell, boundary facets, the two sides of the
  interior facets: the basis values at the quadrature points), the per-facet
  penalty, ``asm`` of the bilinear and linear forms and the sum of the three
  matrices to one CSR matrix, after one untimed run.

* NGSolve, when importable (not a dependency; ``pip install ngsolve``): the
  L2(order=p, dgjumps=True) space, the symbolic forms (skeleton integrals for
  the interior and boundary facets, an element-boundary integral for the
  upwind term, rules of degree 2p + 1 by ``bonus_intorder=1``) and
  ``Assemble()`` of the matrix and the load vector, with SetNumThreads(1) and
  no TaskManager; its mesh (netgen.meshing, from the same points and
  simplices) is not timed.  Its solutions are compared in ``--check`` by its
  L2 errors (NGSolve's own quadrature).

The libraries take turns, ``--repeat`` times, and the medians are reported
with their ratio (library / polydg).

Run:  python launch/bench_peers.py --check
      python launch/bench_peers.py --dim 2 --degree 1 2 3 --repeat 5
      python launch/bench_peers.py --dim 3 --degree 1 2 --repeat 5 --problem advection-diffusion
      python launch/bench_peers.py --dim 2 --degree 2 --n 64 --repeat 3 --json peers.json

Without ``--n`` the mesh is the unit square's square:n (2 n^2 triangles) or
the unit cube's cube:n (6 n^3 tetrahedra) with n chosen for about ``--dofs``
(default 10^5) dofs.  Needs scikit-fem (``pip install -e ".[bench]"``).
"""

from __future__ import annotations

import os

if __name__ == "__main__":
    # before NumPy, SciPy and Numba are imported: one thread for every library
    for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
        os.environ[_var] = "1"

import argparse
import json
import math
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from polydg.assembly import assemble
from polydg.basis import n_basis
from polydg.mesh import build_polytopic_mesh, unit_cube, unit_square
from polydg.problem import Problem
from polydg.solve import evaluate
from polydg.space import DGSpace

PROBLEMS = ("diffusion", "advection-diffusion")
SOLUTIONS = ("smooth", "polynomial")
WIND = np.array([1.0, 0.5, 0.25])
#: the polynomial solution's direction: u = (1/2 + c . x)^m
POLY_DIRECTION = np.array([1.0, 0.7, 0.4])
#: how far --check moves the interior vertices (times the cell size)
CHECK_PERTURB = 0.2


# ---------------------------------------------------------------------------
# the problem, written once for both libraries


@dataclass
class PeerProblem:
    """-eps Laplace u + b . grad u = f on (0, 1)^d, u = g_D on the boundary.

    ``u``, ``grad`` and ``f`` take the coordinates as a sequence of d arrays of
    any one shape (polydg passes columns of (n, d) points, scikit-fem the
    (d, elements, points) array of its quadrature points), or NGSolve's
    coordinate functions x, y, z.
    """

    name: str
    d: int
    eps: float
    b: np.ndarray | None
    u: Callable
    grad: Callable
    f: Callable
    description: str

    def polydg(self) -> Problem:
        def cols(fun):
            return lambda x: fun([x[:, k] for k in range(self.d)])

        return Problem(name=f"peers-{self.name}", diffusion=self.eps, advection=self.b, source=cols(self.f),
                       dirichlet=cols(self.u), exact=cols(self.u),
                       exact_gradient=lambda x: np.stack(self.grad([x[:, k] for k in range(self.d)]), axis=1),
                       description=self.description, dim=self.d)


def _functions(x0):
    """NumPy for arrays, NGSolve for its coordinate CoefficientFunctions (exp, sin, cos)."""
    if isinstance(x0, (np.ndarray, np.generic, float, int)):
        return np
    import ngsolve

    return ngsolve


def make_problem(name: str, d: int, solution: str = "smooth", p: int = 1) -> PeerProblem:
    """The ``name`` problem in ``d`` dimensions with the ``smooth`` or ``polynomial`` (degree p + 1) solution."""
    if name not in PROBLEMS:
        raise ValueError(f"unknown problem {name!r}; choose one of {', '.join(PROBLEMS)}")
    eps, b = (1.0, None) if name == "diffusion" else (0.01, WIND[:d].copy())
    if solution == "smooth":
        # u = exp(x_0) prod_{k>=1} sin(t_k), t_k = pi x_k + pi/4: d_0 u = u, d_kk u = -pi^2 u
        def u(x):
            fn = _functions(x[0])
            out = fn.exp(x[0])
            for k in range(1, d):
                out = out * fn.sin(np.pi * x[k] + np.pi / 4)
            return out

        def grad(x):
            fn = _functions(x[0])
            g = [u(x)]
            for k in range(1, d):
                gk = np.pi * fn.exp(x[0]) * fn.cos(np.pi * x[k] + np.pi / 4)
                for j in range(1, d):
                    if j != k:
                        gk = gk * fn.sin(np.pi * x[j] + np.pi / 4)
                g.append(gk)
            return g

        def laplace(x):
            return (1.0 - (d - 1) * np.pi**2) * u(x)

        text = "exp(x) " + " ".join(f"sin(pi {v} + pi/4)" for v in "yz"[: d - 1])
    elif solution == "polynomial":
        m = p + 1
        c = POLY_DIRECTION[:d]

        def s(x):
            out = 0.5 + c[0] * x[0]
            for k in range(1, d):
                out = out + c[k] * x[k]
            return out

        def u(x):
            return s(x) ** m

        def grad(x):
            g = m * s(x) ** (m - 1)
            return [c[k] * g for k in range(d)]

        def laplace(x):
            return (m * (m - 1) * float(c @ c)) * s(x) ** (m - 2) if m >= 2 else 0.0 * x[0]

        text = f"(1/2 + {' + '.join(f'{ck:g} {v}' for ck, v in zip(c, 'xyz'))})^{m}"
    else:
        raise ValueError(f"unknown solution {solution!r}; choose one of {', '.join(SOLUTIONS)}")

    def f(x):
        out = -eps * laplace(x)
        if b is not None:
            g = grad(x)
            for k in range(d):
                out = out + b[k] * g[k]
        return out

    what = "-Laplace u = f" if b is None else f"-{eps:g} Laplace u + {tuple(b.tolist())} . grad u = f"
    return PeerProblem(name, d, eps, b, u, grad, f, f"{what}, u = {text}")


def fine_mesh(d: int, n: int, perturb: float = 0.0):
    """square:n (2 n^2 triangles) or cube:n (6 n^3 tetrahedra), interior vertices moved by up to ``perturb`` h."""
    return unit_square(n, perturb, seed=1) if d == 2 else unit_cube(n, perturb, seed=1)


def size_for(d: int, p: int, dofs: float) -> int:
    """The n of square:n / cube:n closest to ``dofs`` dofs at degree p."""
    per_cell = n_basis(p, d) * (2 if d == 2 else 6)
    return max(1, round((dofs / per_cell) ** (1.0 / d)))


# ---------------------------------------------------------------------------
# polydg


class PolydgCase:
    """polydg on ``fine`` with one element per simplex; construction is the untimed mesh set-up."""

    library = "polydg"

    def __init__(self, fine, p: int, problem: PeerProblem, penalty: float = 10.0):
        self.mesh = build_polytopic_mesh(fine)  # no agglomeration: element e is cell e
        self.space = DGSpace(self.mesh, p)
        self.problem = problem.polydg()
        self.penalty = penalty
        self.n_dofs = self.space.n_dofs

    def assemble(self):
        result = assemble(self.space, self.problem, penalty=self.penalty, penalty_kind="classical")
        return result.matrix, result.rhs

    def values(self, u: np.ndarray, x: np.ndarray, cells: np.ndarray) -> np.ndarray:
        """The solution at points x (n, d) lying in polydg elements ``cells`` (n,)."""
        return evaluate(self.space, u, x, cells)


# ---------------------------------------------------------------------------
# scikit-fem


def _skfem():
    try:
        import skfem
    except ImportError:
        return None
    return skfem


def _values(field) -> np.ndarray:
    """The values of a scikit-fem DiscreteField (an ndarray since scikit-fem 8, a NamedTuple before)."""
    return np.asarray(field) if isinstance(field, np.ndarray) else field.value


def skfem_element(d: int, p: int):
    """ElementDG of the continuous P_p element of scikit-fem: full P_p per simplex."""
    import skfem

    names = {2: {1: "ElementTriP1", 2: "ElementTriP2", 3: "ElementTriP3", 4: "ElementTriP4"},
             3: {1: "ElementTetP1", 2: "ElementTetP2"}}
    if p not in names[d]:
        raise ValueError(f"scikit-fem has no {d}D Lagrange element of degree {p} (has {sorted(names[d])})")
    return skfem.ElementDG(getattr(skfem, names[d][p])())


class SkfemCase:
    """The same system in scikit-fem; construction (untimed) builds the mesh, its facets and h_K."""

    library = "scikit-fem"

    def __init__(self, fine, p: int, problem: PeerProblem, penalty: float = 10.0):
        import skfem

        d = fine.dim
        mesh_type = skfem.MeshTri if d == 2 else skfem.MeshTet
        self.mesh = mesh_type(np.ascontiguousarray(fine.points.T), np.ascontiguousarray(fine.cells.T))
        # the connectivity is built lazily: build it here, as polydg's mesh construction does
        self.mesh.f2t, self.mesh.t2f, self.mesh.facets, self.mesh.boundary_facets()
        xs = self.mesh.p[:, self.mesh.t]  # (d, d+1, cells)
        self.h = np.zeros(self.mesh.t.shape[1])
        for i in range(d + 1):
            for j in range(i + 1, d + 1):
                self.h = np.maximum(self.h, np.sqrt(((xs[:, i] - xs[:, j]) ** 2).sum(axis=0)))
        self.d, self.p, self.problem, self.penalty = d, p, problem, penalty
        self.element = skfem_element(d, p)
        self.n_dofs = self.mesh.t.shape[1] * n_basis(p, d)
        self._forms = self._make_forms()

    def _make_forms(self):
        from skfem import BilinearForm, LinearForm
        from skfem.helpers import dot, grad, jump

        pr, d = self.problem, self.d
        eps, b = pr.eps, pr.b

        def normal_dot(g, n):
            return sum(g[k] * n[k] for k in range(d))

        @BilinearForm
        def volume(u, v, w):
            out = eps * dot(grad(u), grad(v))
            if b is not None:
                out = out + sum(b[k] * u.grad[k] for k in range(d)) * v
            return out

        @LinearForm
        def load(v, w):
            return pr.f(w.x) * v

        @BilinearForm
        def interior(u, v, w):
            # w.idx = (side of u, side of v); jump gives (-1)^side u, (-1)^side v; n points out of side 0
            ju, jv = jump(w, u, v)
            coeff = w.sigma if b is None else w.sigma + (w.up0 if w.idx[1] == 0 else w.up1)
            return (coeff * ju * jv - 0.5 * eps * normal_dot(u.grad, w.n) * jv
                    - 0.5 * eps * normal_dot(v.grad, w.n) * ju)

        @BilinearForm
        def boundary(u, v, w):
            coeff = w.sigma if b is None else w.sigma + w.up
            return coeff * u * v - eps * normal_dot(u.grad, w.n) * v - eps * normal_dot(v.grad, w.n) * u

        @LinearForm
        def boundary_load(v, w):
            g = pr.u(w.x)
            coeff = w.sigma if b is None else w.sigma + w.up
            return coeff * g * v - eps * g * normal_dot(v.grad, w.n)

        return volume, load, interior, boundary, boundary_load

    def assemble(self):
        from skfem import Basis, FacetBasis, InteriorFacetBasis, asm

        t0 = time.perf_counter()
        q = 2 * self.p + 1
        m, e = self.mesh, self.element
        cell = Basis(m, e, intorder=q)
        bnd = FacetBasis(m, e, intorder=q)
        sides = [InteriorFacetBasis(m, e, intorder=q, side=s) for s in (0, 1)]
        self.setup_seconds = time.perf_counter() - t0
        scale = self.penalty * self.problem.eps * max(self.p, 1) ** 2
        sigma_int = (scale / np.minimum(self.h[sides[0].tind], self.h[sides[1].tind]))[:, None]
        sigma_bnd = (scale / self.h[bnd.tind])[:, None]
        volume, load, interior, boundary, boundary_load = self._forms
        extra_int, extra_bnd = {}, {}
        if self.problem.b is not None:
            bn_int = sum(self.problem.b[k] * _values(sides[0].normals)[k] for k in range(self.d))
            extra_int = {"up0": np.maximum(-bn_int, 0.0), "up1": np.maximum(bn_int, 0.0)}
            bn_bnd = sum(self.problem.b[k] * _values(bnd.normals)[k] for k in range(self.d))
            extra_bnd = {"up": np.maximum(-bn_bnd, 0.0)}
        A = (asm(volume, cell) + asm(interior, sides, sides, sigma=sigma_int, **extra_int)
             + asm(boundary, bnd, sigma=sigma_bnd, **extra_bnd))
        rhs = asm(load, cell) + asm(boundary_load, bnd, sigma=sigma_bnd, **extra_bnd)
        return A.tocsr(), rhs

    def values_at_quadrature(self, u: np.ndarray, degree: int):
        """(x (d, cells, nq), u_h (cells, nq), dx (cells, nq)) at a rule of the given degree."""
        from skfem import Basis

        basis = Basis(self.mesh, self.element, intorder=degree)
        return _values(basis.global_coordinates()), _values(basis.interpolate(u)), basis.dx


# ---------------------------------------------------------------------------
# NGSolve (optional)


def _ngsolve():
    try:
        import ngsolve  # noqa: F401
    except ImportError:
        return None
    return ngsolve


class NgsolveCase:
    """The same system in NGSolve (L2 space with dgjumps), when NGSolve is importable.

    The mesh is built from the same points and simplices (netgen.meshing);
    the penalty uses the same per-element diameters, held in a piecewise
    constant GridFunction.  Timed: the space, the forms and Assemble() of
    the matrix and the load vector.
    """

    library = "NGSolve"

    def __init__(self, fine, p: int, problem: PeerProblem, penalty: float = 10.0):
        import ngsolve
        from netgen import meshing

        ngsolve.SetNumThreads(1)
        d = fine.dim
        ngmesh = meshing.Mesh(dim=d)
        pids = [ngmesh.Add(meshing.MeshPoint(meshing.Pnt(*(list(x) + [0.0] * (3 - d))))) for x in fine.points]
        if d == 2:
            ngmesh.Add(meshing.FaceDescriptor(surfnr=1, domin=1, bc=1))
            for c in fine.cells:
                ngmesh.Add(meshing.Element2D(1, [pids[i] for i in c]))
            for f in fine.boundary_facets:
                ngmesh.Add(meshing.Element1D([pids[i] for i in f], index=1))
        else:
            ngmesh.Add(meshing.FaceDescriptor(surfnr=1, domin=1, bc=1))
            for c in fine.cells:
                ngmesh.Add(meshing.Element3D(1, [pids[i] for i in c]))
            for f in fine.boundary_facets:
                ngmesh.Add(meshing.Element2D(1, [pids[i] for i in f]))
        self.mesh = ngsolve.Mesh(ngmesh)
        # h_K from NGSolve's own elements (vertex k is point k, checked), one order-0 L2 dof per element
        points = np.array([v.point for v in self.mesh.vertices])[:, :d]
        if not np.array_equal(points, fine.points):
            raise RuntimeError("NGSolve renumbered the mesh's vertices")
        cells = np.array([[v.nr for v in el.vertices] for el in self.mesh.Elements(ngsolve.VOL)])
        x = fine.points[cells]
        h = np.zeros(len(cells))
        for i in range(d + 1):
            for j in range(i + 1, d + 1):
                h = np.maximum(h, np.linalg.norm(x[:, i] - x[:, j], axis=1))
        self.h = ngsolve.GridFunction(ngsolve.L2(self.mesh, order=0))
        self.h.vec.FV().NumPy()[:] = h
        self.d, self.p, self.problem, self.penalty = d, p, problem, penalty
        self.n_dofs = len(fine.cells) * n_basis(p, d)
        self.bonus = 1  # NGSolve's rules have degree 2p + bonus_intorder

    def assemble(self):
        import ngsolve as ng

        d, pr = self.d, self.problem
        fes = ng.L2(self.mesh, order=self.p, dgjumps=True)
        u, v = fes.TnT()
        n = ng.specialcf.normal(d)
        X = [ng.x, ng.y, ng.z][:d]
        hmin = ng.IfPos(self.h - self.h.Other(), self.h.Other(), self.h)
        sigma = self.penalty * pr.eps * max(self.p, 1) ** 2 / hmin
        sigma_b = self.penalty * pr.eps * max(self.p, 1) ** 2 / self.h
        bonus = self.bonus
        dS = ng.dx(skeleton=True, bonus_intorder=bonus)
        dB = ng.ds(skeleton=True, bonus_intorder=bonus)
        jump_u, jump_v = u - u.Other(), v - v.Other()
        mean_du = 0.5 * pr.eps * (ng.grad(u) + ng.grad(u.Other())) * n
        mean_dv = 0.5 * pr.eps * (ng.grad(v) + ng.grad(v.Other())) * n
        a = ng.BilinearForm(fes)
        a += pr.eps * ng.grad(u) * ng.grad(v) * ng.dx(bonus_intorder=bonus)
        a += (sigma * jump_u * jump_v - mean_du * jump_v - mean_dv * jump_u) * dS
        a += (sigma_b * u * v - pr.eps * (ng.grad(u) * n) * v - pr.eps * (ng.grad(v) * n) * u) * dB
        g = pr.u(X)
        f_load = ng.LinearForm(fes)
        f_load += pr.f(X) * v * ng.dx(bonus_intorder=bonus)
        f_load += (sigma_b * g * v - pr.eps * g * (ng.grad(v) * n)) * dB
        if pr.b is not None:
            b = ng.CoefficientFunction(tuple(pr.b.tolist()))
            bn = b * n
            up = ng.IfPos(bn, 0, -bn)
            a += (b * ng.grad(u)) * v * ng.dx(bonus_intorder=bonus)
            a += up * (u - u.Other()) * v * ng.dx(element_boundary=True, bonus_intorder=bonus)
            f_load += up * g * v * dB
        a.Assemble()
        f_load.Assemble()
        self.fes = fes
        return a.mat, f_load.vec

    def l2_error(self, A, rhs, order: int) -> float:
        """||u_h - u||_L2 of the solution of the assembled system, by NGSolve's own quadrature of ``order``.

        (NGSolve's own integration: locating points by their coordinates
        would be ambiguous at the points of the rules on element faces.)
        """
        import ngsolve as ng

        u = ng.GridFunction(self.fes)
        u.vec.data = A.Inverse() * rhs
        X = [ng.x, ng.y, ng.z][:self.d]
        return math.sqrt(ng.Integrate((u - self.problem.u(X)) ** 2, self.mesh, order=order))


# ---------------------------------------------------------------------------
# the cross-check


def _cell_keys(cells: np.ndarray, n_points: int) -> np.ndarray:
    s = np.sort(cells, axis=1).astype(np.int64)
    key = np.zeros(len(s), dtype=np.int64)
    for k in range(s.shape[1]):
        key = key * n_points + s[:, k]
    return key


def compare(d: int, n: int, p: int, problem_name: str, solution: str = "polynomial",
            penalty: float = 10.0, with_ngsolve: bool = False, perturb: float = CHECK_PERTURB) -> dict:
    """Solve the system of both libraries on square:n / cube:n and compare the solutions.

    The mesh's interior vertices are moved by up to ``perturb`` times the
    cell size (default 0.2: simplices of different diameters, so that the
    penalty's min(h_K1, h_K2) is exercised, and normals in every direction).

    Returns the L2 norms of the difference of the two discrete solutions
    (``diff``), of the polydg solution (``norm``), and of each library's error
    against the exact solution (``err_polydg``, ``err_skfem``), all by a rule of
    degree 2p + 3 on every simplex, and the dof counts.  With ``with_ngsolve``
    and NGSolve importable, also NGSolve's error (``err_ngsolve``, by its own
    quadrature of the same degree) and dof count.
    """
    fine = fine_mesh(d, n, perturb)
    problem = make_problem(problem_name, d, solution, p)
    pd, sk = PolydgCase(fine, p, problem, penalty), SkfemCase(fine, p, problem, penalty)
    A1, b1 = pd.assemble()
    A2, b2 = sk.assemble()
    u1 = spla.spsolve(sp.csc_matrix(A1), b1)
    u2 = spla.spsolve(sp.csc_matrix(A2), b2)
    x, u2q, dx = sk.values_at_quadrature(u2, 2 * p + 3)
    # polydg's element of each scikit-fem cell, by their vertex sets
    if not np.array_equal(pd.mesh.points, fine.points):
        raise RuntimeError("polydg's mesh does not keep the fine mesh's points")
    pd_cells = pd.mesh.simplices[pd.mesh.element_offsets[:-1]]
    key_pd = _cell_keys(pd_cells, len(fine.points))
    key_sk = _cell_keys(sk.mesh.t.T, len(fine.points))
    order = np.argsort(key_pd)
    pos = np.searchsorted(key_pd[order], key_sk)
    element = order[np.minimum(pos, len(order) - 1)]
    if not np.array_equal(key_pd[element], key_sk):
        raise RuntimeError("the two meshes do not have the same simplices")
    nq = x.shape[2]
    points = x.reshape(d, -1).T
    u1q = pd.values(u1, points, np.repeat(element, nq)).reshape(u2q.shape)
    exact = problem.u(list(x))
    w = dx
    out = {
        "d": d, "n": n, "p": p, "problem": problem_name, "solution": solution,
        "dofs_polydg": pd.n_dofs, "dofs_skfem": int(A2.shape[0]),
        "diff": float(np.sqrt(np.sum(w * (u1q - u2q) ** 2))),
        "norm": float(np.sqrt(np.sum(w * u1q**2))),
        "err_polydg": float(np.sqrt(np.sum(w * (u1q - exact) ** 2))),
        "err_skfem": float(np.sqrt(np.sum(w * (u2q - exact) ** 2))),
    }
    if with_ngsolve and _ngsolve() is not None:
        ng_case = NgsolveCase(fine, p, problem, penalty)
        A3, b3 = ng_case.assemble()
        out["dofs_ngsolve"] = int(A3.height)
        out["err_ngsolve"] = ng_case.l2_error(A3, b3, 2 * p + 3)
    return out


def run_check(quick: bool = False) -> bool:
    """Print the cross-check tables; True when the polynomial cases agree to round-off."""
    cases = [(2, 4, p) for p in (1, 2, 3)] + [(3, 2, p) for p in (1, 2)]
    if not quick:
        cases = [(2, 8, p) for p in (1, 2, 3)] + [(3, 3, p) for p in (1, 2)]
    ok = True
    ng = _ngsolve() is not None
    print(f"meshes square:n / cube:n with interior vertices moved by up to {CHECK_PERTURB} h (seed 1)")
    print("cross-check 1: polynomial solution of degree p + 1, every integral exact in both libraries:")
    print(f"{'problem':>20} {'d':>2} {'n':>3} {'p':>2} {'dofs':>7} {'|u_pd - u_sk|':>14} {'relative':>10} "
          f"{'err polydg':>11} {'err skfem':>11}" + (f" {'err NGSolve':>11}" if ng else ""))
    for problem_name in PROBLEMS:
        for d, n, p in cases:
            r = compare(d, n, p, problem_name, "polynomial", with_ngsolve=ng)
            rel = r["diff"] / r["norm"]
            good = rel < 1e-10 and r["dofs_polydg"] == r["dofs_skfem"]
            if ng:  # NGSolve's error, by its own quadrature, must be the same number
                good &= (abs(r["err_ngsolve"] - r["err_polydg"]) < 1e-8 * r["err_polydg"]
                         and r["dofs_ngsolve"] == r["dofs_polydg"])
            ok &= good
            print(f"{problem_name:>20} {d:>2} {n:>3} {p:>2} {r['dofs_polydg']:>7} {r['diff']:14.3e} {rel:10.2e} "
                  f"{r['err_polydg']:11.3e} {r['err_skfem']:11.3e}" + (f" {r['err_ngsolve']:11.3e}" if ng else "")
                  + ("" if good else "  MISMATCH"))
    print("\ncross-check 2: smooth solution (quadrature of f and g_D not exact: the rules differ), L2 errors "
          "and rates:")
    print(f"{'problem':>20} {'d':>2} {'n':>3} {'p':>2} {'err polydg':>11} {'rate':>5} {'err skfem':>11} {'rate':>5} "
          f"{'|u_pd - u_sk|':>14}")
    series = [(2, (4, 8, 16), (1, 2, 3))] if quick else [(2, (4, 8, 16, 32), (1, 2, 3)), (3, (2, 4, 8), (1, 2))]
    for problem_name in PROBLEMS:
        for d, sizes, degrees in series:
            for p in degrees:
                prev = None
                for n in sizes:
                    r = compare(d, n, p, problem_name, "smooth")
                    rates = ("", "")
                    if prev is not None:
                        rates = tuple(f"{math.log2(prev[k] / r[k]):5.2f}" for k in ("err_polydg", "err_skfem"))
                    prev = r
                    print(f"{problem_name:>20} {d:>2} {n:>3} {p:>2} {r['err_polydg']:11.3e} {rates[0]:>5} "
                          f"{r['err_skfem']:11.3e} {rates[1]:>5} {r['diff']:14.3e}")
    print("\ncross-check " + ("passed: the discrete solutions agree to round-off" if ok else "FAILED"))
    return ok


# ---------------------------------------------------------------------------
# timing


def _timed(fn) -> tuple[float, object]:
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def bench_case(d: int, p: int, n: int, problem_name: str, repeat: int, penalty: float) -> dict:
    fine = fine_mesh(d, n)
    problem = make_problem(problem_name, d, "smooth", p)
    cases = [PolydgCase(fine, p, problem, penalty), SkfemCase(fine, p, problem, penalty)]
    skipped = None
    if _ngsolve() is not None:
        try:
            cases.append(NgsolveCase(fine, p, problem, penalty))
        except Exception as exc:  # report, and time the others
            skipped = f"NGSolve case failed to build: {type(exc).__name__}: {exc}"
    times = {c.library: [] for c in cases}
    setup = []
    nnz = {}
    for c in cases:  # untimed: JIT compilation or cache loading for polydg, first touch of memory for all
        c.assemble()
    for _ in range(repeat):
        for c in cases:  # the libraries take turns, so that a busy moment of the machine hits both
            seconds, out = _timed(c.assemble)
            times[c.library].append(seconds)
            if c.library == "scikit-fem":
                setup.append(c.setup_seconds)
            nnz[c.library] = int(out[0].nnz if hasattr(out[0], "nnz") else out[0].nze)  # NGSolve: nze
            del out
    med = {k: statistics.median(v) for k, v in times.items()}
    return {"d": d, "p": p, "n": n, "mesh": f"{'square' if d == 2 else 'cube'}:{n}", "cells": fine.n_cells,
            "problem": problem_name, "dofs": {c.library: c.n_dofs for c in cases}, "nnz": nnz,
            "seconds": med, "runs": times, "skfem_basis_seconds": statistics.median(setup),
            "ngsolve_skipped": skipped}


def print_results(results: list[dict]) -> None:
    print(f"\n{'library':>11} {'problem':>20} {'d':>2} {'p':>2} {'mesh':>11} {'dofs':>8} {'nnz':>10} "
          f"{'seconds':>9} {'ratio':>7}")
    for r in results:
        base = r["seconds"]["polydg"]
        for lib, sec in r["seconds"].items():
            nnz = r["nnz"].get(lib)
            print(f"{lib:>11} {r['problem']:>20} {r['d']:>2} {r['p']:>2} {r['mesh']:>11} {r['dofs'][lib]:>8} "
                  f"{nnz if nnz is not None else '':>10} {sec:9.4f} {sec / base:7.2f}")
    print("ratio = seconds / polydg's seconds (median of the runs, one thread each); scikit-fem's seconds "
          "include building its bases (basis values at the quadrature points):",
          ", ".join(f"{r['d']}D p={r['p']}: {r['skfem_basis_seconds']:.3f} s" for r in results))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dim", type=int, nargs="+", choices=[2, 3], default=[2, 3])
    ap.add_argument("--degree", type=int, nargs="+", default=None,
                    help="polynomial degrees (default 1 2 3 in 2D, 1 2 in 3D)")
    ap.add_argument("--n", type=int, default=None, help="square:n / cube:n (default: about --dofs dofs)")
    ap.add_argument("--dofs", type=float, default=1e5, help="target dof count when --n is not given")
    ap.add_argument("--problem", choices=PROBLEMS, nargs="+", default=["diffusion"])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--penalty", type=float, default=10.0, help="C_sigma of the classical penalty")
    ap.add_argument("--check", action="store_true", help="solve both systems on small meshes and compare")
    ap.add_argument("--quick", action="store_true", help="with --check: the smaller meshes only")
    ap.add_argument("--json", help="write the figures to this file")
    args = ap.parse_args(argv)

    import numba

    numba.set_num_threads(1)
    if _skfem() is None:
        print("scikit-fem is not installed: pip install scikit-fem (or pip install -e '.[bench]')", file=sys.stderr)
        return 2
    import skfem

    print(f"polydg vs scikit-fem {skfem.__version__}, one thread each (numba threads {numba.get_num_threads()}, "
          f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}), {os.cpu_count()} cores on the machine")
    if _ngsolve() is None:
        print("NGSolve is not importable: skipped (pip install ngsolve to include it)")
    if args.check:
        return 0 if run_check(args.quick) else 1
    if args.repeat < 1:
        ap.error("--repeat must be >= 1")
    results = []
    for d in args.dim:
        for p in args.degree or ([1, 2, 3] if d == 2 else [1, 2]):
            n = args.n or size_for(d, p, args.dofs)
            for problem_name in args.problem:
                r = bench_case(d, p, n, problem_name, args.repeat, args.penalty)
                dofs = set(r["dofs"].values())
                print(f"{problem_name} {r['mesh']} ({r['cells']} cells) p = {p}: dofs {r['dofs']}, "
                      + ", ".join(f"{k} {v:.4f} s" for k, v in r["seconds"].items())
                      + ("" if len(dofs) == 1 else "  (DOF COUNTS DIFFER)"), flush=True)
                if r["ngsolve_skipped"]:
                    print(f"  {r['ngsolve_skipped']}")
                results.append(r)
    print_results(results)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"cores": os.cpu_count(), "threads": 1, "results": results}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
