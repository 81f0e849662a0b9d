"""Approach "auto", the default: the deterministic reduction that runs fastest for a mesh on its device.

On the CPU that is the row kernels ("2"). On a GPU the row kernels give each
element one thread, which walks all of the element's sub-simplices and faces:
on meshes of simplices (or of few sub-simplices per element) that is the
fastest deterministic path, while on agglomerated meshes of many sub-simplices
per element most of the card idles behind the largest elements, and the
ordered sums ("ordered": a thread per entity, then per matrix entry) are
faster, by more as the degree grows. The rule reads the mesh alone (the mean
number of sub-simplices per element), so every slab of a march chooses alike;
MPI ranks, each with its own part of the mesh, run what rank 0 chose from the
whole one (``distributed/assembly.py``). docs/performance.md gives the
measurements behind it.
"""

from __future__ import annotations

from ... import backend as bk

#: the name of the choice
AUTO = "auto"
#: above this mean number of sub-simplices per element a GPU runs the ordered sums, at or below it the row kernels
#: (a simplex 1, a slab's prism of a triangle 3, a hexahedron 6; an agglomerated element usually tens)
ROWS_UP_TO = 6.0


def chosen_approach(approach: str, space, backend: str) -> str:
    """The approach that runs: ``approach`` itself, or for "auto" the deterministic reduction of the mesh of
    ``space`` on ``backend`` (a resolved backend name).

    >>> from polydg.mesh import build_polytopic_mesh, unit_square
    >>> from polydg.partition import agglomerate
    >>> from polydg.space import DGSpace
    >>> fine = DGSpace(build_polytopic_mesh(unit_square(8)), 1)
    >>> coarse = DGSpace(agglomerate(unit_square(8), 4), 1)
    >>> [chosen_approach("auto", s, b) for s in (fine, coarse) for b in ("numpy", "cupy")]
    ['2', '2', '2', 'ordered']
    >>> chosen_approach("atomic", coarse, "cupy")
    'atomic'
    """
    if approach != AUTO:
        return approach
    if not bk.is_device(backend):
        return "2"
    mesh = space.mesh
    return "ordered" if mesh.n_simplices > ROWS_UP_TO * mesh.n_elements else "2"


__all__ = ["AUTO", "ROWS_UP_TO", "chosen_approach"]
