"""Meshes: fine simplicial meshes, polytopic meshes, readers, generators."""

from .simplicial import SimplexMesh
from .polytopic import PolytopicMesh, build_polytopic_mesh
from .generators import from_spec, unit_square, unit_cube, oscillating_square
from .io import load_mesh, read_mesh, write_vtu

__all__ = [
    "SimplexMesh",
    "PolytopicMesh",
    "build_polytopic_mesh",
    "from_spec",
    "unit_square",
    "unit_cube",
    "oscillating_square",
    "load_mesh",
    "read_mesh",
    "write_vtu",
]
