"""Assembly across MPI ranks (docs/design.md §11): ``mpiexec -n N python -m polydg.assemble``.

:func:`assemble_distributed` partitions the elements with METIS (weighted by
kernel work), hands each rank its part and halo, and returns each rank's rows
in the PETSc MPIAIJ layout; :meth:`DistributedAssembly.gather` gives rank 0
the one-process matrix bit for bit; :func:`watch_ranks` ends every rank when
one cannot go on (:mod:`.watch`).  Needs mpi4py (``pip install 'polydg[mpi]'``).
"""

from importlib import import_module

#: where each name lives: imported on first use, so that :mod:`.comm` (is this one of several ranks?)
#: costs no assembly import
_NAMES = {"DistributedAssembly": "assembly", "assemble_distributed": "assembly", "RankFailure": "comm",
          "launched_ranks": "comm", "world": "comm", "RankPart": "parts", "rank_parts": "parts",
          "watch_ranks": "watch"}


def __getattr__(name: str):
    if name in _NAMES:
        return getattr(import_module(f".{_NAMES[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["DistributedAssembly", "RankFailure", "RankPart", "assemble_distributed", "launched_ranks", "rank_parts",
           "watch_ranks", "world"]
