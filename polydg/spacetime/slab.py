"""One space-time slab as a (d+1)-dimensional polytopic mesh (DESIGN.md section 6).

The slab Omega x (t0, t1) over a 2D polytopic mesh is cut into prisms
(sub-triangle x (t0, t1)), each prism into 3 tetrahedra.  Element e of the
slab is the union of the prisms over element e's sub-triangles, i.e. the
space-time element K_e x (t0, t1), so element numbers agree with the spatial
mesh's and with every other slab's.
The sub-triangles are whatever the spatial mesh has: its fine triangles, or
each element re-triangulated from its boundary vertices
(:mod:`polydg.mesh.quadrature_simplices`, the march's default), which makes
fewer prisms and fewer bottom and top faces with the same lateral faces.

Conformity: a prism's 3 rectangular sides are each cut along one diagonal,
and two neighbouring prisms share a side, so they must pick the same
diagonal.  The rule used depends only on the side's two global vertex
numbers i < j: the diagonal joins the bottom copy of i to the top copy of j.
With a triangle's vertices sorted, a < b < c, the three tetrahedra

    (a0, b0, c0, c1), (a0, b0, b1, c1), (a0, a1, b1, c1)

cut the sides (a, b), (b, c), (a, c) along a0-b1, b0-c1, a0-c1: that rule.

Over a 3D mesh (3D + 1) the slab is a 4D polytopic mesh, each prism
tetrahedron x (t0, t1) cut into 4 pentatopes (4-simplices) by the same
staircase: with the tetrahedron's vertices sorted, a < b < c < d,

    (a0, b0, c0, d0, d1), (a0, b0, c0, c1, d1), (a0, b0, b1, c1, d1), (a0, a1, b1, c1, d1):

simplex j takes the bottom copies of the first d + 1 - j vertices and the
top copies of the last j + 1 (:func:`prism_simplex_table`, any dimension).
A side of the prism, triangle x (t0, t1), is cut by the staircase of its own
sorted triangle (the pentatopes that do not climb that triangle's vertices
meet it in a lower-dimensional set), i.e. by the 2D + 1 rule, which depends
only on the side's vertex numbers: neighbouring prisms match.

Local time steps (:func:`slab_mesh` with ``local_steps``): element K takes
m_K equal steps, and the slab's elements are the prisms K x I_{n,j},
numbered K by K (element (K, j) is ``step_offsets[K] + j``).  Faces between
an element's steps are interior faces with normal (0, 0, +-1).  Each vertex v
of the spatial mesh carries, on its vertical edge v x I_n, the time nodes of
every element around it; a side face is then cut by a "ladder" between its
two vertical edges, merging their nodes in time (at equal times the edge of
the higher vertex number goes first, which for two nodes per edge is the
diagonal rule above).  The rule depends only on the side's two vertices and
their nodes, so both prisms of a side cut it the same way: the slab mesh is
face-matching, and lateral faces are split at (at least) the union of both
sides' time nodes.  A sub-prism whose vertical edges carry no node inside its
interval is cut into the 3 tetrahedra above; one with such nodes is cut into
the cones over its boundary triangles from its centroid.  Local steps are
2D + 1 only for now (over 3D meshes the sides would need a 3-edge staircase
and the cones pentatopes): 3D + 1 refuses them.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from ..errors import MeshError, OptionError
from ..mesh.polytopic import PolytopicMesh, build_polytopic_mesh
from ..mesh.simplicial import SimplexMesh

def prism_simplex_table(d: int) -> np.ndarray:
    """(d + 1, d + 2): the staircase cut of the prism over a sorted d-simplex v_0 < ... < v_d.

    Entries index (v_0 bottom, ..., v_d bottom, v_0 top, ..., v_d top); row j is
    the bottom copies of v_0..v_{d-j} and the top copies of v_{d-j}..v_d (the
    module docstring).

    >>> prism_simplex_table(2).tolist()
    [[0, 1, 2, 5], [0, 1, 4, 5], [0, 3, 4, 5]]
    """
    return np.array([list(range(d + 1 - j)) + list(range(2 * d + 1 - j, 2 * d + 2)) for j in range(d + 1)],
                    dtype=np.int64)


#: the 3 tetrahedra of a prism over the sorted triangle (a, b, c): indices into
#: (a0, b0, c0, a1, b1, c1), bottom copies first (see the module docstring)
PRISM_TETRAHEDRA = prism_simplex_table(2)
#: the 4 pentatopes of a prism over the sorted tetrahedron (a, b, c, d): indices into
#: (a0, b0, c0, d0, a1, b1, c1, d1)
PRISM_PENTATOPES = prism_simplex_table(3)


def prism_simplices(simplices: np.ndarray, n_points: int) -> np.ndarray:
    """((d + 1) n, d + 2) simplices of the prisms over the d-``simplices`` (n, d + 1), conforming across
    shared sides.

    Point i is the bottom copy of spatial point i, ``i + n_points`` its top copy.
    """
    s = np.sort(np.asarray(simplices, dtype=np.int64), axis=1)  # the rule needs v_0 < ... < v_d
    d = s.shape[1] - 1
    corners = np.concatenate([s, s + n_points], axis=1)  # (n, 2 d + 2): bottom copies, then top copies
    return corners[:, prism_simplex_table(d)].reshape(-1, d + 2)


def prism_tetrahedra(triangles: np.ndarray, n_points: int) -> np.ndarray:
    """(3 n, 4) tetrahedra of the prisms over ``triangles`` (n, 3) (:func:`prism_simplices` in 2D + 1)."""
    return prism_simplices(triangles, n_points)


def check_local_steps(local_steps: int | np.ndarray | None, n_elements: int) -> np.ndarray | None:
    """``local_steps`` as (n_elements,) int64 >= 1 (an int for all elements), or None (one step each)."""
    if local_steps is None:
        return None
    steps = np.asarray(local_steps)
    if steps.ndim == 0:
        steps = np.full(n_elements, steps)
    if steps.shape != (n_elements,):
        raise OptionError(f"local steps: expected one number per element ({n_elements}), got shape {steps.shape}")
    if steps.dtype.kind not in "iu" and not (steps.dtype.kind == "f" and np.all(steps == np.round(steps))):
        raise OptionError(f"local steps must be integers, got {steps.dtype} values")
    steps = steps.astype(np.int64)
    if steps.min() < 1:
        e = int(np.argmin(steps))
        raise OptionError(f"local steps must be >= 1, got {int(steps[e])} on element {e}")
    return steps


def step_offsets(local_steps: np.ndarray | None, n_elements: int) -> np.ndarray:
    """(n_elements + 1,): the slab element of step j of spatial element K is ``offsets[K] + j``."""
    steps = np.ones(n_elements, dtype=np.int64) if local_steps is None else local_steps
    return np.r_[0, np.cumsum(steps)].astype(np.int64)


def random_local_steps(n_elements: int, low: int, high: int, seed: int = 0) -> np.ndarray:
    """Local steps drawn uniformly from ``low..high`` per element (``--local-steps M1:M2 --seed S``)."""
    if not 1 <= low <= high:
        raise OptionError(f"local steps M1:M2 need 1 <= M1 <= M2, got {low}:{high}")
    # its own stream: the random degrees of the same --seed stay what they were
    return np.random.default_rng([int(seed), 1]).integers(low, high + 1, size=n_elements).astype(np.int64)


def slab_mesh(space_mesh: PolytopicMesh, t0: float, t1: float,
              local_steps: int | np.ndarray | None = None) -> PolytopicMesh:
    """The polytopic mesh of the slab ``space_mesh`` x (t0, t1), time as the last coordinate.

    Element e is K_e x (t0, t1); its sub-simplices are the d + 1 simplices
    of each prism over K_e's sub-simplices (3 tetrahedra over a triangle in
    2D + 1, 4 pentatopes over a tetrahedron in 3D + 1).  With
    ``local_steps`` (an int, or one per element; 2D + 1 only) element K is
    cut into m_K equal steps, the elements K x I_{n,j} numbered as
    :func:`step_offsets` says (see the module docstring).
    """
    d = space_mesh.dim
    if d not in (2, 3):
        raise MeshError(f"space-time slabs are built over 2D and 3D meshes, the mesh is {d}D")
    t0, t1 = float(t0), float(t1)
    if not t1 > t0:
        raise MeshError(f"a time slab needs t1 > t0, got ({t0}, {t1})")
    steps = check_local_steps(local_steps, space_mesh.n_elements)
    if steps is not None and d == 3 and steps.max() > 1:
        raise OptionError("local time steps are supported in 2D + 1 only, not over 3D meshes (3D + 1)")
    if steps is not None and d == 2:
        return _local_step_mesh(space_mesh, t0, t1, steps)
    n = len(space_mesh.points)
    points = np.concatenate([
        np.column_stack([space_mesh.points, np.full(n, t0)]),
        np.column_stack([space_mesh.points, np.full(n, t1)]),
    ])
    cells = prism_simplices(space_mesh.simplices, n)
    fine = SimplexMesh(points, cells, source=f"{space_mesh.source} x ({t0:g}, {t1:g})")
    return build_polytopic_mesh(fine, np.repeat(space_mesh.simplex_element, d + 1))


def _expand(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(group, local): for each group g, counts[g] rows with local = 0..counts[g]-1, vectorised."""
    group = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
    first = np.cumsum(counts) - counts
    return group, np.arange(int(counts.sum()), dtype=np.int64) - first[group]


def _local_step_mesh(space_mesh: PolytopicMesh, t0: float, t1: float, steps: np.ndarray) -> PolytopicMesh:
    """The slab mesh with m_K = ``steps[K]`` equal steps in element K (the module docstring's construction).

    Times are exact integers over L = lcm(steps) (node j of element K is
    j L / m_K), so nodes of different elements at the same time are equal.
    Points are numbered by time, then vertex (with one step everywhere,
    as :func:`slab_mesh` numbers them), then the cones' apexes.
    """
    n = len(space_mesh.points)
    tri = np.sort(np.asarray(space_mesh.simplices, dtype=np.int64), axis=1)  # the rules need a < b < c
    tri_el = np.asarray(space_mesh.simplex_element, dtype=np.int64)
    L = math.lcm(*(int(m) for m in np.unique(steps)))
    if L * (n + 1) >= 2**62:
        raise OptionError(f"local steps: their least common multiple {L} is too large for exact time nodes")
    stride = L // steps  # (n_el,): one step of element K is stride[K] / L of the slab

    # --- time nodes on each vertical edge: those of every element around the vertex --------------
    n_el = space_mesh.n_elements
    pair = np.unique(np.repeat(tri_el, 3) + n_el * tri.ravel())  # (vertex, element) pairs
    v_pair, k_pair = pair // n_el, pair % n_el
    group, j = _expand(steps[k_pair] + 1)
    num = j * stride[k_pair[group]]
    node_key = np.unique(num * n + v_pair[group])  # sorted by time, then vertex
    node_num, node_v = node_key // n, node_key % n
    tau = t1 - t0
    times = np.where(node_num == L, t1, t0 + tau * (node_num / L))
    # the same nodes by vertex, then time: a vertical edge's nodes are consecutive
    by_vertex = np.lexsort((node_num, node_v))
    edge_key = node_v[by_vertex] * (L + 1) + node_num[by_vertex]
    edge_num = node_num[by_vertex]

    def edge_index(v: np.ndarray, t: np.ndarray) -> np.ndarray:
        """Position of node (v, t) in the by-vertex order."""
        return np.searchsorted(edge_key, v * (L + 1) + t)

    # --- sub-prisms: triangle T of element K, step j: (T, [a, b]) -----------------------------------
    prism_tri, j = _expand(steps[tri_el])
    K = tri_el[prism_tri]
    a, b = j * stride[K], (j + 1) * stride[K]
    corners = tri[prism_tri]  # (n_prisms, 3) sorted vertex ids
    lo = edge_index(corners, a[:, None])  # (n_prisms, 3): the nodes at a and b on each vertical edge
    hi = edge_index(corners, b[:, None])
    element = step_offsets(steps, n_el)[K] + j
    hanging = (hi - lo > 1).any(axis=1)

    # prisms without nodes inside their interval: 3 tetrahedra, the diagonal rule
    plain = ~hanging
    six = np.concatenate([by_vertex[lo[plain]], by_vertex[hi[plain]]], axis=1)  # a0 b0 c0 a1 b1 c1
    tets = [six[:, PRISM_TETRAHEDRA].reshape(-1, 4)]
    tet_element = [np.repeat(element[plain], 3)]
    tet_order = [np.repeat(np.flatnonzero(plain), 3)]

    # the others: cones from their centroids over the boundary triangles
    cone = np.flatnonzero(hanging)
    apex = len(node_key) + np.arange(len(cone), dtype=np.int64)
    bottom, top = by_vertex[lo[cone]], by_vertex[hi[cone]]
    points = np.column_stack([space_mesh.points[node_v], times])
    centroid = 0.5 * (points[bottom].mean(axis=1) + points[top].mean(axis=1))
    tets += [np.column_stack([apex, bottom]), np.column_stack([apex, top])]
    tet_element += [element[cone], element[cone]]
    tet_order += [cone, cone]
    # sides (u, v), u < v: the ladder between the edges' nodes lo..hi
    side_u, side_v = np.array([0, 1, 0]), np.array([1, 2, 2])
    lu, hu = lo[cone][:, side_u].ravel(), hi[cone][:, side_u].ravel()
    lv, hv = lo[cone][:, side_v].ravel(), hi[cone][:, side_v].ravel()
    side = np.arange(len(lu), dtype=np.int64)  # 3 per cone, in cone order
    su, iu = _expand(hu - lu)  # a step up the u edge: node lu + i -> lu + i + 1
    sv, iv = _expand(hv - lv)
    step_side = np.r_[su, sv]
    is_u = np.r_[np.ones(len(su), bool), np.zeros(len(sv), bool)]
    step_time = np.r_[edge_num[lu[su] + iu + 1], edge_num[lv[sv] + iv + 1]]
    order = np.lexsort((is_u, step_time, step_side))  # in time; at equal times the v edge first
    step_side, is_u = step_side[order], is_u[order]
    done_u = np.cumsum(is_u) - is_u  # steps before this one, all sides: minus the side's first
    done_v = np.cumsum(~is_u) - ~is_u
    first = np.searchsorted(step_side, side)
    done_u = done_u - done_u[first][step_side]
    done_v = done_v - done_v[first][step_side]
    pu = lu[step_side] + done_u  # the current nodes of both edges
    pv = lv[step_side] + done_v
    third = np.where(is_u, pu + 1, pv + 1)  # the node the step climbs to
    ladder = by_vertex[np.column_stack([pu, pv, third])]
    owner = cone[step_side // 3]
    tets.append(np.column_stack([apex[step_side // 3], ladder]))
    tet_element.append(element[owner])
    tet_order.append(owner)

    # sub-prism order (triangle by triangle, steps in time) within each element, as slab_mesh
    order = np.argsort(np.concatenate(tet_order), kind="stable")
    cells = np.concatenate(tets)[order]
    cell_element = np.concatenate(tet_element)[order]
    all_points = np.concatenate([points, centroid])
    fine = SimplexMesh(all_points, cells, source=f"{space_mesh.source} x ({t0:g}, {t1:g}), local steps "
                                                 f"{int(steps.min())}..{int(steps.max())}")
    return build_polytopic_mesh(fine, cell_element)


def shifted_slab(mesh: PolytopicMesh, shift: float) -> PolytopicMesh:
    """``mesh`` moved by ``shift`` in time (its last coordinate).

    Every other array (volumes, faces, normals, diameters) is invariant under
    the shift, so a march with slabs of equal length builds one slab mesh and
    shifts it.
    """
    points = mesh.points.copy()
    points[:, -1] += shift
    bbox_min, bbox_max = mesh.bbox_min.copy(), mesh.bbox_max.copy()
    bbox_min[:, -1] += shift
    bbox_max[:, -1] += shift
    return dataclasses.replace(mesh, points=points, bbox_min=bbox_min, bbox_max=bbox_max)


__all__ = ["PRISM_TETRAHEDRA", "PRISM_PENTATOPES", "prism_simplex_table", "prism_simplices", "prism_tetrahedra", "slab_mesh", "shifted_slab", "check_local_steps", "step_offsets",
           "random_local_steps"]
