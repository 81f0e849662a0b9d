"""The sparsity pattern built where the matrix is: array code against ``xp`` and one numba-cuda kernel.

The same block-CSR layout as :func:`polydg.assembly.pattern.sparsity_pattern`
(element e's rows hold one dense block per element of {e} U neighbours(e),
by column element, entry (i, j) of block (e, c) at
``row_base[e] + i * W_e + block_start[(e, c)] + j``), bit for bit, but built
with the backend's arrays (CuPy on a GPU) so that nothing pattern-sized is
made on the host:

* the adjacency, ``row_width``, ``block_start``, ``row_base``, ``row_start``
  and ``indptr`` are cumulative sums, bincounts and scatters over elements,
  interfaces and adjacency entries; the one ordering they need (each
  element's neighbours below it, in increasing order) is a stable sort of
  the interfaces by their second element, not of anything nnz-sized;
* ``indices`` (one per non-zero) is written by a numba-cuda kernel, one
  thread per matrix row (:func:`polydg.assembly.cuda_kernels.pattern_indices`).

The CPU builds its pattern with compiled loops (``pattern.py``) and is
unchanged; this module serves the GPU executor.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from .. import backend as bk
from ..errors import OptionError
from ..mesh.polytopic import PolytopicMesh
from .pattern import SparsityPattern

#: CuPy's sparse matrices hold their indices and row offsets as int32 (CuPy issue 9490): nnz, rows and
#: columns must stay below this on the device
DEVICE_INDEX_LIMIT = 2**31


def check_device_index_range(nnz: int, n_rows: int, n_cols: int) -> None:
    """Refuse, in one line, a device matrix whose nnz, rows or columns CuPy's int32 indices cannot hold.

    Called once the pattern's row lengths are known, before anything
    nnz-sized is allocated: the device path never wraps an index.

    >>> check_device_index_range(2**31 - 1, 10, 10)
    >>> check_device_index_range(2**31, 10, 10)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    polydg.errors.OptionError: the matrix has nnz 2,147,483,648 (>= 2^31): more than CuPy's int32 sparse indices ...
    """
    for what, value in (("nnz", nnz), ("rows", n_rows), ("columns", n_cols)):
        if value >= DEVICE_INDEX_LIMIT:
            fix = ("use fewer dofs per rank (more MPI ranks, a coarser mesh or lower degrees) or the numpy backend"
                   if what != "columns" else "the global dofs are the columns: use the numpy backend")
            raise OptionError(f"the matrix has {what} {int(value):,} (>= 2^31): more than CuPy's int32 sparse "
                              f"indices hold, the GPU backend's limit; {fix} (--to-host does not lift the limit)")


def segment_owner(xp, offsets, n: int):
    """(n,) the segment s with ``offsets[s] <= k < offsets[s + 1]`` of each k < n (``offsets`` non-decreasing).

    The array form of ``repeat(arange(len(offsets) - 1), diff(offsets))``
    (CuPy's ``repeat`` takes no array of counts).

    >>> segment_owner(np, np.array([0, 2, 2, 5]), 5).tolist()
    [0, 0, 2, 2, 2]
    """
    return xp.searchsorted(offsets, xp.arange(n, dtype=np.int64), side="right") - 1


def expand_ranges_on(xp, starts, stops):
    """Concatenate arange(starts[i], stops[i]) for all i, as array code (``passes.expand_ranges``'s values).

    >>> expand_ranges_on(np, np.array([4, 0, 9]), np.array([6, 0, 12])).tolist()
    [4, 5, 9, 10, 11]
    """
    lengths = stops - starts
    first = _exclusive_cumsum(xp, lengths)
    total = int(first[-1])
    owner = segment_owner(xp, first, total)
    return starts[owner] + (xp.arange(total, dtype=np.int64) - first[owner])


def interface_faces_on(xp, pattern: SparsityPattern, adj_interface, first_elements: np.ndarray,
                       interface_offsets, e_lo: int, e_hi: int):
    """The faces of every interface with a side in elements ``e_lo:e_hi``, as array code from the device's
    pattern: the faces, in the order, of the host's ``passes.chunk_interfaces`` and ``expand_ranges``.

    ``first_elements`` (host) are the interfaces' first elements (sorted: the chunk's interfaces as first
    element are one range), ``adj_interface`` the interface of each adjacency entry, ``interface_offsets``
    each interface's first face (both ``xp`` arrays).  The interfaces (c, e) with c below the chunk are read
    from the adjacency of the chunk's rows; their ids all lie below that range.
    """
    if e_lo == 0 and e_hi == len(pattern.adj_offsets) - 1:  # every element: every interface's faces, in order
        return xp.arange(int(interface_offsets[-1]), dtype=np.int64)
    i_lo, i_hi = np.searchsorted(first_elements, [e_lo, e_hi])
    k_lo, k_hi = int(pattern.adj_offsets[e_lo]), int(pattern.adj_offsets[e_hi])
    column, interface = pattern.adj_col[k_lo:k_hi], adj_interface[k_lo:k_hi]
    ifs = xp.concatenate([xp.sort(interface[column < e_lo]), xp.arange(int(i_lo), int(i_hi), dtype=np.int64)])
    return expand_ranges_on(xp, interface_offsets[ifs], interface_offsets[ifs + 1])


def _exclusive_cumsum(xp, counts):
    """``[0, c0, c0 + c1, ...]`` of length len(counts) + 1, int64."""
    out = xp.zeros(len(counts) + 1, dtype=np.int64)
    xp.cumsum(counts, out=out[1:])
    return out


def adjacency_on(xp, n_el: int, a, b, element_dofs) -> tuple:
    """The block rows as array code: for each element, its neighbours below it, itself, its neighbours above.

    ``a``, ``b`` (n_interfaces,): the interfaces (a < b, sorted
    lexicographically: a mesh invariant, checked).  Returns adj_offsets,
    adj_col, block_start, row_width, diag_entry and interface_entry, equal to
    the compiled :func:`polydg.assembly.pattern._adjacency`'s.
    """
    n_if = int(a.shape[0])
    pairs = bool(xp.all(a < b)) if n_if else True
    ordered = bool(xp.all((a[1:] > a[:-1]) | ((a[1:] == a[:-1]) & (b[1:] > b[:-1])))) if n_if > 1 else True
    if not (pairs and ordered):
        raise ValueError("mesh interfaces are not (e1 < e2) pairs in lexicographic order")
    above = xp.bincount(a, minlength=n_el).astype(np.int64)  # neighbours above e: its interfaces as e1
    below = xp.bincount(b, minlength=n_el).astype(np.int64)  # neighbours below e: its interfaces as e2
    adj_offsets = _exclusive_cumsum(xp, below + 1 + above)
    diag_entry = adj_offsets[:-1] + below
    adj_col = xp.empty(int(adj_offsets[-1]), dtype=np.int64)
    adj_col[diag_entry] = xp.arange(n_el, dtype=np.int64)
    interface_entry = xp.empty((n_if, 2), dtype=np.int64)
    if n_if:
        # (a, b) above the diagonal of a's row: interfaces are grouped by a, in order of b
        rank_in_a = xp.arange(n_if, dtype=np.int64) - _exclusive_cumsum(xp, above)[a]
        interface_entry[:, 0] = diag_entry[a] + 1 + rank_in_a
        # (b, a) below the diagonal of b's row, in order of a: the interfaces sorted by (b, a), which a stable
        # sort by b gives (they are in order of a within each b); one key: a radix sort on a GPU
        by_b = xp.argsort(b, kind="stable")
        rank_in_b = xp.arange(n_if, dtype=np.int64) - _exclusive_cumsum(xp, below)[b[by_b]]
        interface_entry[by_b, 1] = adj_offsets[b[by_b]] + rank_in_b
        adj_col[interface_entry[:, 0]] = b
        adj_col[interface_entry[:, 1]] = a
    block_start, row_width = _block_starts(xp, adj_offsets, element_dofs[adj_col])
    return adj_offsets, adj_col, block_start, row_width, diag_entry, interface_entry


def _block_starts(xp, adj_offsets, width) -> tuple:
    """Each entry's column offset in its row (the widths before it) and each row's width."""
    running = _exclusive_cumsum(xp, width)
    return running[:-1] - running[adj_offsets[:-1]][segment_owner(xp, adj_offsets, len(width))], \
        running[adj_offsets[1:]] - running[adj_offsets[:-1]]


def blocks_by_label_on(xp, adj_offsets, adj_col, element_dofs, label):
    """block_start with each row's blocks ordered by their column elements' labels (as ``pattern.py``)."""
    row = segment_owner(xp, adj_offsets, len(adj_col))
    labels = label[adj_col]
    span = int(labels.max()) + 1 if len(labels) else 1
    order = xp.argsort(row * span + labels, kind="stable")  # entries row by row, by label: one key
    start_sorted, _ = _block_starts(xp, adj_offsets, element_dofs[adj_col[order]])
    block_start = xp.empty_like(start_sorted)
    block_start[order] = start_sorted
    return block_start


def device_sparsity_pattern(xp, mesh: PolytopicMesh, dof_offsets: np.ndarray, elements: np.ndarray | None = None,
                            column_numbering: tuple | None = None,
                            fill_indices: Callable[..., None] | None = None,
                            rows_only: bool = False) -> SparsityPattern:
    """:func:`~polydg.assembly.pattern.sparsity_pattern`, every array an array of ``xp`` (the device's).

    Only the mesh's interfaces and the dof offsets cross to the device
    (O(elements + interfaces)); ``elements`` and ``column_numbering`` as
    there.  ``fill_indices(row_element, column_first, element_dofs,
    adj_offsets, adj_col, block_start, row_base, row_start, row_width,
    indices)`` writes the column indices; the default launches the
    numba-cuda kernel.  With ``rows_only`` (the load alone) no column index
    is written and ``indices`` is empty, as on the host.
    """
    n_el = mesh.n_elements
    dof_offsets = bk.contiguous(xp, np.asarray(dof_offsets), np.int64)
    element_dofs = dof_offsets[1:] - dof_offsets[:-1]
    every = elements is None or (len(elements) == n_el and (n_el == 0 or int(elements[-1]) == n_el - 1))
    # every element (an increasing array of n_el ids ending at n_el - 1 is 0..n_el - 1): made on the device
    elements = xp.arange(n_el, dtype=np.int64) if every else bk.contiguous(xp, np.asarray(elements), np.int64)
    pairs = bk.contiguous(xp, np.asarray(mesh.interface_elements), np.int64)  # one copy; the columns split there
    a, b = xp.ascontiguousarray(pairs[:, 0]), xp.ascontiguousarray(pairs[:, 1])
    adj_offsets, adj_col, block_start, row_width, diag_entry, interface_entry = adjacency_on(
        xp, n_el, a, b, element_dofs)
    column_first, n_cols = dof_offsets, int(dof_offsets[-1])
    if column_numbering is not None:
        label, first, n_cols = column_numbering
        column_first = bk.contiguous(xp, np.asarray(first), np.int64)
        block_start = blocks_by_label_on(xp, adj_offsets, adj_col, element_dofs,
                                         bk.contiguous(xp, np.asarray(label), np.int64))

    # rows of the selected elements, numbered consecutively in their order
    sel_dofs = element_dofs[elements]
    row_base = xp.full(n_el, -1, dtype=np.int64)
    row_base[elements] = _exclusive_cumsum(xp, sel_dofs * row_width[elements])[:-1]
    first_rows = _exclusive_cumsum(xp, sel_dofs)
    row_start = xp.full(n_el, -1, dtype=np.int64)
    row_start[elements] = first_rows[:-1]
    n_rows = int(first_rows[-1])
    row_element = elements[segment_owner(xp, first_rows, n_rows)]  # the element of each assembled row
    indptr = _exclusive_cumsum(xp, row_width[row_element])
    nnz = int(indptr[-1])
    if rows_only:
        indices = xp.empty(0, dtype=np.int64)
    else:
        check_device_index_range(nnz, n_rows, int(n_cols))  # before anything nnz-sized exists
        indices = xp.empty(nnz, dtype=np.int64)
        if fill_indices is None:
            from .cuda_kernels import fill_pattern_indices as fill_indices
        fill_indices(row_element, column_first, element_dofs, adj_offsets, adj_col, block_start, row_base, row_start,
                     row_width, indices)
    return SparsityPattern(
        n_rows=n_rows, n_cols=int(n_cols), indptr=indptr, indices=indices, row_base=row_base, row_width=row_width,
        adj_offsets=adj_offsets, adj_col=adj_col, block_start=block_start, diag_entry=diag_entry,
        interface_entry=interface_entry, row_start=row_start, elements=elements, element_dofs=element_dofs)
