"""MPI plumbing: is this process one of several ranks, threads per rank, and errors that end every rank.

A rank that fails must not leave the others waiting in a collective.  Every
phase of a distributed run ends with :func:`check_collectively`: the ranks
exchange a flag and the first failure's description, and if any rank failed
every rank raises :class:`RankFailure` (the same message and exit code
everywhere, so that rank 0 alone prints it).  A KeyboardInterrupt or a
SystemExit inside a phase is exchanged like an error.  What cannot be
exchanged (a failure outside a phase, a signal that arrives while the rank
waits inside MPI, a rank killed or stopped) is left to the ranks' watch
(:mod:`polydg.distributed.watch`), to ``mpiexec``, which ends the job when
one rank dies, and to :func:`abort`.
"""

from __future__ import annotations

import os
import pickle
import sys

from ..errors import Interrupted, OptionError, PolyDGError

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


#: the device this process was bound to by :func:`bind_rank_device`: backend, index, description, node's ranks on it
_BOUND: tuple[str, int, str, int] | None = None


def bind_rank_device(comm, backend: str) -> dict:
    """Bind this rank to its GPU, rank r on a node to GPU r mod (GPUs on the node), once per process.

    Returns ``{"device_index", "device", "node_rank", "node_ranks", "device_ranks"}`` (the
    index is -1 on the CPU; ``device_ranks``: the node's ranks on this rank's GPU, 1 on the CPU).  A
    collective call (the node's communicator is split).  A second call in the same process keeps the first
    binding.
    """
    from .. import backend as bk

    global _BOUND
    local, on_node = node_local_rank(comm)
    if not bk.is_device(backend):
        return {"device_index": -1, "device": "cpu", "node_rank": local, "node_ranks": on_node, "device_ranks": 1}
    if _BOUND is None or _BOUND[0] != backend:
        devices = bk.device_count(backend)
        index = bk.device_for_rank(local, devices)
        _BOUND = (backend, index, bk.use_device(index, backend), bk.ranks_on_device(local, on_node, devices))
    return {"device_index": _BOUND[1], "device": _BOUND[2], "node_rank": local, "node_ranks": on_node,
            "device_ranks": _BOUND[3]}


def share_the_cores(comm) -> int:
    """Set this rank's thread count by the environment's rule (:func:`polydg.threads.environment_threads`):
    ``NUMBA_NUM_THREADS``, else ``OMP_NUM_THREADS``, else the cores it may run on shared among the ranks on
    its node, so that ranks and threads together do not oversubscribe the cores.  Returns the count.  A
    collective call (the node's ranks are counted).
    """
    from ..threads import use_environment_threads

    return use_environment_threads(ranks_on_node=node_local_rank(comm)[1])


#: the most bytes one ``Send`` of :func:`send_object` carries (MPI's counts are C ints)
OBJECT_ROUND = 1 << 30


def send_object(comm, obj, dest: int, tag: int) -> bool:
    """Send ``obj`` (pickled) to ``dest``, which calls :func:`receive_object`: its size first, then its bytes
    if ``dest`` made room for them.  Returns whether they were sent.

    A receiver out of memory declines instead of leaving the sender blocked in
    a send it will never match (its error is then exchanged at the phase's
    end).  ``obj=None`` tells ``dest`` that nothing comes: it raises.
    """
    from mpi4py import MPI

    if obj is None:
        comm.send(-1, dest=dest, tag=tag)
        return False
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    comm.send(len(data), dest=dest, tag=tag)
    if not comm.recv(source=dest, tag=tag):
        return False
    view = memoryview(data)
    for start in range(0, len(data), OBJECT_ROUND):
        comm.Send([view[start:start + OBJECT_ROUND], MPI.BYTE], dest=dest, tag=tag)
    return True


def receive_object(comm, source: int, tag: int):
    """The object ``source`` sends by :func:`send_object`; raises MemoryError (after telling ``source``) where
    its bytes do not fit, RuntimeError where ``source`` sent nothing."""
    from mpi4py import MPI

    size = comm.recv(source=source, tag=tag)
    if size < 0:
        raise RuntimeError(f"rank {source} sent nothing")
    try:
        data = _room(size)
    except MemoryError:
        comm.send(False, dest=source, tag=tag)
        raise
    comm.send(True, dest=source, tag=tag)
    view = memoryview(data)
    for start in range(0, size, OBJECT_ROUND):
        comm.Recv([view[start:start + OBJECT_ROUND], MPI.BYTE], source=source, tag=tag)
    return pickle.loads(data)


def _room(size: int) -> bytearray:
    """A buffer of ``size`` bytes for :func:`receive_object` (apart, so that a test can refuse it)."""
    return bytearray(size)


#: what a failure was, for the exit code and the wording of its one line
KINDS = ("input", "memory", "interrupt", "timeout", "internal")


def describe(error: BaseException) -> tuple[str, int, str]:
    """(kind, exit code, one-line text) of a failure: bad input 2, an interrupt 128 + signal, else 1.

    >>> describe(OptionError("--degree -1"))
    ('input', 2, '--degree -1')
    >>> describe(ValueError("bad"))
    ('internal', 1, 'ValueError: bad')
    """
    from ..errors import one_line

    if isinstance(error, RankFailure):
        return error.kind, error.code, str(error)
    if isinstance(error, KeyboardInterrupt):
        signal = error if isinstance(error, Interrupted) else Interrupted(2)
        return "interrupt", signal.exit_code, signal.name
    if isinstance(error, PolyDGError):  # a MemoryLimitError too: a refusal before allocating, bad input
        return "input", 2, one_line(error)
    if isinstance(error, MemoryError):
        return "memory", 1, "out of memory" + (f" ({one_line(error)})" if str(error) else "")
    if isinstance(error, SystemExit):
        return "internal", 1, f"SystemExit({error.code!r}) raised"
    text = one_line(error)
    return "internal", 1, f"{type(error).__name__}: {text}" if text else type(error).__name__


class RankFailure(PolyDGError):
    """A rank failed; raised on every rank with the first failing rank's message.

    ``kind`` is one of :data:`KINDS` and ``code`` the exit code of the
    command line: 2 when the cause was bad input (a
    :class:`~polydg.errors.PolyDGError`), 128 + signal for an interrupt, 1
    otherwise; ``input_error`` is ``kind == "input"``.
    """

    def __init__(self, message: str, rank: int, input_error: bool = False, *, kind: str | None = None,
                 code: int | None = None):
        super().__init__(message)
        self.rank = rank
        self.kind = kind if kind is not None else ("input" if input_error else "internal")
        self.code = code if code is not None else (2 if self.kind == "input" else 1)

    @property
    def input_error(self) -> bool:
        return self.kind == "input"


def check_collectively(comm, error: BaseException | None) -> None:
    """Raise :class:`RankFailure` on every rank if ``error`` is set on any (a collective call)."""
    if comm is None or comm.Get_size() == 1:
        if error is not None:
            raise error
        return
    mine = describe(error) if error is not None else None
    reports = comm.allgather(mine)
    for rank, report in enumerate(reports):
        if report is not None:
            kind, code, message = report
            if not message.startswith("rank "):
                message = f"rank {rank}: {message}"
            raise RankFailure(message, rank, kind=kind, code=code) from error


class collective_phase:
    """``with collective_phase(comm): ...``: the block's error, on any rank, raises on every rank.

    On success the ranks also meet once (one small allgather), so a phase is
    a synchronisation point; keep phases coarse.  A collective call inside a
    phase must first meet the ranks that failed before it: call
    ``check_collectively(comm, None)`` there (their phase's end is that same
    exchange); the :class:`RankFailure` it raises leaves every phase it is in
    without another exchange.  A KeyboardInterrupt or
    SystemExit in the block is exchanged too (every rank raises a
    :class:`RankFailure` of kind "interrupt" or "internal").
    """

    def __init__(self, comm):
        self.comm = comm

    def __enter__(self):
        return self

    def __exit__(self, kind, error, tb):
        if error is not None and not isinstance(error, (Exception, KeyboardInterrupt, SystemExit)):
            return False  # GeneratorExit and the like: not a failure
        if isinstance(error, RankFailure):  # raised on every rank by one exchange: nothing more to tell
            return False
        check_collectively(self.comm, error)
        return False


def abort(comm, code: int, message: str | None = None) -> None:
    """Print ``message`` and end every rank now (MPI_Abort with ``code``, which ``mpiexec`` returns).

    For failures outside a collective phase.  MPI's own "application called
    MPI_Abort" line is not shown: ``message`` is the job's one line.
    """
    if message:
        print(message, file=sys.stderr, flush=True)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    try:  # MPI prints its own line on the process's stderr: send that one nowhere
        os.dup2(os.open(os.devnull, os.O_WRONLY), 2)
    except OSError:
        pass
    getattr(comm, "unwrapped", comm).Abort(code)
