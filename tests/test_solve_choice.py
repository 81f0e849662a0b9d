"""The automatic choice of the solve, the direct solve's orderings, progress, and failures as one line."""

import json
import subprocess
import sys
import warnings
from types import SimpleNamespace

import numpy as np
import pytest
import scipy.sparse as sp

import polydg.solve.choice as choice
import polydg.solve.direct as direct
import polydg.solve.krylov as krylov
import polydg.solve.preconditioners as preconditioners
from polydg.assembly import assemble
from polydg.errors import OptionError
from polydg.mesh import from_spec
from polydg.partition import agglomerate
from polydg.problem import builtin_problem
from polydg.solve import ORDERINGS, SolverError, SolverWarning, choose_method, solve
from polydg.solve.system import matrix_blocks, shape_of
from polydg.space import DGSpace

#: a 3D p = 2 system big enough for pyamg's hierarchy, small enough for a test
MESH_3D = agglomerate(from_spec("cube:6"), 150)
MESH_2D = agglomerate(from_spec("square:12:perturb=0.2"), 40)


@pytest.fixture(scope="module")
def system_3d():
    space = DGSpace(MESH_3D, 2)
    result = assemble(space, builtin_problem("paper-3d", 3))
    return space, result


@pytest.fixture(scope="module")
def system_2d():
    space = DGSpace(MESH_2D, 2)
    result = assemble(space, builtin_problem("paper-2d", 2))
    return space, result


def _space_shape(dim, n_elements):
    """What the choice reads of a space: its dimension and element count."""
    return SimpleNamespace(mesh=SimpleNamespace(dim=dim, n_elements=n_elements))


def test_the_table_picks_direct_for_the_default_run_and_iterative_for_the_large_3d_case():
    # the command line's default run: paper-2d on square:64 agglomerated into 256 elements, p = 2
    mesh = agglomerate(from_spec("square:64"), 256)
    space = DGSpace(mesh, 2)
    result = assemble(space, builtin_problem("paper-2d", 2))
    assert space.n_dofs == 1536
    method, reason = choose_method(space.n_dofs, result.matrix.nnz, False, space)
    assert method == "direct" and reason.endswith("for 2D p = 2, nonsymmetric")
    # issue #30: cube:30 agglomerated into 20,000 elements, p = 2: 204,350 dofs, nnz 20.4M (not solved here)
    n, nnz = 204_350, 20_357_100
    for hint in ({"space": _space_shape(3, 20_435)}, {"block_sizes": np.full(20_435, 10)}, {}):
        method, reason = choose_method(n, nnz, False, free_bytes=2**50, **hint)
        assert method == "iterative", hint
        assert "3D p = 2" in reason and ("guessed" in reason) == ("space" not in hint)
    # forced there, the direct solve is warned about: far slower, and its factor (13 GB measured) too large
    assert "times slower than the iterative one" in choice.direct_concerns(n, nnz, False, _space_shape(3, 20_435),
                                                                            free_bytes=2**50)
    e = choice.estimate(n, nnz, False, _space_shape(3, 20_435))
    assert 10 * 2**30 < e.factor_bytes < 20 * 2**30
    assert "with 8.0 GB free" in choice.direct_concerns(n, nnz, False, _space_shape(3, 20_435), free_bytes=8 * 2**30)
    assert choice.direct_concerns(space.n_dofs, result.matrix.nnz, False, space, free_bytes=2**50) is None
    # the table: 2D crossovers above 3D ones, CG's below GMRES's
    for p in (1, 2, 3):
        assert choice.DIRECT_BELOW[(2, p)].nonsymmetric > choice.DIRECT_BELOW[(3, p)].nonsymmetric
        assert choice.DIRECT_BELOW[(2, p)].symmetric <= choice.DIRECT_BELOW[(2, p)].nonsymmetric


def test_the_shape_of_a_system(system_3d, system_2d):
    for space, result in (system_3d, system_2d):
        A = result.matrix
        dim, p = space.mesh.dim, 2
        assert shape_of(A.shape[0], A.nnz, space) == (dim, p, space.mesh.n_elements, True)
        assert shape_of(A.shape[0], A.nnz, block_sizes=space.element_dofs) == (dim, p, space.mesh.n_elements, False)
        assert shape_of(A.shape[0], A.nnz)[:2] == (dim, p)


def test_a_matrix_without_its_space_is_read_by_its_element_blocks(system_3d, system_2d):
    # 2D p = 2 and 3D p = 1 have close entries per row: the blocks read off the matrix tell them apart
    space_3d_p1 = DGSpace(MESH_3D, 1)
    p1 = assemble(space_3d_p1, builtin_problem("paper-3d", 3)).matrix
    for space, A in ((system_3d[0], system_3d[1].matrix), (system_2d[0], system_2d[1].matrix), (space_3d_p1, p1)):
        blocks = matrix_blocks(A)
        assert blocks.sum() == A.shape[0]
        assert abs(blocks.mean() / space.element_dofs.mean() - 1) < 0.1  # neighbours of one pattern may merge
        dim, degree, _, known = shape_of(A.shape[0], A.nnz, block_sizes=blocks)
        assert (dim, degree, known) == (space.mesh.dim, space.max_degree, False)
    _, info = solve(system_2d[1].matrix, system_2d[1].rhs)  # no space given
    assert "2D p = 2" in info["choice_reason"]


def test_a_stalled_gmres_stops_early_with_one_line():
    # a cyclic shift: GMRES(10) cannot reduce the residual at all; it stops after a window, not at maxiter
    n = 400
    A = sp.csr_matrix((np.ones(n), (np.arange(n), (np.arange(n) + 1) % n)), shape=(n, n))
    b = np.zeros(n)
    b[0] = 1.0
    with pytest.raises(SolverError, match=r"stalled at preconditioned relative residual .* in 200 iterations"):
        solve(A, b, "iterative", preconditioner="jacobi", restart=10, maxiter=100_000)


def test_auto_takes_the_direct_solve_below_the_crossover_and_the_iterative_one_above(monkeypatch, system_2d,
                                                                                      system_3d):
    # the table as it is: the small 2D system directly, the 3D p = 2 one (1,530 dofs) iteratively
    space, result = system_2d
    x_auto, info = solve(result.matrix, result.rhs, space=space)
    assert info["method"] == "direct" and info["choice_reason"] == (
        f"{space.n_dofs:,} dofs, below the direct solve's crossover of 70,000 for 2D p = 2, nonsymmetric")
    x_direct, info_direct = solve(result.matrix, result.rhs, "direct", space=space)
    assert "choice_reason" not in info_direct
    np.testing.assert_array_equal(x_auto, x_direct)
    space, result = system_3d
    A, b = result.matrix, result.rhs
    x_auto, info = solve(A, b, space=space)
    assert info["method"] == "iterative" and info["solver"] == "gmres(50)+amg"  # 3D: AMG at every size
    assert info["choice_reason"] == (f"{A.shape[0]:,} dofs, above the direct solve's crossover of 1,000 for "
                                     f"3D p = 2, nonsymmetric")
    assert info["residual"] <= 1e-10
    x_iterative, _ = solve(A, b, "iterative", space=space)
    np.testing.assert_array_equal(x_auto, x_iterative)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # just above the crossover: no warning
        x_direct, _ = solve(A, b, "direct", space=space)
    assert np.linalg.norm(x_auto - x_direct) <= 1e-7 * np.linalg.norm(x_direct)
    # far above it, the forced direct solve says it will be slow, as a SolverWarning
    low = dict(choice.DIRECT_BELOW)
    low[(3, 2)] = choice.Crossover(symmetric=A.shape[0] // 8, nonsymmetric=A.shape[0] // 8)
    monkeypatch.setattr(choice, "DIRECT_BELOW", low)
    with pytest.warns(SolverWarning, match="estimated 5 times slower than the iterative one"):
        solve(A, b, "direct", space=space)
    # and below a crossover raised above it, auto solves directly
    low[(3, 2)] = choice.Crossover(symmetric=10**6, nonsymmetric=10**6)
    x, info = solve(A, b, space=space)
    assert info["method"] == "direct" and "below the direct solve's crossover of 1,000,000" in info["choice_reason"]
    np.testing.assert_array_equal(x, x_direct)


def test_a_chosen_iterative_solve_that_fails_gives_way_to_the_direct_one(monkeypatch, system_3d):
    space, result = system_3d
    lines = []
    x, info = solve(result.matrix, result.rhs, space=space, maxiter=1, progress=lines.append)
    assert info["method"] == "direct" and info["fallback"].startswith("iterative solve (gmres(50)+amg) did not")
    assert info["residual"] <= 1e-12
    assert lines[0].startswith("iterative solve chosen") and "solving directly instead" in lines[1]
    assert lines[2].startswith("factorising")
    with pytest.raises(SolverError, match="did not converge"):  # asked for, it fails
        solve(result.matrix, result.rhs, "iterative", space=space, maxiter=1)
    monkeypatch.setattr(choice, "free_memory_bytes", lambda: 1000)  # chosen, but no room for the factor
    with pytest.raises(SolverError, match="did not converge"):
        solve(result.matrix, result.rhs, space=space, maxiter=1)


def test_a_factor_that_does_not_fit_is_not_chosen_and_is_warned_about(monkeypatch, system_2d):
    space, result = system_2d
    A, b = result.matrix, result.rhs
    monkeypatch.setattr(choice, "free_memory_bytes", lambda: 1000)
    x, info = solve(A, b, space=space)
    assert info["method"] == "iterative" and "would not fit in 0.0 GB free" in info["choice_reason"]
    with pytest.warns(SolverWarning, match="factor of .* dofs is estimated at .* GB, with 0.0 GB free"):
        x_direct, _ = solve(A, b, "direct", space=space)
    assert np.linalg.norm(x - x_direct) <= 1e-7 * np.linalg.norm(x_direct)


def test_every_ordering_gives_the_solution(system_2d):
    space, result = system_2d
    A, b = result.matrix, result.rhs
    x_ref = sp.linalg.spsolve(A.tocsc(), b)
    sizes = {}
    for ordering in ORDERINGS:
        x, info = solve(A, b, "direct", space=space, ordering=ordering)
        assert info["residual"] <= 1e-12 and "fallback" not in info
        assert info["ordering"] == ("nested-dissection" if ordering == "auto" else ordering)
        np.testing.assert_allclose(x, x_ref, rtol=1e-9, atol=1e-12 * np.abs(x_ref).max())
        sizes[info["ordering"]] = info["factor_nnz"]
    assert sizes["nested-dissection"] < sizes["natural"]
    with pytest.raises(OptionError, match="unknown ordering 'metis'"):
        solve(A, b, "direct", ordering="metis")


def test_nested_dissection_keeps_each_element_together(system_2d):
    space, result = system_2d
    perm = direct.nested_dissection(result.matrix, space.element_dofs)
    assert sorted(perm.tolist()) == list(range(space.n_dofs))
    blocks = perm.reshape(-1, 6)  # p = 2 in 2D: 6 dofs per element, each block consecutive and in order
    assert (np.diff(blocks, axis=1) == 1).all() and (blocks[:, 0] % 6 == 0).all()
    assert len(np.unique(blocks[:, 0])) == space.mesh.n_elements


def test_the_element_graph_joins_blocks_with_an_entry_either_way(system_2d):
    """Blocks I and J adjacent when A has an entry in (I, J) or (J, I), never I with itself: against the
    definition on random blocks of mixed sizes with one-sided entries, and on the DG matrix (its element
    neighbours across the mesh's interfaces)."""
    rng = np.random.default_rng(5)
    sizes = rng.integers(1, 5, 40)
    n = int(sizes.sum())
    A = sp.random(n, n, density=0.02, random_state=6, format="csr")  # no symmetry
    owner = np.repeat(np.arange(len(sizes)), sizes)
    coo = A.tocoo()
    pairs = {(int(i), int(j)) for i, j in zip(owner[coo.row], owner[coo.col]) if i != j}
    expected = pairs | {(j, i) for i, j in pairs}
    graph = direct.element_graph(A, sizes)
    g = graph.tocoo()
    assert set(zip(g.row.tolist(), g.col.tolist())) == expected and graph.nnz == len(expected)
    assert graph.has_sorted_indices and any((j, i) not in pairs for i, j in pairs)  # one-sided entries met
    space, result = system_2d
    mesh = space.mesh
    dg = direct.element_graph(result.matrix, space.element_dofs).tocoo()
    across = {tuple(sorted(map(int, e))) for e in mesh.interface_elements}
    assert {tuple(sorted(e)) for e in zip(dg.row.tolist(), dg.col.tolist())} == across
    with pytest.raises(SolverError, match="block sizes sum to 3, the matrix has"):
        direct.element_graph(result.matrix, [1, 2])


def test_a_failed_ordering_falls_back_and_a_singular_matrix_is_one_line(monkeypatch, system_2d):
    space, result = system_2d
    A, b = result.matrix, result.rhs

    def fails(*_):
        raise RuntimeError("Factor is exactly singular")

    monkeypatch.setattr(direct, "nested_dissection", fails)
    x, info = solve(A, b, "direct", space=space)
    assert info["ordering"] == "colamd" and "refactorised with colamd" in info["fallback"]
    assert info["residual"] <= 1e-12
    monkeypatch.undo()
    singular = sp.csr_matrix(np.array([[1.0, 1.0], [1.0, 1.0]]))
    with pytest.raises(SolverError) as caught:
        solve(singular, np.ones(2), "direct")
    assert "\n" not in str(caught.value) and "singular" in str(caught.value)


def test_progress_lines(monkeypatch, system_3d):
    space, result = system_3d
    lines = []
    solve(result.matrix, result.rhs, "direct", space=space, progress=lines.append)
    assert lines == [f"factorising {space.n_dofs:,} dofs (nnz {result.matrix.nnz:,}, nested-dissection ordering) ..."]
    lines.clear()
    _, info = solve(result.matrix, result.rhs, space=space, progress=lines.append)
    assert lines == [f"iterative solve chosen: {info['choice_reason']}"]  # iterations under 2 s say nothing
    monkeypatch.setattr(krylov, "PROGRESS_SECONDS", 0.0)  # a line at every iteration
    lines.clear()
    _, info = solve(result.matrix, result.rhs, "iterative", space=space, preconditioner="amg", progress=lines.append)
    assert len(lines) == info["iterations"] > 1
    assert lines[0].startswith("gmres(50)+amg: iteration 1, preconditioned relative residual ")
    lines.clear()
    poisson = assemble(space, builtin_problem("poisson", 3))
    _, info = solve(poisson.matrix, poisson.rhs, "iterative", space=space, progress=lines.append)
    assert info["solver"] == "cg+amg" and len(lines) == info["iterations"]
    last = float(lines[-1].rsplit(" ", 1)[1])
    assert last == pytest.approx(info["residual"], rel=1e-6)


def test_without_pyamg_the_iterative_solve_converges_in_3d(monkeypatch, system_3d):
    space, result = system_3d
    x_direct, _ = solve(result.matrix, result.rhs, "direct", space=space)
    monkeypatch.setattr(preconditioners, "pyamg_module", lambda: None)
    x, info = solve(result.matrix, result.rhs, "iterative", space=space)
    assert info["solver"] == "gmres(50)+block-jacobi" and info["residual"] <= 1e-10  # 3D: no ILU
    assert np.linalg.norm(x - x_direct) <= 1e-6 * np.linalg.norm(x_direct)


def test_an_unstable_preconditioner_fails_in_one_line_without_warnings(monkeypatch, system_2d):
    space, result = system_2d

    def overflowing(A, block_sizes):  # a block-Jacobi gone wrong: its products overflow
        return sp.linalg.LinearOperator(A.shape, lambda r: np.asarray(r) * 1e308 * 1e308), "block-jacobi"

    monkeypatch.setattr(preconditioners, "block_jacobi_or_jacobi", overflowing)
    with warnings.catch_warnings(record=True) as heard:
        warnings.simplefilter("always")
        with pytest.raises(SolverError) as caught:
            solve(result.matrix, result.rhs, "iterative", space=space, preconditioner="block-jacobi", maxiter=20)
    message = str(caught.value)
    assert "\n" not in message and message.startswith("iterative solve (gmres(50)+block-jacobi) did not converge")
    assert "try the direct solve (--solve direct; method='direct') or preconditioner='amg'" in message
    assert heard == []


def test_an_unstable_ilu_gives_way(monkeypatch):
    class Exploding:
        def solve(self, r):
            return np.full_like(r, np.inf)

    monkeypatch.setattr(preconditioners.spla, "spilu", lambda *a, **k: Exploding())
    assert preconditioners.ilu(sp.identity(4, format="csr")) is None


OPTIONAL = ("mpi4py", "cupy", "cupyx", "numba_cuda", "matplotlib", "skfem", "hypothesis", "rich", "tqdm")


def test_iterative_solve_converges_without_the_optional_extras():
    """The base install (pyproject's dependencies alone) solves a 3D p = 2 problem iteratively."""
    code = f"""
import sys, json
class Absent:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {OPTIONAL!r}:
            raise ImportError(f"{{name}} is not installed (blocked by the test)")
for name in list(sys.modules):
    if name.split(".")[0] in {OPTIONAL!r}:
        del sys.modules[name]
sys.meta_path.insert(0, Absent())
from polydg.assembly import assemble
from polydg.mesh import from_spec
from polydg.partition import agglomerate
from polydg.problem import builtin_problem
from polydg.solve import solve
from polydg.space import DGSpace
space = DGSpace(agglomerate(from_spec("cube:6"), 150), 2)
result = assemble(space, builtin_problem("paper-3d", 3))
runs = [solve(result.matrix, result.rhs, "iterative", space=space)[1]]
print(json.dumps({{"solvers": [info["solver"] for info in runs], "residuals": [info["residual"] for info in runs],
                  "loaded": sorted(m for m in sys.modules if m.split(".")[0] in {OPTIONAL!r})}}))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "Warning" not in out.stderr  # no warning lines from the solve
    info = json.loads(out.stdout.strip().splitlines()[-1])
    assert info["loaded"] == []
    assert info["solvers"] == ["gmres(50)+amg"] and max(info["residuals"]) <= 1e-10


def test_a_degree_beyond_the_measured_ones_is_named_as_it_is():
    """The crossover of a p = 8 space is the highest measured degree's, and the reason says so instead of
    calling the space p = 3."""
    from polydg.mesh import build_polytopic_mesh, unit_square
    from polydg.solve.choice import estimate
    from polydg.space import DGSpace

    mesh = build_polytopic_mesh(unit_square(2))
    high, measured = DGSpace(mesh, 8), DGSpace(mesh, 2)
    assert estimate(high.n_dofs, 60 * high.n_dofs, True, space=high).label == \
        "2D p = 8 (as p = 3: measured for p = 1 to 3), symmetric"
    mixed = DGSpace(mesh, np.arange(mesh.n_elements) % 2 + 2)  # 2 and 3: measured, no note
    assert "measured" not in estimate(mixed.n_dofs, 20 * mixed.n_dofs, True, space=mixed).label
    low = DGSpace(mesh, 0)
    assert "2D p = 0 (as p = 1: measured for p = 1 to 3)" in estimate(low.n_dofs, 4 * low.n_dofs, True, space=low).label
    assert estimate(measured.n_dofs, 20 * measured.n_dofs, False, space=measured).label == "2D p = 2, nonsymmetric"
