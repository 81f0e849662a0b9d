"""What an assembly returns: :class:`AssemblyResult` (the matrix, the load, the face penalty, the record),
its matrix made by :func:`csr_as_given`."""

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

    def __repr__(self) -> str:  # one line: the arrays and the info dict are read as attributes
        info = self.info
        shape = getattr(self.matrix, "shape", None)
        what = ("no matrix (the load alone)" if self.matrix is None else
                f"matrix {shape[0]} x {shape[1]}, {self.matrix.nnz} non-zeros" if shape is not None else
                f"{self.matrix.nnz} non-zeros on the ranks")
        seconds = info.get("timings", {}).get("total_assembly")
        extra = "".join(f", {info[k]}" for k in ("backend", "precision") if k in info)
        return (f"AssemblyResult({what}, load of {len(self.rhs)} rows{extra}"
                + (f", {seconds:.3g} s" if seconds is not None else "") + ")")


def size_record(space, rows: int, elements: np.ndarray, matrix) -> dict:
    """The sizes every assembly's ``info`` starts with: the mesh's entities, the dofs, the assembled rows
    (``elements``: their elements, increasing), the non-zeros, and whether the matrix or the load alone."""
    mesh = space.mesh
    return {
        "dimension": mesh.dim,
        "elements": mesh.n_elements,
        "rows_elements": [int(elements[0]), int(elements[-1]) + 1],
        "sub_elements": mesh.n_simplices,
        "interior_faces": mesh.n_interior_faces,
        "interfaces": mesh.n_interfaces,
        "boundary_faces": mesh.n_boundary_faces,
        "dofs": space.n_dofs,
        "rows": rows,
        "nnz": int(matrix.nnz) if matrix is not None else 0,
        "assembled": "matrix+load" if matrix is not None else "load",
        "degree": {"min": space.min_degree, "max": space.max_degree},
    }


def csr_as_given(data: np.ndarray, indices: np.ndarray, indptr: np.ndarray, shape: tuple[int, int]) -> sp.csr_matrix:
    """A SciPy CSR matrix holding these arrays as they are (columns sorted in every row): SciPy's
    constructor would first copy int64 indices that fit int32 into int32 ones (an nnz-sized copy), and
    polydg promises int64."""
    matrix = sp.csr_matrix(shape, dtype=data.dtype)
    matrix.data, matrix.indices, matrix.indptr = data, indices, indptr
    matrix.check_format(full_check=False)
    matrix.has_sorted_indices = True
    return matrix
