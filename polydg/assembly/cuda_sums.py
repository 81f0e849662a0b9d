"""GPU kernels of the ``"ordered"`` reduction: a thread per entity forms its block, a thread per matrix entry sums.

The row kernels (``cuda_kernels.py``) give each element one thread, which
walks all of its sub-simplices and faces: on a mesh of few, large
agglomerated elements most of a GPU then idles.  The atomic kernels give each
sub-simplex or face side a thread but add into the matrix in no fixed order.
These kernels keep the entity threads and a fixed order:

1. a *piece* kernel per pass, one thread per sub-simplex, interior face side
   or boundary face, forms that entity's local blocks (the device functions
   the atomic kernels call too: ``simplex_blocks``, ``interior_side_blocks``,
   ``boundary_face_blocks`` of ``cuda_kernels``) and stores them in a scratch
   buffer: ``STRIDE`` values per sub-simplex or boundary face (an ``NB`` x
   ``NB`` block, then ``NB`` load values), ``SIDE`` per interior face side
   (its diagonal block, then its off-diagonal block);
2. a *sum* kernel, one thread per (element, local matrix or load entry),
   adds that entry over the element's entities in their fixed order
   (sub-simplices in order; interfaces in column order and each one's faces
   in order; boundary faces in order) and adds the sum once at its CSR
   position.

No two threads write one entry of a pass and the order of every sum is
fixed, so the matrix is bitwise the same from run to run (its last bits may
differ from the row kernels', which sum point by point).  The price is the
scratch buffer: a block and its load per sub-simplex or boundary face, two
blocks per interior face side, of the largest basis, for a chunk's entities
(the chunks make room for it: ``sums_layout.scratch_bytes``).
"""

from __future__ import annotations

from functools import lru_cache
from types import SimpleNamespace

import numpy as np
from numba import cuda, from_dtype

from ..backend import numpy_aliases_for_numba_cuda
from ..basis import basis_indices
from .cuda_kernels import gpu_kernels, kernel
from .sums_layout import scratch_strides

numpy_aliases_for_numba_cuda()  # before numba-cuda's CUDA target first loads (at the first compilation)


@cuda.jit(device=True)
def _store_block(scratch, base, block, nr, nc, width):
    for i in range(nr):
        for j in range(nc):
            scratch[base + i * width + j] = block[i, j]


@cuda.jit(device=True)
def _store_pieces(want_block, scratch, base, block, vec, nb, width):
    """An entity's block (``want_block``) and load at ``scratch[base:]``: width x width, then width."""
    if want_block:
        _store_block(scratch, base, block, nb, nb, width)
    for i in range(nb):
        scratch[base + width * width + i] = vec[i]


@cuda.jit(device=True)
def _sums_entry(t, e_lo, want_block, nbasis, row_base, width):
    """Thread t of a block-and-load sum: its element, entry (< width^2: block (i, j); else load row) and
    whether it has one to write (-1 for the element when not).  Without ``want_block`` (the load alone) the
    threads are the load rows' alone: ``width`` per element."""
    per = width * width + width if want_block else width
    e, entry = e_lo + t // per, t % per
    if not want_block:
        entry += width * width
    if row_base[e] < 0:
        return -1, entry
    nb = nbasis[e]
    if entry < width * width:
        if not want_block or entry // width >= nb or entry % width >= nb:
            return -1, entry
    elif entry - width * width >= nb:
        return -1, entry
    return e, entry


@cuda.jit(device=True)
def _add_entry(e, entry, acc, pattern, values, width):
    """Add ``acc`` at block-and-load ``entry`` of element e: diagonal block (i, j) or load row."""
    if entry < width * width:
        values.data[pattern.row_base[e] + pattern.block_start[pattern.diag_entry[e]]
                    + (entry // width) * pattern.row_width[e] + entry % width] += acc
    else:
        values.rhs[pattern.row_start[e] + entry - width * width] += acc


@lru_cache(maxsize=None)
def gpu_sum_kernels(dim: int, pmax: int, dtype, basis: str = "P") -> SimpleNamespace:
    """The piece and sum kernels of a ``dim``-dimensional space of degrees <= ``pmax`` in ``dtype``, ``basis``
    "P" or "PQ" (as ``cuda_kernels.gpu_kernels``, whose entity device functions form the pieces).  Each
    kernel's first argument is its thread count."""
    entity = gpu_kernels(dim, pmax, dtype, basis)
    simplex_blocks, interior_side_blocks = entity.simplex_blocks, entity.interior_side_blocks
    boundary_face_blocks = entity.boundary_face_blocks
    NB = len(basis_indices(int(pmax), int(dim), basis))
    STRIDE, SIDE = scratch_strides(NB)  # per sub-simplex or boundary face; per interior face side
    NN = NB * NB
    DT = from_dtype(np.dtype(dtype))

    # -- volume: a thread per sub-simplex, then per (element, entry) ------------------

    @kernel
    def volume_pieces(n_s, s_lo, want_block, simplex_element, points, coef, basis, pattern, scratch):
        t = cuda.grid(1)
        if t >= n_s:
            return
        block, vec = cuda.local.array((NB, NB), DT), cuda.local.array(NB, DT)
        e = simplex_blocks(want_block, t, s_lo, simplex_element, points, coef, basis, pattern, block, vec)
        if e < 0:
            return  # not a row of this assembly: its sum is not made either
        _store_pieces(want_block, scratch, t * STRIDE, block, vec, basis.nbasis[e], NB)

    @kernel
    def volume_sums(n, e_lo, want_block, element_offsets, s_lo, scratch, basis, pattern, values):
        t = cuda.grid(1)
        if t >= n:
            return
        e, entry = _sums_entry(t, e_lo, want_block, basis.nbasis, pattern.row_base, NB)
        if e < 0:
            return
        acc = cuda.local.array(1, DT)
        acc[0] = 0
        for s in range(element_offsets[e] - s_lo, element_offsets[e + 1] - s_lo):  # sub-simplices in order
            acc[0] += scratch[s * STRIDE + entry]
        _add_entry(e, entry, acc[0], pattern, values, NB)

    # -- interior faces: a thread per face side of the batch, then per (element, entry) --------

    @kernel
    def interior_pieces(n_sides, e_lo, e_hi, batch_faces, points, coef, basis, faces, pattern, scratch):
        t = cuda.grid(1)
        if t >= n_sides:
            return
        fl, side = t // 2, t % 2  # thread 2 fl + side: face fl of the batch, the rows of its side's element
        f = batch_faces[fl]
        e, c = faces.face_elements[f, side], faces.face_elements[f, 1 - side]
        if e < e_lo or e >= e_hi or pattern.row_base[e] < 0:
            return  # that side's rows are another chunk's, or not assembled here
        bKK, bKN = cuda.local.array((NB, NB), DT), cuda.local.array((NB, NB), DT)
        interior_side_blocks(f, side, points.offsets[fl], points.offsets[fl + 1], points, coef, basis, faces, bKK,
                             bKN)
        _store_block(scratch, t * SIDE, bKK, basis.nbasis[e], basis.nbasis[e], NB)
        _store_block(scratch, t * SIDE + NN, bKN, basis.nbasis[e], basis.nbasis[c], NB)

    @kernel
    def interior_sums(n, e_lo, scratch, basis, faces, pattern, values):
        """Entry (i, j) of element e's blocks: each off-diagonal block's over its interface's faces, and the
        diagonal block's over every such face, interfaces in column order."""
        t = cuda.grid(1)
        if t >= n:
            return
        e, entry = e_lo + t // NN, t % NN
        if pattern.row_base[e] < 0:
            return
        i, j = entry // NB, entry % NB
        nbK = basis.nbasis[e]
        if i >= nbK:
            return
        row = pattern.row_base[e] + i * pattern.row_width[e]
        sums = cuda.local.array(2, DT)  # the diagonal block's entry, one off-diagonal block's
        sums[0] = 0
        for k in range(pattern.adj_offsets[e], pattern.adj_offsets[e + 1]):  # e's neighbours in column order
            i_f = pattern.adj_interface[k]
            if i_f < 0:
                continue  # the diagonal entry
            c = pattern.adj_col[k]
            side = 0 if e < c else 1
            off = j < basis.nbasis[c]  # (i, j) is an entry of the block against c
            sums[1] = 0
            for f in range(faces.interface_offsets[i_f], faces.interface_offsets[i_f + 1]):  # in order
                base = (2 * faces.face_local[f] + side) * SIDE
                if j < nbK:
                    sums[0] += scratch[base + entry]
                if off:
                    sums[1] += scratch[base + NN + entry]
            if off:
                values.data[row + pattern.block_start[k] + j] += sums[1]
        if j < nbK:
            values.data[row + pattern.block_start[pattern.diag_entry[e]] + j] += sums[0]

    # -- boundary faces: a thread per face of the chunk's range, then per (element, entry) ------

    @kernel
    def boundary_pieces(n_f, f_lo, mode, want_block, points, coef, basis, faces, pattern, scratch):
        t = cuda.grid(1)
        if t >= n_f:
            return
        block, vec = cuda.local.array((NB, NB), DT), cuda.local.array(NB, DT)
        fl = boundary_face_blocks(mode, f_lo + t, points, coef, basis, faces, pattern, block, vec)
        if fl < 0:
            return
        e = faces.face_elements[f_lo + t, 0]
        _store_pieces(want_block, scratch, fl * STRIDE, block, vec, basis.nbasis[e], NB)

    @kernel
    def boundary_sums(n, e_lo, want_block, scratch, basis, faces, pattern, values):
        t = cuda.grid(1)
        if t >= n:
            return
        e, entry = _sums_entry(t, e_lo, want_block, basis.nbasis, pattern.row_base, NB)
        if e < 0:
            return
        acc = cuda.local.array(1, DT)
        acc[0] = 0
        for f in range(faces.boundary_offsets[e], faces.boundary_offsets[e + 1]):  # e's boundary faces in order
            fl = faces.face_local[f]
            if fl >= 0:
                acc[0] += scratch[fl * STRIDE + entry]
        _add_entry(e, entry, acc[0], pattern, values, NB)

    return SimpleNamespace(NB=NB, STRIDE=STRIDE, SIDE=SIDE, volume_pieces=volume_pieces, volume_sums=volume_sums,
                           interior_pieces=interior_pieces, interior_sums=interior_sums,
                           boundary_pieces=boundary_pieces, boundary_sums=boundary_sums)
