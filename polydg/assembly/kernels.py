"""Compiled block kernels (Numba) for volume, interior-face and boundary terms.

One module though over 600 lines: the row and entity kernels are one family,
sharing the accumulators, scratch allocators and the prefetch intrinsic that
Numba inlines into each, and they are read against one another; a split would
move those helpers into a third module without making either half shorter.

Two families share the same accumulators:

* row kernels (Approach 2, the default): one parallel iteration per element
  assembles that element's rows — its diagonal block summed over its
  sub-simplices and faces in a fixed order, and one off-diagonal block per
  neighbour — and writes each value once at its final CSR position.  No two
  iterations touch the same entry, so there are no races and no atomics, and
  the result is bitwise the same for any chunking and thread count.
* entity kernels (``atomic`` and Approach 1): one parallel iteration per
  sub-simplex or face writes its blocks to a buffer; the buffer is then
  scatter-added into the CSR data (the paper's atomic variant) or turned into
  COO triplets with duplicates (Approach 1).

Volume blocks (an element's, or one sub-simplex's for the entity kernels)
are formed from Legendre moments of the coefficients (``moments.py``), so
the three reductions share one volume form; interior-face terms use the
batched forms of ``batched.py`` (points in batches, contracted as small dot
products); the kernels that run
them are compiled once per space dimension (``_element_rows_kernel`` and
friends), so that the work arrays have compile-time shapes.  Boundary terms,
a small share of the work, use the pointwise forms of ``forms.py``, as do
``simplex_accumulate`` and ``interior_face_accumulate``, the pointwise
references the tests compare the batched kernels with.

The kernels take the named structures of ``arguments.py`` (the pattern, the
basis tables, the faces, a point batch, its coefficients, the values being
written) and the moment tables (``moments.MomentTables``), not flat lists of
arrays.  Flat arrays stay where a structure would cost: the accumulators
(``simplex_accumulate`` and the face ones) are compiled calls, not inlined,
made once per entity, and a structure handed to such a call passes and
reference-counts every one of its fields each time, so they take the few
arrays they read; the per-batch and per-point functions the kernels inline
(``batched.py``, ``moments.py``, ``forms.py``) keep theirs flat because
``forms.py``'s are the GPU's device functions too, one source for both.
Coefficient arrays have either one row per quadrature point or a single row
(constant coefficient, never expanded); ``_row(r, a)`` picks the right one.

The kernels are serial loops over a range of elements or faces, run on
several threads by :func:`~polydg.threads.parallel_range`; Numba caches them
on disk in a directory per version of polydg's sources (:mod:`polydg.jit`).
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from ..basis import element_box_tables, eval_basis_point_scaled
from ..threads import parallel_range, range_kernel
from .batched import (A_ISOTROPIC, A_POINTWISE, BATCH, PAD, basis_flux_batch, basis_flux_boxes, contract,
                      contract_span, gather_face_points, gather_volume_coefficients, interior_trial_batch,
                      pad_face_batch, point_box)
from .forms import (dirichlet_load_point, dirichlet_point, inflow_load_point, inflow_point, interior_face_point,
                    load_point, neumann_point, normal_flux, volume_point)
from .moments import (MOMENT_BATCH, block_from_moments, legendre_values_batch, load_from_moments, moment_rows,
                      pad_moment_batch, source_moments_batch, volume_moments_batch)

DIFFUSIVE, INFLOW = 0, 1


class KernelsByDimension(dict):
    """``kernels[d]``: the kernel ``make(d)`` compiled for dimension d, made on first use.

    Making one only defines its Numba dispatcher (it compiles, or loads from
    the cache, on its first call); made on demand, a dimension that no run
    needs (4: space-time slabs over 3D meshes) costs nothing, not even in
    the caches.
    """

    def __init__(self, make) -> None:
        super().__init__()
        self.make = make

    def __missing__(self, dim: int):
        kernel = self[dim] = self.make(int(dim))
        return kernel


@njit(cache=True, inline="always")
def _row(r, a):  # pragma: no cover - compiled
    return r if a.shape[0] > 1 else 0


@njit(cache=True, inline="always")
def _table_degree(table):  # pragma: no cover - compiled
    """The largest 1D degree in a multi-index table."""
    p = 0
    for k in range(table.shape[1]):
        p = max(p, table[table.shape[0] - 1, k])
    return p


@njit(cache=True, inline="always")
def _basis_scratch(d, nb, pmax, like):  # pragma: no cover - compiled
    """Work arrays of one basis evaluation: leg, dleg (d, pmax+1), phi (nb,), gradT (d, nb)."""
    return (np.empty((d, pmax + 1), like.dtype), np.empty((d, pmax + 1), like.dtype), np.empty(nb, like.dtype),
            np.empty((d, nb), like.dtype))


@njit(cache=True, inline="always")
def _box_scratch(d, pmax, like):  # pragma: no cover - compiled
    """The per-element basis tables of :func:`element_box_tables`: box (d, 2), scale (d, pmax+1)."""
    return np.empty((d, 2), like.dtype), np.empty((d, pmax + 1), like.dtype)


@njit(cache=True, inline="always")
def _dot_normal(A, n, An):  # pragma: no cover - compiled
    """An = A n; returns n . A n."""
    d = n.shape[0]
    s = 0.0 * n[0]
    for k in range(d):
        t = A[k, 0] * n[0]
        for m in range(1, d):
            t += A[k, m] * n[m]
        An[k] = t
        s += t * n[k]
    return s


# --------------------------------------------------------------------------
# accumulators: one entity, into local blocks


@njit(cache=True)
def simplex_accumulate(r0, r1, X, W, coef, side, rec, table, want_load, scratch, block,
                       vec):  # pragma: no cover - compiled
    """Add the volume terms of the points r0:r1 (one sub-simplex of an element; ``side`` its box tables,
    degree and basis size (box, scale, p, nb); ``scratch`` (leg, dleg, phi, grad, ag, bg))."""
    A, B, C, F = coef
    box, scale, p, nb = side
    leg, dleg, phi, grad, ag, bg = scratch
    for r in range(r0, r1):
        eval_basis_point_scaled(X[r], box, scale, rec, p, table, nb, leg, dleg, phi, grad)
        volume_point(W[r], phi, grad, nb, A[_row(r, A)], B[_row(r, B)], C[_row(r, C)], block, ag, bg)
        if want_load:
            load_point(W[r], phi, nb, F[_row(r, F)], vec)


@njit(cache=True)
def interior_face_accumulate(n, sigma_f, r0, r1, X, W, coef, side_K, side_N, rec, table, scratch, bKK,
                             bKN):  # pragma: no cover - compiled
    """Add the rows of element K at the points r0:r1 of a face shared with element N.

    ``n`` is the face's unit normal out of K, ``sigma_f`` its penalty; ``side_K``, ``side_N`` the two
    elements' (box, scale, degree, nbasis); ``scratch`` (An, leg, dleg, phiK, gradK, fluxK, phiN, gradN,
    fluxN).
    """
    A, B = coef
    boxK, scaleK, pK, nbK = side_K
    boxN, scaleN, pN, nbN = side_N
    An, leg, dleg, phiK, gradK, fluxK, phiN, gradN, fluxN = scratch
    d = X.shape[1]
    for r in range(r0, r1):
        eval_basis_point_scaled(X[r], boxK, scaleK, rec, pK, table, nbK, leg, dleg, phiK, gradK)
        eval_basis_point_scaled(X[r], boxN, scaleN, rec, pN, table, nbN, leg, dleg, phiN, gradN)
        _dot_normal(A[_row(r, A)], n, An)
        normal_flux(gradK, nbK, An, fluxK)
        normal_flux(gradN, nbN, An, fluxN)
        b = B[_row(r, B)]
        bn = b[0] * n[0]
        for k in range(1, d):
            bn += b[k] * n[k]
        interior_face_point(W[r], phiK, fluxK, nbK, phiN, fluxN, nbN, bn, sigma_f, bKK, bKN)


@njit(cache=True)
def boundary_face_accumulate(mode, n, sigma_f, r0, r1, X, W, coef, side, rec, table, scratch, block, vec,
                             want_block):  # pragma: no cover - compiled
    """Add the boundary terms of the points r0:r1 of one boundary face (unit outward normal ``n``, penalty
    ``sigma_f``) to the rows of its element (``side``: box, scale, degree, nbasis).

    mode DIFFUSIVE: where n.A n > 0, Dirichlet SIP terms or the Neumann load;
    mode INFLOW: where b.n < 0 off the Neumann part, the upwind terms.
    Without ``want_block`` only the load (``vec``) is added.  ``scratch``: (An, leg, dleg, phi, grad, flux).
    """
    A, B, GD, GN, NEU = coef
    box, scale, p, nb = side
    An, leg, dleg, phi, grad, flux = scratch
    d = X.shape[1]
    for r in range(r0, r1):
        ana = _dot_normal(A[_row(r, A)], n, An)
        neumann = NEU[_row(r, NEU)] != 0
        if mode == DIFFUSIVE:
            if not ana > 0:
                continue
            eval_basis_point_scaled(X[r], box, scale, rec, p, table, nb, leg, dleg, phi, grad)
            if neumann:
                neumann_point(W[r], phi, nb, GN[_row(r, GN)], vec)
            else:
                normal_flux(grad, nb, An, flux)
                if want_block:
                    dirichlet_point(W[r], phi, flux, nb, sigma_f, GD[_row(r, GD)], block, vec)
                else:
                    dirichlet_load_point(W[r], phi, flux, nb, sigma_f, GD[_row(r, GD)], vec)
        else:
            b = B[_row(r, B)]
            bn = b[0] * n[0]
            for k in range(1, d):
                bn += b[k] * n[k]
            if bn < 0 and not (ana > 0 and neumann):
                eval_basis_point_scaled(X[r], box, scale, rec, p, table, nb, leg, dleg, phi, grad)
                if want_block:
                    inflow_point(W[r], phi, nb, bn, GD[_row(r, GD)], block, vec)
                else:
                    inflow_load_point(W[r], phi, nb, bn, GD[_row(r, GD)], vec)


# --------------------------------------------------------------------------
# writing a local block at its CSR position


@njit(cache=True, inline="always")
def _add_block(data, base, width, start, block, nr, nc):  # pragma: no cover - compiled
    for i in range(nr):
        pos = base + i * width + start
        for j in range(nc):
            data[pos + j] += block[i, j]


@intrinsic
def _prefetch(typingctx, array, index):
    """Ask the CPU to start loading ``array.ravel()[index]`` into its caches (a hint: no fault, no wait)."""

    def codegen(context, builder, signature, args):
        data = context.make_array(signature.args[0])(context, builder, args[0]).data
        byte_ptr = ir.IntType(8).as_pointer()
        hint = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.VoidType(), [byte_ptr] + [ir.IntType(32)] * 3), "llvm.prefetch.p0i8")
        int32 = ir.IntType(32)
        # read access (0), keep in all cache levels (3), data cache (1)
        builder.call(hint, [builder.bitcast(builder.gep(data, [args[1]]), byte_ptr), ir.Constant(int32, 0),
                            ir.Constant(int32, 3), ir.Constant(int32, 1)])
        return context.get_dummy_value()

    return types.void(array, index), codegen


@njit(cache=True, inline="always")
def _prefetch_block(data, base, width, start, nr, nc):  # pragma: no cover - compiled
    """Start loading the CSR entries that :func:`_add_block` will update: one hint per 64-byte line of
    each row (every eighth float64 entry, and the last)."""
    for i in range(nr):
        pos = base + i * width + start
        for j in range(0, nc, 8):
            _prefetch(data, pos + j)
        _prefetch(data, pos + nc - 1)


@njit(cache=True, inline="always")
def _add_vec(rhs, first, vec, n):  # pragma: no cover - compiled
    for i in range(n):
        rhs[first + i] += vec[i]


# --------------------------------------------------------------------------
# row kernels (Approach 2)


@njit(cache=True, inline="always")
def _moment_scratch(d, nbmax, pmax, n_moments, like):  # pragma: no cover - compiled
    """Work arrays of the moment form (``moments.py``): the Legendre table L, a run's points, weights
    and weighted coefficients, the moments and their scaled copy, the block, load and S."""
    n, dt = MOMENT_BATCH, like.dtype
    mu = np.empty((moment_rows(d), n_moments), dt)
    return (np.empty((d, 2 * pmax + 1, n), dt), np.empty((d, n), dt), np.empty(n, dt), np.empty((d, d, n), dt),
            np.empty((d, n), dt), np.empty(n, dt), np.zeros(n, dt), mu, np.empty_like(mu),
            np.empty((nbmax, nbmax), dt), np.empty(nbmax, dt), np.empty(nbmax, dt))


@njit(cache=True, inline="always")
def _face_scratch(d, nbmax, pmax, like):  # pragma: no cover - compiled
    """Work arrays of the batched interior-face terms: values and fluxes SK, SN, trial rows U, Legendre
    tables L, dL, and per point x, A n, w, sigma + upwind weight; the normal; the blocks KK and KN."""
    n, dt = BATCH, like.dtype
    return (np.empty((nbmax, 2 * n), dt), np.empty((nbmax, 2 * n), dt), np.empty((nbmax, 2 * n), dt),
            np.empty((d, pmax + 1, n), dt), np.empty((d, pmax + 1, n), dt), np.empty((d, n), dt),
            np.empty((d, n), dt), np.empty(n, dt), np.empty(n, dt), np.empty(d, dt),
            np.empty((nbmax, nbmax), dt), np.empty((nbmax, nbmax), dt))


@njit(cache=True, inline="always")
def volume_moments(r_first, r_last, points, coef, want_load, want_block, box, rec, p, moments, work,
                   mu):  # pragma: no cover - compiled
    """The moments of the points r_first:r_last (an element or one sub-simplex of degree p), in runs
    of ``MOMENT_BATCH`` points; returns how the diffusion was gathered (``batched.A_*``).

    ``work``: the run's Legendre table, points, weights and weighted coefficients (L, xb, w, Ab, Bb,
    Cb, Fb).  Without ``want_block`` only the source's moments (|m| <= p) are formed: the load alone
    needs no Legendre values beyond degree p and no coefficient moments."""
    X, W = points.x, points.weight
    A, B, C, F = coef
    L, xb, w, Ab, Bb, Cb, Fb = work
    psi, counts = moments.psi, moments.counts
    mu[:, :] = 0
    a_kind = A_ISOTROPIC
    for r0 in range(r_first, r_last, MOMENT_BATCH):
        m = min(MOMENT_BATCH, r_last - r0)
        a_kind = gather_volume_coefficients(r0, m, X, W, A, B, C, F, want_load, xb, w, Ab, Bb, Cb, Fb)
        m = pad_moment_batch(m, xb, w, Ab, a_kind, Bb, Cb, Fb)
        legendre_values_batch(xb, m, box, rec, 2 * p if want_block else p, L)
        if want_block:
            av = Ab[0, 0] if a_kind == A_ISOTROPIC else w
            volume_moments_batch(m, L, psi, counts[p], Cb, Fb, Bb, av, Ab, a_kind == A_POINTWISE, mu)
        else:
            source_moments_batch(m, L, psi, counts[p], Fb, mu)
    return a_kind


@njit(cache=True, inline="always")
def volume_block(p, nb, moments, mu, mus, a_kind, Ab, box, scale, table, S, block, vec):  # pragma: no cover
    """The block and load from the moments, with the tables of ``moments`` that match the diffusion
    (A = a I or not)."""
    # the tables are chosen first, so that the inlined block_from_moments appears once (compile time)
    iso = a_kind == A_ISOTROPIC
    rows = moments.iso_rows if iso else moments.full_rows
    src = moments.iso_src if iso else moments.full_src
    coef = moments.iso_coef if iso else moments.full_coef
    block_from_moments(p, nb, moments.counts[p], mu, mus, a_kind, Ab, box, scale, table, rows, src, coef, S, block,
                       vec)


def _check_moment_arguments(table: np.ndarray, rec: np.ndarray) -> None:
    """The moment form reads Legendre values up to degree 2 pmax: a shorter recurrence would read past
    its end (compiled code checks no bounds)."""
    pmax = int(table.max()) if table.size else 0
    if rec.shape[1] < 2 * pmax + 1:
        raise ValueError(f"the volume kernels need legendre_recurrence(2 * {pmax}), got one of degree {rec.shape[1] - 1}")


def _element_rows_kernel(dim: int):
    """:func:`element_rows` compiled for one space dimension.

    ``dim`` is a constant of the closure, so the work arrays have
    compile-time shapes and every ``d == 3`` branch is resolved by the
    compiler, which then unrolls the loops over coordinates (faster than
    the dimension read from the arrays; docs/performance.md).
    """

    @range_kernel
    def element_rows(e_lo, e_hi, element_offsets, s_lo, points, coef, basis, moments, pattern, want_load,
                     want_block, values):  # pragma: no cover - compiled
        d = dim
        lo, hi, degree, nbasis, table, rec = basis
        row_base, row_width, block_start, diag_entry, row_start = (pattern.row_base, pattern.row_width,
                                                                   pattern.block_start, pattern.diag_entry,
                                                                   pattern.row_start)
        data, rhs = values
        pts = points.offsets
        nbmax = table.shape[0]
        pmax = _table_degree(table)
        L, xb, w, Ab, Bb, Cb, Fb, mu, mus, block, vec, S = _moment_scratch(d, nbmax, pmax, moments.psi.shape[0],
                                                                            data)
        work = (L, xb, w, Ab, Bb, Cb, Fb)
        box, scale = _box_scratch(d, pmax, data)
        for e in range(e_lo, e_hi):
            if row_base[e] < 0:  # not a row of this assembly (another rank's element)
                continue
            nb, p = nbasis[e], degree[e]
            # the block's rows are far apart in memory: their loads overlap the moments' work
            if want_block:
                _prefetch_block(data, row_base[e], row_width[e], block_start[diag_entry[e]], nb, nb)
            element_box_tables(lo[e], hi[e], p, box, scale)
            a_kind = volume_moments(pts[element_offsets[e] - s_lo], pts[element_offsets[e + 1] - s_lo], points,
                                    coef, want_load, want_block, box, rec, p, moments, work, mu)
            if want_block:
                volume_block(p, nb, moments, mu, mus, a_kind, Ab, box, scale, table, S, block, vec)
                _add_block(data, row_base[e], row_width[e], block_start[diag_entry[e]], block, nb, nb)
            else:  # the load alone (a march's slab whose matrix is kept)
                load_from_moments(nb, mu, scale, table, S, vec)
            if want_load:
                _add_vec(rhs, row_start[e], vec, nb)

    return element_rows


_ELEMENT_ROWS = KernelsByDimension(_element_rows_kernel)


def element_rows(e_lo, e_hi, element_offsets, s_lo, points, coef, basis, moments, pattern, want_load, want_block,
                 values) -> None:
    """Volume terms and load of the elements e_lo:e_hi, from their Legendre moments (``moments.py``).

    ``points`` are the chunk's sub-simplices' (the first is sub-simplex
    ``s_lo``; element e's are ``element_offsets[e]:element_offsets[e + 1]``),
    ``coef`` the :class:`~polydg.assembly.arguments.VolumeCoefficients` there,
    ``moments`` the :class:`~polydg.assembly.moments.MomentTables`.  An
    element's sub-simplices are consecutive, and so are their points: the
    element's moments are summed over them in order, in runs of
    ``MOMENT_BATCH`` points, and its diagonal block and load are formed and
    written once.  With ``want_block`` False only the load is formed (the
    source's moments alone) and the CSR values are not touched.  Each task
    of :func:`~polydg.threads.parallel_range` takes a range of consecutive
    elements and allocates its work arrays once.  ``basis.rec`` must reach
    degree 2 pmax (the moments' Legendre values).
    """
    _check_moment_arguments(basis.table, basis.rec)
    parallel_range(_ELEMENT_ROWS[points.x.shape[1]], e_lo, e_hi, element_offsets, s_lo, points, coef, basis, moments,
                   pattern, want_load, want_block, values)


@njit(cache=True, inline="always")
def _interior_batch_flush(n, batch, side_K, side_N, rec, table, work, bKK, bKN):  # pragma: no cover - compiled
    """Add the n gathered points of one face (K's side, neighbour N) to the blocks KK and KN (see ``batched.py``).

    ``batch``: the gathered (xb, w, An, coef); ``side_K``, ``side_N``: (box, scale, degree, nbasis);
    ``work``: (L, dL, SK, SN, U)."""
    xb, w, An, coef = batch
    boxK, scaleK, pK, nbK = side_K
    boxN, scaleN, pN, nbN = side_N
    L, dL, SK, SN, U = work
    n = pad_face_batch(n, xb, w, An, coef)
    basis_flux_batch(xb, n, boxK, scaleK, rec, pK, table, nbK, L, dL, An, SK)
    basis_flux_batch(xb, n, boxN, scaleN, rec, pN, table, nbN, L, dL, An, SN)
    one = SK.dtype.type(1)
    interior_trial_batch(SK, n, nbK, w, coef, one, U)
    contract(SK, U, 2 * n, nbK, nbK, bKK)
    interior_trial_batch(SN, n, nbN, w, coef, -one, U)
    contract(SK, U, 2 * n, nbK, nbN, bKN)


#: most segments (interfaces, or parts of one) in a batch of the row kernel: each but the last fills whole
#: padded slots
MAX_SEGMENTS = BATCH // PAD + 1


@njit(cache=True, inline="always")
def _segment_scratch(d, like):  # pragma: no cover - compiled
    """Per batch segment: its adjacency entry, first and end slot, and whether its interface ends there;
    per slot, the box of the neighbour across it (see :func:`batched.point_box`)."""
    return (np.empty(MAX_SEGMENTS, np.int64), np.empty(MAX_SEGMENTS, np.int64), np.empty(MAX_SEGMENTS, np.int64),
            np.empty(MAX_SEGMENTS, np.bool_), np.empty((d, 3, BATCH), like.dtype))


@njit(cache=True, forceinline=True)
def _element_batch_flush(n, n_seg, segments, e, adj_col, batch, tables_K, pK, nbK, elements, rec, table,
                         work, csr):  # pragma: no cover - compiled
    """Add a batch of n points from several interfaces of element K = e to its blocks.

    The values and fluxes of K's basis, and of each point's neighbour's
    basis, are computed in one pass each over the whole batch; K's give the
    KK block in one contraction, and each segment [seg_lo, seg_hi) of one
    interface gives its KN block (written to ``data`` when the interface
    ends in this batch; a segment cut by the batch's end carries its partial
    block into the next batch's first segment).  One pass over a batch
    instead of one per interface: most interfaces have 4-8 points, and on
    so few the loops' set-up cost more than their arithmetic.  Arguments
    are grouped in small tuples of what it reads (not the kernel's whole
    structures: each array is more code to compile before LLVM inlines it):
    Numba inlines no function of more than 32.
    """
    seg_k, seg_lo, seg_hi, seg_done, boxes = segments
    xb, w, An, coef = batch
    boxK, scaleK = tables_K
    degree, nbasis = elements
    L, dL, SK, SN, U, bKK, bKN = work
    row_base, row_width, block_start, data = csr
    one = SK.dtype.type(1)
    basis_flux_batch(xb, n, boxK, scaleK, rec, pK, table, nbK, L, dL, An, SK)
    interior_trial_batch(SK, n, nbK, w, coef, one, U)
    contract(SK, U, 2 * n, nbK, nbK, bKK)
    pN, nbN = 0, 1
    for s in range(n_seg):
        c = adj_col[seg_k[s]]
        pN, nbN = max(pN, degree[c]), max(nbN, nbasis[c])
    basis_flux_boxes(xb, n, boxes, rec, pN, table, nbN, L, dL, An, SN)
    interior_trial_batch(SN, n, nbN, w, coef, -one, U)
    for s in range(n_seg):
        k, a, b = seg_k[s], seg_lo[s], seg_hi[s]
        nbN = nbasis[adj_col[k]]
        contract_span(SK, U, 2 * a, 2 * b, nbK, nbN, bKN)
        if seg_done[s]:
            _add_block(data, row_base[e], row_width[e], block_start[k], bKN, nbK, nbN)
            bKN[:nbK, :nbN] = 0.0


def _interior_rows_kernel(dim: int):
    """:func:`interior_rows` compiled for one space dimension (see :func:`_element_rows_kernel`)."""

    @range_kernel
    def interior_rows(e_lo, e_hi, points, coef, basis, faces, pattern, values):  # pragma: no cover - compiled
        d = dim
        X, W = points.x, points.weight
        A, B = coef
        pts = points.offsets
        lo, hi, degree, nbasis, table, rec = basis
        normal, sigma, interface_offsets, face_local = faces.normal, faces.sigma, faces.interface_offsets, \
            faces.face_local
        adj_offsets, adj_col, adj_interface = pattern.adj_offsets, pattern.adj_col, pattern.adj_interface
        row_base, row_width, block_start, diag_entry = (pattern.row_base, pattern.row_width, pattern.block_start,
                                                        pattern.diag_entry)
        data = values.data
        nbmax = table.shape[0]
        pmax = _table_degree(table)
        SK, SN, U, L, dL, xb, An, w, coef_b, nvec, bKK, bKN = _face_scratch(d, nbmax, pmax, data)
        seg_k, seg_lo, seg_hi, seg_done, boxes = segments = _segment_scratch(d, data)
        boxK, scaleK = tables_K = _box_scratch(d, pmax, data)
        batch = (xb, w, An, coef_b)
        elements = (degree, nbasis)
        work = (L, dL, SK, SN, U, bKK, bKN)
        csr = (row_base, row_width, block_start, data)
        for e in range(e_lo, e_hi):
            if row_base[e] < 0:
                continue
            nbK, pK = nbasis[e], degree[e]
            _prefetch_block(data, row_base[e], row_width[e], block_start[diag_entry[e]], nbK, nbK)
            bKK[:nbK, :nbK] = 0.0
            bKN[:nbK, :nbmax] = 0.0
            element_box_tables(lo[e], hi[e], pK, boxK, scaleK)
            # points and segments in the batch; int64, not literal zeros, so that the flush compiles once
            q = n_seg = np.int64(0)
            k_final = -1  # the element's last interface: its last run flushes the batch
            for k in range(adj_offsets[e], adj_offsets[e + 1]):
                if adj_interface[k] >= 0:
                    k_final = k
            for k in range(adj_offsets[e], adj_offsets[e + 1]):
                t = adj_interface[k]
                if t < 0:
                    continue
                c = adj_col[k]
                sign = 1.0 if e < c else -1.0
                _prefetch_block(data, row_base[e], row_width[e], block_start[k], nbK, nbasis[c])
                first = q  # this interface's segment starts here (a multiple of PAD)
                f_last = interface_offsets[t + 1] - 1
                for f in range(interface_offsets[t], f_last + 1):
                    fl = face_local[f]
                    for m in range(d):
                        nvec[m] = sign * normal[f, m]
                    r, r_end = pts[fl], pts[fl + 1]
                    while r < r_end:  # the face's points, in runs that fill the batch
                        run = min(BATCH - q, r_end - r)
                        gather_face_points(q, r, run, X, W, A, B, nvec, sigma[f], xb, w, An, coef_b)
                        q += run
                        r += run
                        done = r == r_end and f == f_last  # the interface's last point
                        if done:  # its segment ends here: pad it to PAD slots (a full batch needs none)
                            q = pad_face_batch(q, xb, w, An, coef_b)
                        if q == BATCH or done:
                            seg_k[n_seg], seg_lo[n_seg], seg_hi[n_seg], seg_done[n_seg] = k, first, q, done
                            point_box(lo[c], hi[c], first, q, boxes)
                            n_seg += 1
                            first = q
                        # one call site: the flush is inlined, and each copy costs compile time
                        if q == BATCH or (done and k == k_final):
                            _element_batch_flush(q, n_seg, segments, e, adj_col, batch, tables_K, pK, nbK,
                                                 elements, rec, table, work, csr)
                            q = first = n_seg = np.int64(0)
            _add_block(data, row_base[e], row_width[e], block_start[diag_entry[e]], bKK, nbK, nbK)

    return interior_rows


_INTERIOR_ROWS = KernelsByDimension(_interior_rows_kernel)


def interior_rows(e_lo, e_hi, points, coef, basis, faces, pattern, values) -> None:
    """Interior-face terms of the rows of elements e_lo:e_hi.

    ``points`` are the faces' of every interface with a side in the chunk
    (face f's are entity ``faces.face_local[f]`` of the batch), ``coef`` the
    :class:`~polydg.assembly.arguments.InteriorCoefficients` there.  Element
    e visits its interfaces in column order and each interface's faces and
    points in order, gathering them into batches of ``BATCH`` points that
    span several interfaces (each interface a segment padded to ``PAD``
    points; one cut by a batch's end goes on in the next).  Per batch, e's
    basis and the neighbours' bases (each point in its neighbour's box) are
    evaluated in one pass each; block (e, c) is complete after its
    interface's last segment and is written once, the diagonal block after
    all interfaces.  Batches that span interfaces, rather than one batch
    per interface, spread the loops' set-up over more points where
    interfaces have few (6-12 at p = 1 in 3D); docs/performance.md.
    """
    parallel_range(_INTERIOR_ROWS[points.x.shape[1]], e_lo, e_hi, points, coef, basis, faces, pattern, values)


@njit(cache=True, inline="always")
def _boundary_scratch(d, nbmax, pmax, like):  # pragma: no cover - compiled
    """Work arrays of the pointwise boundary form: block, load, then (An, leg, dleg, phi, grad, flux) as
    :func:`boundary_face_accumulate` takes them, then the box tables."""
    dt = like.dtype
    leg, dleg, phi, grad = _basis_scratch(d, nbmax, pmax, like)
    box, scale = _box_scratch(d, pmax, like)
    return (np.empty((nbmax, nbmax), dt), np.empty(nbmax, dt),
            (np.empty(d, dt), leg, dleg, phi, grad, np.empty(nbmax, dt)), box, scale)


@range_kernel
def _boundary_rows(e_lo, e_hi, mode, points, coef, basis, faces, pattern, want_block,
                   values):  # pragma: no cover - compiled
    pts, X, W = points
    d = X.shape[1]
    lo, hi, degree, nbasis, table, rec = basis
    boundary_offsets, face_local, normal, sigma = faces.boundary_offsets, faces.face_local, faces.normal, faces.sigma
    row_base, row_width, block_start, diag_entry, row_start = (pattern.row_base, pattern.row_width,
                                                               pattern.block_start, pattern.diag_entry,
                                                               pattern.row_start)
    data, rhs = values
    pmax = _table_degree(table)
    block, vec, scratch, box, scale = _boundary_scratch(d, table.shape[0], pmax, data)
    for e in range(e_lo, e_hi):
        f0, f1 = boundary_offsets[e], boundary_offsets[e + 1]
        if f0 == f1 or row_base[e] < 0:
            continue
        nb = nbasis[e]
        block[:nb, :nb] = 0.0
        vec[:nb] = 0.0
        element_box_tables(lo[e], hi[e], degree[e], box, scale)
        side = (box, scale, degree[e], nb)
        for f in range(f0, f1):
            fl = face_local[f]
            if fl < 0:  # a face left out: its terms vanish (passes.contributing_boundary_faces)
                continue
            boundary_face_accumulate(mode, normal[f], sigma[f], pts[fl], pts[fl + 1], X, W, coef, side, rec, table,
                                     scratch, block, vec, want_block)
        if want_block:
            _add_block(data, row_base[e], row_width[e], block_start[diag_entry[e]], block, nb, nb)
        _add_vec(rhs, row_start[e], vec, nb)


def boundary_rows(mode, e_lo, e_hi, points, coef, basis, faces, pattern, want_block, values) -> None:
    """Boundary-face terms (``mode`` DIFFUSIVE or INFLOW) of the rows of elements e_lo:e_hi, on the faces
    f with ``faces.face_local[f] >= 0`` (their points' entity in ``points``); ``coef`` the
    :class:`~polydg.assembly.arguments.BoundaryCoefficients` there.  ``want_block`` False: the load
    alone (``values.data`` is then not touched)."""
    parallel_range(_boundary_rows, e_lo, e_hi, mode, points, coef, basis, faces, pattern, want_block, values)


# --------------------------------------------------------------------------
# entity kernels (atomic variant and Approach 1)


def _simplex_blocks_kernel(dim: int):
    """:func:`simplex_blocks` compiled for one space dimension (see :func:`_element_rows_kernel`)."""

    @range_kernel
    def simplex_blocks(s_lo, s_hi, s_first, simplex_element, points, coef, basis, moments, want_load,
                       buffers):  # pragma: no cover - compiled
        d = dim
        pts = points.offsets
        lo, hi, degree, nbasis, table, rec = basis
        vals, vals_offsets, loads, load_offsets = buffers
        nbmax = table.shape[0]
        pmax = _table_degree(table)
        L, xb, w, Ab, Bb, Cb, Fb, mu, mus, block, vec, S = _moment_scratch(d, nbmax, pmax, moments.psi.shape[0],
                                                                            vals)
        work = (L, xb, w, Ab, Bb, Cb, Fb)
        box, scale = _box_scratch(d, pmax, vals)
        for s in range(s_lo, s_hi):
            e = simplex_element[s]
            nb, p = nbasis[e], degree[e]
            sl = s - s_first
            element_box_tables(lo[e], hi[e], p, box, scale)
            a_kind = volume_moments(pts[sl], pts[sl + 1], points, coef, want_load, True, box, rec, p, moments, work,
                                    mu)
            volume_block(p, nb, moments, mu, mus, a_kind, Ab, box, scale, table, S, block, vec)
            v0 = vals_offsets[sl]
            for i in range(nb):
                for j in range(nb):
                    vals[v0 + i * nb + j] = block[i, j]
                loads[load_offsets[sl] + i] = vec[i]

    return simplex_blocks


_SIMPLEX_BLOCKS = KernelsByDimension(_simplex_blocks_kernel)


def simplex_blocks(s_lo, s_hi, simplex_element, points, coef, basis, moments, want_load, buffers) -> None:
    """The volume block and load of every sub-simplex s_lo:s_hi (``points`` theirs, from s_lo on), each
    into its own slot of the :class:`~polydg.assembly.arguments.EntityBuffers`.

    The same moment form as :func:`element_rows`, one sub-simplex at a time.
    """
    _check_moment_arguments(basis.table, basis.rec)
    parallel_range(_SIMPLEX_BLOCKS[points.x.shape[1]], s_lo, s_hi, s_lo, simplex_element, points, coef, basis,
                   moments, want_load, buffers)


def _interior_face_blocks_kernel(dim: int):
    """:func:`interior_face_blocks` compiled for one space dimension (see :func:`_element_rows_kernel`)."""

    @range_kernel
    def interior_face_blocks(t_lo, t_hi, face_list, points, coef, basis, faces,
                             buffers):  # pragma: no cover - compiled
        d = dim
        X, W = points.x, points.weight
        A, B = coef
        pts = points.offsets
        lo, hi, degree, nbasis, table, rec = basis
        normal, sigma, face_elements, face_local = faces.normal, faces.sigma, faces.face_elements, faces.face_local
        vals, vals_offsets = buffers.vals, buffers.vals_offsets
        nbmax = table.shape[0]
        pmax = _table_degree(table)
        SK, SN, U, L, dL, xb, An, w, coef_b, nvec, bKK, bKN = _face_scratch(d, nbmax, pmax, vals)
        boxK, scaleK = _box_scratch(d, pmax, vals)
        boxN, scaleN = _box_scratch(d, pmax, vals)
        batch = (xb, w, An, coef_b)
        work = (L, dL, SK, SN, U)
        for t in range(t_lo, t_hi):
            f = face_list[t]
            fl = face_local[f]
            pos = vals_offsets[t]
            for side in range(2):
                e = face_elements[f, side]
                c = face_elements[f, 1 - side]
                sign = 1.0 if side == 0 else -1.0
                nbK, nbN = nbasis[e], nbasis[c]
                element_box_tables(lo[e], hi[e], degree[e], boxK, scaleK)
                element_box_tables(lo[c], hi[c], degree[c], boxN, scaleN)
                bKK[:nbK, :nbK] = 0.0
                bKN[:nbK, :nbN] = 0.0
                for m in range(d):
                    nvec[m] = sign * normal[f, m]
                for r in range(pts[fl], pts[fl + 1], BATCH):
                    run = min(BATCH, pts[fl + 1] - r)
                    gather_face_points(0, r, run, X, W, A, B, nvec, sigma[f], xb, w, An, coef_b)
                    _interior_batch_flush(run, batch, (boxK, scaleK, degree[e], nbK), (boxN, scaleN, degree[c], nbN),
                                          rec, table, work, bKK, bKN)
                for i in range(nbK):
                    for j in range(nbK):
                        vals[pos] = bKK[i, j]
                        pos += 1
                for i in range(nbK):
                    for j in range(nbN):
                        vals[pos] = bKN[i, j]
                        pos += 1

    return interior_face_blocks


_INTERIOR_FACE_BLOCKS = KernelsByDimension(_interior_face_blocks_kernel)


def interior_face_blocks(face_list, points, coef, basis, faces, buffers) -> None:
    """The four blocks (K1K1, K1K2, K2K2, K2K1) of every listed interior face (face f's points are
    entity ``faces.face_local[f]`` of ``points``).

    Slot layout of face t: [K1K1 (n1 x n1), K1K2 (n1 x n2), K2K2 (n2 x n2), K2K1 (n2 x n1)].
    The same batched face form as :func:`interior_rows`, one face at a time.
    """
    parallel_range(_INTERIOR_FACE_BLOCKS[points.x.shape[1]], 0, len(face_list), face_list, points, coef, basis,
                   faces, buffers)


@range_kernel
def _boundary_face_blocks(t_lo, t_hi, mode, face_list, points, coef, basis, faces,
                          buffers):  # pragma: no cover - compiled
    pts, X, W = points
    d = X.shape[1]
    lo, hi, degree, nbasis, table, rec = basis
    face_elements, face_local, normal, sigma = faces.face_elements, faces.face_local, faces.normal, faces.sigma
    vals, vals_offsets, loads, load_offsets = buffers
    pmax = _table_degree(table)
    block, vec, scratch, box, scale = _boundary_scratch(d, table.shape[0], pmax, vals)
    for t in range(t_lo, t_hi):
        f = face_list[t]
        fl = face_local[f]
        e = face_elements[f, 0]
        nb = nbasis[e]
        block[:nb, :nb] = 0.0
        vec[:nb] = 0.0
        element_box_tables(lo[e], hi[e], degree[e], box, scale)
        boundary_face_accumulate(mode, normal[f], sigma[f], pts[fl], pts[fl + 1], X, W, coef,
                                 (box, scale, degree[e], nb), rec, table, scratch, block, vec, True)
        v0 = vals_offsets[t]
        for i in range(nb):
            for j in range(nb):
                vals[v0 + i * nb + j] = block[i, j]
            loads[load_offsets[t] + i] = vec[i]


def boundary_face_blocks(mode, face_list, points, coef, basis, faces, buffers) -> None:
    """The block and load of every listed boundary face (``mode`` DIFFUSIVE or INFLOW)."""
    parallel_range(_boundary_face_blocks, 0, len(face_list), mode, face_list, points, coef, basis, faces, buffers)


# --------------------------------------------------------------------------
# reducing entity blocks: a BlockList (row element, adjacency entry, offset in vals)


@njit(cache=True)
def scatter_add_blocks(blocks, vals, nbasis, pattern, data):  # pragma: no cover - compiled
    """data[position of block entry] += vals, block by block in list order (the atomic variant)."""
    block_row, block_entry, block_vals = blocks
    adj_col, row_base, row_width, block_start = (pattern.adj_col, pattern.row_base, pattern.row_width,
                                                 pattern.block_start)
    for t in range(block_row.shape[0]):
        e = block_row[t]
        k = block_entry[t]
        nr, nc = nbasis[e], nbasis[adj_col[k]]
        base = row_base[e] + block_start[k]
        w = row_width[e]
        v = block_vals[t]
        for i in range(nr):
            for j in range(nc):
                data[base + i * w + j] += vals[v + i * nc + j]


@njit(cache=True)
def coo_triplets(blocks, vals, nbasis, pattern, dof_offsets, rows, cols):  # pragma: no cover - compiled
    """Row and column indices of every buffered value (Approach 1's COO with duplicates)."""
    block_row, block_entry, block_vals = blocks
    adj_col, row_start = pattern.adj_col, pattern.row_start
    for t in range(block_row.shape[0]):
        e = block_row[t]
        c = adj_col[block_entry[t]]
        nr, nc = nbasis[e], nbasis[c]
        v = block_vals[t]
        for i in range(nr):
            for j in range(nc):
                rows[v + i * nc + j] = row_start[e] + i
                cols[v + i * nc + j] = dof_offsets[c] + j


@njit(cache=True)
def scatter_add_loads(load_row, load_vals, loads, row_start, nbasis, rhs):  # pragma: no cover - compiled
    """rhs[rows of load_row[t]] += loads[load_vals[t]:], entity by entity (rows not assembled here skipped)."""
    for t in range(load_row.shape[0]):
        e = load_row[t]
        if row_start[e] < 0:  # not a row of this assembly
            continue
        for i in range(nbasis[e]):
            rhs[row_start[e] + i] += loads[load_vals[t] + i]
