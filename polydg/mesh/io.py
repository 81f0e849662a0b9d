"""Mesh input and output in one place: readers (files, specs) and writers."""

from .output import plot_mesh, write_vtu
from .readers import load_mesh, read_mesh, read_vtk_polydata

__all__ = ["load_mesh", "read_mesh", "read_vtk_polydata", "write_vtu", "plot_mesh"]
