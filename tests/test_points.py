"""Quadrature points of sub-simplices and faces (polydg.assembly.points)."""

import numpy as np
import pytest

from polydg.assembly.points import point_counts, point_map_kernel, simplex_points
from polydg.quadrature import simplex_rule


def _reference(vertices, measures, degrees):
    """x_q = lam_q0 v_0 + lam_q1 v_1 + ... in the kernel's order, simplex by simplex, in NumPy."""
    xs, ws = [], []
    for v, measure, q in zip(vertices, measures, degrees):
        lam, w = simplex_rule(v.shape[0] - 1, int(q))
        x = np.zeros((len(w), v.shape[1]))
        for k in range(v.shape[0]):
            x = x + lam[:, k:k + 1] * v[k]
        xs.append(x)
        ws.append(measure * w)
    return np.concatenate(xs), np.concatenate(ws)


@pytest.mark.parametrize("k, d", [(1, 1), (1, 2), (2, 2), (2, 3), (3, 3)])
def test_points_are_the_barycentric_map_of_each_simplex_with_its_own_rule(k, d):
    rng = np.random.default_rng(10 * k + d)
    n = 37
    points = rng.random((60, d))
    cells = np.stack([rng.choice(60, k + 1, replace=False) for _ in range(n)])
    measures = rng.random(n) + 0.5
    degrees = rng.integers(0, 7, size=n)  # mixed rules in one batch
    batch = simplex_points(points, measures, degrees, cells=cells)
    x, w = _reference(points[cells], measures, degrees)
    assert np.array_equal(batch.x, x) and np.array_equal(batch.weight, w)
    assert np.array_equal(np.diff(batch.offsets), point_counts(k, degrees))
    # the same batch from the corners themselves, and with one degree given as an int
    again = simplex_points(points[cells], measures, degrees)
    assert np.array_equal(again.x, x) and np.array_equal(again.weight, w)
    one = simplex_points(points, measures, 3, cells=cells)
    same = simplex_points(points, measures, np.full(n, 3), cells=cells)
    assert np.array_equal(one.offsets, same.offsets) and one.offsets.dtype == np.int64
    assert np.array_equal(one.x, same.x) and np.array_equal(one.weight, same.weight)
    assert np.array_equal(one.x, _reference(points[cells], measures, np.full(n, 3))[0])


def test_point_maps_are_made_once_per_shape():
    assert point_map_kernel(3, 2) is point_map_kernel(3, 2)
    assert point_map_kernel(3, 2) is not point_map_kernel(3, 3)


def test_points_fill_a_workspace_and_an_empty_batch_is_empty():
    from polydg.assembly import Workspace

    tri = np.array([[[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]]] * 4)
    ws = Workspace()
    batch = simplex_points(tri, np.full(4, 0.5), 2, workspace=ws)
    assert np.shares_memory(batch.x, ws.take("x", (1, 2), np.float64))
    assert np.isclose(batch.weight.sum(), 2.0)
    empty = simplex_points(tri[:0], np.zeros(0), 2)
    assert empty.n_points == 0 and np.array_equal(empty.offsets, [0])


@pytest.mark.parametrize("dim, extra", [(1, 0), (2, 7)])
def test_face_point_loads_count_each_faces_points_for_each_of_its_elements(dim, extra):
    """One compiled pass equals the definition: for each element, the points of the rule of each face it is a
    side of, plus ``extra`` per face; boundary faces (second side -1) count once; no faces, zeros."""
    from polydg.assembly.points import face_point_loads

    rng = np.random.default_rng(7)
    n_el, n_faces = 9, 60
    faces = rng.integers(0, n_el, (n_faces, 2))
    faces[rng.random(n_faces) < 0.3, 1] = -1
    rule = rng.choice([1, 3, 4], n_faces)
    per_face = point_counts(dim, rule) + extra
    want = np.zeros(n_el, dtype=np.int64)
    for side in range(2):
        np.add.at(want, faces[faces[:, side] >= 0, side], per_face[faces[:, side] >= 0])
    got = face_point_loads(faces, rule, n_el, dim, extra)
    assert got.dtype == np.int64 and want.sum() > 0
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(face_point_loads(np.zeros((0, 2), np.int64), np.zeros(0, np.int64), 3, dim),
                                  np.zeros(3, np.int64))
