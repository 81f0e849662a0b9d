"""One space-time slab as a (d+1)-dimensional polytopic mesh (docs/design.md §10).

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
an element's steps are interior faces with normal (0, ..., 0, +-1).  Each
vertex v of the spatial mesh carries, on its vertical edge v x I_n, the time
nodes of every element around it, and each sub-prism S x [t_j, t_{j+1}] of
K is cut by the sweep (the staircase with more nodes): start from the
bottom simplex S x {t_j}; list the nodes inside (t_j, t_{j+1}] of every
vertical edge of S in time, at equal times the higher vertex number first;
each one moves its vertex up to it, and the simplex of that event is the
d + 1 current points plus the moved vertex's new one (its volume is |S|
times the climb over d + 1).  With only the two end nodes on every edge
the events are v_d, ..., v_0 at t_{j+1}: :func:`prism_simplex_table`.
A side of the prism (a facet F of S, times the interval) meets the
simplices of the events of F's vertices in F's own sweep, which depends
only on F's vertices and their nodes; the sweep passes through the state
"all at t_j" at every node t_j of K, and every one of F's edges carries the
nodes of both elements on either side, so the two prisms of a side (any
step counts) cut it the same way: the slab mesh is face-matching in any
dimension, and lateral faces are split at (at least) the union of both
sides' time nodes.  The sweep needs no extra points: a sub-prism with E
nodes above its bottom on its d + 1 edges is E simplices (in 2D + 1 it
replaced cones from each such prism's centroid: half the tetrahedra, and
half the build time, with random steps 1:4).
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
    ``local_steps`` (an int, or one per element) element K is
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
    if steps is not None:
        return _local_step_mesh(space_mesh, t0, t1, steps)
    n = len(space_mesh.points)
    points = np.concatenate([
        np.column_stack([space_mesh.points, np.full(n, t0)]),
        np.column_stack([space_mesh.points, np.full(n, t1)]),
    ])
    cells = prism_simplices(space_mesh.simplices, n)
    # prisms over a checked mesh's simplices, cut alike on shared faces (by vertex number): facets match
    fine = SimplexMesh(points, cells, source=f"{space_mesh.source} x ({t0:g}, {t1:g})", facets_match=True)
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
    as :func:`slab_mesh` numbers them).
    """
    d = space_mesh.dim
    n = len(space_mesh.points)
    simplices = np.sort(np.asarray(space_mesh.simplices, dtype=np.int64), axis=1)  # the sweep needs v_0 < ... < v_d
    simplex_el = np.asarray(space_mesh.simplex_element, dtype=np.int64)
    L = math.lcm(*(int(m) for m in np.unique(steps)))
    if L * (n + 1) >= 2**62:
        raise OptionError(f"local steps: their least common multiple {L} is too large for exact time nodes")
    stride = L // steps  # (n_el,): one step of element K is stride[K] / L of the slab

    # --- time nodes on each vertical edge: those of every element around the vertex --------------
    n_el = space_mesh.n_elements
    pair = np.unique(np.repeat(simplex_el, d + 1) + n_el * simplices.ravel())  # (vertex, element) pairs
    v_pair, k_pair = pair // n_el, pair % n_el
    group, j = _expand(steps[k_pair] + 1)
    num = j * stride[k_pair[group]]
    node_key = np.unique(num * n + v_pair[group])  # sorted by time, then vertex
    node_num, node_v = node_key // n, node_key % n
    times = np.where(node_num == L, t1, t0 + (t1 - t0) * (node_num / L))
    points = np.column_stack([space_mesh.points[node_v], times])
    # the same nodes by vertex, then time: a vertical edge's nodes are consecutive
    by_vertex = np.lexsort((node_num, node_v))
    edge_key = node_v[by_vertex] * (L + 1) + node_num[by_vertex]
    edge_num = node_num[by_vertex]

    # --- sub-prisms: simplex S of element K, step j: S x [a, b] -------------------------------------
    prism_simplex, j = _expand(steps[simplex_el])
    K = simplex_el[prism_simplex]
    a = j * stride[K]
    corners = simplices[prism_simplex]  # (n_prisms, d + 1) sorted vertex ids
    lo = np.searchsorted(edge_key, corners * (L + 1) + a[:, None])  # the node at a on each vertical edge
    hi = np.searchsorted(edge_key, corners * (L + 1) + (a + stride[K])[:, None])  # ... and at b
    element = step_offsets(steps, n_el)[K] + j

    # --- the sweep: one simplex per node climbed, in time, the higher vertex first at equal times ---
    prism, climb = _expand((hi - lo).ravel())  # climb number `climb` up vertical edge `prism`
    prism, vertex = np.divmod(prism, d + 1)
    start = lo[prism, vertex] + climb  # the climbing vertex's node before the event
    time = edge_num[start + 1]
    order = np.lexsort((-vertex, time, prism))
    prism, vertex, start, time = prism[order], vertex[order], start[order], time[order]
    # before the event, every other vertex stands at its last node below `time`, or at `time`
    # itself if it is a higher vertex (it climbed there first)
    others = corners[prism] * (L + 1) + time[:, None]
    higher = np.arange(d + 1) > vertex[:, None]
    state = np.where(higher, np.searchsorted(edge_key, others, side="right"),
                     np.searchsorted(edge_key, others, side="left")) - 1
    # the simplex: the state with the climbing vertex's new node right after its old one
    column = np.arange(d + 2)
    cells = np.take_along_axis(state, column - (column > vertex[:, None]), axis=1)
    cells[np.arange(len(cells)), vertex + 1] = start + 1
    fine = SimplexMesh(points, by_vertex[cells], source=f"{space_mesh.source} x ({t0:g}, {t1:g}), local steps "
                                                       f"{int(steps.min())}..{int(steps.max())}", facets_match=True)
    return build_polytopic_mesh(fine, element[prism])


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
