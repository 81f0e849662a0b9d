"""What an assembly returns: :class:`AssemblyResult` (the matrix, the load, the face penalty, the record)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp


@dataclass
class AssemblyResult:
    """What :func:`~polydg.assembly.assemble` returns.

    matrix : scipy.sparse.csr_matrix of the assembled rows (int64 indices); None for the
        load alone (``assemble(..., matrix=False)``)
    rhs : the load vector of those rows
    face_penalty : sigma_F per face of the mesh (float64)
    info : sizes (dofs, nnz, elements, ...), options, and ``timings`` in
        seconds: element_kernel, interior_kernel, boundary_kernel,
        inflow_kernel, total_kernels, indices, penalty, total_assembly, and
        jit (compilation or cache loading, reported apart, not in the total)
    """

    matrix: sp.csr_matrix | None
    rhs: np.ndarray
    face_penalty: np.ndarray
    info: dict = field(default_factory=dict)
