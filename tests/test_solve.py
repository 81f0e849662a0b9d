"""Solves and error norms."""

import re

import numpy as np
import pytest

import polydg.solve.preconditioners as preconditioners
from polydg.assembly import assemble
from polydg.errors import OptionError
from polydg.mesh import from_spec
from polydg.partition import agglomerate
from polydg.problem import Problem, builtin_problem
from polydg.solve import SolverError, element_means, errors, solve
from polydg.space import DGSpace

MESH = agglomerate(from_spec("square:12:perturb=0.2"), 20)
#: enough elements (128) for pyamg to build more than one level
AMG_MESH = agglomerate(from_spec("square:16"), 128)


@pytest.mark.parametrize("name, solver", [("poisson", "cg"), ("paper-2d", "gmres")])
def test_direct_and_iterative_agree(name, solver):
    space = DGSpace(MESH, 2)
    result = assemble(space, builtin_problem(name, 2))
    x_direct, info_d = solve(result.matrix, result.rhs)
    x_iter, info_i = solve(result.matrix, result.rhs, "iterative", block_sizes=space.element_dofs)
    assert info_i["solver"].startswith(solver)
    assert info_i["residual"] <= 1e-9 and info_d["residual"] <= 1e-12
    assert np.linalg.norm(x_iter - x_direct) <= 1e-7 * np.linalg.norm(x_direct)


def _system(name, degree):
    space = DGSpace(AMG_MESH, degree)
    result = assemble(space, builtin_problem(name, 2))
    x_direct, _ = solve(result.matrix, result.rhs)
    return space, result, x_direct


def _assert_same_solution(x, info, x_direct, tol=1e-10):
    assert info["residual"] <= tol
    assert info["iterations"] >= 1 and info["setup_seconds"] >= 0 and info["krylov_seconds"] >= 0
    assert info["seconds"] >= info["setup_seconds"]
    # the direct solution to the Krylov tolerance times a modest condition number
    assert np.linalg.norm(x - x_direct) <= 1e4 * tol * np.linalg.norm(x_direct)


@pytest.mark.parametrize("name, krylov", [("poisson", "cg"), ("paper-2d", "gmres(50)")])
@pytest.mark.parametrize("hint", ["space", "block_sizes", "none"])
def test_amg_reaches_the_direct_solution(name, krylov, hint):
    pytest.importorskip("pyamg")
    space, result, x_direct = _system(name, 2)
    kwargs = {"space": {"space": space}, "block_sizes": {"block_sizes": space.element_dofs}, "none": {}}[hint]
    x, info = solve(result.matrix, result.rhs, "iterative", preconditioner="amg", **kwargs)
    assert info["preconditioner"] == "amg" and info["solver"] == f"{krylov}+amg"
    assert "fallback" not in info  # the symmetric preconditioner keeps CG going
    assert int(re.search(r"(\d+) levels", info["amg"]).group(1)) >= 2  # the V-cycle ran, not only a coarse solve
    expected = {"space": "degree<=1", "block_sizes": "element-constant", "none": "on the matrix"}[hint]
    assert expected in info["amg"]
    _assert_same_solution(x, info, x_direct)
    if hint != "none":  # with the element blocks it does precondition
        _, info_bj = solve(result.matrix, result.rhs, "iterative", preconditioner="block-jacobi",
                           block_sizes=space.element_dofs)
        assert info["iterations"] < info_bj["iterations"] / 2


@pytest.mark.parametrize("name", ["poisson", "paper-2d"])
def test_amg_with_mixed_degrees(name):
    pytest.importorskip("pyamg")
    degree = np.random.default_rng(1).integers(0, 4, size=AMG_MESH.n_elements)  # p = 0 elements included
    space = DGSpace(AMG_MESH, degree)
    result = assemble(space, builtin_problem(name, 2))
    x_direct, _ = solve(result.matrix, result.rhs)
    x, info = solve(result.matrix, result.rhs, "iterative", preconditioner="amg", space=space)
    assert info["preconditioner"] == "amg"
    _assert_same_solution(x, info, x_direct)


@pytest.mark.parametrize("name, small, large", [("poisson", "cg+amg", "cg+amg"),
                                                 ("paper-2d", "gmres(50)+ilu", "gmres(50)+amg")])
def test_auto_with_pyamg(monkeypatch, name, small, large):
    pytest.importorskip("pyamg")
    space, result, x_direct = _system(name, 1)
    x, info = solve(result.matrix, result.rhs, "iterative", space=space)
    assert info["solver"] == small  # a small nonsymmetric system: ILU
    _assert_same_solution(x, info, x_direct)
    monkeypatch.setattr(preconditioners, "ILU_BELOW", 100)  # as if it were large
    x, info = solve(result.matrix, result.rhs, "iterative", space=space)
    assert info["solver"] == large
    _assert_same_solution(x, info, x_direct)
    monkeypatch.setattr(preconditioners, "ILU_BELOW", 10**9)
    monkeypatch.setattr(preconditioners, "ilu", lambda A: None)  # a singular pivot: auto goes on with AMG
    x, info = solve(result.matrix, result.rhs, "iterative", space=space)
    assert info["solver"] == large
    _assert_same_solution(x, info, x_direct)


@pytest.mark.parametrize("name, solver", [("poisson", "cg+block-jacobi"), ("paper-2d", "gmres(50)+ilu")])
def test_without_pyamg_auto_falls_back(monkeypatch, name, solver):
    monkeypatch.setattr(preconditioners, "pyamg_module", lambda: None)
    space, result, x_direct = _system(name, 2)
    x, info = solve(result.matrix, result.rhs, "iterative", space=space)
    assert info["solver"] == solver and info["preconditioner"] == solver.split("+")[1]
    assert "amg" not in info
    _assert_same_solution(x, info, x_direct)
    with pytest.raises(OptionError, match="needs pyamg"):
        solve(result.matrix, result.rhs, "iterative", preconditioner="amg", space=space)


@pytest.mark.parametrize("name", ["poisson", "paper-2d"])
@pytest.mark.parametrize("preconditioner, blocks", [("block-jacobi", True), ("block-jacobi", False),
                                                    ("jacobi", True), ("ilu", True)])
def test_explicit_preconditioners(name, preconditioner, blocks):
    space, result, x_direct = _system(name, 1)
    kwargs = {"block_sizes": space.element_dofs} if blocks else {}
    x, info = solve(result.matrix, result.rhs, "iterative", preconditioner=preconditioner, **kwargs)
    used = "jacobi" if preconditioner == "block-jacobi" and not blocks else preconditioner
    assert info["preconditioner"] == used and info["solver"].endswith("+" + used)
    _assert_same_solution(x, info, x_direct)


def test_bad_preconditioner_name():
    space, result, _ = _system("poisson", 1)
    for method in ("iterative", "direct"):
        with pytest.raises(OptionError, match=r"unknown preconditioner 'multigrid'.*auto, amg, block-jacobi"):
            solve(result.matrix, result.rhs, method, preconditioner="multigrid")


def test_iterative_failure_is_reported():
    space = DGSpace(MESH, 2)
    result = assemble(space, builtin_problem("paper-2d", 2))
    with pytest.raises(SolverError, match="did not converge"):
        solve(result.matrix, result.rhs, "iterative", maxiter=1)


def test_errors_without_exact_gradient_and_element_means():
    base = builtin_problem("poisson", 2)
    problem = Problem(name="no-gradient", diffusion=1.0, source=base.source, dirichlet=base.dirichlet,
                      exact=base.exact)
    space = DGSpace(MESH, 2)
    result = assemble(space, problem)
    x, _ = solve(result.matrix, result.rhs)
    err = errors(space, problem, x)
    assert set(err) == {"l2"} and err["l2"] < 2e-2


def test_element_means_are_the_same_in_many_chunks_as_in_one():
    """Mixed degrees (a batch per degree, its elements not contiguous) and a budget of one sub-simplex per
    chunk, split inside elements: the means of one chunk per degree to round-off (the sums grouped by
    chunk), and the quadrature's."""
    degree = np.arange(MESH.n_elements) % 3 + 1
    space = DGSpace(MESH, degree)
    u = np.random.default_rng(5).standard_normal(space.n_dofs)
    one_chunk = element_means(space, u)
    np.testing.assert_allclose(element_means(space, u, memory_budget_mb=1e-9), one_chunk, rtol=0,
                               atol=1e-14 * np.abs(one_chunk).max())
    # u = 1 on every element: the constant Legendre function is 1 / sqrt(|box|), coefficient sqrt(|box|)
    box = np.prod(MESH.bbox_max - MESH.bbox_min, axis=1)
    ones = np.zeros(space.n_dofs)
    ones[space.dof_offsets[:-1]] = np.sqrt(box)
    np.testing.assert_allclose(element_means(space, ones, memory_budget_mb=1e-9), 1.0, rtol=1e-12)


def test_element_means_of_a_reproduced_linear_solution():
    from polydg.problem import polynomial_problem

    problem = polynomial_problem(2, 1, "diffusion", seed=3)
    space = DGSpace(MESH, 1)
    result = assemble(space, problem)
    x, _ = solve(result.matrix, result.rhs)
    # for a linear u the mean over K is u at K's centroid
    centroid_s = MESH.points[MESH.simplices].mean(axis=1) * MESH.simplex_volume[:, None]
    centroid = np.zeros((MESH.n_elements, 2))
    np.add.at(centroid, MESH.simplex_element, centroid_s)
    centroid /= MESH.measure[:, None]
    assert np.allclose(element_means(space, x), problem.exact_at(centroid), rtol=1e-10, atol=1e-10)
