"""The atomic variant, the paper's Approach 2 as published: every sub-simplex and face block scatter-added
into the precomputed pattern.

On the CPU the entity kernels (``entities.py``) fill buffers that
``kernels.scatter_add_blocks`` adds into the CSR values, block by block in
list order.  On the GPU one thread per sub-simplex, per interior face side
or per boundary face adds its blocks with ``cuda.atomic.add``
(``volume_atomic``, ``interior_atomic``, ``boundary_atomic`` of
``cuda_kernels.gpu_kernels``): the order of the additions, and so the last
bits, vary from run to run there.
"""

from __future__ import annotations

import time

import numpy as np

from .. import kernels as K
from ..arguments import BlockList
from ..passes import interior_face_cuts
from .entities import EntityPasses
from .registry import Reduction, register


class AtomicPasses(EntityPasses):
    """The CPU executor: entity blocks scatter-added into the CSR values."""

    def reduce(self, blocks: BlockList, vals: np.ndarray, every: bool, start: float, key: str) -> None:
        ctx = self.ctx
        K.scatter_add_blocks(blocks, vals, ctx.plan.space.element_dofs, ctx.args.pattern, ctx.data)
        ctx.timer.add(key, start)  # the paper's atomic writes happen inside its kernels

    def matrix(self):
        return self.ctx.csr_matrix()


class DeviceAtomicPasses:
    """The GPU executor: one thread per entity, atomic adds."""

    def __init__(self, ctx):
        self.ctx = ctx
        self.simplex_element = ctx.mesh_table("simplex_element")

    def volume(self, e_lo, e_hi, s_lo, s_hi, points, coef) -> None:
        ctx = self.ctx
        ctx.run("volume_atomic", s_hi - s_lo, "element_kernel", s_lo, ctx.plan.matrix, self.simplex_element, points,
                coef, ctx.args.basis, ctx.args.pattern, ctx.values)

    def interior_faces(self) -> None:
        """One thread per side of each interior face (the rows of that side's element)."""
        ctx, plan = self.ctx, self.ctx.plan
        mesh, pattern, timer = plan.mesh, plan.pattern, ctx.timer
        t = time.perf_counter()
        cuts = interior_face_cuts(plan)
        timer.add("indices", t)
        for ci, (f_lo, f_hi) in enumerate(zip(cuts[:-1], cuts[1:])):
            if f_hi == f_lo:
                continue
            faces = np.arange(f_lo, f_hi, dtype=np.int64)
            batch, points = ctx.face_points(faces)
            t = time.perf_counter()
            coef = ctx.coefficients.interior(ctx.x64)
            t = timer.add("coefficients", t)
            # the adjacency entry of each side's off-diagonal block: (e1, e2) for side 0, (e2, e1) for side 1
            iface = np.searchsorted(mesh.interface_offsets, faces, side="right") - 1
            side_entry = pattern.interface_entry[ctx.dev(iface)]
            timer.add("indices", t)
            ctx.run("interior_atomic", 2 * len(faces), "interior_kernel", int(f_lo), side_entry, points, coef,
                    ctx.args.basis, ctx.args.faces, ctx.args.pattern, ctx.values)
            ctx.report("interior kernel", ci + 1, len(cuts) - 1)

    def boundary(self, mode, key, e_lo, e_hi, faces, points, coef) -> None:
        """A thread per face from the first of ``faces`` to the last (those between without points, numbered
        -1 in ``face_local``, return at once)."""
        ctx = self.ctx
        f0, f1 = int(faces[0]), int(faces[-1]) + 1
        ctx.run("boundary_atomic", f1 - f0, key, f0, mode, ctx.plan.matrix, points, coef, ctx.args.basis,
                ctx.args.faces, ctx.args.pattern, ctx.values)


ATOMIC = register(Reduction(
    name="atomic", summary="the paper's scatter: every block added into the pattern (atomic adds on a GPU)",
    deterministic=False, fills_pattern=True, cpu=AtomicPasses, gpu=DeviceAtomicPasses))
