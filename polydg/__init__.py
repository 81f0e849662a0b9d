"""polydg: interior-penalty discontinuous Galerkin assembly on polytopic meshes."""

__version__ = "0.1.0"
