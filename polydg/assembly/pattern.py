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
from numba import njit, prange

from ..mesh.polytopic import PolytopicMesh


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
    first_row: int = 0
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
        _zero_rows(self.elements, self.element_dofs, self.row_base, self.row_width, values)
        return values

    @property
    def nnz(self) -> int:
        return int(self.indptr[-1])


@njit(parallel=True, cache=True)
def _fill_indices(elements, dof_offsets, element_dofs, adj_offsets, adj_col, row_base, row_width,
                  indices):  # pragma: no cover
    for t in prange(elements.shape[0]):
        e = elements[t]
        w = row_width[e]
        for i in range(element_dofs[e]):
            pos = row_base[e] + i * w
            for k in range(adj_offsets[e], adj_offsets[e + 1]):
                c = adj_col[k]
                start = dof_offsets[c]
                for j in range(element_dofs[c]):
                    indices[pos] = start + j
                    pos += 1


@njit(parallel=True, cache=True)
def _zero_rows(elements, element_dofs, row_base, row_width, values):  # pragma: no cover
    for t in prange(elements.shape[0]):
        e = elements[t]
        for k in range(row_base[e], row_base[e] + element_dofs[e] * row_width[e]):
            values[k] = 0


def compile_pattern_kernels() -> None:
    """Compile (or load from Numba's cache) the pattern kernel, on empty input."""
    z = np.zeros(0, dtype=np.int64)
    _fill_indices(z, np.zeros(1, np.int64), z, np.zeros(1, np.int64), z, z, z, z)
    for dtype in (np.float64, np.float32):
        _zero_rows(z, z, z, z, np.zeros(0, dtype))


def sparsity_pattern(
    mesh: PolytopicMesh, dof_offsets: np.ndarray, elements: np.ndarray | None = None
) -> SparsityPattern:
    """Sparsity pattern of the rows of ``elements`` (default: all, in order).

    ``elements`` must be a contiguous, increasing range of element ids (the
    rows of one rank); its rows are numbered from ``dof_offsets[elements[0]]``.
    Columns are global.

    >>> from polydg.mesh import unit_square, build_polytopic_mesh
    >>> from polydg.space import DGSpace
    >>> space = DGSpace(build_polytopic_mesh(unit_square(2)), 1)
    >>> pat = sparsity_pattern(space.mesh, space.dof_offsets)
    >>> pat.n_rows, pat.nnz  # 8 triangles, each with itself + its neighbours
    (24, 144)
    """
    n_el = mesh.n_elements
    element_dofs = np.diff(dof_offsets)
    if elements is None:
        elements = np.arange(n_el, dtype=np.int64)
    elements = np.asarray(elements, dtype=np.int64)
    a, b = mesh.interface_elements[:, 0], mesh.interface_elements[:, 1]
    n_if = len(a)
    # adjacency entries: self blocks, then (e1, e2), then (e2, e1)
    rows = np.concatenate([np.arange(n_el, dtype=np.int64), a, b])
    cols = np.concatenate([np.arange(n_el, dtype=np.int64), b, a])
    # sorted by (row, column): one stable sort of the combined int64 key (a
    # radix sort in NumPy, 3x faster than lexsort); O(n_elements + n_interfaces)
    # entries, never nnz
    order = np.argsort(rows * max(n_el, 1) + cols, kind="stable")
    position = np.empty_like(order)
    position[order] = np.arange(len(order))
    adj_col = cols[order]
    adj_row = rows[order]
    adj_offsets = np.zeros(n_el + 1, dtype=np.int64)
    np.cumsum(np.bincount(adj_row, minlength=n_el), out=adj_offsets[1:])
    widths = element_dofs[adj_col]
    running = np.cumsum(widths) - widths  # exclusive scan over all entries
    block_start = running - running[adj_offsets[:-1]][adj_row]
    row_width = np.add.reduceat(widths, adj_offsets[:-1]) if n_el else np.zeros(0, np.int64)
    row_width = row_width.astype(np.int64)
    diag_entry = position[:n_el]
    interface_entry = np.stack([position[n_el:n_el + n_if], position[n_el + n_if:]], axis=1)

    # rows of the selected elements
    sel_sizes = element_dofs[elements] * row_width[elements]
    row_base = np.full(n_el, -1, dtype=np.int64)
    row_base[elements] = np.cumsum(sel_sizes) - sel_sizes
    n_rows = int(element_dofs[elements].sum())
    indptr = np.zeros(n_rows + 1, dtype=np.int64)
    np.cumsum(np.repeat(row_width[elements], element_dofs[elements]), out=indptr[1:])
    indices = np.empty(int(indptr[-1]), dtype=np.int64)
    _fill_indices(elements, dof_offsets, element_dofs, adj_offsets, adj_col, row_base, row_width, indices)
    return SparsityPattern(
        n_rows=n_rows,
        n_cols=int(dof_offsets[-1]),
        indptr=indptr,
        indices=indices,
        row_base=row_base,
        row_width=row_width,
        adj_offsets=adj_offsets,
        adj_col=adj_col.astype(np.int64),
        block_start=block_start.astype(np.int64),
        diag_entry=diag_entry.astype(np.int64),
        interface_entry=interface_entry.astype(np.int64),
        first_row=int(dof_offsets[elements[0]]) if len(elements) else 0,
        elements=elements,
        element_dofs=element_dofs.astype(np.int64),
    )
