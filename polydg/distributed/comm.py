"""MPI plumbing: is this process one of several ranks, threads per rank, and errors that end every rank.

A rank that fails must not leave the others waiting in a collective.  Every
phase of a distributed run ends with :func:`check_collectively`: the ranks
exchange a flag and the first error's message, and if any rank failed every
rank raises :class:`RankFailure` (the same message everywhere, so that rank 0
alone prints it).  What cannot be exchanged (a rank killed, a rank stuck)
is left to ``mpiexec``, which ends the job when one rank dies, and to
:func:`abort`.
"""

from __future__ import annotations

import os
import sys

from ..errors import OptionError, PolyDGError

#: environment variables through which launchers give the number of ranks: MPICH/Hydra and srun --mpi=pmi2
#: (PMI_SIZE), Open MPI, PMIx, and srun's job steps (SLURM_STEP_NUM_TASKS, set inside srun only, not in the
#: batch script around it)
SIZE_VARIABLES = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_SIZE", "SLURM_STEP_NUM_TASKS")


def launched_ranks() -> int:
    """The number of ranks this process was started with by ``mpiexec`` (1 when started alone)."""
    for name in SIZE_VARIABLES:
        value = os.environ.get(name)
        if value and value.isdigit():
            return int(value)
    return 1


def world():
    """``MPI.COMM_WORLD`` (mpi4py), with a clear error where mpi4py is missing."""
    try:
        from mpi4py import MPI
    except ImportError:
        raise OptionError("running on several ranks needs mpi4py: pip install 'polydg[mpi]'") from None
    return MPI.COMM_WORLD


def node_local_rank(comm) -> tuple[int, int]:
    """(rank among the ranks on this node, number of ranks on this node): ``Split_type(COMM_TYPE_SHARED)``."""
    from mpi4py import MPI

    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    try:
        return node.Get_rank(), node.Get_size()
    finally:
        node.Free()


#: the device this process was bound to by :func:`bind_rank_device`: (backend, index, description)
_BOUND: tuple[str, int, str] | None = None


def bind_rank_device(comm, backend: str) -> dict:
    """Bind this rank to its GPU, rank r on a node to GPU r mod (GPUs on the node), once per process.

    Returns ``{"device_index", "device", "node_rank", "node_ranks"}`` (the
    index is -1 on the CPU).  A collective call (the node's communicator is
    split).  A second call in the same process keeps the first binding.
    """
    from .. import backend as bk

    global _BOUND
    local, on_node = node_local_rank(comm)
    if not bk.is_device(backend):
        return {"device_index": -1, "device": "cpu", "node_rank": local, "node_ranks": on_node}
    if _BOUND is None or _BOUND[0] != backend:
        index = bk.device_for_rank(local, bk.device_count(backend))
        _BOUND = (backend, index, bk.use_device(index, backend))
    return {"device_index": _BOUND[1], "device": _BOUND[2], "node_rank": local, "node_ranks": on_node}


def share_the_cores(comm) -> int:
    """Set this rank's thread count by the environment's rule (:func:`polydg.threads.environment_threads`):
    ``NUMBA_NUM_THREADS``, else ``OMP_NUM_THREADS``, else the cores it may run on shared among the ranks on
    its node, so that ranks and threads together do not oversubscribe the cores.  Returns the count.  A
    collective call (the node's ranks are counted).
    """
    from ..threads import use_environment_threads

    return use_environment_threads(ranks_on_node=node_local_rank(comm)[1])


class RankFailure(PolyDGError):
    """A rank failed; raised on every rank with the first failing rank's message.

    ``input_error`` is True when the cause was bad input (a
    :class:`~polydg.errors.PolyDGError`), so that the command line exits with 2.
    """

    def __init__(self, message: str, rank: int, input_error: bool):
        super().__init__(message)
        self.rank = rank
        self.input_error = input_error


def check_collectively(comm, error: BaseException | None) -> None:
    """Raise :class:`RankFailure` on every rank if ``error`` is set on any (a collective call)."""
    if comm is None or comm.Get_size() == 1:
        if error is not None:
            raise error
        return
    mine = None
    if error is not None:
        if isinstance(error, RankFailure):
            mine = (str(error), error.input_error)
        else:
            text = str(error) or type(error).__name__
            if not isinstance(error, PolyDGError):
                text = f"{type(error).__name__}: {text}"
            mine = (text, isinstance(error, PolyDGError))
    reports = comm.allgather(mine)
    for rank, report in enumerate(reports):
        if report is not None:
            message, input_error = report
            if comm.Get_size() > 1 and not message.startswith("rank "):
                message = f"rank {rank}: {message}"
            raise RankFailure(message, rank, input_error) from error


class collective_phase:
    """``with collective_phase(comm): ...``: the block's error, on any rank, raises on every rank.

    On success the ranks also meet once (one small allgather), so a phase is
    a synchronisation point; keep phases coarse.
    """

    def __init__(self, comm):
        self.comm = comm

    def __enter__(self):
        return self

    def __exit__(self, kind, error, tb):
        if error is not None and not isinstance(error, Exception):
            return False  # KeyboardInterrupt, SystemExit: not ours to exchange
        check_collectively(self.comm, error)
        return False


def abort(comm, code: int, message: str | None = None) -> None:
    """Print ``message`` and end every rank now (MPI_Abort): for failures outside a collective phase."""
    if message:
        print(message, file=sys.stderr, flush=True)
    sys.stderr.flush()
    comm.Abort(code)
