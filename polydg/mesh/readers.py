"""Mesh input: files (meshio formats, legacy VTK POLYDATA) and generator specs.

* Triangle / tetrahedron meshes in any format meshio reads (Gmsh .msh v2 and
  v4, VTU, legacy VTK, ...); Gmsh physical groups on lines (2D) or triangles
  (3D) become boundary tags.  A ``.msh`` file is read as Gmsh unless it looks
  like ANSYS (it begins with a parenthesis).
* Polygon meshes: VTU (or any meshio format) polygon cells, and legacy VTK
  ``DATASET POLYDATA`` files with ``POLYGONS``, both the VTK 5.1
  OFFSETS/CONNECTIVITY form and the older count-prefixed form, which meshio
  cannot read.  Polygons are triangulated (:mod:`polydg.mesh.polygon_mesh`).
* Cell data (meshio formats): every numeric array of the volume cells is kept,
  by name, on the mesh's fine cells (``SimplexMesh.cell_data``: one row per
  triangle or tetrahedron, or per polygon of a polygon mesh), for
  :class:`~polydg.problem.data.CellData`.

Every failure is a :class:`~polydg.errors.MeshError` with a one-line message
naming the file.  What meshio prints or warns on the way is captured and
becomes part of that message; when the file is read nonetheless it becomes a
:class:`~polydg.errors.MeshWarning`.  A meshio reader that runs out of time
(some loop forever on a truncated file) is stopped and reported the same way.
"""

from __future__ import annotations

import itertools
import os
import re
import threading
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import CapturedOutput, MeshError, MeshWarning, capture_output, one_line
from .generators import from_spec, is_generator_spec
from .polygon_mesh import MERGE_TOL, count_prefixed_to_csr, polygon_mesh
from .simplicial import SimplexMesh

#: a meshio reader is stopped after this many seconds plus READ_SECONDS_PER_MB for every
#: megabyte of the file: generous for a valid file, a bound for a reader stuck in a loop
READ_SECONDS = 10.0
READ_SECONDS_PER_MB = 10.0

#: format names in messages (others: meshio's name in capitals)
_FORMAT_NAMES = {"gmsh": "Gmsh", "vtk": "legacy VTK", "vtu": "VTU", "ansys": "ANSYS"}

#: the longest piece of a third-party message quoted in ours
_QUOTE_LENGTH = 200


def load_mesh(spec: str | os.PathLike) -> SimplexMesh:
    """A generator spec (``square:16``, see :mod:`polydg.mesh.generators`) or a mesh file."""
    text = os.fspath(spec)
    if is_generator_spec(text):
        return from_spec(text)
    if not Path(text).exists() and ":" in text and "/" not in text and "." not in text.split(":")[0]:
        from .generators import GENERATORS

        raise MeshError(f"mesh {text!r} is neither a file nor a known generator: unknown mesh generator "
                        f"{text.split(':')[0]!r} (known: {', '.join(GENERATORS)})")
    return read_mesh(text)


def read_mesh(path: str | os.PathLike, *, merge_tol: float = MERGE_TOL) -> SimplexMesh:
    """Read a simplicial or polygon mesh file into a :class:`SimplexMesh`.

    For polygon files ``cell_element`` holds the polygon of every triangle.
    Raises :class:`MeshError` for every file that does not hold a valid mesh.
    """
    path = Path(path)
    try:
        exists, is_file = path.exists(), path.is_file()
    except (OSError, ValueError) as exc:  # e.g. a name too long for the file system
        raise MeshError(f"mesh file '{path}' cannot be accessed ({one_line(exc)})") from None
    if not exists:
        raise MeshError(f"mesh file '{path}' not found")
    if not is_file:
        raise MeshError(f"mesh file '{path}' is not a file")
    try:
        with open(path, "rb") as fh:
            head = fh.read(4096)
    except OSError as exc:
        raise MeshError(f"mesh file '{path}' cannot be read ({one_line(exc)})") from None
    if not head:
        raise MeshError(f"mesh file '{path}': the file is empty")
    if path.suffix.lower() == ".vtk" and re.search(rb"DATASET\s+POLYDATA", head.upper()):
        return read_vtk_polydata(path, merge_tol=merge_tol)
    return _read_with_meshio(path, head, merge_tol)


# ---------------------------------------------------------------------------
# legacy VTK POLYDATA, our own parser


def read_vtk_polydata(path: str | os.PathLike, *, merge_tol: float = MERGE_TOL) -> SimplexMesh:
    """Legacy ASCII VTK POLYDATA with POLYGONS (VTK 5.1 or the older count-prefixed form).

    The file's tokens are what ``str.split()`` separates after its three header lines, and a section
    is found by its keyword's first token in any case.  Numbers are read where they lie in the bytes
    (:class:`_PolydataText`), never one Python object per token, so a file of millions of polygons
    reads at the speed of NumPy's parser.
    """
    path = Path(path)
    where = f"mesh file '{path}'"
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise MeshError(f"{where} cannot be read ({one_line(exc)})") from None
    if not data.isascii():
        offset = int(np.argmax(np.frombuffer(data, dtype=np.uint8) >= 0x80))
        raise MeshError(f"{where}: not an ASCII legacy VTK file (byte 0x{data[offset]:02x} at offset {offset})")
    if not data:
        raise MeshError(f"{where}: the file is empty")
    header, body = [], 0  # the first three lines, as str.splitlines() cuts them, and where the rest begins
    for line_break in itertools.islice(_LINE_BREAK.finditer(data), 3):
        header.append(data[body:line_break.start()].decode("ascii"))
        body = line_break.end()
    first = header[0] if header else data[:64].decode("ascii")
    if not first.startswith("# vtk DataFile"):
        raise MeshError(f"{where}: not a legacy VTK file (its first line is {first[:40]!r}, "
                        "not '# vtk DataFile Version ...')")
    if len(header) < 3 or body == len(data):
        n_lines = len(header) + (body < len(data))
        raise MeshError(f"{where}: truncated header ({n_lines} lines, a legacy VTK header has 4)")
    if header[2].strip().upper() != "ASCII":
        raise MeshError(f"{where}: only ASCII legacy VTK is supported (found {header[2].strip()[:40]!r})")
    text = _PolydataText(data, body, where)

    for kind in ("LINES", "VERTICES", "TRIANGLE_STRIPS"):
        at = text.find(kind)
        if at is not None:
            size, _ = text.tokens(at, 1)
            if size and size[0].isdigit() and int(size[0]) > 0:
                raise MeshError(f"{where}: unsupported cell type {kind} in POLYDATA (only POLYGONS are read)")
    header_words, at = text.tokens(text.section("POINTS"), 2)  # the count and the type
    n_points = text.count(header_words, 0, "POINTS")
    pts, _ = text.numbers(at, 3 * n_points, np.float64, "POINTS")
    pts = pts.reshape(-1, 3)
    header_words, at = text.tokens(text.section("POLYGONS"), 2)
    n_first, n_second = text.count(header_words, 0, "POLYGONS"), text.count(header_words, 1, "POLYGONS")
    following, after = text.tokens(at, 1)
    if following and following[0].upper() == "OFFSETS":
        _, at = text.tokens(after, 1)  # the type
        offsets, at = text.numbers(at, n_first, np.int64, "OFFSETS")
        following, at = text.tokens(at, 1)
        if not following or following[0].upper() != "CONNECTIVITY":
            raise MeshError(f"{where}: CONNECTIVITY must follow the {n_first} OFFSETS values")
        _, at = text.tokens(at, 1)  # the type
        conn, _ = text.numbers(at, n_second, np.int64, "CONNECTIVITY")
        if len(offsets) == 0 or offsets[0] != 0 or (np.diff(offsets) < 0).any() or offsets[-1] != len(conn):
            raise MeshError(f"{where}: OFFSETS must increase from 0 to {len(conn)} (the CONNECTIVITY length)")
    else:
        values, end = text.numbers(at, n_second, np.int64, "POLYGONS")
        if n_first > len(values):  # every polygon takes at least its vertex count
            raise MeshError(f"{where}: POLYGONS announces {n_first} polygons in {len(values)} values")
        following, _ = text.tokens(end, 1)
        if following and not following[0][:1].isalpha():  # a number where the next keyword (or the end) belongs
            _, more = text.extent(end, len(text.data))
            raise MeshError(f"{where}: POLYGONS announces {n_first} polygons in {n_second} values, but its section "
                            f"has {n_second + more} values")
        offsets, conn = count_prefixed_to_csr(values, n_first)
        if offsets[0] < 0:
            raise MeshError(f"{where}: truncated POLYGONS: polygon {int(offsets[1])} runs past the "
                            f"{n_second} values announced")
        if offsets[-1] + n_first != n_second:  # each polygon takes its vertex count and its vertices
            raise MeshError(f"{where}: POLYGONS announces {n_first} polygons in {n_second} values, but the "
                            f"polygons take {int(offsets[-1]) + n_first}")
    z = pts[:, 2]
    if not np.isfinite(z).all():
        i = int(np.flatnonzero(~np.isfinite(z))[0])
        raise MeshError(f"{where}: point {i} has a non-finite z coordinate ({z[i]})")
    if np.abs(z).max(initial=0.0) > 0:
        raise MeshError(f"{where}: polygon meshes must lie in the plane z = 0 (max |z| = {np.abs(z).max():.3e})")
    return polygon_mesh(pts[:, :2], offsets, conn, source=str(path), merge_tol=merge_tol)


#: what str.split() separates tokens by, and where str.splitlines() ends a line, among ASCII bytes
_SPACE = b" \t\n\r\x0b\x0c\x1c\x1d\x1e\x1f"
_LINE_BREAK = re.compile(rb"\r\n|[\n\r\x0b\x0c\x1c\x1d\x1e]")
_TOKEN = re.compile(rb"[^ \t\n\r\x0b\x0c\x1c-\x1f]+")


def _byte_class(members: bytes) -> np.ndarray:
    """A table of the 256 byte values, True for ``members``."""
    table = np.zeros(256, dtype=bool)
    table[np.frombuffer(members, dtype=np.uint8)] = True
    return table


_IS_SPACE = _byte_class(_SPACE)
_IS_LETTER = _byte_class(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
_IS_DIGIT = _byte_class(b"0123456789")
#: the bytes of a section that np.fromstring reads as int() and float() read each token (with the checks in
#: _PolydataText.parsed): C's whitespace, digits, signs, and the point and exponent of a float
_PARSED_BYTES = {np.int64: _byte_class(b"0123456789+- \t\n\r\x0b\x0c"),
                 np.float64: _byte_class(b"0123456789+-.eE \t\n\r\x0b\x0c")}


class _PolydataText:
    """The tokens of a legacy VTK file after its header, read in place: offsets into the file's bytes.

    A section of n numbers runs from an offset to the (n + 1)-th token after it, or to the first token
    that begins with a letter (the next keyword), or to the end of the file; NumPy finds that end over
    the bytes and parses the section at once.  Tokens that NumPy's parser would read differently from
    ``int()`` and ``float()`` (a bare sign, ``nan``, an integer past 64 bits, ``1_000``) send the section
    to a reading token by token, which also names the token that is not a number.
    """

    def __init__(self, data: bytes, body: int, where: str):
        self.data, self.body, self.where = data, body, where
        self.bytes = np.frombuffer(data, dtype=np.uint8)
        self.upper = data.upper()

    def find(self, word: str) -> int | None:
        """The offset just past the first token that is ``word`` in any case; None where there is none."""
        key, size = word.encode("ascii"), len(self.data)
        at = self.upper.find(key, self.body)
        while at >= 0:  # the byte before ``body`` ends a line, so it is a space too
            end = at + len(key)
            if self.data[at - 1] in _SPACE and (end == size or self.data[end] in _SPACE):
                return end
            at = self.upper.find(key, at + 1)
        return None

    def section(self, word: str) -> int:
        """The offset just past the keyword ``word`` of a section the file must have."""
        at = self.find(word)
        if at is None:
            raise MeshError(f"{self.where}: no {word} section")
        return at

    def tokens(self, at: int, k: int) -> tuple[list[str], int]:
        """The (up to) ``k`` tokens after offset ``at``, and the offset past them (the end of the file
        where there are fewer)."""
        found = list(itertools.islice(_TOKEN.finditer(self.data, at), k))
        end = found[-1].end() if 0 < len(found) == k else len(self.data)
        return [m.group().decode("ascii") for m in found], end

    def count(self, words: list[str], i: int, what: str) -> int:
        """The non-negative integer ``words[i]``, a size announced by a section header."""
        try:
            value = int(words[i])
        except (IndexError, ValueError):
            raise MeshError(f"{self.where}: malformed {what} line") from None
        if value < 0:
            raise MeshError(f"{self.where}: {what} announces {value} values")
        return value

    def numbers(self, at: int, n: int, dtype: type, what: str) -> tuple[np.ndarray, int]:
        """The ``n`` numbers after offset ``at``, and the offset past them."""
        end, found = self.extent(at, n)
        if found < n:
            if end == len(self.data):
                raise MeshError(f"{self.where}: truncated {what}: {n} values announced, {found} found")
            word = self.tokens(end, 1)[0][0]
            if word.upper() not in ("NAN", "INF"):
                raise MeshError(f"{self.where}: truncated {what}: {n} values announced, {found} found "
                                f"before {word[:40]!r}")
            return self.numbers_one_by_one(at, n, dtype, what)
        values = self.parsed(self.data[at:end], n, dtype)
        if values is None:
            return self.numbers_one_by_one(at, n, dtype, what)
        return values, end

    def extent(self, at: int, n: int) -> tuple[int, int]:
        """Where the numbers after ``at`` end: the start of the (n + 1)-th token, of the first token that
        begins with a letter, or the end of the file, whichever comes first; and the tokens before it."""
        size, window = len(self.data), 16 * n + 256
        while True:
            stop = min(size, at + window)
            chunk = self.bytes[at:stop]
            space = _IS_SPACE[chunk]
            begins = ~space
            begins[1:] &= space[:-1]
            letter = begins & _IS_LETTER[chunk]
            cut = int(np.argmax(letter)) if letter.any() else len(chunk)
            found = int(np.count_nonzero(begins[:cut]))
            if found > n:
                return at + int(np.flatnonzero(begins[:cut])[n]), n
            if cut < len(chunk) or stop == size:
                return at + cut, found
            window *= 2

    @staticmethod
    def parsed(section: bytes, n: int, dtype: type) -> np.ndarray | None:
        """The ``n`` numbers of ``section`` parsed by NumPy, where that is provably what ``int()`` or
        ``float()`` make of each token; None elsewhere."""
        if n == 0:
            return np.empty(0, dtype=dtype)
        chars = np.frombuffer(section, dtype=np.uint8)
        if not _PARSED_BYTES[dtype][chars].all():
            return None
        if dtype is np.int64:  # np.fromstring reads a sign without digits as 0
            sign = np.flatnonzero((chars == ord("+")) | (chars == ord("-")))
            if len(sign) and (sign[-1] == len(chars) - 1 or not _IS_DIGIT[chars[sign + 1]].all()):
                return None
        with warnings.catch_warnings():
            warnings.simplefilter("error", DeprecationWarning)  # np.fromstring stopped before the end
            try:
                values = np.fromstring(section, dtype=dtype, sep=" ")
            except (ValueError, DeprecationWarning):
                return None
        if len(values) != n:
            return None
        if dtype is np.int64 and ((values >= 10**18) | (values <= -10**18)).any():
            return None  # np.fromstring saturates past 64 bits, where int() overflows
        return values

    def numbers_one_by_one(self, at: int, n: int, dtype: type, what: str) -> tuple[np.ndarray, int]:
        """:meth:`numbers` token by token, for the sections NumPy's parser cannot be trusted with."""
        chunk, end = self.tokens(at, n)
        keyword = next((k for k, t in enumerate(chunk) if t[:1].isalpha() and t.upper() not in ("NAN", "INF")), None)
        if keyword is not None:
            raise MeshError(f"{self.where}: truncated {what}: {n} values announced, {keyword} found "
                            f"before {chunk[keyword][:40]!r}")
        if len(chunk) < n:
            raise MeshError(f"{self.where}: truncated {what}: {n} values announced, {len(chunk)} found")
        try:
            return np.array(chunk, dtype=dtype), end
        except (ValueError, OverflowError):
            bad = next(t for t in chunk if not _is_number(t, dtype))
            kind = "an integer index" if dtype is np.int64 else "a number"
            raise MeshError(f"{self.where}: {what}: {bad[:40]!r} is not {kind}") from None


def _is_number(token: str, dtype: type) -> bool:
    try:
        np.array([token], dtype=dtype)
        return True
    except (ValueError, OverflowError):
        return False


# ---------------------------------------------------------------------------
# everything else, through meshio


def _meshio_formats(path: Path) -> list[str]:
    """The formats meshio would try for ``path``, by its (possibly double) extension."""
    import meshio

    formats, extension = [], ""
    for suffix in reversed(path.suffixes):
        extension = (suffix + extension).lower()
        formats += meshio.extension_to_filetypes.get(extension, [])
    return formats


def _read_with_meshio(path: Path, head: bytes, merge_tol: float) -> SimplexMesh:
    import meshio

    where = f"mesh file '{path}'"
    formats = _meshio_formats(path)
    if not formats:
        raise MeshError(f"{where}: unknown mesh file extension {path.suffix!r} (known: legacy VTK .vtk, VTU .vtu, "
                        "Gmsh .msh and the other formats of meshio)")
    if "gmsh" in formats and "ansys" in formats:
        # meshio would try ANSYS first, whose reader can loop forever on a damaged Gmsh file
        formats = ["ansys"] if head.lstrip().startswith(b"(") else ["gmsh"]
    name = " or ".join(_FORMAT_NAMES.get(f, f.upper()) for f in formats)
    file_format = formats[0] if len(formats) == 1 else None  # None: meshio tries them in turn
    seconds = READ_SECONDS + READ_SECONDS_PER_MB * path.stat().st_size / 1e6
    with capture_output() as said:
        try:
            mesh = _call_with_time_limit(lambda: meshio.read(path, file_format=file_format), seconds)
        except _OutOfTime:
            failure = (f"the reader did not finish within {seconds:.0f} s and was stopped; some of meshio's "
                       "readers loop forever on a truncated file")
        except MemoryError:
            failure = "out of memory (the file is too large, or a count in it is corrupt)"
        except (Exception, SystemExit) as exc:  # meshio raises many kinds (even SystemExit) on bad input
            failure = _describe(exc)
        else:
            failure = None
    complaints = _meshio_complaints(said)
    if failure is not None:
        details = "; ".join(c for c in complaints + [failure] if c) or _no_reason(path, head, formats)
        raise MeshError(f"{where}: cannot be read as {name} (meshio: {details})")
    try:
        fine = _from_meshio(mesh, where, str(path), merge_tol)
    except MeshError as exc:
        if complaints:
            raise MeshError(f"{exc} (meshio: {'; '.join(complaints)})") from None
        raise
    if complaints:
        warnings.warn(f"{where}: read as {name}, but meshio says: {'; '.join(complaints)}", MeshWarning,
                      stacklevel=3)
    return fine


def _describe(exc: BaseException) -> str:
    """A failure of a meshio reader in a few words; "" where meshio printed the reason itself."""
    if isinstance(exc, SystemExit):  # meshio prints its reasons, then exits
        return ""
    if isinstance(exc, UnicodeDecodeError):
        return f"binary data where text was expected (byte 0x{exc.object[exc.start]:02x} at offset {exc.start})"
    import meshio

    text = one_line(exc)
    if isinstance(exc, meshio.ReadError):
        return _shortened(text)
    return _shortened(f"{type(exc).__name__}: {text}" if text else type(exc).__name__)


def _meshio_complaints(said: CapturedOutput) -> list[str]:
    """What meshio printed and warned, one line per message, without its closing "Couldn't read file"."""
    text = said.printed
    summary = text.find("Couldn't read file")  # meshio's own last word after a failure: ours replaces it
    if summary >= 0:
        text = text[:text.rfind("\n", 0, summary) + 1]
    # meshio prints warnings through rich, which wraps long lines: a message runs to the next "Warning:"
    messages = re.split(r"(?m)^\s*(?:Warning|Error):\s*", text)
    complaints = [_shortened(one_line(m)) for m in messages if m.strip()]
    return list(dict.fromkeys(complaints + [_shortened(w) for w in said.warning_texts()]))


def _no_reason(path: Path, head: bytes, formats: list[str]) -> str:
    """What we can say where meshio failed without a reason: how the XML fails, or how the file begins."""
    if "vtu" in formats:
        from xml.etree import ElementTree

        try:
            ElementTree.parse(path)
        except ElementTree.ParseError as exc:
            return f"no reason given; not well-formed XML: {_shortened(one_line(exc))}"
        except OSError:
            pass
    line = head.lstrip().split(b"\n", 1)[0].strip()
    if not line.isascii() or not line.decode("ascii").isprintable():
        return "no reason given; the file begins with binary data"
    return f"no reason given; the file begins with {_shortened(repr(line.decode('ascii')))}"


def _shortened(text: str) -> str:
    return text if len(text) <= _QUOTE_LENGTH else text[:_QUOTE_LENGTH - 3] + "..."


class _OutOfTime(Exception):
    """A reader did not finish in time (raised in the caller, and inside the reader to stop it)."""


def _call_with_time_limit(function: Callable[[], Any], seconds: float) -> Any:
    """``function()``, run in a worker thread that is stopped after ``seconds``.

    Python cannot kill a thread, but it can raise an exception in one: the
    reader gets :class:`_OutOfTime` at its next bytecode, so that a loop
    that never ends (reading past the end of a truncated file) unwinds and
    closes its file.  Code stuck inside one compiled call is left running.
    """
    outcome: dict[str, Any] = {}

    def work() -> None:
        try:
            outcome["value"] = function()
        except BaseException as exc:  # SystemExit included: meshio exits after printing its reasons
            outcome["error"] = exc

    worker = threading.Thread(target=work, name="polydg mesh reader", daemon=True)
    worker.start()
    try:
        worker.join(seconds)
    finally:  # out of time, or interrupted (Ctrl-C) while waiting
        if worker.is_alive():
            _raise_in_thread(worker, _OutOfTime)
            worker.join(1.0)
    if worker.is_alive() or isinstance(outcome.get("error"), _OutOfTime):
        raise _OutOfTime()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def _raise_in_thread(thread: threading.Thread, exc_type: type[BaseException]) -> None:
    import ctypes

    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident), ctypes.py_object(exc_type))


# ---------------------------------------------------------------------------
# meshio's Mesh to ours

_TETS = ("tetra",)
_POINT_TYPES = {"line", "vertex"}


def _from_meshio(mesh: Any, where: str, source: str, merge_tol: float) -> SimplexMesh:
    """The :class:`SimplexMesh` of a meshio Mesh: tetrahedra, triangles, or polygons (quads included)."""
    try:
        points = np.asarray(mesh.points, dtype=np.float64)
    except (TypeError, ValueError):
        raise MeshError(f"{where}: the points are not numbers") from None
    if points.ndim != 2 or len(points) == 0:
        raise MeshError(f"{where}: the file has no points")
    if points.shape[1] not in (2, 3):
        raise MeshError(f"{where}: points have {points.shape[1]} coordinates (2 or 3 needed)")
    blocks: dict[str, list[np.ndarray]] = {}
    for block in mesh.cells:
        blocks.setdefault(block.type, []).append(_indices(block.data, f"{block.type} cells' vertex indices", where))
    types = set(blocks)
    volume_types = types - _POINT_TYPES - ({"triangle"} if "tetra" in types else set())
    unsupported = {t for t in volume_types if t not in ("triangle", "tetra", "quad") and not t.startswith("polygon")}
    if unsupported or not volume_types:
        raise MeshError(f"{where}: unsupported cell types {sorted(unsupported or types) or ['none']}: need "
                        "triangles, tetrahedra or polygons")
    physical = _physical_tags(mesh)
    if types & set(_TETS):
        other = types - {"tetra", "triangle"} - _POINT_TYPES
        if other:
            raise MeshError(f"{where}: unsupported cell types {sorted(other)} beside tetrahedra")
        if points.shape[1] != 3:
            raise MeshError(f"{where}: tetrahedra need 3D points, the file has 2D points")
        cells = np.concatenate(blocks["tetra"])
        facets, tags = _tagged(mesh, "triangle", physical, where)
        return SimplexMesh(points, cells, facets, tags, source=source, cell_data=_cell_data(mesh, ["tetra"]))
    if points.shape[1] == 3:
        z = points[:, 2]
        if not np.isfinite(z).all():
            i = int(np.flatnonzero(~np.isfinite(z))[0])
            raise MeshError(f"{where}: point {i} has a non-finite z coordinate ({z[i]})")
        if np.abs(z).max(initial=0.0) > 0:
            raise MeshError(f"{where}: 2D cells with non-zero z coordinates are not supported")
        points = points[:, :2]
    polygon_types = {t for t in types if t.startswith("polygon") or t == "quad"}
    if not polygon_types:
        cells = np.concatenate(blocks["triangle"])
        facets, tags = _tagged(mesh, "line", physical, where)
        return SimplexMesh(points, cells, facets, tags, source=source, cell_data=_cell_data(mesh, ["triangle"]))
    polygon_order = sorted(types - _POINT_TYPES)
    rows = [r for t in polygon_order for r in blocks[t]]
    sizes = np.concatenate([np.full(len(r), r.shape[1]) for r in rows])
    offsets = np.r_[0, np.cumsum(sizes)].astype(np.int64)
    conn = np.concatenate([r.ravel() for r in rows])
    fine = polygon_mesh(points, offsets, conn, source=source, merge_tol=merge_tol)
    fine.cell_data = _cell_data(mesh, polygon_order)  # one row per polygon, in the order of ``rows``
    fine.check()
    return fine


def _cell_data(mesh: Any, cell_types: list[str]) -> dict[str, np.ndarray]:
    """meshio's cell data of the blocks of ``cell_types`` (in that order of types, each in file order), one row
    per cell, by name; arrays that are not numbers (or not one row per cell) are left out."""
    out = {}
    for name, arrays in mesh.cell_data.items():
        pieces = [np.asarray(data) for t in cell_types for block, data in zip(mesh.cells, arrays) if block.type == t]
        sizes = [len(block.data) for t in cell_types for block in mesh.cells if block.type == t]
        if not pieces or any(p.ndim == 0 or len(p) != n or p.dtype.kind not in "biuf" for p, n in zip(pieces, sizes)):
            continue
        if len({p.shape[1:] for p in pieces}) == 1:
            out[str(name)] = np.concatenate(pieces)
    return out


def _indices(data: Any, what: str, where: str, ndim: int = 2) -> np.ndarray:
    """A block's vertex indices (or tags, ``ndim=1``) as int64; the file's numbers must be integers."""
    try:
        array = np.asarray(data)
        if ndim == 1:
            array = array.reshape(-1)
        if array.ndim != ndim:
            raise ValueError
        if not np.issubdtype(array.dtype, np.integer):
            as_float = array.astype(np.float64)
            if not (np.isfinite(as_float).all() and (as_float == np.round(as_float)).all()
                    and np.abs(as_float).max(initial=0) < 2.0**62):
                raise ValueError
        return array.astype(np.int64)
    except (TypeError, ValueError, OverflowError):
        raise MeshError(f"{where}: the {what} are not integers in a table") from None


def _physical_tags(mesh: Any) -> list | None:
    for key in ("gmsh:physical", "medit:ref", "cell_tags"):
        if key in mesh.cell_data:
            return mesh.cell_data[key]
    return None


def _tagged(mesh: Any, facet_type: str, physical: list | None, where: str) -> tuple[np.ndarray, np.ndarray]:
    """The boundary facets of type ``facet_type`` and their physical tags (None, None without tags)."""
    facets, tags = [], []
    if physical is not None:
        for block, data in zip(mesh.cells, physical):
            if block.type == facet_type:
                tag = _indices(data, f"physical tags of the {facet_type} cells", where, ndim=1)
                if len(tag) != len(block.data):
                    raise MeshError(f"{where}: {len(tag)} physical tags for {len(block.data)} {facet_type} cells")
                facets.append(_indices(block.data, f"{facet_type} cells' vertex indices", where))
                tags.append(tag)
    if not facets:
        return None, None
    return np.concatenate(facets), np.concatenate(tags)
