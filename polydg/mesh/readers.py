"""Mesh input: files (meshio formats, legacy VTK POLYDATA) and generator specs.

* Triangle / tetrahedron meshes in any format meshio reads (Gmsh .msh v2 and
  v4, VTU, ...); Gmsh physical groups on lines (2D) or triangles (3D) become
  boundary tags.
* Polygon meshes: VTU (or any meshio format) polygon cells, and legacy VTK
  ``DATASET POLYDATA`` files with ``POLYGONS``, both the VTK 5.1
  OFFSETS/CONNECTIVITY form and the older count-prefixed form, which meshio
  cannot read.  Polygons are triangulated (:mod:`polydg.mesh.polygon_mesh`).

Every failure is a :class:`~polydg.errors.MeshError` naming the file.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import numpy as np

from ..errors import MeshError
from .generators import from_spec, is_generator_spec
from .polygon_mesh import MERGE_TOL, count_prefixed_to_csr, polygon_mesh
from .simplicial import SimplexMesh

_FLOAT_TYPES = {"float", "double", "vtktypefloat32", "vtktypefloat64"}


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
    """
    path = Path(path)
    if not path.exists():
        raise MeshError(f"mesh file '{path}' not found")
    if not path.is_file():
        raise MeshError(f"mesh file '{path}' is not a file")
    if path.suffix.lower() == ".vtk" and _is_legacy_polydata(path):
        return read_vtk_polydata(path, merge_tol=merge_tol)
    return _read_with_meshio(path, merge_tol)


def _is_legacy_polydata(path: Path) -> bool:
    try:
        with open(path, "rb") as fh:
            head = fh.read(4096).decode("ascii", errors="replace").upper()
    except OSError as exc:
        raise MeshError(f"mesh file '{path}' cannot be read: {exc}") from None
    return "DATASET POLYDATA" in head


def read_vtk_polydata(path: str | os.PathLike, *, merge_tol: float = MERGE_TOL) -> SimplexMesh:
    """Legacy ASCII VTK POLYDATA with POLYGONS (VTK 5.1 or the older count-prefixed form)."""
    path = Path(path)
    src = str(path)
    try:
        text = path.read_text(encoding="ascii", errors="strict")
    except (OSError, UnicodeDecodeError) as exc:
        raise MeshError(f"{src}: cannot read as ASCII legacy VTK ({exc})") from None
    lines = text.splitlines()
    if len(lines) < 4 or not lines[0].startswith("# vtk DataFile"):
        raise MeshError(f"{src}: not a legacy VTK file (first line {lines[0][:40]!r})" if lines else f"{src}: empty file")
    if lines[2].strip().upper() != "ASCII":
        raise MeshError(f"{src}: only ASCII legacy VTK is supported (found {lines[2].strip()!r})")
    tokens = " ".join(lines[3:]).split()
    upper = [t.upper() for t in tokens]

    def find(word: str) -> int:
        try:
            return upper.index(word)
        except ValueError:
            raise MeshError(f"{src}: no {word} section") from None

    def numbers(start: int, count: int, dtype, what: str) -> np.ndarray:
        chunk = tokens[start:start + count]
        keyword = next((k for k, t in enumerate(chunk) if t[:1].isalpha() and t.upper() not in ("NAN", "INF")), None)
        if keyword is not None:
            raise MeshError(f"{src}: truncated {what}: {count} values announced, {keyword} found "
                            f"before {chunk[keyword]!r}")
        if len(chunk) < count:
            raise MeshError(f"{src}: truncated {what}: {count} values announced, {len(chunk)} found")
        try:
            return np.array(chunk, dtype=np.float64).astype(dtype) if dtype is not np.float64 else \
                np.array(chunk, dtype=np.float64)
        except ValueError:
            bad = next(t for t in chunk if not _is_number(t))
            raise MeshError(f"{src}: {what}: {bad!r} is not a number") from None

    for kind in ("LINES", "VERTICES", "TRIANGLE_STRIPS"):
        if kind in upper and kind != "POLYGONS":
            i = upper.index(kind)
            if i + 1 < len(tokens) and tokens[i + 1].isdigit() and int(tokens[i + 1]) > 0:
                raise MeshError(f"{src}: unsupported cell type {kind} in POLYDATA (only POLYGONS are read)")
    i = find("POINTS")
    try:
        n_points = int(tokens[i + 1])
    except (IndexError, ValueError):
        raise MeshError(f"{src}: malformed POINTS line") from None
    pts = numbers(i + 3, 3 * n_points, np.float64, "POINTS").reshape(-1, 3)
    j = find("POLYGONS")
    try:
        a, b = int(tokens[j + 1]), int(tokens[j + 2])
    except (IndexError, ValueError):
        raise MeshError(f"{src}: malformed POLYGONS line") from None
    if j + 3 < len(tokens) and upper[j + 3] == "OFFSETS":
        offsets = numbers(j + 5, a, np.int64, "OFFSETS")
        k = j + 5 + a
        if k >= len(tokens) or upper[k] != "CONNECTIVITY":
            raise MeshError(f"{src}: CONNECTIVITY must follow the {a} OFFSETS values")
        conn = numbers(k + 2, b, np.int64, "CONNECTIVITY")
        if len(offsets) == 0 or offsets[0] != 0 or (np.diff(offsets) < 0).any() or offsets[-1] != len(conn):
            raise MeshError(f"{src}: OFFSETS must increase from 0 to {len(conn)} (the CONNECTIVITY length)")
    else:
        values = numbers(j + 3, b, np.int64, "POLYGONS")
        offsets, conn = count_prefixed_to_csr(values, a)
        if offsets[0] < 0:
            raise MeshError(f"{src}: truncated POLYGONS: polygon {int(offsets[1])} runs past the {b} values announced")
    z = pts[:, 2]
    if np.isfinite(z).all() and np.abs(z).max(initial=0.0) > 0:
        raise MeshError(f"{src}: polygon meshes must lie in the plane z = 0 (max |z| = {np.abs(z).max():.3e})")
    return polygon_mesh(pts[:, :2], offsets, conn, source=src, merge_tol=merge_tol)


def _is_number(token: str) -> bool:
    try:
        float(token)
        return True
    except ValueError:
        return False


_TRIANGLES = ("triangle",)
_TETS = ("tetra",)


def _read_with_meshio(path: Path, merge_tol: float) -> SimplexMesh:
    import meshio

    src = str(path)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            mesh = meshio.read(path)
    except meshio.ReadError as exc:
        raise MeshError(f"{src}: cannot read mesh ({exc})") from None
    except (Exception, SystemExit) as exc:  # meshio raises many kinds (even SystemExit) on bad input
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise MeshError(f"{src}: cannot read mesh ({type(exc).__name__}: {msg})") from None
    points = np.asarray(mesh.points, dtype=np.float64)
    if points.ndim != 2 or len(points) == 0:
        raise MeshError(f"{src}: the file has no points")
    blocks = {}
    for block in mesh.cells:
        blocks.setdefault(block.type, []).append(block)
    types = set(blocks)
    volume_types = types - {"line", "vertex"} - ({"triangle"} if "tetra" in types else set())
    unsupported = {t for t in volume_types if t not in ("triangle", "tetra", "quad") and not t.startswith("polygon")}
    if unsupported or not volume_types:
        raise MeshError(f"{src}: unsupported cell types {sorted(unsupported or types) or ['none']}: need triangles, "
                        "tetrahedra or polygons")
    physical = _physical_tags(mesh)
    if types & set(_TETS):
        cells = np.concatenate([b.data for t in _TETS for b in blocks.get(t, [])]).astype(np.int64)
        facets, tags = _tagged(mesh, "triangle", physical)
        other = types - {"tetra", "triangle", "line", "vertex"}
        if other:
            raise MeshError(f"{src}: unsupported cell types {sorted(other)} beside tetrahedra")
        return SimplexMesh(points[:, :3], cells, facets, tags, source=src)
    if points.shape[1] == 3:
        z = points[:, 2]
        if np.isfinite(z).all() and np.abs(z).max(initial=0.0) > 0:
            raise MeshError(f"{src}: 2D cells with non-zero z coordinates are not supported")
        points = points[:, :2]
    polygon_types = {t for t in types if t.startswith("polygon") or t == "quad"}
    if "triangle" in types and not polygon_types:
        cells = np.concatenate([b.data for b in blocks["triangle"]]).astype(np.int64)
        facets, tags = _tagged(mesh, "line", physical)
        other = types - {"triangle", "line", "vertex"}
        if other:
            raise MeshError(f"{src}: unsupported cell types {sorted(other)} beside triangles")
        return SimplexMesh(points, cells, facets, tags, source=src)
    if polygon_types:
        other = types - polygon_types - {"triangle", "line", "vertex"}
        if other:
            raise MeshError(f"{src}: unsupported cell types {sorted(other)} beside polygons")
        rows = [b.data for t in sorted(types - {"line", "vertex"}) for b in blocks[t]]
        sizes = np.concatenate([np.full(len(r), r.shape[1]) for r in rows])
        offsets = np.r_[0, np.cumsum(sizes)].astype(np.int64)
        conn = np.concatenate([r.ravel() for r in rows]).astype(np.int64)
        return polygon_mesh(points, offsets, conn, source=src, merge_tol=merge_tol)
    raise MeshError(f"{src}: unsupported cell types {sorted(types) or ['none']}: need triangles, tetrahedra or "
                    "polygons")


def _physical_tags(mesh) -> list | None:
    for key in ("gmsh:physical", "medit:ref", "cell_tags"):
        if key in mesh.cell_data:
            return mesh.cell_data[key]
    return None


def _tagged(mesh, facet_type: str, physical) -> tuple[np.ndarray, np.ndarray]:
    facets, tags = [], []
    if physical is not None:
        for block, data in zip(mesh.cells, physical):
            if block.type == facet_type:
                facets.append(np.asarray(block.data, dtype=np.int64))
                tags.append(np.asarray(data, dtype=np.int64).reshape(-1))
    if not facets:
        return None, None
    return np.concatenate(facets), np.concatenate(tags)
