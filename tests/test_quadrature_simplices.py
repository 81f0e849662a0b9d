"""Coarse quadrature simplices (polydg/mesh/quadrature_simplices.py): each polygon re-triangulated from its
boundary tiles it exactly, and the matrices on it are the fine triangles' ones."""

import json

import numpy as np
import pytest

from polydg.errors import OptionError
from polydg.mesh import build_polytopic_mesh, from_spec
from polydg.mesh.output import oriented_boundary_edges
from polydg.mesh.quadrature_simplices import coarse_quadrature_mesh, quadrature_mesh
from polydg.partition import agglomerate
from polydg.problem import Problem


def _blocks(spec, region):
    """The polytopic mesh of ``spec`` whose element ids are ``region(x, y)`` at the cells' centroids."""
    fine = from_spec(spec)
    c = fine.points[fine.cells].mean(axis=1)
    return build_polytopic_mesh(fine, region(c[:, 0], c[:, 1]))


@pytest.fixture(scope="module")
def agglomerated():
    return agglomerate(from_spec("square:6"), 8)


@pytest.fixture(scope="module")
def odd():
    """square:10 cut into a ring with a hole (0), the hole (1), two blocks touching each other at the vertex
    (0.2, 0.2) only (2: not simple loops) and two L-shaped elements (3, 4, non-convex)."""
    def region(x, y):
        hole = (x > 0.6) & (x < 0.8) & (y > 0.6) & (y < 0.8)
        ring = ~hole & (x > 0.4) & (y > 0.4)
        touching = ((x < 0.2) & (y < 0.2)) | ((x > 0.2) & (x < 0.4) & (y > 0.2) & (y < 0.4))
        bottom = ~touching & (x > 0.2) & (y < 0.4)
        return np.select([ring, hole, touching, bottom], [0, 1, 2, 3], 4)
    return _blocks("square:10", region)


def _check_tiling(fine, coarse):
    """Areas per element, every boundary edge an edge of exactly one new triangle of its element, new
    triangles counter-clockwise on boundary vertices only, faces and elements unchanged."""
    assert coarse.n_elements == fine.n_elements and coarse.n_simplices <= fine.n_simplices
    np.testing.assert_array_equal(coarse.face_vertices, fine.face_vertices)
    np.testing.assert_array_equal(coarse.face_elements, fine.face_elements)
    np.testing.assert_array_equal(np.diff(coarse.element_offsets), np.bincount(coarse.simplex_element))
    area = np.bincount(coarse.simplex_element, weights=coarse.simplex_volume, minlength=coarse.n_elements)
    np.testing.assert_allclose(area, fine.measure, rtol=1e-13)
    x = coarse.points[coarse.simplices]
    u, v = x[:, 1] - x[:, 0], x[:, 2] - x[:, 0]
    signed = 0.5 * (u[:, 0] * v[:, 1] - u[:, 1] * v[:, 0])
    np.testing.assert_allclose(signed, coarse.simplex_volume, rtol=1e-13)
    assert (signed > 0).all()
    # every (element, boundary edge) is an edge of exactly one triangle of that element
    element, edges = oriented_boundary_edges(fine)
    n = len(coarse.points)
    tri_edges = np.concatenate([np.sort(coarse.simplices[:, [i, j]], axis=1) for i, j in ((0, 1), (1, 2), (0, 2))])
    tri_keys = (np.tile(coarse.simplex_element, 3) * n + tri_edges[:, 0]) * n + tri_edges[:, 1]
    starts = edges[:, 0]
    edges = np.sort(edges, axis=1)
    boundary_keys = (element * n + edges[:, 0]) * n + edges[:, 1]
    hits = (tri_keys[None, :] == boundary_keys[:, None]).sum(axis=1)
    np.testing.assert_array_equal(hits, 1)
    # ... the one that face_simplices names, on both sides
    for side in (0, 1):
        has = coarse.face_elements[:, side] >= 0
        s = coarse.face_simplices[has, side]
        np.testing.assert_array_equal(coarse.simplex_element[s], coarse.face_elements[has, side])
        on = (coarse.simplices[s][:, :, None] == coarse.face_vertices[has][:, None, :]).any(axis=1).all(axis=1)
        assert on.all()
    # re-triangulated elements have vertices on their boundary only
    changed = np.diff(coarse.element_offsets) < np.diff(fine.element_offsets)
    mine = changed[coarse.simplex_element]
    corner_keys = np.repeat(coarse.simplex_element[mine], 3) * n + coarse.simplices[mine].ravel()
    assert np.isin(corner_keys, element * n + starts).all()


def test_coarse_triangles_tile_every_agglomerated_element(agglomerated):
    coarse = coarse_quadrature_mesh(agglomerated)
    _check_tiling(agglomerated, coarse)
    assert coarse.n_simplices < agglomerated.n_simplices
    # V_b - 2 triangles per simple polygon (no holes in this agglomeration)
    element, _ = oriented_boundary_edges(agglomerated)
    np.testing.assert_array_equal(np.diff(coarse.element_offsets), np.bincount(element) - 2)


def test_holes_non_convex_and_self_touching_elements(odd):
    coarse = coarse_quadrature_mesh(odd)
    _check_tiling(odd, coarse)
    element, _ = oriented_boundary_edges(odd)
    boundary_vertices = np.bincount(element)
    count = np.diff(coarse.element_offsets)
    assert count[0] == boundary_vertices[0] - 2 + 2 < np.diff(odd.element_offsets)[0]  # one hole: + 2
    assert count[1] == boundary_vertices[1] - 2
    # the element touching itself at a vertex keeps its fine triangles, in their order
    s = slice(odd.element_offsets[2], odd.element_offsets[3])
    np.testing.assert_array_equal(coarse.simplices[coarse.element_offsets[2]:coarse.element_offsets[3]],
                                  odd.simplices[s])
    for e in (3, 4):  # the Ls: non-convex
        assert count[e] == boundary_vertices[e] - 2 < np.diff(odd.element_offsets)[e]
    # re-triangulating the coarse mesh changes nothing: no element has a vertex off its boundary any more
    again = coarse_quadrature_mesh(coarse)
    np.testing.assert_array_equal(again.simplices, coarse.simplices)


def test_fine_is_the_mesh_and_3d_meshes_keep_their_tetrahedra(agglomerated):
    assert quadrature_mesh(agglomerated, "fine") is agglomerated
    one_per_triangle = build_polytopic_mesh(from_spec("square:2"))  # no vertex off an element's boundary
    assert coarse_quadrature_mesh(one_per_triangle) is one_per_triangle
    cube = agglomerate(from_spec("cube:2"), 4)
    assert quadrature_mesh(cube, "coarse") is cube
    with pytest.raises(OptionError, match="2D meshes"):
        coarse_quadrature_mesh(cube)
    with pytest.raises(OptionError, match="unknown quadrature simplices 'medium'"):
        quadrature_mesh(agglomerated, "medium")


def test_an_invalid_polygon_gets_no_triangles():
    from polydg.mesh.quadrature_simplices import BoundaryLoops, _constrained_triangles

    # element 0 a bow tie (its edges cross), element 1 a triangle
    points = np.array([[0.0, 0.0], [1.0, 1.0], [1.0, 0.0], [0.0, 1.0], [2.0, 0.0], [3.0, 0.0], [2.0, 1.0]])
    loops = BoundaryLoops(vertices=np.arange(7), offsets=np.array([0, 4, 7]), element=np.array([0, 1]),
                          simple=np.ones(2, dtype=bool))
    triangles, owner = _constrained_triangles(points, loops, np.ones(2, dtype=bool))
    assert owner.tolist() == [1] and sorted(triangles[0].tolist()) == [4, 5, 6]


# ---------------------------------------------------------------------------
# the same matrices: every integrand a polynomial the rule of degree 2p + 1 integrates exactly


def _polynomial_slab_problem():
    """u_t - Lap u + w . grad u + c u = f with w, c linear in (x, y, t), f and g_D of degree 2."""
    return Problem("poly", diffusion=1.0, advection=lambda y: np.column_stack([0.3 + y[:, 1] - y[:, 2], -0.2 + y[:, 0]]),
                   reaction=lambda y: 2.0 + y[:, 0] + y[:, 2], source=lambda y: 1.0 + y[:, 0] * y[:, 2] - y[:, 1],
                   dirichlet=lambda y: 1.0 + y[:, 0] * y[:, 1] + y[:, 2], space_time=True, initial=0.0)


@pytest.mark.parametrize("local_steps", [None, "1:3"])
def test_a_slab_on_coarse_triangles_is_the_slab_on_fine_ones(odd, local_steps):
    from polydg.assembly import AssemblyScope, assemble
    from polydg.space import DGSpace
    from polydg.spacetime import slab_mesh, slab_problem
    from polydg.spacetime.slab import random_local_steps

    steps = None if local_steps is None else random_local_steps(odd.n_elements, 1, 3, seed=4)
    degree = np.array([1, 2, 2, 1, 2])
    problem = slab_problem(_polynomial_slab_problem(), 2, 0.0, 0.25)
    results, sizes = [], []
    for mesh in (odd, coarse_quadrature_mesh(odd)):
        slab = slab_mesh(mesh, 0.0, 0.25, steps)
        scale = None if steps is None else (np.abs(slab.face_normal[:, 2]) != 1).astype(float)
        space = DGSpace(slab, degree if steps is None else np.repeat(degree, steps))
        results.append(assemble(space, problem, scope=AssemblyScope(face_penalty_scale=scale)))
        sizes.append((slab.n_simplices, slab.n_boundary_faces))
    assert sizes[1][0] < sizes[0][0] and sizes[1][1] < sizes[0][1]  # fewer tetrahedra, fewer top/bottom faces
    A, B = results[0].matrix, results[1].matrix
    np.testing.assert_array_equal(A.indptr, B.indptr)
    np.testing.assert_array_equal(A.indices, B.indices)
    np.testing.assert_allclose(B.data, A.data, rtol=0, atol=1e-12 * np.abs(A.data).max())
    np.testing.assert_allclose(results[1].rhs, results[0].rhs, rtol=0, atol=1e-12 * np.abs(results[0].rhs).max())


def test_a_steady_2d_matrix_on_coarse_triangles_is_the_fine_one(agglomerated):
    from polydg.assembly import assemble
    from polydg.space import DGSpace

    problem = Problem("poly-2d", diffusion=1.0, advection=lambda x: np.column_stack([1.0 + x[:, 1], 0.5 - x[:, 0]]),
                      reaction=lambda x: 1.0 + x[:, 0], source=lambda x: x[:, 0] * x[:, 1], dirichlet=1.0, dim=2)
    fine = assemble(DGSpace(agglomerated, 2), problem)
    coarse = assemble(DGSpace(coarse_quadrature_mesh(agglomerated), 2), problem)
    np.testing.assert_array_equal(fine.matrix.indices, coarse.matrix.indices)
    np.testing.assert_allclose(coarse.matrix.data, fine.matrix.data, rtol=0, atol=1e-12 * np.abs(fine.matrix.data).max())
    np.testing.assert_allclose(coarse.rhs, fine.rhs, rtol=0, atol=1e-12 * np.abs(fine.rhs).max())


def test_polynomials_are_reproduced_over_slabs_on_the_odd_mesh(odd):
    from polydg.spacetime import march

    def u(y):
        x, z, t = y.T
        return 1.0 + x - 0.5 * z + 0.3 * t + x * x - x * z + 0.7 * z * t + 0.4 * t * t

    def source(y):  # u_t - Lap u + u
        x, z, t = y.T
        return 0.3 + 0.7 * z + 0.8 * t - 2.0 + u(y)

    problem = Problem("poly", diffusion=1.0, reaction=1.0, source=source, dirichlet=u, exact=u, space_time=True,
                      initial=lambda x: u(np.column_stack([x, np.zeros(len(x))])))
    for steps in (None, 2):
        result = march(odd, problem, 2, n_slabs=3, final_time=0.6, local_steps=steps)
        assert result.space.mesh.n_simplices < 3 * odd.n_simplices * (steps or 1)  # coarse: the default
        assert result.errors["l2"] < 1e-9 and result.errors["l2_l2"] < 1e-9


def test_cli_option_and_summary(tmp_path, capsys):
    from polydg.assemble import main

    summaries = {}
    for kind in ("fine", "coarse"):
        path = tmp_path / f"{kind}.json"
        assert main(["--mesh", "square:8", "--agglomerate", "4", "--degree", "1", "--problem", "poisson",
                     "--quadrature-simplices", kind, "--json", str(path), "--quiet"]) == 0
        summaries[kind] = json.loads(path.read_text())
    assert summaries["fine"]["quadrature_simplices"] == "fine" and summaries["fine"]["sub_elements"] == 128
    assert summaries["coarse"]["quadrature_simplices"] == "coarse" and summaries["coarse"]["sub_elements"] < 128
    assert summaries["coarse"]["nnz"] == summaries["fine"]["nnz"]
    assert main(["--mesh", "square:8", "--quadrature-simplices", "medium"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--quadrature-simplices" in err and "medium" in err and "\n" not in err
