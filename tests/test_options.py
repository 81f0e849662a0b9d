"""The user's choices as one object, AssemblyOptions: its checks, its defaults, and every option reaching every
rank (real ``mpiexec -n 2``) and every slab of a march."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from polydg.assembly import AssemblyOptions, AssemblyScope, assemble, default_options
from polydg.assembly.options import FIELDS, assembly_options
from polydg.errors import OptionError
from polydg.spacetime import march, slab_problem

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import mpi_options_cases as cases  # noqa: E402

# ---------------------------------------------------------------------------
# the object


@pytest.mark.parametrize("changes, message", [
    ({"approach": "3"}, "unknown approach '3'; choose one of auto, 2, atomic, 1, ordered, blocks"),
    ({"precision": "half"}, "unknown precision 'half'; choose double or single"),
    ({"penalty_kind": "papr"}, "unknown penalty kind 'papr'; choose one of paper, classical"),
    ({"penalty": 0}, "penalty constant must be positive, got 0.0"),
    ({"penalty": "ten"}, "penalty constant must be positive, got 'ten'"),
    ({"penalty": "10"}, "penalty constant must be positive, got '10'"),
    ({"memory_budget_mb": True}, "memory budget must be a positive finite number, got True MB"),
    ({"quadrature_extra": -1}, "quadrature extra degree must be from 0 to 1000, got -1"),
    ({"quadrature_extra": 10**5}, "quadrature extra degree must be from 0 to 1000, got 100000"),
    ({"quadrature_extra": 1.5}, "quadrature extra degree must be an integer >= 0, got 1.5"),
    ({"memory_budget_mb": -2}, "memory budget must be a positive finite number, got -2.0 MB"),
    ({"memory_budget_mb": float("inf")}, "memory budget must be a positive finite number, got inf MB"),
    ({"backend": "opencl"}, "unknown backend 'opencl'; choose one of numpy, cupy, auto"),
    ({"approach": "1", "backend": "cupy"}, "approach '1' runs on the CPU only; on a GPU use approach 2, atomic, ordered or blocks"),
    ({"precison": "single"}, "unknown assembly option 'precison' (did you mean 'precision'?); the options are "
                             "approach, precision, penalty, penalty_kind, quadrature_extra, memory_budget_mb, backend, to_host"),
])
def test_each_bad_value_is_one_line_naming_it(changes, message):
    for make in (lambda: AssemblyOptions(**changes), lambda: AssemblyOptions().replace(**changes)):
        with pytest.raises(OptionError) as caught:  # made, or derived: checked the same way
            make()
        assert str(caught.value) == message


def test_the_memory_budget_not_given_is_the_backends():
    """A GPU's default chunk is four times the host's (fewer launches and waits per assembly); a budget given
    stays as given; ``resolved`` writes the one that runs, and an assembly reports the budget its chunks were
    cut by."""
    from polydg.assembly.options import DEFAULT_MEMORY_BUDGET_MB
    from polydg.mesh import build_polytopic_mesh, unit_square
    from polydg.problem import builtin_problem
    from polydg.space import DGSpace

    host, device = AssemblyOptions(backend="numpy"), AssemblyOptions(backend="cudasim")
    assert host.memory_budget_mb is None is device.memory_budget_mb
    assert (host.budget_mb, device.budget_mb) == (DEFAULT_MEMORY_BUDGET_MB["host"], DEFAULT_MEMORY_BUDGET_MB["device"])
    assert DEFAULT_MEMORY_BUDGET_MB["device"] > DEFAULT_MEMORY_BUDGET_MB["host"]
    assert host.resolved().memory_budget_mb == DEFAULT_MEMORY_BUDGET_MB["host"]  # the simulator's needs its switch
    assert AssemblyOptions(backend="cudasim", memory_budget_mb=3).budget_mb == 3.0
    with default_options(memory_budget_mb=16):
        assert AssemblyOptions(backend="cudasim").budget_mb == 16.0
    space = DGSpace(build_polytopic_mesh(unit_square(2)), 1)
    result = assemble(space, builtin_problem("poisson", 2), options=host)
    assert result.info["memory_budget_mb"] == DEFAULT_MEMORY_BUDGET_MB["host"]
    assert result.info["options"]["memory_budget_mb"] is None  # the user's options, as given


def test_values_are_read_as_their_kind_and_the_object_is_frozen():
    options = AssemblyOptions(approach=2, penalty=7, memory_budget_mb=1, quadrature_extra=np.int64(1))
    assert (options.approach, options.penalty, options.memory_budget_mb, options.quadrature_extra) == ("2", 7.0, 1.0, 1)
    assert type(options.quadrature_extra) is int and options.dtype == np.float64
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.penalty = 3.0
    assert options.replace(precision="single").dtype == np.float32 and options.precision == "double"
    assert options.as_dict() == {"approach": "2", "precision": "double", "penalty": 7.0, "penalty_kind": "classical",
                                 "quadrature_extra": 1, "memory_budget_mb": 1.0, "backend": "numpy",
                                 "to_host": False}
    assert json.loads(json.dumps(options.as_dict())) == options.as_dict()
    assert options == AssemblyOptions(**options.as_dict()) and len({options, options.replace()}) == 1
    assert list(options.as_dict()) == list(FIELDS)


def test_an_unknown_keyword_names_itself_the_nearest_option_and_all_of_them():
    space, problem = cases.steady_case()
    with pytest.raises(OptionError) as caught:
        assemble(space, problem, aproach="atomic")
    assert str(caught.value) == ("unknown assembly option 'aproach' (did you mean 'approach'?); the options are "
                                 "approach, precision, penalty, penalty_kind, quadrature_extra, memory_budget_mb, "
                                 "backend, to_host")
    with pytest.raises(OptionError, match=r"^unknown assembly option 'colour'; the options are approach, "):
        assemble(space, problem, colour="red")
    with pytest.raises(OptionError, match=r"'elements' is not an assembly option: pass scope=AssemblyScope"):
        assemble(space, problem, elements=[0, 1])
    with pytest.raises(OptionError, match=r"'comm' is not an assembly option: use polydg.distributed"):
        assemble(space, problem, comm=None)
    with pytest.raises(OptionError, match="did you mean 'memory_budget_mb'"):
        march(*cases.march_case(), memory_budget=1, n_slabs=1, final_time=0.1)
    with pytest.raises(OptionError, match="options must be an AssemblyOptions, got dict"):
        assemble(space, problem, {"approach": "atomic"})


def test_keywords_go_over_the_options_object():
    base = AssemblyOptions(approach="atomic", penalty=5.0)
    assert assembly_options(base, {}) is base
    assert assembly_options(base, {"penalty": 6}) == AssemblyOptions(approach="atomic", penalty=6.0)
    space, problem = cases.steady_case()
    assert assemble(space, problem, base, penalty=6).info["penalty"] == {"constant": 6.0, "kind": "classical"}


def test_session_defaults_fill_the_fields_not_given():
    with default_options(penalty=3.0, quadrature_extra=2) as defaults:
        assert defaults == AssemblyOptions(penalty=3.0, quadrature_extra=2)
        assert AssemblyOptions().penalty == 3.0 and AssemblyOptions(penalty=4.0).penalty == 4.0
        with default_options(penalty=5.0):
            assert (AssemblyOptions().penalty, AssemblyOptions().quadrature_extra) == (5.0, 2)
        assert AssemblyOptions().penalty == 3.0
    assert AssemblyOptions() == AssemblyOptions(penalty=10.0, quadrature_extra=0)
    with pytest.raises(OptionError, match="unknown assembly option 'penalti'"):
        with default_options(penalti=3.0):
            pass
    with pytest.raises(OptionError, match="unknown precision"):
        with default_options(precision="half"):
            pass
    assert AssemblyOptions().precision == "double"


def test_the_default_backend_and_to_host_go_together_and_approach_1_stays_on_the_cpu(monkeypatch):
    monkeypatch.setenv("NUMBA_ENABLE_CUDASIM", "1")  # read by resolve_backend only: numba.cuda is not imported
    with default_options(backend="cudasim", to_host=True):
        assert (AssemblyOptions().backend, AssemblyOptions().to_host) == ("cudasim", True)
        assert AssemblyOptions(to_host=False).to_host is False
        # a named backend: to_host is False unless named too
        assert (AssemblyOptions(backend="numpy").backend, AssemblyOptions(backend="numpy").to_host) == ("numpy", False)
        # approach 1 has no GPU executor: the default backend does not apply to it ...
        assert AssemblyOptions(approach="1").backend == "numpy"
        # ... and naming a GPU backend for it is an error
        with pytest.raises(OptionError, match="CPU only"):
            AssemblyOptions(approach="1", backend="cudasim")


def test_a_scope_checks_its_shapes_against_the_mesh():
    space, problem = cases.steady_case()
    mesh = space.mesh
    with pytest.raises(OptionError, match=r"face_penalty_scale must be \(\d+,\) factors >= 0"):
        assemble(space, problem, scope=AssemblyScope(face_penalty_scale=-np.ones(mesh.n_faces)))
    with pytest.raises(OptionError, match=r"face_penalty has shape \(3,\), expected"):
        assemble(space, problem, scope=AssemblyScope(face_penalty=np.ones(3)))
    with pytest.raises(OptionError, match="approach '1' builds its own matrix: it takes no column_numbering"):
        assemble(space, problem, approach="1", scope=AssemblyScope(column_numbering=(None, None, 0)))
    with pytest.raises(OptionError, match="scope must be an AssemblyScope"):
        assemble(space, problem, scope={"elements": [0]})
    scope = AssemblyScope(elements=[1, 4], face_penalty_scale=np.ones(mesh.n_faces))
    assert scope.elements.dtype == np.int64 and scope.face_penalty_scale.dtype == np.float64
    with pytest.raises(dataclasses.FrozenInstanceError):
        scope.elements = None


# ---------------------------------------------------------------------------
# every option reaches the assembly, every slab and every rank


def _changed():
    return cases.option_sets()


def _check_info(info, options):
    assert info["approach"] == options.approach and info["precision"] == options.precision == "single"
    assert info["penalty"] == {"constant": 7.0, "kind": "paper"} and info["quadrature_extra"] == 1
    assert info["backend"] == "numpy"  # auto, without a GPU
    assert info.get("chunks", 2) > 1  # the small budget


@pytest.fixture(scope="module")
def one_process():
    """The one-process results with every option changed (this also fills the kernel cache for the ranks)."""
    space, problem = cases.steady_case()
    mesh, st_problem, degree = cases.march_case()
    out = {}
    for key, options in _changed().items():
        out["steady", key] = assemble(space, problem, options)
        out["march", key] = march(mesh, st_problem, degree, options=options, **cases.MARCH)
    return out


@pytest.mark.parametrize("key", ["atomic", "2"])
def test_every_option_reaches_a_one_process_assembly(one_process, key):
    options = _changed()[key]
    result = one_process["steady", key]
    _check_info(result.info, options)
    assert result.matrix.dtype == np.float32 and result.info["options"] == options.as_dict()
    space, problem = cases.steady_case()
    default = assemble(space, problem)
    assert default.info["chunks"] == 1 and default.matrix.dtype == np.float64
    # the penalty's kind: the face penalties differ from the default kind's by more than 7 / 10; its constant:
    # they are 7 / 10 of the paper kind's at the default constant
    assert not np.allclose(result.face_penalty, 0.7 * default.face_penalty)
    paper = assemble(space, problem, penalty_kind="paper", quadrature_extra=1)
    assert np.allclose(result.face_penalty, 0.7 * paper.face_penalty, rtol=1e-6, atol=0)
    # the extra quadrature degree reaches the plan's rules, not only the info: the matrix moves with it
    # (far above round-off: paper-2d's coefficients are not polynomials)
    moved = abs(paper.matrix - assemble(space, problem, penalty_kind="paper").matrix).max()
    assert moved > 1e-9 * abs(paper.matrix).max()
    # and through the changed options too (in float32 the matrices' difference is round-off): the source is
    # evaluated at more points
    assert _source_points(space, problem, options) > _source_points(space, problem,
                                                                     options.replace(quadrature_extra=0))


def _source_points(space, problem, options) -> int:
    """The number of points an assembly evaluates the problem's source at."""
    seen = []

    def source(x):
        seen.append(len(x))
        return problem.source(x)

    assemble(space, dataclasses.replace(problem, source=source), options)
    return sum(seen)


@pytest.mark.parametrize("key", ["atomic", "2"])
def test_every_slab_of_a_march_gets_every_option(one_process, key):
    options = _changed()[key]
    mesh, problem, degree = cases.march_case()
    seen = []

    def recording(space, interval, options, *, scope=None, matrix=True, workspace=None):
        result = assemble(space, slab_problem(problem, 2, *interval), options, scope=scope, matrix=matrix,
                          workspace=workspace)
        seen.append((space, options, scope, matrix, result))
        return result

    marched = march(mesh, problem, degree, options=options, assembler=recording, **cases.MARCH)
    assert [s[3] for s in seen] == [True, False, False]  # paper-2d1: the matrix once, then the load alone
    assert all(s[1] == options for s in seen)
    space, _, scope, _, first = seen[0]
    assert scope.face_penalty_scale is not None  # the local steps' penalty scale
    assert all(s[2].face_penalty is not None and s[2].load_boundary_faces is not None for s in seen[1:])
    for *_, result in seen:
        _check_info(result.info, options)
    # the march on its own (no assembler) assembles the same slabs with the same options: the same solution
    alone = one_process["march", key]
    assert alone.info["assembled_per_slab"] == ["matrix+load", "load", "load"]
    _check_info(alone.assembly.info, options)
    np.testing.assert_array_equal(alone.solution, marched.solution)
    # its kept matrix is a direct assembly of the first slab with those options, bit for bit
    between_steps = (np.abs(space.mesh.face_normal[:, -1]) != 1.0).astype(float)
    direct = assemble(space, slab_problem(problem, 2, 0.0, 0.1), options,
                      scope=AssemblyScope(face_penalty_scale=between_steps))
    assert direct.matrix.dtype == np.float32
    np.testing.assert_array_equal(direct.matrix.data, alone.assembly.matrix.data)
    np.testing.assert_array_equal(direct.matrix.data, first.matrix.data)
    default = march(mesh, problem, degree, **cases.MARCH)
    assert np.abs(default.solution - alone.solution).max() > 1e-6  # the options change the result


MPIEXEC = shutil.which("mpiexec")


@pytest.fixture(scope="module")
def two_ranks(one_process, tmp_path_factory):
    pytest.importorskip("mpi4py")
    if MPIEXEC is None:
        pytest.skip("mpiexec not found (pip install 'polydg[mpi]')")
    out = tmp_path_factory.mktemp("options-ranks")
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(HERE.parent) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("NUMBA_NUM_THREADS", None)
    r = subprocess.run([MPIEXEC, "-n", "2", sys.executable, HERE / "mpi_options_cases.py", out], capture_output=True,
                       text=True, timeout=600, cwd=HERE.parent, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    return out, json.loads((out / "report.json").read_text())


@pytest.mark.parametrize("key", ["atomic", "2"])
def test_every_option_reaches_every_rank_and_the_gather_is_the_one_process_assembly(two_ranks, one_process, key):
    out, report = two_ranks
    options = _changed()[key]
    ranked = report[f"steady-{key}"]
    _check_info(ranked, options)
    resolved = options.replace(backend="numpy").as_dict()  # each rank resolves "auto"
    assert [r["options"] for r in ranked["per_rank"]] == [resolved, resolved]
    assert all(r["chunks"] > 1 for r in ranked["per_rank"])
    got = np.load(out / f"steady-{key}.npz")
    whole = one_process["steady", key]
    assert got["data"].dtype == np.float32
    assert np.array_equal(got["indptr"], whole.matrix.indptr) and np.array_equal(got["indices"], whole.matrix.indices)
    assert np.array_equal(got["sigma"], whole.face_penalty)
    if key == "2":  # the row kernels: bit for bit whatever the chunks and the ranks
        assert np.array_equal(got["data"], whole.matrix.data) and np.array_equal(got["rhs"], whole.rhs)
    else:  # the scatter-add's sums are grouped by chunk: equal to round-off
        scale = np.abs(whole.matrix.data).max()
        np.testing.assert_allclose(got["data"], whole.matrix.data, rtol=0, atol=1e-6 * scale)
        np.testing.assert_allclose(got["rhs"], whole.rhs, rtol=0, atol=1e-6 * np.abs(whole.rhs).max())


@pytest.mark.parametrize("key", ["atomic", "2"])
def test_every_slab_on_the_ranks_gets_every_option(two_ranks, one_process, key):
    out, report = two_ranks
    options = _changed()[key]
    marched = report[f"march-{key}"]
    assert marched["assembled"] == ["matrix+load", "load", "load"]
    resolved = options.replace(backend="numpy").as_dict()
    slabs = marched["slabs"]
    assert [s["matrix"] for s in slabs] == [True, False, False]
    assert all(s["options"] == options.as_dict() for s in slabs)  # rank 0's slab assembler got them
    assert all(r["options"] == resolved and r["chunks"] > 1 for s in slabs for r in s["per_rank"])  # and each rank
    assert slabs[0]["scale"] and all(s["kept_penalty"] and s["load_faces"] for s in slabs[1:])
    got = np.load(out / f"march-{key}.npz")
    alone = one_process["march", key]
    assert got["data"].dtype == np.float32
    if key == "2":
        np.testing.assert_array_equal(got["data"], alone.assembly.matrix.data)
        np.testing.assert_array_equal(got["rhs"], alone.assembly.rhs)
        np.testing.assert_array_equal(got["solution"], alone.solution)
    else:
        np.testing.assert_allclose(got["solution"], alone.solution, rtol=0, atol=1e-5 * np.abs(alone.solution).max())
