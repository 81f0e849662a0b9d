"""Approach 1, the baseline: COO triplets with duplicates, then SciPy's conversion to CSR (the "indices" step).

The entity kernels (``entities.py``) fill buffers whose row and column
indices ``kernels.coo_triplets`` writes; SciPy sorts the triplets and sums
the duplicates.  It builds its own matrix, so it takes no column layout of
the pattern (``column_numbering``), and it runs on the CPU only.
"""

from __future__ import annotations

import time

import numpy as np
import scipy.sparse as sp

from .. import kernels as K
from ..arguments import BlockList
from ..passes import PassContext, expand_ranges
from .entities import EntityPasses
from .registry import Reduction, register


class TripletPasses(EntityPasses):
    """The CPU executor: entity blocks kept as COO triplets, converted by SciPy at the end."""

    def __init__(self, ctx: PassContext):
        super().__init__(ctx)
        self.triplets: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []

    def reduce(self, blocks: BlockList, vals: np.ndarray, every: bool, start: float, key: str) -> None:
        ctx = self.ctx
        space, pattern = ctx.plan.space, ctx.plan.pattern
        nbasis = space.element_dofs
        if not every:  # the kept blocks' values, packed
            sizes = nbasis[blocks.row] * nbasis[pattern.adj_col[blocks.entry]]
            vals = vals[expand_ranges(blocks.offset, blocks.offset + sizes)]
            blocks = blocks._replace(offset=np.cumsum(sizes) - sizes)
        rows = np.empty(len(vals), dtype=np.int64)
        cols = np.empty(len(vals), dtype=np.int64)
        K.coo_triplets(blocks, vals, nbasis, ctx.args.pattern, space.dof_offsets, rows, cols)
        self.triplets.append((rows, cols, vals))
        ctx.timer.add("indices", start)

    def matrix(self) -> sp.csr_matrix:
        """SciPy's conversion of the triplets, with int64 indices."""
        pattern = self.ctx.plan.pattern
        t = time.perf_counter()
        rows, cols, vals = (np.concatenate([c[k] for c in self.triplets]) for k in range(3))
        matrix = sp.coo_matrix((vals, (rows, cols)), shape=(pattern.n_rows, pattern.n_cols)).tocsr()
        matrix.sum_duplicates()
        matrix.indices = matrix.indices.astype(np.int64)
        matrix.indptr = matrix.indptr.astype(np.int64)
        self.ctx.timer.add("indices", t)
        return matrix


COO = register(Reduction(
    name="1", summary="COO triplets with duplicates, then SciPy's conversion (the baseline)", deterministic=True,
    fills_pattern=False, cpu=TripletPasses))
