"""Where a run writes: checked before any work, written whole or not at all, never stale.

``--output DIR`` holds a *set* of files, listed in ``DIR/.polydg-output``
(the manifest: what polydg wrote there last).  A run writes its set into
a staging folder inside DIR (``DIR/.polydg-staging-<pid>@<host>@*``; inside
the target's own tree, so a writable DIR in a read-only parent works), then
publishes it in a few renames that no signal interrupts: the files of the
previous set that the new one lacks are removed, the new ones moved in, the
manifest replaced.  Files polydg did not write are never touched: a run
that would overwrite one is refused before it starts.  SIGINT or SIGTERM
before the renames removes the staging folder (the old set stays); after,
the new set is complete.  A run killed outright (SIGKILL) leaves a staging
folder named after its process, or, in the middle of the renames, a
journal (``DIR/.polydg-commit``); the next run into DIR removes the first
and completes the second.

A single file (``--json PATH``) is written beside its target under a
temporary name of the same kind and renamed into place.

:func:`check_directory` and :func:`check_file` run before any mesh is read:
an empty or over-long name, a file in the way, a directory that cannot be
written are one line and exit code 2.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile
from pathlib import Path
from typing import Callable, Iterable

from ..errors import OptionError, one_line
from .signals import critical

MANIFEST = ".polydg-output"
JOURNAL = ".polydg-commit"
STAGING = ".polydg-staging-"

#: how a staged file is moved into place (one rename; tests slow it down to interrupt a commit)
_move = os.replace

Writer = Callable[[Path], None]


# ---------------------------------------------------------------------------
# checks before the run


def checked_path(text: str | os.PathLike | None, option: str) -> Path | None:
    """``text`` as a path, refused in one line when empty or longer than the file system allows."""
    if text is None:
        return None
    text = os.fspath(text)
    if not text.strip():
        raise OptionError(f"{option}: the path is empty")
    path = Path(text)
    limit = _limit("PC_NAME_MAX", path, 255)
    for part in path.parts:
        size = len(os.fsencode(part))
        if size > limit:
            shown = part if len(part) <= 40 else part[:37] + "..."
            raise OptionError(f"{option} {_show(text)}: the name {shown!r} has {size} bytes, more than the "
                              f"{limit} the file system allows")
    total = len(os.fsencode(str(path.absolute())))
    if total > _limit("PC_PATH_MAX", path, 4096):
        raise OptionError(f"{option} {_show(text)}: the path has {total} bytes, more than the file system allows")
    return path


def check_directory(text: str | os.PathLike | None, names: Iterable[str] = (), option: str = "--output") -> None:
    """Refuse an output directory that cannot receive the files ``names`` (see the module's text)."""
    path = checked_path(text, option)
    if path is None:
        return
    shown = _show(os.fspath(text))
    try:
        exists, is_dir = path.exists(), path.is_dir()
    except OSError as exc:
        raise OptionError(f"{option} {shown}: cannot be reached ({_reason(exc)})") from None
    if exists and not is_dir:
        raise OptionError(f"{option} {shown}: a file is in the way (not a directory)")
    if not exists:
        _check_parent(path, option, shown)
        return
    _probe(path, option, shown)
    ours = set(_manifest(path)) | set(_manifest(path, JOURNAL))
    in_the_way = []
    for name in names:
        target = path / name
        if name not in ours and (target.exists() or target.is_symlink()):
            in_the_way.append(name)
        elif target.is_dir() and not target.is_symlink():
            in_the_way.append(name)
    if in_the_way:
        listed = ", ".join(in_the_way)
        raise OptionError(f"{option} {shown}: {listed} {'is' if len(in_the_way) == 1 else 'are'} there and not "
                          "from an earlier polydg run into it; move "
                          f"{'it' if len(in_the_way) == 1 else 'them'} or choose another directory")


#: ``--json -``: the summary on standard output (and the table on standard error, so that the output parses)
STANDARD_OUTPUT = "-"


def check_file(text: str | os.PathLike | None, option: str = "--json") -> None:
    """Refuse an output file that cannot be written: a directory in its place, an unwritable folder
    (:data:`STANDARD_OUTPUT` is always written)."""
    if text == STANDARD_OUTPUT:
        return
    path = checked_path(text, option)
    if path is None:
        return
    shown = _show(os.fspath(text))
    try:
        is_dir = path.is_dir()
    except OSError as exc:
        raise OptionError(f"{option} {shown}: cannot be reached ({_reason(exc)})") from None
    if is_dir:
        raise OptionError(f"{option} {shown}: is a directory, not a file")
    parent = path.parent
    if parent.exists():
        if not parent.is_dir():
            raise OptionError(f"{option} {shown}: {_show(str(parent))} is a file, not a directory")
        _probe(parent, option, shown)
    else:
        _check_parent(parent, option, shown)


def _check_parent(path: Path, option: str, shown: str) -> None:
    """A path to be created: its nearest existing ancestor must be a writable directory."""
    ancestor = path.absolute().parent
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise OptionError(f"{option} {shown}: a file is in the way ({_show(str(ancestor))} is not a directory)")
    _probe(ancestor, option, shown)


def _probe(directory: Path, option: str, shown: str) -> None:
    """Can a folder be made in ``directory``?  (Access bits lie for root and on read-only file systems.)"""
    try:
        os.rmdir(tempfile.mkdtemp(prefix=_staging_name(), dir=directory))
    except OSError as exc:
        raise OptionError(f"{option} {shown}: cannot write in {_show(str(directory))} ({_reason(exc)})") from None


def _limit(name: str, path: Path, default: int) -> int:
    """The file system's limit ``name`` (``os.pathconf``) where ``path`` would be."""
    probe = path.absolute()
    while not _exists(probe) and probe != probe.parent:
        probe = probe.parent
    try:
        return int(os.pathconf(probe, name))
    except (OSError, ValueError):
        return default


def _exists(path: Path) -> bool:
    try:
        return path.exists()
    except OSError:  # e.g. a name too long
        return False


def _show(text: str) -> str:
    return one_line(text if len(text) <= 120 else text[:117] + "...")


def _reason(exc: OSError) -> str:
    return exc.strerror or type(exc).__name__


# ---------------------------------------------------------------------------
# the output directory


def _manifest(directory: Path, record: str = MANIFEST) -> list[str]:
    """The files polydg wrote into ``directory`` last ([] without a manifest); with ``record=JOURNAL``,
    those a publication cut short by a kill was moving in."""
    try:
        files = json.loads((directory / record).read_text()).get("files", [])
    except (OSError, ValueError, AttributeError):
        return []
    return [f for f in files if isinstance(f, str) and f and "/" not in f and f not in (".", "..")]


def _staging_name() -> str:
    """The start of this process's temporary names: who made them, to know when they are abandoned."""
    return f"{STAGING}{os.getpid()}@{socket.gethostname()}@"


def _abandoned(name: str) -> bool:
    """A staging folder or file of a process of this host that is gone."""
    pid, _, rest = name[len(STAGING):].partition("@")
    host = rest.partition("@")[0]
    if not pid.isdigit() or host != socket.gethostname():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except OSError:  # alive, another user's
        return False
    return False


def remove_leftovers(directory: Path) -> None:
    """Complete a publication cut short by a kill (the journal), remove abandoned staging folders and files."""
    journal = directory / JOURNAL
    try:
        record = json.loads(journal.read_text())
    except (OSError, ValueError):
        record = None
    if isinstance(record, dict):  # killed while publishing: complete the publication
        staging = directory / str(record.get("staging", "")).replace("/", "")
        new = [n for n in record.get("files", []) if isinstance(n, str) and "/" not in n]
        old = [n for n in record.get("old", []) if isinstance(n, str) and "/" not in n]
        for name in set(old) - set(new):
            _unlink(directory / name)
        if staging.name.startswith(STAGING) and staging.is_dir():
            for name in new + [MANIFEST]:
                if (staging / name).exists():
                    _move(staging / name, directory / name)
        if not (directory / MANIFEST).exists():
            _write_manifest(directory, [n for n in new if (directory / n).exists()])
        shutil.rmtree(staging, ignore_errors=True)
        _unlink(journal)
    elif journal.exists():
        _unlink(journal)
    try:
        entries = list(directory.iterdir())
    except OSError:
        return
    for entry in entries:
        if entry.name.startswith(STAGING) and _abandoned(entry.name):
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                _unlink(entry)


def _unlink(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass


def _write_manifest(directory: Path, files: list[str]) -> None:
    from .. import __version__

    tmp = directory / f"{_staging_name()}manifest"
    tmp.write_text(json.dumps({"written_by": f"polydg {__version__}", "files": sorted(files)}, indent=1) + "\n")
    _move(tmp, directory / MANIFEST)


class OutputDirectory:
    """``--output DIR``: a set of files published whole (see the module's text).

    ``write(files)`` writes ``(name, writer)`` pairs, ``writer(path)`` writing
    one file; or, on several ranks, :meth:`stage` (rank 0), each rank's
    writers into the staging folder, then :meth:`publish` (rank 0) or
    :meth:`discard`.  A run whose files come as it goes (a march's slabs)
    calls :meth:`stage` first, writes them into ``staging``, and ends with
    ``write`` (the rest, into the same folder) or :meth:`discard`.
    """

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path).absolute()
        self._created: list[Path] = []
        self.staging: Path | None = None  # the folder :meth:`stage` made, until published or discarded

    def stage(self) -> Path:
        """Make DIR (and its missing parents) and an empty staging folder in it; returns the folder."""
        self._created += _make_folders(self.path)
        remove_leftovers(self.path)
        self.staging = Path(tempfile.mkdtemp(prefix=_staging_name(), dir=self.path))
        return self.staging

    def write(self, files: list[tuple[str, Writer]]) -> None:
        """Write every file into the staging folder (made now unless :meth:`stage` made it), then publish
        them, with what was written there already under those names, as the directory's set."""
        staging = self.staging if self.staging is not None else self.stage()
        try:
            for name, writer in files:
                writer(staging / name)
            self.publish(staging, [name for name, _ in files])
        except BaseException:
            self.discard(staging)
            raise

    def publish(self, staging: Path, names: list[str]) -> None:
        """Replace the directory's previous set by the staged files ``names``: a few renames, not interrupted."""
        directory = self.path
        old = _manifest(directory)
        check_directory(directory, names)  # nothing of the user's came in the way meanwhile
        with critical():
            from .. import __version__

            (staging / MANIFEST).write_text(json.dumps({"written_by": f"polydg {__version__}",
                                                        "files": sorted(names)}, indent=1) + "\n")
            journal = staging.with_name(staging.name + "journal")
            journal.write_text(json.dumps({"staging": staging.name, "files": names, "old": old}))
            _move(journal, directory / JOURNAL)
            for name in set(old) - set(names):
                _unlink(directory / name)
            for name in names:
                _move(staging / name, directory / name)
            _move(staging / MANIFEST, directory / MANIFEST)
            _unlink(directory / JOURNAL)
            shutil.rmtree(staging, ignore_errors=True)
        self.staging = None

    def discard(self, staging: Path | None) -> None:
        """Remove the staging folder, and the directories :meth:`stage` made if they stayed empty."""
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
        self.staging = None
        for folder in reversed(self._created):
            try:
                folder.rmdir()
            except OSError:  # not empty (a set was published), or gone
                break
        self._created.clear()


def _make_folders(directory: Path) -> list[Path]:
    """Make ``directory`` and its missing parents; returns the folders made, outermost first."""
    missing = []
    probe = directory
    while not probe.exists() and probe != probe.parent:
        missing.append(probe)
        probe = probe.parent
    for folder in reversed(missing):
        folder.mkdir(exist_ok=True)
    return missing[::-1]


def write_file(path: str | os.PathLike, writer: Writer) -> None:
    """Write one file whole: ``writer`` fills a temporary file beside ``path``, renamed into place.

    The folders to ``path`` are made if missing (and removed again if the writing fails).
    """
    path = Path(path).absolute()
    made = _make_folders(path.parent)
    remove_leftovers(path.parent)
    fd, tmp = tempfile.mkstemp(prefix=_staging_name(), suffix=f".{path.name}", dir=path.parent)
    os.close(fd)
    try:
        writer(Path(tmp))
        with critical():
            from ..mesh.output import publish

            publish(tmp, path)
    except BaseException:
        _unlink(Path(tmp))
        for folder in reversed(made):  # innermost first
            try:
                folder.rmdir()
            except OSError:
                break
        raise


__all__ = ["JOURNAL", "MANIFEST", "OutputDirectory", "check_directory", "check_file", "checked_path",
           "remove_leftovers", "write_file"]
