"""Signals during a run of the command line.

SIGINT, SIGTERM and SIGHUP raise :class:`~polydg.errors.Interrupted` in the
main thread, once: while the run unwinds (removing its temporary output) a
second signal is not raised again, so that the cleaning-up is not cut short.
Inside :func:`critical` (the few renames that publish the output) a signal
waits until the block is done, and an MPI run's watch does not end the job
there either.  After the run, they are ignored: a late Ctrl-C does not turn
a finished run into a traceback from the interpreter's exit handlers.

A signal that arrives while C code calls back into Python (LLVM's object
cache inside a Numba compilation is one) raises inside that callback, and
ctypes swallows the exception (it reaches ``sys.unraisablehook`` only): the
guard notes it there (:meth:`SignalGuard.note_unraisable`) and raises it
again at the run's next progress line (:func:`check`).
"""

from __future__ import annotations

import signal
import threading
from contextlib import ExitStack, contextmanager
from typing import Iterator

from ..errors import Interrupted

#: the signals that end a run cleanly
SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))


class SignalGuard:
    """The handlers of :data:`SIGNALS` for one run (see the module's text)."""

    def __init__(self) -> None:
        self.received: int | None = None  # the first signal of the run
        self.swallowed = False  # its exception was lost in a callback from C: raise it again at check()
        self._defer = 0
        self._pending: int | None = None
        self._previous: dict[int, object] = {}

    def install(self) -> SignalGuard:
        if threading.current_thread() is threading.main_thread():
            for signum in SIGNALS:
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def restore(self) -> None:
        """Put back the handlers found by :meth:`install` (a run inside a Python program)."""
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def ignore(self) -> None:
        """Ignore the signals from now on (the run is over; the process only exits)."""
        if self._previous:
            for signum in SIGNALS:
                signal.signal(signum, signal.SIG_IGN)
            self._previous.clear()

    def _handle(self, signum: int, frame) -> None:
        if self.received is not None:  # unwinding already
            return
        if self._defer:
            self._pending = self._pending or signum
            return
        self.received = signum
        raise Interrupted(signum)

    def note_unraisable(self, info) -> bool:
        """Whether ``sys.unraisablehook``'s ``info`` is this run's interrupt, lost where it was raised (then
        :meth:`check` raises it again)."""
        if isinstance(info.exc_value, Interrupted) and self.received is not None:
            self.swallowed = True
            return True
        return False

    def check(self) -> None:
        """Raise the run's interrupt again if its first raising was lost (see the module's text)."""
        if self.swallowed:
            self.swallowed = False
            raise Interrupted(self.received)

    @contextmanager
    def deferred(self) -> Iterator[None]:
        """A block that a signal does not interrupt: it is raised when the block is done."""
        self._defer += 1
        try:
            yield
        finally:
            self._defer -= 1
            if not self._defer and self._pending is not None and self.received is None:
                self.received, self._pending = self._pending, None
                raise Interrupted(self.received)


#: the run's guard (``main`` sets it) and, on several ranks, the ranks' watch
_GUARD: SignalGuard | None = None
_WATCH = None


def use(guard: SignalGuard | None, watch=None) -> None:
    """Make ``guard`` (and ``watch``) the ones :func:`critical` defers to (None: none)."""
    global _GUARD, _WATCH
    _GUARD, _WATCH = guard, watch


def check() -> None:
    """At a point where the run may stop (a progress line): an interrupt lost in a callback from C ends it
    here."""
    if _GUARD is not None:
        _GUARD.check()


@contextmanager
def critical() -> Iterator[None]:
    """A few steps that must not be cut in the middle by a signal or by the ranks' watch."""
    with ExitStack() as stack:
        if _GUARD is not None:
            stack.enter_context(_GUARD.deferred())
        if _WATCH is not None:
            stack.enter_context(_WATCH.critical())
        yield


__all__ = ["SIGNALS", "SignalGuard", "check", "critical", "use"]
