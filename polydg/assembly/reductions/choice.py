"""Approach "auto", the default: the deterministic reduction that runs fastest for a mesh on its device.

On the CPU that is the row kernels ("2"). On a GPU the row kernels give each
element one thread, which holds the element's whole block and walks all of
its sub-simplices and faces: on meshes of simplices (or of few sub-simplices
per element) and small bases that is the fastest deterministic path.  On
agglomerated meshes of many sub-simplices per element most of the card idles
behind the largest elements, and at 20 basis functions or more (degree 3 in
3D and in 2D + 1) the thread's block spills to local memory; there the thread
block per element ("blocks": a thread per entry, the points through shared
memory) is faster.  The rule reads the mesh and the largest basis alone, so
every slab of a march chooses alike; MPI ranks, each with its own part of the
mesh, run what rank 0 chose from the whole one (``distributed/assembly.py``).
docs/performance.md gives the measurements behind it.
"""

from __future__ import annotations

from ... import backend as bk

#: the name of the choice
AUTO = "auto"
#: above this mean number of sub-simplices per element a GPU runs "blocks", at or below it the row kernels
#: (a simplex 1, a slab's prism of a triangle 3, a hexahedron 6; an agglomerated element usually tens)
ROWS_UP_TO = 6.0
#: from this many basis functions on an element a GPU runs "blocks" whatever the mesh (the row kernels' block
#: per thread is then in local memory)
BLOCKS_FROM_BASIS = 20


def chosen_approach(approach: str, space, backend: str) -> str:
    """The approach that runs: ``approach`` itself, or for "auto" the deterministic reduction of the mesh of
    ``space`` on ``backend`` (a resolved backend name).

    >>> from polydg.mesh import build_polytopic_mesh, unit_square
    >>> from polydg.partition import agglomerate
    >>> from polydg.space import DGSpace
    >>> fine = DGSpace(build_polytopic_mesh(unit_square(8)), 1)
    >>> coarse = DGSpace(agglomerate(unit_square(8), 4), 1)
    >>> [chosen_approach("auto", s, b) for s in (fine, coarse) for b in ("numpy", "cupy")]
    ['2', '2', '2', 'blocks']
    >>> chosen_approach("auto", DGSpace(build_polytopic_mesh(unit_square(8)), 5), "cupy")  # 21 functions
    'blocks'
    >>> chosen_approach("atomic", coarse, "cupy")
    'atomic'
    """
    if approach != AUTO:
        return approach
    if not bk.is_device(backend):
        return "2"
    mesh = space.mesh
    many_simplices = mesh.n_simplices > ROWS_UP_TO * mesh.n_elements
    return "blocks" if many_simplices or space.element_dofs.max(initial=0) >= BLOCKS_FROM_BASIS else "2"


__all__ = ["AUTO", "BLOCKS_FROM_BASIS", "ROWS_UP_TO", "chosen_approach"]
