"""Run under ``mpiexec -n N`` with ``NUMBA_ENABLE_CUDASIM=1`` by ``test_gpu_assembly.py``: the GPU executor per rank.

Every rank assembles its rows with :func:`polydg.distributed.assemble_distributed`
on the simulator's stand-in of the GPU backend (``"cudasim"``); the elements
alternate between the ranks, so each rank's owned elements sit in its
sub-mesh with halo elements between them, and the
GPU kernels meet element sets with gaps (rows skipped where
``pattern.row_base`` is -1).  Rank 0 writes the gathered matrices, the
per-rank report and whether some rank's owned set had a gap.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # gpu_simulator_cases, as a script and under pytest


def space_and_problem():
    from polydg.mesh import from_spec
    from polydg.partition import agglomerate
    from polydg.space import DGSpace

    from gpu_simulator_cases import all_kinds_problem

    mesh = agglomerate(from_spec("square:3"), 8)
    degree = np.random.default_rng(3).integers(1, 3, mesh.n_elements)
    return DGSpace(mesh, degree), all_kinds_problem(2)


def main(out: str) -> None:
    from mpi4py import MPI

    from polydg.distributed import assemble_distributed

    comm = MPI.COMM_WORLD
    root = comm.Get_rank() == 0
    space, problem = space_and_problem()
    arrays = {}
    for approach in ("2", "atomic", "auto"):
        # alternate elements between the ranks: each rank's owned elements have halo elements between them
        ranks = np.arange(space.mesh.n_elements) % comm.Get_size()
        result = assemble_distributed(space if root else None, problem, comm, ranks=ranks if root else None,
                                      approach=approach, backend="cudasim")
        owned = result.part.submesh.owned
        gaps = comm.gather(bool(len(owned) != owned[-1] - owned[0] + 1), root=0)
        whole = result.gather()
        if root:
            arrays[f"{approach}/data"], arrays[f"{approach}/indices"] = whole.matrix.data, whole.matrix.indices
            arrays[f"{approach}/rhs"] = whole.rhs
            arrays[f"{approach}/devices"] = np.array([r["device"] for r in result.info["per_rank"]])
            arrays[f"{approach}/device_index"] = np.array([r["device_index"] for r in result.info["per_rank"]])
            arrays[f"{approach}/backend"] = np.array(result.info["backend"])
            arrays[f"{approach}/gaps"] = np.array(gaps)
        ran = comm.gather(result.info["approach"], root=0)  # what each rank ran ("auto": rank 0's choice)
        if root:
            arrays[f"{approach}/ran"] = np.array(ran)
    if root:
        np.savez(out, **arrays)
        print("MPI-GPU-CASES done")


if __name__ == "__main__":
    main(sys.argv[1])
