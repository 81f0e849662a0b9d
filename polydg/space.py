"""The DG space: a polynomial degree per element and the numbering of dofs."""

from __future__ import annotations

import numpy as np

from .basis import n_basis
from .errors import OptionError
from .mesh.polytopic import PolytopicMesh


class DGSpace:
    """Discontinuous piecewise polynomials of total degree ``degree[e]`` on element e.

    Dofs are numbered element by element: element e owns the contiguous range
    ``dof_offsets[e]:dof_offsets[e+1]`` of ``n_basis(degree[e], d)`` dofs, in
    the hierarchical order of :func:`polydg.basis.multi_indices`.

    Parameters
    ----------
    mesh : PolytopicMesh
    degree : int or (n_elements,) array of int
        Uniform degree, or one degree per element (hp).

    >>> from polydg.mesh import unit_square, build_polytopic_mesh
    >>> space = DGSpace(build_polytopic_mesh(unit_square(2)), 2)
    >>> space.n_dofs
    48
    """

    def __init__(self, mesh: PolytopicMesh, degree: int | np.ndarray) -> None:
        self.mesh = mesh
        deg = np.asarray(degree)
        if deg.ndim == 0:
            deg = np.full(mesh.n_elements, int(deg), dtype=np.int64)
        if deg.shape != (mesh.n_elements,):
            raise OptionError(
                f"degree array has shape {deg.shape}, expected ({mesh.n_elements},) (one per element)"
            )
        if not np.issubdtype(deg.dtype, np.integer):
            if not np.all(deg == np.round(deg)):
                raise OptionError("polynomial degrees must be integers")
        deg = deg.astype(np.int64)
        if deg.min() < 0:
            e = int(np.argmin(deg))
            raise OptionError(f"polynomial degree must be >= 0, got {int(deg[e])} on element {e}")
        self.degree = deg
        d = mesh.dim
        table = np.array([n_basis(p, d) for p in range(int(deg.max()) + 1)], dtype=np.int64)
        self.element_dofs = table[deg]
        self.dof_offsets = np.zeros(mesh.n_elements + 1, dtype=np.int64)
        np.cumsum(self.element_dofs, out=self.dof_offsets[1:])

    @property
    def dim(self) -> int:
        return self.mesh.dim

    @property
    def n_dofs(self) -> int:
        return int(self.dof_offsets[-1])

    @property
    def max_degree(self) -> int:
        return int(self.degree.max())

    @property
    def min_degree(self) -> int:
        return int(self.degree.min())

    def __repr__(self) -> str:
        return (
            f"DGSpace({self.mesh.n_elements} elements, degree {self.min_degree}..{self.max_degree}, "
            f"{self.n_dofs} dofs)"
        )
