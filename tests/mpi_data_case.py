"""Run under ``mpiexec -n N python tests/mpi_data_case.py OUT.npz`` by tests/test_data_coefficients.py.

Every rank builds the same space and problem (fixed seeds; data per fine cell and per element); the
ranks assemble it through ``assemble_distributed`` and rank 0 writes the gathered matrix and load, the
error norms of a problem with a diffusion per element and Newton's iterates of a nonlinear one with it.
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


def element_cases(space):
    """(a linear problem with a diffusion per element and an exact solution, a nonlinear one with it, a
    solution vector): for the error norms and Newton on ranks."""
    from polydg.problem import ElementData, Problem

    k = ElementData(1.0 + np.arange(space.mesh.n_elements) % 3)
    exact = Problem("element-exact", diffusion=k, source=1.0, exact=lambda x: x[:, 0] * x[:, 1],
                    exact_gradient=lambda x: np.stack([x[:, 1], x[:, 0]], axis=1))
    cubic = Problem("element-cubic", diffusion=k, reaction=lambda x, u: u**3, source=1.0)
    return exact, cubic, np.random.default_rng(3).standard_normal(space.n_dofs)


def main(out: Path) -> None:
    from mpi4py import MPI

    from polydg.distributed import assemble_distributed
    from polydg.distributed.nonlinear import solve_distributed

    comm = MPI.COMM_WORLD
    space, problem = case()
    whole = assemble_distributed(space, problem, comm).gather()
    exact, cubic, u = element_cases(space)
    errors = assemble_distributed(space, exact, comm).errors(exact, u if comm.Get_rank() == 0 else None)
    assert list(errors) == ["l2", "h1", "dg"], list(errors)  # in the one process' order
    newton = solve_distributed(space, cubic, comm)
    if comm.Get_rank() == 0:
        np.savez(out, data=whole.matrix.data, indices=whole.matrix.indices, indptr=whole.matrix.indptr,
                 rhs=whole.rhs, sigma=whole.face_penalty, ranks=comm.Get_size(),
                 errors=[errors[key] for key in ("l2", "h1", "dg")], newton=newton.solution,
                 residuals=newton.residuals)
    comm.Barrier()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
