"""What of a slab's system depends on t: the matrix, through its coefficients, or the load alone.

A slab's matrix reads the problem's A, b, c and the Neumann mask at its
quadrature points (volume, faces, and the penalty's bound of A at the volume
points); its load reads f, g_D and g_N too.  Slabs of equal length are the
same mesh shifted in time, so when A, b, c and the mask do not depend on t
their matrices are equal (to round-off: the shifted points' t coordinates)
and only the load has to be assembled again
(:func:`polydg.assembly.assemble` with ``matrix=False``).

Whether they depend on t is known without evaluation when they are constants
(:func:`matrix_coefficients_constant`).  For callables it is detected
(:class:`CoefficientFingerprint`): each is evaluated at every quadrature point
its matrix terms read, the values' bytes are hashed, and the digest of a slab
is compared with that of the slab whose matrix is kept.  The slabs' points
have bitwise the same spatial coordinates and only t shifted, so a callable
free of t gives bitwise the same values and the same digest; any change of
any value at any of those points changes it.  It costs the quadrature points
and one evaluation of those callables per slab, no kernel.
"""

from __future__ import annotations

import hashlib

import numpy as np

from ..assembly.plan import face_rule_degrees
from ..assembly.points import point_ranges, simplex_points
from ..problem import Problem
from ..quadrature import default_degree
from ..space import DGSpace

#: the problem's attributes that the slab matrix reads (the others, f, g_D, g_N, only its load)
MATRIX_COEFFICIENTS = ("diffusion", "advection", "reaction", "is_neumann")
#: the attributes that only the load reads
LOAD_DATA = ("source", "dirichlet", "neumann")
#: quadrature points per evaluation: bounds the memory held at once, whatever the rules' sizes
FINGERPRINT_POINTS = 2**21


def matrix_coefficients_constant(problem: Problem) -> bool:
    """Whether A, b, c and the Neumann mask are constants (or absent): then no slab matrix depends on t."""
    return not any(callable(getattr(problem, name)) for name in MATRIX_COEFFICIENTS)


def load_data_constant(problem: Problem) -> bool:
    """Whether f, g_D and g_N are constants (or absent)."""
    return not any(callable(getattr(problem, name)) for name in LOAD_DATA)


class CoefficientFingerprint:
    """A digest of the matrix coefficients of a slab problem at the quadrature points its matrix reads.

    ``fingerprint(space, slab)`` hashes, in a fixed order, the values of each
    callable among A, b, c (volume points; A and b also at every face's
    points) and the Neumann mask (boundary faces' points and normals), with
    the rules the assembly uses (``quadrature_extra`` as given to it).  Two
    slabs of equal length whose digests are equal have equal matrices.
    """

    def __init__(self, problem: Problem, quadrature_extra: int = 0):
        self.names = [name for name in MATRIX_COEFFICIENTS if callable(getattr(problem, name))]
        self.extra = int(quadrature_extra)

    def __call__(self, space: DGSpace, slab: Problem) -> bytes:
        mesh = space.mesh
        digest = hashlib.blake2b(digest_size=32)
        rule = space.total_degree
        volume = [n for n in ("diffusion", "advection", "reaction") if n in self.names]
        if volume:
            q = default_degree(rule, self.extra)[mesh.simplex_element]
            for cut in point_ranges(mesh.dim, q, FINGERPRINT_POINTS):
                x = simplex_points(mesh.points, mesh.simplex_volume[cut], q[cut], cells=mesh.simplices[cut]).x
                for name in volume:
                    digest.update(np.ascontiguousarray(getattr(slab, f"{name}_at")(x)).tobytes())
        faces = [n for n in ("diffusion", "advection") if n in self.names]
        neumann = "is_neumann" in self.names and slab.has_diffusion
        if faces or neumann:
            q = face_rule_degrees(rule, mesh.face_elements, self.extra)
            boundary = mesh.face_elements[:, 1] < 0
            for cut in point_ranges(mesh.dim - 1, q, FINGERPRINT_POINTS):
                batch = simplex_points(mesh.points, mesh.face_measure[cut], q[cut], cells=mesh.face_vertices[cut])
                for name in faces:
                    digest.update(np.ascontiguousarray(getattr(slab, f"{name}_at")(batch.x)).tobytes())
                if neumann:
                    on_boundary = np.repeat(boundary[cut], np.diff(batch.offsets))
                    normals = np.repeat(mesh.face_normal[cut], np.diff(batch.offsets), axis=0)
                    mask = slab.neumann_mask(batch.x[on_boundary], normals[on_boundary])
                    digest.update(np.ascontiguousarray(mask).tobytes())
        return digest.digest()


__all__ = ["MATRIX_COEFFICIENTS", "LOAD_DATA", "CoefficientFingerprint", "matrix_coefficients_constant",
           "load_data_constant"]
