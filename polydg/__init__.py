"""polydg: interior-penalty discontinuous Galerkin assembly on polytopic meshes."""

from .jit import use_cache_directory

__version__ = "0.1.0"

#: Numba's on-disk cache of polydg's kernels, one directory per version of the sources (see polydg.jit)
CACHE_DIRECTORY = use_cache_directory()
