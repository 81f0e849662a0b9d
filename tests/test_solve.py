"""Solves and error norms."""

import numpy as np
import pytest

from polydg.assembly import assemble
from polydg.mesh import from_spec
from polydg.partition import agglomerate
from polydg.problem import Problem, builtin_problem
from polydg.solve import SolverError, element_means, errors, solve
from polydg.space import DGSpace

MESH = agglomerate(from_spec("square:12:perturb=0.2"), 20)


@pytest.mark.parametrize("name, solver", [("poisson", "cg"), ("paper-2d", "gmres")])
def test_direct_and_iterative_agree(name, solver):
    space = DGSpace(MESH, 2)
    result = assemble(space, builtin_problem(name, 2))
    x_direct, info_d = solve(result.matrix, result.rhs)
    x_iter, info_i = solve(result.matrix, result.rhs, "iterative", block_sizes=space.element_dofs)
    assert info_i["solver"].startswith(solver)
    assert info_i["residual"] <= 1e-9 and info_d["residual"] <= 1e-12
    assert np.linalg.norm(x_iter - x_direct) <= 1e-7 * np.linalg.norm(x_direct)


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
