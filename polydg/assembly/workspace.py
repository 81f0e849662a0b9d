"""Work arrays reused from chunk to chunk of an assembly.

Every chunk of the assembler needs the same kinds of arrays (quadrature
points, weights, coefficient values), of about the same size.  Allocating
them afresh costs more than filling them: the first write to each page of
new memory is a page fault in which the kernel zeroes the page (and, for the
huge pages NumPy asks for, may first compact memory), so a fresh array
costs several times a reused one, and erratically (docs/performance.md).
A :class:`Workspace` keeps one buffer per name and hands out views of it,
so only the first chunk pays.
"""

from __future__ import annotations

import numpy as np


class Workspace:
    """Named buffers that only grow; :meth:`take` returns a view of the right shape and type.

    A view stays valid until the next :meth:`take` of the same name: callers
    take an array per chunk and drop it before the next chunk.

    >>> ws = Workspace()
    >>> a = ws.take("x", (4, 3), np.float64)
    >>> b = ws.take("x", (2, 3), np.float64)  # the same memory, reshaped
    >>> np.shares_memory(a, b), b.shape
    (True, (2, 3))
    """

    #: a buffer that must grow is made this much larger than asked, so that
    #: chunks of slightly different sizes do not reallocate it each time
    GROWTH = 1.25

    def __init__(self) -> None:
        self._buffers: dict[str, np.ndarray] = {}

    def take(self, name: str, shape: tuple[int, ...], dtype) -> np.ndarray:
        """An uninitialised C-contiguous array of ``shape`` and ``dtype`` in the buffer ``name``."""
        dtype = np.dtype(dtype)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        buffer = self._buffers.get(name)
        if buffer is None or buffer.nbytes < nbytes:
            # float64 storage keeps every view aligned for any dtype
            buffer = np.empty(-(-int(nbytes * self.GROWTH) // 8), dtype=np.float64)
            self._buffers[name] = buffer
        return buffer.view(np.uint8)[:nbytes].view(dtype).reshape(shape)

    @property
    def nbytes(self) -> int:
        """Bytes held by all buffers."""
        return sum(b.nbytes for b in self._buffers.values())
