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
``~/.cache/polydg``).  Old directories can be deleted at any time.
"""

from __future__ import annotations

import hashlib
import os
import time
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
    if not _writable(directory):
        import tempfile

        fallback = Path(tempfile.gettempdir()) / f"polydg-cache-{os.getuid() if hasattr(os, 'getuid') else 0}" / \
            directory.name
        CACHE_NOTE = (f"the kernel cache {directory} cannot be written: compiled kernels are cached in {fallback} "
                      "instead (set NUMBA_CACHE_DIR to a writable folder)")
        directory = fallback
        _warn_at_first_compilation()
    environ["NUMBA_CACHE_DIR"] = str(directory)
    if environ is os.environ:
        import numba

        numba.config.CACHE_DIR = str(directory)
    return directory


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


@contextmanager
def announce_compilation(say: Callable[[str], None], what: str) -> Iterator[None]:
    """Call ``say`` when Numba starts compiling (not loading) a polydg function, and with the time after.

    ``what`` names the kernels in the message, e.g. "2D assembly kernels".
    Loading from the cache says nothing.
    """
    from numba.core import event

    started: list[float] = []

    class Listener(event.Listener):
        def on_start(self, ev: event.Event) -> None:
            if not started and _is_polydg(ev.data.get("dispatcher")):
                started.append(time.perf_counter())
                say(f"compiling the {what} (first run only, cached for later runs)")

        def on_end(self, ev: event.Event) -> None:
            pass

    listener = Listener()
    event.register("numba:compile", listener)
    try:
        yield
    finally:
        event.unregister("numba:compile", listener)
        if started:
            say(f"compiled the {what} in {time.perf_counter() - started[0]:.1f} s")


def _is_polydg(dispatcher) -> bool:
    module = getattr(getattr(dispatcher, "py_func", None), "__module__", "") or ""
    return module == "polydg" or module.startswith("polydg.")
