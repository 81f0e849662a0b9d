"""The ranks' watch: no rank left waiting when another cannot go on.

A failure inside a collective phase is exchanged at the phase's end
(:func:`~polydg.distributed.comm.check_collectively`): every rank raises the
same :class:`~polydg.distributed.comm.RankFailure` and rank 0 prints it.
Everything else would leave the other ranks waiting inside MPI for good: an
exception outside a phase, a SIGINT or SIGTERM that arrives while the rank
itself waits inside MPI (Python runs its handlers only between bytecodes),
``sys.exit``, a rank stopped (SIGSTOP) or stuck.  :class:`RankWatch` is a
thread on every rank that handles these:

* a rank that fails calls :meth:`RankWatch.fail`: its one line goes to rank 0,
  whose watch lets rank 0's main thread unwind (removing its temporary
  output) for up to :data:`GRACE` seconds, prints the line (the job's one
  message) and ends every rank (``MPI_Abort`` with the exit code, which
  ``mpiexec`` returns).  A rank whose report rank 0 does not act on within
  :data:`ANSWER` seconds (rank 0 stopped or dead) ends the job itself;
* a signal is seen through Python's wakeup file descriptor, even while the
  main thread waits inside MPI, and handled like a failure (exit code 128 +
  signal);
* with a ``timeout``, the blocking calls of the :class:`GuardedComm` mark
  the rank as waiting; a rank that waits longer tells rank 0, which asks
  every rank whether it waits too.  The ranks that do not wait (still
  working) or do not answer (stopped) are the late ones: the message names
  them and the call the others wait in.  When rank 0 itself does not answer,
  the waiting ranks end the job (the lowest first).

The timeout bounds how long a rank waits for the others at one
synchronisation point, so it must exceed the longest stretch of work one
rank does alone while the others wait (on rank 0: reading and agglomerating
the mesh, the gather, the direct solve, writing the output); by default
there is none.

Use :func:`watch_ranks` from Python; the command line starts one for every
run on several ranks (``--timeout SECONDS``).
"""

from __future__ import annotations

import _thread
import os
import select
import signal
import sys
import threading
import time
from contextlib import contextmanager
from typing import Callable, Iterator, NoReturn

from .comm import RankFailure, abort, describe

#: seconds between the watch's looks at signals, messages and its main thread
POLL = 0.05
#: seconds rank 0's main thread gets to unwind (remove temporary files) before the job is ended
GRACE = 3.0
#: seconds a rank that reported a failure waits for rank 0 to end the job before ending it itself
ANSWER = 10.0
#: seconds between printing the job's one line and the abort: mpiexec forwards a rank's stderr while it runs, and an
#: abort right after the write can end the forwarding first (the line lost under load)
FORWARD_SECONDS = 0.3
#: seconds rank 0 waits for the ranks' answers to "are you waiting?"
INQUIRY = 2.0
#: the signals the watch sees (those the command line turns into :class:`~polydg.errors.Interrupted`)
SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))

_TO_ROOT, _FROM_ROOT = 71, 72  # message tags on the watch's own communicator


def default_line(kind: str, code: int, text: str) -> str:
    """The job's one line for a failure of ``kind`` (see :func:`~polydg.distributed.comm.describe`)."""
    if kind == "interrupt":
        return f"polydg: interrupted ({text})"
    return f"polydg: {'internal error' if kind == 'internal' else 'error'}: {text}"


class RankWatch:
    """A thread on this rank that ends every rank when one cannot go on (see the module's text).

    ``comm`` is the job's communicator (the watch talks on a duplicate of
    it), ``timeout`` the most seconds a rank waits at a synchronisation point
    (None: no limit), ``line(kind, code, text)`` the wording of the job's one
    message.  Create and :meth:`start` it on every rank at the same point (a
    collective call), :meth:`stop` it on every rank when the work is done.
    """

    def __init__(self, comm, timeout: float | None = None, line: Callable[[str, int, str], str] = default_line):
        self.comm = comm
        self.rank, self.size = comm.Get_rank(), comm.Get_size()
        self.timeout = None if timeout is None or timeout <= 0 else float(timeout)
        self.line = line
        self.control = comm.Dup()
        self.waiting: tuple[int, str, float] | None = None  # (call number, call, since): set by the main thread
        self.ending: tuple[str, int] | None = None  # (line, exit code) once the job is ending
        self._calls = 0
        self._lock = threading.Lock()
        self._send_lock = threading.Lock()
        self._critical = 0
        self._printed = False
        self._finished = threading.Event()
        self._stop = threading.Event()
        self._sends: list = []
        self._overdue: int | None = None  # the call this rank said it waits too long in
        self._inquiry: dict | None = None  # rank 0: the question "are you waiting?" being asked
        self._inquiries = 0
        self._thread: threading.Thread | None = None
        self._pipe: tuple[int, int] | None = None
        self._old_wakeup = -1
        self._stderr: int | None = None  # the job's stderr, whoever holds fd 2 when the line is printed
        self._at_abort: list[Callable[[], None]] = []  # what to remove before the job is ended (at_abort)

    # ------------------------------------------------------------ life
    def start(self) -> RankWatch:
        """Start the thread (from the main thread: it takes over Python's signal wakeup descriptor)."""
        try:  # the line must reach the terminal even while a solver's output is being captured
            self._stderr = os.dup(2)
        except OSError:
            self._stderr = None
        read, write = os.pipe()
        os.set_blocking(read, False)
        os.set_blocking(write, False)
        self._pipe = (read, write)
        try:
            self._old_wakeup = signal.set_wakeup_fd(write, warn_on_full_buffer=False)
        except ValueError:  # not the main thread: signals are not seen, the rest works
            self._old_wakeup = None
        self._thread = threading.Thread(target=self._run, name=f"polydg-watch-{self.rank}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the thread (the work ended on every rank); nothing is ended."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._old_wakeup is not None and self._pipe is not None:
            try:
                signal.set_wakeup_fd(self._old_wakeup)
            except ValueError:
                pass
        if self._pipe is not None:
            for fd in self._pipe:
                os.close(fd)
            self._pipe = None
        self._sends.clear()  # answers still in flight are dropped with the communicator
        if self._stderr is not None:
            os.close(self._stderr)
            self._stderr = None
        try:
            self.control.Free()
        except Exception:  # already gone with MPI itself
            pass

    def __enter__(self) -> RankWatch:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # ------------------------------------------------------------ the main thread's side
    @contextmanager
    def blocking(self, call: str) -> Iterator[None]:
        """Around a blocking MPI call of the main thread: the rank waits in ``call``."""
        self._calls += 1
        self.waiting = (self._calls, call, time.monotonic())
        try:
            yield
        finally:
            self.waiting = None

    @contextmanager
    def critical(self) -> Iterator[None]:
        """A few steps the job must not be ended in the middle of (the renames that publish the output)."""
        with self._lock:
            self._critical += 1
        try:
            yield
        finally:
            with self._lock:
                self._critical -= 1

    def fail(self, error: BaseException) -> NoReturn:
        """This rank cannot go on (``error`` was not exchanged in a phase): end every rank, one message.

        On rank 0: print the line and end the job.  On another rank: send the
        line to rank 0, which prints it and ends the job; end it here if
        rank 0 does not within :data:`ANSWER` seconds.
        """
        if self.ending is not None:  # the job is ending already (rank 0 was asked to unwind)
            self.finish(*self.ending)
        kind, code, text = describe(error)
        if self.size > 1 and not text.startswith("rank "):
            text = f"rank {self.rank}: {text}"
        line = self.line(kind, code, text)
        if self.rank == 0:
            self.finish(line, code)
        self._send(("fail", line, code), 0, _TO_ROOT)
        deadline = time.monotonic() + ANSWER
        while time.monotonic() < deadline:
            time.sleep(POLL)
        self.finish(line, code)  # rank 0 did not end the job: it is stopped, dead or stuck

    def announce(self, line: str) -> bool:
        """Print the job's one line unless it was printed already (then False)."""
        with self._lock:  # printed under the lock: another thread's abort silences stderr only after it
            if self._printed:
                return False
            self._printed = True
            sys.stderr.flush()
            if self._stderr is None:
                print(line, file=sys.stderr, flush=True)
            else:
                os.write(self._stderr, (line + "\n").encode(errors="replace"))
        return True

    def at_abort(self, cleanup: Callable[[], None]) -> None:
        """Call ``cleanup`` before this process ends the job (:meth:`finish`): what a main thread blocked
        inside MPI cannot unwind itself, e.g. an output's staging folder.  Best effort: its errors pass."""
        self._at_abort.append(cleanup)

    def finish(self, line: str, code: int) -> NoReturn:
        """Print ``line`` (once per process), call the :meth:`at_abort` cleanups and end every rank with
        ``code``."""
        deadline = time.monotonic() + 30
        while self._critical and threading.current_thread() is not threading.main_thread() \
                and time.monotonic() < deadline:
            time.sleep(0.01)
        if self.announce(line) and self.size > 1:
            time.sleep(FORWARD_SECONDS)  # mpiexec forwards the line before the abort ends its forwarding
        for cleanup in self._at_abort:
            try:
                cleanup()
            except Exception:  # the job ends anyway; its line is printed
                pass
        self._finished.set()
        abort(self.comm, code)
        os._exit(code)  # not reached: MPI_Abort ends the process

    # ------------------------------------------------------------ the thread
    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                ready, _, _ = select.select([self._pipe[0]], [], [], POLL)
                if ready:
                    for signum in self._read_signals():
                        self._on_signal(signum)
                self._receive()
                if self.timeout is not None:
                    self._check_deadline()
            except Exception as exc:  # the watch itself must not die silently
                if self._stop.is_set():
                    return
                print(f"polydg: the ranks' watch failed: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
                return

    def _read_signals(self) -> list[int]:
        try:
            data = os.read(self._pipe[0], 512)
        except BlockingIOError:
            return []
        return [b for b in data if b in SIGNALS]

    def _on_signal(self, signum: int) -> None:
        """A signal reached this process: the main thread may be waiting inside MPI, unable to see it."""
        if self.ending is not None or self._printed:
            return
        from ..errors import Interrupted

        if self.rank == 0:  # the main thread unwinds if it can; the job ends after GRACE if it cannot
            kind, code, text = describe(Interrupted(signum))
            self._end(self.line(kind, code, text), code, interrupt_main=False)
        else:
            kind, code, text = describe(Interrupted(signum))
            self._send(("fail", self.line(kind, code, f"rank {self.rank}: {text}"), code), 0, _TO_ROOT)

    def _send(self, message, dest: int, tag: int) -> None:
        with self._send_lock:  # from the thread, and from the main thread in fail()
            self._sends = [r for r in self._sends if not r.Test()]
            self._sends.append(self.control.isend(message, dest=dest, tag=tag))

    def _receive(self) -> None:
        from mpi4py import MPI

        status = MPI.Status()
        while self.control.Iprobe(source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG, status=status):
            source, tag = status.Get_source(), status.Get_tag()
            message = self.control.recv(source=source, tag=tag)
            what = message[0]
            if what == "fail" and self.rank == 0:
                self._end(message[1], message[2], interrupt_main=True)
            elif what == "overdue" and self.rank == 0:
                self._ask(source)
            elif what == "status" and self.rank == 0:
                if self._inquiry is not None and message[1] == self._inquiry["id"]:
                    self._inquiry["answers"][source] = message[2]
            elif what == "inquire":
                self._send(("status", message[1], self._state()), 0, _TO_ROOT)

    def _state(self) -> tuple[str, str | None, float]:
        waiting = self.waiting
        if waiting is None:
            return ("working", None, 0.0)
        return ("waiting", waiting[1], time.monotonic() - waiting[2])

    def _check_deadline(self) -> None:
        waiting, now = self.waiting, time.monotonic()
        if self.rank == 0 and self._inquiry is not None:
            inquiry = self._inquiry
            if len(inquiry["answers"]) == self.size or now - inquiry["started"] > INQUIRY:
                self._decide()
            return
        if waiting is None or now - waiting[2] <= self.timeout:
            return
        if self.rank == 0:
            self._ask(0)
        elif self._overdue != waiting[0]:
            self._overdue = waiting[0]
            self._send(("overdue",), 0, _TO_ROOT)
        elif now - waiting[2] > self.timeout + INQUIRY + GRACE + 3.0 + 0.5 * (self.rank - 1):
            text = (f"rank 0 did not answer within the timeout of {self.timeout:g} s (stopped?); rank "
                    f"{self.rank} waited {now - waiting[2]:.0f} s in {waiting[1]}")
            self._end(self.line("timeout", 1, text), 1, interrupt_main=False)

    def _ask(self, overdue_rank: int) -> None:
        """Rank 0: a rank waits too long; ask every rank whether it waits too."""
        if self._inquiry is not None or self.ending is not None:
            return
        self._inquiries += 1
        self._inquiry = {"id": self._inquiries, "started": time.monotonic(), "answers": {0: self._state()}}
        for rank in range(1, self.size):
            self._send(("inquire", self._inquiries), rank, _FROM_ROOT)

    def _decide(self) -> None:
        """Rank 0: the answers are in (or the time to answer is up): name the late ranks, end the job."""
        answers, self._inquiry = self._inquiry["answers"], None
        overdue = [r for r, (state, _, waited) in answers.items() if state == "waiting" and waited > self.timeout]
        if not overdue:  # the wait ended meanwhile
            return
        silent = [r for r in range(self.size) if r not in answers]
        working = [r for r, (state, _, _) in answers.items() if state == "working"]
        waiting = sorted(r for r, (state, _, _) in answers.items() if state == "waiting")
        calls = sorted({answers[r][1] for r in waiting})
        late = []
        if silent:
            late.append(f"{_ranks(silent)} did not answer (stopped?)")
        if working:
            late.append(f"{_ranks(working)} still working")
        if late:
            text = (f"{'; '.join(late)}: {_ranks(waiting)} waited more than the timeout of {self.timeout:g} s "
                    f"in {', '.join(calls)}")
        else:
            text = (f"every rank has waited more than the timeout of {self.timeout:g} s, each for the others "
                    f"(in {', '.join(calls)})")
        self._end(self.line("timeout", 1, text), 1, interrupt_main=True)

    def _end(self, line: str, code: int, interrupt_main: bool) -> None:
        """Rank 0's watch ends the job: the main thread may unwind first (its output's temporary files)."""
        with self._lock:
            if self.ending is not None:
                return
            self.ending = (line, code)
        if self.waiting is None:  # the main thread runs Python: it can clean up
            if interrupt_main:
                _thread.interrupt_main()
            self._finished.wait(GRACE)
        self.finish(line, code)


def _ranks(ranks: list[int]) -> str:
    ranks = sorted(ranks)
    return f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + ", ".join(map(str, ranks))


class GuardedComm:
    """A communicator whose blocking calls tell a :class:`RankWatch` that the rank waits in them.

    Everything else is the wrapped communicator's (``unwrapped``).
    """

    BLOCKING = frozenset({
        "Barrier", "barrier", "bcast", "Bcast", "gather", "Gather", "Gatherv", "allgather", "Allgather",
        "Allgatherv", "allreduce", "Allreduce", "reduce", "Reduce", "scatter", "Scatter", "Scatterv", "send",
        "Send", "recv", "Recv", "sendrecv", "Sendrecv", "alltoall", "Alltoall", "Alltoallv", "Split",
        "Split_type", "Dup", "Probe", "probe", "Wait",
    })

    def __init__(self, comm, watch: RankWatch):
        self.unwrapped = comm
        self.watch = watch

    def __getattr__(self, name: str):
        attribute = getattr(self.unwrapped, name)
        if name not in self.BLOCKING or not callable(attribute):
            return attribute
        watch = self.watch

        def call(*args, **kwargs):
            with watch.blocking(name):
                return attribute(*args, **kwargs)

        return call


@contextmanager
def watch_ranks(comm, timeout: float | None = None, *,
                line: Callable[[str, int, str], str] = default_line) -> Iterator:
    """``with watch_ranks(MPI.COMM_WORLD, timeout=600) as comm: ...``: no rank left waiting.

    Starts a :class:`RankWatch` on every rank (a collective call) and yields
    the communicator to use inside the block (its blocking calls watched).
    A :class:`~polydg.distributed.comm.RankFailure` leaves the block as usual
    (every rank raises it); any other exception, KeyboardInterrupt or
    SystemExit on one rank, a signal, or a rank that keeps the others
    waiting more than ``timeout`` seconds at one synchronisation point, ends
    every rank with one message (``line(kind, exit code, text)``) from rank 0
    and the exit code (2 bad input, 128 + signal, 1 otherwise).  On one rank
    it yields ``comm`` as it is.
    """
    if comm.Get_size() == 1:
        yield comm
        return
    watch = RankWatch(comm, timeout, line).start()
    try:
        yield GuardedComm(comm, watch)
    except RankFailure:
        raise
    except BaseException as error:
        watch.fail(error)
    finally:
        watch.stop()


__all__ = ["GuardedComm", "RankWatch", "default_line", "watch_ranks"]
