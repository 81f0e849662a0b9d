"""Generated and agglomerated polytopic meshes: geometry and topology invariants."""

import numpy as np
import pytest

from polydg.errors import MeshError
from polydg.mesh import SimplexMesh, build_polytopic_mesh, from_spec
from polydg.mesh.generators import parse_spec
from polydg.partition import agglomerate, agglomerate_cells, dual_graph

SPECS = ["square:12", "square:12:perturb=0.3:seed=4", "oscillating-square:16", "cube:4", "cube:4:perturb=0.2:seed=2"]


def closure_defect(mesh):
    """max over elements of |sum over its faces of measure * outward normal|."""
    v = mesh.face_normal * mesh.face_measure[:, None]
    acc = np.zeros((mesh.n_elements, mesh.dim))
    np.add.at(acc, mesh.face_elements[:, 0], v)
    inner = mesh.face_elements[:, 1] >= 0
    np.add.at(acc, mesh.face_elements[inner, 1], -v[inner])
    return np.abs(acc).max()


def divergence_volume(mesh):
    """Domain measure from the boundary faces: |Omega| = (1/d) int x . n."""
    b = mesh.boundary_faces
    centroid = mesh.points[mesh.face_vertices[b]].mean(axis=1)
    return np.sum(np.einsum("ni,ni->n", centroid, mesh.face_normal[b]) * mesh.face_measure[b]) / mesh.dim


def meshes():
    for spec in SPECS:
        fine = from_spec(spec)
        yield spec, fine, build_polytopic_mesh(fine)
        yield spec + " agglomerated", fine, agglomerate(fine, max(4, fine.n_cells // 17))


@pytest.mark.parametrize("spec, fine, mesh", list(meshes()), ids=lambda x: x if isinstance(x, str) else "")
def test_measures_and_closed_elements(spec, fine, mesh):
    d = mesh.dim
    assert mesh.measure.sum() == pytest.approx(divergence_volume(mesh), rel=1e-12)
    if not spec.startswith("oscillating"):
        assert mesh.measure.sum() == pytest.approx(1.0, rel=1e-12)
        boundary_area = 2 * d  # the unit square has perimeter 4, the cube area 6
        assert mesh.face_measure[mesh.boundary_faces].sum() == pytest.approx(boundary_area, rel=1e-12)
    assert closure_defect(mesh) < 1e-12 * mesh.face_measure.max()
    # normals are unit and point out of the first element
    assert np.allclose(np.linalg.norm(mesh.face_normal, axis=1), 1.0)
    x_face = mesh.points[mesh.face_vertices].mean(axis=1)
    x_simplex = mesh.points[mesh.simplices[mesh.face_simplices[:, 0]]].mean(axis=1)
    assert (np.einsum("ni,ni->n", x_face - x_simplex, mesh.face_normal) > 0).all()
    # element geometry
    assert (mesh.bbox_max > mesh.bbox_min).all()
    assert (mesh.diameter <= np.linalg.norm(mesh.bbox_max - mesh.bbox_min, axis=1) + 1e-14).all()
    assert (mesh.diameter > 0).all()


@pytest.mark.parametrize("spec", SPECS)
def test_every_fine_facet_is_inside_one_element_or_on_one_interface(spec):
    fine = from_spec(spec)
    mesh = agglomerate(fine, max(4, fine.n_cells // 17))
    d = mesh.dim
    graph = dual_graph(fine).tocoo()
    n_interior_fine = graph.nnz // 2
    parts = np.empty(fine.n_cells, dtype=np.int64)
    parts[:] = -1
    # element of each fine cell, recovered from the sorted sub-simplices
    order_key = np.sort(fine.cells, axis=1)
    sub_key = np.sort(mesh.simplices, axis=1)
    lookup = {tuple(r): i for i, r in enumerate(order_key)}
    for s, row in enumerate(sub_key):  # test-only bookkeeping on a small mesh
        parts[lookup[tuple(row)]] = mesh.simplex_element[s]
    inside = (parts[graph.row] == parts[graph.col]).sum() // 2
    assert inside + mesh.n_interior_faces == n_interior_fine
    # interior faces are grouped by interface, with both elements different
    el = mesh.face_elements[: mesh.n_interior_faces]
    assert (el[:, 0] < el[:, 1]).all()
    per_face_interface = np.repeat(np.arange(mesh.n_interfaces), np.diff(mesh.interface_offsets))
    assert np.array_equal(mesh.interface_elements[per_face_interface], el)
    pairs = mesh.interface_elements[:, 0] * mesh.n_elements + mesh.interface_elements[:, 1]
    assert (np.diff(pairs) > 0).all()
    # boundary faces: one element each, sorted by element, tagged
    b = mesh.face_elements[mesh.boundary_faces]
    assert (b[:, 1] == -1).all() and (np.diff(b[:, 0]) >= 0).all()
    if not spec.startswith("oscillating"):
        assert (mesh.face_tag[mesh.boundary_faces] > 0).all()
    assert d in (2, 3)


def test_agglomeration_is_deterministic_connected_and_covers():
    fine = from_spec("square:24:perturb=0.2")
    a = agglomerate_cells(fine, 30)
    b = agglomerate_cells(fine, 30)
    assert np.array_equal(a, b)
    assert set(np.unique(a)) == set(range(a.max() + 1))
    mesh = agglomerate(fine, 30)
    assert mesh.n_simplices == fine.n_cells
    assert abs(mesh.n_elements - 30) <= 5
    stats = mesh.statistics()
    assert stats["sub_elements_per_element"]["min"] >= 1
    assert stats["elements"] == mesh.n_elements


def test_disconnected_part_is_split():
    from polydg.partition.agglomerate import split_disconnected

    fine = from_spec("square:4")
    graph = dual_graph(fine)
    parts = np.zeros(fine.n_cells, dtype=np.int64)
    # put two far-apart cells in part 1: it must become two parts
    parts[0] = 1
    parts[fine.n_cells - 1] = 1
    fixed = split_disconnected(graph, parts)
    assert len(np.unique(fixed)) == 3


def test_statistics_match_table_3_rows():
    mesh = agglomerate(from_spec("square:16"), 20)
    s = mesh.statistics()
    for key in ("elements", "sub_elements", "interior_faces", "interfaces", "boundary_faces",
                "sub_elements_per_element", "faces_per_element"):
        assert key in s
    assert s["interior_faces"] + s["boundary_faces"] == mesh.n_faces
    assert s["faces_per_element"]["mean"] == pytest.approx(
        (2 * s["interior_faces"] + s["boundary_faces"]) / s["elements"])


def test_inverted_cells_are_reoriented():
    fine = from_spec("square:3")
    cells = fine.cells.copy()
    cells[::2, [0, 1]] = cells[::2, [1, 0]]
    mesh = build_polytopic_mesh(SimplexMesh(fine.points, cells))
    assert (mesh.simplex_volume > 0).all()
    assert mesh.measure.sum() == pytest.approx(1.0)
    assert closure_defect(mesh) < 1e-14


@pytest.mark.parametrize(
    "make, words",
    [
        (lambda f: SimplexMesh(np.where(np.arange(len(f.points))[:, None] == 3, np.nan, f.points), f.cells,
                               source="nan.vtu"), ["nan.vtu", "point 3", "non-finite"]),
        (lambda f: SimplexMesh(f.points, np.r_[f.cells, [[0, 1, 1]]], source="dup.msh"), ["dup.msh", "cell 18"]),
        (lambda f: build_polytopic_mesh(SimplexMesh(f.points, np.r_[f.cells, [[0, 1, 2]]], source="deg")),
         ["deg: cell 18 is degenerate"]),
        (lambda f: build_polytopic_mesh(SimplexMesh(f.points, np.r_[f.cells, f.cells[:1]], source="three")),
         ["shared by", "cells"]),
        (lambda f: build_polytopic_mesh(f, np.r_[np.zeros(f.n_cells - 1, np.int64), [2]]), ["element 1 is empty"]),
        (lambda f: SimplexMesh(f.points, f.cells[:, :2], source="lines.vtk"), ["lines.vtk", "3 vertices"]),
        (lambda f: SimplexMesh(f.points, f.cells + 100, source="range"), ["out of range"]),
    ],
)
def test_bad_meshes_give_clear_errors(make, words):
    fine = from_spec("square:3")
    with pytest.raises(MeshError) as info:
        make(fine)
    for w in words:
        assert w in str(info.value)


def test_degenerate_cell_is_named():
    pts = np.array([[0, 0], [1, 0], [0, 1], [2, 0]], dtype=float)
    cells = np.array([[0, 1, 2], [0, 1, 3]])  # the second is flat
    with pytest.raises(MeshError, match="cell 1 is degenerate"):
        build_polytopic_mesh(SimplexMesh(pts, cells, source="flat"))


@pytest.mark.parametrize("pairs_per_batch", [1 << 22, 1])
def test_hanging_node_is_an_unmatched_interior_facet(monkeypatch, pairs_per_batch):
    from polydg.mesh import polytopic

    monkeypatch.setattr(polytopic, "FACET_PAIRS_PER_BATCH", pairs_per_batch)  # one batch, or one facet a batch
    # a big triangle beside two small ones that split its edge
    pts = np.array([[0, 0], [0, 1], [-1, 0.5], [0, 0.5], [1, 0.5]], dtype=float)
    cells = np.array([[0, 1, 2], [0, 3, 4], [3, 1, 4]])
    with pytest.raises(MeshError, match="unmatched facet inside the domain"):
        build_polytopic_mesh(SimplexMesh(pts, cells, source="hanging"))


def test_unmatched_facet_search_pairs_each_facet_within_its_own_size():
    """Facets of very different sizes (a tall space-time slab: side faces as long as the slab, top and
    bottom triangles as small as the mesh): each is paired only with facets within its own size."""
    from polydg.mesh import polytopic

    centroid = np.r_[np.random.default_rng(0).random((2000, 2)), [[0.5, 0.5]]]
    size = np.r_[np.full(2000, 0.01), 0.3]
    pairs = [np.stack(p, 1) for p in polytopic._facet_neighbours(centroid, size)]
    got = {tuple(p) for p in np.concatenate(pairs)}
    distance = np.linalg.norm(centroid[:, None] - centroid[None], axis=2)
    expected = {(i, j) for i, j in zip(*np.nonzero(distance <= size[:, None])) if i != j}
    assert got == expected and len(pairs) >= 2  # the big facet is searched in a batch of its own


def _wide(row_keys):
    """``row_keys`` told that the values reach 2**40: past 63 bits for two columns or more, so the key is
    folded through dense ranks instead of packed."""
    return lambda rows, n_values: row_keys(rows, 1 << 40)


@pytest.mark.parametrize("n_values, k", [(1 << 10, 3), (1 << 40, 1), (1 << 40, 3), (1 << 17, 4), (1 << 62, 2)])
def test_row_keys_order_and_match_rows_as_np_unique_does(n_values, k):
    """Equal rows have equal keys and the keys sort as the rows do, packed (10 bits x 3) or folded
    through dense ranks past 63 bits: the keys' ranks are np.unique's inverse."""
    from polydg.mesh.polytopic import _dense_ranks, _row_keys

    rng = np.random.default_rng(k)
    values = np.r_[0, 1, n_values - 1, rng.integers(0, n_values, 5)]  # few values: rows tie on leading columns
    rows = values[rng.integers(0, len(values), (3000, k))]
    _, inverse = np.unique(rows, axis=0, return_inverse=True)
    key = _row_keys(rows, n_values)
    assert key.dtype == np.int64
    assert np.array_equal(_dense_ranks(key)[0], inverse.reshape(-1))
    assert len(_row_keys(rows[:0], n_values)) == 0


@pytest.mark.parametrize("make", [lambda: from_spec("cube:3"), lambda: from_spec("square:6:perturb=0.2"),
                                  lambda: agglomerate(from_spec("cube:2"), 4)])
def test_meshes_keyed_past_the_packing_limit_are_the_same(monkeypatch, make):
    """Facets keyed through dense ranks (points past 2**21 in 3D, 2**15 in 3D + 1) give the same mesh:
    the same faces in the same order, the tagged boundary facets found, the same dual graph."""
    from dataclasses import fields

    from importlib import import_module

    from polydg.mesh import polytopic
    from polydg.spacetime import slab_mesh

    agglomeration = import_module("polydg.partition.agglomerate")

    def build(made):
        if isinstance(made, SimplexMesh):
            return [build_polytopic_mesh(made), dual_graph(made)]
        return [slab_mesh(made, 0.0, 0.5)]

    packed = build(make())
    monkeypatch.setattr(polytopic, "_row_keys", _wide(polytopic._row_keys))
    monkeypatch.setattr(agglomeration, "_row_keys", _wide(agglomeration._row_keys))
    folded = build(make())
    mesh, again = packed[0], folded[0]
    for field in fields(mesh):
        a, b = getattr(mesh, field.name), getattr(again, field.name)
        assert np.array_equal(a, b) if isinstance(a, np.ndarray) else a == b, field.name
    if len(packed) == 2:
        assert (mesh.face_tag[mesh.boundary_faces] > 0).all()
        assert (packed[1] != folded[1]).nnz == 0 and packed[1].nnz > 0


def test_generator_specs():
    assert parse_spec("square:8:perturb=0.1:seed=3") == ("square", 8, {"perturb": 0.1, "seed": 3})
    assert from_spec("cube:2").n_cells == 48
    assert from_spec("square:5").n_cells == 50
    assert from_spec("oscillating-square:5").n_cells == 50
    for bad, word in [("disk:3", "unknown mesh generator"), ("square", "needs a size"), ("square:x", "not an integer"),
                      ("square:0", "at least 1"), ("square:4:foo=1", "unknown option"),
                      ("square:4:perturb=0.7", "perturb"), ("square:4:perturb=abc", "bad value")]:
        with pytest.raises(MeshError, match=word):
            from_spec(bad)


def test_perturbation_is_seeded_and_keeps_boundary():
    a = from_spec("square:6:perturb=0.3:seed=1")
    b = from_spec("square:6:perturb=0.3:seed=1")
    c = from_spec("square:6:perturb=0.3:seed=2")
    assert np.array_equal(a.points, b.points) and not np.array_equal(a.points, c.points)
    plain = from_spec("square:6")
    on_boundary = ((plain.points == 0) | (plain.points == 1)).any(axis=1)
    assert on_boundary.sum() == 24  # the boundary vertices of the 6 x 6 grid stay put, the others move
    assert np.array_equal(a.points[on_boundary], plain.points[on_boundary])
    assert (a.points[~on_boundary] != plain.points[~on_boundary]).any(axis=1).all()


@pytest.mark.parametrize("spec,n", [("cube:12", 800), ("square:64", 500)])
def test_agglomerated_elements_are_numbered_along_the_z_order_curve(spec, n):
    # a contiguous range of element ids (an assembly chunk, an MPI rank's rows)
    # must be a compact region: METIS numbers parts in no spatial order
    from polydg.partition.agglomerate import z_order

    fine = from_spec(spec)
    parts = agglomerate_cells(fine, n)
    k = parts.max() + 1
    assert np.array_equal(np.unique(parts), np.arange(k))
    centroid = np.stack([np.bincount(parts, c, minlength=k) for c in fine.points[fine.cells].mean(axis=1).T], 1)
    centroid /= np.bincount(parts, minlength=k)[:, None]
    assert (np.diff(z_order(centroid).astype(np.float64)) >= 0).all()
    mesh = agglomerate(fine, n)
    cut = mesh.interface_elements * 2 // mesh.n_elements  # two halves of the ids
    assert np.mean(cut[:, 0] != cut[:, 1]) < 0.1


@pytest.mark.parametrize("spec", ["square:5", "cube:3", "cube:4:perturb=0.2", "oscillating-square:4"])
def test_generated_boundary_is_every_facet_on_the_box_and_only_those(spec):
    """The generators tag the facets of the cells near the boundary alone (memory a byte per cell vertex): the
    same facets, in the same order, with the same tags as tagging every facet of every cell by its vertices."""
    from polydg.mesh.generators import _cube_cells, _grid_points, _square_cells, parse_spec

    name, n, _ = parse_spec(spec)
    d = 3 if name == "cube" else 2
    points, cells = _grid_points(n, d), (_cube_cells(n) if d == 3 else _square_cells(n))
    facets = cells[:, [[j for j in range(d + 1) if j != k] for k in range(d + 1)]].reshape(-1, d)
    x = points[facets]
    tags = np.zeros(len(facets), dtype=np.int64)
    for k in range(d):
        tags[(np.abs(x[:, :, k]) < 1e-12).all(axis=1)] = 2 * k + 1
        tags[(np.abs(x[:, :, k] - 1) < 1e-12).all(axis=1)] = 2 * k + 2
    mesh = from_spec(spec)
    np.testing.assert_array_equal(mesh.cells, cells)
    if spec == "cube:3":  # the Kuhn cells themselves: cube:1's six tetrahedra along its diagonal 0 -> 7
        np.testing.assert_array_equal(from_spec("cube:1").cells, [[0, 4, 6, 7], [0, 4, 5, 7], [0, 2, 6, 7],
                                                                  [0, 2, 3, 7], [0, 1, 5, 7], [0, 1, 3, 7]])
    np.testing.assert_array_equal(mesh.boundary_facets, facets[tags > 0])
    np.testing.assert_array_equal(mesh.boundary_tags, tags[tags > 0])
    assert len(mesh.boundary_facets) == (12 * n * n if d == 3 else 4 * n)
