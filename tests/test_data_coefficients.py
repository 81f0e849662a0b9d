"""Coefficients from data (#28 item 4): per fine cell, per element, on a grid.

Data per cell is checked against the same field written as a Python callable (the linear kernels
against the sided executor, to round-off), element data against cell data with equal values on each
element's cells (bit for bit), grid data against SciPy's interpolation, a .vtu's cell data against
the array written into it, and convergence on a layered field against the rates measured in
docs/performance.md; bad data gives one line naming the data and what was expected.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy.interpolate import RegularGridInterpolator

from polydg.assembly import assemble as _assemble
from polydg.errors import OptionError, PolyDGError, ProblemError
from polydg.mesh import build_polytopic_mesh, from_spec, read_mesh
from polydg.mesh.quadrature_simplices import quadrature_mesh
from polydg.mesh.submesh import rank_submesh
from polydg.nonlinear import solve_nonlinear
from polydg.partition import agglomerate
from polydg.partition.agglomerate import agglomerate_cells, dual_graph, split_disconnected
from polydg.problem import CellData, ElementData, GridData, Problem, builtin_problem, with_coefficients
from polydg.solve import errors, solve
from polydg.space import DGSpace

N = 8  # square:N, 2 N^2 triangles, each grid square of side 1/N cut in two
HERE = Path(__file__).resolve().parent


def assemble(space, problem, **options):
    """The CPU assembly: data per cell or element has no GPU executor (whatever POLYDG_TEST_BACKEND says)."""
    return _assemble(space, problem, backend="numpy", **options)


def _square_of(x: np.ndarray) -> np.ndarray:
    """The grid square (i, j) of square:N that holds each point (clipped: points on the boundary)."""
    return np.minimum(np.floor(x * N).astype(np.int64), N - 1)


@pytest.fixture(scope="module")
def setting():
    fine = from_spec(f"square:{N}")
    mesh = agglomerate(fine, 6)
    degree = np.random.default_rng(3).integers(1, 3, mesh.n_elements)  # p = 1 and 2
    space = DGSpace(mesh, degree)
    square = _square_of(fine.points[fine.cells].mean(axis=1))
    # the squares with a triangle on an element interface: there both sides must see one value
    touching = np.zeros((N, N), dtype=bool)
    cells = mesh.face_cells[:mesh.n_interior_faces].ravel()
    touching[square[cells, 0], square[cells, 1]] = True
    return fine, space, square, touching


def _matrices_agree(a, b, rtol=1e-13):
    scale = abs(b.matrix).max()
    assert abs(a.matrix - b.matrix).max() <= rtol * scale
    assert np.abs(a.rhs - b.rhs).max() <= rtol * np.abs(b.rhs).max()


# ---------------------------------------------------------------------------
# data per cell against the same field as a callable


def test_reaction_and_source_per_cell_are_the_callable_that_locates_the_cell(setting):
    fine, space, square, _ = setting
    table = 1.0 + (np.arange(N)[:, None] * 3 + np.arange(N)[None, :] * 5) % 7  # one value per grid square
    per_cell = table[square[:, 0], square[:, 1]]

    def located(x):
        s = _square_of(x)
        return table[s[:, 0], s[:, 1]]

    common = dict(diffusion=1.0, dirichlet=lambda x: x[:, 0] + x[:, 1] ** 2)
    data = assemble(space, Problem("data", reaction=CellData(per_cell), source=CellData(2 * per_cell), **common))
    plain = assemble(space, Problem("plain", reaction=located, source=lambda x: 2 * located(x), **common))
    assert data.info["executor"] == "sided"
    assert np.array_equal(data.matrix.indices, plain.matrix.indices)
    _matrices_agree(data, plain)
    constant = assemble(space, Problem("constant", reaction=1.0, source=2.0, **common))
    assert abs(data.matrix - constant.matrix).max() > 1e-3 * abs(constant.matrix).max()  # the data mattered


@pytest.mark.parametrize("tensor", [False, True])
def test_diffusion_per_cell_is_the_callable_where_the_cells_agree_across_interfaces(setting, tensor):
    fine, space, square, touching = setting
    i, j = np.meshgrid(np.arange(N), np.arange(N), indexing="ij")
    scalar = np.where(touching, 1.0, 2.0 + (i + 2 * j) % 3)  # varies inside elements only
    assert (~touching).sum() >= 4 and len(np.unique(scalar)) >= 3
    if tensor:
        skew = np.where(touching, 0.0, 0.4)[..., None, None] * np.array([[0.0, 1.0], [1.0, 0.0]])
        table = scalar[..., None, None] * np.eye(2) + skew
    else:
        table = scalar

    def located(x):
        s = _square_of(x)
        return table[s[:, 0], s[:, 1]]

    common = dict(advection=np.array([1.0, 0.5]), reaction=0.5, source=1.0, dirichlet=lambda x: x[:, 1])
    data = assemble(space, Problem("data", diffusion=CellData(table[square[:, 0], square[:, 1]]), **common))
    plain = assemble(space, Problem("plain", diffusion=located, **common))
    _matrices_agree(data, plain)
    assert np.allclose(data.face_penalty, plain.face_penalty, rtol=1e-14, atol=0)  # a_K: max over K's points
    constant = assemble(space, Problem("constant", diffusion=np.eye(2), **common))
    assert abs(data.matrix - constant.matrix).max() > 0.1 * abs(constant.matrix).max()  # the data mattered


def test_element_data_is_cell_data_with_one_value_per_element(setting):
    fine, space, _, _ = setting
    mesh = space.mesh
    values = np.linspace(1.0, 3.0, mesh.n_elements)
    tensors = values[:, None, None] * np.eye(2) + 0.3 * np.ones((2, 2))
    element_of_cell = np.empty(mesh.n_fine_cells, dtype=np.int64)
    element_of_cell[mesh.simplex_cell] = mesh.simplex_element
    for per_element in (values, tensors):
        by_element = assemble(space, Problem("e", diffusion=ElementData(per_element), reaction=ElementData(values),
                                             source=1.0))
        by_cell = assemble(space, Problem("c", diffusion=CellData(per_element[element_of_cell]),
                                          reaction=CellData(values[element_of_cell]), source=1.0))
        assert np.array_equal(by_element.matrix.data, by_cell.matrix.data)  # bit for bit
        assert np.array_equal(by_element.rhs, by_cell.rhs)


def test_uniform_cell_data_is_the_constant_in_3d_and_the_load_alone_is_the_load():
    mesh = agglomerate(from_spec("cube:3"), 8)
    space = DGSpace(mesh, np.random.default_rng(4).integers(1, 3, mesh.n_elements))
    A = np.array([[2.0, 0.3, 0.0], [0.3, 1.0, 0.1], [0.0, 0.1, 1.5]])
    n = mesh.n_fine_cells
    common = dict(advection=np.array([0.3, -0.2, 0.1]), dirichlet=lambda x: x[:, 2])
    data = assemble(space, Problem("data", diffusion=CellData(np.repeat(A[None], n, 0)),
                                   reaction=ElementData(np.full(mesh.n_elements, 0.5)), source=CellData(np.ones(n)),
                                   **common))
    constant = assemble(space, Problem("constant", diffusion=A, reaction=0.5, source=1.0, **common))
    _matrices_agree(data, constant)
    assert np.array_equal(data.face_penalty, constant.face_penalty)
    load = assemble(space, Problem("data", diffusion=CellData(np.repeat(A[None], n, 0)), source=CellData(np.ones(n)),
                                   reaction=0.5, **common), matrix=False)
    assert load.matrix is None and np.abs(load.rhs - data.rhs).max() <= 1e-14 * np.abs(data.rhs).max()


def test_grid_data_is_its_interpolation(setting):
    fine, space, _, _ = setting
    rng = np.random.default_rng(5)
    nodes = 1.0 + rng.random((5, 4))
    cells = 1.0 + rng.random((5, 7))  # no border through a quadrature point (harmonic means there: below)
    bounds = (0.0, 1.0, 0.0, 1.0)
    linear = RegularGridInterpolator((np.linspace(0, 1, 5), np.linspace(0, 1, 4)), nodes)
    by_grid = Problem("grid", diffusion=GridData(nodes, bounds, linear=True), reaction=GridData(cells, bounds),
                      source=1.0)
    by_hand = Problem("hand", diffusion=lambda x: linear(x),
                      reaction=lambda x: cells[np.minimum((x[:, 0] * 5).astype(int), 4),
                                               np.minimum((x[:, 1] * 7).astype(int), 6)], source=1.0)
    _matrices_agree(assemble(space, by_grid), assemble(space, by_hand))
    # 3D, tensors: multilinear interpolation of SPD nodes, component by component
    x = rng.random((50, 3)) * [2.0, 1.0, 3.0] - [1.0, 0.0, 0.0]
    A = rng.random((3, 4, 2, 3, 3))
    A = A @ A.transpose(0, 1, 2, 4, 3) + np.eye(3)
    grid = GridData(A, (-1, 1, 0, 1, 0, 3), linear=True)
    axes = (np.linspace(-1, 1, 3), np.linspace(0, 1, 4), np.linspace(0, 3, 2))
    assert np.allclose(grid(x), RegularGridInterpolator(axes, A)(x), rtol=1e-14, atol=0)


def test_cell_data_of_a_vtu_file_is_the_array_written(tmp_path, setting):
    meshio = pytest.importorskip("meshio")
    fine, space, _, _ = setting
    rng = np.random.default_rng(7)
    k = 1.0 + rng.random(fine.n_cells)
    B = rng.random((fine.n_cells, 2, 2))
    tensors = B @ B.transpose(0, 2, 1) + np.eye(2)
    vtk_tensors = np.zeros((fine.n_cells, 3, 3))  # VTK's nine components, z left alone
    vtk_tensors[:, :2, :2] = tensors
    vtk_tensors[:, 2, 2] = 1.0
    path = tmp_path / "layers.vtu"
    meshio.Mesh(np.c_[fine.points, np.zeros(len(fine.points))], [("triangle", fine.cells)],
                cell_data={"permeability": [k], "conductivity": [vtk_tensors.reshape(-1, 9)]}).write(path)
    read = read_mesh(path)
    assert sorted(read.cell_data) == ["conductivity", "permeability"]
    assert np.array_equal(CellData.from_mesh(read, "permeability").values, k)
    assert np.array_equal(CellData.from_mesh(read, "conductivity").values, tensors)
    mesh = build_polytopic_mesh(read, agglomerate_cells(read, 6))
    space = DGSpace(mesh, 1)
    from_file = with_coefficients(builtin_problem("poisson", 2), ["diffusion=cell:conductivity",
                                                                  "reaction=cell:permeability"], read)
    given = Problem("given", diffusion=CellData(tensors), reaction=CellData(k), source=from_file.source,
                    dirichlet=from_file.dirichlet)
    a, b = assemble(space, from_file), assemble(space, given)
    assert np.array_equal(a.matrix.data, b.matrix.data) and np.array_equal(a.rhs, b.rhs)


def test_polygon_mesh_cell_data_is_per_polygon(tmp_path):
    meshio = pytest.importorskip("meshio")
    points = np.array([[0, 0], [1, 0], [2, 0], [0, 1], [1, 1], [2, 1], [1.5, 1.6], [0.5, 1.5]], float)
    # blocks out of their type's sorted order: the reader orders polygons by type, the data with them
    cells = [("quad", np.array([[0, 1, 4, 3]])), ("polygon", np.array([[1, 2, 5, 6, 4]])),
             ("triangle", np.array([[3, 4, 7]]))]
    path = tmp_path / "polygons.vtu"
    meshio.Mesh(np.c_[points, np.zeros(8)], cells,
                cell_data={"k": [np.array([7.0]), np.array([5.0]), np.array([3.0])]}).write(path)
    fine = read_mesh(path)
    values = CellData.from_mesh(fine, "k").values[fine.fine_cell()]  # per triangle of the polygons
    centre = fine.points[fine.cells].mean(axis=1)
    expected = np.where(centre[:, 1] > 1, 3.0, np.where(centre[:, 0] > 1, 5.0, 7.0))
    assert np.array_equal(values, expected)
    mesh = build_polytopic_mesh(fine)
    assert mesh.n_elements == 3 and mesh.n_fine_cells == 3
    assert np.array_equal(mesh.simplex_cell, fine.fine_cell()[np.argsort(fine.cell_element, kind="stable")])


def test_fine_cells_through_sub_meshes_and_coarse_quadrature(setting):
    fine, space, _, _ = setting
    mesh = space.mesh
    part = rank_submesh(mesh, np.arange(3))
    sub = part.mesh
    assert np.array_equal(sub.face_cells, mesh.face_cells[part.faces])  # the halo side's cell included
    assert (sub.face_cells[:sub.n_interior_faces] >= 0).all() and sub.n_fine_cells == mesh.n_fine_cells
    # coarse quadrature simplices keep a cell only inside one fine cell (an unagglomerated polygon)
    coarse = quadrature_mesh(mesh, "coarse")
    assert (coarse.simplex_cell == -1).any()
    polygons = from_spec("square:6")
    polygons.cell_element = agglomerate_cells(polygons, 9)  # as if read from a polygon file
    whole = build_polytopic_mesh(polygons)
    kept = quadrature_mesh(whole, "coarse")
    assert kept.n_simplices < whole.n_simplices and (kept.simplex_cell == kept.simplex_element).all()


def test_ranks_gather_the_one_process_matrix_bit_for_bit(tmp_path):
    """Cell data keeps the whole mesh's numbering on a rank's sub-mesh (the halo side's cell included),
    element data is restricted to the sub-mesh's elements; ``mpiexec -n 2``."""
    pytest.importorskip("mpi4py")
    mpiexec = shutil.which("mpiexec")
    if mpiexec is None:
        pytest.skip("mpiexec not found (pip install 'polydg[mpi]')")
    sys.path.insert(0, str(HERE))
    import mpi_data_case

    out = tmp_path / "ranks.npz"
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join([str(HERE.parent)] + sys.path))
    env.pop("NUMBA_NUM_THREADS", None)
    run = subprocess.run([mpiexec, "-n", "2", sys.executable, str(HERE / "mpi_data_case.py"), str(out)],
                         capture_output=True, text=True, timeout=300, env=env, cwd=HERE.parent)
    assert run.returncode == 0, run.stderr[-3000:]
    space, problem = mpi_data_case.case()
    one = assemble(space, problem)
    got = np.load(out)
    assert int(got["ranks"]) == 2
    for key, value in (("indptr", one.matrix.indptr), ("indices", one.matrix.indices), ("data", one.matrix.data),
                       ("rhs", one.rhs), ("sigma", one.face_penalty)):
        assert np.array_equal(got[key], value), key
    # a diffusion per element in the ranks' error norms and Newton (each rank its elements' values)
    exact, cubic, u = mpi_data_case.element_cases(space)
    one_errors = errors(space, exact, u, penalty_values=assemble(space, exact).face_penalty)
    assert got["errors"] == pytest.approx([one_errors[key] for key in ("l2", "h1", "dg")], rel=1e-12)
    newton = solve_nonlinear(space, cubic)
    assert np.array_equal(got["residuals"], newton.residuals) and np.array_equal(got["newton"], newton.solution)


# ---------------------------------------------------------------------------
# the nonlinear path


def test_solve_nonlinear_with_data(setting):
    fine, space, square, _ = setting
    k = CellData(1.0 + (square[:, 0] % 3))
    linear = Problem("linear", diffusion=k, source=1.0)
    result = assemble(space, linear)
    x, _ = solve(result.matrix, result.rhs)
    assert np.abs(solve_nonlinear(space, linear).solution - x).max() <= 1e-10 * np.abs(x).max()
    # a(x, u) = k_cell (1 + u^2): data and the iterate in one callable
    quasilinear = Problem("quasi", diffusion=lambda x, u, where: k(x, where) * (1 + u**2), source=10.0)
    solved = solve_nonlinear(space, quasilinear)
    assert solved.residuals[-1] <= 1e-10 * solved.residuals[0]
    assert solved.iterations <= 8


# ---------------------------------------------------------------------------
# convergence on a layered field (launch/study_layers.py; docs/performance.md)

LAYERS = np.array([0.0, 0.25, 0.5, 0.75, 1.0])
CONTRAST = np.array([1.0, 10.0, 1.0, 10.0])


def _layer(x):
    return np.minimum(np.searchsorted(LAYERS, x, side="right") - 1, 3)


def _layered_exact(x):
    """u = sin(pi x) / a_i + c_i on layer i: a u' = pi cos(pi x) continuous, -(a u')' = pi^2 sin(pi x)."""
    a = CONTRAST
    shift = np.r_[0.0, np.cumsum(np.sin(np.pi * LAYERS[1:4]) * (1 / a[:3] - 1 / a[1:]))]
    i = _layer(x[:, 0])
    return np.sin(np.pi * x[:, 0]) / a[i] + shift[i]


def _layered_error(n: int, aligned: bool, p: int) -> tuple[float, float]:
    fine = from_spec(f"square:{n}")
    layer = _layer(fine.points[fine.cells].mean(axis=1)[:, 0])
    parts = agglomerate_cells(fine, n * n // 4)
    if aligned:
        parts = split_disconnected(dual_graph(fine), parts * 4 + layer)
    mesh = build_polytopic_mesh(fine, parts)
    space = DGSpace(mesh, p)
    problem = Problem("layers", diffusion=CellData(CONTRAST[layer]),
                      source=lambda x: np.pi**2 * np.sin(np.pi * x[:, 0]), dirichlet=_layered_exact)
    result = assemble(space, problem)
    x, _ = solve(result.matrix, result.rhs)
    return mesh.n_elements ** -0.5, errors(space, Problem("exact", exact=_layered_exact), x)["l2"]


def test_layered_field_converges_optimally_on_aligned_elements_and_about_linearly_across():
    rates = {}
    for aligned in (True, False):
        (h0, e0), (h1, e1) = (_layered_error(n, aligned, 2) for n in (32, 64))
        rates[aligned] = np.log(e0 / e1) / np.log(h0 / h1)
        if aligned:
            aligned_error = e1
        else:
            straddling_error = e1
    assert rates[True] >= 2.7  # p + 1 = 3: aligned elements see a smooth solution
    assert 0.7 <= rates[False] <= 1.5  # a kink inside elements: about h (docs/performance.md)
    assert straddling_error > 10 * aligned_error


def test_grid_data_on_its_cells_borders_is_their_harmonic_mean():
    grid = GridData(np.array([[1.0, 4.0], [100.0, 0.0]]), (0, 2, 0, 2))  # cells of side 1
    at = grid(np.array([[1.0, 0.5], [0.5, 1.0], [1.0, 1.0], [1.5, 1.0], [0.25, 0.75], [0.0, 0.5]]))
    # between 1 and 100; between 1 and 4; the corner of all four (a zero: 0); 100 | 0; inside; the box's edge
    assert at.tolist() == pytest.approx([2 * 100 / 101, 2 * 4 / 5, 0.0, 0.0, 1.0, 1.0], rel=1e-15)
    mixed = GridData(np.array([[-1.0], [3.0]]), (0, 2, 0, 1))  # a source of both signs: the arithmetic mean
    assert mixed(np.array([[1.0, 0.5]])).tolist() == [1.0]
    tensors = GridData(np.array([[np.diag([1.0, 2.0])], [np.diag([100.0, 2.0])]]), (0, 2, 0, 1))
    assert tensors(np.array([[1.0, 0.5]]))[0] == pytest.approx(np.diag([2 * 100 / 101, 2.0]), rel=1e-14)
    # a border whose coordinate rounds just below it (t = k - 1e-16 in grid units) is the border still
    shifted = GridData([[1.0], [4.0], [1.0], [1.0], [1.0]], (0.1, 0.9, 0, 1))
    assert shifted(np.array([[0.26, 0.5]])).tolist() == pytest.approx([1.6], rel=1e-15)
    # a vanishing side makes the mean vanish: scalars (+0 beside -0 too) and semi-definite tensors
    assert GridData([[0.0], [-0.0]], (0, 2, 0, 1))(np.array([[1.0, 0.5]])).tolist() == [0.0]
    for left, right in ((np.zeros((2, 2)), np.eye(2)), (np.diag([1.0, 0.0]), np.diag([0.0, 1.0]))):
        singular = GridData(np.array([[left], [right]]), (0, 2, 0, 1))
        assert np.abs(singular(np.array([[1.0, 0.5]]))).max() < 1e-15


@pytest.mark.parametrize("tensor", [False, True])
def test_a_grid_layered_along_element_faces_gives_the_exact_piecewise_linear_solution(tensor):
    """k = 1 | 100 across x = 1/2, a line of the mesh's faces: the flux k du/dx is continuous there and the
    harmonic mean on the faces keeps the scheme consistent (a one-sided value gave errors of O(h))."""
    flux = 1 / (0.5 / 1.0 + 0.5 / 100.0)
    exact = lambda x: np.where(x[:, 0] < 0.5, flux * x[:, 0], flux * (0.5 + (x[:, 0] - 0.5) / 100.0))  # noqa: E731
    gradient = lambda x: np.stack([np.where(x[:, 0] < 0.5, flux, flux / 100.0), 0 * x[:, 0]], axis=1)  # noqa: E731
    values = np.array([[np.diag([1.0, 3.0])], [np.diag([100.0, 0.5])]]) if tensor else np.array([[1.0], [100.0]])
    problem = Problem("layers", diffusion=GridData(values, (0, 1, 0, 1)), dirichlet=exact, exact=exact,
                      exact_gradient=gradient)
    fine = from_spec(f"square:{N}")
    right = fine.points[fine.cells].mean(axis=1)[:, 0] > 0.5
    parts = split_disconnected(dual_graph(fine), 2 * agglomerate_cells(fine, 8) + right)  # none across x = 1/2
    space = DGSpace(build_polytopic_mesh(fine, parts), 1)
    result = assemble(space, problem)
    x, _ = solve(result.matrix, result.rhs)
    assert max(errors(space, problem, x, penalty_values=result.face_penalty).values()) < 1e-11


def test_error_norms_read_the_data_on_each_side_of_a_face():
    """errors() with a diffusion per cell: each point's own cell, a face's larger side for sigma (the field
    as a callable of x, which takes the larger value on x = 1/2, gives the same norms); the piecewise linear
    solution of the two-layer problem exactly."""
    fine = from_spec(f"square:{N}")
    space = DGSpace(build_polytopic_mesh(fine), 1)
    k = lambda x: np.where(x[:, 0] < 0.5, 1.0, 100.0)  # noqa: E731
    flux = 1 / (0.5 / 1.0 + 0.5 / 100.0)
    exact = lambda x: np.where(x[:, 0] < 0.5, flux * x[:, 0], flux * (0.5 + (x[:, 0] - 0.5) / 100.0))  # noqa: E731
    gradient = lambda x: np.stack([flux / k(x), 0 * x[:, 0]], axis=1)  # noqa: E731
    cells = CellData(k(fine.points[fine.cells].mean(axis=1)))
    layered = Problem("layers", diffusion=cells, dirichlet=exact, exact=exact, exact_gradient=gradient)
    v = np.random.default_rng(4).standard_normal(space.n_dofs)
    located = errors(space, layered, v)
    plain = errors(space, Problem("layers", diffusion=k, exact=exact, exact_gradient=gradient), v)
    assert located == pytest.approx(plain, rel=1e-13)
    result = assemble(space, layered)
    x, _ = solve(result.matrix, result.rhs)
    assert max(errors(space, layered, x, penalty_values=result.face_penalty).values()) < 1e-11


# ---------------------------------------------------------------------------
# bad input: one line


def _one_line(exc_info) -> str:
    text = str(exc_info.value)
    assert "\n" not in text and isinstance(exc_info.value, PolyDGError)
    return text


def test_bad_data_is_one_line(setting, tmp_path):
    fine, space, _, _ = setting
    with pytest.raises(ProblemError) as err:
        assemble(space, Problem("short", diffusion=CellData(np.ones(10), source="k.npy")))
    assert "k.npy" in _one_line(err) and "10 values, expected one per fine cell" in str(err.value)
    assert f"({fine.n_cells})" in str(err.value)
    with pytest.raises(ProblemError) as err:
        solve_nonlinear(space, Problem("short", reaction=ElementData(np.ones(3))))
    assert "expected one per element" in _one_line(err)
    with pytest.raises(ProblemError) as err:
        CellData([1.0, 2.0, np.nan, np.inf])
    assert "NaN at cell 2 (2 of 4 cells)" in _one_line(err)
    with pytest.raises(ProblemError) as err:
        CellData([np.eye(2), [[1.0, 2.0], [2.0, 1.0]]])
    assert "cell 1 is not positive semi-definite (eigenvalue -1)" in _one_line(err)
    with pytest.raises(ProblemError) as err:
        ElementData([[[1.0, 0.5], [0.0, 1.0]]])
    assert "element 0 is not symmetric" in _one_line(err)
    with pytest.raises(ProblemError) as err:
        GridData(np.array([[1.0, np.nan], [1.0, 1.0]]), (0, 1, 0, 1))
    assert "NaN at grid cell (0, 1)" in _one_line(err)
    with pytest.raises(ProblemError) as err:
        GridData(np.ones((2, 2)), (0, 0.5, 0, 1))(np.array([[0.75, 0.5]]))
    assert "outside the grid's bounds" in _one_line(err)
    with pytest.raises(ProblemError) as err:
        assemble(space, Problem("negative", diffusion=CellData(-np.ones(fine.n_cells))))
    assert "negative diffusion -1 at fine cell 0" in _one_line(err)
    coarse = DGSpace(quadrature_mesh(space.mesh, "coarse"), 1)
    with pytest.raises(ProblemError) as err:
        assemble(coarse, Problem("coarse", reaction=CellData(np.ones(fine.n_cells)), diffusion=1.0))
    assert "quadrature simplices span several fine cells" in _one_line(err)
    assert "--quadrature-simplices fine" in str(err.value)
    with pytest.raises(ProblemError) as err:  # a data coefficient evaluated without the points' cells
        Problem("bare", reaction=CellData(np.ones(4))).reaction_at(np.zeros((2, 2)))
    assert "reads where each point lies" in _one_line(err)
    with pytest.raises(ProblemError) as err:
        Problem("advected", advection=lambda x, where: x)
    assert "advection reads where a point lies" in _one_line(err)
    with pytest.raises(OptionError) as err:
        assemble(space, Problem("single", reaction=CellData(np.ones(fine.n_cells))), precision="single")
    assert "double precision" in _one_line(err)


def test_bad_coefficient_options_are_one_line(setting, tmp_path):
    fine, space, _, _ = setting
    fine = from_spec(f"square:{N}")
    fine.cell_data["permeability"] = np.ones(fine.n_cells)
    poisson = builtin_problem("poisson", 2)
    np.save(tmp_path / "short.npy", np.ones(5))
    np.save(tmp_path / "bad.npy", np.r_[np.ones(fine.n_cells - 1), np.nan])
    np.save(tmp_path / "grid.npy", np.ones((3, 3)))
    cases = {
        "diffusion=cell:porosity": "has no cell data 'porosity' (it has: permeability)",
        f"reaction=cell:{tmp_path}/short.npy": f"short.npy' has 5 values, expected one per fine cell of square:{N} "
                                               f"({fine.n_cells})",
        f"source=cell:{tmp_path}/bad.npy": f"NaN at cell {fine.n_cells - 1}",
        f"source=element:{tmp_path}/missing.npy": "missing.npy' not found",
        "advection=1": "unknown coefficient 'advection'",
        "diffusion": "expected NAME=SPEC",
        "diffusion=fast": "SPEC 'fast' is neither a number nor cell:, element: or grid: data",
        f"diffusion=grid:{tmp_path}/grid.npy:0,1,0": "bounds [0.0, 1.0, 0.0] must be",
        f"diffusion=grid:{tmp_path}/grid.npy:0,1,0,1,0,1": "values of shape (3, 3) on a 3D grid",
    }
    for spec, expected in cases.items():
        with pytest.raises(PolyDGError) as err:
            with_coefficients(poisson, [spec], fine)
        text = _one_line(err)
        assert text.startswith(f"--coefficient {spec}") and expected in text, text
    with pytest.raises(OptionError) as err:
        with_coefficients(poisson, ["reaction=1", "reaction=2"], fine)
    assert "reaction is given twice" in _one_line(err)
    np.save(tmp_path / "k.npy", np.ones(3))
    problem = with_coefficients(poisson, [f"diffusion=element:{tmp_path}/k.npy"], fine)
    with pytest.raises(ProblemError) as err:  # the elements are known once the mesh is agglomerated
        assemble(space, problem)
    text = _one_line(err)
    assert text.startswith(f"--coefficient diffusion=element:{tmp_path}/k.npy")
    assert f"3 values, expected one per element of 'square:{N}' ({space.mesh.n_elements})" in text


def test_command_line_coefficient_from_the_mesh_files_cell_data(tmp_path, capsys):
    """--coefficient diffusion=cell:ARRAY on a .vtu carrying the array: fine sub-simplices, the matrix of the
    same CellData in Python; a missing array is one line naming the ones present, exit 2."""
    import json

    import meshio
    import scipy.sparse as sp

    from polydg.cli import main
    from polydg.mesh import build_polytopic_mesh, load_mesh, unit_square
    from polydg.partition import agglomerate_cells
    from polydg.problem import builtin_problem, with_coefficients

    fine = unit_square(8)
    permeability = np.where(fine.points[fine.cells].mean(axis=1)[:, 0] < 0.5, 1.0, 10.0)
    path = tmp_path / "layers.vtu"
    meshio.write(path, meshio.Mesh(np.c_[fine.points, np.zeros(len(fine.points))], [("triangle", fine.cells)],
                                   cell_data={"permeability": [permeability]}))
    out = tmp_path / "out"
    args = ["--mesh", str(path), "--agglomerate", "10", "--degree", "1", "--problem", "poisson", "--quiet"]
    assert main(args + ["--coefficient", "diffusion=cell:permeability", "--output", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["quadrature_simplices"] == "fine"
    read = load_mesh(str(path))
    problem = with_coefficients(builtin_problem("poisson", 2), ["diffusion=cell:permeability"], read)
    space = DGSpace(build_polytopic_mesh(read, agglomerate_cells(read, 10, seed=0)), 1)
    want = assemble(space, problem).matrix
    got = sp.load_npz(out / "matrix.npz")
    assert abs(got - want).max() == 0.0
    capsys.readouterr()
    assert main(args + ["--coefficient", "diffusion=cell:porosity"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "porosity" in err and "permeability" in err


def test_command_line_says_what_the_coefficient_option_changes(tmp_path, capsys):
    """A given --quadrature-simplices coarse that data per fine cell overrides, and an exact solution that a
    replaced coefficient voids, are each said in a line (no errors are then computed); degree 0 with a diffusion
    warns once that it does not converge."""
    import json

    from polydg.assembly import assembler
    from polydg.cli import main
    from polydg.mesh import from_spec

    np.save(tmp_path / "k.npy", np.ones(from_spec("square:4").n_cells))
    out = tmp_path / "out"
    args = ["--mesh", "square:4", "--agglomerate", "6", "--degree", "1", "--solve", "--output", str(out)]
    capsys.readouterr()
    assert main(args + ["--coefficient", f"diffusion=cell:{tmp_path / 'k.npy'}", "--quadrature-simplices",
                        "coarse"]) == 0
    err = capsys.readouterr().err
    assert "--quadrature-simplices coarse: data per fine cell is read on the fine cells" in err
    assert "--coefficient replaces paper-2d's coefficients: its exact solution no longer holds" in err
    summary = json.loads((out / "summary.json").read_text())
    assert "errors" not in summary and summary["memory_budget_mb"] == 1024.0  # the sided executor's record
    assert main(args + ["--coefficient", "diffusion=1", "--quadrature-simplices", "coarse"]) == 0  # no cell data
    assert "--quadrature-simplices coarse:" not in capsys.readouterr().err
    assert json.loads((out / "summary.json").read_text())["quadrature_simplices"] == "coarse"
    said = assembler._SAID["degree 0"]
    try:
        assembler._SAID["degree 0"] = False
        capsys.readouterr()
        assert main(["--mesh", "square:4", "--agglomerate", "6", "--degree", "0"]) == 0
        assert main(["--mesh", "square:4", "--agglomerate", "6", "--degree", "0"]) == 0
        err = capsys.readouterr().err
        assert err.count("warning: degree 0 with a diffusion: the gradients vanish") == 1, err
    finally:
        assembler._SAID["degree 0"] = said
