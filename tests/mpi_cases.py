"""Run under ``mpiexec -n N python tests/mpi_cases.py OUTDIR [SHARED_MESHES]`` by tests/test_mpi.py.

Rank 0 builds each case's space; every rank assembles its rows with
:func:`polydg.distributed.assemble_distributed`; rank 0 writes, per case and
reduction, the gathered matrix and load vector and every rank's own rows
(with its row range and single-process row numbers) for the test to compare
with the one-process assembly.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import scipy.sparse as sp

APPROACHES = ("2", "atomic", "1")


def case_spaces(shared: Path | None):
    """(name, space, problem name): the same on every call (fixed seeds)."""
    from polydg.mesh import build_polytopic_mesh, from_spec, load_mesh
    from polydg.partition import agglomerate
    from polydg.space import DGSpace

    mesh2 = agglomerate(from_spec("square:16"), 40)
    yield "2d-hp", DGSpace(mesh2, np.random.default_rng(1).integers(1, 4, mesh2.n_elements)), "paper-2d"
    mesh3 = agglomerate(from_spec("cube:4"), 24)
    yield "3d", DGSpace(mesh3, np.random.default_rng(2).integers(1, 3, mesh3.n_elements)), "paper-3d"
    if shared is not None and (shared / "unit_square_voronoi_100_cells.vtk").exists():
        voronoi = build_polytopic_mesh(load_mesh(str(shared / "unit_square_voronoi_100_cells.vtk")))
        yield "voronoi", DGSpace(voronoi, 2), "advection"


def main(out: Path, shared: Path | None) -> None:
    from mpi4py import MPI

    import polydg.distributed.assembly as distributed_assembly
    from polydg.assembly import AssemblyOptions
    from polydg.distributed import assemble_distributed
    from polydg.problem import builtin_problem

    comm = MPI.COMM_WORLD
    root = comm.Get_rank() == 0
    cases = list(case_spaces(shared)) if root else []  # rank 0 alone builds the meshes
    names = comm.bcast([(n, s.mesh.dim, p) for n, s, p in cases], root=0)
    spaces = {n: s for n, s, _ in cases}
    default_round = distributed_assembly.GATHER_ROUND
    for name, dim, problem_name in names:
        problem = builtin_problem(problem_name, dim)
        for approach in APPROACHES:
            if approach == "atomic":  # the same path, with an options object
                result = assemble_distributed(spaces.get(name), problem, comm, AssemblyOptions(approach=approach))
            else:
                result = assemble_distributed(spaces.get(name), problem, comm, approach=approach)
            # approach 1's rows gathered in rounds of at most 100 entries (polydg.distributed.gather_arrays)
            distributed_assembly.GATHER_ROUND = 100 if approach == "1" else default_round
            whole = result.gather()
            rows = comm.gather((result.matrix, result.rhs, result.row_range, result.dofs), root=0)
            if approach == "2":  # each rank's halo exchange: global id + 0.5 of every element from its owner
                part = result.part
                exchange = part.halo_exchange()
                got = exchange.exchange(comm, np.where(np.isin(np.arange(len(part.submesh.elements)),
                                                               part.submesh.owned), part.submesh.elements + 0.5,
                                                      -1.0))
                halos = comm.gather((part.submesh.elements, got, exchange.send_counts), root=0)
            if root:
                pieces = {}
                for r, (m, b, rr, dofs) in enumerate(rows):
                    pieces.update({f"m{r}_data": m.data, f"m{r}_indices": m.indices, f"m{r}_indptr": m.indptr,
                                   f"m{r}_shape": np.array(m.shape), f"b{r}": b, f"range{r}": np.array(rr),
                                   f"dofs{r}": dofs})
                if approach == "2":
                    for r, (elements, got, sent) in enumerate(halos):
                        pieces.update({f"halo{r}_elements": elements, f"halo{r}_values": got,
                                       f"halo{r}_sent": sent})
                np.savez(out / f"{name}-{approach}.npz", data=whole.matrix.data, indices=whole.matrix.indices,
                         indptr=whole.matrix.indptr, rhs=whole.rhs, sigma=whole.face_penalty,
                         element_ranks=result.info["element_ranks"], ranks=comm.Get_size(), **pieces)
    comm.Barrier()


def load_rank_rows(data, r: int) -> sp.csr_matrix:
    shape = tuple(int(v) for v in data[f"m{r}_shape"])
    return sp.csr_matrix((data[f"m{r}_data"], data[f"m{r}_indices"], data[f"m{r}_indptr"]), shape=shape)


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]) if len(sys.argv) > 2 else None)
