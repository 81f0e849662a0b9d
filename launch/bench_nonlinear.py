"""Newton iterations of polydg against scikit-fem and NGSolve: one thread each, the same nonlinear DG system.

The problem is polydg's built-in ``quasilinear`` (issue #28):

    -div((1 + u^2) grad u) = f in (0, 1)^d,   u = g_D on the boundary,
    u = x_0 + prod_k sin(pi x_k)   (manufactured: f and g_D from it),

on the same triangles (2D) or tetrahedra (3D) in every library, one DG
element per simplex (polydg's ``--agglomerate 0``:
``DGSpace(build_polytopic_mesh(fine), p)``), full P_p on every simplex.  With
a(u) = 1 + u^2 the IP-dG residual of an iterate u tested with v is

    R(u; v) = sum_K int_K (a(u) grad u . grad v - f v)
            + sum_F int_F (sigma_F [u] [v] - {a(u) grad u . n} [v] - [u] {a(u) grad v . n})
            + int_dOmega (sigma_F (u - g_D) v - a(u) grad u . n v - (u - g_D) a(u) grad v . n),

[u] = u_1 - u_2, {.} the mean, where {a(u) grad v . n} takes a on v's own
side (each side its own u); the penalty is polydg's classical one at the
iterate, sigma_F = C_sigma max over the sides K of F of a_K p^2 / h_K, with
a_K = max of a(u) over K's volume quadrature points, h_K the longest edge and
C_sigma = 10, frozen in the Jacobian (not differentiated).  The Jacobian is
the exact derivative of R in u otherwise (a'(u) du grad u in the volume and
in both face averages).

Every library uses polydg's quadrature rules (degree 2p + 1, the same
reference points and weights on cells and facets, checked to map onto the
same physical points), so that the three discrete problems are the same:

* polydg: ``NonlinearSystem(space, problem)`` (its kept plan, made once) and
  ``linearize(u)`` per iterate: the Jacobian and the residual, with its own
  split of the time (u and grad u at the points, the coefficients and the
  per-point M, rho, the element/interior/boundary kernels, the points, the
  penalty; compilation apart);
* scikit-fem: its bases (cell, boundary facets, both sides of the interior
  facets) made once with polydg's rules; per iterate, the iterate
  interpolated on every basis, a_K and sigma_F, the coefficients at the
  points (a, a', a' grad u, the fluxes), ``asm`` of the Jacobian's three
  bilinear forms and the residual's three linear forms, and the sum to one
  CSR matrix;
* NGSolve (``pip install -e ".[bench]"``): L2(order=p, dgjumps=True), the
  residual written once as a nonlinear symbolic form (volume, skeleton and
  boundary-skeleton integrals, polydg's rules through ``intrules``) and
  applied by ``Apply``; the Jacobian written out as a bilinear form whose
  coefficients are the iterate's GridFunction and its ``Other()``,
  ``Assemble()``d per iterate; a_K in a piecewise constant GridFunction,
  from the iterate at the cell rule's points of every element
  (``MapToAllElements``); SetNumThreads(1), no TaskManager.  "NGSolve AD"
  (``--ngsolve``) takes ``AssembleLinearization`` of the nonlinear form
  instead, which NGSolve 6.2 does not linearise on interior facets (see
  :class:`NgsolveNewton`): timed for reference, not the same Jacobian.

``--check`` (small perturbed meshes) solves the problem by Newton in every
library (polydg: ``solve_nonlinear``; the peers: :func:`peer_newton`, SciPy's
spsolve) and compares the converged solutions at the points of a rule of
degree 2p + 3 on every simplex (their differences and their L2 errors
against u), and checks every library's Jacobian against central differences
of its residual (sigma frozen).

Timing (the default), one thread each, wall and CPU seconds (this
process's CPU time, which a machine busy with other work distorts least),
with the 1-minute load average at each measurement:

1. polydg's Newton steps from u = 0 (``--newton-steps``): the assembly of
   the Jacobian and residual (the first compiles the kernels or loads them
   from Numba's cache: reported apart) and the step's linear solve by
   SciPy's ``splu`` (SuperLU, COLAMD ordering) of the Jacobian
   (``--solver iterative``: polydg's GMRES + AMG, where the factorisation
   does not fit; ``none``: no solve);
2. ``--rounds`` rounds in which every library assembles the Jacobian and
   residual at one iterate, taking turns and rotating who goes first
   (polydg at its last Newton iterate, the peers at the projection of the
   exact solution: the values do not change the work).  The ratios come
   from these rounds, without the first (compilation, first touch,
   NGSolve's matrix graph).

Mesh, plan and bases are built before and not timed (their seconds are
printed).  By default polydg evaluates f and g_D by the same NumPy
expressions as the peers (``--builtin-data``: by its built-in problem's
callables, the same values with more work).  ``--memory-budget 64`` adds
polydg with that budget (its chunks' size) to the rounds.

Run:  python launch/bench_nonlinear.py --check
      python launch/bench_nonlinear.py --dim 2 3 --dofs 1e5 --newton-steps 4 --rounds 5
      python launch/bench_nonlinear.py --dim 2 --dofs 1e6 --solver iterative --json nl2d.json
      python launch/bench_nonlinear.py --dim 3 --dofs 1e6 --solver iterative --rounds 3 --memory-budget 64

Without ``--n`` the mesh is the unit square's square:n (2 n^2 triangles) or
the unit cube's cube:n (6 n^3 tetrahedra) with n chosen for about ``--dofs``
(default 10^5) dofs; the degree is ``--degree`` (default 2 in 2D, 1 in 3D).
Needs scikit-fem; NGSolve is used when importable.
"""

from __future__ import annotations

import os

if __name__ == "__main__":
    # before NumPy, SciPy and Numba are imported: one thread for every library
    for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
        os.environ[_var] = "1"

import argparse
import dataclasses
import functools
import json
import math
import resource
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

# polydg from this checkout and bench_peers beside this script (the script's folder is first on sys.path)
sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parent)]
from bench_peers import _ngsolve, _skfem, _values, fine_mesh, size_for, skfem_element  # noqa: E402

from polydg.mesh import build_polytopic_mesh  # noqa: E402
from polydg.nonlinear import NonlinearSystem, solve_nonlinear  # noqa: E402
from polydg.problem.builtin import builtin_problem  # noqa: E402
from polydg.quadrature import default_degree, simplex_rule  # noqa: E402
from polydg.solve import evaluate, solve  # noqa: E402
from polydg.space import DGSpace  # noqa: E402

#: how far --check moves the interior vertices (times the cell size)
CHECK_PERTURB = 0.2
DEFAULT_DEGREE = {2: 2, 3: 1}


# ---------------------------------------------------------------------------
# the manufactured solution, written once for NumPy arrays and NGSolve's coordinates


def _fn(x0):
    """NumPy for arrays, NGSolve for its coordinate CoefficientFunctions."""
    if isinstance(x0, (np.ndarray, np.generic, float, int)):
        return np
    import ngsolve

    return ngsolve


def exact(x):
    """u = x_0 + prod_k sin(pi x_k); ``x`` a sequence of d coordinate arrays (or NGSolve's x, y, z)."""
    fn = _fn(x[0])
    s = fn.sin(np.pi * x[0])
    for xk in x[1:]:
        s = s * fn.sin(np.pi * xk)
    return x[0] + s


def source(x):
    """f = -div((1 + u^2) grad u) = (1 + u^2) d pi^2 S - 2 u |grad u|^2, S = prod_k sin(pi x_k)."""
    fn, d = _fn(x[0]), len(x)
    sines = [fn.sin(np.pi * xk) for xk in x]
    S = sines[0]
    for s in sines[1:]:
        S = S * s
    u = x[0] + S
    grad2 = 0.0
    for k in range(d):
        gk = np.pi * fn.cos(np.pi * x[k])
        for j in range(d):
            if j != k:
                gk = gk * sines[j]
        if k == 0:
            gk = gk + 1.0
        grad2 = grad2 + gk * gk
    return (1 + u * u) * (d * np.pi**2) * S - 2 * u * grad2


def _columns(fun):
    """``fun`` of coordinate arrays as a function of (n, d) points."""
    return lambda x: fun([x[:, k] for k in range(x.shape[1])])


def check_against_builtin(d: int) -> float:
    """Largest relative difference of :func:`exact` and :func:`source` from polydg's built-in ``quasilinear``."""
    pr = builtin_problem("quasilinear", d)
    x = np.random.default_rng(0).random((200, d))
    out = 0.0
    for mine, theirs in ((_columns(exact), pr.exact), (_columns(source), pr.source)):
        a, b = mine(x), theirs(x)
        out = max(out, float(np.abs(a - b).max() / np.abs(b).max()))
    return out


def longest_edges(points: np.ndarray, cells: np.ndarray) -> np.ndarray:
    x = points[cells]
    h = np.zeros(len(cells))
    for i in range(cells.shape[1]):
        for j in range(i + 1, cells.shape[1]):
            h = np.maximum(h, np.linalg.norm(x[:, i] - x[:, j], axis=1))
    return h


def skfem_rule(d: int, q: int):
    """polydg's rule of degree q on the d-simplex as scikit-fem's (points (d, n): the barycentric coordinates
    1..d in the simplex's vertex order, which are scikit-fem's reference coordinates; weights summing to 1/d!)."""
    lam, w = simplex_rule(d, q)
    return np.ascontiguousarray(lam[:, 1:].T), w / math.factorial(d)


def _timed(fn):
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def _load() -> float:
    return os.getloadavg()[0]


# ---------------------------------------------------------------------------
# polydg


def polydg_problem(d: int, builtin_data: bool = False):
    """polydg's built-in ``quasilinear`` with f and g_D given by :func:`source` and :func:`exact`, the NumPy
    expressions the peers evaluate (the built-in's own, with ``builtin_data``: the same values, computed
    with more work)."""
    problem = builtin_problem("quasilinear", d)
    if builtin_data:
        return problem
    return dataclasses.replace(problem, source=_columns(source), dirichlet=_columns(exact), exact=_columns(exact))


class PolydgNewton:
    """polydg's kept plan for the quasilinear problem on ``mesh`` (one element per simplex)."""

    library = "polydg"

    def __init__(self, mesh, p: int, penalty: float = 10.0, builtin_data: bool = False,
                 memory_budget_mb: float | None = None, space=None):
        self.mesh, self.p, self.penalty = mesh, p, penalty
        self.space = space or DGSpace(mesh, p)
        self.problem = polydg_problem(mesh.dim, builtin_data)
        budget = {} if memory_budget_mb is None else {"memory_budget_mb": memory_budget_mb}
        self.setup_seconds, self.system = _timed(
            lambda: NonlinearSystem(self.space, self.problem, penalty=penalty, penalty_kind="classical", **budget))
        if memory_budget_mb is not None:
            self.library = f"polydg {memory_budget_mb:g} MB"
        self.setup_seconds -= self.system.jit_seconds
        self.n_dofs = self.space.n_dofs

    def linearize(self, u, face_penalty=None):
        return self.system.linearize(u, face_penalty=face_penalty)

    def assemble(self, u):
        """(Jacobian, residual, seconds by part); the parts are polydg's own timings."""
        lin = self.linearize(u)
        t = lin.info["timings"]
        parts = {"u at the points": t["iterate"], "coefficients, M, rho": t["forms"],
                 "element kernel": t["element_kernel"], "interior kernel": t["interior_kernel"],
                 "boundary kernel": t["boundary_kernel"], "quadrature points": t["quadrature_points"],
                 "penalty": t["penalty"], "total": t["total_assembly"], "jit": t.get("jit", 0.0)}
        return lin.jacobian, lin.residual, parts

    def solve_newton(self, rtol: float = 1e-12) -> np.ndarray:
        result = solve_nonlinear(self.space, self.problem, penalty=self.penalty, penalty_kind="classical", rtol=rtol,
                                 penalty_rtol=1e-12)
        self.history = result.residuals
        return result.solution

    def values(self, u: np.ndarray, bary: np.ndarray) -> np.ndarray:
        """u_h at the points of barycentric coordinates ``bary`` (nq, d + 1) of every simplex: (cells, nq)."""
        m = self.mesh
        x = np.einsum("qk,ekd->eqd", bary, m.points[m.simplices])
        cells = np.repeat(np.arange(m.n_simplices), len(bary))
        return evaluate(self.space, u, x.reshape(-1, m.dim), m.simplex_element[cells]).reshape(x.shape[:2])


# ---------------------------------------------------------------------------
# scikit-fem


class SkfemNewton:
    """The same system in scikit-fem; construction (untimed but reported) makes its mesh and bases."""

    library = "scikit-fem"

    def __init__(self, mesh, p: int, penalty: float = 10.0):
        import skfem
        from skfem import Basis, FacetBasis, InteriorFacetBasis

        d = mesh.dim
        mesh_type = skfem.MeshTri if d == 2 else skfem.MeshTet
        # polydg's vertex order (sort_t=False), so that the reference rules map onto the same points
        self.mesh = mesh_type(np.ascontiguousarray(mesh.points.T), np.ascontiguousarray(mesh.simplices.T),
                              sort_t=False)
        self.mesh.f2t, self.mesh.t2f, self.mesh.facets, self.mesh.boundary_facets()
        self.h = longest_edges(mesh.points, mesh.simplices)
        self.d, self.p, self.penalty = d, p, penalty
        self.element = skfem_element(d, p)
        q = default_degree(p)
        t0 = time.perf_counter()
        m, e = self.mesh, self.element
        self.cell = Basis(m, e, quadrature=skfem_rule(d, q))
        self.bnd = FacetBasis(m, e, quadrature=skfem_rule(d - 1, q))
        self.sides = [InteriorFacetBasis(m, e, quadrature=skfem_rule(d - 1, q), side=s) for s in (0, 1)]
        self.n_dofs = self.cell.N
        # data of the problem at the points (x only): kept, as polydg keeps its plan
        self.setup_seconds = time.perf_counter() - t0
        self._forms = self._make_forms()

    def _make_forms(self):
        from skfem import BilinearForm, LinearForm

        d = self.d

        def dot(a, b):
            return sum(a[k] * b[k] for k in range(d))

        # volume: w.a = a(u), w.dag = a'(u) grad u, w.F = a(u) grad u, w.f
        @BilinearForm
        def volume_j(du, v, w):
            return dot(w.dag * du + w.a * du.grad, v.grad)

        @LinearForm
        def volume_r(v, w):
            return dot(w.F, v.grad) - w.f * v

        # interior facets: w.idx = (side of du, side of v); w.n points out of side 0 (both sides' bases);
        # per side s: w.a0/a1, w.da0/da1, w.dFn0/dFn1 = a'(u_s) grad u_s . n;
        # w.jump = u_0 - u_1, w.mean = {a grad u . n}
        @BilinearForm
        def interior_j(du, v, w):
            t, s = w.idx
            et, es = 1.0 - 2.0 * t, 1.0 - 2.0 * s
            a_t, dFn_t = (w.a0, w.dFn0) if t == 0 else (w.a1, w.dFn1)
            a_s, da_s = (w.a0, w.da0) if s == 0 else (w.a1, w.da1)
            gvn = dot(v.grad, w.n)
            out = (w.sigma * et * es) * du * v - (0.5 * es) * (dFn_t * du + a_t * dot(du.grad, w.n)) * v \
                - (0.5 * et) * du * a_s * gvn
            if s == t:
                out = out - 0.5 * w.jump * da_s * du * gvn
            return out

        @LinearForm
        def interior_r(v, w):
            s = w.idx[0]
            es = 1.0 - 2.0 * s
            a_s = w.a0 if s == 0 else w.a1
            return es * (w.sigma * w.jump - w.mean) * v - 0.5 * w.jump * a_s * dot(v.grad, w.n)

        # boundary: w.res = u - g_D, w.Fn = a grad u . n, w.dFn = a'(u) grad u . n
        @BilinearForm
        def boundary_j(du, v, w):
            gvn = dot(v.grad, w.n)
            return (w.sigma * du * v - (w.dFn * du + w.a * dot(du.grad, w.n)) * v - du * w.a * gvn
                    - w.res * w.da * du * gvn)

        @LinearForm
        def boundary_r(v, w):
            return w.sigma * w.res * v - w.Fn * v - w.res * w.a * dot(v.grad, w.n)

        return volume_j, volume_r, interior_j, interior_r, boundary_j, boundary_r

    #: sigma_F (interior, boundary) used instead of the iterate's own when set (Newton's last steps)
    frozen = None

    def penalty_at(self, a_cell: np.ndarray):
        """sigma_F per interior facet and per boundary facet, (nf, 1), from a(u) at the cell points."""
        w = self.penalty * max(self.p, 1) ** 2 * a_cell.max(axis=1) / self.h  # C_sigma a_K p^2 / h_K
        s0, s1 = self.sides
        return np.maximum(w[s0.tind], w[s1.tind])[:, None], w[self.bnd.tind][:, None]

    def assemble(self, u):
        """(Jacobian CSR, residual, seconds by part) at the iterate u."""
        from skfem import asm

        d = self.d
        times = {}
        t = time.perf_counter()
        uc = self.cell.interpolate(u)
        us = [b.interpolate(u) for b in self.sides]
        ub = self.bnd.interpolate(u)
        times["u at the points"] = time.perf_counter() - t
        t = time.perf_counter()
        sigma_int, sigma_bnd = self.penalty_at(1.0 + _values(uc) ** 2) if self.frozen is None else self.frozen
        times["penalty"] = time.perf_counter() - t
        t = time.perf_counter()
        # the coefficients at the points: a, a', a grad u, a' grad u (and their normal parts on facets)
        vc, gc = _values(uc), uc.grad
        vol = {"a": 1.0 + vc**2, "dag": 2.0 * vc * gc, "f": source(list(_values(self.cell.global_coordinates())))}
        vol["F"] = vol["a"] * gc
        n = _values(self.sides[0].normals)
        side = {}
        for s, f in enumerate(us):
            val, gn = _values(f), sum(f.grad[k] * n[k] for k in range(d))
            side[f"a{s}"], side[f"da{s}"] = 1.0 + val**2, 2.0 * val
            side[f"dFn{s}"], side[f"Fn{s}"] = 2.0 * val * gn, (1.0 + val**2) * gn
        interior = {"a0": side["a0"], "a1": side["a1"], "da0": side["da0"], "da1": side["da1"],
                    "dFn0": side["dFn0"], "dFn1": side["dFn1"], "jump": _values(us[0]) - _values(us[1]),
                    "mean": 0.5 * (side["Fn0"] + side["Fn1"]), "sigma": sigma_int}
        vb, nb = _values(ub), _values(self.bnd.normals)
        gnb = sum(ub.grad[k] * nb[k] for k in range(d))
        bnd = {"a": 1.0 + vb**2, "da": 2.0 * vb, "dFn": 2.0 * vb * gnb, "Fn": (1.0 + vb**2) * gnb,
               "res": vb - exact(list(_values(self.bnd.global_coordinates()))), "sigma": sigma_bnd}
        times["coefficients"] = time.perf_counter() - t
        volume_j, volume_r, interior_j, interior_r, boundary_j, boundary_r = self._forms
        t = time.perf_counter()
        J = (asm(volume_j, self.cell, **vol) + asm(interior_j, self.sides, self.sides, **interior)
             + asm(boundary_j, self.bnd, **bnd)).tocsr()
        times["asm Jacobian (to CSR)"] = time.perf_counter() - t
        t = time.perf_counter()
        R = asm(volume_r, self.cell, **vol) + asm(interior_r, self.sides, **interior) + asm(boundary_r, self.bnd, **bnd)
        times["asm residual"] = time.perf_counter() - t
        times["total"] = sum(times.values())
        return J, R, times

    def initial(self) -> np.ndarray:
        """The L2 projection of the exact solution (the timing's iterate)."""
        return self.cell.project(lambda x: exact(list(x)))

    def penalty_of(self, u: np.ndarray):
        return self.penalty_at(1.0 + _values(self.cell.interpolate(u)) ** 2)

    def system(self, u: np.ndarray):
        J, R, _ = self.assemble(u)
        return J, R

    def values(self, u: np.ndarray, bary: np.ndarray) -> np.ndarray:
        from skfem import Basis

        basis = Basis(self.mesh, self.element, quadrature=(np.ascontiguousarray(bary[:, 1:].T),
                                                           np.full(len(bary), 1.0 / len(bary))))
        return _values(basis.interpolate(u))


# ---------------------------------------------------------------------------
# NGSolve


class NgsolveNewton:
    """The same system in NGSolve (L2 with dgjumps); its mesh from polydg's simplices.

    The residual is the nonlinear symbolic form's ``Apply``.  The Jacobian (``jacobian``):

    * "written": the derivative written out as a bilinear form in (du, v) whose coefficients are the
      iterate's GridFunction (and its ``Other()`` on the skeleton), ``Assemble()``d at each iterate: the
      exact Jacobian, as scikit-fem's;
    * "linearization": ``AssembleLinearization`` of the nonlinear form.  NGSolve 6.2 does not linearise
      interior-facet (skeleton) integrals: its FacetBilinearFormIntegrator falls back to the facet matrix
      of the form taken as linear in the trial functions, so this Jacobian is wrong on interior facets
      (differences show it; Newton converges linearly with it).  Timed for reference.
    """

    def __init__(self, mesh, p: int, penalty: float = 10.0, jacobian: str = "written"):
        self.jacobian = jacobian
        self.library = "NGSolve" if jacobian == "written" else "NGSolve AD"
        import ngsolve as ng
        from netgen import meshing

        ng.SetNumThreads(1)
        d = mesh.dim
        ngmesh = meshing.Mesh(dim=d)
        pids = [ngmesh.Add(meshing.MeshPoint(meshing.Pnt(*(list(x) + [0.0] * (3 - d))))) for x in mesh.points]
        ngmesh.Add(meshing.FaceDescriptor(surfnr=1, domin=1, bc=1))
        boundary = mesh.face_vertices[mesh.n_interior_faces:]
        if d == 2:
            for c in mesh.simplices:
                ngmesh.Add(meshing.Element2D(1, [pids[i] for i in c]))
            for f in boundary:
                ngmesh.Add(meshing.Element1D([pids[i] for i in f], index=1))
        else:
            for c in mesh.simplices:
                ngmesh.Add(meshing.Element3D(1, [pids[i] for i in c]))
            for f in boundary:
                ngmesh.Add(meshing.Element2D(1, [pids[i] for i in f]))
        self.mesh = ng.Mesh(ngmesh)
        # element k with polydg's vertex order: the reference rules then map onto polydg's points
        cells = np.array([[v.nr for v in el.vertices] for el in self.mesh.Elements(ng.VOL)])
        if not np.array_equal(cells, mesh.simplices):
            raise RuntimeError("NGSolve reordered the elements or their vertices")
        self.d, self.p, self.penalty = d, p, penalty
        self.n_cells = len(cells)
        t0 = time.perf_counter()
        q = default_degree(p)
        self.cell_rule = self._rule(*simplex_rule(d, q))
        self.facet_rule = self._rule(*simplex_rule(d - 1, q))
        self.cell_points = self.mesh.MapToAllElements(self.cell_rule, ng.VOL)
        self.n_q = len(simplex_rule(d, q)[1])
        self.h = ng.GridFunction(ng.L2(self.mesh, order=0))
        self.h.vec.FV().NumPy()[:] = longest_edges(mesh.points, cells)
        self.aK = ng.GridFunction(ng.L2(self.mesh, order=0))
        self.fes = ng.L2(self.mesh, order=p, dgjumps=True)
        self.gfu = ng.GridFunction(self.fes)
        self.res = self.gfu.vec.CreateVector()
        self.form = self._make_form()
        self.written = self._make_jacobian() if jacobian == "written" else None
        self.n_dofs = self.fes.ndof
        self.setup_seconds = time.perf_counter() - t0

    @staticmethod
    def _rule(bary, weights):
        """An NGSolve rule from barycentric points (n, k + 1) and weights summing to 1: NGSolve maps the
        reference point (l_0, ..., l_{k-1}) to l_0 v_0 + ... + l_{k-1} v_{k-1} + (1 - sum) v_k."""
        import ngsolve as ng

        k = bary.shape[1] - 1
        return ng.IntegrationRule(points=[tuple(x) for x in bary[:, :k]],
                                  weights=list(np.asarray(weights) / math.factorial(k)))

    def _measures_and_penalty(self):
        """dx, dS (interior facets), dB (boundary facets) with polydg's rules; sigma on dS and on dB."""
        import ngsolve as ng

        cell_type, facet_type = (ng.TRIG, ng.SEGM) if self.d == 2 else (ng.TET, ng.TRIG)
        dx = ng.dx(intrules={cell_type: self.cell_rule})
        dS = ng.dx(skeleton=True, intrules={facet_type: self.facet_rule})
        dB = ng.ds(skeleton=True, intrules={facet_type: self.facet_rule})
        scale = self.penalty * max(self.p, 1) ** 2
        w, w_other = self.aK / self.h, self.aK.Other() / self.h.Other()
        return dx, dS, dB, scale * ng.IfPos(w - w_other, w, w_other), scale * self.aK / self.h

    def _make_form(self):
        """The residual as a nonlinear form in the trial function."""
        import ngsolve as ng

        d = self.d
        u, v = self.fes.TnT()
        n = ng.specialcf.normal(d)
        X = [ng.x, ng.y, ng.z][:d]
        dx, dS, dB, sigma, sigma_b = self._measures_and_penalty()

        def a(z):
            return 1 + z * z

        uo, vo = u.Other(), v.Other()
        mean_flux = 0.5 * (a(u) * ng.grad(u) + a(uo) * ng.grad(uo)) * n
        mean_test = 0.5 * (a(u) * ng.grad(v) + a(uo) * ng.grad(vo)) * n
        g = exact(X)
        form = ng.BilinearForm(self.fes)
        form += (a(u) * ng.grad(u) * ng.grad(v) - source(X) * v) * dx
        form += (sigma * (u - uo) * (v - vo) - mean_flux * (v - vo) - mean_test * (u - uo)) * dS
        form += (sigma_b * (u - g) * v - a(u) * (ng.grad(u) * n) * v - (u - g) * a(u) * (ng.grad(v) * n)) * dB
        return form

    def _make_jacobian(self):
        """The Jacobian at the iterate w (the GridFunction) as a bilinear form in (du, v), sigma frozen."""
        import ngsolve as ng

        d = self.d
        du, v = self.fes.TnT()
        n = ng.specialcf.normal(d)
        X = [ng.x, ng.y, ng.z][:d]
        dx, dS, dB, sigma, sigma_b = self._measures_and_penalty()
        w = self.gfu
        wo, duo, vo = w.Other(), du.Other(), v.Other()
        gw, gwo = ng.grad(w), ng.grad(w).Other()
        a, da = 1 + w * w, 2 * w
        ao, dao = 1 + wo * wo, 2 * wo
        jac = ng.BilinearForm(self.fes)
        jac += (da * du * gw + a * ng.grad(du)) * ng.grad(v) * dx
        dflux = 0.5 * (da * du * gw + a * ng.grad(du) + dao * duo * gwo + ao * ng.grad(duo)) * n
        mean_test = 0.5 * (a * ng.grad(v) + ao * ng.grad(vo)) * n
        dmean_test = 0.5 * (da * du * ng.grad(v) + dao * duo * ng.grad(vo)) * n
        jac += (sigma * (du - duo) * (v - vo) - dflux * (v - vo) - mean_test * (du - duo)
                - (w - wo) * dmean_test) * dS
        res = w - exact(X)
        jac += (sigma_b * du * v - (da * du * gw + a * ng.grad(du)) * n * v - du * a * (ng.grad(v) * n)
                - res * da * du * (ng.grad(v) * n)) * dB
        return jac

    #: a_K used instead of the iterate's own when set (Newton's last steps)
    frozen = None

    def assemble(self, u=None):
        """(Jacobian, residual, seconds by part) at the iterate u (coefficients of the L2 space; None: the
        GridFunction's own)."""
        times = {}
        if u is not None:
            self.gfu.vec.FV().NumPy()[:] = u
        t = time.perf_counter()
        values = np.asarray(self.gfu(self.cell_points)).reshape(self.n_cells, self.n_q)
        times["u at the points"] = time.perf_counter() - t
        t = time.perf_counter()
        self.aK.vec.FV().NumPy()[:] = (1.0 + values**2).max(axis=1) if self.frozen is None else self.frozen
        times["penalty"] = time.perf_counter() - t
        t = time.perf_counter()
        if self.written is not None:
            self.written.Assemble()
            times["Assemble (Jacobian)"] = time.perf_counter() - t
        else:
            self.form.AssembleLinearization(self.gfu.vec)
            times["AssembleLinearization"] = time.perf_counter() - t
        t = time.perf_counter()
        self.form.Apply(self.gfu.vec, self.res)
        times["Apply (residual)"] = time.perf_counter() - t
        times["total"] = sum(times.values())
        return (self.form if self.written is None else self.written).mat, self.res, times

    def initial(self) -> np.ndarray:
        import ngsolve as ng

        self.gfu.Set(exact([ng.x, ng.y, ng.z][:self.d]))
        return self.gfu.vec.FV().NumPy().copy()

    @staticmethod
    def to_scipy(mat) -> sp.csr_matrix:
        val, col, ind = mat.CSR()
        return sp.csr_matrix((np.array(val), np.array(col), np.array(ind)), shape=(mat.height, mat.width))

    def penalty_of(self, u: np.ndarray):
        self.gfu.vec.FV().NumPy()[:] = u
        values = np.asarray(self.gfu(self.cell_points)).reshape(self.n_cells, self.n_q)
        return (1.0 + values**2).max(axis=1)

    def system(self, u: np.ndarray):
        J, R, _ = self.assemble(u)
        return self.to_scipy(J), R.FV().NumPy().copy()

    def values(self, u: np.ndarray, bary: np.ndarray) -> np.ndarray:
        import ngsolve as ng

        self.gfu.vec.FV().NumPy()[:] = u
        rule = self._rule(bary, np.full(len(bary), 1.0 / len(bary)))
        points = self.mesh.MapToAllElements(rule, ng.VOL)
        return np.asarray(self.gfu(points)).reshape(self.n_cells, len(bary))


# ---------------------------------------------------------------------------
# the cross-check


def peer_newton(case, tol: float = 1e-13, freeze: float = 0.1, max_iterations: int = 50) -> np.ndarray:
    """Newton from u = 0 for a peer, as polydg iterates: sigma at each iterate until the relative update is
    below ``freeze``, then frozen; at convergence sigma is taken at the solution, and the iteration goes on
    until it no longer moves.  The solution is thus the one with sigma at itself.  Residual norms in
    ``case.history``."""
    u = np.zeros(case.n_dofs)
    case.history, case.frozen = [], None
    try:
        for _ in range(max_iterations):
            J, R = case.system(u)
            case.history.append(float(np.linalg.norm(R)))
            du = spla.spsolve(J.tocsc(), -R)
            u = u + du
            update = np.linalg.norm(du) / np.linalg.norm(u)
            if case.frozen is None and update < freeze:
                case.frozen = case.penalty_of(u)
            elif update < tol:
                own = case.penalty_of(u)
                a, b = np.concatenate([np.ravel(x) for x in own]), np.concatenate([np.ravel(x) for x in case.frozen])
                if np.abs(a - b).max() <= 1e-12 * np.abs(a).max():
                    break
                case.frozen = own
        else:
            raise RuntimeError(f"{case.library}: Newton did not converge: residuals {case.history}")
        case.history.append(float(np.linalg.norm(case.system(u)[1])))
    finally:
        case.frozen = None
    return u



def jacobian_fd_error(residual, jacobian, u: np.ndarray, seed: int = 0, h: float = 1e-6) -> float:
    """|J du - (R(u + h du) - R(u - h du)) / 2h| / |J du| for a random du (sigma frozen by the caller)."""
    du = np.random.default_rng(seed).standard_normal(len(u))
    fd = (residual(u + h * du) - residual(u - h * du)) / (2 * h)
    Jdu = jacobian @ du
    return float(np.linalg.norm(Jdu - fd) / np.linalg.norm(Jdu))


def peer_fd_error(case, u: np.ndarray) -> float:
    """:func:`jacobian_fd_error` of a peer at u, its sigma frozen at u."""
    case.frozen = case.penalty_of(u)
    try:
        J = case.system(u)[0]
        return jacobian_fd_error(lambda v: case.system(v)[1], J, u)
    finally:
        case.frozen = None


def compare(d: int, n: int, p: int, penalty: float = 10.0, with_ngsolve: bool = True,
            perturb: float = CHECK_PERTURB) -> dict:
    """Newton in each library on square:n / cube:n (interior vertices moved by ``perturb`` h); the converged
    solutions compared at a rule of degree 2p + 3 on every simplex, and the Jacobians against differences
    (``fd``; NGSolve's AssembleLinearization's too, ``fd_ngsolve_ad``, which is not exact)."""
    mesh = build_polytopic_mesh(fine_mesh(d, n, perturb))
    pd, sk = PolydgNewton(mesh, p, penalty), SkfemNewton(mesh, p, penalty)
    cases = [pd, sk]
    ad = None
    if with_ngsolve and _ngsolve() is not None:
        cases.append(NgsolveNewton(mesh, p, penalty))
        ad = NgsolveNewton(mesh, p, penalty, jacobian="linearization")
    bary, w = simplex_rule(d, 2 * p + 3)
    dx = mesh.simplex_volume[:, None] * w[None, :]
    x = np.einsum("qk,ekd->deq", bary, mesh.points[mesh.simplices])
    u_exact = exact(list(x))
    out = {"d": d, "n": n, "p": p, "cells": mesh.n_simplices, "dofs": {c.library: c.n_dofs for c in cases},
           "err": {}, "diff": {}, "iterations": {}, "residuals": {}, "fd": {}}
    values = {}
    rng = np.random.default_rng(1)
    for c in cases:
        u = c.solve_newton() if c is pd else peer_newton(c)
        values[c.library] = c.values(u, bary)
        out["iterations"][c.library] = len(c.history) - 1
        out["residuals"][c.library] = c.history
        out["err"][c.library] = float(np.sqrt(np.sum(dx * (values[c.library] - u_exact) ** 2)))
        # the Jacobian against central differences of the residual, near the solution, sigma frozen
        u_near = u + 0.1 * rng.standard_normal(len(u))
        if c is pd:
            lin = pd.linearize(u_near)
            out["fd"][c.library] = jacobian_fd_error(
                lambda v: pd.linearize(v, face_penalty=lin.face_penalty).residual, lin.jacobian, u_near)
        else:
            out["fd"][c.library] = peer_fd_error(c, u_near)
            if ad is not None and c.library == "NGSolve":
                out["fd_ngsolve_ad"] = peer_fd_error(ad, u_near)
    norm = float(np.sqrt(np.sum(dx * values["polydg"] ** 2)))
    for lib, val in values.items():
        if lib != "polydg":
            out["diff"][lib] = float(np.sqrt(np.sum(dx * (val - values["polydg"]) ** 2))) / norm
    return out


def run_check(quick: bool = False) -> bool:
    """Print the cross-check table; True when the solutions agree and the Jacobians match their differences."""
    cases = [(2, 3, 1), (2, 3, 2), (3, 1, 1)] if quick else [(2, 4, 1), (2, 4, 2), (2, 8, 2), (3, 2, 1), (3, 3, 1)]
    for d in (2, 3):
        dev = check_against_builtin(d)
        print(f"{d}D: u and f written here against polydg's built-in 'quasilinear': {dev:.1e} relative")
        if dev > 1e-13:
            return False
    ng = _ngsolve() is not None
    print(f"meshes square:n / cube:n with interior vertices moved by up to {CHECK_PERTURB} h (seed 1); Newton in "
          "each library; errors and differences at a rule of degree 2p + 3 on every simplex")
    print(f"{'d':>2} {'n':>3} {'p':>2} {'dofs':>6} {'Newton its':>10} {'err polydg':>11} {'err skfem':>11} "
          f"{'|pd - sk|':>9}" + (f" {'err NGSolve':>11} {'|pd - ng|':>9}" if ng else "")
          + f" {'J-FD pd':>8} {'sk':>8}" + (f" {'ng':>8} {'ng AD':>8}" if ng else ""))
    ok = True
    for d, n, p in cases:
        r = compare(d, n, p, with_ngsolve=ng)
        good = (len(set(r["dofs"].values())) == 1 and all(v < 1e-9 for v in r["diff"].values())
                and all(v < 1e-6 for v in r["fd"].values()))
        ok &= good
        its = "/".join(str(r["iterations"][k]) for k in r["iterations"])
        print(f"{d:>2} {n:>3} {p:>2} {r['dofs']['polydg']:>6} {its:>10} {r['err']['polydg']:11.4e} "
              f"{r['err']['scikit-fem']:11.4e} {r['diff']['scikit-fem']:9.1e}"
              + (f" {r['err']['NGSolve']:11.4e} {r['diff']['NGSolve']:9.1e}" if ng else "")
              + f" {r['fd']['polydg']:8.1e} {r['fd']['scikit-fem']:8.1e}"
              + (f" {r['fd']['NGSolve']:8.1e} {r['fd_ngsolve_ad']:8.1e}" if ng else "")
              + ("" if good else "  MISMATCH"), flush=True)
    print("Newton its: polydg/scikit-fem[/NGSolve] to convergence from u = 0 (the peers: sigma frozen once the "
          "update is below 10%, then taken at the solution, as polydg does);\n|pd - sk|: ||u_polydg - u_peer||_L2 "
          "/ ||u_polydg||_L2; J-FD: |J du - central difference of R| / |J du| (h = 1e-6, sigma frozen) near the "
          "solution;\nng AD: NGSolve's AssembleLinearization, which does not linearise interior-facet integrals "
          "(not used)")
    print("cross-check " + ("passed: the same discrete solution in every library" if ok else "FAILED"))
    return ok


# ---------------------------------------------------------------------------
# timing


class PolydgSolver:
    """Each Newton step's linear solve for polydg: SciPy's splu (SuperLU, COLAMD) or polydg's iterative
    solve (GMRES + AMG)."""

    def __init__(self, kind: str, space):
        self.kind, self.space = kind, space
        self.factor_nnz = None  # splu: nnz of L + U

    def __call__(self, J, rhs):
        if self.kind == "splu":
            lu = spla.splu(J.tocsc())
            self.factor_nnz = int(lu.L.nnz + lu.U.nnz)
            return lu.solve(rhs)
        return solve(J, rhs, "iterative", space=self.space, tol=1e-10)[0]


def bench_case(d: int, p: int, n: int, newton_steps: int, rounds: int, penalty: float, solver: str,
               ngsolve: str = "both", builtin_data: bool = False, budgets: tuple = ()) -> dict:
    """Newton steps of polydg (assembly and solve), then ``rounds`` of assemblies of every library in turn
    (and of polydg with each memory budget of ``budgets``, in MB: its chunks' size)."""
    fine = fine_mesh(d, n)
    t0 = time.perf_counter()
    mesh = build_polytopic_mesh(fine)
    mesh_seconds = time.perf_counter() - t0
    pd = PolydgNewton(mesh, p, penalty, builtin_data)
    print(f"  polydg: mesh {mesh_seconds:.2f} s, plan {pd.setup_seconds:.2f} s (+ jit {pd.system.jit_seconds:.2f} s), "
          f"{pd.n_dofs} dofs", flush=True)
    sk = SkfemNewton(mesh, p, penalty)
    print(f"  scikit-fem: bases {sk.setup_seconds:.2f} s, {sk.n_dofs} dofs", flush=True)
    peers = [PolydgNewton(mesh, p, penalty, builtin_data, mb, pd.space) for mb in budgets] + [sk]
    skipped = None
    variants = {"both": ("written", "linearization"), "written": ("written",),
                "linearization": ("linearization",), "none": ()}[ngsolve]
    for jacobian in variants if _ngsolve() is not None else ():
        try:
            ng_case = NgsolveNewton(mesh, p, penalty, jacobian)
            peers.append(ng_case)
            print(f"  {ng_case.library}: space, forms, rule points {ng_case.setup_seconds:.2f} s, "
                  f"{ng_case.n_dofs} dofs", flush=True)
        except Exception as exc:  # report, and time the others
            skipped = f"NGSolve ({jacobian}) failed to build: {type(exc).__name__}: {exc}"
            print("  " + skipped)
    nnz = {}

    def assembly(case, v):
        load = _load()
        usage = {}
        (J, R, parts), wall, cpu = _measured(lambda: case.assemble(v), usage)
        nnz[case.library] = int(J.nnz if hasattr(J, "nnz") else J.nze)
        return J, R, {"load": load, "wall": wall, "cpu": cpu, **usage, **{f"part: {k}": x for k, x in parts.items()}}

    # Newton's steps in polydg: assembly and solve (the first assembly compiles or loads the kernels)
    u = np.zeros(pd.n_dofs)
    linear = PolydgSolver(solver, pd.space)
    newton, residuals = [], []
    for k in range(newton_steps):
        J, R, run = assembly(pd, u)
        residuals.append(float(np.linalg.norm(R)))
        line = f"assembly {run['wall']:.3f} s wall, {run['cpu']:.3f} s cpu"
        line += f" (jit {run['part: jit']:.1f} s)" if run["part: jit"] > 0.05 else ""
        if solver != "none":
            du, solve_wall, solve_cpu = _measured(functools.partial(linear, J, -R))
            u = u + du
            run.update({"solve wall": solve_wall, "solve cpu": solve_cpu, "factor nnz": linear.factor_nnz or 0})
            line += f"; {solver} {solve_wall:.2f} s wall, {solve_cpu:.2f} s cpu"
            line += f" (L + U: {linear.factor_nnz / 1e6:.0f}M nonzeros)" if linear.factor_nnz else ""
        del J, R
        newton.append(run)
        print(f"  Newton {k + 1}: |R| {residuals[-1]:.2e}, {line}  (load {run['load']:.1f})", flush=True)
    # the libraries' assemblies in turn, polydg at its last iterate, the peers at theirs
    iterate = {c.library: u if isinstance(c, PolydgNewton) else c.initial() for c in peers}
    iterate["polydg"] = u
    order = [pd] + peers
    runs = {c.library: [] for c in order}
    for k in range(rounds):
        for c in order[k % len(order):] + order[:k % len(order)]:  # rotate who goes first
            J, R, run = assembly(c, iterate[c.library])
            del J, R
            runs[c.library].append(run)
            print(f"  round {k + 1} {c.library:>10}: assembly {run['wall']:.3f} s wall, {run['cpu']:.3f} s cpu (sys "
                  f"{run['sys']:.3f} s, {run['faults']} page faults)  (load {run['load']:.1f})", flush=True)

    def medians(rr):
        rr = rr[1:] if len(rr) > 1 else rr  # the first: compilation, first touch, NGSolve's matrix graph
        return {key: statistics.median(r[key] for r in rr) for key in rr[0]}

    return {"d": d, "p": p, "n": n, "mesh": f"{'square' if d == 2 else 'cube'}:{n}", "cells": fine.n_cells,
            "dofs": {"polydg": pd.n_dofs, **{c.library: c.n_dofs for c in peers}}, "nnz": nnz, "solver": solver,
            "newton": newton, "newton_median": medians(newton) if newton else None, "polydg_residuals": residuals,
            "runs": runs, "median": {lib: medians(rr) for lib, rr in runs.items()},
            "jit": newton[0]["part: jit"] if newton else None,
            "setup": {"polydg mesh": mesh_seconds, "polydg plan": pd.setup_seconds, "polydg jit": pd.system.jit_seconds,
                      **{c.library: c.setup_seconds for c in peers if not isinstance(c, PolydgNewton)}},
            "skipped": skipped}


def _measured(fn, usage: dict | None = None):
    """(fn(), wall seconds, CPU seconds of this process); ``usage`` gets the system part of the CPU seconds
    ("sys") and the page faults ("faults": first touches of fresh memory)."""
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    w, c = time.perf_counter(), time.process_time()
    out = fn()
    wall, cpu = time.perf_counter() - w, time.process_time() - c
    if usage is not None:
        r1 = resource.getrusage(resource.RUSAGE_SELF)
        usage.update({"sys": r1.ru_stime - r0.ru_stime, "faults": r1.ru_minflt - r0.ru_minflt})
    return out, wall, cpu


def _loads(runs) -> str:
    loads = [r["load"] for r in (runs[1:] if len(runs) > 1 else runs)]
    return f"{min(loads):.1f}-{max(loads):.1f}"


def print_results(results: list[dict]) -> None:
    print("\npolydg's Newton steps (median of steps 2..; one thread):")
    print(f"{'d':>2} {'p':>2} {'mesh':>11} {'dofs':>9} {'assembly wall':>13} {'cpu':>7} {'solve wall':>10} {'cpu':>7} "
          f"{'solver':>9} {'jit (step 1)':>12} {'load':>9}")
    for r in results:
        m = r["newton_median"]
        if m is None:
            continue
        solve = f"{m['solve wall']:10.2f} {m['solve cpu']:7.2f}" if "solve wall" in m else f"{'':>10} {'':>7}"
        print(f"{r['d']:>2} {r['p']:>2} {r['mesh']:>11} {r['dofs']['polydg']:>9} {m['wall']:13.3f} {m['cpu']:7.3f} "
              f"{solve} {r['solver']:>9} {r['jit']:12.2f} {_loads(r['newton']):>9}")
    print("\nassembly of the Jacobian and residual at one iterate, the libraries in turn (median of rounds 2..; "
          "one thread each):")
    print(f"{'d':>2} {'p':>2} {'mesh':>11} {'dofs':>9} {'library':>11} {'nnz':>10} {'wall':>8} {'cpu':>8} "
          f"{'ratio cpu':>9} {'wall':>6} {'sys':>6} {'faults':>7} {'load':>9}")
    for r in results:
        base = r["median"]["polydg"]
        for lib, m in r["median"].items():
            print(f"{r['d']:>2} {r['p']:>2} {r['mesh']:>11} {r['dofs'][lib]:>9} {lib:>11} {r['nnz'].get(lib, 0):>10} "
                  f"{m['wall']:8.3f} {m['cpu']:8.3f} {m['cpu'] / base['cpu']:9.2f} {m['wall'] / base['wall']:6.2f} "
                  f"{m['sys']:6.3f} {m['faults']:7.0f} {_loads(r['runs'][lib]):>9}")
    print("wall / cpu: seconds (cpu: this process's CPU time, what a busy machine distorts least; sys: its system "
          "part, mostly page faults: first touches of fresh memory); ratio = library / polydg; load: the 1-minute "
          f"load average at the measurements ({os.cpu_count()} cores)")
    print("\nwhere the time goes (median wall seconds per assembly, each library's own parts):")
    for r in results:
        for lib, m in r["median"].items():
            parts = ", ".join(f"{k[6:]} {v:.3f}" for k, v in m.items() if k.startswith("part: ") and k[6:] != "jit")
            print(f"  {r['d']}D p={r['p']} {lib}: {parts}")
        print(f"  {r['d']}D p={r['p']} set-up (not timed above): "
              + ", ".join(f"{k} {v:.2f} s" for k, v in r["setup"].items()))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dim", type=int, nargs="+", choices=[2, 3], default=[2, 3])
    ap.add_argument("--degree", type=int, default=None, help="polynomial degree (default 2 in 2D, 1 in 3D)")
    ap.add_argument("--n", type=int, default=None, help="square:n / cube:n (default: about --dofs dofs)")
    ap.add_argument("--dofs", type=float, default=1e5, help="target dof count when --n is not given")
    ap.add_argument("--newton-steps", type=int, default=3, help="polydg's Newton steps (assembly and solve)")
    ap.add_argument("--rounds", type=int, default=4, help="rounds of assemblies, every library in turn")
    ap.add_argument("--solver", choices=["splu", "iterative", "none"], default="splu",
                    help="polydg's linear solve per step (default SciPy's splu)")
    ap.add_argument("--ngsolve", choices=["both", "written", "linearization", "none"], default="both",
                    help="NGSolve's Jacobian: the written-out bilinear form (exact), AssembleLinearization (not exact "
                         "on interior facets), both (default) or none")
    ap.add_argument("--builtin-data", action="store_true",
                    help="polydg evaluates f and g_D by its built-in problem's callables (the same values, more work) "
                         "instead of the NumPy expressions the peers use")
    ap.add_argument("--penalty", type=float, default=10.0, help="C_sigma of the classical penalty")
    ap.add_argument("--memory-budget", type=float, nargs="*", default=[],
                    help="also time polydg with these memory budgets (MB; its chunks' size) in the rounds")
    ap.add_argument("--check", action="store_true", help="solve on small meshes in every library and compare")
    ap.add_argument("--quick", action="store_true", help="with --check: the smallest meshes only")
    ap.add_argument("--json", help="write the figures to this file")
    args = ap.parse_args(argv)

    import numba

    numba.set_num_threads(1)
    if _skfem() is None:
        print("scikit-fem is not installed: pip install -e '.[bench]'", file=sys.stderr)
        return 2
    import skfem

    ng = _ngsolve()
    print(f"polydg vs scikit-fem {skfem.__version__}" + (f" and NGSolve {ng.__version__}" if ng else "")
          + f", one thread each (numba threads {numba.get_num_threads()}, OMP_NUM_THREADS="
          f"{os.environ.get('OMP_NUM_THREADS')}), {os.cpu_count()} cores, load {_load():.1f}")
    if ng is None:
        print("NGSolve is not importable: skipped (pip install -e '.[bench]' to include it)")
    if args.check:
        return 0 if run_check(args.quick) else 1
    if args.rounds < 1 or args.newton_steps < 0:
        ap.error("--rounds must be >= 1 and --newton-steps >= 0")
    results = []
    for d in args.dim:
        p = args.degree or DEFAULT_DEGREE[d]
        n = args.n or size_for(d, p, args.dofs)
        print(f"quasilinear {'square' if d == 2 else 'cube'}:{n} p = {p}:", flush=True)
        results.append(bench_case(d, p, n, args.newton_steps, args.rounds, args.penalty, args.solver, args.ngsolve,
                                  args.builtin_data, tuple(args.memory_budget)))
    print_results(results)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"cores": os.cpu_count(), "threads": 1, "results": results}, fh, indent=1,
                      default=lambda o: o.item() if hasattr(o, "item") else str(o))
    return 0


if __name__ == "__main__":
    sys.exit(main())
