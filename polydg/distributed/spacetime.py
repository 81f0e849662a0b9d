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
(every slab has the same elements).
"""

from __future__ import annotations

import numpy as np

from ..assembly.options import AssemblyOptions
from ..assembly.scope import AssemblyScope
from .assembly import assemble_distributed
from .comm import RankFailure, describe

_ASSEMBLE, _DONE, _FAILED = "assemble", "done", "failed"


class SlabAssembler:
    """Rank 0's assembler of slabs, ``assembler(space, (t0, t1), options, scope=, matrix=, workspace=)``
    -> the gathered AssemblyResult (the ``assembler`` of :func:`polydg.spacetime.march`)."""

    def __init__(self, comm, problem, dim: int):
        self.comm, self.problem, self.dim = comm, problem, dim
        self.ranks: np.ndarray | None = None
        self.rank_timings: list[dict] = []

    def __call__(self, space, interval: tuple[float, float], options: AssemblyOptions, *,
                 scope: AssemblyScope | None = None, matrix: bool = True, workspace=None):
        from ..partition.ranks import rank_partition

        if self.ranks is None or len(self.ranks) != space.mesh.n_elements:
            self.ranks = rank_partition(space, self.comm.Get_size(), quadrature_extra=options.quadrature_extra)
        self.comm.bcast((_ASSEMBLE, interval, (options, matrix)), root=0)
        result = _assemble_slab(self.comm, self.problem, self.dim, interval, options, matrix, space, self.ranks,
                                scope, workspace)
        self.rank_timings.append(result.info["timings_per_rank"])
        return result

    def done(self, error: BaseException | None = None) -> None:
        """Release the other ranks: the march ended (or failed on rank 0 alone)."""
        if error is None:
            self.comm.bcast((_DONE, None, None), root=0)
        elif not isinstance(error, RankFailure):  # a RankFailure is known to every rank already
            self.comm.bcast((_FAILED, describe(error), None), root=0)


def _assemble_slab(comm, problem, dim: int, interval, options: AssemblyOptions, matrix: bool, space=None,
                   ranks=None, scope=None, workspace=None):
    from ..spacetime.problem import slab_problem

    slab = slab_problem(problem, dim, *interval)
    result = assemble_distributed(space, slab, comm, options, ranks=ranks, matrix=matrix, scope=scope,
                                  workspace=workspace)
    return result.gather()


def follow_march(comm, problem, dim: int) -> None:
    """The other ranks' side of a distributed march: assemble each slab rank 0 asks for, until it is done."""
    while True:
        command, interval, request = comm.bcast(None, root=0)
        if command == _DONE:
            return
        if command == _FAILED:  # rank 0's failure: (kind, exit code, text)
            kind, code, text = interval
            raise RankFailure(f"rank 0: {text}", 0, kind=kind, code=code)
        options, matrix = request
        _assemble_slab(comm, problem, dim, interval, options, matrix)
