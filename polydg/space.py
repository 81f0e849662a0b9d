"""The DG space: a polynomial degree per element and the numbering of dofs."""

from __future__ import annotations

import numpy as np

from .basis import BASES, basis_indices, basis_size, total_degree
from .errors import ConditioningWarning, OptionError, warn_user
from .mesh.polytopic import PolytopicMesh, require_polytopic


#: the largest polynomial degree (its quadrature, exact to 2p + 1, would pass quadrature.MAX_LINE_POINTS)
MAX_DEGREE = 1000
#: above this degree a space warns: the basis, orthonormal on each element's bounding box but not on the
#: element, conditions the system so badly that round-off, not the discretisation, bounds the error in double
#: precision (docs/performance.md, "Figures behind the code's choices")
WELL_CONDITIONED_DEGREE = 10
_WARNED_DEGREES: set[int] = set()


class DGSpace:
    """Discontinuous piecewise polynomials of degree ``degree[e]`` on element e.

    Dofs are numbered element by element: element e owns the contiguous range
    ``dof_offsets[e]:dof_offsets[e+1]`` of ``basis_size(degree[e], d, basis)``
    dofs, in the hierarchical order of :func:`polydg.basis.basis_indices`.

    Parameters
    ----------
    mesh : PolytopicMesh
    degree : int or (n_elements,) array of int
        Uniform degree, or one degree per element (hp).
    basis : "P" (total degree p, the default) or "PQ" (degree p in the
        last coordinate, time on a space-time slab, times total degree p
        in the others); see :func:`polydg.basis.pq_multi_indices`.

    >>> from polydg.mesh import unit_square, build_polytopic_mesh
    >>> space = DGSpace(build_polytopic_mesh(unit_square(2)), 2)
    >>> space.n_dofs
    48
    """

    def __init__(self, mesh: PolytopicMesh, degree: int | np.ndarray, basis: str = "P") -> None:
        if basis not in BASES:
            raise OptionError(f"unknown basis {basis!r}; choose one of {', '.join(BASES)}")
        require_polytopic(mesh, "DGSpace takes a PolytopicMesh")
        self.mesh = mesh
        self.basis = basis
        deg = np.asarray(degree)
        whole = np.issubdtype(deg.dtype, np.integer) or (
            np.issubdtype(deg.dtype, np.floating) and bool(np.all(np.isfinite(deg) & (deg == np.round(deg)))))
        if deg.dtype == np.bool_ or not whole:  # 2.5 is not read as 2, nor True as 1
            shown = repr(degree) if deg.ndim == 0 else f"an array of {deg.dtype}"
            raise OptionError(f"polynomial degrees must be integers, got {shown}")
        if deg.ndim == 0:
            deg = np.full(mesh.n_elements, int(deg), dtype=np.int64)
        if deg.shape != (mesh.n_elements,):
            raise OptionError(
                f"degree array has shape {deg.shape}, expected ({mesh.n_elements},) (one per element)"
            )
        deg = deg.astype(np.int64)
        if deg.min() < 0 or deg.max() > MAX_DEGREE:
            e = int(np.argmin(deg)) if deg.min() < 0 else int(np.argmax(deg))
            raise OptionError(f"polynomial degree must be from 0 to {MAX_DEGREE}, got {int(deg[e])} on element {e}")
        self.degree = deg
        if int(deg.max()) > WELL_CONDITIONED_DEGREE and int(deg.max()) not in _WARNED_DEGREES:
            _WARNED_DEGREES.add(int(deg.max()))  # once per process: not again for each slab or part of a run
            warn_user(f"degree {int(deg.max())}: above about p = {WELL_CONDITIONED_DEGREE} the basis (Legendre on "
                      "each element's bounding box) conditions the system so that round-off, not the "
                      "discretisation, bounds the error, which grows with p", ConditioningWarning)
        d = mesh.dim
        table = np.array([basis_size(p, d, basis) for p in range(int(deg.max()) + 1)], dtype=np.int64)
        self.element_dofs = table[deg]
        self.dof_offsets = np.zeros(mesh.n_elements + 1, dtype=np.int64)
        np.cumsum(self.element_dofs, out=self.dof_offsets[1:])

    @property
    def dim(self) -> int:
        return self.mesh.dim

    @property
    def total_degree(self) -> np.ndarray:
        """(n_elements,) the total degree of each element's functions (``degree`` for P, twice it for PQ):
        the quadrature rules' exactness follows it."""
        return total_degree(self.degree, self.basis)

    def indices(self, p: int | None = None) -> np.ndarray:
        """The multi-index table of degree ``p`` (default the largest degree): the kernels' ``table``."""
        return basis_indices(self.max_degree if p is None else int(p), self.dim, self.basis)

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
            f"DGSpace({self.mesh.n_elements} elements, {'PQ ' if self.basis == 'PQ' else ''}degree "
            f"{self.min_degree}..{self.max_degree}, "
            f"{self.n_dofs} dofs)"
        )


def require_space(space, taker: str) -> None:
    """Refuse anything but a :class:`DGSpace` where ``taker`` ("assemble") takes one first, in one line that
    says how to make it (a mesh given for it, or the problem and the space swapped)."""
    if not isinstance(space, DGSpace):
        hint = ("make one: DGSpace(mesh, degree)" if isinstance(space, PolytopicMesh) else
                "the space comes first, then the problem" if hasattr(space, "diffusion") else
                "make one: DGSpace(mesh, degree) of a polytopic mesh")
        raise OptionError(f"{taker} takes a DGSpace first, got {type(space).__name__}: {hint}")
