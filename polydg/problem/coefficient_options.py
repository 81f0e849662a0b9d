"""``--coefficient NAME=SPEC``: a problem's coefficient replaced by data or a number, from the command line.

NAME is ``diffusion``, ``reaction`` or ``source``; SPEC is one of

* ``cell:ARRAY``: the mesh file's cell data ``ARRAY`` (:meth:`CellData.from_mesh
  <polydg.problem.data.CellData.from_mesh>`), or ``cell:FILE.npy``: one value per fine cell from a
  file (a generated mesh has no cell data);
* ``element:FILE.npy``: one value per element of the (agglomerated) mesh;
* ``grid:FILE.npy:x0,x1,y0,y1[,z0,z1][:linear]``: values on a Cartesian grid over those bounds,
  piecewise constant (default, ``:constant``) or multilinear (``:linear``);
* a number (a diffusion ``a`` means ``a I``).

A space-time problem takes numbers and grid data over (x, t) (its bounds end with t0, t1).

Values are scalars, or (d, d) tensors for a diffusion.  The option may be repeated, each NAME once.
A replaced coefficient voids the problem's exact solution (and the derivatives given for it).  Every
mistake is one line naming the option, the file or array, and what was expected: an
:class:`~polydg.errors.OptionError` for the text of the option, a :class:`~polydg.errors.ProblemError`
(whose message begins with the option) for its data.

>>> from polydg.mesh import unit_square
>>> from polydg.problem import builtin_problem
>>> fine = unit_square(2)
>>> fine.cell_data["permeability"] = np.linspace(1.0, 2.0, 8)
>>> problem = with_coefficients(builtin_problem("poisson", 2), ["diffusion=cell:permeability", "reaction=2"], fine)
>>> type(problem.diffusion).__name__, problem.reaction, problem.exact
('CellData', 2.0, None)
>>> with_coefficients(problem, ["diffusion=cell:porosity"], fine)  # doctest: +ELLIPSIS
Traceback (most recent call last):
    ...
polydg.errors.ProblemError: --coefficient diffusion=cell:porosity: 'square:2' has no cell data 'porosity' (it has: permeability)
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..errors import OptionError, ProblemError
from .protocol import as_problem
from .data import DATA_COEFFICIENTS, CellData, ElementData, GridData, load_array

#: the option's name, in messages
OPTION = "--coefficient"
#: the form of each kind of data a SPEC may name
DATA_FORMS = {"cell": "cell:ARRAY (the mesh file's cell data) or cell:FILE.npy", "element": "element:FILE.npy",
              "grid": "grid:FILE.npy:x0,x1,y0,y1[,z0,z1][:linear]"}
#: what the SPEC of the option may be, for messages
SPEC_FORMS = ", ".join(DATA_FORMS.values()) + ", or a number"
#: the option's whole form, for messages and --help
SPEC_HELP = f"NAME=SPEC, NAME one of diffusion, reaction, source; SPEC {SPEC_FORMS}; repeatable"


def parse_coefficient(text: str, fine, option: str = OPTION):
    """(NAME, value) of one ``NAME=SPEC`` (the module docstring); ``fine`` is the fine mesh (a
    :class:`~polydg.mesh.SimplexMesh`), whose cell data and number of fine cells ``cell:`` reads."""
    given = f"{option} {text}"
    name, sep, spec = str(text).partition("=")
    name, spec = name.strip(), spec.strip()
    if not sep or not spec:
        raise OptionError(f"{given}: expected {SPEC_HELP}")
    if name not in DATA_COEFFICIENTS:
        raise OptionError(f"{given}: unknown coefficient {name!r}; choose {', '.join(DATA_COEFFICIENTS)}")
    kind, colon, rest = spec.partition(":")
    if kind in DATA_FORMS and colon and not rest.strip():
        raise OptionError(f"{given}: {kind}: names no data; expected {DATA_FORMS[kind]}")
    if kind == "cell" and rest:
        if rest.endswith(".npy"):
            values = load_array(rest, given)
            data = CellData(values, source=given)
            if len(data) != fine.n_fine_cells:
                raise ProblemError(f"{given}: '{rest}' has {len(data)} values, expected one per fine cell of "
                                   f"{fine.source} ({fine.n_fine_cells})")
            return name, data
        return name, CellData.from_mesh(fine, rest, source=given)
    if kind == "element" and rest:
        return name, ElementData(load_array(rest, given), source=given)  # its length is checked on the mesh
    if kind == "grid" and rest:
        return name, _grid(rest, given)
    try:
        value = float(spec)
    except ValueError:
        raise OptionError(f"{given}: SPEC {spec!r} is neither a number nor cell:, element: or grid: data; SPEC "
                          f"{SPEC_FORMS}") from None
    if not np.isfinite(value):
        raise OptionError(f"{given}: {spec} is not a finite number")
    if name == "diffusion" and value < 0:
        raise OptionError(f"{given}: a diffusion must be >= 0")
    return name, value


def _grid(rest: str, given: str) -> GridData:
    """``FILE.npy:x0,x1,y0,y1[,z0,z1][:linear|:constant]`` as GridData."""
    path, _, tail = rest.rpartition(":")
    interpolation = "constant"
    if "," not in tail and ":" in path:  # FILE.npy:BOUNDS:INTERPOLATION (bounds hold commas, 4 or 6 numbers)
        interpolation = tail
        path, _, tail = path.rpartition(":")
    if interpolation not in ("linear", "constant"):
        raise OptionError(f"{given}: unknown interpolation {interpolation!r}; expected linear (multilinear) or "
                          "constant (piecewise constant, also meant when none is given)")
    if not path:
        raise OptionError(f"{given}: expected grid:FILE.npy:x0,x1,y0,y1[,z0,z1][:linear]")
    try:
        bounds = [float(v) for v in tail.split(",")]
    except ValueError:
        raise OptionError(f"{given}: bounds {tail!r} must be numbers x0,x1,y0,y1[,z0,z1]") from None
    return GridData(load_array(path, given), bounds, linear=interpolation == "linear", source=given)


def with_coefficients(problem, specs, fine, option: str = OPTION):
    """``problem`` (a :class:`~polydg.problem.Problem` or any object meeting its contract) with the coefficients
    of the ``NAME=SPEC`` texts ``specs`` replaced (no texts: the problem as it is).  ``fine`` is the fine mesh."""
    specs = list(specs or [])
    if not specs:
        return problem
    problem = as_problem(problem, fine.dim)
    return replaced(problem, replacements(problem, specs, fine, option))


def replacements(problem, specs, fine, option: str = OPTION) -> dict:
    """The fields of ``problem`` that the ``NAME=SPEC`` texts replace, {field: value} (picklable: MPI rank 0,
    which read the mesh, sends them to the others)."""
    fields = {}
    for text in specs:
        name, value = parse_coefficient(text, fine, option)
        if name in fields:
            raise OptionError(f"{option} {text}: {name} is given twice")
        dim = fine.dim + 1 if problem.space_time else fine.dim  # a space-time problem's x ends with t
        if isinstance(value, GridData) and value.dim != dim:
            raise OptionError(f"{option} {text}: a {value.dim}D grid for a {dim}D problem")
        if isinstance(value, (CellData, ElementData)) and problem.space_time:
            raise OptionError(f"{option} {text}: data per cell or element is not supported for the space-time "
                              f"problem {problem.name!r} (grid data over x and t is)")
        fields[name] = value
        for derivative in (f"{name}_du", f"{name}_dgrad_u"):
            if hasattr(problem, derivative):
                fields[derivative] = None
    return fields


def replaced(problem, fields: dict):
    """``problem`` with ``fields`` (:func:`replacements`) in place; a replaced coefficient voids its exact
    solution."""
    if not fields:
        return problem
    return dataclasses.replace(problem, exact=None, exact_gradient=None, **fields)
