"""Space-time marching on several ranks: every slab's matrix (or its load alone) assembled by all of them.

Rank 0 runs :func:`polydg.spacetime.march` as on one process (slab meshes,
bottom loads, solves, errors); at each slab it asks the other ranks to
assemble with it: matrix and load, or, when the march keeps the matrix,
the load alone (``matrix=False``: each rank its rows).  They wait in
:func:`follow_march` for each request: the slab's time interval, the
march's :class:`~polydg.assembly.AssemblyOptions` and whether the matrix
is wanted, then :func:`assemble_distributed` and the gather.  The slab's
:class:`~polydg.assembly.AssemblyScope` (penalty scales, a kept penalty,
the load's boundary faces) is rank 0's: it reaches the other ranks in
their parts.  The partition of the first slab is kept for all slabs
(every slab has the same elements).  Slabs of one length are one slab mesh
moved in time (:func:`polydg.spacetime.shifted_slab`): each rank keeps its
part of the slab handed out last and moves it, bit for bit the part a
hand-out would give, so a later slab of that mesh sends only the shift and
each rank's face arrays (penalty weights and the scope's).
"""

from __future__ import annotations

import dataclasses
import functools
import time

import numpy as np

from ..assembly.options import AssemblyOptions
from ..assembly.reductions import reduction
from ..assembly.scope import AssemblyScope
from ..spacetime.slab import shifted_slab
from .assembly import assemble_distributed
from .comm import RankFailure, collective_phase, describe
from .parts import face_arrays, scoped_penalty_weights

_ASSEMBLE, _DONE, _FAILED = "assemble", "done", "failed"


class SlabAssembler:
    """Rank 0's assembler of slabs, ``assembler(space, (t0, t1), options, scope=, matrix=, workspace=)``
    -> the gathered AssemblyResult (the ``assembler`` of :func:`polydg.spacetime.march`)."""

    def __init__(self, comm, problem, dim: int):
        self.comm, self.problem, self.dim = comm, problem, dim
        self.ranks: np.ndarray | None = None
        self.rank_timings: list[dict] = []
        self.handed: tuple | None = None  # (space, t0) of the slab whose parts the ranks keep
        self.hand_outs = 0  # slabs whose parts were handed out (the others' were moved in time)
        self.kept = _KeptParts()

    def __call__(self, space, interval: tuple[float, float], options: AssemblyOptions, *,
                 scope: AssemblyScope | None = None, matrix: bool = True, workspace=None):
        from ..partition.ranks import rank_partition

        if self.ranks is None or len(self.ranks) != space.mesh.n_elements:
            self.ranks = rank_partition(space, self.comm.Get_size(), quadrature_extra=options.quadrature_extra)
            self.handed = None
        shift = self.shift(space, interval[0])
        if shift is None:
            self.handed, self.hand_outs = (space, interval[0]), self.hand_outs + 1
        self.comm.bcast((_ASSEMBLE, interval, (options, matrix, shift)), root=0)
        result = _assemble_slab(self.comm, self.problem, self.dim, interval, options, matrix, self.kept, shift,
                                space, self.ranks, scope, workspace)
        self.rank_timings.append(result.info["timings_per_rank"])
        return result

    def shift(self, space, t0: float) -> float | None:
        """How far in time the slab handed out last moves to be ``space``'s slab, or None (not that
        slab moved: hand its parts out)."""
        if self.handed is None:
            return None
        handed, handed_t0 = self.handed
        shift = t0 - handed_t0
        moved = shifted_slab(handed.mesh, shift)
        same = all(_equal(getattr(space.mesh, f.name), getattr(moved, f.name)) for f in dataclasses.fields(moved))
        same = same and np.array_equal(space.degree, handed.degree) and _basis(space) == _basis(handed)
        return shift if same else None

    def done(self, error: BaseException | None = None) -> None:
        """Release the other ranks: the march ended (or failed on rank 0 alone)."""
        if error is None:
            self.comm.bcast((_DONE, None, None), root=0)
        elif not isinstance(error, RankFailure):  # a RankFailure is known to every rank already
            self.comm.bcast((_FAILED, describe(error), None), root=0)


def _basis(space) -> str:
    return getattr(space, "basis", "P")


def _equal(a, b) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return a is b or (isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and np.array_equal(a, b))
    return a == b


class _KeptParts:
    """A rank's part of the slab handed out last and, on rank 0, every rank's faces (global ids)."""

    part = None
    faces: list[np.ndarray] | None = None

    def moved(self, shift: float, space, comm, options: AssemblyOptions, *, scope: AssemblyScope | None = None,
              matrix: bool = True, ranks=None, root: int = 0, **_):
        """:func:`~polydg.distributed.assembly.hand_out_parts` for the kept slab moved by ``shift`` in
        time: each rank moves its part; rank 0 sends each its face arrays, from ``space`` and ``scope``."""
        rank = comm.Get_rank()
        t0 = time.perf_counter()
        pieces = None
        with collective_phase(comm):
            if rank == root:
                scope = AssemblyScope() if scope is None else scope
                scope.check(space.mesh, reduction(options.approach), matrix)
                weights = scoped_penalty_weights(space, options.penalty_kind, scope)
                pieces = [face_arrays(weights, scope, faces) for faces in self.faces]
        partition = time.perf_counter() - t0
        t = time.perf_counter()
        weights, face_penalty, load_faces = comm.scatter(pieces, root=root)
        with collective_phase(comm):
            part = self.part
            submesh = dataclasses.replace(part.submesh, mesh=shifted_slab(part.submesh.mesh, shift))
            part = dataclasses.replace(part, submesh=submesh, penalty_weights=weights, face_penalty=face_penalty,
                                       load_boundary_faces=load_faces)
        return part, ranks, {"partition": partition, "distribute": time.perf_counter() - t}


def _assemble_slab(comm, problem, dim: int, interval, options: AssemblyOptions, matrix: bool, kept: _KeptParts,
                   shift: float | None, space=None, ranks=None, scope=None, workspace=None):
    """The slab's gathered AssemblyResult (on rank 0): its parts handed out (``shift`` None, then kept) or
    the kept ones moved by ``shift``."""
    from ..spacetime.problem import slab_problem

    slab = slab_problem(problem, dim, *interval)
    result = assemble_distributed(space, slab, comm, options, ranks=ranks, matrix=matrix, scope=scope,
                                  workspace=workspace,
                                  hand_out=None if shift is None else functools.partial(kept.moved, shift))
    if shift is None:
        kept.part = result.part
        kept.faces = comm.gather(result.part.submesh.faces, root=0)
    return result.gather()


def follow_march(comm, problem, dim: int) -> None:
    """The other ranks' side of a distributed march: assemble each slab rank 0 asks for, until it is done."""
    kept = _KeptParts()
    while True:
        command, interval, request = comm.bcast(None, root=0)
        if command == _DONE:
            return
        if command == _FAILED:  # rank 0's failure: (kind, exit code, text)
            kind, code, text = interval
            raise RankFailure(f"rank 0: {text}", 0, kind=kind, code=code)
        options, matrix, shift = request
        _assemble_slab(comm, problem, dim, interval, options, matrix, kept, shift)
