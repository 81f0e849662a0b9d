"""What a run leaves to look at: the discrete solution in solution.vtu, a march's .pvd series, the PNGs.

The VTU files are read back with meshio and their values checked against the discrete solution at
the points they name, and against polynomials the DG space reproduces (an L2 projection, a solve of a
polynomial problem, a space-time march of a solution linear in x and t).
"""

from __future__ import annotations

import json
import struct
import xml.etree.ElementTree as ET
from pathlib import Path

import meshio
import numpy as np
import pytest

from polydg.assembly import assemble
from polydg.mesh import from_spec
from polydg.output import SlabSeries, sample_solution, sample_top
from polydg.partition import agglomerate
from polydg.problem import Problem, load_problem
from polydg.solve import evaluate, solve
from polydg.space import DGSpace

PNG = b"\x89PNG\r\n\x1a\n"


def png_size(path: Path) -> tuple[int, int]:
    """(width, height) from a PNG's header (and that it is one)."""
    head = Path(path).read_bytes()[:24]
    assert head[:8] == PNG and head[12:16] == b"IHDR", f"{path} is not a PNG"
    return struct.unpack(">II", head[16:24])


def read_solution(path: Path):
    """meshio's reading of a solution VTU: (points, cells (m, k + 1), values, element, degree)."""
    got = meshio.read(path)
    assert len(got.cells) == 1
    return (got.points, got.cells[0].data, got.point_data["solution"], got.cell_data["element"][0],
            got.cell_data["degree"][0])


def projection(space: DGSpace, q) -> np.ndarray:
    """The coefficients of the L2 projection of ``q`` onto the space: the mass matrix (reaction 1, nothing
    else) against the load of q, with quadrature exact for it; q itself when q is in the space."""
    result = assemble(space, Problem("mass", reaction=1.0, source=q))
    return solve(result.matrix, result.rhs)[0]


def space_of(dim: int, p: int) -> DGSpace:
    fine = from_spec("square:6" if dim == 2 else "cube:3")
    mesh = agglomerate(fine, 9)
    degree = np.random.default_rng(p).integers(1, p + 1, size=mesh.n_elements) if p > 1 else p
    return DGSpace(mesh, degree)


@pytest.mark.parametrize("dim", [2, 3])
@pytest.mark.parametrize("p", [1, 2, 3])
def test_the_vtu_holds_the_discrete_solution_at_each_sub_simplex_vertex(tmp_path, dim, p):
    space = space_of(dim, p)
    mesh = space.mesh
    x = np.random.default_rng(10 * dim + p).standard_normal(space.n_dofs)
    sample_solution(space, x).write_vtu(tmp_path / "u.vtu")
    points, cells, values, element, degree = read_solution(tmp_path / "u.vtu")
    k1 = dim + 1
    assert cells.shape == (mesh.n_simplices, k1) and len(points) == mesh.n_simplices * k1  # own copies
    assert np.array_equal(element, mesh.simplex_element) and np.array_equal(degree, space.degree[element])
    assert np.array_equal(points[cells][..., :dim], mesh.points[mesh.simplices])
    if dim == 2:
        assert not points[:, 2].any()
    # the file's values are the discrete solution at the points it names, in the elements it names
    at = points[cells.ravel()][:, :dim]
    assert np.abs(values[cells.ravel()] - evaluate(space, x, at, np.repeat(element, k1))).max() <= 1e-12 * (
        1 + np.abs(values).max())
    # discontinuous across elements: the copies of a vertex shared by two elements differ (random x)
    vertex = mesh.simplices.ravel()
    owner = np.repeat(mesh.simplex_element, k1)
    shared = [np.flatnonzero(vertex == v) for v in np.unique(vertex)]
    across = [(i[0], j) for i in shared for j in i[1:] if owner[j] != owner[i[0]]]
    assert across and max(abs(values[a] - values[b]) for a, b in across) > 1e-3
    # and within an element a vertex has one value: the copies of sub-simplices of one element agree
    within = [(i[0], j) for i in shared for j in i[1:] if owner[j] == owner[i[0]]]
    assert within and max(abs(values[a] - values[b]) for a, b in within) <= 1e-12 * (1 + np.abs(values).max())


@pytest.mark.parametrize("dim", [2, 3])
@pytest.mark.parametrize("p", [1, 2, 3])
def test_the_vtu_of_a_polynomial_in_the_space_is_the_polynomial(tmp_path, dim, p):
    space = DGSpace(space_of(dim, 1).mesh, p)
    c = np.array([0.7, -0.4, 0.25])[:dim]

    def q(x):  # of degree p: in the space
        return (0.5 + x @ c) ** p + 0.3

    sample_solution(space, projection(space, q)).write_vtu(tmp_path / "q.vtu")
    points, cells, values, _, _ = read_solution(tmp_path / "q.vtu")
    assert np.abs(values - q(points[:, :dim])).max() <= 1e-10


def test_the_command_line_writes_the_solution_and_the_pictures(tmp_path):
    from polydg.assemble import main

    out = tmp_path / "out"
    assert main(["--mesh", "square:8", "--agglomerate", "12", "--degree", "2", "--problem", "polynomial:2",
                 "--solve", "--output", str(out), "--plot", "--quiet"]) == 0
    names = sorted(p.name for p in out.iterdir() if not p.name.startswith("."))  # not the manifest
    assert names == ["matrix.npz", "mesh.png", "rhs.npy", "solution.npy", "solution.png", "solution.vtu",
                     "summary.json", "timings.png"]
    for png in ("mesh.png", "solution.png", "timings.png"):
        width, height = png_size(out / png)
        assert width >= 300 and height >= 200
    # p = 2 reproduces the degree-2 polynomial: the file's values are the exact solution at its points
    points, cells, values, element, degree = read_solution(out / "solution.vtu")
    exact = load_problem("polynomial:2", 2).exact
    assert np.abs(values - exact(points[:, :2])).max() <= 1e-8 * (1 + np.abs(values).max())
    assert set(degree.tolist()) == {2} and element.max() == json.loads((out / "summary.json").read_text())[
        "elements"] - 1


def test_a_run_without_a_solve_writes_the_mesh(tmp_path):
    from polydg.assemble import main

    out = tmp_path / "out"
    assert main(["--mesh", "cube:2", "--problem", "poisson", "--output", str(out), "--quiet"]) == 0
    assert "solution.vtu" not in {p.name for p in out.iterdir()}
    got = meshio.read(out / "mesh.vtu")
    assert got.cells[0].type == "tetra" and len(got.cells[0].data) == 48
    assert np.array_equal(got.cell_data["element"][0], np.arange(48))


def test_a_3d_run_pictures_a_plane_through_the_solution(tmp_path):
    from polydg.assemble import main

    out = tmp_path / "out"
    assert main(["--mesh", "cube:3", "--agglomerate", "12", "--degree", "1", "--problem", "paper-3d",
                 "--solve", "--output", str(out), "--plot", "--quiet"]) == 0
    for png in ("mesh.png", "solution.png", "timings.png"):
        assert min(png_size(out / png)) >= 200
    points, cells, values, _, _ = read_solution(out / "solution.vtu")
    assert cells.shape[1] == 4 and np.isfinite(values).all()


def test_a_nonlinear_run_pictures_its_residuals(tmp_path):
    from polydg.assemble import main

    out = tmp_path / "out"
    assert main(["--mesh", "square:6", "--agglomerate", "8", "--degree", "1", "--problem", "quasilinear",
                 "--output", str(out), "--plot", "--quiet"]) == 0
    assert min(png_size(out / "residuals.png")) >= 200
    assert len(json.loads((out / "summary.json").read_text())["nonlinear"]["residuals"]) > 2


def test_plot_needs_an_output_folder(capsys):
    from polydg.assemble import main

    assert main(["--plot", "--quiet"]) == 2
    assert "--plot writes its pictures into --output DIR" in capsys.readouterr().err


# ---------------------------------------------------------------------------
# a space-time march: the solution at each slab's end, and the .pvd series


def linear_in_space_time() -> Problem:
    """u = 1 + x/2 - y/4 + t: u_t - Laplace u = 1; P_1 in (x, t) holds it, so the march reproduces it."""
    def u(y):
        return 1.0 + 0.5 * y[:, 0] - 0.25 * y[:, 1] + y[:, 2]

    return Problem("linear-st", diffusion=1.0, source=1.0, dirichlet=u, exact=u, dim=2, space_time=True,
                   initial=lambda x: 1.0 + 0.5 * x[:, 0] - 0.25 * x[:, 1])


@pytest.mark.parametrize("steps", [None, 2])
def test_each_slab_end_is_the_slab_solution_at_its_top(steps, tmp_path):
    from polydg.spacetime import march

    mesh = agglomerate(from_spec("square:6"), 8)
    problem = linear_in_space_time()
    series, slabs = SlabSeries(tmp_path), []

    def on_slab(space, u, t):
        slabs.append((space, np.array(u), t))
        series.add(space, u, t)

    march(mesh, problem, 1, n_slabs=3, final_time=0.6, local_steps=steps, on_slab=on_slab)
    assert series.steps == [(pytest.approx(t), f"solution-slab-{n:04d}.vtu") for n, t in ((1, 0.2), (2, 0.4), (3, 0.6))]
    for n, (space, u, t) in enumerate(slabs):
        points, cells, values, element, _ = read_solution(tmp_path / series.steps[n][1])  # written as it came
        assert cells.shape[1] == 3
        y = np.column_stack([points[:, :2], np.full(len(points), t)])
        # the slab solution at (x, t_n) in the element under each top face (its last step) ...
        own = evaluate(space, u, y, np.repeat(element, 3))
        assert np.abs(values - own).max() <= 1e-12
        # ... which is u(x, t_n): the space holds the exact solution
        assert np.abs(values - problem.exact(y)).max() <= 1e-9
        if steps:
            assert element.max() >= mesh.n_elements  # slab elements: the last of each one's steps
    assert series.last.time == pytest.approx(0.6) and np.array_equal(series.last.values, values)  # the last kept


LINEAR_PROBLEM_FILE = """
from polydg.problem import Problem

def u(y):
    return 1.0 + 0.5 * y[:, 0] - 0.25 * y[:, 1] + y[:, 2]

problem = Problem("linear-st", diffusion=1.0, source=1.0, dirichlet=u, exact=u, dim=2, space_time=True,
                  initial=lambda x: 1.0 + 0.5 * x[:, 0] - 0.25 * x[:, 1])
"""


def test_the_command_line_march_writes_a_series_listing_every_slab(tmp_path):
    from polydg.assemble import main

    out, file = tmp_path / "out", tmp_path / "linear.py"
    file.write_text(LINEAR_PROBLEM_FILE)
    assert main(["--mesh", "square:8", "--agglomerate", "10", "--degree", "1", "--problem", f"{file}:problem",
                 "--time-slabs", "3", "--final-time", "0.3", "--output", str(out), "--plot", "--quiet"]) == 0
    collection = ET.parse(out / "solution.pvd").getroot().find("Collection")
    entries = [(float(d.get("timestep")), d.get("file")) for d in collection.findall("DataSet")]
    assert [t for t, _ in entries] == pytest.approx([0.1, 0.2, 0.3])
    assert [f for _, f in entries] == [f"solution-slab-{n:04d}.vtu" for n in (1, 2, 3)]
    exact = linear_in_space_time().exact
    for t, name in entries:
        points, cells, values, _, _ = read_solution(out / name)
        assert cells.shape[1] == 3  # the spatial mesh's triangles at the slab's end
        y = np.column_stack([points[:, :2], np.full(len(points), t)])
        assert np.abs(values - exact(y)).max() <= 1e-9  # u(x, t_n): the march reproduces it
    last, final = read_solution(out / entries[-1][1]), read_solution(out / "solution.vtu")
    assert all(np.array_equal(a, b) for a, b in zip(last, final))
    assert min(png_size(out / "solution.png")) >= 200


def test_a_march_stopped_after_some_slabs_leaves_the_earlier_set_whole(tmp_path, monkeypatch):
    """The slabs' files go into the output set's staging folder as the march writes them: a run stopped
    after two of three slabs leaves the earlier set as it was, with no file of its own."""
    from polydg.assemble import main
    from polydg.errors import Interrupted

    out, file = tmp_path / "out", tmp_path / "linear.py"
    file.write_text(LINEAR_PROBLEM_FILE)
    run = ["--mesh", "square:8", "--agglomerate", "10", "--degree", "1", "--problem", f"{file}:problem",
           "--final-time", "0.3", "--output", str(out), "--quiet"]
    assert main(run + ["--time-slabs", "2"]) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    add = SlabSeries.add
    written = []

    def add_then_stop(self, space, solution, t):
        add(self, space, solution, t)
        written.append(self.directory / self.steps[-1][1])
        if len(self.steps) == 2:
            assert all(path.is_file() and path.parent.parent == out for path in written)  # staged
            raise Interrupted(15)

    monkeypatch.setattr(SlabSeries, "add", add_then_stop)
    assert main(run + ["--time-slabs", "3"]) == 128 + 15
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # no staging folder, no slab 3
    assert not any(path.exists() for path in written)


def test_a_slab_top_sample_of_a_3d_slab_is_tetrahedra():
    from polydg.spacetime.slab import slab_mesh

    mesh = agglomerate(from_spec("cube:2"), 4)
    space = DGSpace(slab_mesh(mesh, 0.0, 0.5), 1)
    sample = sample_top(space, np.zeros(space.n_dofs))
    assert sample.cells.shape == (mesh.n_simplices, 4) and sample.time == 0.5
