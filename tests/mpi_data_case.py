"""Run under ``mpiexec -n N python tests/mpi_data_case.py OUT.npz`` by tests/test_data_coefficients.py.

Every rank builds the same space and problem (fixed seeds; data per fine cell and per element); the
ranks assemble it through ``assemble_distributed`` and rank 0 writes the gathered matrix and load.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np


def case():
    """(space, problem): a diffusion tensor per fine cell, a reaction per element; the same on every call."""
    from polydg.mesh import from_spec
    from polydg.partition import agglomerate
    from polydg.problem import CellData, ElementData, Problem
    from polydg.space import DGSpace

    mesh = agglomerate(from_spec("square:16"), 40)
    space = DGSpace(mesh, np.random.default_rng(1).integers(1, 3, mesh.n_elements))
    rng = np.random.default_rng(2)
    B = rng.random((mesh.n_fine_cells, 2, 2))
    problem = Problem("data", diffusion=CellData(B @ B.transpose(0, 2, 1) + np.eye(2)),
                      reaction=ElementData(rng.random(mesh.n_elements)), source=1.0,
                      dirichlet=lambda x: x[:, 0])
    return space, problem


def main(out: Path) -> None:
    from mpi4py import MPI

    from polydg.distributed import assemble_distributed

    comm = MPI.COMM_WORLD
    space, problem = case()
    whole = assemble_distributed(space, problem, comm).gather()
    if comm.Get_rank() == 0:
        np.savez(out, data=whole.matrix.data, indices=whole.matrix.indices, indptr=whole.matrix.indptr,
                 rhs=whole.rhs, sigma=whole.face_penalty, ranks=comm.Get_size())
    comm.Barrier()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
