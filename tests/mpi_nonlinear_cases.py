"""Run under ``mpiexec -n N python tests/mpi_nonlinear_cases.py OUTDIR`` by tests/test_nonlinear.py.

Rank 0 builds each case's space; every rank linearises its rows at a fixed iterate
(:class:`polydg.distributed.nonlinear.DistributedNonlinearSystem`); rank 0 writes the gathered Jacobian and
residual, then the solution of a whole distributed Newton solve, for the test to compare with one process.
With ``pieces`` after OUTDIR, each rank instead checks the entries of u and sigma_F it is sent (see :func:`pieces`).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np


def case_spaces():
    """(name, space, problem): the same on every call (fixed seeds)."""
    from polydg.mesh import from_spec
    from polydg.partition import agglomerate
    from polydg.problem import Problem, builtin_problem
    from polydg.space import DGSpace

    mesh2 = agglomerate(from_spec("square:12"), 20)
    plap = Problem("plap", diffusion=lambda x, u, grad_u: np.sqrt(1 + (grad_u**2).sum(1)) + 0.1 * u**2,
                   advection=np.array([0.5, 0.2]), reaction=lambda x, u: u**2, source=1.0, dirichlet=lambda x: x[:, 1])
    yield "2d-hp", DGSpace(mesh2, np.random.default_rng(1).integers(1, 4, mesh2.n_elements)), plap
    mesh3 = agglomerate(from_spec("cube:3"), 12)
    yield "3d", DGSpace(mesh3, np.random.default_rng(2).integers(1, 3, mesh3.n_elements)), \
        builtin_problem("quasilinear", 3)


def iterate(space) -> np.ndarray:
    return 0.5 * np.random.default_rng(7).standard_normal(space.n_dofs)


def main(out: Path) -> None:
    from mpi4py import MPI

    from polydg.distributed.nonlinear import DistributedNonlinearSystem, solve_distributed

    comm = MPI.COMM_WORLD
    root = comm.Get_rank() == 0
    cases = list(case_spaces())  # the problems on every rank; the spaces are read on rank 0 only
    for name, space, problem in cases:
        system = DistributedNonlinearSystem(space if root else None, problem, comm)
        if root:
            u = iterate(space)
            lin = system.linearize(u)
            res = system.linearize(u, want_jacobian=False, face_penalty=lin.face_penalty)
            system.finish()
            np.savez(out / f"{name}-linearised.npz", data=lin.jacobian.data, indices=lin.jacobian.indices,
                     indptr=lin.jacobian.indptr, residual=lin.residual, residual_alone=res.residual,
                     sigma=lin.face_penalty, own=lin.info["penalty_at_iterate"])
        else:
            system.follow()
        result = solve_distributed(space if root else None, problem, comm)
        if root:
            np.savez(out / f"{name}-solution.npz", solution=result.solution, iterations=result.iterations)
    comm.Barrier()


def pieces(out: Path) -> None:
    """Each rank's scattered u and sigma_F are exactly the entries of the whole arrays its part reads, and its
    rows linearised from them equal its rows linearised from the whole arrays, bit for bit; rank 0 writes
    what every rank found to OUTDIR/pieces.json."""
    import json

    from mpi4py import MPI

    from polydg.distributed.nonlinear import DistributedNonlinearSystem

    comm = MPI.COMM_WORLD
    root = comm.Get_rank() == 0
    found = {}
    for name, space, problem in case_spaces():  # the same space on every rank, to compare with
        system = DistributedNonlinearSystem(space if root else None, problem, comm)
        u = iterate(space)
        sigma = 1.0 + np.random.default_rng(3).random(space.mesh.n_faces)
        faces = system.part.submesh.faces
        got_u, got_sigma = system._scatter(True, u if root else None, sigma if root else None)
        from_pieces = system.local.linearize(got_u, face_penalty=got_sigma)
        from_whole = system.local.linearize(u[system.dof_map], face_penalty=sigma[faces])
        alone_u, no_sigma = system._scatter(False, u if root else None)
        mine = {"u": bool(np.array_equal(got_u, u[system.dof_map])),
                "sigma": bool(np.array_equal(got_sigma, sigma[faces])),
                "u_alone": bool(np.array_equal(alone_u, u[system.dof_map])) and no_sigma is None,
                "jacobian": all(np.array_equal(getattr(from_pieces.jacobian, k), getattr(from_whole.jacobian, k))
                                for k in ("indptr", "indices", "data")),
                "residual": bool(np.array_equal(from_pieces.residual, from_whole.residual)),
                "sizes": [len(got_u), len(got_sigma)], "whole": [space.n_dofs, space.mesh.n_faces]}
        found[name] = comm.gather(mine, root=0)
    if root:
        (out / "pieces.json").write_text(json.dumps(found))


if __name__ == "__main__":
    (pieces if sys.argv[2:] == ["pieces"] else main)(Path(sys.argv[1]))
