"""polydg: interior-penalty discontinuous Galerkin assembly on polytopic meshes."""

from .jit import listen_to_compilations, use_cache_directory

__version__ = "0.1.0"

#: Numba's on-disk cache of polydg's kernels, one directory per version of the sources (see polydg.jit)
CACHE_DIRECTORY = use_cache_directory()
listen_to_compilations()  # the seconds spent compiling, apart from every timing (polydg.jit)
