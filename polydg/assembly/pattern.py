"""The block sparsity pattern of the IP-dG matrix, built without sorting nnz entries.

Element e's rows hold one dense block per element of {e} U neighbours(e),
sorted by column element.  Every row of e has the same width

    W_e = sum over c in {e} U neighbours(e) of n_dofs(c),

so with ``row_base[e] = indptr[dof_offsets[e]]`` the entry (i, j) of block
(e, c) sits at

    row_base[e] + i * W_e + block_start[(e, c)] + j,

where ``block_start`` is the running sum of the column widths of the blocks
before c in e's row.  Everything is a cumulative sum over elements or
adjacency entries (O(n_elements + n_interfaces)); only ``indices`` is written
per non-zero, by a compiled loop.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from ..mesh.polytopic import PolytopicMesh
from ..threads import parallel_range, range_kernel


@dataclass
class SparsityPattern:
    """Block-CSR layout of the matrix rows of a set of elements.

    Adjacency entries (one per block) are grouped by row element and sorted by
    column element: entries ``adj_offsets[e]:adj_offsets[e+1]`` of
    ``adj_col`` are the column elements of e's row.

    Attributes
    ----------
    indptr, indices : the CSR arrays (int64) of the rows of ``elements``
    row_base : (n_elements,) offset in ``data`` of element e's first row
        (-1 for elements whose rows are not assembled here)
    row_start : (n_elements,) index of element e's first row among the
        assembled rows (-1 for elements whose rows are not assembled here)
    row_width : (n_elements,) width W_e of e's rows
    adj_offsets, adj_col, block_start : the adjacency entries
    diag_entry : (n_elements,) adjacency entry of the diagonal block (e, e)
    interface_entry : (n_interfaces, 2) adjacency entries of blocks (e1, e2)
        and (e2, e1)
    """

    n_rows: int
    n_cols: int
    indptr: np.ndarray
    indices: np.ndarray
    row_base: np.ndarray
    row_width: np.ndarray
    adj_offsets: np.ndarray
    adj_col: np.ndarray
    block_start: np.ndarray
    diag_entry: np.ndarray
    interface_entry: np.ndarray
    row_start: np.ndarray
    elements: np.ndarray | None = None
    element_dofs: np.ndarray | None = None

    def zeroed_values(self, dtype) -> np.ndarray:
        """A zeroed CSR value array for this pattern.

        Zeroed in parallel, element row block by element row block: the first
        write to fresh memory costs a page fault, and this way the faults are
        taken by all threads, in their own step, instead of inside the first
        kernel.
        """
        values = np.empty(self.nnz, dtype=dtype)
        parallel_range(_zero_rows, 0, len(self.elements), self.elements, self.element_dofs, self.row_base,
                       self.row_width, values)
        return values

    @property
    def nnz(self) -> int:
        return int(self.indptr[-1])


@range_kernel
def _fill_indices(t_lo, t_hi, elements, column_first, element_dofs, adj_offsets, adj_col, block_start, row_base,
                  row_width, indices):  # pragma: no cover
    """Column indices of the rows of ``elements[t_lo:t_hi]``: all rows of an element have the same
    columns, so the first row is written block by block and copied to the others."""
    for t in range(t_lo, t_hi):
        e = elements[t]
        w = row_width[e]
        first = row_base[e]
        for k in range(adj_offsets[e], adj_offsets[e + 1]):
            start = column_first[adj_col[k]]
            pos = first + block_start[k]
            for j in range(element_dofs[adj_col[k]]):
                indices[pos + j] = start + j
        for i in range(1, element_dofs[e]):
            for j in range(w):
                indices[first + i * w + j] = indices[first + j]


@njit(cache=True)
def _adjacency(n_el, a, b, element_dofs):  # pragma: no cover - compiled
    """The block rows: for each element, its neighbours below it, itself, its neighbours above it.

    Interfaces (a, b) come with a < b, sorted lexicographically (a mesh
    invariant, checked here), so the neighbours above a are its interfaces
    in order, and those below b arrive in increasing order during one pass:
    no sort.  Returns adj_offsets, adj_col, block_start, row_width,
    diag_entry and interface_entry (the entries of blocks (a, b), (b, a)).
    """
    n_if = a.shape[0]
    below = np.zeros(n_el, np.int64)
    above = np.zeros(n_el, np.int64)
    for i in range(n_if):
        if a[i] >= b[i] or (i > 0 and (a[i] < a[i - 1] or (a[i] == a[i - 1] and b[i] <= b[i - 1]))):
            raise ValueError("mesh interfaces are not (e1 < e2) pairs in lexicographic order")
        above[a[i]] += 1
        below[b[i]] += 1
    adj_offsets = np.zeros(n_el + 1, np.int64)
    for e in range(n_el):
        adj_offsets[e + 1] = adj_offsets[e] + below[e] + 1 + above[e]
    adj_col = np.empty(adj_offsets[n_el], np.int64)
    diag_entry = np.empty(n_el, np.int64)
    cursor_below = adj_offsets[:-1].copy()
    cursor_above = np.empty(n_el, np.int64)
    for e in range(n_el):
        diag_entry[e] = adj_offsets[e] + below[e]
        adj_col[diag_entry[e]] = e
        cursor_above[e] = diag_entry[e] + 1
    interface_entry = np.empty((n_if, 2), np.int64)
    for i in range(n_if):
        k = cursor_above[a[i]]
        adj_col[k] = b[i]
        interface_entry[i, 0] = k
        cursor_above[a[i]] = k + 1
        k = cursor_below[b[i]]
        adj_col[k] = a[i]
        interface_entry[i, 1] = k
        cursor_below[b[i]] = k + 1
    block_start = np.empty(adj_col.shape[0], np.int64)
    row_width = np.empty(n_el, np.int64)
    for e in range(n_el):
        w = 0
        for k in range(adj_offsets[e], adj_offsets[e + 1]):
            block_start[k] = w
            w += element_dofs[adj_col[k]]
        row_width[e] = w
    return adj_offsets, adj_col, block_start, row_width, diag_entry, interface_entry


@range_kernel
def _zero_rows(t_lo, t_hi, elements, element_dofs, row_base, row_width, values):  # pragma: no cover
    for t in range(t_lo, t_hi):
        e = elements[t]
        for k in range(row_base[e], row_base[e] + element_dofs[e] * row_width[e]):
            values[k] = 0


def compile_pattern_kernels() -> None:
    """Compile (or load from Numba's cache) the pattern kernel, on empty input."""
    z = np.zeros(0, dtype=np.int64)
    _adjacency(0, z, z, z)
    _label_blocks(np.zeros(1, np.int64), z, z, z, z)
    _fill_indices(0, 0, z, np.zeros(1, np.int64), z, np.zeros(1, np.int64), z, z, z, z, z)
    for dtype in (np.float64, np.float32):
        _zero_rows(0, 0, z, z, z, z, np.zeros(0, dtype))


def sparsity_pattern(
    mesh: PolytopicMesh, dof_offsets: np.ndarray, elements: np.ndarray | None = None,
    column_numbering: tuple[np.ndarray, np.ndarray, int] | None = None, rows_only: bool = False,
) -> SparsityPattern:
    """Sparsity pattern of the rows of ``elements`` (default: all, in order).

    With ``rows_only`` the column ``indices`` are not written (an empty
    array): what a load vector needs (``row_start``, ``n_rows``) without the
    nnz-sized work of the matrix.

    ``elements`` is an increasing array of element ids (the rows of one rank);
    their rows are numbered consecutively, in that order.  Columns are global:
    ``dof_offsets``, or with ``column_numbering = (label, first, n)`` element
    e's columns are ``first[e]:first[e] + n_e`` of n, and each row's blocks
    are laid out in the order of their elements' ``label`` (the MPI rank
    numbering: the values land where PETSc wants them, with no copy).  The
    adjacency entries, and so the order in which kernels visit neighbours,
    stay in element order either way.

    >>> from polydg.mesh import unit_square, build_polytopic_mesh
    >>> from polydg.space import DGSpace
    >>> space = DGSpace(build_polytopic_mesh(unit_square(2)), 1)
    >>> pat = sparsity_pattern(space.mesh, space.dof_offsets)
    >>> pat.n_rows, pat.nnz  # 8 triangles, 3 dofs each; every row: itself + its 2 neighbours
    (24, 216)
    """
    n_el = mesh.n_elements
    element_dofs = np.diff(dof_offsets)
    if elements is None:
        elements = np.arange(n_el, dtype=np.int64)
    elements = np.asarray(elements, dtype=np.int64)
    a = np.ascontiguousarray(mesh.interface_elements[:, 0], dtype=np.int64)
    b = np.ascontiguousarray(mesh.interface_elements[:, 1], dtype=np.int64)
    adj_offsets, adj_col, block_start, row_width, diag_entry, interface_entry = _adjacency(
        n_el, a, b, element_dofs.astype(np.int64))
    column_first, n_cols = dof_offsets, int(dof_offsets[-1])
    if column_numbering is not None:
        label, column_first, n_cols = column_numbering
        column_first = np.ascontiguousarray(column_first, dtype=np.int64)
        block_start = _blocks_by_label(adj_offsets, adj_col, element_dofs, np.asarray(label))

    # rows of the selected elements
    sel_sizes = element_dofs[elements] * row_width[elements]
    row_base = np.full(n_el, -1, dtype=np.int64)
    row_base[elements] = np.cumsum(sel_sizes) - sel_sizes
    row_start = np.full(n_el, -1, dtype=np.int64)
    row_start[elements] = np.cumsum(element_dofs[elements]) - element_dofs[elements]
    n_rows = int(element_dofs[elements].sum())
    indptr = np.zeros(n_rows + 1, dtype=np.int64)
    np.cumsum(np.repeat(row_width[elements], element_dofs[elements]), out=indptr[1:])
    indices = np.empty(0 if rows_only else int(indptr[-1]), dtype=np.int64)
    if not rows_only:
        parallel_range(_fill_indices, 0, len(elements), elements, column_first, element_dofs, adj_offsets, adj_col,
                       block_start, row_base, row_width, indices)
    return SparsityPattern(
        n_rows=n_rows,
        n_cols=int(n_cols),
        indptr=indptr,
        indices=indices,
        row_base=row_base,
        row_width=row_width,
        adj_offsets=adj_offsets,
        adj_col=adj_col,
        block_start=block_start,
        diag_entry=diag_entry,
        interface_entry=interface_entry,
        row_start=row_start,
        elements=elements,
        element_dofs=element_dofs.astype(np.int64),
    )


def _blocks_by_label(adj_offsets: np.ndarray, adj_col: np.ndarray, element_dofs: np.ndarray,
                     label: np.ndarray) -> np.ndarray:
    """block_start with each row's blocks ordered by their column elements' labels (adjacency order kept)."""
    block_start = np.empty(len(adj_col), dtype=np.int64)
    _label_blocks(np.ascontiguousarray(adj_offsets, dtype=np.int64), np.ascontiguousarray(adj_col, dtype=np.int64),
                  np.ascontiguousarray(element_dofs, dtype=np.int64), np.ascontiguousarray(label), block_start)
    return block_start


@njit(cache=True)
def _label_blocks(adj_offsets, adj_col, element_dofs, label, block_start):  # pragma: no cover - compiled
    """Row by row, the row's entries sorted by label (an insertion sort, stable: a row has a few dozen
    entries, mostly in order already), then the running sum of their widths.  Linear in the rows, where
    one sort of all entries cost more than the rest of a rank's pattern."""
    n_el = adj_offsets.shape[0] - 1
    longest = 0
    for e in range(n_el):
        longest = max(longest, adj_offsets[e + 1] - adj_offsets[e])
    keys = np.empty(longest, label.dtype)
    order = np.empty(longest, np.int64)
    for e in range(n_el):
        lo, hi = adj_offsets[e], adj_offsets[e + 1]
        for i in range(hi - lo):
            key = label[adj_col[lo + i]]
            j = i
            while j > 0 and keys[j - 1] > key:
                keys[j] = keys[j - 1]
                order[j] = order[j - 1]
                j -= 1
            keys[j] = key
            order[j] = lo + i
        w = 0
        for i in range(hi - lo):
            k = order[i]
            block_start[k] = w
            w += element_dofs[adj_col[k]]
