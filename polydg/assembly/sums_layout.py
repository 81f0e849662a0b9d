"""The scratch layout of the ordered sums (``cuda_sums.py``): values per entity, and bytes per chunk entity.

Plain arithmetic, apart from the kernels (which import numba-cuda), so that a
plan can make room for the scratch before any GPU module is loaded.
"""

from __future__ import annotations


def scratch_strides(nb: int) -> tuple[int, int]:
    """Values per entity of the scratch buffers of a basis of ``nb`` functions at most: a sub-simplex or a
    boundary face, a block and its load (NB^2 + NB); an interior face side, two blocks (2 NB^2).

    >>> scratch_strides(3)
    (12, 18)
    """
    return nb * nb + nb, 2 * nb * nb


def scratch_bytes(nb: int, itemsize: int) -> tuple[int, int]:
    """Bytes of scratch per sub-simplex and per face (both sides of an interior face, the larger case): the
    ordered reduction's ``scratch`` (``reductions/registry.py``), which the chunks make room for.

    >>> scratch_bytes(3, 8)
    (96, 288)
    """
    entity, side = scratch_strides(nb)
    return entity * itemsize, 2 * side * itemsize


#: the most block entries and load rows per element (NB^2 + NB) that the "blocks" kernels take: 64 a thread of 256
BLOCK_ENTRIES_MAX = 64 * 256


def blocks_scratch_bytes(nb: int, itemsize: int) -> tuple[int, int]:
    """The ``"blocks"`` reduction's scratch: none, its kernels sum each entry in the thread that writes it; a
    basis too large for them (more than :data:`BLOCK_ENTRIES_MAX` entries) runs the ordered sums instead.

    >>> blocks_scratch_bytes(3, 8), blocks_scratch_bytes(200, 8) == scratch_bytes(200, 8)
    ((0, 0), True)
    """
    return scratch_bytes(nb, itemsize) if nb * nb + nb > BLOCK_ENTRIES_MAX else (0, 0)
