"""The assembly plan: everything decided before the first kernel runs, the same for every backend.

A plan holds the rows to assemble (an increasing array of elements, the rows
of one MPI rank, or all), the bases' tables, the quadrature rules' degrees, the
sparsity pattern, the face penalty and the chunks of elements whose
quadrature points fit the memory budget.  The passes (``passes.py``:
volume, interior faces, boundary) execute a plan chunk by chunk.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

import numpy as np

from .. import backend as bk
from ..basis import legendre_recurrence
from ..quadrature import default_degree
from .moments import moment_tables
from .pattern import SparsityPattern, sparsity_pattern
from .penalty import diffusion_bound
from .penalty import face_penalty as penalty_of_faces
from .points import bounded_runs, face_point_loads, point_counts
from .scope import AssemblyScope
from .timing import Timer

# ``AssemblyOptions`` (options.py) appears in annotations only, never imported: options.py checks an approach
# against the reductions' registry, whose executors import this module

#: bytes of working memory per quadrature point (points, weights, normals,
#: coefficients and the temporaries of their evaluation), used to size chunks
BYTES_PER_POINT = 8 * 48


@dataclass
class AssemblyPlan:
    """What the passes need: sizes, tables, pattern, penalty and chunks (NumPy arrays).

    ``dtype`` is the working precision of the values; ``lo``, ``hi``
    (elements' bounding boxes), ``normal`` and ``sigma`` are given in it.
    ``q_uniform`` is the one rule degree of a space with one polynomial
    degree (no per-entity degree arrays to count), else None.  ``options``
    are those the plan was made with (the backend resolved), ``approach``
    and ``dtype`` their reduction and working type.
    """

    space: object
    problem: object
    approach: str
    dtype: type
    elements: np.ndarray
    table: np.ndarray
    rec: np.ndarray
    moments: tuple
    pattern: SparsityPattern
    adj_interface: np.ndarray  # the interface of each adjacency entry (-1: the diagonal); the pattern's array type
    face_penalty: np.ndarray
    sigma: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    normal: np.ndarray
    boundary_offsets: np.ndarray
    q_element: np.ndarray
    q_uniform: int | None
    face_q: np.ndarray
    chunks: list[tuple[int, int]]
    matrix: bool = True
    load_boundary_faces: np.ndarray | None = None  # (n_faces,) bool, the load alone: its boundary faces
    options: AssemblyOptions | None = None  # options.AssemblyOptions: a name for the reader (see the imports)

    @property
    def load_only(self) -> bool:
        """Whether the passes form the load vector alone (``assemble(..., matrix=False)``)."""
        return not self.matrix

    @property
    def mesh(self):
        return self.space.mesh

    def for_problem(self, problem, face_penalty: np.ndarray, matrix: bool | None = None) -> AssemblyPlan:
        """This plan for ``problem`` with sigma_F = ``face_penalty`` (float64, per face), and with
        ``matrix`` if given: a shallow copy, the arrays shared."""
        sigma64 = np.asarray(face_penalty, dtype=np.float64)
        return dataclasses.replace(self, problem=problem, face_penalty=sigma64, sigma=sigma64.astype(self.dtype),
                                   matrix=self.matrix if matrix is None else matrix)

    def face_degrees(self, faces: np.ndarray) -> int | np.ndarray:
        """The rule degree of each listed face (one int for a one-degree space)."""
        return self.q_uniform if self.q_uniform is not None else self.face_q[faces]


def plan_assembly(space, problem, options: AssemblyOptions, scope: AssemblyScope | None = None, *,
                  timer: Timer | None = None, matrix: bool = True) -> AssemblyPlan:
    """The plan of one assembly; the pattern's time goes to ``indices``, the penalty's to ``penalty``.

    ``options`` with their backend resolved (:meth:`AssemblyOptions.resolved`): with a device
    backend (cupy, or the simulator's) the pattern and ``adj_interface`` are built on the device
    (``device_pattern.py``), the rest of the plan on the host as always.

    ``matrix=False`` plans the load vector alone: the pattern's rows without its column indices
    (and, with the scope's ``load_boundary_faces``, the boundary terms of those faces only).

    The ``scope`` (default: every row) gives the rows; its ``face_penalty`` (sigma_F per face) is used
    as it is, its ``face_penalty_scale`` multiplies each face's penalty, and its ``column_numbering``
    goes to :func:`~polydg.assembly.pattern.sparsity_pattern`.

    The plan is :func:`layout_plan` (what no problem changes) with :meth:`AssemblyPlan.for_problem`
    (the problem and its face penalty); :class:`~polydg.assembly.Assembler` keeps the first.
    """
    scope = AssemblyScope() if scope is None else scope
    timer = Timer() if timer is None else timer
    layout = layout_plan(space, options, scope, timer=timer, matrix=matrix)
    t = time.perf_counter()
    if scope.face_penalty is None:
        a_bound = diffusion_bound(space.mesh, problem, space.total_degree, options.quadrature_extra)
        sigma64 = penalty_of_faces(space.mesh, space.degree, a_bound, C_sigma=options.penalty,
                                   kind=options.penalty_kind)
    else:
        sigma64 = np.ascontiguousarray(scope.face_penalty, dtype=np.float64)
    if scope.face_penalty_scale is not None:
        sigma64 = sigma64 * scope.face_penalty_scale
    timer.add("penalty", t)
    return layout.for_problem(problem, sigma64)


def layout_plan(space, options: AssemblyOptions, scope: AssemblyScope | None = None, *,
                timer: Timer | None = None, matrix: bool = True) -> AssemblyPlan:
    """The part of a plan that no problem changes: rows, tables, rule degrees, pattern and chunks (the pattern
    and what follows it timed as ``indices``); its ``problem`` is None and its penalty zero (see
    :func:`plan_assembly`).

    Rule degrees follow the space's degrees and ``quadrature_extra`` alone, and the chunks the
    rules and the memory budget, so one layout serves every problem on ``space``.
    """
    scope = AssemblyScope() if scope is None else scope
    timer = Timer() if timer is None else timer
    options = options.for_space(space)  # the backend and reduction that run
    backend, dtype, quadrature_extra = options.backend, options.dtype, options.quadrature_extra
    mesh = space.mesh
    d, n_el = mesh.dim, mesh.n_elements
    elements, column_numbering = scope.rows(n_el), scope.column_numbering
    # the basis' multi-indices (P or PQ): the kernels read the first nbasis[e] rows, up to 1D degree degree[e]
    basis = getattr(space, "basis", "P")
    table = np.ascontiguousarray(space.indices())
    rec = legendre_recurrence(2 * space.max_degree, dtype)  # the moments reach 1D degree 2 pmax
    # quadrature exactness follows the functions' total degree (p for P, 2p for PQ); penalties the degree
    rule_degree = space.total_degree

    t = time.perf_counter()
    xp = bk.array_module(backend)
    if bk.is_device(backend):
        from .device_pattern import device_sparsity_pattern

        pattern = device_sparsity_pattern(xp, mesh, space.dof_offsets, elements, column_numbering,
                                          rows_only=not matrix)
    else:
        pattern = sparsity_pattern(mesh, space.dof_offsets, elements, column_numbering, rows_only=not matrix)
    adj_interface = xp.full(len(pattern.adj_col), -1, dtype=np.int64)
    adj_interface[pattern.interface_entry[:, 0]] = xp.arange(mesh.n_interfaces, dtype=np.int64)
    adj_interface[pattern.interface_entry[:, 1]] = xp.arange(mesh.n_interfaces, dtype=np.int64)

    # the rest of the layout (rule degrees, boundary offsets, chunks) is timed with the pattern as indices
    n_int = mesh.n_interior_faces
    b_el = mesh.face_elements[n_int:, 0]
    q_element = default_degree(rule_degree, quadrature_extra)
    face_q = face_rule_degrees(rule_degree, mesh.face_elements, quadrature_extra)
    no_penalty = np.zeros(mesh.n_faces)
    layout = AssemblyPlan(
        space=space, problem=None, approach=options.approach, dtype=dtype, elements=elements, table=table, rec=rec,
        moments=moment_tables(space.max_degree, d, dtype, basis), pattern=pattern, adj_interface=adj_interface,
        face_penalty=no_penalty, sigma=no_penalty.astype(dtype),
        lo=np.ascontiguousarray(mesh.bbox_min, dtype=dtype), hi=np.ascontiguousarray(mesh.bbox_max, dtype=dtype),
        normal=np.ascontiguousarray(mesh.face_normal, dtype=dtype),
        boundary_offsets=n_int + np.concatenate([[0], np.cumsum(np.bincount(b_el, minlength=n_el))]).astype(np.int64),
        q_element=q_element,
        q_uniform=int(default_degree(rule_degree[0], quadrature_extra)) if space.min_degree == space.max_degree
        else None,
        face_q=face_q, chunks=element_chunks(mesh, q_element, face_q, options.budget_mb, elements,
                                             scratch_bytes(options, len(table))),
        matrix=matrix, load_boundary_faces=scope.load_boundary_faces, options=options)
    timer.add("indices", t)
    return layout


def face_rule_degrees(degree: np.ndarray, face_elements: np.ndarray, extra: int) -> np.ndarray:
    """The rule degree of every face: the default for the larger degree of its elements."""
    if len(degree) and degree.min() == degree.max():  # one degree: no gathers over the faces
        return np.full(len(face_elements), default_degree(int(degree[0]), extra), dtype=np.int64)
    other = np.where(face_elements[:, 1] >= 0, degree[np.maximum(face_elements[:, 1], 0)], 0)
    return default_degree(np.maximum(degree[face_elements[:, 0]], other), extra)


def scratch_bytes(options, nbasis: int) -> tuple[int, int]:
    """Bytes an executor holds per sub-simplex and per face of a chunk besides the points: its reduction's
    ``scratch`` (the ordered sums' blocks on a GPU), else none."""
    scratch = options.reduction.scratch
    if scratch is None or not bk.is_device(options.backend):
        return 0, 0
    return scratch(int(nbasis), np.dtype(options.dtype).itemsize)


def element_chunks(mesh, element_rule: np.ndarray, face_rule: np.ndarray, memory_budget_mb: float,
                   elements: np.ndarray, scratch: tuple[int, int] = (0, 0)) -> list[tuple[int, int]]:
    """Split the range ``elements[0]:elements[-1] + 1`` into chunks whose quadrature points fit the budget.

    ``element_rule`` and ``face_rule`` are the rules' exactness degrees per
    element and per face (:func:`~polydg.quadrature.default_degree`, :func:`face_rule_degrees`);
    ``scratch``, bytes held per sub-simplex and per face besides their points (:func:`scratch_bytes`),
    counted as that many points' worth.
    """
    e_lo, e_hi = int(elements[0]), int(elements[-1]) + 1
    d = mesh.dim
    # every sub-simplex of an element has the element's rule: counted per element, not per sub-simplex
    simplex_scratch, face_scratch = (-(-int(b) // BYTES_PER_POINT) for b in scratch)  # in points, rounded up
    per_element = (point_counts(d, element_rule[e_lo:e_hi]) + simplex_scratch) * np.diff(
        mesh.element_offsets[e_lo:e_hi + 1])
    # faces: each face's points counted for both of its elements (an upper bound)
    face_load = face_point_loads(mesh.face_elements, face_rule, mesh.n_elements, d - 1, face_scratch)
    cost = np.maximum(per_element, face_load[e_lo:e_hi])
    max_points = max(int(memory_budget_mb * 2**20 / BYTES_PER_POINT), 1)
    return [(e_lo + a, e_lo + b) for a, b in bounded_runs(cost, max_points)]
