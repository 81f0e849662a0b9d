"""What a run says while it works: time-stamped lines on stderr, and on a terminal, bars.

:class:`Progress` is the run's ``say(message)``: one time-stamped line on
stderr (nothing with ``--quiet``).  Where stderr is a terminal and rich is
installed (``pip install 'polydg[progress]'``), stages that last longer than
:data:`DELAY` seconds also show a live display below the lines: the
assembly's chunks as a bar (:meth:`Progress.chunks`, the assembly's
``progress(stage, done, total)``), and a solve or a Newton iteration as a
spinner with its elapsed time (:meth:`Progress.activity`).  The display is
cleared when the stage ends; the lines stay.  Without a terminal (a pipe, a
file, a batch job) or without rich, only the lines, as before.
"""

from __future__ import annotations

import os
import sys
import time
from contextlib import contextmanager
from typing import IO, Iterator

from .signals import check as check_interrupt

#: seconds a stage runs before its bar or spinner shows
DELAY = 3.0
#: without bars, the least seconds between two chunk lines of a stage besides its first and last chunk's (a
#: tiny memory budget's hundreds of chunks must not flood a batch job's log)
CHUNK_LINE_SECONDS = 5.0


def rich_available() -> bool:
    """Whether rich (the ``progress`` extra) can be imported."""
    try:
        import rich.progress  # noqa: F401
    except ImportError:
        return False
    return True


def is_terminal(stream: IO) -> bool:
    """Whether ``stream`` is an interactive terminal (not a pipe, a file, or ``TERM=dumb``)."""
    try:
        return bool(stream.isatty()) and os.environ.get("TERM", "") != "dumb"
    except (AttributeError, ValueError):
        return False


class Progress:
    """``say(message)``: one time-stamped line on ``stream`` (stderr; nothing with ``quiet``), and live bars
    where ``stream`` is a terminal and rich is installed (``bars``: None decides so)."""

    def __init__(self, quiet: bool, stream: IO | None = None, bars: bool | None = None, delay: float = DELAY):
        self.quiet = quiet
        self.stream = stream if stream is not None else sys.stderr
        self.start = time.perf_counter()
        self.delay = delay
        if bars is None:
            bars = is_terminal(self.stream) and rich_available()
        self.bars = bool(bars) and not quiet
        self._live = None  # (rich Live, rich Progress) while a display is up
        self._chunk_task = None
        self._activities = 0
        self._chunk_said: dict[str, float] = {}  # without bars: when each stage's last chunk line was said

    def __call__(self, message: str, file: IO | None = None) -> None:
        """Say ``message``; ``file`` (a stream other than the run's) bypasses the live display.  A point where
        the run may stop: an interrupt lost where it was raised ends the run here (``signals.check``)."""
        check_interrupt()
        if self.quiet:
            return
        line = f"[{time.perf_counter() - self.start:7.2f} s] {message}"
        if file is not None:
            print(line, file=file, flush=True)
            return
        if self._chunk_task is not None:  # the next line ends the assembly's bar
            self._progress().remove_task(self._chunk_task)
            self._chunk_task = None
            self._stop_if_idle()
        if self._live is not None:
            self._live[0].console.print(line, markup=False, highlight=False, soft_wrap=True)
        else:
            print(line, file=self.stream, flush=True)

    # -- the assembly's chunks

    def chunks(self, stage: str, done: int, total: int) -> None:
        """The assembly's ``progress(stage, done, total)``: a bar on a terminal, else, for assemblies of several
        chunks, a line for a stage's first and last chunk and at most one every :data:`CHUNK_LINE_SECONDS`
        between."""
        if total <= 1 or self.quiet:
            return
        if not self.bars:
            now = time.perf_counter()
            if done in (1, total) or now - self._chunk_said.get(stage, -float("inf")) >= CHUNK_LINE_SECONDS:
                self._chunk_said[stage] = now
                self(f"  {stage}: chunk {done}/{total}")
            return
        progress = self._progress()
        if self._chunk_task is None:
            self._chunk_task = progress.add_task(f"assembly: {stage}", total=total)
        progress.update(self._chunk_task, description=f"assembly: {stage}", completed=done, total=total)

    # -- stages without steps (a solve, an iteration)

    @contextmanager
    def activity(self, description: str) -> Iterator[None]:
        """A spinner with ``description`` and the elapsed time while the block runs (on a terminal, after
        :data:`DELAY` seconds); lines said meanwhile print above it."""
        if not self.bars:
            yield
            return
        progress = self._progress()
        task = progress.add_task(description, total=None)
        self._activities += 1
        try:
            yield
        finally:
            self._activities -= 1
            progress.remove_task(task)
            self._stop_if_idle()

    # -- the live display

    def _progress(self):
        """The rich Progress of the live display (started on first use)."""
        if self._live is None:
            from rich.console import Console
            from rich.live import Live
            from rich.progress import BarColumn, MofNCompleteColumn, Progress as Bars, SpinnerColumn, \
                TextColumn, TimeElapsedColumn

            console = Console(file=self.stream, force_terminal=True)
            bars = Bars(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TimeElapsedColumn(), console=console)
            live = Live(_Delayed(bars, self.delay), console=console, transient=True, refresh_per_second=4)
            live.start()
            self._live = (live, bars)
        return self._live[1]

    def _stop_if_idle(self) -> None:
        if self._live is not None and self._chunk_task is None and not self._activities:
            self._live[0].stop()
            self._live = None

    def close(self) -> None:
        """Clear the live display (the run ended, or failed)."""
        if self._live is not None:
            self._live[0].stop()
            self._live = None
            self._chunk_task = None


class _Delayed:
    """The tasks of a rich Progress that have run for ``delay`` seconds (nothing before)."""

    def __init__(self, bars, delay: float):
        self.bars, self.delay = bars, delay

    def __rich__(self):
        from rich.text import Text

        shown = [t for t in self.bars.tasks if t.started and (t.elapsed or 0.0) >= self.delay]
        return self.bars.make_tasks_table(shown) if shown else Text("")


def chunk_progress(say):
    """The assembly's ``progress(stage, done, total)`` for ``say``: its bar or lines
    (:meth:`Progress.chunks`), or a line of ``say`` per chunk for another callable."""
    if isinstance(say, Progress):
        return say.chunks

    def progress(stage: str, done: int, total: int) -> None:
        if total > 1:
            say(f"  {stage}: chunk {done}/{total}")
    return progress


@contextmanager
def activity(say, description: str) -> Iterator[None]:
    """``say.activity(description)`` where ``say`` is a :class:`Progress`, nothing otherwise."""
    if isinstance(say, Progress):
        with say.activity(description):
            yield
    else:
        yield


__all__ = ["DELAY", "Progress", "activity", "chunk_progress", "is_terminal", "rich_available"]
