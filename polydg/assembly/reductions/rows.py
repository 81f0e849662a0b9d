"""Approach 2 (what the default, "auto", runs on the CPU and on a GPU for meshes of few sub-simplices per
element): row kernels, each element writing its rows' blocks once at their CSR positions.

One parallel iteration (a CPU task's element, a GPU thread) per element
sums its diagonal block over its sub-simplices and faces, and each
off-diagonal block over its interface's faces, in a fixed order, and writes
each block once.  No two iterations touch the same entry: no races, no
atomics, and the matrix is bitwise the same for any chunking, thread count
and run.  The CPU kernels are ``kernels.element_rows``, ``interior_rows``
and ``boundary_rows``; the GPU's, ``volume_rows``, ``interior_rows`` and
``boundary_rows`` of ``cuda_kernels.gpu_kernels``.  On the CPU these kernels
also form the load alone (they can skip every block), whatever the approach.
"""

from __future__ import annotations

import time

import numpy as np

from .. import kernels as K
from ..passes import PassContext, chunk_interfaces, expand_ranges
from .registry import Reduction, register


class RowPasses:
    """The CPU executor: each chunk's elements by the row kernels."""

    def __init__(self, ctx: PassContext):
        self.ctx = ctx

    def volume(self, e_lo, e_hi, s_lo, s_hi, points, coef) -> None:
        ctx, plan = self.ctx, self.ctx.plan
        args = (plan.mesh.element_offsets, s_lo, points, coef, ctx.args.basis, plan.moments, ctx.args.pattern, True,
                plan.matrix, ctx.values)
        ctx.warm("element", lambda: K.element_rows(e_lo, e_lo, *args))
        t = time.perf_counter()
        K.element_rows(e_lo, e_hi, *args)
        ctx.timer.add("element_kernel", t)

    def interior_faces(self) -> None:
        """Per chunk, the faces of every interface with a side in it, then the rows of its elements."""
        ctx, plan = self.ctx, self.ctx.plan
        mesh, timer = plan.mesh, ctx.timer
        for ci, (e_lo, e_hi) in enumerate(plan.chunks):
            key = ("interior", ci)
            faces = ctx.kept.faces(key) if ctx.kept is not None else None  # kept with their points
            if faces is None:
                t = time.perf_counter()
                ifs = chunk_interfaces(plan, e_lo, e_hi)
                faces = expand_ranges(mesh.interface_offsets[ifs], mesh.interface_offsets[ifs + 1])
                timer.add("indices", t)  # the chunk's faces, as the GPU executors time them
            ctx.face_local[faces] = np.arange(len(faces))
            batch, points = ctx.face_points(faces, key)
            t = time.perf_counter()
            coef = ctx.coefficients.interior(batch.x)
            timer.add("coefficients", t)
            args = (points, coef, ctx.args.basis, ctx.args.faces, ctx.args.pattern, ctx.values)
            ctx.warm("interior", lambda: K.interior_rows(e_lo, e_lo, *args))
            t = time.perf_counter()
            K.interior_rows(e_lo, e_hi, *args)
            timer.add("interior_kernel", t)
            ctx.face_local[faces] = -1
            ctx.report("interior kernel", ci + 1)

    def boundary(self, mode, key, e_lo, e_hi, faces, points, coef) -> None:
        ctx, plan = self.ctx, self.ctx.plan
        args = (points, coef, ctx.args.basis, ctx.args.faces, ctx.args.pattern, plan.matrix, ctx.values)
        ctx.warm(f"boundary{mode}", lambda: K.boundary_rows(mode, e_lo, e_lo, *args))
        t = time.perf_counter()
        K.boundary_rows(mode, e_lo, e_hi, *args)
        ctx.timer.add(key, t)

    def matrix(self):
        return self.ctx.csr_matrix()


class DeviceRowPasses:
    """The GPU executor: one thread per element of each chunk."""

    def __init__(self, ctx):
        self.ctx = ctx
        self.element_offsets = ctx.mesh_table("element_offsets")

    def volume(self, e_lo, e_hi, s_lo, s_hi, points, coef) -> None:
        ctx = self.ctx
        ctx.run("volume_rows", e_hi - e_lo, "element_kernel", e_lo, ctx.plan.matrix, self.element_offsets, s_lo,
                points, coef, ctx.args.basis, ctx.args.pattern, ctx.values)

    def interior_faces(self) -> None:
        ctx = self.ctx
        for e_lo, e_hi, _, points, coef in ctx.interior_chunks():
            ctx.run("interior_rows", e_hi - e_lo, "interior_kernel", e_lo, points, coef, ctx.args.basis,
                    ctx.args.faces, ctx.args.pattern, ctx.values)

    def boundary(self, mode, key, e_lo, e_hi, faces, points, coef) -> None:
        """The chunk's elements with boundary faces: ``faces`` (those with points, numbered in ``face_local``)."""
        ctx = self.ctx
        ctx.run("boundary_rows", e_hi - e_lo, key, e_lo, mode, ctx.plan.matrix, points, coef, ctx.args.basis,
                ctx.args.faces, ctx.args.pattern, ctx.values)


ROWS = register(Reduction(
    name="2", summary="row kernels: each block written once (deterministic, the default)", deterministic=True,
    fills_pattern=True, cpu=RowPasses, gpu=DeviceRowPasses))
