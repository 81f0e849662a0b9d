"""Nonlinear problems: the linearised forms, Newton's and Picard's iterations (#28).

The sided (linearised) executor is checked against the linear kernels on linear problems (its Jacobian
is the matrix, its residual K u - F), its Jacobian against central differences of its residual for every
kind of coefficient of the iterate, Newton's convergence against the quadratic rate, Picard's solution
against Newton's, and a manufactured quasilinear solution against the optimal L2 rate.
"""

from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from polydg.assembly import assemble
from polydg.errors import ProblemError, ProblemWarning
from polydg.mesh import from_spec
from polydg.nonlinear import NonlinearError, NonlinearOptions, NonlinearSystem, solve_nonlinear
from polydg.partition import agglomerate
from polydg.problem import Problem, builtin_problem
from polydg.space import DGSpace

sys.path.insert(0, str(Path(__file__).resolve().parent))


def _space(spec: str, n: int, degree, seed: int = 0) -> DGSpace:
    mesh = agglomerate(from_spec(spec), n)
    if isinstance(degree, tuple):
        degree = np.random.default_rng(seed).integers(degree[0], degree[1] + 1, mesh.n_elements)
    return DGSpace(mesh, degree)


@pytest.fixture(scope="module")
def spaces():
    return {"2d": _space("square:12", 15, (1, 3)), "3d": _space("cube:3", 8, (1, 2))}


@pytest.mark.parametrize("dim,name", [("2d", "paper-2d"), ("2d", "advection"), ("2d", "change-of-type"),
                                      ("2d", "neumann"), ("3d", "paper-3d"), ("3d", "poisson")])
def test_linearised_forms_of_a_linear_problem_are_its_matrix_and_load(spaces, dim, name):
    space = spaces[dim]
    problem = builtin_problem(name, space.mesh.dim)
    linear = assemble(space, problem)
    u = np.random.default_rng(1).standard_normal(space.n_dofs)
    lin = NonlinearSystem(space, problem).linearize(u)
    A = linear.matrix
    assert abs(lin.jacobian - A).max() <= 1e-13 * abs(A).max()
    r = A @ u - linear.rhs
    assert np.abs(lin.residual - r).max() <= 1e-13 * np.abs(r).max()


def _kinds(d: int) -> dict[str, Problem]:
    eye = np.eye(d)
    return {
        "a(u)": Problem("a(u)", diffusion=lambda x, u: 1 + u**2, source=lambda x: np.sin(3 * x[:, 0]),
                        dirichlet=lambda x: x[:, 0]),
        "A(u) tensor": Problem("A(u)", diffusion=lambda x, u: (1 + u**2)[:, None, None] * eye
                               + 0.3 * np.exp(u)[:, None, None] * np.ones((d, d)) / d, dirichlet=0.5),
        "c(u), f(u)": Problem("cf", diffusion=1.0, reaction=lambda x, u: 3 * u**2,
                              source=lambda x, u: np.exp(0.3 * u) + x[:, 0]),
        "a(u, grad u)": Problem("plap", diffusion=lambda x, u, grad_u: np.sqrt(1 + (grad_u**2).sum(1)) + 0.1 * u**2,
                                source=1.0, dirichlet=lambda x: x[:, 1]),
        "given derivatives": Problem("given", diffusion=lambda x, u: 1 + u**2, diffusion_du=lambda x, u: 2 * u,
                                     reaction=lambda x, u: u**2, reaction_du=lambda x, u: 2 * u, source=1.0),
        "advection, Neumann": Problem("adv", diffusion=lambda x, u: 0.1 * (1 + u**2), advection=np.ones(d) * 0.7,
                                      reaction=lambda x, u: u**2, dirichlet=1.0,
                                      is_neumann=lambda x, n: x[:, 0] > 0.99, neumann=0.2),
    }


@pytest.mark.parametrize("dim", ["2d", "3d"])
@pytest.mark.parametrize("kind", list(_kinds(2)))
def test_jacobian_is_the_derivative_of_the_residual(spaces, dim, kind):
    space = spaces[dim]
    problem = _kinds(space.mesh.dim)[kind]
    system = NonlinearSystem(space, problem)
    rng = np.random.default_rng(2)
    u = 0.5 * rng.standard_normal(space.n_dofs)
    lin = system.linearize(u)
    du = rng.standard_normal(space.n_dofs)
    h = 1e-5

    def R(v):  # the penalty frozen, as the Jacobian has it
        return system.linearize(v, want_jacobian=False, face_penalty=lin.face_penalty).residual

    fd = (R(u + h * du) - R(u - h * du)) / (2 * h)
    Jd = lin.jacobian @ du
    assert np.abs(fd - Jd).max() <= 1e-6 * np.abs(Jd).max()


def test_a_kept_system_linearises_again_as_a_fresh_one_and_keeps_nothing_it_returned(spaces):
    """The executor's per-point buffers serve every chunk and every iterate: each linearisation equals a
    fresh system's bit for bit, whatever the chunks, and the next one overwrites nothing returned."""
    space = spaces["3d"]
    problem = _kinds(3)["a(u)"]
    kept = NonlinearSystem(space, problem, memory_budget_mb=0.05)
    assert len(kept.executor.chunks) > 2
    u1, u2 = 0.5 * np.random.default_rng(5).standard_normal((2, space.n_dofs))
    first = kept.linearize(u1)
    J1, r1 = first.jacobian.data.copy(), first.residual.copy()
    second = kept.linearize(u2)
    assert np.array_equal(first.jacobian.data, J1) and np.array_equal(first.residual, r1)
    assert not np.shares_memory(first.jacobian.data, second.jacobian.data)
    for other in (NonlinearSystem(space, problem, memory_budget_mb=0.05), NonlinearSystem(space, problem)):
        fresh = other.linearize(u2)
        assert fresh.jacobian.data.tobytes() == second.jacobian.data.tobytes()
        assert fresh.residual.tobytes() == second.residual.tobytes()
    again = kept.linearize(u1)
    assert again.jacobian.data.tobytes() == J1.tobytes() and again.residual.tobytes() == r1.tobytes()


def test_values_of_x_alone_are_kept_from_one_iterate_to_the_next(spaces):
    """Coefficients free of u (here the advection b(x) = x, f and g_D) are computed once per system and
    batch of points (as many as the limit holds): a later iterate equals a fresh system's bit for bit."""
    space = spaces["2d"]
    problem = Problem("b = x", diffusion=lambda x, u: 0.1 * (1 + u**2), advection=lambda x: x,
                      source=lambda x: np.cos(2 * x[:, 1]), dirichlet=lambda x: x[:, 0])
    kept = NonlinearSystem(space, problem, memory_budget_mb=0.05)
    assert len(kept.executor.chunks) > 2
    u1, u2 = 0.5 * np.random.default_rng(7).standard_normal((2, space.n_dofs))
    kept.linearize(u1)
    assert kept.executor.x_only.nbytes > 0
    later = kept.linearize(u2)
    fresh = NonlinearSystem(space, problem, memory_budget_mb=0.05).linearize(u2)
    assert later.jacobian.data.tobytes() == fresh.jacobian.data.tobytes()
    assert later.residual.tobytes() == fresh.residual.tobytes()


@pytest.mark.parametrize("dim", ["2d", "3d"])
def test_a_scalar_diffusion_linearises_as_the_tensor_a_times_the_identity(spaces, dim):
    """A scalar a(u) is kept as one number per point, the tensor a(u) I as d x d: the same Jacobian and residual."""
    space = spaces[dim]
    d = space.mesh.dim

    def problem(diffusion):
        return Problem("a", diffusion=diffusion, source=lambda x: np.sin(3 * x[:, 0]), dirichlet=lambda x: x[:, 1])

    scalar = problem(lambda x, u: 1 + u**2 + 0.1 * np.sin(u))
    tensor = problem(lambda x, u: (1 + u**2 + 0.1 * np.sin(u))[:, None, None] * np.eye(d))
    u = 0.5 * np.random.default_rng(6).standard_normal(space.n_dofs)
    for newton in (True, False):
        a = NonlinearSystem(space, scalar).linearize(u, newton=newton)
        b = NonlinearSystem(space, tensor).linearize(u, newton=newton)
        assert np.array_equal(a.jacobian.data, b.jacobian.data) and np.array_equal(a.residual, b.residual)
        assert np.abs(a.jacobian.data).max() > 0


def _manufactured() -> Problem:
    def exact(x):
        return np.sin(np.pi * x[:, 0]) * np.sin(np.pi * x[:, 1]) + x[:, 0]

    def gradient(x):
        s, c, X, Y = np.sin, np.cos, np.pi * x[:, 0], np.pi * x[:, 1]
        return np.stack([np.pi * c(X) * s(Y) + 1, np.pi * s(X) * c(Y)], 1)

    def source(x):  # -div((1 + u^2) grad u)
        u, g = exact(x), gradient(x)
        lap = -2 * np.pi**2 * np.sin(np.pi * x[:, 0]) * np.sin(np.pi * x[:, 1])
        return -((1 + u**2) * lap + 2 * u * (g**2).sum(1))

    return Problem("quasilinear", diffusion=lambda x, u: 1 + u**2, source=source, dirichlet=exact, exact=exact,
                   exact_gradient=gradient)


def test_newton_converges_quadratically_and_picard_reaches_the_same_solution():
    space = _space("square:32", 100, 2)
    problem = _manufactured()
    newton = solve_nonlinear(space, problem)
    r = np.array(newton.residuals) / newton.residuals[0]
    # the last step that stays above round-off: log r_{k+1} / log r_k near 2; the one after reaches round-off
    k = int(np.flatnonzero(r > 1e-13)[-1])
    assert 2 <= k < len(r) - 1 and r[k + 1] < 1e-13, r
    ratio = np.log(r[k]) / np.log(r[k - 1])
    assert 1.6 < ratio < 2.6, r
    picard = solve_nonlinear(space, problem, method="picard", max_iterations=60)
    assert picard.iterations > newton.iterations
    assert np.abs(picard.solution - newton.solution).max() <= 1e-8 * np.abs(newton.solution).max()


def test_a_linear_problem_through_the_nonlinear_path_gives_the_linear_solution():
    from polydg.solve import solve

    space = _space("square:12", 15, 2)
    problem = builtin_problem("paper-2d", 2)
    linear = assemble(space, problem)
    x, _ = solve(linear.matrix, linear.rhs)
    result = solve_nonlinear(space, problem)
    assert result.iterations == 1
    assert np.abs(result.solution - x).max() <= 1e-10 * np.abs(x).max()


def test_a_nonlinear_problem_is_not_assembled_once():
    space = _space("square:8", 6, 1)
    with pytest.raises(ProblemError, match="depends on the iterate.*solve_nonlinear"):
        assemble(space, _manufactured())


def test_a_diverging_newton_is_one_line():
    space = _space("square:8", 6, 1)
    blowup = Problem("blowup", diffusion=1.0, source=lambda x, u: 50 * np.exp(u**2))  # no solution
    with pytest.raises(NonlinearError, match="(diverged|did not converge)") as info:
        solve_nonlinear(space, blowup, max_iterations=8)
    assert "\n" not in str(info.value)


def test_complex_step_needs_an_analytic_callable():
    space = _space("square:8", 6, 1)
    rough = Problem("rough", diffusion=lambda x, u: 1 + np.abs(u), source=1.0)
    with pytest.raises(ProblemError, match="complex step.*diffusion_du"):
        solve_nonlinear(space, rough)
    given = Problem("rough", diffusion=lambda x, u: 1 + np.abs(u), diffusion_du=lambda x, u: np.sign(u), source=1.0)
    assert solve_nonlinear(space, given).residuals[-1] < 1e-9 * solve_nonlinear(space, given).residuals[0]
    # complex at real arguments (log of a negative number): refused, not its real part taken as the value
    tensor = lambda x, u: np.sqrt(u - 1 + 0j)[:, None, None] * np.eye(2)  # noqa: E731
    for name, problem in (("source", Problem("log", diffusion=1.0, source=lambda x, u: np.log(u - 1))),
                          ("diffusion", Problem("root", diffusion=lambda x, u: np.sqrt(u - 2 + 0j), source=1.0)),
                          ("diffusion", Problem("tensor", diffusion=tensor, source=1.0))):
        message = fr"{name} is not real at 512 of 512 points \(e.g. .* at u = 0\): a logarithm or root"
        with pytest.raises(ProblemError, match=message):
            solve_nonlinear(space, problem)
    # ... but a real one whose derivative is large is not (its complex step's imaginary part is h f')
    from polydg.problem.iterate import scalar_at_iterate

    steep = Problem("steep", diffusion=1.0, reaction=lambda x, u: 1e20 * u, source=1.0)
    value, du = scalar_at_iterate(steep, "reaction", np.zeros((4, 2)), u=np.zeros(4), grad_u=np.zeros((4, 2)))
    assert value.tolist() == [0.0] * 4 and du.tolist() == [1e20] * 4



@pytest.mark.parametrize("choice, message", [({"approach": "1"}, "by row kernels \\(approach 2\\), not approach '1'"),
                                             ({"precision": "single"}, "in double precision")])
def test_an_option_the_linearisation_cannot_follow_is_refused_not_ignored(choice, message):
    from polydg.errors import OptionError

    with pytest.raises(OptionError, match=message):
        solve_nonlinear(_space("square:4", 4, 1), builtin_problem("quasilinear", 2), **choice)


def test_backtracking_measures_the_residual_that_the_newton_step_linearises():
    """a = 1 + u^2 with u = 1 + x + 2y (up to 4) moves sigma (from a_K at the iterate) a lot along a step:
    backtracking with the iterate's own sigma converges in 7 iterations (with sigma moving along the line
    it took 15, nine of them steps of 1/64 while the residual rose)."""
    from polydg.solve import errors

    exact = lambda x: 1 + x[:, 0] + 2 * x[:, 1]  # noqa: E731
    gradient = lambda x: np.tile([1.0, 2.0], (len(x), 1))  # noqa: E731
    problem = Problem("linear-neumann", diffusion=lambda x, u: 1 + u**2, source=lambda x: -10 * exact(x),
                      dirichlet=exact, neumann=lambda x, n: (1 + exact(x)**2) * (gradient(x) * n).sum(axis=1),
                      is_neumann=lambda x, n: np.abs(x[:, 0] - 1) < 1e-12, exact=exact, exact_gradient=gradient)
    space = _space("square:8", 16, 1)
    result = solve_nonlinear(space, problem)
    assert result.iterations <= 8 and min(result.steps) >= 0.25, (result.iterations, result.steps)
    assert max(errors(space, problem, result.solution).values()) < 1e-12


@pytest.mark.parametrize("name", ["quasilinear", "p-laplacian-type"])
def test_error_norms_of_a_nonlinear_problem_take_its_diffusion_at_the_exact_solution(spaces, name):
    from polydg.solve import errors

    space = spaces["2d"]
    problem = builtin_problem("quasilinear", 2)
    if name != "quasilinear":  # a(grad u): the exact gradient too
        problem = Problem(name, diffusion=lambda x, u, grad_u: 1 + (grad_u**2).sum(axis=1), exact=problem.exact,
                          exact_gradient=problem.exact_gradient)
    frozen = Problem("frozen", exact=problem.exact, exact_gradient=problem.exact_gradient,
                     diffusion=lambda x: problem.diffusion_at(x, u=problem.exact_at(x),
                                                              grad_u=problem.exact_gradient_at(x)))
    v = np.random.default_rng(2).standard_normal(space.n_dofs)
    assert errors(space, problem, v) == errors(space, frozen, v)


@pytest.mark.slow
def test_manufactured_quasilinear_solution_converges_at_the_optimal_rate():
    from polydg.solve import errors

    problem = _manufactured()
    for p in (1, 2):
        l2 = []
        for N, n in ((16, 25), (32, 100), (64, 400)):
            space = _space(f"square:{N}", n, p)
            u = solve_nonlinear(space, problem).solution
            linear_view = Problem("e", diffusion=1.0, exact=problem.exact, exact_gradient=problem.exact_gradient)
            l2.append(errors(space, linear_view, u)["l2"])
        rates = np.log2(np.array(l2[:-1]) / np.array(l2[1:]))
        assert rates[-1] > p + 1 - 0.3, (p, l2, rates)


def test_gpu_executor_on_the_simulator_equals_the_cpu(tmp_path):
    """The device executor (numba-cuda kernels, run by the simulator in a subprocess) against the CPU's, to
    1e-13 of the largest entry; its row kernels bitwise repeatable."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    out = tmp_path / "cases.npz"
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1",
               PYTHONPATH=str(repo) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    run = subprocess.run([sys.executable, str(repo / "tests" / "nonlinear_simulator_cases.py"), str(out)], env=env,
                         capture_output=True, text=True, timeout=600, cwd=repo)
    assert run.returncode == 0, run.stdout + run.stderr
    _equal_to_the_cpu(dict(np.load(out)))


def test_gpu_executor_on_the_test_backend_equals_the_cpu():
    """The same cases run in this process by the device executor of POLYDG_TEST_BACKEND (cupy on a GPU,
    cudasim under the simulator): what the GPU run's test stage checks on the card."""
    import os

    import nonlinear_simulator_cases as cases

    backend = os.environ.get("POLYDG_TEST_BACKEND", "numpy")
    if backend == "numpy":
        pytest.skip("POLYDG_TEST_BACKEND is numpy: no device executor to test (the simulator's test covers it)")
    _equal_to_the_cpu(cases.linearized(backend))


def _equal_to_the_cpu(got: dict) -> None:
    """The device's linearisations of every case (``nonlinear_simulator_cases.linearized``) against the CPU
    executor's, to 1e-13 of the largest entry; the device's row kernels bitwise repeatable."""
    import nonlinear_simulator_cases as cases

    for name in cases.CASES:
        space, problem, u = cases.case_setup(name)
        system = NonlinearSystem(space, problem, backend="numpy")
        for newton in (True, False):
            lin = system.linearize(u, newton=newton)
            assert lin.info["to_device"]["copies"] == 0  # the CPU executor: nothing crosses
            key = f"{name}-{'newton' if newton else 'picard'}"
            scale = np.abs(lin.jacobian.data).max()
            assert np.abs(got[key + "-data"] - lin.jacobian.data).max() <= 1e-13 * scale, key
            assert np.abs(got[key + "-residual"] - lin.residual).max() <= 1e-13 * np.abs(lin.residual).max(), key
        assert np.array_equal(got[name + "-again"], got[f"{name}-newton-data"])


def test_command_line_runs_newton_and_reports_the_iteration(tmp_path, capsys):
    import json

    from polydg.cli import main

    summary = tmp_path / "run.json"
    args = ["--problem", "quasilinear", "--mesh", "square:16", "--agglomerate", "20", "--degree", "1"]
    assert main(args + ["--json", str(summary)]) == 0
    err = capsys.readouterr().err
    assert "newton 1: residual" in err and "newton converged in" in err
    record = json.loads(summary.read_text())["nonlinear"]
    assert record["method"] == "newton" and record["iterations"] == len(record["updates"]) >= 3
    assert record["residuals"][-1] <= 1e-10 * record["residuals"][0]
    assert set(record["seconds"][0]) == {"assembly", "solve", "line_search"}
    # a step's seconds hold its new iterate's assembly: u_0's is apart, so every residual's assembly is counted
    assert len(record["seconds"]) == len(record["residuals"]) - 1 and record["first_assembly_seconds"] > 0
    assert main(args + ["--nonlinear", "picard", "--json", str(summary), "--quiet"]) == 0
    picard = json.loads(summary.read_text())
    assert picard["nonlinear"]["method"] == "picard" and picard["nonlinear"]["iterations"] > record["iterations"]
    assert "errors" in picard
    # no convergence: one line, exit 2
    capsys.readouterr()
    assert main(args + ["--max-iterations", "2", "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "did not converge in 2 iterations" in err


def test_jacobian_on_a_space_time_slab():
    """A slab of a space-time problem with a(u) and c(u): the Jacobian against central differences."""
    from polydg.space import DGSpace as Space
    from polydg.spacetime.problem import slab_problem
    from polydg.spacetime.slab import slab_mesh

    mesh = agglomerate(from_spec("square:4"), 5)
    problem = Problem("slab", diffusion=lambda y, u: 0.1 * (1 + u**2), reaction=lambda y, u: u**2 - 1.0,
                      advection=np.array([0.3, 0.2]), dirichlet=1.0, initial=0.5, space_time=True)
    slab = slab_problem(problem, 2, 0.0, 0.1)
    space = Space(slab_mesh(mesh, 0.0, 0.1), np.random.default_rng(0).integers(1, 3, mesh.n_elements))
    system = NonlinearSystem(space, slab)
    rng = np.random.default_rng(5)
    u = 0.5 * rng.standard_normal(space.n_dofs)
    lin = system.linearize(u)
    du = rng.standard_normal(space.n_dofs)
    h = 1e-5
    R = lambda v: system.linearize(v, want_jacobian=False, face_penalty=lin.face_penalty).residual  # noqa: E731
    fd = (R(u + h * du) - R(u - h * du)) / (2 * h)
    assert np.abs(fd - lin.jacobian @ du).max() <= 1e-6 * np.abs(lin.jacobian @ du).max()


def test_fisher_kpp_march_converges_at_the_optimal_rate_with_newton_per_slab():
    """2D + 1, p = 1, space and time refined together: the L2 error at T falls at rate about 2; each slab's
    Newton converges in a few iterations; a 3D + 1 march runs too."""
    from polydg.spacetime import march

    problem = builtin_problem("fisher-kpp", 2)
    errors = []
    for spec, n, slabs in (("square:8", 16, 4), ("square:16", 64, 8)):
        result = march(agglomerate(from_spec(spec), n), problem, 1, n_slabs=slabs, final_time=0.5)
        assert max(result.info["nonlinear_iterations_per_slab"]) <= 5
        errors.append(result.errors["l2"])
    assert np.log2(errors[0] / errors[1]) > 1.6, errors
    result = march(agglomerate(from_spec("cube:2"), 4), builtin_problem("fisher-kpp", 3), 1, n_slabs=2,
                   final_time=0.2, nonlinear=NonlinearOptions(method="picard", max_iterations=40))
    assert result.errors["l2"] < 0.5 and len(result.info["nonlinear_iterations_per_slab"]) == 2
    # u = 0 solves each slab at once (no data, a reaction u^2): no step, and the slab's assembly time is u_0's
    still = Problem("still", diffusion=1.0, reaction=lambda y, u: u, dirichlet=0.0, dim=2, space_time=True,
                    initial=lambda x: 0.0 * x[:, 0])
    result = march(agglomerate(from_spec("square:4"), 6), still, 1, n_slabs=2, final_time=0.2)
    assert result.info["nonlinear_iterations_per_slab"] == [0, 0] and np.all(result.solution == 0.0)
    assert all(t["total_assembly"] > 0.0 for t in result.timings)


REPO = Path(__file__).resolve().parents[1]


def _on_ranks(ranks: int, *args, timeout: float = 600) -> subprocess.CompletedProcess:
    """``mpiexec -n ranks python ARGS`` from the checkout, a thread per rank (skipped without mpi4py or mpiexec)."""
    import os
    import shutil

    pytest.importorskip("mpi4py")
    mpiexec = shutil.which("mpiexec")
    if mpiexec is None:
        pytest.skip("mpiexec not found (pip install 'polydg[mpi]')")
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("NUMBA_NUM_THREADS", None)
    return subprocess.run([mpiexec, "-n", str(ranks), sys.executable, *map(str, args)], capture_output=True,
                          text=True, timeout=timeout, env=env, cwd=REPO)


@pytest.mark.parametrize("ranks", [2, 4])
def test_ranks_gather_the_one_process_jacobian_and_residual_bit_for_bit(tmp_path, ranks):
    run = _on_ranks(ranks, REPO / "tests" / "mpi_nonlinear_cases.py", tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    import mpi_nonlinear_cases as cases
    for name, space, problem in cases.case_spaces():
        system = NonlinearSystem(space, problem)
        u = cases.iterate(space)
        lin = system.linearize(u)
        got = np.load(tmp_path / f"{name}-linearised.npz")
        assert np.array_equal(got["indptr"], lin.jacobian.indptr) and np.array_equal(got["indices"],
                                                                                     lin.jacobian.indices)
        assert np.array_equal(got["data"], lin.jacobian.data), name
        assert np.array_equal(got["residual"], lin.residual), name
        assert np.array_equal(got["own"], lin.info["penalty_at_iterate"]), name
        alone = system.linearize(u, want_jacobian=False, face_penalty=lin.face_penalty)
        assert np.array_equal(got["residual_alone"], alone.residual)
        solution = np.load(tmp_path / f"{name}-solution.npz")["solution"]
        one = solve_nonlinear(space, problem).solution
        assert np.abs(solution - one).max() <= 1e-12 * np.abs(one).max()


@pytest.mark.parametrize("ranks", [2, 3])
def test_each_rank_is_sent_only_the_entries_of_u_and_sigma_its_part_reads(tmp_path, ranks):
    import json

    run = _on_ranks(ranks, REPO / "tests" / "mpi_nonlinear_cases.py", tmp_path, "pieces")
    assert run.returncode == 0, run.stderr[-3000:]
    for name, per_rank in json.loads((tmp_path / "pieces.json").read_text()).items():
        assert len(per_rank) == ranks
        for r, got in enumerate(per_rank):
            assert got["u"] and got["sigma"] and got["u_alone"], (name, r)
            assert got["jacobian"] and got["residual"], (name, r)
            assert got["sizes"][0] <= got["whole"][0] and got["sizes"][1] < got["whole"][1], (name, r, got)
        # a rank whose halo reaches every element reads all of u; together the ranks read less than a broadcast
        assert sum(got["sizes"][0] for got in per_rank) < ranks * per_rank[0]["whole"][0], name


FAILING_ON_RANK_1 = """
import os
from polydg.problem import Problem

def diffusion(x, u, grad_u):
    if os.environ.get("PMI_RANK") == "1" and len(x) > 50:  # in the linearisation, before the penalty's exchange
        raise ValueError("diffusion failed on purpose")
    return 1.0 + u**2

problem = Problem("failing", diffusion=diffusion, source=1.0, dirichlet=0.0, dim=2)
"""


def test_a_coefficient_failing_on_one_rank_while_linearising_ends_every_rank(tmp_path):
    """Rank 1's diffusion raises before its rows reach the penalty's halo exchange, where rank 0 waits: the
    exchange first meets the failed rank's phase end (polydg.distributed.comm.collective_phase), and every rank
    ends with the one line (it hung until killed before)."""
    (tmp_path / "failing.py").write_text(FAILING_ON_RANK_1)
    run = _on_ranks(2, "-m", "polydg.assemble", "--problem", f"{tmp_path / 'failing.py'}:problem", "--mesh",
                    "square:12", "--agglomerate", "20", "--degree", "1", timeout=120)
    ours = [line for line in run.stderr.splitlines() if line.startswith("polydg.assemble")]
    assert run.returncode == 2 and len(ours) == 1 and "Traceback" not in run.stderr, run.stderr[-2000:]
    assert ours[0].startswith("polydg.assemble: error: rank 1: problem 'failing': diffusion raised ValueError")
    assert ours[0].endswith("diffusion failed on purpose")


def test_command_line_on_two_ranks_solves_as_one_process(tmp_path):
    import json

    from polydg.cli import main

    args = ["--problem", "quasilinear", "--mesh", "square:12", "--agglomerate", "20", "--degree", "1:2"]
    run = _on_ranks(2, "-m", "polydg.assemble", *args, "--json", tmp_path / "ranks.json")
    assert run.returncode == 0, run.stderr[-3000:]
    assert "each row is its slowest rank's (the rows need not add up); load balance" in run.stdout
    assert "errors: l2" in run.stdout and " newton linearisations ('indices': the plan, made once)" in run.stdout
    args.append("--quiet")
    assert main(args + ["--json", str(tmp_path / "one.json")]) == 0
    ranks, one = (json.loads((tmp_path / f"{n}.json").read_text()) for n in ("ranks", "one"))
    assert ranks["ranks"] == 2 and ranks["nonlinear"]["iterations"] == one["nonlinear"]["iterations"]
    assert ranks["nonlinear"]["residuals"] == one["nonlinear"]["residuals"]  # the same iterates, bit for bit
    assert ranks["errors"] == one["errors"]
    # the last linearisation per rank, as a linear run on ranks reports it
    assert [r["elements"] for r in ranks["per_rank"]] and sum(r["elements"] for r in ranks["per_rank"]) == 20
    assert len(ranks["timings_per_rank"]) == 2 and ranks["balance"]["nnz"] >= 1.0
    assert ranks["timings"]["total_assembly"] == max(t["total_assembly"] for t in ranks["timings_per_rank"])


def test_degree_zero_under_a_nonlinear_diffusion_is_said_once(monkeypatch):
    """A nonlinear system of degree 0 with a diffusion warns as the assembly does (the penalty alone couples the
    elements), once a process; a reaction alone says nothing."""
    from polydg.assembly import assembler

    monkeypatch.setitem(assembler._SAID, "degree 0", False)
    space = DGSpace(agglomerate(from_spec("square:4"), 6), 0)
    with pytest.warns(ProblemWarning, match="degree 0 with a diffusion"):
        NonlinearSystem(space, builtin_problem("quasilinear", 2))
    with warnings.catch_warnings():
        warnings.simplefilter("error", ProblemWarning)
        NonlinearSystem(space, builtin_problem("quasilinear", 2))  # said already
        monkeypatch.setitem(assembler._SAID, "degree 0", False)
        NonlinearSystem(space, Problem("reaction", reaction=lambda x, u: 1.0 + u**2, source=1.0))
