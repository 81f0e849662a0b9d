"""Space-time dG on slabs (polydg/spacetime): the slab mesh, exactness, dG in time, convergence, the CLI."""

import dataclasses
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from polydg.errors import OptionError, ProblemError
from polydg.mesh import from_spec
from polydg.partition import agglomerate
from polydg.problem import Problem, builtin_problem
from polydg.spacetime import march, shifted_slab, slab_mesh, slab_problem, time_plane_rule, trace_values

from .conftest import TEST_BACKEND


@pytest.fixture(scope="module")
def space_mesh():
    return agglomerate(from_spec("square:6"), 8)


@pytest.fixture(scope="module")
def cube_mesh():
    """The 3D + 1 tests' one spatial mesh: 48 tetrahedra in 4 elements (4D slabs of 192 pentatopes)."""
    return agglomerate(from_spec("cube:2"), 4)


def at_time(x, t):
    return np.column_stack([x, np.full(len(x), t)])


# ---------------------------------------------------------------------------
# the slab mesh


def _fine_facets_match(space_mesh) -> bool:
    """Whether a slab's fine mesh tells the polytopic build that its facets match (so that the search for
    unmatched ones, a hanging-node check, is skipped), while a mesh read or generated still gets it."""
    import polydg.mesh.polytopic as polytopic
    from polydg.mesh import build_polytopic_mesh, from_spec

    searched = []
    real = polytopic._check_unmatched_interior
    polytopic._check_unmatched_interior = lambda *args: searched.append(1) or real(*args)
    try:
        slab_mesh(space_mesh, 0.0, 1.0)
        slab_mesh(space_mesh, 0.0, 1.0, local_steps=2)
        skipped = not searched
        build_polytopic_mesh(from_spec("square:2"))
    finally:
        polytopic._check_unmatched_interior = real
    return skipped and searched == [1]


def test_slab_mesh_is_the_prisms_cut_conformingly(space_mesh):
    t0, t1 = 0.2, 0.7
    slab = slab_mesh(space_mesh, t0, t1)  # its facets match by construction: no search for unmatched ones
    tau = t1 - t0
    assert _fine_facets_match(space_mesh)
    # ... and none is unmatched: the boundary is the bottom and top (area 1 each) and the sides (perimeter 4 x tau)
    normal, area = slab.face_normal[slab.boundary_faces], slab.face_measure[slab.boundary_faces]
    assert area[normal[:, 2] == -1].sum() == pytest.approx(1.0, rel=1e-13)
    assert area[normal[:, 2] == 1].sum() == pytest.approx(1.0, rel=1e-13)
    assert area[normal[:, 2] == 0].sum() == pytest.approx(4 * tau, rel=1e-13)
    assert np.isin(np.abs(normal[:, 2]), [0.0, 1.0]).all()
    assert slab.dim == 3
    assert slab.n_elements == space_mesh.n_elements
    assert slab.n_simplices == 3 * space_mesh.n_simplices
    assert slab.simplex_volume.min() > 0
    assert slab.simplex_volume.sum() == pytest.approx(space_mesh.measure.sum() * tau, rel=1e-13)
    np.testing.assert_allclose(slab.measure, space_mesh.measure * tau, rtol=1e-13)
    np.testing.assert_allclose(slab.bbox_min[:, :2], space_mesh.bbox_min)
    np.testing.assert_allclose(slab.bbox_min[:, 2], t0)
    np.testing.assert_allclose(slab.bbox_max[:, 2], t1)
    # conformity: the boundary is exactly bottom + top (one triangle per sub-triangle) and two
    # triangles per spatial boundary edge; a mismatched diagonal would leave extra facets there
    normal = slab.face_normal[slab.boundary_faces]
    bottom, top = normal[:, 2] == -1.0, normal[:, 2] == 1.0
    assert bottom.sum() == top.sum() == space_mesh.n_simplices
    assert (~bottom & ~top).sum() == 2 * space_mesh.n_boundary_faces
    assert np.all(normal[~bottom & ~top, 2] == 0.0)
    # interior faces are vertical: the slab is one layer of prisms
    assert np.all(slab.face_normal[: slab.n_interior_faces, 2] == 0.0)
    assert slab.n_interior_faces == 2 * space_mesh.n_interior_faces


def test_shifted_slab_is_the_slab_built_there(space_mesh):
    a = shifted_slab(slab_mesh(space_mesh, 0.0, 0.25), 0.5)
    b = slab_mesh(space_mesh, 0.5, 0.75)
    for name in ("points", "bbox_min", "bbox_max", "simplex_volume", "face_measure", "face_normal", "measure"):
        np.testing.assert_allclose(getattr(a, name), getattr(b, name), atol=1e-15, err_msg=name)
    np.testing.assert_array_equal(a.simplices, b.simplices)


def test_slab_mesh_refuses_4d_and_empty_intervals(space_mesh, cube_mesh):
    from polydg.errors import MeshError

    with pytest.raises(MeshError, match="over 2D and 3D meshes"):
        slab_mesh(slab_mesh(cube_mesh, 0, 1), 0, 1)
    with pytest.raises(MeshError, match="t1 > t0"):
        slab_mesh(space_mesh, 1.0, 1.0)


# ---------------------------------------------------------------------------
# the slab problem


def test_slab_problem_is_diag_a_0_and_w_1_with_zero_bottom_data():
    w = np.array([0.5, -1.0])
    st = Problem("st", diffusion=lambda y: 1.0 + y[:, 0], advection=w, reaction=2.0, dirichlet=lambda y: 1.0 + y[:, 2],
                 space_time=True, initial=0.0)
    slab = slab_problem(st, 2, 0.5, 1.0)
    y = np.array([[0.1, 0.2, 0.5], [0.3, 0.4, 0.75]])
    A = slab.diffusion_at(y)
    np.testing.assert_allclose(A[0], np.diag([1.1, 1.1, 0.0]))
    np.testing.assert_allclose(A[1], np.diag([1.3, 1.3, 0.0]))
    np.testing.assert_array_equal(slab.advection_at(y), [[0.5, -1.0, 1.0]])  # a constant stays a constant
    np.testing.assert_allclose(slab.dirichlet_at(y), [0.0, 1.75])  # bottom: 0 (its data is the bottom load)
    assert slab.is_constant("advection") and slab.is_constant("reaction")
    const = slab_problem(Problem("c", diffusion=0.1, space_time=True, initial=1.0), 2, 0.0, 1.0)
    assert const.is_constant("diffusion")
    np.testing.assert_allclose(const.diffusion_at(y)[0], np.diag([0.1, 0.1, 0.0]))


def test_slab_problem_refuses_steady_problems_and_missing_initial_values():
    with pytest.raises(ProblemError, match="steady"):
        slab_problem(builtin_problem("poisson", 2), 2, 0, 1)
    with pytest.raises(ProblemError, match="no initial value"):
        slab_problem(Problem("x", diffusion=1.0, space_time=True), 2, 0, 1)


# ---------------------------------------------------------------------------
# exactness: polynomials of total degree <= p in (x, t) are reproduced


def _u1(y):
    x, z, t = y.T
    return 1.0 + x - 2.0 * z + 3.0 * t


def _u2(y):
    x, z, t = y.T
    return 1.0 + x - 0.5 * z + 0.3 * t + x * x - x * z + 0.7 * z * t + 0.4 * t * t


def _grad2(y):
    x, z, t = y.T
    return np.column_stack([1.0 + 2.0 * x - z, -0.5 - x + 0.7 * t]), 0.3 + 0.7 * z + 0.8 * t


def _grad1(y):
    return np.tile([1.0, -2.0], (len(y), 1)), np.full(len(y), 3.0)


@pytest.mark.parametrize("p, u, grad, laplacian", [(1, _u1, _grad1, 0.0), (2, _u2, _grad2, 2.0)])
@pytest.mark.parametrize("kind", ["diffusion", "transport"])
def test_polynomials_of_degree_p_are_reproduced(space_mesh, p, u, grad, laplacian, kind):
    w = np.array([1.0, 0.5])
    if kind == "diffusion":  # u_t - Laplace u + u = f
        coefficients = dict(diffusion=1.0, reaction=1.0)
        source = lambda y: grad(y)[1] - laplacian + u(y)  # noqa: E731
    else:  # u_t + w . grad u = f, inflow data on x = 0 and y = 0
        coefficients = dict(advection=w)
        source = lambda y: grad(y)[1] + grad(y)[0] @ w  # noqa: E731
    problem = Problem(f"poly-{kind}", source=source, dirichlet=u, exact=u, space_time=True,
                      initial=lambda x: u(at_time(x, 0.0)), **coefficients)
    result = march(space_mesh, problem, p, n_slabs=3, final_time=0.6)
    rule = time_plane_rule(space_mesh, 2 * p + 2)
    norm = np.sqrt(rule.weights @ u(rule.at(0.6)) ** 2)
    assert result.errors["l2"] / norm < 1e-9
    assert result.errors["l2_l2"] < 1e-9


def test_mixed_degrees_reproduce_a_linear_solution_over_uneven_slabs(space_mesh):
    degree = np.random.default_rng(3).integers(1, 3, size=space_mesh.n_elements)
    assert len(np.unique(degree)) == 2
    problem = Problem("linear", diffusion=1.0, reaction=1.0, source=lambda y: 3.0 + _u1(y), dirichlet=_u1, exact=_u1,
                      space_time=True, initial=lambda x: _u1(at_time(x, 0.0)))
    result = march(space_mesh, problem, degree, [0.0, 0.1, 0.35, 0.4])
    assert result.errors["l2"] < 1e-9 and result.errors["l2_l2"] < 1e-9
    assert result.info["factorisations"] == 3  # three slab lengths, three matrices


# ---------------------------------------------------------------------------
# with a = 0, w = 0 each element carries the dG-in-time solution of u' + c u = 0


def _ode_final_value(space_mesh, degree, nodes, c, autonomous=False):
    problem = Problem("ode", reaction=c, space_time=True, initial=1.0)
    result = march(space_mesh, problem, degree, nodes, autonomous=autonomous)
    rule = time_plane_rule(space_mesh, 2)
    return trace_values(result.space, result.solution, rule, nodes[-1]), result


@pytest.mark.parametrize("autonomous", [False, True])
def test_degree_0_is_backward_euler(space_mesh, autonomous):
    c, nodes = 2.0, np.linspace(0.0, 1.0, 5)
    values, result = _ode_final_value(space_mesh, 0, nodes, c, autonomous)
    np.testing.assert_allclose(values, np.prod(1.0 / (1.0 + c * np.diff(nodes))), rtol=1e-12)
    assert result.info["factorisations"] == 1
    assert result.info["reused_assemblies"] == (3 if autonomous else 0)


def test_degree_1_is_radau_iia_at_the_slab_ends(space_mesh):
    c, nodes = 3.0, np.array([0.0, 0.2, 0.3, 0.6, 1.0])
    z = c * np.diff(nodes)
    expected = np.prod((1.0 - z / 3.0) / (1.0 + 2.0 * z / 3.0 + z**2 / 6.0))
    values, _ = _ode_final_value(space_mesh, 1, nodes, c)
    np.testing.assert_allclose(values, expected, rtol=1e-12)


def test_a_basis_table_of_some_columns_is_those_columns_of_the_whole_table(space_mesh):
    from polydg.space import DGSpace
    from polydg.spacetime.slab_state import basis_matrix

    mesh = slab_mesh(space_mesh, 0.0, 0.5)
    space = DGSpace(mesh, np.random.default_rng(3).integers(1, 3, mesh.n_elements))
    rng = np.random.default_rng(4)
    elements = np.sort(rng.integers(0, mesh.n_elements, 50))
    y = mesh.bbox_min[elements] + rng.uniform(0, 1, (50, 3)) * (mesh.bbox_max - mesh.bbox_min)[elements]
    whole = basis_matrix(space, y, elements)
    assert whole.shape == (50, space.n_dofs) and np.array_equal(np.diff(whole.indptr), space.element_dofs[elements])
    a, b = int(space.dof_offsets[elements[0]]), int(space.dof_offsets[elements[-1] + 1])
    part = basis_matrix(space, y, elements, slice(a, b))
    assert part.shape == (50, b - a) and np.array_equal(part.toarray(), whole.toarray()[:, a:b])
    assert basis_matrix(space, y[:0], elements[:0]).shape == (0, space.n_dofs)  # no point: an empty table


@pytest.mark.parametrize("mesh_name,problem_name,n_slabs,steps", [("space_mesh", "paper-2d1", 3, "1:3"),
                                                                   ("cube_mesh", "paper-3d1", 2, None)])
def test_a_tiny_memory_budget_marches_chunk_by_chunk_to_the_same_solution(request, mesh_name, problem_name,
                                                                          n_slabs, steps, monkeypatch):
    """The slab state's tables made and applied a few elements at a time, again on every slab (a budget
    too small to keep them), give the default march's trace and solution bit for bit and its error over
    the slabs, summed chunk by chunk, to round-off."""
    from polydg.spacetime.slab import random_local_steps
    from polydg.spacetime.slab_state import SlabState

    mesh, problem = request.getfixturevalue(mesh_name), builtin_problem(problem_name)
    rng = np.random.default_rng(5)
    degree = rng.integers(1, 3, size=mesh.n_elements) if steps else 1  # mixed degrees: one tabulation each
    steps = random_local_steps(mesh.n_elements, 1, 3, seed=2) if steps else None
    tables = []
    tabulate = SlabState.tabulate
    monkeypatch.setattr(SlabState, "tabulate", lambda self, *args: (
        tabulate(self, *args), tables.append((len(self.chunks), self.kept is not None)))[0])
    default = march(mesh, problem, degree, n_slabs=n_slabs, final_time=0.2, local_steps=steps)
    tiny = march(mesh, problem, degree, n_slabs=n_slabs, final_time=0.2, local_steps=steps, memory_budget_mb=0.01)
    assert tables[0] == (1, True) and tables[1][0] > 3 and not tables[1][1]  # one kept chunk; many, made per use
    np.testing.assert_array_equal(tiny.solution, default.solution)
    assert tiny.errors["l2"] == default.errors["l2"]  # from the carried trace
    assert tiny.errors["l2_l2"] == pytest.approx(default.errors["l2_l2"], rel=1e-13)


# ---------------------------------------------------------------------------
# convergence on the paper's problem, tau proportional to h


@pytest.mark.parametrize("p, slabs_per_n", [(1, 1.0), (2, 0.25)])
def test_paper_2d1_converges_at_rate_p_plus_1(p, slabs_per_n):
    problem = builtin_problem("paper-2d1")
    l2 = []
    for n in (8, 16, 32):
        mesh = agglomerate(from_spec(f"square:{n}"), n * n // 2)  # about 4 triangles per element
        result = march(mesh, problem, p, n_slabs=int(n * slabs_per_n), final_time=0.5)
        l2.append(result.errors["l2"])
    rates = np.log2(np.array(l2[:-1]) / np.array(l2[1:]))
    assert rates.min() >= p + 0.8, (l2, rates)


def test_paper_2d1_source_solves_the_pde():
    problem = builtin_problem("paper-2d1")
    assert problem.space_time and problem.dim == 2
    y = np.random.default_rng(0).uniform(0.05, 0.95, (20, 3))
    h, u = 1e-4, problem.exact
    e = np.eye(3) * h
    d2 = [(u(y + e[k]) - 2 * u(y) + u(y - e[k])) / h**2 for k in range(2)]
    residual = (u(y + e[2]) - u(y - e[2])) / (2 * h) - d2[0] - d2[1] + u(y)
    np.testing.assert_allclose(problem.source(y), residual, atol=1e-5)
    np.testing.assert_allclose(problem.initial(y[:, :2]), u(at_time(y[:, :2], 0.0)))


def test_iterative_and_direct_marches_agree(space_mesh):
    problem = builtin_problem("paper-2d1")
    direct = march(space_mesh, problem, 1, n_slabs=2, final_time=0.2)
    iterative = march(space_mesh, problem, 1, n_slabs=2, final_time=0.2, method="iterative")
    np.testing.assert_allclose(iterative.solution, direct.solution, rtol=1e-7, atol=1e-9)
    # the result reads in one line: slabs, interval, dofs and the errors, not the arrays
    assert repr(direct) == (f"MarchResult(2 slabs over [0, 0.2], {direct.space.n_dofs} dofs per slab, "
                            f"l2 {direct.errors['l2']:.4e}, l2_l2 {direct.errors['l2_l2']:.4e})")


@pytest.mark.parametrize("reaction, factorisations, assembled", [
    (1.0, 1, "none"),                          # constant: known to be the same matrix (and load)
    (lambda y: 1.0 + y[:, 0], 1, "load"),      # a callable free of t: found to be the same matrix
    (lambda y: 1.0 + y[:, 2], 3, "matrix+load"),  # depends on t: a new matrix per slab
])
def test_the_factorisation_is_reused_while_the_matrix_is_unchanged(space_mesh, reaction, factorisations, assembled):
    problem = Problem("r", diffusion=1.0, reaction=reaction, source=1.0, space_time=True, initial=0.0)
    result = march(space_mesh, problem, 1, n_slabs=3, final_time=0.3)
    assert result.info["factorisations"] == factorisations
    if assembled == "load" and TEST_BACKEND != "numpy":
        assembled = "matrix+load"  # a GPU march fingerprints no callable (march._KeptMatrix): it assembles again
    assert result.info["assembled_per_slab"] == ["matrix+load"] + [assembled] * 2


def test_march_refuses_bad_time_input(space_mesh):
    problem = builtin_problem("paper-2d1")
    with pytest.raises(OptionError, match="positive integer"):
        march(space_mesh, problem, 1, n_slabs=0, final_time=1.0)
    with pytest.raises(OptionError, match="final time"):
        march(space_mesh, problem, 1, n_slabs=2, final_time=0.0)
    with pytest.raises(OptionError, match="increasing"):
        march(space_mesh, problem, 1, [0.0, 0.5, 0.5])


# ---------------------------------------------------------------------------
# the command line


def cli(*args):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-m", "polydg.assemble", *map(str, args)], capture_output=True,
                          text=True, env=env, timeout=300)


def test_cli_marches_and_writes_the_slab_keys(tmp_path):
    path = tmp_path / "run.json"
    r = cli("--problem", "paper-2d1", "--time-slabs", 3, "--final-time", 0.3, "--mesh", "square:8",
            "--agglomerate", 16, "--degree", 1, "--json", path)
    assert r.returncode == 0, r.stderr
    assert "slab 3/3" in r.stderr and "3 slabs of (0, 0.3)" in r.stdout and "errors: l2" in r.stdout
    assert "s (the slabs' wall time with their meshes and errors, the assemblies' compilation apart)" in r.stdout
    s = json.loads(path.read_text())
    assert s["slabs"] == 3 and s["final_time"] == 0.3 and s["dimension"] == 3
    assert len(s["timings_per_slab"]) == 3
    for key in ("total_assembly", "solve", "trace", "slab"):
        assert key in s["timings_all_slabs"] and key in s["timings_per_slab"][0]
    assert set(s["errors"]) == {"l2", "l2_l2"} and s["errors"]["l2"] < 0.1
    # paper-2d1's a and c are constants: the matrix of slab 1 is kept, slabs 2 and 3 assemble their load
    assert s["assembled_per_slab"] == ["matrix+load", "load", "load"] and s["table_slab"] == 1
    assert "(assembled: load, factorisation reused)" in r.stderr and "the load alone in 2" in r.stdout
    assert s["solver"]["slab"] == 3 and s["solver"]["seconds"] == s["timings_per_slab"][2]["solve"]  # the last's


@pytest.mark.parametrize("args, message", [
    (("--problem", "paper-2d1"), "give --time-slabs"),
    (("--problem", "paper-2d1", "--time-slabs", 0), "--time-slabs must be a positive integer"),
    (("--problem", "paper-2d1", "--time-slabs", 2, "--final-time", -1),
     "--final-time must be a positive finite number, got -1.0"),
    (("--problem", "poisson", "--time-slabs", 2), "is steady"),
    (("--problem", "poisson", "--space-time-basis", "PQ"), "--space-time-basis is for space-time"),
    (("--problem", "poisson", "--local-steps", 2), "--local-steps is for space-time"),
    (("--problem", "paper-2d1", "--time-slabs", 2, "--local-steps", 0), "local steps must be >= 1"),
    (("--problem", "paper-2d1", "--time-slabs", 2, "--local-steps", "3:2"), "expected M1 <= M2"),
    (("--problem", "paper-2d1", "--time-slabs", 2, "--local-steps", "x"), "expected an integer M"),
    (("--problem", "paper-2d1", "--time-slabs", 2, "--space-time-basis", "Q"), "invalid choice"),
    (("--problem", "NOINIT", "--time-slabs", 2), "has no initial value"),
])
def test_cli_bad_space_time_input_is_one_line_and_exit_2(tmp_path, args, message):
    file = tmp_path / "noinit.py"
    file.write_text("from polydg.problem import Problem\nproblem = Problem('noinit', diffusion=1.0, space_time=True)\n")
    args = [str(file) if a == "NOINIT" else a for a in args]
    r = cli("--mesh", "square:4", *args)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and lines[0].startswith("polydg.assemble: error:")


# ---------------------------------------------------------------------------
# PQ_p: degree p in t times total degree p in x


def _pq2(y):  # in PQ_2 (x^2 t^2, x z t^2), not in P_2
    x, z, t = y.T
    return 1.0 + x - 0.5 * z + 0.3 * t + x * x * t * t - x * z * t + 0.7 * z * t * t + x * z * t * t


def _pq2_parts(y):  # (u_t, grad_x u, Laplace_x u)
    x, z, t = y.T
    ut = 0.3 + 2.0 * x * x * t - x * z + 1.4 * z * t + 2.0 * x * z * t
    gx = np.column_stack([1.0 + 2.0 * x * t * t - z * t + z * t * t, -0.5 - x * t + 0.7 * t * t + x * t * t])
    return ut, gx, 2.0 * t * t


def _pq1(y):  # in PQ_1 (x t, z t), not in P_1
    x, z, t = y.T
    return 1.0 + x - 2.0 * z + 3.0 * t + 2.0 * x * t - z * t


def _pq1_parts(y):
    x, z, t = y.T
    return 3.0 + 2.0 * x - z, np.column_stack([1.0 + 2.0 * t, -2.0 - t]), 0.0


def _polynomial_problem(kind, u, parts):
    w = np.array([1.0, 0.5])
    if kind == "diffusion":  # u_t - Laplace u + u = f
        coefficients = dict(diffusion=1.0, reaction=1.0)
        source = lambda y: parts(y)[0] - parts(y)[2] + u(y)  # noqa: E731
    else:  # u_t + w . grad u = f, inflow data on x = 0 and y = 0
        coefficients = dict(advection=w)
        source = lambda y: parts(y)[0] + parts(y)[1] @ w  # noqa: E731
    return Problem(f"poly-{kind}", source=source, dirichlet=u, exact=u, space_time=True,
                   initial=lambda x: u(at_time(x, 0.0)), **coefficients)


def _relative_l2_at(mesh, u, t, p):
    rule = time_plane_rule(mesh, 2 * p + 2)
    return np.sqrt(rule.weights @ u(rule.at(t)) ** 2)


@pytest.mark.parametrize("degree, u, parts, kind", [
    (2, _pq2, _pq2_parts, "diffusion"),
    ("1:2", _pq1, _pq1_parts, "transport"),   # mixed degrees: the solution lies in PQ_1
])
def test_pq_reproduces_what_p_cannot(space_mesh, degree, u, parts, kind):
    if degree == "1:2":
        degree = np.random.default_rng(5).integers(1, 3, size=space_mesh.n_elements)
        assert len(np.unique(degree)) == 2
    problem = _polynomial_problem(kind, u, parts)
    norm = _relative_l2_at(space_mesh, u, 0.6, 2)
    pq = march(space_mesh, problem, degree, n_slabs=3, final_time=0.6, space_time_basis="PQ")
    assert pq.space.basis == "PQ"
    assert pq.errors["l2"] / norm < 1e-9 and pq.errors["l2_l2"] < 1e-9
    p = march(space_mesh, problem, degree, n_slabs=3, final_time=0.6)  # the same data in P_p: not exact
    assert p.errors["l2"] / norm > 1e-6
    assert pq.space.n_dofs > p.space.n_dofs


def test_pq_index_set_and_its_moment_tables():
    from polydg.assembly.moments import moment_tables
    from polydg.basis import basis_size, multi_indices, pq_multi_indices

    for p in range(4):
        table = pq_multi_indices(p, 3)
        x, t = table[:, :2].sum(axis=1), table[:, 2]
        assert len(table) == basis_size(p, 3, "PQ") == (p + 1) * (p + 1) * (p + 2) // 2
        assert x.max() <= p and t.max() <= p and len(np.unique(table, axis=0)) == len(table)
        np.testing.assert_array_equal(pq_multi_indices(p + 1, 3)[: len(table)], table)  # hierarchical
        assert table[-1].max() == p  # the kernels read the largest 1D degree off the last row
        if p >= 1:
            np.testing.assert_array_equal(table[:4], multi_indices(1, 3))  # P_1 first: the solvers' coarse modes
    # the moments of PQ_p x PQ_p are those of PQ_2p; the load's are PQ_p, a prefix
    t = moment_tables(2, 3, basis="PQ")
    np.testing.assert_array_equal(t.psi, pq_multi_indices(4, 3))
    assert t.counts[2].tolist() == [75, 70, 61, 18]


def test_cli_space_time_basis_pq(tmp_path):
    path = tmp_path / "run.json"
    r = cli("--problem", "paper-2d1", "--time-slabs", 2, "--final-time", 0.2, "--mesh", "square:4",
            "--agglomerate", 8, "--degree", 1, "--space-time-basis", "PQ", "--json", path, "--quiet")
    assert r.returncode == 0, r.stderr
    s = json.loads(path.read_text())
    assert s["space_time_basis"] == "PQ" and s["dofs"] == 8 * 6


# ---------------------------------------------------------------------------
# local time steps: m_K steps of element K inside each slab


def test_local_step_slab_is_face_matching_and_one_step_is_the_plain_slab(space_mesh):
    from polydg.spacetime.slab import random_local_steps

    plain, one = slab_mesh(space_mesh, 0.2, 0.7), slab_mesh(space_mesh, 0.2, 0.7, local_steps=1)
    for name in ("points", "simplices", "element_offsets", "face_vertices", "face_elements", "face_normal"):
        np.testing.assert_array_equal(getattr(one, name), getattr(plain, name), err_msg=name)
    steps = random_local_steps(space_mesh.n_elements, 1, 3, seed=0)
    assert len(np.unique(steps)) == 3
    slab = slab_mesh(space_mesh, 0.2, 0.7, steps)  # facets matched by construction, checked below
    K = np.repeat(np.arange(space_mesh.n_elements), steps)
    j = np.arange(slab.n_elements) - np.r_[0, np.cumsum(steps)][K]
    np.testing.assert_allclose(slab.bbox_min[:, 2], 0.2 + 0.5 * j / steps[K], rtol=1e-14)
    np.testing.assert_allclose(slab.bbox_max[:, 2], 0.2 + 0.5 * (j + 1) / steps[K], rtol=1e-14)
    np.testing.assert_allclose(slab.measure, space_mesh.measure[K] * 0.5 / steps[K], rtol=1e-12)
    # the boundary: bottom and top (area 1 each) and the sides (perimeter 4 x 0.5): nothing unmatched inside
    normal, area = slab.face_normal[slab.boundary_faces], slab.face_measure[slab.boundary_faces]
    assert area[normal[:, 2] == -1].sum() == pytest.approx(1.0, rel=1e-13)
    assert area[normal[:, 2] == 1].sum() == pytest.approx(1.0, rel=1e-13)
    assert area[normal[:, 2] == 0].sum() == pytest.approx(2.0, rel=1e-13)
    # interior faces: vertical sides, or the time planes between an element's own steps
    inner = slab.face_normal[: slab.n_interior_faces, 2]
    assert np.all((inner == 0) | (np.abs(inner) == 1))
    e1, e2 = slab.face_elements[: slab.n_interior_faces].T
    timelike = np.abs(inner) == 1
    assert np.all(K[e1[timelike]] == K[e2[timelike]]) and np.all(np.abs(j[e1[timelike]] - j[e2[timelike]]) == 1)
    np.testing.assert_allclose(slab.face_measure[: slab.n_interior_faces][timelike].sum(),
                               (space_mesh.measure * (steps - 1)).sum(), rtol=1e-13)


@pytest.mark.parametrize("kind", ["diffusion", "transport"])
@pytest.mark.parametrize("local_steps", [2, "1:3"])
def test_polynomials_are_reproduced_with_local_steps(space_mesh, kind, local_steps):
    from polydg.spacetime.slab import random_local_steps

    if local_steps == "1:3":
        local_steps = random_local_steps(space_mesh.n_elements, 1, 3, seed=0)
        degree = np.random.default_rng(3).integers(1, 3, size=space_mesh.n_elements)  # mixed: P_1 solution
        u, parts = _u1, lambda y: (_grad1(y)[1], _grad1(y)[0], 0.0)
    else:
        degree, u = 2, _u2
        parts = lambda y: (_grad2(y)[1], _grad2(y)[0], 2.0)  # noqa: E731
    problem = _polynomial_problem(kind, u, parts)
    result = march(space_mesh, problem, degree, n_slabs=3, final_time=0.6, local_steps=local_steps)
    assert result.space.mesh.n_elements == int(np.sum(np.broadcast_to(local_steps, space_mesh.n_elements)))
    assert result.errors["l2"] / _relative_l2_at(space_mesh, u, 0.6, 2) < 1e-9 and result.errors["l2_l2"] < 1e-9


@pytest.mark.parametrize("mesh_name,problem_name,n_slabs", [("space_mesh", "paper-2d1", 2),
                                                             ("cube_mesh", "paper-3d1", 1)])
def test_one_local_step_gives_the_same_matrices_and_solution(request, mesh_name, problem_name, n_slabs):
    mesh, problem = request.getfixturevalue(mesh_name), builtin_problem(problem_name)
    plain = march(mesh, problem, 1, n_slabs=n_slabs, final_time=0.2)
    one = march(mesh, problem, 1, n_slabs=n_slabs, final_time=0.2, local_steps=1)
    A, B = plain.assembly.matrix, one.assembly.matrix
    for name in ("indptr", "indices", "data"):
        np.testing.assert_array_equal(getattr(A, name), getattr(B, name), err_msg=name)
    np.testing.assert_array_equal(one.solution, plain.solution)


def test_two_local_steps_everywhere_are_twice_the_slabs(space_mesh):
    """The faces between steps carry the upwind jump and no penalty, as the slabs' bottoms do: the same method."""
    problem = builtin_problem("paper-2d1")
    local = march(space_mesh, problem, 1, n_slabs=2, final_time=0.2, local_steps=2)
    slabs = march(space_mesh, problem, 1, n_slabs=4, final_time=0.2)
    rule = time_plane_rule(space_mesh, 4)
    last = dataclasses.replace(rule, elements=2 * rule.elements + 1)
    np.testing.assert_allclose(trace_values(local.space, local.solution, last, 0.2),
                               trace_values(slabs.space, slabs.solution, rule, 0.2), rtol=1e-11, atol=1e-13)
    assert local.errors["l2"] == pytest.approx(slabs.errors["l2"], rel=1e-10)


def test_local_steps_are_backward_euler_steps_of_each_element(space_mesh):
    """a = 0, w = 0, degree 0: element K does m_K backward Euler steps of length tau / m_K per slab."""
    from polydg.spacetime.slab import random_local_steps

    c, nodes = 2.0, np.array([0.0, 0.3, 1.0])
    steps = random_local_steps(space_mesh.n_elements, 1, 4, seed=2)
    result = march(space_mesh, Problem("ode", reaction=c, space_time=True, initial=1.0), 0, nodes, local_steps=steps)
    last = np.r_[0, np.cumsum(steps)][1:] - 1
    rule = time_plane_rule(space_mesh, 0)
    values = trace_values(result.space, result.solution, dataclasses.replace(rule, elements=last[rule.elements]), 1.0)
    expected = np.prod([(1.0 / (1.0 + c * tau / steps)) ** steps for tau in np.diff(nodes)], axis=0)
    np.testing.assert_allclose(values, expected[rule.elements], rtol=1e-12)
    assert result.space.mesh.n_elements == last[-1] + 1


def test_faces_between_local_steps_carry_no_penalty(space_mesh):
    """(K, 0) and (K, 1) meet only on a time plane: their coupling is the upwind jump whatever the diffusion."""
    from polydg.assembly import AssemblyScope, assemble
    from polydg.space import DGSpace

    slab = slab_mesh(space_mesh, 0.0, 0.1, local_steps=2)
    space = DGSpace(slab, 1)
    scale = (np.abs(slab.face_normal[:, 2]) != 1).astype(float)
    between_steps = AssemblyScope(face_penalty_scale=scale)
    A = {a: assemble(space, slab_problem(Problem("d", diffusion=a, reaction=1.0, space_time=True, initial=0.0),
                                         2, 0.0, 0.1), scope=between_steps).matrix.toarray() for a in (0.0, 1.0)}
    early, late = space.dof_offsets[0] + np.arange(4), space.dof_offsets[1] + np.arange(4)  # (K0, 0), (K0, 1)
    # the later step's rows see the earlier step's trace (upwind); the earlier step's rows see nothing
    np.testing.assert_array_equal(A[1.0][np.ix_(early, late)], 0.0)
    assert np.abs(A[0.0][np.ix_(late, early)]).max() > 0.1
    np.testing.assert_allclose(A[1.0][np.ix_(late, early)], A[0.0][np.ix_(late, early)], atol=1e-12)
    unscaled = assemble(space, slab_problem(Problem("d", diffusion=1.0, reaction=1.0, space_time=True, initial=0.0),
                                            2, 0.0, 0.1)).matrix.toarray()
    assert np.abs(unscaled[np.ix_(early, late)]).max() > 1.0  # without the scale: a penalty there


def test_march_refuses_bad_local_steps(space_mesh):
    problem = builtin_problem("paper-2d1")
    with pytest.raises(OptionError, match="local steps must be >= 1, got 0 on element 0"):
        march(space_mesh, problem, 1, n_slabs=1, final_time=0.1, local_steps=0)
    with pytest.raises(OptionError, match="one number per element"):
        march(space_mesh, problem, 1, n_slabs=1, final_time=0.1, local_steps=[1, 2])


def test_cli_local_steps(tmp_path):
    path = tmp_path / "run.json"
    r = cli("--problem", "paper-2d1", "--time-slabs", 2, "--final-time", 0.2, "--mesh", "square:4",
            "--agglomerate", 8, "--degree", 1, "--local-steps", "1:3", "--seed", 1, "--json", path, "--quiet")
    assert r.returncode == 0, r.stderr
    s = json.loads(path.read_text())
    assert 1 <= s["local_steps"]["min"] < s["local_steps"]["max"] <= 3
    assert s["elements"] == s["local_steps"]["elements_per_slab"] > 8 and s["errors"]["l2"] < 0.2  # plain: 0.12


# ---------------------------------------------------------------------------
# a slab is the steady 3D problem A = diag(a, 0), b = (w, 1) on the prisms; the reductions agree on it


def _slab_space(space_mesh, basis, local_steps, tau=0.25):
    from polydg.space import DGSpace
    from polydg.spacetime.slab import random_local_steps

    steps = None if local_steps is None else random_local_steps(space_mesh.n_elements, 1, 3, seed=4)
    degree = np.random.default_rng(6).integers(1, 3, size=space_mesh.n_elements)
    slab = slab_mesh(space_mesh, 0.0, tau, steps)
    scale = None if steps is None else (np.abs(slab.face_normal[:, 2]) != 1).astype(float)
    return DGSpace(slab, degree if steps is None else np.repeat(degree, steps), basis), degree, steps, scale


def _variable_problem(u, parts):
    """u_t - div(a grad u) + w . grad u + c u = f with a = 1 + x (so div(a grad u) = a Lap u + d_x u)."""
    w = np.array([0.3, -0.2])
    a = lambda y: 1.0 + y[:, 0]  # noqa: E731

    def source(y):
        ut, gx, lap = parts(y)
        return ut - (a(y) * lap + gx[:, 0]) + gx @ w + 2.0 * u(y)

    return a, w, source


@pytest.mark.parametrize("basis, local_steps", [("P", None), ("PQ", "1:3")])
def test_a_slab_is_the_steady_3d_problem_on_its_prisms(space_mesh, basis, local_steps):
    from polydg.assembly import AssemblyScope, assemble
    from polydg.solve import solve

    # a solution in the space: PQ_1 for PQ, P_1 for P (the degrees are 1 and 2)
    u, parts = (_pq1, _pq1_parts) if basis == "PQ" else (_u1, lambda y: (_grad1(y)[1], _grad1(y)[0], 0.0))
    a, w, source = _variable_problem(u, parts)
    space, degree, steps, scale = _slab_space(space_mesh, basis, local_steps)

    def A3(y):  # diag(a, a, 0)
        out = np.zeros((len(y), 3, 3))
        out[:, 0, 0] = out[:, 1, 1] = a(y)
        return out

    steady = Problem("steady-3d", diffusion=A3, advection=np.append(w, 1.0), reaction=2.0, source=source,
                     dirichlet=u, exact=u, dim=3)  # g_D = u on the bottom: the inflow value u_0
    ref = assemble(space, steady, scope=AssemblyScope(face_penalty_scale=scale))
    st = Problem("st", diffusion=a, advection=w, reaction=2.0, source=source, dirichlet=u, exact=u, space_time=True,
                 initial=lambda x: u(at_time(x, 0.0)))
    result = march(space_mesh, st, degree, [0.0, 0.25], space_time_basis=basis, local_steps=steps,
                   quadrature_simplices="fine")  # the prisms of _slab_space (a = 1 + x: a_K from its points)
    A, B = result.assembly.matrix, ref.matrix
    np.testing.assert_array_equal(A.indices, B.indices)
    np.testing.assert_allclose(A.data, B.data, rtol=0, atol=1e-14 * np.abs(B.data).max())
    x, _ = solve(B, ref.rhs)  # the bottom's inflow term in the steady load, the trace load in the march
    np.testing.assert_allclose(result.solution, x, rtol=0, atol=1e-11 * np.abs(x).max())
    assert result.errors["l2"] < 1e-10


@pytest.mark.parametrize("basis, local_steps", [("P", None), ("PQ", "1:3")])
def test_the_three_reductions_agree_on_a_slab(space_mesh, basis, local_steps):
    from polydg.assembly import AssemblyScope, assemble

    a, w, source = _variable_problem(_pq1, _pq1_parts)
    space, _, _, scale = _slab_space(space_mesh, basis, local_steps)
    problem = slab_problem(Problem("st", diffusion=a, advection=w, reaction=2.0, source=source, dirichlet=_pq1,
                                   space_time=True, initial=0.0), 2, 0.0, 0.25)
    between_steps = AssemblyScope(face_penalty_scale=scale)
    results = {r: assemble(space, problem, approach=r, scope=between_steps) for r in ("2", "atomic", "1")}
    ref = results["2"].matrix
    for r in ("atomic", "1"):
        assert abs(results[r].matrix - ref).max() <= 1e-13 * np.abs(ref).max(), r
        np.testing.assert_allclose(results[r].rhs, results["2"].rhs, rtol=0,
                                   atol=1e-13 * np.abs(results["2"].rhs).max())
    # the deterministic reductions, rows and the default (on a GPU it may choose "blocks"), are bitwise
    # the same whatever the chunks
    default = assemble(space, problem, scope=between_steps)
    if default.info["approach"] in results:  # the CPU's rows (a GPU's blocks: deterministic, the rows' bits not promised)
        np.testing.assert_array_equal(default.matrix.data, results[default.info["approach"]].matrix.data)
    for approach, whole in (("2", results["2"]), ("auto", default)):
        small = assemble(space, problem, approach=approach, memory_budget_mb=0.02, scope=between_steps)
        assert small.info["chunks"] > 1 and small.info["approach"] == whole.info["approach"]
        np.testing.assert_array_equal(small.matrix.data, whole.matrix.data)
        np.testing.assert_array_equal(small.rhs, whole.rhs)
    # ... and whatever the thread count
    import numba

    before = numba.get_num_threads()
    try:
        for threads in {1, numba.config.NUMBA_NUM_THREADS}:
            numba.set_num_threads(threads)
            again = assemble(space, problem, memory_budget_mb=0.02, scope=between_steps)
            np.testing.assert_array_equal(again.matrix.data, default.matrix.data)
            np.testing.assert_array_equal(again.rhs, default.rhs)
    finally:
        numba.set_num_threads(before)


def test_diffusion_dominated_with_pq_and_local_steps(space_mesh):
    """a = 1, a small wind and c = 1, PQ_2, random local steps: exact over several slabs."""
    from polydg.spacetime.slab import random_local_steps

    w = np.array([0.01, -0.02])
    problem = Problem("dd", diffusion=1.0, advection=w, reaction=1.0, dirichlet=_pq2, exact=_pq2, space_time=True,
                      source=lambda y: _pq2_parts(y)[0] - _pq2_parts(y)[2] + _pq2_parts(y)[1] @ w + _pq2(y),
                      initial=lambda x: _pq2(at_time(x, 0.0)))
    steps = random_local_steps(space_mesh.n_elements, 1, 3, seed=0)
    result = march(space_mesh, problem, 2, n_slabs=3, final_time=0.6, space_time_basis="PQ", local_steps=steps)
    assert result.errors["l2"] / _relative_l2_at(space_mesh, _pq2, 0.6, 2) < 1e-9 and result.errors["l2_l2"] < 1e-9


# ---------------------------------------------------------------------------
# what a march reuses from slab to slab


@pytest.mark.parametrize("local_steps", [None, 2])
def test_a_march_assembles_once_when_nothing_depends_on_t(space_mesh, local_steps):
    constant = Problem("c", diffusion=0.5, advection=[1.0, 0.5], reaction=1.0, source=2.0, dirichlet=1.0,
                       space_time=True, initial=lambda x: x[:, 0])
    reused = march(space_mesh, constant, 1, n_slabs=4, final_time=0.4, local_steps=local_steps)
    assert reused.info["autonomous"] and reused.info["reused_assemblies"] == 3 and reused.info["factorisations"] == 1
    assert all(t["total_assembly"] == 0.0 for t in reused.timings[1:])
    again = march(space_mesh, constant, 1, n_slabs=4, final_time=0.4, local_steps=local_steps, autonomous=False)
    assert again.info["reused_assemblies"] == 0 and again.info["factorisations"] == 1  # the LU is kept all the same
    np.testing.assert_allclose(reused.solution, again.solution, rtol=1e-12, atol=1e-12)
    # a source depending on t: the same matrix (one LU), a new load per slab
    varying = dataclasses.replace(constant, source=lambda y: 2.0 + y[:, 2])
    moving = march(space_mesh, varying, 1, n_slabs=4, final_time=0.4, local_steps=local_steps)
    assert not moving.info["autonomous"] and moving.info["reused_assemblies"] == 0
    assert moving.info["factorisations"] == 1
    assert moving.info["assembled_per_slab"] == ["matrix+load"] + ["load"] * 3
    assert np.abs(moving.solution - reused.solution).max() > 1e-3


def test_each_slab_fingerprints_its_coefficients_once(space_mesh, monkeypatch):
    """A reaction of t fingerprinted once per slab (its keeps and, when it assembles the matrix, its keep share
    the digest): equal on (0, 0.2), then on (0.2, 0.4), so the slabs after each change keep the matrix."""
    from polydg.spacetime.time_dependence import CoefficientFingerprint

    problem = Problem("step in t", diffusion=0.5, advection=[1.0, 0.5], reaction=lambda y: 1.0 + (y[:, 2] > 0.2),
                      source=2.0, dirichlet=1.0, space_time=True, initial=lambda x: x[:, 0])
    every = march(space_mesh, problem, 1, n_slabs=4, final_time=0.4, coefficients_free_of_t=False)
    calls = []
    fingerprint = CoefficientFingerprint.__call__
    monkeypatch.setattr(CoefficientFingerprint, "__call__",
                        lambda self, space, slab: (calls.append(slab), fingerprint(self, space, slab))[-1])
    kept = march(space_mesh, problem, 1, n_slabs=4, final_time=0.4)
    if TEST_BACKEND != "numpy":  # a GPU march fingerprints no callable (march._KeptMatrix): it assembles again
        assert kept.info["assembled_per_slab"] == ["matrix+load"] * 4 and calls == []
    else:
        assert kept.info["assembled_per_slab"] == ["matrix+load", "load", "matrix+load", "load"]
        assert len(calls) == 4 and len({id(slab) for slab in calls}) == 4
    np.testing.assert_allclose(kept.solution, every.solution, rtol=0, atol=1e-12 * np.abs(every.solution).max())


def _moving_data(y):
    """Data depending on x and t (a source, g_D, g_N)."""
    return np.sin(2.0 * y[:, 0] + y[:, 1]) * (1.0 + 3.0 * y[:, 2]) + y[:, 2] ** 2


#: the load's every term, with data depending on t: source and Dirichlet data on the diffusive
#: boundary with a Neumann part (diffusion), source and inflow data (pure transport)
LOAD_CASES = {
    "diffusion": dict(diffusion=1.0, advection=[0.3, -0.2], reaction=1.0, source=_moving_data,
                      dirichlet=_moving_data, is_neumann=lambda x, n: n[:, 0] > 0.5,
                      neumann=lambda x, n: _moving_data(x) * n[:, 0]),
    "transport": dict(advection=[1.0, 0.5], reaction=1.0, source=_moving_data, dirichlet=_moving_data),
}


@pytest.mark.parametrize("basis, local_steps", [("P", None), ("PQ", [1, 2, 1, 3, 2, 1, 1, 2])])
@pytest.mark.parametrize("case", sorted(LOAD_CASES))
def test_the_load_alone_is_the_full_assemblys_load(space_mesh, basis, local_steps, case):
    from polydg.assembly import AssemblyScope, assemble
    from polydg.space import DGSpace

    problem = Problem(case, space_time=True, initial=0.0, **LOAD_CASES[case])
    mesh = shifted_slab(slab_mesh(space_mesh, 0.0, 0.25, local_steps), 0.5)  # the slab (0.5, 0.75)
    scale = None if local_steps is None else (np.abs(mesh.face_normal[:, -1]) != 1.0).astype(float)
    space = DGSpace(mesh, 1, basis)
    slab = slab_problem(problem, 2, 0.5, 0.75)
    full = assemble(space, slab, scope=AssemblyScope(face_penalty_scale=scale))
    assert np.abs(full.rhs).max() > 1.0
    off_bottom = mesh.face_normal[:, -1] != -1.0  # the march's: g_D is 0 on the bottom face
    for faces in (None, off_bottom):
        load = assemble(space, slab, matrix=False,
                        scope=AssemblyScope(face_penalty=full.face_penalty, load_boundary_faces=faces))
        assert load.matrix is None and load.info["assembled"] == "load"
        np.testing.assert_allclose(load.rhs, full.rhs, rtol=0, atol=1e-13 * np.abs(full.rhs).max())
    with pytest.raises(OptionError, match="load_boundary_faces is for the load alone"):
        assemble(space, slab, scope=AssemblyScope(load_boundary_faces=off_bottom))


@pytest.mark.parametrize("basis, local_steps", [("P", None), ("PQ", [1, 2, 1, 3, 2, 1, 1, 2])])
def test_a_march_with_the_load_alone_is_the_march_reassembling_every_slab(space_mesh, basis, local_steps):
    problem = builtin_problem("paper-2d1")
    options = dict(n_slabs=3, final_time=0.3, space_time_basis=basis, local_steps=local_steps)
    kept = march(space_mesh, problem, 1, **options)
    every = march(space_mesh, problem, 1, coefficients_free_of_t=False, **options)
    # paper-2d1's a = 1, c = 1: its matrix assembled once, then the load alone
    assert kept.info["assembled_per_slab"] == ["matrix+load", "load", "load"]
    assert kept.info["matrix_assemblies"] == 1 and kept.info["load_assemblies"] == 2
    assert every.info["assembled_per_slab"] == ["matrix+load"] * 3
    assert all(t["interior_kernel"] == 0.0 for t in kept.timings[1:])
    np.testing.assert_allclose(kept.solution, every.solution, rtol=0, atol=1e-12 * np.abs(every.solution).max())
    for key in ("l2", "l2_l2"):
        assert kept.errors[key] == pytest.approx(every.errors[key], rel=1e-12)


# ---------------------------------------------------------------------------
# 3D + 1: polyhedra x time, slabs of pentatopes (the steady assembly in 4 dimensions)


def test_3d1_slab_is_face_matching_pentatopes(cube_mesh):
    t0, t1 = 0.25, 0.75
    tau = t1 - t0
    slab = slab_mesh(cube_mesh, t0, t1)
    assert slab.dim == 4 and slab.n_elements == cube_mesh.n_elements
    assert slab.n_simplices == 4 * cube_mesh.n_simplices and slab.simplex_volume.min() > 0
    assert slab.simplex_volume.sum() == pytest.approx(1.0 * tau, rel=1e-13)  # |Omega| tau
    np.testing.assert_allclose(slab.measure, cube_mesh.measure * tau, rtol=1e-13)
    # every facet of a pentatope is shared by exactly 2 pentatopes, except those on the slab's
    # boundary: bottom and top (one per tetrahedron) and 3 per boundary triangle (its prism's side)
    facets = np.sort(slab.simplices[:, [[j for j in range(5) if j != k] for k in range(5)]].reshape(-1, 4), axis=1)
    _, count = np.unique(facets, axis=0, return_counts=True)
    assert count.max() == 2
    assert (count == 1).sum() == 2 * cube_mesh.n_simplices + 3 * cube_mesh.n_boundary_faces == slab.n_boundary_faces
    normal, measure = slab.face_normal[slab.boundary_faces], slab.face_measure[slab.boundary_faces]
    bottom, top = normal[:, 3] == -1.0, normal[:, 3] == 1.0
    assert bottom.sum() == top.sum() == cube_mesh.n_simplices
    assert measure[bottom].sum() == pytest.approx(1.0, rel=1e-13) and measure[top].sum() == pytest.approx(1.0, rel=1e-13)
    side = ~bottom & ~top  # the lateral boundary, d Omega x (t0, t1)
    assert np.all(normal[side, 3] == 0.0) and measure[side].sum() == pytest.approx(6.0 * tau, rel=1e-13)
    assert np.all(slab.face_normal[: slab.n_interior_faces, 3] == 0.0)
    assert slab.n_interior_faces == 3 * cube_mesh.n_interior_faces


def _u31(y):
    x, z, v, t = y.T
    return 1.0 + x - 2.0 * z + 0.5 * v + 3.0 * t


def _u32(y):
    x, z, v, t = y.T
    return 1.0 + x - 0.5 * z + 0.3 * t + x * x - x * v + 0.7 * z * t + 0.4 * t * t + 0.2 * v * v


def _parts31(y):  # (u_t, grad_x u, Laplace_x u)
    return np.full(len(y), 3.0), np.tile([1.0, -2.0, 0.5], (len(y), 1)), 0.0


def _parts32(y):
    x, z, v, t = y.T
    return 0.3 + 0.7 * z + 0.8 * t, np.column_stack([1.0 + 2.0 * x - v, -0.5 + 0.7 * t, -x + 0.4 * v]), 2.4


def _pq31(y):  # in PQ_1 (x t, v t), not in P_1
    x, z, v, t = y.T
    return _u31(y) + 2.0 * x * t - v * t


def _pq31_parts(y):
    x, z, v, t = y.T
    return 3.0 + 2.0 * x - v, np.column_stack([1.0 + 2.0 * t, np.full(len(y), -2.0), 0.5 - t]), 0.0


def _polynomial_problem_3d1(kind, u, parts):
    w = np.array([1.0, 0.5, 0.25])
    if kind == "diffusion":  # u_t - Laplace u + u = f
        coefficients = dict(diffusion=1.0, reaction=1.0)
        source = lambda y: parts(y)[0] - parts(y)[2] + u(y)  # noqa: E731
    else:  # u_t + w . grad u = f, inflow data where w . n < 0
        coefficients = dict(advection=w)
        source = lambda y: parts(y)[0] + parts(y)[1] @ w  # noqa: E731
    return Problem(f"poly-3d1-{kind}", source=source, dirichlet=u, exact=u, space_time=True,
                   initial=lambda x: u(at_time(x, 0.0)), **coefficients)


@pytest.mark.parametrize("degree, u, parts, kind, basis", [
    (1, _u31, _parts31, "diffusion", "P"),
    (1, _u31, _parts31, "transport", "P"),
    ("1:2", _u31, _parts31, "diffusion", "P"),  # mixed degrees, a linear solution
    (2, _u32, _parts32, "transport", "P"),
    (1, _pq31, _pq31_parts, "transport", "PQ"),
])
def test_3d1_polynomials_of_degree_p_are_reproduced(cube_mesh, degree, u, parts, kind, basis):
    if degree == "1:2":
        degree = np.array([1, 2, 2, 1])
    result = march(cube_mesh, _polynomial_problem_3d1(kind, u, parts), degree, n_slabs=2, final_time=0.5,
                   space_time_basis=basis)
    assert result.space.mesh.dim == 4
    assert result.info["assembled_per_slab"] == ["matrix+load", "load"]  # constant coefficients, f of t
    assert result.errors["l2"] / _relative_l2_at(cube_mesh, u, 0.5, 2) < 1e-9 and result.errors["l2_l2"] < 1e-9


#: local steps per element of the 3D + 1 tests' mesh (random 1:3 with seed 3): every count, neighbours differing
CUBE_STEPS = np.array([3, 1, 2, 2])


def test_3d1_local_step_slab_is_face_matching_and_one_step_is_the_plain_slab(cube_mesh):
    from polydg.spacetime.slab import random_local_steps

    t0, t1 = 0.25, 0.75
    tau = t1 - t0
    plain, one = slab_mesh(cube_mesh, t0, t1), slab_mesh(cube_mesh, t0, t1, local_steps=1)
    for name in ("points", "simplices", "element_offsets", "face_vertices", "face_elements", "face_normal"):
        np.testing.assert_array_equal(getattr(one, name), getattr(plain, name), err_msg=name)
    steps = random_local_steps(cube_mesh.n_elements, 1, 3, seed=3)
    np.testing.assert_array_equal(steps, CUBE_STEPS)
    slab = slab_mesh(cube_mesh, t0, t1, steps)
    assert slab.dim == 4 and slab.n_elements == steps.sum() and slab.simplex_volume.min() > 0
    # every facet of a pentatope is shared by exactly 2 pentatopes, or lies on the slab's boundary
    facets = np.sort(slab.simplices[:, [[j for j in range(5) if j != k] for k in range(5)]].reshape(-1, 4), axis=1)
    _, count = np.unique(facets, axis=0, return_counts=True)
    assert count.max() == 2 and (count == 1).sum() == slab.n_boundary_faces
    normal, measure = slab.face_normal[slab.boundary_faces], slab.face_measure[slab.boundary_faces]
    bottom, top = normal[:, 3] == -1.0, normal[:, 3] == 1.0
    assert bottom.sum() == top.sum() == cube_mesh.n_simplices
    assert measure[bottom].sum() == pytest.approx(1.0, rel=1e-13)
    assert measure[top].sum() == pytest.approx(1.0, rel=1e-13)
    side = ~bottom & ~top
    assert np.all(normal[side, 3] == 0.0) and measure[side].sum() == pytest.approx(6.0 * tau, rel=1e-13)
    # element (K, j) is K x (t0 + j tau / m_K, t0 + (j + 1) tau / m_K)
    K = np.repeat(np.arange(cube_mesh.n_elements), steps)
    j = np.arange(slab.n_elements) - np.r_[0, np.cumsum(steps)][K]
    assert slab.simplex_volume.sum() == pytest.approx(1.0 * tau, rel=1e-13)  # |Omega| tau
    np.testing.assert_allclose(slab.measure, cube_mesh.measure[K] * tau / steps[K], rtol=1e-13)
    np.testing.assert_allclose(slab.bbox_min[:, 3], t0 + tau * j / steps[K], rtol=1e-14)
    np.testing.assert_allclose(slab.bbox_max[:, 3], t0 + tau * (j + 1) / steps[K], rtol=1e-14)
    # interior faces: lateral (within both elements' steps), or time planes between an element's steps
    inner = slab.face_normal[: slab.n_interior_faces, 3]
    e1, e2 = slab.face_elements[: slab.n_interior_faces].T
    timelike = np.abs(inner) == 1
    assert np.all(timelike | (inner == 0.0))
    assert np.all(K[e1[timelike]] == K[e2[timelike]]) and np.all(np.abs(j[e1[timelike]] - j[e2[timelike]]) == 1)
    np.testing.assert_allclose(slab.face_measure[: slab.n_interior_faces][timelike].sum(),
                               (cube_mesh.measure * (steps - 1)).sum(), rtol=1e-13)
    face_t = slab.points[slab.face_vertices[: slab.n_interior_faces][~timelike], 3]
    for e in (e1[~timelike], e2[~timelike]):  # split at both sides' time nodes
        assert np.all(face_t.min(axis=1) >= slab.bbox_min[e, 3]) and np.all(face_t.max(axis=1) <= slab.bbox_max[e, 3])


@pytest.mark.parametrize("kind", ["diffusion", "transport"])
@pytest.mark.parametrize("local_steps", [2, "1:3"])
def test_3d1_polynomials_are_reproduced_with_local_steps(cube_mesh, kind, local_steps):
    steps = CUBE_STEPS if local_steps == "1:3" else local_steps
    result = march(cube_mesh, _polynomial_problem_3d1(kind, _u31, _parts31), 1, n_slabs=2, final_time=0.5,
                   local_steps=steps)
    assert result.space.mesh.n_elements == int(np.sum(np.broadcast_to(steps, cube_mesh.n_elements)))
    assert result.errors["l2"] / _relative_l2_at(cube_mesh, _u31, 0.5, 2) < 1e-9 and result.errors["l2_l2"] < 1e-9


def test_paper_3d1_source_solves_the_pde_and_its_error_decreases():
    problem = builtin_problem("paper-3d1")
    assert problem.dim == 3 and problem.space_time
    # f = u_t - 0.01 Laplace u + w . grad u + c u, by finite differences of the exact solution
    y = np.random.default_rng(5).uniform(0.1, 0.9, size=(20, 4))
    h = 1e-4
    shift = lambda k, s: problem.exact(y + s * h * np.eye(4)[k])  # noqa: E731
    d1 = np.array([(shift(k, 1) - shift(k, -1)) / (2 * h) for k in range(4)])
    laplacian = sum((shift(k, 1) - 2 * problem.exact(y) + shift(k, -1)) / h**2 for k in range(3))
    residual = d1[3] - 0.01 * laplacian + np.einsum("kn,nk->n", d1[:3], problem.advection(y)) \
        + problem.reaction(y) * problem.exact(y)
    np.testing.assert_allclose(problem.source(y), residual, atol=1e-5)
    np.testing.assert_allclose(problem.initial(y[:, :3]), problem.exact(at_time(y[:, :3], 0.0)))
    # h and tau halved: the error at T falls at about the rate p + 1 = 2
    from polydg.mesh import build_polytopic_mesh

    l2 = [march(build_polytopic_mesh(from_spec(f"cube:{n}")), problem, 1, n_slabs=n // 2, final_time=0.5).errors["l2"]
          for n in (2, 4)]
    assert np.log2(l2[0] / l2[1]) > 1.5, l2


def test_cli_3d1_marches_with_local_steps(tmp_path):
    path = tmp_path / "run.json"
    r = cli("--problem", "paper-3d1", "--time-slabs", 2, "--final-time", 0.5, "--mesh", "cube:2", "--agglomerate", 4,
            "--degree", 1, "--local-steps", "1:2", "--seed", 1, "--json", path, "--output", tmp_path / "out")
    assert r.returncode == 0, r.stderr
    assert "slab 2/2" in r.stderr and "2 slabs of (0, 0.5)" in r.stdout
    s = json.loads(path.read_text())
    assert s["dimension"] == 4 and s["slabs"] == 2 and s["final_time"] == 0.5
    assert s["local_steps"] == {"min": 1, "max": 2, "elements_per_slab": s["elements"]} and 4 < s["elements"] < 8
    assert len(s["timings_per_slab"]) == 2 and "total_assembly" in s["timings_all_slabs"]
    assert set(s["errors"]) == {"l2", "l2_l2"} and s["errors"]["l2"] < 0.2
    # w and c are callables free of t: found so at slab 2's quadrature points, which assembles its load alone
    assert s["assembled_per_slab"] == ["matrix+load", "load"]
    assert (tmp_path / "out" / "solution.vtu").exists()  # the last slab's top plane, as tetrahedra


def test_a_gpu_march_keeps_its_matrix_only_where_no_fingerprint_is_needed(monkeypatch):
    """A march on a GPU keeps its slab matrix for constant coefficients and for the caller's word, but does not
    fingerprint callables (a host evaluation at every point of every slab): it assembles the matrix again."""
    from polydg.space import DGSpace
    from polydg.spacetime.march import _KeptMatrix
    from polydg.spacetime.time_dependence import CoefficientFingerprint

    mesh = slab_mesh(agglomerate(from_spec("square:2"), 3), 0.0, 0.1)
    space = DGSpace(mesh, 1)
    constant = builtin_problem("paper-2d1", 2)  # a = 1, c = 1
    free_of_t = dataclasses.replace(constant, reaction=lambda y: 1.0 + 0.5 * y[:, 0])  # a callable without t
    calls = []
    fingerprint = CoefficientFingerprint.__call__
    monkeypatch.setattr(CoefficientFingerprint, "__call__",
                        lambda self, *a: (calls.append(1), fingerprint(self, *a))[-1])

    def kept_after_one_slab(problem, stated, detect):
        kept = _KeptMatrix(problem, stated, 0, detect=detect)
        slab = slab_problem(problem, 2, 0.0, 0.1)
        kept.keep(object(), space, slab)
        return kept.keeps(True, space, slab)

    assert kept_after_one_slab(free_of_t, None, detect=True) and calls  # the host fingerprints the callable
    calls.clear()
    assert not kept_after_one_slab(free_of_t, None, detect=False) and not calls  # a GPU march does not
    assert kept_after_one_slab(free_of_t, True, detect=False) and not calls  # the caller's word
    assert kept_after_one_slab(constant, None, detect=False) and not calls  # constants


def test_a_march_given_what_it_does_not_take_says_what_to_pass(space_mesh):
    """A fine mesh or a space where the polytopic mesh goes, an Assembler where the ranks' hook goes, an array
    as the initial value: one line each, not an AttributeError from inside."""
    from polydg.assembly import Assembler
    from polydg.space import DGSpace

    heat = builtin_problem("paper-2d1", 2)
    mesh = space_mesh
    for wrong in (from_spec("square:2"), DGSpace(mesh, 1)):
        with pytest.raises(OptionError, match=f"march takes the polytopic mesh of Omega, got {type(wrong).__name__}: "
                                              "make one of a fine mesh by polydg.partition.agglomerate"):
            march(wrong, heat, 1, n_slabs=1, final_time=0.1)
    for wrong in (Assembler, Assembler(DGSpace(mesh, 1))):
        with pytest.raises(OptionError, match="assembler= is the hook by which MPI ranks assemble each slab"):
            march(mesh, heat, 1, n_slabs=1, final_time=0.1, assembler=wrong)
    with pytest.raises(ProblemError, match=r"initial must be a number or a function of x, got an array of shape "
                                           r"\(8,\)"):
        march(mesh, dataclasses.replace(heat, initial=np.zeros(8)), 1, n_slabs=1, final_time=0.1)


def test_a_slab_series_writes_its_pvd_from_python(space_mesh, tmp_path):
    from polydg.output import SlabSeries

    series = SlabSeries(tmp_path)
    march(space_mesh, builtin_problem("paper-2d1", 2), 1, n_slabs=2, final_time=0.2, on_slab=series.add)
    path = series.write_pvd()
    assert path == tmp_path / "solution.pvd" and sorted(p.name for p in tmp_path.iterdir()) == [
        "solution-slab-0001.vtu", "solution-slab-0002.vtu", "solution.pvd"]
    text = path.read_text()
    assert 'file="solution-slab-0001.vtu"' in text and 'file="solution-slab-0002.vtu"' in text
