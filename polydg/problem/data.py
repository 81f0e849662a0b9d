"""Coefficients from data: values per fine cell, per element, or on a Cartesian grid (docs/design.md §6).

Three kinds, each usable as a problem's diffusion, reaction or source:

* :class:`CellData`: a value per *fine cell*, the cells of the input mesh: its triangles or
  tetrahedra, or the polygons of a polygon mesh file (``SimplexMesh.cell_element``).  From an
  array, or from a mesh file's cell data (:meth:`CellData.from_mesh`).
* :class:`ElementData`: a value per (agglomerated) element of the polytopic mesh.
* :class:`GridData`: values on a Cartesian grid with its bounds, piecewise constant (a value per
  grid cell) or multilinear (a value per grid node).  A plain function of x: any coefficient, on
  any path (the linear kernels, the GPU, the ranks).

A value is a scalar or, for a diffusion, a symmetric positive semi-definite (d, d) tensor; the
values are checked when the data is made (finite, symmetric, semi-definite: a one-line
:class:`~polydg.errors.ProblemError` naming the first bad cell).

Cell and element data are functions of where a point lies, not of x: their ``__call__(x, where)``
names the parameter ``where``, and the assembly hands such a coefficient each point's
:class:`PointLocation` (its element and fine cell; on an interior face those of the side whose trace
is taken, so that a coefficient may jump across the face).  Any coefficient callable may name
``where`` the same way.  Such problems are assembled by the sided executor
(:mod:`polydg.assembly.sided`, which :func:`polydg.assembly.assemble` and
:func:`polydg.nonlinear.solve_nonlinear` choose by themselves); sub-simplex quadrature then integrates
a per-fine-cell coefficient exactly, and the penalty takes its largest value over each element.

>>> values = np.array([1.0, 2.0, 3.0])
>>> CellData(values)(np.zeros((2, 2)), PointLocation(element=np.array([0, 0]), cell=np.array([2, 0]))).tolist()
[3.0, 1.0]
>>> GridData(np.array([[0.0, 1.0], [2.0, 3.0]]), (0, 1, 0, 1), linear=True)(np.array([[0.5, 0.5]])).tolist()
[1.5]
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..backend import array_namespace, contiguous, to_host
from ..errors import ProblemError

#: relative tolerance of the symmetry and semi-definiteness checks of tensor values
SPD_TOL = 1e-10
#: how far (relative to the grid's extent) a point may lie outside a grid and read its border value
GRID_TOL = 1e-9
#: a point this close to a grid cells' border (in grid cells) lies on it (GridData's harmonic mean)
BORDER_TOL = 1e-9
#: the coefficients that may be data per cell or element (they are evaluated on one side of a face)
DATA_COEFFICIENTS = ("diffusion", "reaction", "source")


@dataclass(frozen=True)
class PointLocation:
    """Where a batch of points lies: ``element`` (n,) and fine ``cell`` (n,) of each point (int64; -1: not
    known, e.g. coarse quadrature simplices)."""

    element: np.ndarray
    cell: np.ndarray


def _format(values: np.ndarray) -> str:
    return str(np.round(values, 12).tolist())


def checked_values(values: Any, source: str, per: str, label=None) -> np.ndarray:
    """``values`` as float64 (n,) scalars or (n, k, k) tensors (given as (n, k, k), (n, k * k) or (n, 1)):
    finite, tensors symmetric positive semi-definite; else a one-line ProblemError naming ``source`` and the
    first bad entry, ``label(i)`` (default: "``per`` i")."""
    label = label or (lambda i: f"{per} {i}")
    if np.iscomplexobj(values):
        raise ProblemError(f"{source}: values are complex; coefficients are real")
    try:
        array = np.array(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise ProblemError(f"{source}: values are not numbers ({type(values).__name__})") from None
    if array.ndim == 2 and array.shape[1] == 1:
        array = array[:, 0]
    elif array.ndim == 2 and array.shape[1] in (4, 9):
        k = int(round(np.sqrt(array.shape[1])))
        array = array.reshape(-1, k, k)
    if not (array.ndim == 1 or (array.ndim == 3 and array.shape[1] == array.shape[2])) or len(array) == 0:
        raise ProblemError(f"{source}: values of shape {array.shape}, expected one scalar (n,) or one (d, d) tensor "
                           f"(n, d, d) per {per}")
    bad = ~np.isfinite(array.reshape(len(array), -1)).all(axis=1)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        kind = "NaN" if np.isnan(array[i]).any() else "inf"
        raise ProblemError(f"{source}: {kind} at {label(i)} ({int(bad.sum())} of {len(array)} {per}s)")
    if array.ndim == 3:
        scale = np.abs(array).reshape(len(array), -1).max(axis=1)
        asym = np.abs(array - array.transpose(0, 2, 1)).reshape(len(array), -1).max(axis=1) > SPD_TOL * scale
        if asym.any():
            i = int(np.flatnonzero(asym)[0])
            raise ProblemError(f"{source}: the tensor of {label(i)} is not symmetric: {_format(array[i])}")
        lowest = np.linalg.eigvalsh(array)[:, 0]
        indefinite = lowest < -SPD_TOL * scale
        if indefinite.any():
            i = int(np.flatnonzero(indefinite)[0])
            raise ProblemError(f"{source}: the tensor of {label(i)} is not positive semi-definite (eigenvalue "
                               f"{lowest[i]:.6g}): {_format(array[i])}")
    return array


class _IndexedData:
    """Values indexed by where a point lies (:class:`PointLocation`); see :class:`CellData`."""

    per = "cell"

    def __init__(self, values: Any, *, source: str | None = None):
        self.source = source or f"{self.per} data"
        self.values = checked_values(values, self.source, self.per)

    @property
    def tensor(self) -> bool:
        """True for a (d, d) tensor per entry, False for scalars."""
        return self.values.ndim == 3

    def __len__(self) -> int:
        return len(self.values)

    def _index(self, where: PointLocation) -> np.ndarray:
        raise NotImplementedError

    def __call__(self, x: Any, where: PointLocation) -> np.ndarray:
        index = np.asarray(self._index(where))
        if index.size and (index.min() < 0 or index.max() >= len(self.values)):
            bad = int(np.flatnonzero((index < 0) | (index >= len(self.values)))[0])
            raise ProblemError(f"{self.source}: a point lies in {self.per} {int(index[bad])}, which has no value "
                               f"({len(self.values)} values" + ("; -1: a sub-simplex across fine cells, use fine "
                                                                "quadrature simplices)" if index[bad] < 0 else ")"))
        return self.values[index]

    def __repr__(self) -> str:
        kind = f"{self.values.shape[1]}x{self.values.shape[1]} tensors" if self.tensor else "scalars"
        return f"{type(self).__name__}({len(self)} {kind}, source={self.source!r})"


class CellData(_IndexedData):
    """A value per fine cell (the module docstring): ``values`` (n_cells,) scalars or (n_cells, d, d) tensors.

    >>> from polydg.mesh import unit_square
    >>> fine = unit_square(2)
    >>> fine.cell_data["k"] = np.arange(8.0)
    >>> CellData.from_mesh(fine, "k")
    CellData(8 scalars, source="cell data 'k' of square:2")
    """

    per = "cell"

    @classmethod
    def from_mesh(cls, fine, name: str, *, source: str | None = None) -> "CellData":
        """The cell data array ``name`` of the fine mesh ``fine`` (a :class:`~polydg.mesh.SimplexMesh`, e.g. read
        from a .vtu); 2D tensors stored as VTK's nine components are read as their 2 x 2 block."""
        source = source or f"cell data {name!r} of {fine.source}"
        data = getattr(fine, "cell_data", None) or {}
        if name not in data:
            present = ", ".join(sorted(data)) or "none"
            raise ProblemError(f"{source}: {fine.source!r} has no cell data {name!r} (it has: {present})")
        values = np.asarray(data[name])
        if fine.dim == 2 and values.ndim >= 2 and values[0].size == 9:  # a VTK tensor of a planar mesh
            full = values.reshape(len(values), 3, 3)
            coupled = np.abs(full[:, 2, :2]).max(axis=1) + np.abs(full[:, :2, 2]).max(axis=1) > 0
            if coupled.any():
                i = int(np.flatnonzero(coupled)[0])
                raise ProblemError(f"{source}: cell {i}'s 3 x 3 tensor couples z to the plane of the 2D mesh: "
                                   f"{_format(full[i])}")
            values = full[:, :2, :2]
        made = cls(values, source=source)
        if len(made) != fine.n_fine_cells:  # pragma: no cover - SimplexMesh.check keeps cell data one row a cell
            raise ProblemError(f"{source}: {len(made)} values, expected one per fine cell ({fine.n_fine_cells})")
        return made

    def _index(self, where: PointLocation) -> np.ndarray:
        return where.cell


class ElementData(_IndexedData):
    """A value per element of the polytopic mesh: ``values`` (n_elements,) scalars or (n_elements, d, d) tensors.

    >>> ElementData([[[2.0, 0.0], [0.0, 1.0]]])
    ElementData(1 2x2 tensors, source='element data')
    """

    per = "element"

    def _index(self, where: PointLocation) -> np.ndarray:
        return where.element


class GridData:
    """Values on a Cartesian grid over the box ``bounds`` = (x0, x1, y0, y1[, z0, z1]): a function of x.

    Piecewise constant (default): ``values`` (n_x, n_y[, n_z]) is one value per grid cell, the box cut
    into n_x by n_y (by n_z) equal cells; on a border between cells, the harmonic mean of those around
    the point (an element face lying there stays consistent: :meth:`_on_borders`).  ``linear=True``: one value per grid node, n_x by n_y (by
    n_z) nodes from the box's low corner to its high corner, interpolated multilinearly.  A tensor
    coefficient (diffusion) has two more axes (..., d, d).  Points outside the box (beyond round-off)
    are refused.

    >>> grid = GridData(np.array([[1.0, 2.0], [3.0, 4.0]]), (0, 2, 0, 1))  # x cells [0,1], [1,2]; y [0,.5], [.5,1]
    >>> grid(np.array([[0.5, 0.25], [1.5, 0.75]])).tolist()
    [1.0, 4.0]
    """

    def __init__(self, values: Any, bounds: Any, *, linear: bool = False, source: str | None = None):
        self.source = source or "grid data"
        self.linear = bool(linear)
        try:
            box = np.array(bounds, dtype=np.float64).reshape(-1)
        except (TypeError, ValueError):
            raise ProblemError(f"{self.source}: bounds must be numbers x0, x1, y0, y1[, z0, z1]") from None
        if len(box) not in (4, 6) or not np.isfinite(box).all() or not (box[1::2] > box[0::2]).all():
            raise ProblemError(f"{self.source}: bounds {box.tolist()} must be x0 < x1, y0 < y1[, z0 < z1] "
                               "(4 or 6 finite numbers)")
        d = len(box) // 2
        self.low, self.high = box[0::2], box[1::2]
        if np.iscomplexobj(values):
            raise ProblemError(f"{self.source}: values are complex; coefficients are real")
        try:
            array = np.asarray(values, dtype=np.float64)
        except (TypeError, ValueError):
            raise ProblemError(f"{self.source}: values are not numbers") from None
        if array.ndim not in (d, d + 2) or (array.ndim == d + 2 and array.shape[-2:] != (d, d)):
            raise ProblemError(f"{self.source}: values of shape {array.shape} on a {d}D grid: expected {d} axes "
                               f"(one scalar per grid {'node' if linear else 'cell'}) or {d} + 2 with ({d}, {d}) "
                               "tensors")
        self.shape = array.shape[:d]
        least = 2 if self.linear else 1
        if min(self.shape) < least:
            raise ProblemError(f"{self.source}: a grid of shape {self.shape} needs at least {least} "
                               f"{'nodes' if self.linear else 'cells'} per axis")
        flat = array.reshape((-1,) + array.shape[d:])
        per = "grid node" if self.linear else "grid cell"
        label = lambda i: f"{per} {tuple(int(j) for j in np.unravel_index(i, self.shape))}"  # noqa: E731
        self.values = checked_values(flat, self.source, per, label).reshape(array.shape)

    @classmethod
    def from_file(cls, path: str | os.PathLike, bounds: Any, *, linear: bool = False,
                  source: str | None = None) -> "GridData":
        """The grid of the ``.npy`` file ``path`` (see the class docstring)."""
        source = source or f"grid data '{os.fspath(path)}'"
        return cls(load_array(path, source), bounds, linear=linear, source=source)

    @property
    def dim(self) -> int:
        return len(self.low)

    @property
    def tensor(self) -> bool:
        return self.values.ndim == self.dim + 2

    def _coordinates(self, x: np.ndarray) -> np.ndarray:
        """x in grid units (0 at the low corner, n (cells) or n - 1 (nodes) at the high one), checked inside."""
        x = np.asarray(x, dtype=np.float64)
        if x.ndim != 2 or x.shape[1] != self.dim:
            raise ProblemError(f"{self.source}: a {self.dim}D grid evaluated at points of shape {x.shape}")
        extent = self.high - self.low
        t = (x - self.low) / extent
        outside = ((t < -GRID_TOL) | (t > 1 + GRID_TOL)).any(axis=1)
        if outside.any():
            i = int(np.flatnonzero(outside)[0])
            raise ProblemError(f"{self.source}: point {_format(x[i])} lies outside the grid's bounds "
                               f"{_format(np.stack([self.low, self.high], axis=1).reshape(-1))} "
                               f"({int(outside.sum())} of {len(x)} points)")
        return np.clip(t, 0.0, 1.0) * (np.array(self.shape) - (1 if self.linear else 0))

    def __call__(self, x: Any) -> np.ndarray:
        xp = array_namespace(x)
        if xp is not np:  # device points (the GPU backend): looked up on the host, the values sent back
            return contiguous(xp, self(to_host(x)))
        t = self._coordinates(x)
        n = np.array(self.shape)
        if not self.linear:
            index = np.minimum(np.floor(t).astype(np.int64), n - 1)
            return self._on_borders(t, self.values[tuple(index.T)])
        low = np.minimum(np.floor(t).astype(np.int64), n - 2)
        frac = t - low
        out = 0.0
        for corner in np.ndindex(*(2,) * self.dim):  # 2^d corners, each a whole-array term
            c = np.array(corner)
            weight = np.prod(np.where(c, frac, 1.0 - frac), axis=1)
            value = self.values[tuple((low + c).T)]
            out = out + (weight[:, None, None] * value if self.tensor else weight * value)
        return out

    def _on_borders(self, t: np.ndarray, values: np.ndarray) -> np.ndarray:
        """``values`` with those of the points on a border between grid cells (``t`` in grid units) replaced
        by the harmonic mean of the cells around them.

        An element face on such a border reads one value for both its sides; the harmonic mean
        2 a⁻ a⁺ / (a⁻ + a⁺) is the one whose average {a grad u} . n equals the flux a du/dn, continuous
        across the border, so the scheme stays consistent where a one-sided value would not.  It is m times
        the parallel sum A₁ : ... : A_m of the m cells (A : B = A (A + B)⁺ B, 0 where a cell is 0; tensors
        the same, semi-definite ones included).  Values of mixed sign (a source) take the arithmetic mean.
        """
        n = np.array(self.shape)
        nearest = np.rint(t)
        on = (np.abs(t - nearest) <= BORDER_TOL) & (nearest > 0) & (nearest < n)
        rows = np.flatnonzero(on.any(axis=1))
        if len(rows) == 0:
            return values
        on, nearest = on[rows], nearest[rows].astype(np.int64)
        base = np.minimum(np.where(on, nearest, np.floor(t[rows]).astype(np.int64)), n - 1)  # the cell above
        tensor = self.tensor
        count = np.zeros(len(rows), dtype=np.int64)
        total = parallel = lowest = highest = None
        for corner in np.ndindex(*(2,) * self.dim):  # 2^d corners; a step back only along a border's axis
            c = np.array(corner, dtype=bool)
            distinct = on[:, c].all(axis=1)
            value = self.values[tuple(np.where(c & on, nearest - 1, base).T)]
            keep = distinct.reshape((-1,) + (1,) * (value.ndim - 1))
            count += distinct
            if total is None:  # the first corner: every point's own cell
                total, parallel, lowest, highest = value, value, value, value
                continue
            total = np.where(keep, total + value, total)
            parallel = np.where(keep, _parallel_sum(parallel, value, tensor), parallel)
            if not tensor:
                lowest, highest = np.where(distinct, np.minimum(lowest, value), lowest), \
                    np.where(distinct, np.maximum(highest, value), highest)
        values = values.copy()
        if tensor:
            values[rows] = count[:, None, None] * parallel
        else:
            mixed = (lowest < 0) & (highest > 0)
            values[rows] = np.where(mixed, total / count, count * parallel)
        return values

    def __repr__(self) -> str:
        kind = "multilinear" if self.linear else "piecewise constant"
        bounds = ", ".join(f"{v:g}" for v in np.stack([self.low, self.high], axis=1).reshape(-1))
        return f"GridData({'x'.join(map(str, self.shape))} {kind}, bounds ({bounds}), source={self.source!r})"


def _parallel_sum(a: np.ndarray, b: np.ndarray, tensor: bool) -> np.ndarray:
    """A : B = A (A + B)⁺ B per point (scalars: ab / (a + b), 0 where a + b is 0), symmetrised for tensors."""
    if not tensor:
        s = a + b
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(s == 0, 0.0, a * b / np.where(s == 0, 1.0, s))
    p = a @ np.linalg.pinv(a + b, hermitian=True) @ b
    return 0.5 * (p + p.transpose(0, 2, 1))


def load_array(path: str | os.PathLike, source: str) -> np.ndarray:
    """The array of the ``.npy`` file ``path``; a one-line ProblemError naming ``source`` if it cannot be read."""
    try:
        return np.load(os.fspath(path), allow_pickle=False)
    except FileNotFoundError:
        raise ProblemError(f"{source}: file '{os.fspath(path)}' not found") from None
    except (OSError, ValueError, EOFError) as exc:
        reason = " ".join(str(exc).split())[:200]
        raise ProblemError(f"{source}: '{os.fspath(path)}' is not a readable .npy array ({reason})") from None


# ---------------------------------------------------------------------------
# a problem's data against a mesh


def data_coefficients(problem) -> dict[str, _IndexedData]:
    """The coefficients of ``problem`` that are cell or element data, by name."""
    return {name: getattr(problem, name) for name in DATA_COEFFICIENTS
            if isinstance(getattr(problem, name), _IndexedData)}


def uses_cell_data(problem) -> bool:
    """True when a coefficient of ``problem`` is :class:`CellData` (it then needs fine quadrature simplices)."""
    return any(isinstance(value, CellData) for value in data_coefficients(problem).values())


def check_data(problem, mesh) -> None:
    """Raise a one-line ProblemError where ``problem``'s cell or element data does not fit ``mesh``: the
    number of values, the tensors' dimension, a negative diffusion, tensors for reaction or source, and
    cell data on sub-simplices that are not inside one fine cell (coarse quadrature simplices)."""
    d = mesh.dim
    for name, data in data_coefficients(problem).items():
        where = f"{data.source} (the {name} of problem {problem.name!r})"
        if isinstance(data, CellData):
            if mesh.simplex_cell is None or mesh.face_cells is None:
                raise ProblemError(f"{where}: the mesh {mesh.source!r} records no fine cells (a space-time slab?)")
            across = mesh.simplex_cell < 0
            if across.any():
                e = int(mesh.simplex_element[np.flatnonzero(across)[0]])
                raise ProblemError(f"{where}: element {e}'s quadrature simplices span several fine cells (coarse "
                                   "quadrature simplices); cell data needs fine ones (--quadrature-simplices fine, "
                                   "or the mesh before polydg.mesh.quadrature_simplices.quadrature_mesh)")
            expected, per = mesh.n_fine_cells, "fine cell"
        else:
            expected, per = mesh.n_elements, "element"
        if len(data) != expected:
            raise ProblemError(f"{where}: {len(data)} values, expected one per {per} of {mesh.source!r} ({expected})")
        if data.tensor:
            if name != "diffusion":
                raise ProblemError(f"{where}: {name} takes one scalar per {per}, got {data.values.shape[1:]} tensors")
            if data.values.shape[1] != d:
                k = data.values.shape[1]
                raise ProblemError(f"{where}: {k} x {k} tensors for a {d}D mesh")
        elif name == "diffusion" and (data.values < 0).any():
            i = int(np.flatnonzero(data.values < 0)[0])
            raise ProblemError(f"{where}: negative diffusion {data.values[i]:.6g} at {per} {i}")


def on_sub_mesh(problem, elements: np.ndarray, n_elements: int):
    """``problem`` for a rank's sub-mesh whose local element i is element ``elements[i]`` of the whole mesh's
    ``n_elements``: element data restricted to them (cell data keeps the whole mesh's numbering, as the
    sub-mesh's fine cells do)."""
    restricted = {}
    for name, data in data_coefficients(problem).items():
        if isinstance(data, ElementData):
            if len(data) != n_elements:
                raise ProblemError(f"{data.source} (the {name} of problem {problem.name!r}): {len(data)} values, "
                                   f"expected one per element ({n_elements})")
            restricted[name] = ElementData(data.values[elements], source=data.source)
    return dataclasses.replace(problem, **restricted) if restricted else problem

