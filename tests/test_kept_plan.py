"""A kept plan (``Assembler``): a later assembly is bitwise a fresh one, and rebuilds nothing of the plan."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import polydg.assembly.assembler as assembler_module
import polydg.assembly.plan as plan_module
from polydg.assembly import Assembler, AssemblyOptions, AssemblyScope, assemble
from polydg.errors import OptionError, PolyDGError
from polydg.mesh import from_spec
from polydg.nonlinear import NonlinearSystem
from polydg.partition import agglomerate
from polydg.problem import Problem, builtin_problem
from polydg.problem.data import ElementData
from polydg.space import DGSpace

from .gpu_simulator_cases import all_kinds_problem

# the meshes of test_assembly.py (small; the kernels they compile are the suite's)
MESH = {2: agglomerate(from_spec("square:8:perturb=0.2:seed=3"), 12),
        3: agglomerate(from_spec("cube:3:perturb=0.15:seed=1"), 10)}


def _space(d: int, degrees: str) -> DGSpace:
    mesh = MESH[d]
    if degrees == "p1":
        return DGSpace(mesh, 1)
    degree = np.random.default_rng(d).integers(1, 3 if d == 3 else 4, size=mesh.n_elements)
    degree[0], degree[-1] = 1, degree.max()
    return DGSpace(mesh, degree)


def _other_problem(d: int) -> Problem:
    """Other coefficients on the same space: a scalar diffusion of x, an advection, Dirichlet data only."""
    return Problem(name="other", diffusion=lambda x: 2.0 + x[:, 0] * x[:, -1], advection=np.array([0.5, 1.0, -0.25][:d]),
                   reaction=0.5, source=lambda x: x[:, 0] ** 2, dirichlet=lambda x: np.cos(x[:, 1]), dim=d)


def _bits(a: np.ndarray) -> bytes:
    return np.ascontiguousarray(a).tobytes()


def assert_bitwise(got, fresh) -> None:
    """Matrices (values, indices, row pointers), loads and penalties bit for bit."""
    assert (got.matrix is None) == (fresh.matrix is None)
    if got.matrix is not None:
        assert got.matrix.dtype == fresh.matrix.dtype and got.matrix.shape == fresh.matrix.shape
        for name in ("data", "indices", "indptr"):
            assert _bits(getattr(got.matrix, name)) == _bits(getattr(fresh.matrix, name)), name
    assert got.rhs.dtype == fresh.rhs.dtype and _bits(got.rhs) == _bits(fresh.rhs)
    assert _bits(got.face_penalty) == _bits(fresh.face_penalty)


VARIANTS = {
    "2": {"approach": "2"},
    "atomic": {"approach": "atomic"},
    "1": {"approach": "1"},
    "2-single": {"approach": "2", "precision": "single"},
    "atomic-single": {"approach": "atomic", "precision": "single"},
    "2-chunks": {"approach": "2", "memory_budget_mb": 0.02},
    "atomic-chunks": {"approach": "atomic", "memory_budget_mb": 0.02},
    "paper-penalty": {"approach": "2", "penalty_kind": "paper", "penalty": 7.0, "quadrature_extra": 1},
}


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("degrees", ["p1", "mixed"])
@pytest.mark.parametrize("d", [2, 3])
def test_later_assemblies_are_fresh_ones_bitwise(d, degrees, variant):
    space, options = _space(d, degrees), VARIANTS[variant]
    # a budget of several chunks is below the points' bytes: kept all the same, to test their chunks
    assembler = Assembler(space, keep_points=True if "chunks" in variant else None, **options)
    problems = [all_kinds_problem(d), _other_problem(d), builtin_problem("change-of-type", d), all_kinds_problem(d)]
    for k, problem in enumerate(problems):
        result = assembler.assemble(problem)
        assert_bitwise(result, assemble(space, problem, **options))
        assert result.info["plan"]["made"] is (k == 0)
        assert result.info["plan"]["points"] == "kept"
        if k:
            assert result.info["timings"]["indices"] == 0.0 or options["approach"] == "1"  # 1: SciPy's own CSR
    assert assembler.assemble(problems[0]).info["plan"]["points_bytes"] > 0


@pytest.mark.parametrize("d", [2, 3])
def test_every_builtin_boundary_kind_through_one_assembler(d):
    space = _space(d, "mixed")
    assembler = Assembler(space)
    for name in ("paper", "neumann", "change-of-type", "advection", "poisson"):
        problem = builtin_problem(name, d)
        assert_bitwise(assembler.assemble(problem), assemble(space, problem))


def test_loads_alone_from_a_kept_assembler():
    space = _space(2, "mixed")
    problem, other = all_kinds_problem(2), _other_problem(2)
    loads = Assembler(space)  # a load first: a pattern of rows only
    assert_bitwise(loads.assemble(problem, matrix=False), assemble(space, problem, matrix=False))
    assert_bitwise(loads.assemble(problem), assemble(space, problem))  # then the matrix: its full pattern
    assert_bitwise(loads.assemble(other, matrix=False), assemble(space, other, matrix=False))  # on the full one
    # a slab's load without some boundary faces, with a given penalty: a scope fixed at construction
    faces = space.mesh.face_normal[:, 0] < 0.5
    scope = AssemblyScope(face_penalty=np.full(space.mesh.n_faces, 3.0), load_boundary_faces=faces)
    kept = Assembler(space, scope=scope)
    for p in (problem, other):
        assert_bitwise(kept.assemble(p, matrix=False), assemble(space, p, matrix=False, scope=scope))
    # the mask takes each boundary face's terms in or out: L(M) + L(not M) = L(every face) + L(no face)
    def load(mask):
        return assemble(space, problem, matrix=False,
                        scope=AssemblyScope(face_penalty=scope.face_penalty, load_boundary_faces=mask)).rhs

    every, none_ = load(np.ones_like(faces)), load(np.zeros_like(faces))
    assert np.abs(load(faces) - every).max() > 1e-3 * np.abs(every).max()
    np.testing.assert_allclose(load(faces) + load(~faces), every + none_, rtol=0, atol=1e-13 * np.abs(every).max())
    # and the mask names the faces taken in: an element whose boundary faces are all left out gets no boundary term
    mesh = space.mesh
    on_boundary = mesh.face_elements[:, 1] < 0
    owner = mesh.face_elements[on_boundary, 0]
    taken = np.bincount(owner, weights=faces[on_boundary], minlength=mesh.n_elements)
    left_out = np.flatnonzero((taken == 0) & (np.bincount(owner, minlength=mesh.n_elements) > 0))
    assert len(left_out) > 0
    rows = np.concatenate([np.arange(space.dof_offsets[e], space.dof_offsets[e + 1]) for e in left_out])
    np.testing.assert_allclose(load(faces)[rows], none_[rows], rtol=0, atol=1e-13 * np.abs(every).max())
    assert np.abs(every[rows] - none_[rows]).max() > 1e-3 * np.abs(every).max()  # they do have boundary terms
    with pytest.raises(OptionError, match="load_boundary_faces is for the load alone"):
        kept.assemble(problem)


@pytest.mark.parametrize("approach", ["2", "atomic"])
def test_a_scope_of_rows_and_penalty_scales(approach):
    space = _space(3, "mixed")
    scale = np.where(np.arange(space.mesh.n_faces) % 3 == 0, 0.0, 1.5)
    scope = AssemblyScope(elements=np.array([1, 2, 4, 7]), face_penalty_scale=scale)
    assembler = Assembler(space, scope=scope, approach=approach)
    for problem in (all_kinds_problem(3), _other_problem(3)):
        assert_bitwise(assembler.assemble(problem), assemble(space, problem, scope=scope, approach=approach))


def test_data_per_element_goes_to_the_sided_executor_on_the_kept_layout():
    space = _space(2, "mixed")
    n = space.mesh.n_elements
    assembler = Assembler(space)
    for k in (1.0, 3.0):
        problem = Problem("layers", diffusion=ElementData(k + np.arange(n)), source=1.0, dim=2)
        got = assembler.assemble(problem)
        assert got.info["executor"] == "sided" and got.info["plan"]["made"] is (k == 1.0)
        assert_bitwise(got, assemble(space, problem))
    assert_bitwise(assembler.assemble(_other_problem(2)), assemble(space, _other_problem(2)))


def test_points_past_the_allowance_are_recomputed():
    space = _space(2, "p1")
    for keep, points in ((None, "recomputed"), (True, "kept")):  # a budget far below the points' bytes
        assembler = Assembler(space, memory_budget_mb=1e-3, keep_points=keep)
        for problem in (all_kinds_problem(2), _other_problem(2)):
            result = assembler.assemble(problem)
            assert result.info["plan"]["points"] == points
            assert_bitwise(result, assemble(space, problem, memory_budget_mb=1e-3))
    assert assemble(space, _other_problem(2)).info["plan"]["points"] == "recomputed"  # one assembly keeps none


def test_a_later_assembly_rebuilds_nothing_of_the_plan(monkeypatch):
    space = _space(2, "mixed")
    assembler = Assembler(space)
    first = assembler.assemble(all_kinds_problem(2))
    pattern, weights = assembler.layout().pattern, assembler.weights
    calls = []

    def counted(name, function):
        def wrapper(*args, **kwargs):
            calls.append(name)
            return function(*args, **kwargs)
        return wrapper

    monkeypatch.setattr(plan_module, "sparsity_pattern", counted("pattern", plan_module.sparsity_pattern))
    monkeypatch.setattr(assembler_module, "layout_plan", counted("layout", assembler_module.layout_plan))
    monkeypatch.setattr(assembler_module, "penalty_weights", counted("weights", assembler_module.penalty_weights))
    import polydg.assembly.passes as passes_module

    monkeypatch.setattr(passes_module, "simplex_points", counted("points", passes_module.simplex_points))
    later = assembler.assemble(_other_problem(2))
    assert calls == []
    assert assembler.layout().pattern is pattern and assembler.weights is weights
    assert later.info["timings"]["indices"] == 0.0 and first.info["timings"]["indices"] > 0.0
    assert np.shares_memory(later.matrix.indices, pattern.indices)  # the kept pattern's arrays; the values new
    assert not np.shares_memory(later.matrix.data, first.matrix.data)
    assemble(space, _other_problem(2))  # a fresh assembly makes its own plan
    assert "pattern" in calls and "layout" in calls and "weights" in calls and "points" in calls


def test_a_problem_of_another_dimension_is_refused_in_one_line():
    assembler = Assembler(_space(2, "p1"))
    with pytest.raises(PolyDGError) as error:
        assembler.assemble(all_kinds_problem(3))
    assert str(error.value) == "problem 'all-kinds' is 3D, the mesh is 2D"


def test_an_assembler_is_frozen():
    assembler = Assembler(_space(2, "p1"), approach="atomic")
    with pytest.raises(AttributeError, match="frozen"):
        assembler.options = AssemblyOptions(approach="2")
    with pytest.raises(AttributeError, match="frozen"):
        assembler._options = AssemblyOptions(approach="2")
    with pytest.raises(dataclasses.FrozenInstanceError):
        assembler.options.approach = "2"
    assert assembler.options.approach == "atomic"
    with pytest.raises(OptionError, match="unknown assembly option"):
        Assembler(_space(2, "p1"), aproach="2")
    with pytest.raises(OptionError, match="scope must be an AssemblyScope"):
        Assembler(_space(2, "p1"), scope={"elements": [0]})


@pytest.mark.parametrize("d", [2, 3])
def test_linearize_on_the_assemblers_layout_is_the_nonlinear_systems(d):
    space = _space(d, "mixed")
    problem = builtin_problem("quasilinear", d)
    u = np.random.default_rng(0).normal(size=space.n_dofs) * 0.1
    assembler = Assembler(space)
    linear = assembler.assemble(_other_problem(d))  # the layout made by a linear assembly, then linearised on
    system = NonlinearSystem(space, problem)
    for newton in (True, False):
        got, ref = assembler.linearize(problem, u, newton=newton), system.linearize(u, newton=newton)
        for name in ("data", "indices", "indptr"):
            assert _bits(getattr(got.jacobian, name)) == _bits(getattr(ref.jacobian, name))
        assert _bits(got.residual) == _bits(ref.residual) and _bits(got.face_penalty) == _bits(ref.face_penalty)
    assert assembler.linearization()[0].pattern is assembler.layout().pattern
    assert system.assembler.linearization()[0] is system.plan
    assert_bitwise(assembler.assemble(_other_problem(d)), linear)  # and the linear assembly is unchanged
    with pytest.raises(OptionError, match="double precision"):
        Assembler(space, precision="single").linearize(problem, u)
    with pytest.raises(OptionError, match="the iterate has shape"):
        assembler.linearize(problem, u[:-1])


def test_the_benchmark_runs_end_to_end(tmp_path):
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    bench = Path(__file__).resolve().parents[1] / "launch" / "bench_kept_plan.py"
    out = tmp_path / "kept.json"
    repo = str(bench.parents[1])  # this checkout's polydg
    env = dict(os.environ, PYTHONPATH=repo + os.pathsep + os.environ.get("PYTHONPATH", ""))
    run = subprocess.run([sys.executable, str(bench), "--case", "all", "--size", "4", "--repeat", "1", "--later", "2",
                          "--json", str(out)], capture_output=True, text=True, timeout=600, cwd=repo, env=env)
    assert run.returncode == 0, run.stderr
    report = json.loads(out.read_text())
    for case in ("default", "table5"):
        res = report[case]
        assert res["bitwise"] is True and res["points"] == "kept"
        assert res["later"]["seconds"]["indices"] == 0.0 < res["first"]["seconds"]["indices"]
        assert set(res["later"]["s_per_mdof"]) >= {"element_kernel", "interior_kernel", "boundary_kernel", "penalty"}
    assert report["default"]["dofs"] == 6 * report["default"]["elements"]  # p = 2 in 2D
    assert "later == fresh bit for bit: True" in run.stdout
