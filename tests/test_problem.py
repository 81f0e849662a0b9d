"""The Problem contract: built-in manufactured solutions, validation, loading."""

import textwrap

import numpy as np
import pytest

from polydg.errors import ProblemError
from polydg.problem import (
    BUILTIN_PROBLEMS,
    Polynomial,
    Problem,
    builtin_problem,
    load_problem,
    polynomial_problem,
)

BUILTIN_CASES = [("paper-2d", 2), ("paper-3d", 3)] + [
    (name, d) for name in ("poisson", "advection", "change-of-type", "neumann") for d in (2, 3)
]


def _points(d, n=40, seed=0):
    return np.random.default_rng(seed).uniform(0.02, 0.98, (n, d))


def _fd_gradient(f, x, h=1e-6):
    """Central differences of a scalar field, (n, d)."""
    d = x.shape[1]
    return np.stack([(f(x + h * e) - f(x - h * e)) / (2 * h) for e in np.eye(d)], axis=1)


def _fd_residual(problem, x, h=1e-5):
    """-div(A grad u) + b.grad u + c u, the divergence by central differences
    of the flux A grad u (exact_gradient, itself checked against FD of exact)."""
    d = x.shape[1]

    def flux(y):
        return np.einsum("nij,nj->ni", np.broadcast_to(problem.diffusion_at(y), (len(y), d, d)),
                         problem.exact_gradient_at(y))

    div = sum((flux(x + h * e)[:, k] - flux(x - h * e)[:, k]) / (2 * h) for k, e in enumerate(np.eye(d)))
    b = np.broadcast_to(problem.advection_at(x), (len(x), d))
    c = np.broadcast_to(problem.reaction_at(x), (len(x),))
    return -div + np.einsum("nk,nk->n", b, problem.exact_gradient_at(x)) + c * problem.exact_at(x)


def _check_manufactured(problem, d, tol=1e-6):
    x = _points(d)
    u = problem.exact_at(x)
    grad = problem.exact_gradient_at(x)
    scale_u = 1 + np.abs(grad).max()
    assert np.abs(grad - _fd_gradient(problem.exact, x)).max() < tol * scale_u
    f = np.broadcast_to(problem.source_at(x), (len(x),))
    assert np.abs(f - _fd_residual(problem, x)).max() < tol * (1 + np.abs(f).max())
    # Dirichlet data is the exact solution
    assert np.allclose(np.broadcast_to(problem.dirichlet_at(x), u.shape), u)


@pytest.mark.parametrize("name,d", BUILTIN_CASES)
def test_builtin_source_solves_the_pde(name, d):
    problem = builtin_problem(name, d)
    assert problem.dim == d
    assert problem.description and problem.default_mesh
    _check_manufactured(problem, d)


@pytest.mark.parametrize("kind", ["diffusion", "advection-reaction", "mixed"])
@pytest.mark.parametrize("d,degree", [(2, 0), (2, 1), (2, 3), (2, 4), (3, 2), (3, 3)])
def test_polynomial_problem_source_solves_the_pde(kind, d, degree):
    problem = polynomial_problem(d, degree, kind, seed=degree)
    _check_manufactured(problem, d, tol=1e-7)
    x = _points(d)
    # the exact solution has the requested degree: its monomials, evaluated here, reach it and no more
    exact = problem.exact
    assert exact.degree == degree and exact.exponents.sum(axis=1)[exact.coeff != 0].max() == degree
    monomials = np.prod(x[:, None, :] ** exact.exponents[None, :, :], axis=2)
    np.testing.assert_allclose(exact(x), monomials @ exact.coeff, rtol=1e-13, atol=1e-13)
    assert problem.has_diffusion == (kind != "advection-reaction")
    assert problem.has_advection == (kind != "diffusion")
    for name in ("diffusion", "advection", "reaction", "dirichlet"):
        if name != "dirichlet":
            assert problem.is_constant(name)
    # same seed, same problem
    again = polynomial_problem(d, degree, kind, seed=degree)
    assert np.array_equal(again.exact_at(x), problem.exact_at(x))


def test_polynomial_coefficients_are_valid():
    A = polynomial_problem(3, 2, "diffusion", seed=5).diffusion_at(np.zeros((1, 3)))[0]
    assert np.allclose(A, A.T) and np.linalg.eigvalsh(A).min() > 0.4
    b = polynomial_problem(3, 2, "advection-reaction", seed=5).advection_at(np.zeros((1, 3)))[0]
    assert (np.abs(b) >= 0.5).all()


def test_polynomial_arithmetic():
    p = Polynomial(np.array([2.0, 3.0]), np.array([[0, 0], [1, 2]]))  # 2 + 3 x y^2
    x = np.array([[2.0, 1.0], [0.0, 0.0], [-1.0, 0.5]])
    assert np.allclose(p(x), 2 + 3 * x[:, 0] * x[:, 1] ** 2)
    assert np.allclose(p.derivative(0)(x), 3 * x[:, 1] ** 2)
    assert np.allclose(p.derivative(1)(x), 6 * x[:, 0] * x[:, 1])
    assert np.allclose(p.gradient(x), np.stack([3 * x[:, 1] ** 2, 6 * x[:, 0] * x[:, 1]], 1))
    q = p + (-1.0) * p
    assert len(q.coeff) == 0 and np.allclose(q(x), 0)
    assert np.allclose((p + 2 * p)(x), 3 * p(x))


def test_neumann_problem_boundary_data():
    problem = builtin_problem("neumann", 2)
    s = np.linspace(0.05, 0.95, 7)
    x = np.stack([np.ones_like(s), s], 1)
    normal = np.tile([1.0, 0.0], (len(s), 1))
    A = problem.diffusion_at(x)[0]
    expected = (problem.exact_gradient_at(x) @ A.T)[:, 0]
    assert np.allclose(problem.neumann_at(x, normal), expected)
    assert problem.neumann_mask(x, normal).all()
    left = np.tile([-1.0, 0.0], (len(s), 1))
    assert not problem.neumann_mask(x * 0, left).any()
    assert problem.has_neumann


def test_boundary_data_is_not_trivial():
    # poisson and advection: g_D non-zero on every side of the square
    for name in ("poisson", "advection"):
        problem = builtin_problem(name, 2)
        s = np.linspace(0.1, 0.9, 9)
        for side in ([s * 0, s], [s * 0 + 1, s], [s, s * 0], [s, s * 0 + 1]):
            g = problem.dirichlet_at(np.stack(side, 1))
            assert np.abs(g).max() > 0.1, name


def test_change_of_type_vanishes_on_the_left():
    problem = builtin_problem("change-of-type", 3)
    x = _points(3, 200)
    A = problem.diffusion_at(x)
    left = x[:, 0] < 0.5
    assert np.all(A[left] == 0) and np.all(A[~left][:, 0, 0] > 0)


def test_constants_are_not_expanded_and_dtype_follows_points():
    problem = builtin_problem("paper-2d", 2)
    x = _points(2).astype(np.float32)
    assert problem.diffusion_at(x).shape == (1, 2, 2)
    assert problem.diffusion_at(x).dtype == np.float32
    assert problem.advection_at(x).dtype == np.float32
    p = Problem("zero")
    assert p.diffusion_at(x).shape == (1, 2, 2) and not p.has_diffusion and not p.has_advection
    assert p.reaction_at(x).shape == (1,) and p.source_at(x)[0] == 0
    assert p.neumann_mask(x, x).shape == (1,) and not p.neumann_mask(x, x)[0]
    assert p.is_constant("diffusion")
    iso = Problem("iso", diffusion=lambda x: 2.0 + x[:, 0])
    A = iso.diffusion_at(x)
    assert A.shape == (len(x), 2, 2) and np.allclose(A[:, 0, 1], 0) and np.allclose(A[:, 1, 1], 2 + x[:, 0])


def test_builtin_registry_and_dimension_errors():
    assert {"paper-2d", "paper-3d", "poisson", "advection", "change-of-type", "neumann"} <= set(BUILTIN_PROBLEMS)
    assert builtin_problem("paper", 3).name == "paper-3d"
    assert builtin_problem("paper-3d").dim == 3
    with pytest.raises(ProblemError, match="paper-3d.*3D.*2D"):
        builtin_problem("paper-3d", 2)
    with pytest.raises(ProblemError, match="unknown problem 'nope'"):
        builtin_problem("nope", 2)
    with pytest.raises(ProblemError, match="unknown kind"):
        polynomial_problem(2, 1, "elliptic")
    assert load_problem("polynomial:2:advection-reaction:3", 3).exact.degree == 2


# ---------------------------------------------------------------------------
# validation


def test_wrong_shape_names_problem_and_coefficient():
    p = Problem("foo", diffusion=lambda x: np.ones((len(x), 2)))
    with pytest.raises(ProblemError) as e:
        p.diffusion_at(np.zeros((10, 2)))
    assert str(e.value) == ("problem 'foo': diffusion returned shape (10, 2) for 10 points in 2D, "
                            "expected (10,) for a(x) I or (10, 2, 2)")
    p = Problem("foo", reaction=lambda x: np.ones((len(x), 1)))
    with pytest.raises(ProblemError, match=r"problem 'foo': reaction returned shape \(5, 1\).*expected \(5,\)"):
        p.reaction_at(np.zeros((5, 3)))
    p = Problem("foo", advection=lambda x: 1.0)
    with pytest.raises(ProblemError, match="advection returned shape"):
        p.advection_at(np.zeros((5, 2)))


def test_nan_and_inf_are_reported_with_the_point():
    def advection(x):
        b = np.ones_like(x)
        b[x[:, 0] > 0.5] = np.nan
        return b

    p = Problem("foo", advection=advection, source=lambda x: 1 / (x[:, 0] - x[:, 0]))
    x = np.array([[0.25, 0.0], [0.75, 0.5], [0.8, 0.1]])
    with pytest.raises(ProblemError) as e:
        p.advection_at(x)
    assert str(e.value) == "problem 'foo': advection returned NaN at x = [0.75, 0.5] (2 of 3 points)"
    with np.errstate(all="ignore"), pytest.raises(ProblemError, match="source returned (inf|NaN) at x ="):
        p.source_at(x)


def test_other_validation_errors():
    x = np.zeros((4, 2))
    with pytest.raises(ProblemError, match="diffusion constant has shape \\(3, 3\\), expected a scalar or \\(2, 2\\)"):
        Problem("foo", diffusion=np.eye(3)).diffusion_at(x)
    with pytest.raises(ProblemError, match="not symmetric"):
        Problem("foo", diffusion=np.array([[1.0, 1.0], [0.0, 1.0]])).diffusion_at(x)
    with pytest.raises(ProblemError, match="not positive semi-definite"):
        Problem("foo", diffusion=-1.0).diffusion_at(x)
    with pytest.raises(ProblemError, match="'foo': diffusion is not symmetric at x ="):
        Problem("foo", diffusion=lambda x: np.tile([[1.0, 2.0], [0.0, 1.0]], (len(x), 1, 1))).diffusion_at(x)
    with pytest.raises(ProblemError, match="advection constant has shape \\(3,\\), expected \\(2,\\)"):
        Problem("foo", advection=[1.0, 2.0, 3.0]).advection_at(x)
    with pytest.raises(ProblemError, match="'foo': reaction raised ZeroDivisionError at 4 points: boom"):
        Problem("foo", reaction=lambda x: 1 / 0 if False else (_ for _ in ()).throw(ZeroDivisionError("boom")))\
            .reaction_at(x)
    with pytest.raises(ProblemError, match="'foo': source must be a callable"):
        Problem("foo", source="f")
    with pytest.raises(ProblemError, match="'foo': reaction constant \\[nan\\] is not finite"):
        Problem("foo", reaction=[np.nan])
    with pytest.raises(ProblemError, match="is_neumann returned shape"):
        Problem("foo", is_neumann=lambda x, n: np.ones((len(x), 2), bool)).neumann_mask(x, x)
    with pytest.raises(ProblemError, match="is_neumann returned values of dtype float64 that are not 0/1"):
        Problem("foo", is_neumann=lambda x, n: np.full(len(x), 0.5)).neumann_mask(x, x)
    assert Problem("foo", is_neumann=lambda x, n: np.ones(len(x))).neumann_mask(x, x).dtype == bool
    with pytest.raises(ProblemError, match="'foo' has no exact solution"):
        Problem("foo").exact_at(x)
    with pytest.raises(ProblemError, match="'paper-3d' is 3D, the mesh is 2D"):
        builtin_problem("paper-3d").source_at(x)
    with pytest.raises(ProblemError, match="'foo': diffusion constant has shape"):
        Problem("foo", diffusion=np.eye(3)).check_dimension(2)
    # validate() evaluates everything once
    with pytest.raises(ProblemError, match="'foo': neumann returned shape"):
        Problem("foo", neumann=lambda x, n: np.ones(3)).validate(x, normal=x)


# ---------------------------------------------------------------------------
# loading


GOOD_FILE = """
import numpy as np
from polydg.problem import Problem, builtin_problem

mine = Problem("mine", diffusion=1.0, source=lambda x: np.ones(len(x)), dim=2)

def by_dim(dim):
    return builtin_problem("poisson", dim)

def no_args():
    return Problem("no-args", reaction=2.0)

not_a_problem = 42

def returns_junk(dim):
    return "junk"
"""


def test_load_problem_from_file(tmp_path):
    path = tmp_path / "myproblems.py"
    path.write_text(GOOD_FILE)
    assert load_problem(f"{path}:mine", 2).name == "mine"
    assert load_problem(f"{path}:by_dim", 3).dim == 3
    assert load_problem(f"{path}:no_args", 3).name == "no-args"
    with pytest.raises(ProblemError, match="'mine' is 2D, the mesh is 3D"):
        load_problem(f"{path}:mine", 3)
    with pytest.raises(ProblemError, match=r"has no attribute 'missing' \(Problem objects there: mine\)"):
        load_problem(f"{path}:missing", 2)
    with pytest.raises(ProblemError, match="not_a_problem is a int, expected a polydg.problem.Problem"):
        load_problem(f"{path}:not_a_problem", 2)
    with pytest.raises(ProblemError, match=r"returns_junk\(\) returned a str"):
        load_problem(f"{path}:returns_junk", 2)
    # a bare .py path means NAME = problem
    (tmp_path / "default.py").write_text("from polydg.problem import Problem\nproblem = Problem('dflt')\n")
    assert load_problem(str(tmp_path / "default.py")).name == "dflt"


def test_load_problem_from_module(tmp_path, monkeypatch):
    package = tmp_path / "userpkg_polydg_test"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "probs.py").write_text(GOOD_FILE)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert load_problem("userpkg_polydg_test.probs:mine", 2).name == "mine"
    assert load_problem("userpkg_polydg_test.probs:by_dim", 2).name == "poisson"
    with pytest.raises(ProblemError, match="problem module 'userpkg_polydg_test.nothere' not found"):
        load_problem("userpkg_polydg_test.nothere:x", 2)


@pytest.mark.parametrize("content,message", [
    ("def broken(:\n    pass\n", r"problem file '.*bad.py': syntax error at line 1: "),
    ("raise RuntimeError('no\\nway')\n", r"problem file '.*bad.py': import failed: RuntimeError: no way$"),
    ("import not_a_module_anywhere_xyz\n", r"import failed: ModuleNotFoundError: No module named"),
    ("import sys\nsys.exit(3)\n", r"import failed: SystemExit: 3"),
])
def test_load_problem_bad_files(tmp_path, content, message):
    path = tmp_path / "bad.py"
    path.write_text(textwrap.dedent(content))
    with pytest.raises(ProblemError, match=message) as e:
        load_problem(f"{path}:problem", 2)
    assert "\n" not in str(e.value)


def test_load_problem_missing_file_and_unknown_name(tmp_path):
    with pytest.raises(ProblemError, match="problem file '.*nothere.py' not found"):
        load_problem(f"{tmp_path}/nothere.py:problem", 2)
    with pytest.raises(ProblemError, match="unknown problem 'nonsense'"):
        load_problem("nonsense", 2)
    with pytest.raises(ProblemError, match="'paper-2d' is 2D, the mesh is 3D"):
        load_problem("paper-2d", 3)


def test_sincospi_is_sin_and_cos_of_pi_x_to_round_off():
    from numba import njit

    from polydg.problem import _sincospi

    def both(x):
        s, c = np.empty_like(x), np.empty_like(x)
        for i in range(x.size):
            s[i], c[i] = _sincospi(x[i])
        return s, c

    rng = np.random.default_rng(3)
    # every quarter turn, both signs, the reduction's break points and far from 0
    x = np.concatenate([rng.uniform(-3, 3, 4000), np.arange(-12, 13) / 4, np.arange(-12, 13) / 4 + 1e-12, [1e3 + 0.3]])
    xl = x.astype(np.longdouble) * np.longdouble("3.14159265358979323846264338327950288")
    # plain, and with fused multiply-adds as _paper_source compiles it
    for compiled in (njit(both), njit(fastmath={"contract"})(both)):
        s, c = compiled(x)
        # within two units in the last place of the true values: pi x is never rounded
        # (NumPy's sin(pi * x) is off by up to 1.3e-15 here for that reason)
        assert np.abs(s - np.sin(xl)).max() < 4e-16
        assert np.abs(c - np.cos(xl)).max() < 4e-16
        whole = (np.arange(-12, 13) % 4 == 0)  # x = -3, -2, ..., 3: sin(pi x) is exactly 0
        assert not s[4000:4025][whole].any()


@pytest.mark.parametrize("d", [2, 3])
def test_paper_source_in_blocks_matches_the_numpy_formula(d):
    # more points than one block of the compiled source, and a ragged last block
    problem = builtin_problem(f"paper-{d}d")
    x = np.random.default_rng(d).uniform(0, 1, (1537, d))
    s, c = np.sin(np.pi * x), np.cos(np.pi * x)
    u = np.prod(s, axis=1)
    grad = np.pi * c * np.stack([np.prod(np.delete(s, k, axis=1), axis=1) for k in range(d)], axis=1)
    f = 0.01 * d * np.pi**2 * u + np.sum((1 + x) * grad, axis=1) + (3 + np.prod(x, axis=1)) * u
    np.testing.assert_allclose(problem.source_at(x), f, rtol=0, atol=1e-13)
    np.testing.assert_allclose(problem.reaction_at(x), 3 + np.prod(x, axis=1), rtol=1e-15)


@pytest.mark.parametrize("d", [1, 4])
def test_paper_source_kernel_refuses_other_dimensions(d):
    # its product loops are written out for 2D and 3D (tested above through the problem)
    from polydg.problem import _paper_source

    with pytest.raises(ValueError, match="d = 2 and 3"):
        _paper_source(np.zeros((5, d)), 0.01)


@pytest.mark.parametrize("kind", ["scalar", "matrix", "constant"])
def test_the_penalty_bound_of_a_without_checks_is_the_bound_of_the_checked_a(kind):
    """a_K for the penalty reads the diffusion as it comes (no a(x) I built, no symmetry check): the same
    numbers as from the checked (n, d, d) values, and a bad value still gets diffusion_at's error."""
    from polydg.assembly.penalty import row_sum_bound
    from polydg.problem import Problem

    x = np.random.default_rng(0).random((500, 2))
    diffusion = {"scalar": lambda x: 0.1 * np.maximum(x[:, 0] - 0.5, 0.0) ** 2 + x[:, 1],
                 "matrix": lambda x: np.stack([np.stack([1 + x[:, 0], -0.3 * x[:, 1]], 1),
                                               np.stack([-0.3 * x[:, 1], 2 + x[:, 1]], 1)], 1),
                 "constant": np.array([[1.0, -0.5], [-0.5, 2.0]])}[kind]
    problem = Problem("a", diffusion=diffusion)
    checked = np.abs(problem.diffusion_at(x)).sum(axis=2).max(axis=1)
    assert np.array_equal(row_sum_bound(problem.diffusion_values_at(x)), checked)
    bad = Problem("bad", diffusion=lambda x: np.full(len(x), np.nan))
    with pytest.raises(ProblemError, match="diffusion returned NaN"):
        bad.diffusion_values_at(x)
    wrong = Problem("wrong", diffusion=lambda x: np.ones((len(x), 3)))
    with pytest.raises(ProblemError, match="diffusion returned shape"):
        wrong.diffusion_values_at(x)


def test_a_misspelled_problem_gets_the_nearest_names():
    with pytest.raises(ProblemError, match="unknown problem 'paper2d' \\(did you mean 'paper-2d'"):
        load_problem("paper2d", 2)
    with pytest.raises(ProblemError, match="did you mean 'change-of-type'"):
        builtin_problem("change_of_type", 2)
    with pytest.raises(ProblemError) as caught:
        load_problem("xyzzy", 2)
    assert "did you mean" not in str(caught.value)


def test_a_polynomial_at_a_point_is_the_same_however_many_points_come_at_once():
    # the ranks evaluate the load's points in other batches than one process: bit for bit the same values
    from polydg.problem.polynomial import polynomial_problem

    x = np.random.default_rng(6).random((1000, 3))
    problem = polynomial_problem(3, 2, seed=4)
    for p in (problem.source, problem.exact):
        assert np.array_equal(p(x), np.concatenate([p(x[k:k + 7]) for k in range(0, len(x), 7)]))
