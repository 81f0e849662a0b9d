"""What a layer above the assembly fixes for one assembly: :class:`AssemblyScope`.

The user's choices are :class:`~polydg.assembly.options.AssemblyOptions`.  The
layers that call :func:`~polydg.assembly.assemble` for a part of a bigger
system fix more: the MPI ranks (:mod:`polydg.distributed`) assemble the rows
of their elements, with penalties computed across ranks and columns in the
rank numbering; a space-time slab (:mod:`polydg.spacetime`) scales the
penalty of the faces between an element's time steps and, keeping its
matrix, assembles a load without its bottom face.  Those are a scope,
built by those layers; a user reaches a row subset the same way::

    >>> AssemblyScope(elements=[0, 2, 5]).elements
    array([0, 2, 5])
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import OptionError


@dataclass(frozen=True, eq=False)
class AssemblyScope:
    """The part of the system an assembly forms, and what is given to it from outside.

    elements : assemble only the rows of these elements (an increasing array of element ids:
        the rows of one MPI rank), numbered consecutively in that order; columns stay global.
        Default all.  The chunks cover ``elements[0]:elements[-1] + 1``, so the work is that of
        the range they span (:mod:`polydg.distributed` gives each rank a sub-mesh in which they
        span only themselves and their halo).
    face_penalty : sigma_F per face of the mesh, used instead of computing it from the options'
        ``penalty`` and ``penalty_kind`` (a rank's sub-mesh lacks the neighbours' other faces that
        the paper's formula reads; a slab that keeps its matrix keeps its penalty)
    face_penalty_scale : (n_faces,) factors >= 0 on the faces' penalties, default none (all 1).  A
        space-time slab with local time steps passes 0 on the faces between an element's steps:
        A = diag(a, 0) has no normal part there, and the dG-in-time jump is the upwind term alone
    column_numbering : ``(label, first, n)``: element e's columns are ``first[e]:first[e] + n_e``
        of n, each row's blocks in the order of ``label`` (how an MPI rank writes the rank
        numbering's columns directly; :func:`~polydg.assembly.pattern.sparsity_pattern`);
        approaches 2 and atomic
    load_boundary_faces : for the load alone (``assemble(..., matrix=False)``), (n_faces,) bool:
        the boundary faces whose terms go into the load (default all).  A space-time slab leaves
        out its bottom face: its inflow value is the previous slab's trace, a load of its own

    The arrays are kept as int64, float64 and bool; :meth:`check` compares their shapes with a mesh.
    """

    elements: np.ndarray | None = None
    face_penalty: np.ndarray | None = None
    face_penalty_scale: np.ndarray | None = None
    column_numbering: tuple | None = None
    load_boundary_faces: np.ndarray | None = None

    def __post_init__(self):
        for name, dtype in (("elements", np.int64), ("face_penalty", np.float64),
                            ("face_penalty_scale", np.float64), ("load_boundary_faces", bool)):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, np.asarray(value, dtype=dtype))

    def rows(self, n_elements: int) -> np.ndarray:
        """The elements whose rows are assembled: ``elements``, or all ``n_elements``."""
        return np.arange(n_elements, dtype=np.int64) if self.elements is None else self.elements

    def check(self, mesh, reduction, matrix: bool = True) -> None:
        """Raise :class:`~polydg.errors.OptionError` (one line) unless this scope fits ``mesh`` and
        an assembly by ``reduction`` (a :class:`~polydg.assembly.reductions.Reduction`) with ``matrix``."""
        n_el, n_faces = mesh.n_elements, mesh.n_faces
        e = self.elements
        if e is not None and (e.ndim != 1 or len(e) == 0 or np.any(np.diff(e) <= 0) or e[0] < 0 or e[-1] >= n_el):
            raise OptionError(f"elements must be a non-empty increasing array of element ids in [0, {n_el})")
        if self.face_penalty is not None and self.face_penalty.shape != (n_faces,):
            raise OptionError(f"face_penalty has shape {self.face_penalty.shape}, expected ({n_faces},) "
                              "(one per face)")
        scale = self.face_penalty_scale
        if scale is not None and (scale.shape != (n_faces,) or not (scale >= 0).all()):
            raise OptionError(f"face_penalty_scale must be ({n_faces},) factors >= 0 (one per face), "
                              f"got shape {scale.shape}")
        if self.column_numbering is not None and not reduction.fills_pattern:
            raise OptionError(f"approach {reduction.name!r} builds its own matrix: it takes no column_numbering")
        faces = self.load_boundary_faces
        if faces is not None and (matrix or faces.shape != (n_faces,)):
            raise OptionError(f"load_boundary_faces is for the load alone (matrix=False), one bool per face "
                              f"({n_faces}); got shape {faces.shape}")


__all__ = ["AssemblyScope"]
