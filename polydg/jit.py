"""Compiled code: where Numba caches polydg's kernels, and saying so while it compiles.

Numba keys a cached function by the text of its own file alone.  A kernel
that inlines functions or constants of another module would keep running
its old machine code after that module changed (an edit in a checkout, an
upgrade that leaves old caches behind).  So polydg points Numba's cache at
a directory named after a hash of all of polydg's sources, chosen once when
polydg is imported (:func:`use_cache_directory`): any change to the package
compiles afresh, into a new directory, and nothing stale can be loaded.

The directory is ``<base>/polydg-<hash>``, ``<base>`` being
``$NUMBA_CACHE_DIR`` when set, else ``$XDG_CACHE_HOME/polydg`` (by default
``~/.cache/polydg``).  Each import marks its directory as used; when a
version compiles into a new one, the directories no version has used for
:data:`UNUSED_DAYS` days are removed (:func:`prune_unused`).  Any of them
can also be deleted by hand at any time.

How long compiling took, and saying so: a listener of Numba's compile
events sums the seconds of every compilation of a polydg function (not the
loads from the cache), by part of the package (:data:`PARTS`).  The
assembly's timer moves the compilations inside its stages to ``jit``
(:func:`compiled_within`); the command line's :func:`compile_watch` says
when the first one starts and, once, how long all of them took, the figure
of its table.  The Python API warns once per process, on the first
compilation, with a :class:`~polydg.errors.CompilationWarning`; silence it
with ``warnings.filterwarnings("ignore", category=polydg.errors.CompilationWarning)``.
"""

from __future__ import annotations

import contextvars
import hashlib
import os
import threading
import time
import warnings
from collections import deque
from collections.abc import Callable, Iterator, MutableMapping
from contextlib import contextmanager
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent

#: the leaf directory names this module creates under the cache base
_PREFIX = "polydg-"


def source_hash(package_dir: str | os.PathLike = PACKAGE_DIR) -> str:
    """A hash of every Python source of the package (paths and contents), 16 hex digits."""
    h = hashlib.sha256()
    root = Path(package_dir)
    for path in sorted(root.rglob("*.py")):
        h.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def cache_base(environ: MutableMapping[str, str] = os.environ) -> Path:
    """The directory that holds the per-version cache directories (see the module's text).

    A ``NUMBA_CACHE_DIR`` that already names a polydg cache directory (set
    by a parent process) counts as its parent.
    """
    given = environ.get("NUMBA_CACHE_DIR", "")
    if given:
        path = Path(given)
        return path.parent if path.name.startswith(_PREFIX) else path
    xdg = environ.get("XDG_CACHE_HOME", "")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "polydg"


def use_cache_directory(environ: MutableMapping[str, str] = os.environ) -> Path:
    """Point Numba's cache at ``<base>/polydg-<source hash>``; returns it.

    Sets ``NUMBA_CACHE_DIR`` in ``environ`` (so that Numba's reloads of its
    configuration, and child processes such as MPI ranks, keep it) and in
    ``numba.config``, before any polydg kernel is defined.

    A directory that cannot be written (Numba would then fall back, without
    a word, to ``__pycache__`` beside the sources, keyed by each file alone)
    is replaced by one under the system's temporary folder, and the first
    compilation warns about it (a :class:`~polydg.errors.PolyDGWarning`).
    """
    global CACHE_NOTE
    directory = cache_base(environ) / f"{_PREFIX}{source_hash()}"
    new = not directory.exists()
    if not _writable(directory):
        import tempfile

        fallback = Path(tempfile.gettempdir()) / f"polydg-cache-{os.getuid() if hasattr(os, 'getuid') else 0}" / \
            directory.name
        CACHE_NOTE = (f"the kernel cache {directory} cannot be written: compiled kernels are cached in {fallback} "
                      "instead (set NUMBA_CACHE_DIR to a writable folder)")
        directory = fallback
        _warn_at_first_compilation()
    else:
        _mark_used(directory)
        if new:  # a version's first use: the directories of versions unused for long go
            prune_unused(directory.parent, keep=directory)
    environ["NUMBA_CACHE_DIR"] = str(directory)
    if environ is os.environ:
        import numba

        numba.config.CACHE_DIR = str(directory)
    return directory


#: a version's cache directory unused for this long is removed when another version is first used
UNUSED_DAYS = 30


def _mark_used(directory: Path) -> None:
    """Set the directory's modification time to now: the time of its last use, which :func:`prune_unused` reads."""
    try:
        os.utime(directory)
    except OSError:
        pass


def prune_unused(base: Path, keep: Path, days: float = UNUSED_DAYS) -> list[Path]:
    """Remove the cache directories under ``base`` (``polydg-`` and 16 hex digits: other polydg versions'
    kernels) that no polydg has used for ``days`` (each import marks its own); returns those removed.

    Another version still in use marks its directory when imported, so only abandoned ones go.  Each is
    renamed before it is removed, so that processes pruning at once (MPI ranks) remove it once; a removal
    cut short leaves the renamed directory, which the next pruning removes.  What cannot be removed is left.
    """
    import re
    import shutil

    removed = []
    cutoff = time.time() - days * 86400.0
    name = re.compile(rf"{_PREFIX}[0-9a-f]{{16}}(\.removing-\d+)?")
    try:
        candidates = [p for p in base.iterdir() if p != keep and name.fullmatch(p.name)]
    except OSError:
        return removed
    for path in candidates:
        try:
            if path.is_symlink() or not path.is_dir() or path.stat().st_mtime >= cutoff:
                continue
            doomed = path if ".removing-" in path.name else path.with_name(f"{path.name}.removing-{os.getpid()}")
            if doomed != path:
                path.rename(doomed)  # fails for all but one of the processes pruning at once
            shutil.rmtree(doomed, ignore_errors=True)
            if not doomed.exists():
                removed.append(path)
        except OSError:
            continue
    return removed


#: why the cache is not where it was asked to be (None: it is)
CACHE_NOTE: str | None = None


def _writable(directory: Path) -> bool:
    """Whether files can be made in ``directory`` (made if missing)."""
    import tempfile

    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=directory):
            pass
    except OSError:
        return False
    return True


def _warn_at_first_compilation() -> None:
    """Warn with :data:`CACHE_NOTE` when Numba first compiles a polydg function (where a program that
    shows polydg's warnings, such as the command line, is already running)."""
    from numba.core import event

    class Listener(event.Listener):
        warned = False

        def on_start(self, ev: event.Event) -> None:
            if not self.warned and CACHE_NOTE and _is_polydg(ev.data.get("dispatcher")):
                import warnings

                from .errors import PolyDGWarning

                self.warned = True
                warnings.warn(CACHE_NOTE, PolyDGWarning, stacklevel=2)

        def on_end(self, ev: event.Event) -> None:
            pass

    event.register("numba:compile", Listener())
#: the parts of polydg named in the compile figure, by module prefix (the first that matches)
PARTS = (("polydg.spacetime", "space-time"), ("polydg.assembly", "assembly"), ("polydg.problem", "problem"),
         ("polydg.mesh", "mesh"), ("polydg.partition", "mesh"), ("polydg.basis", "evaluation"),
         ("polydg.solve", "evaluation"), ("polydg.nonlinear", "nonlinear"), ("polydg.distributed", "ranks"),
         ("polydg", "other"))


def part_of(module: str) -> str:
    """The part of polydg a module belongs to (:data:`PARTS`).

    >>> part_of("polydg.assembly.kernels"), part_of("polydg.basis")
    ('assembly', 'evaluation')
    """
    for prefix, part in PARTS:
        if module == prefix or module.startswith(prefix + "."):
            return part
    return "other"


class _Clock:
    """The compilations of polydg's functions in this process: total seconds, per part, and the last intervals."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.parts: dict[str, float] = {}
        self.intervals: deque[tuple[float, float]] = deque(maxlen=4096)
        self.warned = False
        self.lock = threading.Lock()
        self.local = threading.local()  # per thread: the stack of compilations under way


_CLOCK = _Clock()

#: the command line's watch of this run (see :func:`compile_watch`), None in the Python API
_WATCH: contextvars.ContextVar[CompileWatch | None] = contextvars.ContextVar("polydg_compile_watch", default=None)
_WATCHES: list[CompileWatch] = []


def compiled_seconds() -> float:
    """Seconds spent so far in this process compiling polydg's functions (not loading them from the cache)."""
    return _CLOCK.seconds


def compiled_within(start: float, end: float) -> float:
    """Seconds of polydg's compilations inside the wall-clock interval [start, end] (``time.perf_counter``)."""
    total = 0.0
    with _CLOCK.lock:  # recorded in the order they ended: the recent ones are at the end
        for a, b in reversed(_CLOCK.intervals):
            if b <= start:
                break
            total += max(0.0, min(b, end) - max(a, start))
    return total


class _Listener:
    """Numba's "numba:compile" events: the outermost compilation of a polydg function is timed."""

    def on_start(self, ev) -> None:
        local = _CLOCK.local
        stack = getattr(local, "stack", None)
        if stack is None:
            stack = local.stack = []
        counted = not any(stack) and _is_polydg(ev.data.get("dispatcher"))
        stack.append(counted)
        if counted:
            local.start = time.perf_counter()
            local.part = part_of(getattr(getattr(ev.data.get("dispatcher"), "py_func", None), "__module__", "") or "")
            _first_compilation()

    def on_end(self, ev) -> None:
        local = _CLOCK.local
        stack = getattr(local, "stack", None)
        if not stack or not stack.pop():
            return
        end = time.perf_counter()
        with _CLOCK.lock:
            _CLOCK.seconds += end - local.start
            _CLOCK.parts[local.part] = _CLOCK.parts.get(local.part, 0.0) + end - local.start
            _CLOCK.intervals.append((local.start, end))


def _first_compilation() -> None:
    """Tell the watches (the command line), or warn once (the Python API)."""
    watches = list(_WATCHES)
    for watch in watches:
        watch._started()
    if watches or _CLOCK.warned:
        return
    _CLOCK.warned = True
    try:
        from .errors import CompilationWarning

        warnings.warn("polydg is compiling its kernels with Numba: a first run takes about half a minute per "
                      f"dimension; they are cached in {os.environ.get('NUMBA_CACHE_DIR', 'the cache')} for later "
                      "runs", CompilationWarning, stacklevel=2)
    except Exception:  # a filter that turns warnings into errors must not break a compilation
        pass


def listen_to_compilations() -> None:
    """Register the listener of Numba's compile events (once; polydg's import does it)."""
    from numba.core import event

    if getattr(listen_to_compilations, "done", False):
        return

    class Listener(_Listener, event.Listener):
        pass

    event.register("numba:compile", Listener())
    listen_to_compilations.done = True


class CompileWatch:
    """polydg's compilations from its creation on: ``say`` hears when the first starts and, from
    :meth:`finish`, how long they all took (the figure the command line's table shows).

    ``what`` names them in the lines (e.g. "the 2D kernels, approach 1"); it may be set later, once known.
    """

    def __init__(self, say: Callable[[str], None] | None = None, what: str = "polydg's kernels"):
        self.say, self.what = say, what
        self._seconds, self._parts = _CLOCK.seconds, dict(_CLOCK.parts)
        self._said_start = False
        self.finished: float | None = None

    def _started(self) -> None:
        if not self._said_start and self.finished is None and self.say is not None:
            self._said_start = True
            self.say(f"compiling {self.what} (first run only, cached for later runs)")

    @property
    def seconds(self) -> float:
        """Seconds compiled since the watch began (frozen by :meth:`finish`)."""
        return self.finished if self.finished is not None else _CLOCK.seconds - self._seconds

    def parts(self) -> dict[str, float]:
        """Seconds per part of polydg (:data:`PARTS`), largest first."""
        got = {k: v - self._parts.get(k, 0.0) for k, v in _CLOCK.parts.items()}
        return dict(sorted(((k, v) for k, v in got.items() if v > 0), key=lambda kv: -kv[1]))

    def summary(self) -> dict:
        """``{"seconds", "what", "parts"}`` for summary.json."""
        return {"seconds": float(self.seconds), "what": self.what,
                "parts": {k: float(v) for k, v in self.parts().items()}}

    def line(self) -> str:
        """The one line that says what compiled and how long it took."""
        parts = ", ".join(f"{k} {v:.2f} s" for k, v in self.parts().items())
        return f"compiled {self.what} in {self.seconds:.2f} s ({parts}); cached for later runs"

    def finish(self) -> float:
        """Freeze the figure and say it (once, when anything compiled); returns the seconds."""
        if self.finished is None:
            self.finished = _CLOCK.seconds - self._seconds
            if self.finished > 0 and self.say is not None:
                self.say(self.line())
        return self.finished


@contextmanager
def compile_watch(say: Callable[[str], None] | None = None, what: str = "polydg's kernels") -> Iterator[CompileWatch]:
    """A :class:`CompileWatch` for the run inside the block (the command line's): its figure is
    :func:`current_watch`'s, it says its line at the end (unless :meth:`CompileWatch.finish` said it
    before), and no :class:`~polydg.errors.CompilationWarning` is raised meanwhile."""
    watch = CompileWatch(say, what)
    token = _WATCH.set(watch)
    _WATCHES.append(watch)
    try:
        yield watch
    finally:
        _WATCHES.remove(watch)
        _WATCH.reset(token)
        watch.finish()


def current_watch() -> CompileWatch | None:
    """The :func:`compile_watch` of the run in progress, if any."""
    return _WATCH.get()


@contextmanager
def announce_compilation(say: Callable[[str], None], what: str) -> Iterator[None]:
    """Call ``say`` when Numba starts compiling (not loading) a polydg function, and with the time after.

    ``what`` names the kernels in the message, e.g. "2D assembly kernels".
    Loading from the cache says nothing.
    """
    with compile_watch(say, f"the {what}"):
        yield


def _is_polydg(dispatcher) -> bool:
    module = getattr(getattr(dispatcher, "py_func", None), "__module__", "") or ""
    return module == "polydg" or module.startswith("polydg.")
