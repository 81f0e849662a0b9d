"""Exceptions raised by polydg on bad input, and the capture of what other code prints meanwhile.

Every error a user can cause by their input derives from :class:`PolyDGError`;
the command line turns these into a one-line message and exit code 2.

Third-party readers (meshio) and user problem files may print or warn while
they fail.  :func:`capture_output` collects all of that, so that it becomes
part of the one-line message instead of extra lines around it.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import sys
import tempfile
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field


class PolyDGError(Exception):
    """Base class of all input errors reported by polydg."""


class MeshError(PolyDGError, ValueError):
    """A mesh file or mesh array is unreadable, inconsistent or degenerate.

    The message names the source (file or generator), and the offending cell,
    facet or point where there is one.
    """


class ProblemError(PolyDGError, ValueError):
    """A problem definition does not load or a coefficient misbehaves."""


class DimensionError(ProblemError):
    """A problem posed in ``problem_dim`` dimensions met a mesh of ``mesh_dim``."""

    def __init__(self, message: str, problem_dim: int, mesh_dim: int):
        super().__init__(message)
        self.problem_dim, self.mesh_dim = problem_dim, mesh_dim


class OptionError(PolyDGError, ValueError):
    """An option has an unknown or out-of-range value."""


class MemoryLimitError(PolyDGError, MemoryError):
    """A run would need more memory than there is: refused before allocating it.

    The message gives the estimate, the memory available and what would fit.
    """


class NonFiniteError(PolyDGError, ArithmeticError):
    """A value that must be finite is not (a coefficient, the assembled matrix or load, a solution).

    The message names the coefficient, or the stage, where it was found.
    """


class Interrupted(KeyboardInterrupt):
    """The run was asked to stop by a signal (SIGINT, SIGTERM, SIGHUP); ``signum`` names it.

    A :class:`KeyboardInterrupt`, so that code which cleans up after Ctrl-C
    cleans up after SIGTERM too.  The command line exits with 128 + signum.
    """

    def __init__(self, signum: int = 2):
        super().__init__(signum)
        self.signum = int(signum)

    @property
    def name(self) -> str:
        import signal

        try:
            return signal.Signals(self.signum).name
        except ValueError:
            return f"signal {self.signum}"

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


class PolyDGWarning(UserWarning):
    """Base class of the warnings polydg issues (about its input, and that it compiles)."""


class CompilationWarning(PolyDGWarning):
    """polydg is compiling its kernels (the Python API's first use in a process, once; the command line
    says so on its progress lines instead).  Silence it with
    ``warnings.filterwarnings("ignore", category=polydg.errors.CompilationWarning)``."""


class ProblemWarning(PolyDGWarning):
    """A problem was taken, but something in it looks unintended (an attribute like a coefficient's name that
    is not read, an operator that is zero)."""


class ConditioningWarning(PolyDGWarning):
    """A space of so high a degree that round-off, not the discretisation, bounds its error (:class:`DGSpace`)."""


class MeshWarning(PolyDGWarning):
    """A mesh file was read, but its reader complained about it (e.g. a block not closed)."""


def warn_user(message: str, category: type[Warning]) -> None:
    """Warn with ``category``, the warning placed at the first caller outside polydg (the user's line, however
    deep inside polydg the cause was found)."""
    import os
    import sys
    import warnings

    package = os.path.dirname(os.path.abspath(__file__)) + os.sep
    frame, level = sys._getframe(1), 2  # warnings.warn's stacklevel 2: this function's caller
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(package):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=level)


def one_line(text: object) -> str:
    """``text`` with every run of white space, line breaks included, as one space, and other
    control characters escaped (``\\x01``), so that it prints as one plain line."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in " ".join(str(text).split()))


_ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


@dataclass
class CapturedOutput:
    """What was printed (at the Python and the file-descriptor level) and warned inside :func:`capture_output`."""

    stdout: str = ""
    stderr: str = ""
    warned: list[warnings.WarningMessage] = field(default_factory=list)

    @property
    def printed(self) -> str:
        """Everything printed, stdout first, without terminal colour codes."""
        return _ANSI_ESCAPE.sub("", self.stdout + self.stderr)

    def warning_texts(self) -> list[str]:
        """Each warning as ``Category: message`` on one line, repeats left out."""
        texts = [f"{w.category.__name__}: {one_line(w.message)}" for w in self.warned]
        return list(dict.fromkeys(texts))

    def summary(self, limit: int = 3) -> str:
        """The printed lines and the warnings on one line, at most ``limit`` of them, "" for none."""
        lines = [one_line(line) for line in self.printed.splitlines() if line.strip()]
        items = list(dict.fromkeys(lines + self.warning_texts()))
        shown = [item if len(item) <= 200 else item[:197] + "..." for item in items[:limit]]
        more = f" (and {len(items) - limit} more)" if len(items) > limit else ""
        return "; ".join(shown) + more

    def replay(self) -> None:
        """Print and warn it all again, as if it had never been captured."""
        if self.stdout:
            sys.stdout.write(self.stdout)
        if self.stderr:
            sys.stderr.write(self.stderr)
        for w in self.warned:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, source=w.source)


@contextlib.contextmanager
def capture_output() -> Iterator[CapturedOutput]:
    """Collect everything printed and warned inside the block into a :class:`CapturedOutput`.

    ``sys.stdout`` and ``sys.stderr`` are swapped for buffers, and file
    descriptors 1 and 2 for temporary files (compiled code writes there
    directly); every warning is recorded, none shown.  Output of other
    threads meanwhile is collected too: the streams are the process's.
    The result is filled in when the block ends.
    """
    captured = CapturedOutput()
    python_out, python_err = io.StringIO(), io.StringIO()
    fd_out: list[str] = []
    fd_err: list[str] = []
    with contextlib.ExitStack() as stack:
        stack.enter_context(_redirected_descriptor(1, fd_out))
        stack.enter_context(_redirected_descriptor(2, fd_err))
        stack.enter_context(contextlib.redirect_stdout(python_out))
        stack.enter_context(contextlib.redirect_stderr(python_err))
        recorded = stack.enter_context(warnings.catch_warnings(record=True))
        warnings.simplefilter("always")
        try:
            yield captured
        finally:
            captured.warned = list(recorded)
    captured.stdout = python_out.getvalue() + "".join(fd_out)
    captured.stderr = python_err.getvalue() + "".join(fd_err)


@contextlib.contextmanager
def _redirected_descriptor(fd: int, into: list[str]) -> Iterator[None]:
    """Point ``fd`` at a temporary file inside the block, then append what it received to ``into``.

    Does nothing where ``fd`` is not open (a daemon without a terminal).
    """
    try:
        saved = os.dup(fd)
    except OSError:
        yield
        return
    with tempfile.TemporaryFile() as sink:
        _flush_all()  # what was written before the block goes where it belongs
        os.dup2(sink.fileno(), fd)
        try:
            yield
        finally:
            _flush_all()
            os.dup2(saved, fd)
            os.close(saved)
            sink.seek(0)
            into.append(sink.read().decode("utf-8", errors="replace"))


def _flush_all() -> None:
    """Flush Python's standard streams and C's stdio buffers."""
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):  # closed or broken: nothing to flush
            pass
    try:
        import ctypes

        ctypes.CDLL(None).fflush(None)
    except (OSError, AttributeError, TypeError):  # no C library to call (e.g. Windows)
        pass
