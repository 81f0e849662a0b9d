"""The entity kernels on the CPU, shared by the atomic variant and Approach 1: each sub-simplex's and face's
blocks into a buffer of its own, then reduced.

One parallel iteration per sub-simplex or face writes its blocks to its
slot of an :class:`~polydg.assembly.arguments.EntityBuffers` (and its load,
scatter-added at once); :meth:`EntityPasses.reduce` (the subclass's) then
adds the listed blocks to the matrix.  Blocks of rows that are not
assembled here (another rank's) are dropped before.
"""

from __future__ import annotations

import time

import numpy as np

from .. import kernels as K
from ..arguments import BlockList, EntityBuffers
from ..passes import PassContext, interior_face_cuts


def entity_buffers(dtype, block_sizes: np.ndarray, load_sizes: np.ndarray | None = None) -> EntityBuffers:
    """Slots of ``block_sizes[t]`` values and ``load_sizes[t]`` loads per entity t (no loads: empty)."""
    vals_offsets = np.r_[0, np.cumsum(block_sizes)].astype(np.int64)
    if load_sizes is None:
        load_offsets = np.zeros(0, dtype=np.int64)
        loads = np.empty(0, dtype=dtype)
    else:
        load_offsets = np.r_[0, np.cumsum(load_sizes)].astype(np.int64)
        loads = np.empty(int(load_offsets[-1]), dtype=dtype)
    return EntityBuffers(np.empty(int(vals_offsets[-1]), dtype=dtype), vals_offsets, loads, load_offsets)


class EntityPasses:
    """A CPU executor of the entity kernels; a subclass says how a list of blocks is reduced."""

    def __init__(self, ctx: PassContext):
        self.ctx = ctx

    def volume(self, e_lo, e_hi, s_lo, s_hi, points, coef) -> None:
        ctx, plan = self.ctx, self.ctx.plan
        mesh, pattern, nbasis = plan.mesh, plan.pattern, plan.space.element_dofs
        se = mesh.simplex_element[s_lo:s_hi]
        buffers = entity_buffers(plan.dtype, nbasis[se] ** 2, nbasis[se])
        args = (mesh.simplex_element, points, coef, ctx.args.basis, plan.moments, True, buffers)
        ctx.warm("simplex", lambda: K.simplex_blocks(s_lo, s_lo, *args))
        t = time.perf_counter()
        K.simplex_blocks(s_lo, s_hi, *args)
        ctx.timer.add("element_kernel", t)
        self.reduce_blocks(se, pattern.diag_entry[se], buffers.vals_offsets[:-1], buffers.vals, "element_kernel")
        t = time.perf_counter()
        K.scatter_add_loads(se, buffers.load_offsets[:-1], buffers.loads, pattern.row_start, nbasis, ctx.rhs)
        ctx.timer.add("element_kernel", t)

    def interior_faces(self) -> None:
        """The interior faces in as many consecutive ranges as the plan has chunks."""
        ctx, plan = self.ctx, self.ctx.plan
        mesh, pattern, timer = plan.mesh, plan.pattern, ctx.timer
        nbasis = plan.space.element_dofs
        cuts = interior_face_cuts(plan)
        for ci, (f_lo, f_hi) in enumerate(zip(cuts[:-1], cuts[1:])):
            if f_hi == f_lo:
                continue
            faces = np.arange(f_lo, f_hi, dtype=np.int64)
            ctx.face_local[faces] = np.arange(len(faces))
            batch, points = ctx.face_points(faces, ("interior-entity", ci))
            t = time.perf_counter()
            coef = ctx.coefficients.interior(batch.x)
            timer.add("coefficients", t)
            e1, e2 = mesh.face_elements[faces, 0], mesh.face_elements[faces, 1]
            n1, n2 = nbasis[e1], nbasis[e2]
            buffers = entity_buffers(plan.dtype, n1 * n1 + n1 * n2 + n2 * n2 + n2 * n1)
            args = (points, coef, ctx.args.basis, ctx.args.faces, buffers)
            ctx.warm("interior-entity", lambda: K.interior_face_blocks(faces[:0], *args))
            t = time.perf_counter()
            K.interior_face_blocks(faces, *args)
            timer.add("interior_kernel", t)
            # each face's slot holds its blocks K1K1, K1K2, K2K2, K2K1 (see kernels.interior_face_blocks)
            iface = np.searchsorted(mesh.interface_offsets, faces, side="right") - 1
            e12, e21 = pattern.interface_entry[iface, 0], pattern.interface_entry[iface, 1]
            o = buffers.vals_offsets[:-1]
            rows = np.stack([e1, e1, e2, e2], 1).ravel()
            entries = np.stack([pattern.diag_entry[e1], e12, pattern.diag_entry[e2], e21], 1).ravel()
            offsets = np.stack([o, o + n1 * n1, o + n1 * n1 + n1 * n2, o + n1 * n1 + n1 * n2 + n2 * n2], 1).ravel()
            self.reduce_blocks(rows, entries, offsets, buffers.vals, "interior_kernel")
            ctx.face_local[faces] = -1

    def boundary(self, mode, key, e_lo, e_hi, faces, points, coef) -> None:
        ctx, plan = self.ctx, self.ctx.plan
        pattern, nbasis = plan.pattern, plan.space.element_dofs
        be = plan.mesh.face_elements[faces, 0]
        buffers = entity_buffers(plan.dtype, nbasis[be] ** 2, nbasis[be])
        args = (points, coef, ctx.args.basis, ctx.args.faces, buffers)
        ctx.warm(f"boundary-entity{mode}", lambda: K.boundary_face_blocks(mode, faces[:0], *args))
        t = time.perf_counter()
        K.boundary_face_blocks(mode, faces, *args)
        K.scatter_add_loads(be, buffers.load_offsets[:-1], buffers.loads, pattern.row_start, nbasis, ctx.rhs)
        ctx.timer.add(key, t)
        self.reduce_blocks(be, pattern.diag_entry[be], buffers.vals_offsets[:-1], buffers.vals, key)

    def reduce_blocks(self, rows: np.ndarray, entries: np.ndarray, offsets: np.ndarray, vals: np.ndarray,
                      key: str) -> None:
        """Reduce the blocks of the assembled rows: block t is row element ``rows[t]``'s block at adjacency
        entry ``entries[t]``, its values at ``vals[offsets[t]:]``."""
        start = time.perf_counter()
        mine = self.ctx.plan.pattern.row_base[rows] >= 0
        every = bool(mine.all())
        if not every:
            rows, entries, offsets = rows[mine], entries[mine], offsets[mine]
        blocks = BlockList(np.ascontiguousarray(rows, dtype=np.int64), np.ascontiguousarray(entries, dtype=np.int64),
                           np.ascontiguousarray(offsets, dtype=np.int64))
        self.reduce(blocks, vals, every, start, key)

    def reduce(self, blocks: BlockList, vals: np.ndarray, every: bool, start: float, key: str) -> None:
        """Add ``blocks`` (their values in ``vals``; ``every``: none was dropped) to the matrix; the time
        since ``start`` goes to the stage the reduction counts it in (``key`` the pass's)."""
        raise NotImplementedError
