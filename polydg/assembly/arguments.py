"""The compiled kernels' arguments: a few named structures of arrays, not long positional lists.

Numba and numba-cuda take a ``NamedTuple`` of arrays as one argument: the
compiled code receives a struct whose fields it reads by name, each as if it
had been passed alone (numba-cuda flattens it into the kernel's parameters),
so the grouping costs neither speed nor compile time, and a kernel's
signature says what it reads:

* :class:`PatternArrays`: the sparsity pattern (where each block goes);
* :class:`BasisTables`: each element's bounding box, degree and basis size,
  and the bases' multi-index table and Legendre recurrence;
* :class:`FaceTables`: the faces' normals and penalties, their elements,
  the faces of each interface and the boundary faces of each element, and
  ``face_local``, each face's entity in the point batch in hand (-1: none);
* :class:`Points`: a batch of quadrature points, entity by entity;
* :class:`VolumeCoefficients`, :class:`InteriorCoefficients`,
  :class:`BoundaryCoefficients`: the problem's data at those points, one row
  per point or a single row (a constant);
* :class:`Values`: the CSR values and the load vector being assembled;
* :class:`EntityBuffers`, :class:`BlockList`: the entity kernels' block
  buffers and the lists that reduce them.

The plan's structures are made once per assembly by :func:`plan_arguments`
(on the host, or with ``to_device`` as arrays of the device), the points and
coefficients once per chunk.  A field's type is part of the compiled
signature: every index array is int64, every value array is in the plan's
working precision.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import numpy as np

Array = Any  # a NumPy array, or the device backend's


class PatternArrays(NamedTuple):
    """The sparsity pattern as the kernels read it (:class:`~polydg.assembly.pattern.SparsityPattern`):
    entry (i, j) of block (e, c) at ``row_base[e] + i * row_width[e] + block_start[k] + j``, k the
    adjacency entry of c in e's row (``adj_offsets[e]:adj_offsets[e + 1]`` of ``adj_col``);
    ``adj_interface[k]`` its interface (-1 for the diagonal entry ``diag_entry[e]``); ``row_start[e]``
    e's first row.  ``row_base[e] < 0``: e's rows are not assembled here."""

    row_base: Array
    row_width: Array
    row_start: Array
    adj_offsets: Array
    adj_col: Array
    adj_interface: Array
    block_start: Array
    diag_entry: Array


class BasisTables(NamedTuple):
    """Per element its bounding box ``lo``, ``hi`` (working precision), ``degree`` and basis size
    ``nbasis``; the bases' multi-indices ``table`` (element e uses its first ``nbasis[e]`` rows) and
    the Legendre recurrence ``rec`` (the GPU kernels read both from constant memory instead)."""

    lo: Array
    hi: Array
    degree: Array
    nbasis: Array
    table: Array
    rec: Array


class FaceTables(NamedTuple):
    """Per face its unit ``normal`` (from ``face_elements[f, 0]`` to ``[f, 1]``) and penalty ``sigma``
    (working precision); the faces ``interface_offsets[t]:interface_offsets[t + 1]`` of interface t;
    the boundary faces ``boundary_offsets[e]:boundary_offsets[e + 1]`` of element e; ``face_local[f]``,
    face f's entity in the point batch in hand (-1 outside it), rewritten chunk by chunk."""

    normal: Array
    sigma: Array
    face_elements: Array
    interface_offsets: Array
    boundary_offsets: Array
    face_local: Array


class Points(NamedTuple):
    """A batch of quadrature points: entity i's points are ``offsets[i]:offsets[i + 1]`` of ``x``
    (n, d) and ``weight`` (n,), in the working precision."""

    offsets: Array
    x: Array
    weight: Array


class VolumeCoefficients(NamedTuple):
    """Diffusion A (.., d, d), advection B (.., d), reaction C (..,) and source F (..,)."""

    A: Array
    B: Array
    C: Array
    F: Array


class InteriorCoefficients(NamedTuple):
    """Diffusion A (.., d, d) and advection B (.., d) on interior faces."""

    A: Array
    B: Array


class BoundaryCoefficients(NamedTuple):
    """Diffusion A, advection B, Dirichlet data GD, Neumann data GN and the Neumann flag NEU (int8)."""

    A: Array
    B: Array
    GD: Array
    GN: Array
    NEU: Array


class Values(NamedTuple):
    """The values being assembled: ``data``, the CSR values of the pattern (empty when the reduction
    writes none, or for the load alone), and ``rhs``, the load vector of the assembled rows."""

    data: Array
    rhs: Array


class EntityBuffers(NamedTuple):
    """The entity kernels' output: entity t's blocks at ``vals[vals_offsets[t]:]``, its load at
    ``loads[load_offsets[t]:]`` (empty arrays where the entities have no load: interior faces)."""

    vals: Array
    vals_offsets: Array
    loads: Array
    load_offsets: Array


class BlockList(NamedTuple):
    """Blocks to reduce: block t is row element ``row[t]``'s block at adjacency entry ``entry[t]``,
    its values at ``offset[t]`` of a buffer."""

    row: Array
    entry: Array
    offset: Array


class PlanArguments(NamedTuple):
    """The structures of one plan, made once (:func:`plan_arguments`)."""

    pattern: PatternArrays
    basis: BasisTables
    faces: FaceTables


def plan_arguments(plan, to_device: Callable[[Array], Array] | None = None, xp=np) -> PlanArguments:
    """The kernels' pattern, basis and face structures of ``plan``, each array as it is or ``to_device(array)``.

    ``face_local`` is a new array of ``xp`` (-1 everywhere) that the passes fill chunk by chunk.
    """
    dev = (lambda a: a) if to_device is None else to_device
    pattern, mesh, space = plan.pattern, plan.mesh, plan.space
    return PlanArguments(
        pattern=PatternArrays(
            row_base=dev(pattern.row_base), row_width=dev(pattern.row_width), row_start=dev(pattern.row_start),
            adj_offsets=dev(pattern.adj_offsets), adj_col=dev(pattern.adj_col), adj_interface=dev(plan.adj_interface),
            block_start=dev(pattern.block_start), diag_entry=dev(pattern.diag_entry)),
        basis=BasisTables(lo=dev(plan.lo), hi=dev(plan.hi), degree=dev(space.degree), nbasis=dev(pattern.element_dofs),
                          table=dev(plan.table), rec=dev(plan.rec)),
        faces=FaceTables(normal=dev(plan.normal), sigma=dev(plan.sigma), face_elements=dev(mesh.face_elements),
                         interface_offsets=dev(mesh.interface_offsets), boundary_offsets=dev(plan.boundary_offsets),
                         face_local=xp.full(mesh.n_faces, -1, dtype=np.int64)))
