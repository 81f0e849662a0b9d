"""Run under ``mpiexec -n 2 python tests/mpi_options_cases.py OUTDIR`` by tests/test_options.py.

Every assembly option at a value other than its default, on the ranks: a
steady assembly (:func:`polydg.distributed.assemble_distributed`, gathered)
and a space-time march whose slabs every rank assembles
(:class:`polydg.distributed.spacetime.SlabAssembler`).  Rank 0 writes what
it gathered and what each rank reported it ran with, per slab, for the test
to compare with the one-process results.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np


def option_sets():
    """Every field off its default: the scatter-add reduction, and the row kernels (bitwise at any chunking)."""
    from polydg.assembly import AssemblyOptions

    changed = AssemblyOptions(approach="atomic", precision="single", penalty=7.0, penalty_kind="paper",
                              quadrature_extra=1, memory_budget_mb=0.02, backend="auto", to_host=True)
    return {"atomic": changed, "2": changed.replace(approach="2")}


def steady_case():
    """(space, problem): the same on every call (fixed seeds)."""
    from polydg.mesh import from_spec
    from polydg.partition import agglomerate
    from polydg.problem import builtin_problem
    from polydg.space import DGSpace

    mesh = agglomerate(from_spec("square:10"), 24)
    return DGSpace(mesh, np.random.default_rng(7).integers(1, 3, mesh.n_elements)), builtin_problem("paper-2d", 2)


#: the march: paper-2d1 keeps its matrix after slab 1 (the ranks then assemble the load alone, with the
#: kept penalty and without the bottom face), two local steps per element (penalty scales)
MARCH = dict(n_slabs=3, final_time=0.3, local_steps=2)


def march_case():
    """(spatial mesh, space-time problem, degree)."""
    from polydg.mesh import from_spec
    from polydg.partition import agglomerate
    from polydg.problem import builtin_problem

    return agglomerate(from_spec("square:4"), 6), builtin_problem("paper-2d1", 2), 1


def main(out: Path) -> None:
    from mpi4py import MPI

    from polydg.distributed import assemble_distributed
    from polydg.distributed.spacetime import SlabAssembler, follow_march
    from polydg.spacetime import march

    comm = MPI.COMM_WORLD
    root = comm.Get_rank() == 0
    space, problem = steady_case()
    mesh, st_problem, degree = march_case()
    report = {}
    for key, options in option_sets().items():
        result = assemble_distributed(space if root else None, problem, comm, options)
        whole = result.gather()
        if root:
            m = whole.matrix
            np.savez(out / f"steady-{key}.npz", data=m.data, indices=m.indices, indptr=m.indptr, rhs=whole.rhs,
                     sigma=whole.face_penalty)
            report[f"steady-{key}"] = {"per_rank": whole.info["per_rank"], "precision": whole.info["precision"],
                                       "approach": whole.info["approach"], "penalty": whole.info["penalty"],
                                       "quadrature_extra": whole.info["quadrature_extra"],
                                       "backend": whole.info["backend"]}
        if not root:
            follow_march(comm, st_problem, 2)
            continue
        slabs = []

        class Recording(SlabAssembler):
            def __call__(self, space, interval, options, *, scope=None, matrix=True, workspace=None):
                result = super().__call__(space, interval, options, scope=scope, matrix=matrix, workspace=workspace)
                slabs.append({"options": options.as_dict(), "matrix": matrix, "per_rank": result.info["per_rank"],
                              "scale": scope.face_penalty_scale is not None,
                              "kept_penalty": scope.face_penalty is not None,
                              "load_faces": scope.load_boundary_faces is not None})
                return result

        assembler = Recording(comm, st_problem, 2)
        try:
            marched = march(mesh, st_problem, degree, options=options, assembler=assembler, **MARCH)
        except BaseException as error:
            assembler.done(error)
            raise
        assembler.done()
        np.savez(out / f"march-{key}.npz", solution=marched.solution, rhs=marched.assembly.rhs,
                 data=marched.assembly.matrix.data, errors=np.array([marched.errors["l2"], marched.errors["l2_l2"]]))
        report[f"march-{key}"] = {"slabs": slabs, "assembled": marched.info["assembled_per_slab"]}
    if root:
        (out / "report.json").write_text(json.dumps(report, default=lambda v: v.item()))
    comm.Barrier()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
