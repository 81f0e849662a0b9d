"""Which solve to run: the direct one where it is the faster one and fits, the AMG-preconditioned Krylov
one otherwise.

With a nested-dissection ordering the direct solve's time grows faster with
the dofs than the iterative one's (about n^1.5 against n^1.2 in 2D, n^2
against n^1.2 in 3D), so for every dimension, degree and symmetry there is
a size below which the direct solve wins: :data:`DIRECT_BELOW`.  Below it
the direct solve is still refused when the estimated memory of its factor
does not fit in the free memory.  A system of unknown dimension and degree
is matched by its entries per row (:func:`~polydg.solve.system.shape_of`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .system import shape_of

#: accepted values of ``solve(..., method=)``
METHODS = ("auto", "direct", "iterative")


@dataclass(frozen=True)
class Crossover:
    """The dofs below which the direct solve is the faster one, for one dimension and degree."""

    symmetric: int  #: against CG with AMG
    nonsymmetric: int  #: against GMRES with AMG (with ILU in 2D below ``ILU_BELOW`` dofs)


#: below these dofs the direct solve (SuperLU after nested dissection) beats the iterative one, per
#: (dimension, degree): one thread, agglomerated meshes of the unit square and cube, poisson (symmetric)
#: and the paper's advection-diffusion-reaction problems (launch/bench_direct.py; docs/performance.md)
DIRECT_BELOW: dict[tuple[int, int], Crossover] = {
    (2, 1): Crossover(symmetric=50_000, nonsymmetric=400_000),
    (2, 2): Crossover(symmetric=12_000, nonsymmetric=70_000),
    (2, 3): Crossover(symmetric=18_000, nonsymmetric=100_000),
    (3, 1): Crossover(symmetric=2_000, nonsymmetric=6_000),
    (3, 2): Crossover(symmetric=1_000, nonsymmetric=1_000),
    (3, 3): Crossover(symmetric=1_000, nonsymmetric=2_000),
}

#: beyond its crossover the direct solve's time over the iterative one's grows like (n / crossover)^k (measured)
SLOWDOWN_EXPONENT = {2: 0.3, 3: 0.8}
#: a forced direct solve estimated this many times slower than the iterative one is warned about
SLOW_RATIO = 3.0

#: the factor's entries per matrix entry on E elements: a (E / E0)^k, as (a, E0, k) per dimension (nested
#: dissection of the element graph: it grows like log E in 2D and E^(1/3) in 3D; fitted to the measurements)
FACTOR_FILL = {2: (3.2, 272, 0.17), 3: (6.4, 508, 0.42)}
#: peak memory of the factorisation per entry of the factor: a double, a row index, SuperLU's supernode
#: bookkeeping and the copies of the matrix (measured)
BYTES_PER_FACTOR_ENTRY = 24
#: the factor may take this fraction of the free memory
MEMORY_FRACTION = 0.8


@dataclass(frozen=True)
class Estimate:
    """What the table says of one system: its crossover, and the direct solve's slowdown and memory."""

    dim: int
    degree: int
    elements: int
    dofs: int
    nnz: int
    symmetric: bool
    shape_known: bool  #: False when dimension and degree were guessed from the entries per row
    space_degrees: str | None = None  #: the space's degrees ("p = 8", "p = 1..8") where outside the measured ones

    @property
    def crossover(self) -> int:
        entry = DIRECT_BELOW[(self.dim, self.degree)]
        return entry.symmetric if self.symmetric else entry.nonsymmetric

    @property
    def slowdown(self) -> float:
        """The direct solve's time over the iterative one's (1 at the crossover)."""
        return (self.dofs / self.crossover) ** SLOWDOWN_EXPONENT[self.dim]

    @property
    def factor_bytes(self) -> float:
        a, e0, k = FACTOR_FILL[self.dim]
        return BYTES_PER_FACTOR_ENTRY * self.nnz * a * (self.elements / e0) ** k

    @property
    def label(self) -> str:
        """``"3D p = 2, nonsymmetric"``; a guessed shape says so."""
        shape = f"{self.dim}D p = {self.degree}"
        if self.space_degrees is not None:
            lo, hi = min(p for d, p in DIRECT_BELOW if d == self.dim), max(p for d, p in DIRECT_BELOW if d == self.dim)
            shape = f"{self.dim}D {self.space_degrees} (as p = {self.degree}: measured for p = {lo} to {hi})"
        if not self.shape_known:
            shape += f" (guessed from {self.nnz / max(self.dofs, 1):.0f} entries per row)"
        return f"{shape}, {'symmetric' if self.symmetric else 'nonsymmetric'}"


def estimate(n: int, nnz: int, symmetric: bool, space: Any = None, block_sizes: Any = None) -> Estimate:
    """The table's :class:`Estimate` of a system of ``n`` dofs and ``nnz`` entries (the shape from
    ``space`` or ``block_sizes`` when given)."""
    dim, degree, elements, known = shape_of(n, nnz, space, block_sizes)
    return Estimate(dim, degree, elements, int(n), int(nnz), bool(symmetric), known, _beyond_measured(space, dim))


def _beyond_measured(space: Any, dim: int) -> str | None:
    """``space``'s degrees as a label ("p = 8", "p = 0..2") where some lie outside those :data:`DIRECT_BELOW`
    measured in ``dim`` dimensions, else None."""
    degrees = getattr(space, "degree", None)
    if degrees is None or not np.size(degrees):
        return None
    lo, hi = int(np.min(degrees)), int(np.max(degrees))
    measured = [p for d, p in DIRECT_BELOW if d == dim]
    if min(measured) <= lo and hi <= max(measured):
        return None
    return f"p = {lo}" if lo == hi else f"p = {lo}..{hi}"


def free_memory_bytes() -> int | None:
    """The memory this process may still allocate (:func:`polydg.assembly.memory.available_memory`: the
    available memory, the cgroup's and ``ulimit -v``'s limits, or POLYDG_MEMORY_LIMIT), None when unknown."""
    from ..assembly.memory import available_memory

    return available_memory()[0]


def direct_fits(n: int, nnz: int, symmetric: bool, space: Any = None, block_sizes: Any = None,
                free_bytes: float | None = None) -> bool:
    """Whether the direct solve's estimated factor fits in ``MEMORY_FRACTION`` of ``free_bytes`` (default:
    the free memory now; True when that is unknown)."""
    free = free_memory_bytes() if free_bytes is None else free_bytes
    return free is None or estimate(n, nnz, symmetric, space, block_sizes).factor_bytes <= MEMORY_FRACTION * free


def choose_method(n: int, nnz: int, symmetric: bool, space: Any = None, block_sizes: Any = None,
                  free_bytes: float | None = None) -> tuple[str, str]:
    """``("direct" or "iterative", reason)``: direct below the crossover of :data:`DIRECT_BELOW` when the
    estimated factor fits in ``MEMORY_FRACTION`` of ``free_bytes`` (default: the free memory now)."""
    e = estimate(n, nnz, symmetric, space, block_sizes)
    free = free_memory_bytes() if free_bytes is None else free_bytes
    if n >= e.crossover:
        return "iterative", f"{n:,} dofs, above the direct solve's crossover of {e.crossover:,} for {e.label}"
    if free is not None and e.factor_bytes > MEMORY_FRACTION * free:
        return "iterative", (f"the direct solve's factor of {n:,} dofs, estimated at {_gb(e.factor_bytes)}, "
                             f"would not fit in {_gb(free)} free")
    return "direct", f"{n:,} dofs, below the direct solve's crossover of {e.crossover:,} for {e.label}"


def direct_concerns(n: int, nnz: int, symmetric: bool, space: Any = None, block_sizes: Any = None,
                    free_bytes: float | None = None) -> str | None:
    """Why a forced direct solve deserves a warning (its factor estimated larger than the free memory, or
    the solve estimated ``SLOW_RATIO`` times slower than the iterative one), or None."""
    e = estimate(n, nnz, symmetric, space, block_sizes)
    free = free_memory_bytes() if free_bytes is None else free_bytes
    if free is not None and e.factor_bytes > MEMORY_FRACTION * free:
        return (f"the direct solve's factor of {n:,} dofs is estimated at {_gb(e.factor_bytes)}, with "
                f"{_gb(free)} free")
    if e.slowdown > SLOW_RATIO:
        return (f"the direct solve of {n:,} dofs ({e.label}) is estimated {e.slowdown:.0f} times slower than "
                f"the iterative one (crossover {e.crossover:,} dofs)")
    return None


def _gb(nbytes: float) -> str:
    return f"{nbytes / 2**30:.1f} GB"


__all__ = ["METHODS", "Crossover", "DIRECT_BELOW", "Estimate", "estimate", "choose_method", "direct_concerns",
           "direct_fits", "free_memory_bytes"]
