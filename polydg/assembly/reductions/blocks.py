"""Approach "blocks": on a GPU each element gets a thread block, and each entry of its rows a thread.

The row kernels give an element one thread, which holds a whole (nb, nb)
block in local memory and adds every point of the element's sub-simplices
and faces into all of it; the ordered sums give each sub-simplex or face a
thread, which does the same with its own block.  Here an element's points go
through shared memory a tile at a time (a few threads form each point's
basis values, trial side or fluxes, as the row kernels do) and each thread
of the element's block sums its own entries over the points, in the row
kernels' order, then writes them once (``cuda_kernels.gpu_kernels``'
``volume_entries``, ``interior_entries``, ``boundary_entries``).
Deterministic: bit for bit the row kernels' matrix on the simulator (a
card's compiler may contract the two kernels' products differently).  A
basis of more than 127 functions (``sums_layout.BLOCK_ENTRIES_MAX``: 3D P
above p = 7, 2D+1 PQ above p = 5, 3D+1 PQ above p = 3) runs the ordered
sums (``ordered.py``).  On the CPU it is the row kernels' executor
(``rows.py``).
"""

from __future__ import annotations

from ..sums_layout import blocks_scratch_bytes
from .ordered import DeviceOrderedPasses
from .registry import Reduction, register
from .rows import RowPasses


class DeviceBlockPasses(DeviceOrderedPasses):
    """The GPU executor: a thread block per element in every pass; the ordered sums' passes for a basis too
    large for its kernels."""

    def volume(self, e_lo, e_hi, s_lo, s_hi, points, coef) -> None:
        ctx = self.ctx
        k = ctx.kernels  # the row and entity kernels of the plan's dimension, degree and precision
        if not k.ENTRIES_FIT:  # a basis too large for these kernels: the ordered sums
            return super().volume(e_lo, e_hi, s_lo, s_hi, points, coef)
        ctx.run_kernel(k.volume_entries, "volume_entries", e_hi - e_lo, "element_kernel", e_lo, ctx.plan.matrix,
                       self.element_offsets, s_lo, points, coef, ctx.args.basis, ctx.args.pattern, ctx.values,
                       block=k.ENTRY_THREADS)

    def interior_faces(self) -> None:
        ctx = self.ctx
        k = ctx.kernels
        if not k.ENTRIES_FIT:
            return super().interior_faces()
        for e_lo, e_hi, _, points, coef in ctx.interior_chunks():
            ctx.run_kernel(k.interior_entries, "interior_entries", e_hi - e_lo, "interior_kernel", e_lo, points, coef,
                           ctx.args.basis, ctx.args.faces, ctx.args.pattern, ctx.values, block=k.ENTRY_THREADS)

    def boundary(self, mode, key, e_lo, e_hi, faces, points, coef) -> None:
        """``faces``: the chunk's boundary faces with points (numbered in ``face_local``; those between, -1)."""
        ctx = self.ctx
        k = ctx.kernels
        if not k.ENTRIES_FIT:
            return super().boundary(mode, key, e_lo, e_hi, faces, points, coef)
        ctx.run_kernel(k.boundary_entries, "boundary_entries", e_hi - e_lo, key, e_lo, mode, ctx.plan.matrix, points,
                       coef, ctx.args.basis, ctx.args.faces, ctx.args.pattern, ctx.values, block=k.ENTRY_THREADS)


BLOCKS = register(Reduction(
    name="blocks", summary="on a GPU a thread block per element, a thread per entry of its rows "
    "(deterministic; on the CPU the row kernels)", deterministic=True, fills_pattern=True,
    cpu=RowPasses, gpu=DeviceBlockPasses, scratch=blocks_scratch_bytes))
