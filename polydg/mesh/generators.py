"""Built-in fine simplicial meshes, addressed by spec strings.

=========================  ==================================================
spec                       mesh
=========================  ==================================================
``square:N``               unit square, N cells per side, 2 N^2 triangles
``cube:N``                 unit cube, N cells per side, 6 N^3 tetrahedra
``oscillating-square:N``   the paper's square whose boundary oscillates
                           around (0, 1)^2, 2 N^2 triangles
=========================  ==================================================

Options follow as ``:key=value``: ``perturb=F`` moves every interior vertex by
up to F times the cell size in each direction (F < 0.5 keeps the mesh valid;
default 0), ``seed=S`` seeds that perturbation (default 0), and for the
oscillating square ``amplitude=A`` (default 0.01) and ``waves=K`` (default 4).

Boundary facets are tagged 1, 2, 3, 4 (x = 0, x = 1, y = 0, y = 1) and in 3D
also 5, 6 (z = 0, z = 1).

>>> m = from_spec("square:4:perturb=0.2:seed=1")
>>> m.n_cells, m.dim
(32, 2)
"""

from __future__ import annotations

import numpy as np

from ..errors import MeshError
from .simplicial import SimplexMesh

GENERATORS = ("square", "cube", "oscillating-square")


def _grid_points(n: int, d: int) -> np.ndarray:
    axes = [np.linspace(0.0, 1.0, n + 1)] * d
    grid = np.meshgrid(*axes, indexing="ij")
    return np.stack([g.ravel() for g in grid], axis=1)


def _perturb(points: np.ndarray, n: int, amount: float, seed: int) -> np.ndarray:
    if not seed >= 0:
        raise MeshError(f"seed={seed}: must be a non-negative integer")
    if amount == 0:
        return points
    if not 0 <= amount < 0.5:
        raise MeshError(f"perturb={amount}: must lie in [0, 0.5) to keep cells valid")
    rng = np.random.default_rng(seed)
    interior = ((points > 1e-12) & (points < 1 - 1e-12)).all(axis=1)
    shift = rng.uniform(-amount / n, amount / n, size=points.shape)
    out = points.copy()
    out[interior] += shift[interior]
    return out


def _square_cells(n: int) -> np.ndarray:
    i, j = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    v00 = (i * (n + 1) + j).ravel()
    v10 = ((i + 1) * (n + 1) + j).ravel()
    v01 = (i * (n + 1) + j + 1).ravel()
    v11 = ((i + 1) * (n + 1) + j + 1).ravel()
    # alternate the diagonal so the mesh has no preferred direction
    flip = ((i + j) % 2 == 1).ravel()
    t1 = np.where(flip[:, None], np.stack([v00, v10, v01], 1), np.stack([v00, v10, v11], 1))
    t2 = np.where(flip[:, None], np.stack([v10, v11, v01], 1), np.stack([v00, v11, v01], 1))
    return np.concatenate([t1, t2]).astype(np.int64)


def _cube_cells(n: int) -> np.ndarray:
    # Kuhn subdivision: 6 tetrahedra along the main diagonal of each cube; it
    # is conforming across cubes because every cube is split the same way.
    i, j, k = (a.ravel() for a in np.meshgrid(np.arange(n), np.arange(n), np.arange(n), indexing="ij"))
    m = n + 1
    origin = i * m * m + j * m + k  # each cube's corner (0, 0, 0); the others are offsets from it
    del i, j, k
    step = np.array([m * m, m, 1], dtype=np.int64)
    cells = np.empty((6, n**3, 4), dtype=np.int64)  # written in place: no list of six copies to join
    for t, perm in enumerate(((0, 1, 2), (0, 2, 1), (1, 0, 2), (1, 2, 0), (2, 0, 1), (2, 1, 0))):
        offset = 0
        cells[t, :, 0] = origin
        for c, axis in enumerate(perm, start=1):
            offset += step[axis]
            np.add(origin, offset, out=cells[t, :, c])
    return cells.reshape(-1, 4)


def _box_boundary(points: np.ndarray, cells: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Tag the facets of a box mesh lying on x_k = 0 (tag 2k+1) or x_k = 1 (tag 2k+2).

    Only the cells with d vertices on the boundary can have a facet there: the facets are formed for those
    alone (a mesh of N cells per side has O(N^(d-1)) of them), so the memory stays a byte per vertex of a cell.
    """
    d = points.shape[1]
    planes = [np.abs(points[:, k] - side) < 1e-12 for k in range(d) for side in (0.0, 1.0)]  # tag - 1 -> on it
    on_boundary = np.logical_or.reduce(planes)
    near = cells[on_boundary[cells].sum(axis=1, dtype=np.uint8) >= d]
    local = [[j for j in range(d + 1) if j != k] for k in range(d + 1)]
    facets = near[:, local].reshape(-1, d)
    tags = np.zeros(len(facets), dtype=np.int64)
    for tag, plane in enumerate(planes, start=1):
        tags[plane[facets].all(axis=1)] = tag
    on = tags > 0
    return facets[on], tags[on]


def unit_square(n: int, perturb: float = 0.0, seed: int = 0) -> SimplexMesh:
    """Unit square, ``n`` cells per side, 2 n^2 triangles."""
    pts = _grid_points(n, 2)
    cells = _square_cells(n)
    facets, tags = _box_boundary(pts, cells)
    pts = _perturb(pts, n, perturb, seed)
    return SimplexMesh(pts, cells, facets, tags, source=f"square:{n}")


def unit_cube(n: int, perturb: float = 0.0, seed: int = 0) -> SimplexMesh:
    """Unit cube, ``n`` cells per side, 6 n^3 tetrahedra."""
    pts = _grid_points(n, 3)
    cells = _cube_cells(n)
    facets, tags = _box_boundary(pts, cells)
    pts = _perturb(pts, n, perturb, seed)
    return SimplexMesh(pts, cells, facets, tags, source=f"cube:{n}")


def oscillating_square(
    n: int, perturb: float = 0.0, seed: int = 0, amplitude: float = 0.01, waves: int = 4
) -> SimplexMesh:
    """The unit square with each side displaced by ``amplitude sin(2 pi waves s)``.

    The displacement fades linearly to zero at the centre lines, so the map
    from the unit square is one-to-one for 2 pi amplitude waves < 1/2.
    """
    if not amplitude >= 0:
        raise MeshError(f"oscillating-square: amplitude={amplitude}: must be a non-negative number")
    if not waves >= 0:
        raise MeshError(f"oscillating-square: waves={waves}: must be a non-negative integer")
    if not amplitude * 2 * np.pi * waves < 0.5:
        raise MeshError(f"oscillating-square: amplitude {amplitude} too large for {waves} waves "
                        "(2 pi amplitude waves must be below 0.5)")
    square = unit_square(n, perturb, seed)
    X, Y = square.points[:, 0], square.points[:, 1]
    x = X + amplitude * np.sin(2 * np.pi * waves * Y) * (1 - 2 * X)
    y = Y + amplitude * np.sin(2 * np.pi * waves * X) * (1 - 2 * Y)
    return SimplexMesh(
        np.stack([x, y], 1), square.cells, square.boundary_facets, square.boundary_tags,
        source=f"oscillating-square:{n}",
    )


def parse_spec(spec: str) -> tuple[str, int, dict]:
    """Split ``name:N[:key=value...]`` into its parts, checking each."""
    parts = spec.split(":")
    name = parts[0]
    if name not in GENERATORS:
        raise MeshError(f"unknown mesh generator {name!r} in {spec!r}; known: {', '.join(GENERATORS)}")
    if len(parts) < 2:
        raise MeshError(f"mesh spec {spec!r} needs a size, e.g. {name}:16")
    try:
        n = int(parts[1])
    except ValueError:
        raise MeshError(f"mesh spec {spec!r}: size {parts[1]!r} is not an integer") from None
    if n < 1:
        raise MeshError(f"mesh spec {spec!r}: size must be at least 1, got {n}")
    allowed = {"perturb": float, "seed": int}
    if name == "oscillating-square":
        allowed.update(amplitude=float, waves=int)
    options: dict = {}
    for item in parts[2:]:
        key, eq, value = item.partition("=")
        if not eq or key not in allowed:
            raise MeshError(
                f"mesh spec {spec!r}: unknown option {item!r}; {name} takes "
                + ", ".join(f"{k}=..." for k in allowed)
            )
        try:
            options[key] = allowed[key](value)
        except ValueError:
            raise MeshError(f"mesh spec {spec!r}: bad value {value!r} for {key}") from None
    return name, n, options


def from_spec(spec: str) -> SimplexMesh:
    """Build a generated mesh from its spec string (see the module docstring)."""
    name, n, options = parse_spec(spec)
    make = {"square": unit_square, "cube": unit_cube, "oscillating-square": oscillating_square}[name]
    mesh = make(n, **options)
    mesh.source = spec
    return mesh


def spec_sizes(spec: str) -> tuple[int, int, int]:
    """(dimension, cells, interior facets) of the mesh ``spec`` would generate, without generating it.

    >>> spec_sizes("square:4"), spec_sizes("cube:2")
    ((2, 32, 40), (3, 48, 72))
    """
    name, n, _ = parse_spec(spec)
    if name == "cube":  # 6 n^3 tetrahedra; 4 facets each, 12 n^2 of them on the boundary
        return 3, 6 * n**3, (24 * n**3 - 12 * n**2) // 2
    return 2, 2 * n**2, (6 * n**2 - 4 * n) // 2  # 2 n^2 triangles; 3 facets each, 4 n on the boundary


def is_generator_spec(spec: str) -> bool:
    """True when ``spec`` names a built-in generator rather than a file."""
    return spec.split(":")[0] in GENERATORS
