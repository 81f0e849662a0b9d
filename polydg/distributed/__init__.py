"""Assembly across MPI ranks (DESIGN.md section 7): ``mpiexec -n N python -m polydg.assemble``.

:func:`assemble_distributed` partitions the elements with METIS (weighted by
kernel work), hands each rank its part and halo, and returns each rank's rows
in the PETSc MPIAIJ layout; :meth:`DistributedAssembly.gather` gives rank 0
the one-process matrix bit for bit.  Needs mpi4py (``pip install 'polydg[mpi]'``).
"""

from .assembly import DistributedAssembly, assemble_distributed
from .comm import RankFailure, launched_ranks, world
from .parts import RankPart, rank_parts

__all__ = ["DistributedAssembly", "RankFailure", "RankPart", "assemble_distributed", "launched_ranks", "rank_parts",
           "world"]
