"""Mesh files: legacy VTK POLYDATA, meshio formats, polygon triangulation, VTU output, bad input."""

import numpy as np
import pytest
import shapely

from polydg.errors import MeshError
from polydg.mesh import SimplexMesh, build_polytopic_mesh, from_spec, load_mesh, read_mesh, write_vtu
from polydg.mesh.polygon_mesh import polygon_mesh, triangulate_polygons
from polydg.partition import agglomerate

from .test_mesh import closure_defect


def write_polydata(path, points, polygons, legacy=False):
    lines = ["# vtk DataFile Version 5.1", "test", "ASCII", "DATASET POLYDATA", f"POINTS {len(points)} double"]
    lines += [" ".join(f"{v:.17g}" for v in (*p, 0.0)) for p in points]
    size = sum(len(p) for p in polygons)
    if legacy:
        lines.append(f"POLYGONS {len(polygons)} {size + len(polygons)}")
        lines += [" ".join(map(str, [len(p), *p])) for p in polygons]
    else:
        offsets = np.r_[0, np.cumsum([len(p) for p in polygons])]
        lines += [f"POLYGONS {len(offsets)} {size}", "OFFSETS vtktypeint64", " ".join(map(str, offsets)),
                  "CONNECTIVITY vtktypeint64", " ".join(str(v) for p in polygons for v in p)]
    path.write_text("\n".join(lines) + "\n")
    return path


def grid_polygons(n):
    """Unit square as n x n quadrilaterals."""
    pts = [(i / n, j / n) for i in range(n + 1) for j in range(n + 1)]
    quads = [[i * (n + 1) + j, (i + 1) * (n + 1) + j, (i + 1) * (n + 1) + j + 1, i * (n + 1) + j + 1]
             for i in range(n) for j in range(n)]
    return pts, quads


NEAR_DUPLICATES = "unit_square_polytopic_1000_cells.vtk"


def test_shared_meshes_load_merge_and_are_closed(shared_meshes):
    files = sorted(shared_meshes.glob("*.vtk"))
    assert len(files) == 5
    for f in files:
        text = f.read_text().split()
        n_polygons = int(text[text.index("POLYGONS") + 1]) - 1
        n_points = int(text[text.index("POINTS") + 1])
        fine = read_mesh(f)
        mesh = build_polytopic_mesh(fine)
        assert mesh.n_elements == n_polygons, f
        if f.name == NEAR_DUPLICATES:
            assert len(fine.points) < n_points, f"{f.name}: near-duplicate points were not merged"
        assert mesh.measure.sum() == pytest.approx(1.0, abs=1e-8), f
        assert mesh.face_measure[mesh.boundary_faces].sum() == pytest.approx(4.0, abs=1e-8), f
        assert closure_defect(mesh) < 1e-12, f
        assert (mesh.face_elements[: mesh.n_interior_faces] >= 0).all()
        # every interior polygon edge is matched: boundary faces lie on the square's sides
        xb = mesh.points[mesh.face_vertices[mesh.boundary_faces]]
        on_side = (np.abs(xb) < 1e-8) | (np.abs(xb - 1) < 1e-8)
        assert on_side.all(axis=1).any(axis=1).all(), f


def test_unmerged_duplicates_are_reported(shared_meshes):
    with pytest.raises(MeshError, match="unmatched facet inside the domain|zero area|fewer than 3|degenerate"):
        build_polytopic_mesh(read_mesh(shared_meshes / NEAR_DUPLICATES, merge_tol=0))


def test_legacy_and_vtk51_forms_agree(tmp_path):
    pts, quads = grid_polygons(4)
    a = read_mesh(write_polydata(tmp_path / "a.vtk", pts, quads))
    b = read_mesh(write_polydata(tmp_path / "b.vtk", pts, quads, legacy=True))
    assert np.array_equal(a.points, b.points) and np.array_equal(a.cells, b.cells)
    assert np.array_equal(a.cell_element, b.cell_element)
    mesh = build_polytopic_mesh(a)
    assert mesh.n_elements == 16 and mesh.measure.sum() == pytest.approx(1.0)


POLYGONS = {
    "L": [(0, 0), (2, 0), (2, 1), (1, 1), (1, 2), (0, 2)],
    "comb": [(0, 0), (9, 0), (9, 3), (8, 3), (8, 1), (7, 1), (7, 3), (6, 3), (6, 1), (5, 1), (5, 3), (4, 3),
             (4, 1), (3, 1), (3, 3), (2, 3), (2, 1), (1, 1), (1, 3), (0, 3)],
    "star": [(np.cos(t) * r, np.sin(t) * r) for t, r in
             zip(np.linspace(0, 2 * np.pi, 10, endpoint=False), [1, 0.4] * 5)],
    "clockwise-L": [(0, 0), (0, 2), (1, 2), (1, 1), (2, 1), (2, 0)],
}


@pytest.mark.parametrize("name", list(POLYGONS))
def test_non_convex_polygons_are_triangulated_inside(name):
    ring = np.array(POLYGONS[name], dtype=float)
    poly = shapely.Polygon(ring)
    assert poly.is_valid
    tri, owner = triangulate_polygons(ring, np.array([0, len(ring)]), np.arange(len(ring)))
    assert (owner == 0).all()
    x = ring[tri]
    signed = 0.5 * ((x[:, 1, 0] - x[:, 0, 0]) * (x[:, 2, 1] - x[:, 0, 1])
                    - (x[:, 1, 1] - x[:, 0, 1]) * (x[:, 2, 0] - x[:, 0, 0]))
    assert (signed > 0).all()
    assert signed.sum() == pytest.approx(poly.area, rel=1e-12)
    triangles = shapely.polygons(x)
    assert shapely.contains(poly.buffer(1e-9), triangles).all()
    assert shapely.union_all(triangles).symmetric_difference(poly).area < 1e-9 * poly.area


# convex polygons with vertices on their straight sides (as agglomerated meshes list them): a square with a
# side's midpoint, and a triangle with every side's midpoint (no vertex can be a fan's apex)
HANGING = {"square": [(0, 0), (1, 0), (1, 1), (0.5, 1), (0, 1)],
           "triangle": [(0, 0), (1, 0), (2, 0), (1.5, 1), (1, 2), (0.5, 1)]}


@pytest.mark.parametrize("name, start", [(name, start) for name, ring in HANGING.items() for start in range(len(ring))])
def test_convex_polygons_with_vertices_on_their_sides_are_triangulated_from_any_first_vertex(name, start):
    ring = np.roll(np.array(HANGING[name], dtype=float), -start, axis=0)
    tri, owner = triangulate_polygons(ring, np.array([0, len(ring)]), np.arange(len(ring)))
    x = ring[tri]
    signed = 0.5 * ((x[:, 1, 0] - x[:, 0, 0]) * (x[:, 2, 1] - x[:, 0, 1])
                    - (x[:, 1, 1] - x[:, 0, 1]) * (x[:, 2, 0] - x[:, 0, 0]))
    assert len(tri) == len(ring) - 2 and (owner == 0).all()
    assert signed.min() > 0.05 and signed.sum() == pytest.approx(shapely.Polygon(ring).area, rel=1e-12)
    # ... and the two-square mesh whose lower square lists the midpoint of the side they share
    pts = np.array([(0, 0), (1, 0), (1, 1), (0, 1), (0.5, 1), (0, 2), (1, 2)], dtype=float)
    lower = np.roll([3, 0, 1, 2, 4], -start)
    fine = polygon_mesh(pts, [0, 5, 8, 12], [*lower, 3, 4, 5, 4, 2, 6, 5], source="two squares")
    mesh = build_polytopic_mesh(fine)
    assert mesh.measure.tolist() == pytest.approx([1.0, 0.25, 0.75])
    assert mesh.n_interfaces == 3


def test_mixed_convex_and_non_convex_polygon_mesh():
    # an L shape and the square that completes it to a 2 x 2 square
    pts = np.array([(0, 0), (2, 0), (2, 1), (1, 1), (1, 2), (0, 2), (2, 2)], dtype=float)
    conn = [0, 1, 2, 3, 4, 5, 3, 2, 6, 4]
    fine = polygon_mesh(pts, [0, 6, 10], conn, source="L+square")
    mesh = build_polytopic_mesh(fine)
    assert mesh.n_elements == 2
    assert mesh.measure.tolist() == pytest.approx([3.0, 1.0])
    assert mesh.n_interfaces == 1 and mesh.n_interior_faces == 2


def test_gmsh_files_with_physical_groups(tmp_path):
    import meshio

    fine = from_spec("square:4")
    lines = fine.boundary_facets
    n = len(fine.points)
    m = meshio.Mesh(np.column_stack([fine.points, np.zeros(n)]), [("triangle", fine.cells), ("line", lines)],
                    cell_data={"gmsh:physical": [np.zeros(fine.n_cells, int), fine.boundary_tags],
                               "gmsh:geometrical": [np.zeros(fine.n_cells, int), fine.boundary_tags]})
    meshio.write(tmp_path / "square-v2.msh", m, file_format="gmsh22", binary=False)
    mesh = build_polytopic_mesh(read_mesh(tmp_path / "square-v2.msh"))
    assert mesh.n_elements == fine.n_cells
    assert sorted(np.unique(mesh.face_tag[mesh.boundary_faces]).tolist()) == [1, 2, 3, 4]
    # Gmsh 4.1 (meshio writes one cell type without entity information)
    m4 = meshio.Mesh(np.column_stack([fine.points, np.zeros(n)]), [("triangle", fine.cells)])
    meshio.write(tmp_path / "square-v4.msh", m4, file_format="gmsh", binary=False)
    assert "$MeshFormat\n4.1" in (tmp_path / "square-v4.msh").read_text()
    mesh4 = build_polytopic_mesh(read_mesh(tmp_path / "square-v4.msh"))
    assert mesh4.n_elements == fine.n_cells and mesh4.measure.sum() == pytest.approx(1.0)
    assert (mesh4.face_tag[mesh4.boundary_faces] == 0).all()
    cube = from_spec("cube:2")
    m3 = meshio.Mesh(cube.points, [("tetra", cube.cells), ("triangle", cube.boundary_facets)],
                     cell_data={"gmsh:physical": [np.zeros(cube.n_cells, int), cube.boundary_tags],
                                "gmsh:geometrical": [np.zeros(cube.n_cells, int), cube.boundary_tags]})
    meshio.write(tmp_path / "cube.msh", m3, file_format="gmsh22", binary=False)
    mesh = build_polytopic_mesh(read_mesh(tmp_path / "cube.msh"))
    assert mesh.dim == 3 and mesh.measure.sum() == pytest.approx(1.0)
    assert set(mesh.face_tag[mesh.boundary_faces].tolist()) == {1, 2, 3, 4, 5, 6}


def test_vtu_polygons_and_triangles(tmp_path):
    import meshio

    pts, quads = grid_polygons(3)
    meshio.write(tmp_path / "quads.vtu", meshio.Mesh(np.column_stack([pts, np.zeros(len(pts))]),
                                                     [("quad", np.array(quads))]))
    mesh = build_polytopic_mesh(read_mesh(tmp_path / "quads.vtu"))
    assert mesh.n_elements == 9 and mesh.measure.sum() == pytest.approx(1.0)
    fine = from_spec("square:3")
    meshio.write(tmp_path / "tri.vtu", meshio.Mesh(fine.points, [("triangle", fine.cells)]))
    assert read_mesh(tmp_path / "tri.vtu").n_cells == 18


def test_write_vtu_round_trip(tmp_path):
    import meshio

    mesh = agglomerate(from_spec("square:16"), 12)
    write_vtu(tmp_path / "m2.vtu", mesh, {"degree": np.full(mesh.n_elements, 2)})
    back = meshio.read(tmp_path / "m2.vtu")
    assert sum(len(c.data) for c in back.cells) == mesh.n_elements
    area = 0.0
    for block in back.cells:
        x = back.points[block.data][..., :2]
        area += 0.5 * np.sum(x[:, :, 0] * np.roll(x[:, :, 1], -1, axis=1) - np.roll(x[:, :, 0], -1, axis=1) * x[:, :, 1])
    assert area == pytest.approx(1.0)
    ids = np.concatenate(back.cell_data["element"])
    assert sorted(ids.tolist()) == list(range(mesh.n_elements))
    mesh3 = agglomerate(from_spec("cube:3"), 6)
    write_vtu(tmp_path / "m3.vtu", mesh3)
    back3 = meshio.read(tmp_path / "m3.vtu")
    assert len(back3.cells[0].data) == mesh3.n_simplices
    assert np.array_equal(back3.cell_data["element"][0], mesh3.simplex_element)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def bad_file(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return p


HEADER = "# vtk DataFile Version 5.1\nx\nASCII\nDATASET POLYDATA\n"


@pytest.mark.parametrize(
    "name, text, words",
    [
        ("trunc.vtk", HEADER + "POINTS 4 double\n0 0 0 1 0 0 1 1 0 0 1 0\nPOLYGONS 2 4\nOFFSETS vtktypeint64\n0\n"
                               "CONNECTIVITY vtktypeint64\n0 1 2 3\n", ["trunc.vtk", "truncated OFFSETS"]),
        ("short.vtk", HEADER + "POINTS 4 double\n0 0 0 1 0 0 1 1 0 0 1 0\nPOLYGONS 2 4\nOFFSETS vtktypeint64\n0 4\n"
                               "CONNECTIVITY vtktypeint64\n0 1 2\n", ["short.vtk", "truncated CONNECTIVITY"]),
        ("legacy.vtk", HEADER + "POINTS 4 double\n0 0 0 1 0 0 1 1 0 0 1 0\nPOLYGONS 2 9\n4 0 1 2 3\n4 0 1\n",
         ["legacy.vtk", "truncated POLYGONS"]),
        ("range.vtk", HEADER + "POINTS 4 double\n0 0 0 1 0 0 1 1 0 0 1 0\nPOLYGONS 2 4\nOFFSETS vtktypeint64\n0 4\n"
                               "CONNECTIVITY vtktypeint64\n0 1 2 7\n", ["range.vtk", "polygon 0", "point 7"]),
        ("nan.vtk", HEADER + "POINTS 4 double\n0 0 0 1 0 0 nan 1 0 0 1 0\nPOLYGONS 2 4\nOFFSETS vtktypeint64\n0 4\n"
                             "CONNECTIVITY vtktypeint64\n0 1 2 3\n", ["nan.vtk", "point 2", "non-finite"]),
        ("word.vtk", HEADER + "POINTS 4 double\n0 0 0 1 0 0 x 1 0 0 1 0\n", ["word.vtk", "truncated POINTS", "'x'"]),
        ("lines.vtk", HEADER + "POINTS 2 double\n0 0 0 1 0 0\nLINES 1 3\n2 0 1\n", ["lines.vtk", "LINES"]),
        ("garbage.msh", "this is not a mesh\n", ["garbage.msh", "cannot be read as Gmsh", "this is not a mesh"]),
        ("count.vtk", HEADER + "POINTS 4 double\n0 0 0 1 0 0 1 1 0 0 1 0\nPOLYGONS 99999999999 5\n4 0 1 2 3\n",
         ["count.vtk", "announces 99999999999 polygons in 5 values"]),
        ("negative.vtk", HEADER + "POINTS -3 double\n", ["negative.vtk", "POINTS announces -3 values"]),
        ("fraction.vtk", HEADER + "POINTS 4 double\n0 0 0 1 0 0 1 1 0 0 1 0\nPOLYGONS 2 4\nOFFSETS vtktypeint64\n0 4\n"
                                  "CONNECTIVITY vtktypeint64\n0 1 2.5 3\n",
         ["fraction.vtk", "'2.5' is not an integer index"]),
        ("huge.vtk", HEADER + "POINTS 4 double\n0 0 0 1e300 0 0 1 1 0 0 1 0\nPOLYGONS 2 4\nOFFSETS vtktypeint64\n0 4\n"
                              "CONNECTIVITY vtktypeint64\n0 1 2 3\n", ["huge.vtk", "point 1", "beyond 1e+50"]),
        ("overflow.vtk", HEADER + "POINTS 4 double\n0 0 0 1 0 0 1 1 0 0 1 0\nPOLYGONS 1 5\n9223372036854775807 0 1 2 3\n",
         ["overflow.vtk", "truncated POLYGONS: polygon 0 runs past the 5 values"]),
        ("binary.vtk", HEADER.replace("ASCII", "BINARY") + "POINTS 4 double\n", ["binary.vtk", "only ASCII"]),
        # a count-prefixed POLYGONS section that holds more than its header counts, or less than it announces
        ("uncounted.vtk", HEADER + "POINTS 6 double\n0 0 0 1 0 0 2 0 0 0 1 0 1 1 0 2 1 0\nPOLYGONS 1 5\n"
                                   "4 0 1 4 3\n4 1 2 5 4\nCELL_DATA 2\n",
         ["mesh file '", "uncounted.vtk': POLYGONS announces 1 polygons in 5 values, but its section has 10 values"]),
        ("overcounted.vtk", HEADER + "POINTS 6 double\n0 0 0 1 0 0 2 0 0 0 1 0 1 1 0 2 1 0\nPOLYGONS 1 10\n"
                                     "4 0 1 4 3\n4 1 2 5 4\n",
         ["overcounted.vtk': POLYGONS announces 1 polygons in 10 values, but the polygons take 5"]),
        ("empty.vtu", "", ["empty.vtu", "the file is empty"]),
    ],
)
def test_bad_files(tmp_path, name, text, words):
    with pytest.raises(MeshError) as info:
        build_polytopic_mesh(read_mesh(bad_file(tmp_path, name, text)))
    for w in words:
        assert w in str(info.value)


def square_polydata(points="4", coordinates="0 0 0 1 0 0 1 1 0 0 1 0", connectivity="0 1 2 3"):
    """The unit square as one polygon (VTK 5.1), its tokens spelled as given."""
    return (HEADER + f"POINTS {points} double\n{coordinates}\nPOLYGONS 2 4\nOFFSETS vtktypeint64\n0 4\n"
            f"CONNECTIVITY vtktypeint64\n{connectivity}\n")


@pytest.mark.parametrize(
    "fields, message",
    [
        # NumPy's parser reads a sign alone as 0 and saturates past 64 bits: these are refused as int() refuses them
        (dict(connectivity="0 1 2 -"), "CONNECTIVITY: '-' is not an integer index"),
        (dict(connectivity="0 1 + 3"), "CONNECTIVITY: '+' is not an integer index"),
        (dict(connectivity="0 1 2 9223372036854775808"), "CONNECTIVITY: '9223372036854775808' is not an integer index"),
        (dict(connectivity="0 1 2 -9223372036854775809"),
         "CONNECTIVITY: '-9223372036854775809' is not an integer index"),
        (dict(connectivity="0 1 2 0x3"), "CONNECTIVITY: '0x3' is not an integer index"),
        (dict(connectivity="0 1 2 3e0"), "CONNECTIVITY: '3e0' is not an integer index"),
        (dict(coordinates="0 0 0 1 0 0 1 1 0 0 1 0x0"), "POINTS: '0x0' is not a number"),
        (dict(connectivity="0 1 2\nCELL_DATA 1"),
         "truncated CONNECTIVITY: 4 values announced, 3 found before 'CELL_DATA'"),
        (dict(connectivity="0 1 2"), "truncated CONNECTIVITY: 4 values announced, 3 found"),
        (dict(points="9223372036854775807"),
         "truncated POINTS: 27670116110564327421 values announced, 12 found before 'POLYGONS'"),
        (dict(points="4.0"), "malformed POINTS line"),
    ],
)
def test_polydata_tokens_are_refused_as_int_and_float_refuse_them(tmp_path, fields, message):
    path = bad_file(tmp_path, "square.vtk", square_polydata(**fields))
    with pytest.raises(MeshError) as info:
        read_mesh(path)
    assert str(info.value) == f"mesh file '{path}': {message}"


def test_polydata_indices_beyond_float_precision_are_exact(tmp_path):
    path = bad_file(tmp_path, "square.vtk", square_polydata(connectivity="0 1 2 9007199254740993"))  # 2**53 + 1
    with pytest.raises(MeshError, match="refers to point 9007199254740993, out of range"):
        read_mesh(path)


@pytest.mark.parametrize(
    "text",
    [
        square_polydata().lower().replace("# vtk datafile", "# vtk DataFile"),
        square_polydata().replace("\n", "\r\n"),
        square_polydata(coordinates="0\t0 0\x0c1 0 0\x1c1 1 0\x1f0 1 0"),
        square_polydata(coordinates="+0 -0 0 1.e0 0. .0 1e0 10E-1 0 0.0 1 0",
                        connectivity="+0 0001 2 0000000000000000003"),
        square_polydata(coordinates="0 0 0 1 0 0 1 1 0 0 1 0 7 7 7"),  # numbers past the count are left
    ],
    ids=["lower case", "CRLF", "control separators", "spellings", "extra numbers"],
)
def test_polydata_spellings_read_as_the_plain_file(tmp_path, text):
    plain = read_mesh(bad_file(tmp_path, "plain.vtk", square_polydata()))
    other = read_mesh(bad_file(tmp_path, "other.vtk", text))
    assert np.array_equal(other.points, plain.points) and np.array_equal(other.cells, plain.cells)
    assert np.array_equal(other.cell_element, plain.cell_element)


@pytest.mark.parametrize("legacy", [False, True])
def test_polydata_parsing_holds_no_object_per_token(tmp_path, monkeypatch, legacy):
    # a Python str per token costs some 20 times the file; the reader's arrays a few times it
    import tracemalloc

    from polydg.mesh import readers

    pts, quads = grid_polygons(100)
    path = write_polydata(tmp_path / "grid.vtk", pts, quads, legacy=legacy)
    monkeypatch.setattr(readers, "polygon_mesh", lambda points, offsets, conn, **_: (points, offsets, conn))
    tracemalloc.start()
    try:
        points, offsets, conn = readers.read_vtk_polydata(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert np.array_equal(points, np.array(pts)) and np.array_equal(conn, np.ravel(quads))
    assert np.array_equal(offsets, 4 * np.arange(len(quads) + 1))
    assert peak < 8 * path.stat().st_size


def test_missing_and_unsupported(tmp_path):
    import meshio

    with pytest.raises(MeshError, match="not found"):
        load_mesh(tmp_path / "nope.vtk")
    (tmp_path / "folder.vtk").mkdir()
    with pytest.raises(MeshError, match="folder.vtk' is not a file"):
        load_mesh(tmp_path / "folder.vtk")
    hexa = meshio.Mesh(np.array([[0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 1, 0], [0, 0, 1], [1, 0, 1], [1, 1, 1],
                                 [0, 1, 1]], float), [("hexahedron", np.arange(8)[None])])
    meshio.write(tmp_path / "hex.vtu", hexa)
    with pytest.raises(MeshError, match="unsupported cell types"):
        read_mesh(tmp_path / "hex.vtu")
    lines = meshio.Mesh(np.array([[0, 0, 0], [1, 0, 0]], float), [("line", np.array([[0, 1]]))])
    meshio.write(tmp_path / "lines.vtu", lines)
    with pytest.raises(MeshError, match="unsupported cell types"):
        read_mesh(tmp_path / "lines.vtu")


def test_coordinates_too_large_to_compute_with():
    # squares and volumes of such coordinates overflow: the mesh is refused before anything is computed
    with pytest.raises(MeshError, match=r"<array>: point 1 has a coordinate beyond 1e\+50"):
        SimplexMesh(np.array([[0.0, 0.0], [1e60, 0.0], [0.0, 1.0]]), np.array([[0, 1, 2]]))
    with pytest.raises(MeshError, match=r"square: point 2 has a coordinate beyond 1e\+50"):
        polygon_mesh(np.array([[0.0, 0.0], [1.0, 0.0], [1.0, -1e200], [0.0, 1.0]]), [0, 4], [0, 1, 2, 3],
                     source="square")


def test_legacy_polygons_followed_by_other_sections_read(tmp_path):
    # what may follow a count-prefixed POLYGONS section: other cell lists, cell and point data
    pts, quads = grid_polygons(2)
    path = write_polydata(tmp_path / "plain.vtk", pts, quads, legacy=True)
    plain = read_mesh(path)
    tail = ("LINES 0 0\nCELL_DATA 4\nSCALARS k double 1\nLOOKUP_TABLE default\n1 2 3 4\n"
            "POINT_DATA 9\nSCALARS u double 1\nLOOKUP_TABLE default\n" + " ".join(map(str, range(9))) + "\n")
    other = read_mesh(bad_file(tmp_path, "other.vtk", path.read_text() + tail))
    assert np.array_equal(other.points, plain.points) and np.array_equal(other.cells, plain.cells)
    assert np.array_equal(other.cell_element, plain.cell_element) and plain.n_fine_cells == 4


def test_hanging_node_in_polygon_file(tmp_path):
    # two unit squares on the left, one 1 x 2 rectangle on the right: a T-junction
    pts = [(0, 0), (1, 0), (1, 1), (0, 1), (1, 2), (0, 2), (2, 0), (2, 2)]
    polys = [[0, 1, 2, 3], [3, 2, 4, 5], [1, 6, 7, 4]]
    with pytest.raises(MeshError, match="unmatched facet inside the domain"):
        build_polytopic_mesh(read_mesh(write_polydata(tmp_path / "t.vtk", pts, polys)))


def test_sample_polygon_mesh_reads_back_as_written():
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "meshes" / "square_agglomerated_12.vtu"
    fine = read_mesh(path)
    mesh = build_polytopic_mesh(fine)
    assert mesh.n_elements == 12
    assert mesh.measure.sum() == pytest.approx(1.0, abs=1e-12)
    assert closure_defect(mesh) < 1e-12


@pytest.mark.parametrize("n", [1, 5, 16])
def test_agglomerating_polygons_groups_whole_polygons(shared_meshes, n):
    from polydg.partition.agglomerate import agglomerate_cells

    fine = read_mesh(shared_meshes / "unit_square_voronoi_16_cells.vtk")
    parts = agglomerate_cells(fine, n)
    # every polygon's triangles in one element, the elements numbered 0..n-1 (16: each polygon its own)
    lowest, highest = np.full(16, n), np.full(16, -1)
    np.minimum.at(lowest, fine.cell_element, parts)
    np.maximum.at(highest, fine.cell_element, parts)
    assert (lowest == highest).all()
    assert sorted(set(parts.tolist())) == list(range(n))
    assert agglomerate(fine, n).n_elements == n
    with pytest.raises(MeshError, match="cannot make 17 elements from 16 polygons of"):
        agglomerate_cells(fine, 17)
