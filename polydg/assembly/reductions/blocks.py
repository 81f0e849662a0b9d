"""Approach "blocks": on a GPU the volume and boundary terms give each element a thread block, a thread per entry.

The row kernels' element thread and the ordered sums' sub-simplex threads
both hold a whole (nb, nb) block per thread, in local memory, and add every
point into all of it.  Here an element's points go through shared memory a
tile at a time (a few threads form each point's basis and trial side, as the
row kernels do) and each thread of the element's block sums its own entries
over the points in order, then writes them once
(``cuda_kernels.gpu_kernels``' ``volume_entries``); the element's boundary
faces likewise, face by face (``boundary_entries``).  Deterministic: every
entry sums the row kernels' terms in their order (bit for bit on the
simulator; a card's compiler may contract the two kernels' products
differently).  The interior faces
are the ordered sums' (``ordered.py``), and so are all the terms of a basis of
more than 127 functions (``ENTRIES_FIT``: 3D P above p = 7, 2D+1 PQ above
p = 5, 3D+1 PQ above p = 3).  On the CPU it is the row kernels' executor
(``rows.py``).
"""

from __future__ import annotations

from ..sums_layout import face_scratch_bytes
from .ordered import DeviceOrderedPasses
from .registry import Reduction, register
from .rows import RowPasses


class DeviceBlockPasses(DeviceOrderedPasses):
    """The GPU executor: the volume and boundary terms by a block per element, the interior faces by the ordered
    sums."""

    def volume(self, e_lo, e_hi, s_lo, s_hi, points, coef) -> None:
        ctx = self.ctx
        k = ctx.kernels  # the row and entity kernels of the plan's dimension, degree and precision
        if not k.ENTRIES_FIT:  # a basis too large for a tile in shared memory: the ordered sums' volume
            return super().volume(e_lo, e_hi, s_lo, s_hi, points, coef)
        ctx.run_kernel(k.volume_entries, "volume_entries", e_hi - e_lo, "element_kernel", e_lo, ctx.plan.matrix,
                       self.element_offsets, s_lo, points, coef, ctx.args.basis, ctx.args.pattern, ctx.values,
                       block=k.ENTRY_THREADS)

    def boundary(self, mode, key, e_lo, e_hi, faces, points, coef) -> None:
        """``faces``: the chunk's boundary faces with points (numbered in ``face_local``; those between, -1)."""
        ctx = self.ctx
        k = ctx.kernels
        if not k.ENTRIES_FIT:
            return super().boundary(mode, key, e_lo, e_hi, faces, points, coef)
        ctx.run_kernel(k.boundary_entries, "boundary_entries", e_hi - e_lo, key, e_lo, mode, ctx.plan.matrix, points,
                       coef, ctx.args.basis, ctx.args.faces, ctx.args.pattern, ctx.values, block=k.ENTRY_THREADS)


BLOCKS = register(Reduction(
    name="blocks", summary="on a GPU the volume and boundary a thread block per element, a thread per block "
    "entry, the interior faces as \"ordered\" (deterministic; on the CPU the row kernels)", deterministic=True, fills_pattern=True,
    cpu=RowPasses, gpu=DeviceBlockPasses, scratch=face_scratch_bytes))
