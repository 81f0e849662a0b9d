"""Agglomeration of fine meshes and distribution over ranks."""

from .agglomerate import agglomerate, agglomerate_cells, dual_graph

__all__ = ["agglomerate", "agglomerate_cells", "dual_graph"]
