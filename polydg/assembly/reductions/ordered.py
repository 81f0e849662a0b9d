"""Approach "ordered": on a GPU, a thread per entity forms its block and a thread per matrix entry sums them in order.

The row kernels give an element one GPU thread, which walks all of its
sub-simplices and faces: on a mesh of few, large agglomerated elements most
of the card idles.  The atomic kernels give each entity a thread but add in
no fixed order.  Here each pass runs two kernels (``cuda_sums.py``): one
thread per sub-simplex, interior face side or boundary face writes its
blocks to a scratch buffer, then one thread per (element, entry) sums them
over the element's entities in a fixed order and writes the entry once.
Deterministic (bitwise the same from run to run and for any chunking), at
the cost of the scratch buffer, one or two blocks per entity of a chunk,
which the chunks make room for (the entry's ``scratch``).  On the CPU, whose
threads each take many elements, it is the row kernels' executor
(``rows.py``).
"""

from __future__ import annotations

import numpy as np

from ..sums_layout import scratch_bytes
from .registry import Reduction, register
from .rows import RowPasses


class DeviceOrderedPasses:
    """The GPU executor: per pass, the entity kernel into a scratch buffer, then the ordered sums."""

    def __init__(self, ctx):
        from ..cuda_sums import gpu_sum_kernels  # imports numba.cuda: only on the GPU path

        self.ctx = ctx
        plan = ctx.plan
        space, mesh = plan.space, plan.mesh
        self.kernels = gpu_sum_kernels(mesh.dim, int(space.max_degree), np.dtype(plan.dtype).type,
                                       getattr(space, "basis", "P"))
        self.entries = self.kernels.NB * self.kernels.NB  # a block's entries; volume and boundary: NB loads more
        self.element_offsets = ctx.mesh_table("element_offsets")

    def _scratch(self, entities: int, stride: int):
        """The blocks of ``entities`` entities, ``stride`` values each (unwritten: every entry read is one a
        piece wrote)."""
        ctx = self.ctx
        return ctx.xp.empty(max(int(entities), 1) * stride, dtype=ctx.plan.dtype)

    def _sum_entries(self, want_block: bool) -> int:
        """Threads per element of a volume or boundary sum: every block entry and load row, or the load's alone."""
        return self.entries + self.kernels.NB if want_block else self.kernels.NB

    def _run(self, name: str, n: int, key: str, *args) -> None:
        self.ctx.run_kernel(getattr(self.kernels, name), name, n, key, *args)

    def volume(self, e_lo, e_hi, s_lo, s_hi, points, coef) -> None:
        ctx = self.ctx
        want, scratch = ctx.plan.matrix, self._scratch(s_hi - s_lo, self.kernels.STRIDE)
        self._run("volume_pieces", s_hi - s_lo, "element_kernel", s_lo, want, ctx.mesh_table("simplex_element"),
                  points, coef, ctx.args.basis, ctx.args.pattern, scratch)
        self._run("volume_sums", (e_hi - e_lo) * self._sum_entries(want), "element_kernel", e_lo, want,
                  self.element_offsets, s_lo, scratch, ctx.args.basis, ctx.args.pattern, ctx.values)

    def interior_faces(self) -> None:
        ctx = self.ctx
        for e_lo, e_hi, faces_dev, points, coef in ctx.interior_chunks():
            scratch = self._scratch(2 * len(faces_dev), self.kernels.SIDE)
            self._run("interior_pieces", 2 * len(faces_dev), "interior_kernel", e_lo, e_hi, faces_dev, points, coef,
                      ctx.args.basis, ctx.args.faces, ctx.args.pattern, scratch)
            self._run("interior_sums", (e_hi - e_lo) * self.entries, "interior_kernel", e_lo, scratch,
                      ctx.args.basis, ctx.args.faces, ctx.args.pattern, ctx.values)

    def boundary(self, mode, key, e_lo, e_hi, faces, points, coef) -> None:
        """``faces``: the chunk's boundary faces with points (numbered in ``face_local``; those between, -1)."""
        ctx = self.ctx
        want, scratch = ctx.plan.matrix, self._scratch(len(faces), self.kernels.STRIDE)
        f0, f1 = int(faces[0]), int(faces[-1]) + 1
        self._run("boundary_pieces", f1 - f0, key, f0, mode, want, points, coef, ctx.args.basis, ctx.args.faces,
                  ctx.args.pattern, scratch)
        self._run("boundary_sums", (e_hi - e_lo) * self._sum_entries(want), key, e_lo, want, scratch,
                  ctx.args.basis, ctx.args.faces, ctx.args.pattern, ctx.values)


ORDERED = register(Reduction(
    name="ordered", summary="entity blocks summed per element in a fixed order (deterministic; on a GPU a thread "
    "per entity, then per entry; on the CPU the row kernels)", deterministic=True, fills_pattern=True,
    cpu=RowPasses, gpu=DeviceOrderedPasses, scratch=scratch_bytes))
