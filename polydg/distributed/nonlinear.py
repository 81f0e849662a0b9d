"""A nonlinear problem across MPI ranks: each rank linearises its rows, rank 0 gathers them and iterates.

::

    rank 0: space --hand_out_parts--> one RankPart per rank (as for a linear assembly)
    every rank: a NonlinearSystem of its rows (its plan kept for the whole iteration)
    per iterate: rank 0 scatters u    -->  each rank: u on its elements and halo, its rows' Jacobian
                 and residual (a_K of its elements, its halo's from their owners --> sigma_F of its faces)
             --> rank 0 gathers them: the one-process Jacobian and residual, bit for bit

Rank 0 runs Newton's (or Picard's) iteration (:func:`~polydg.nonlinear.solve_iteration`) on a
:class:`DistributedNonlinearSystem`, whose ``linearize`` tells the other ranks, waiting in :meth:`follow`,
to linearise too; its linear solves are rank 0's (SciPy).  Every linearisation is a collective step:
one broadcast of the command, one Scatterv of each rank's entries of u (and of a frozen sigma_F), one gather.
"""

from __future__ import annotations

import numpy as np

from ..assembly.assembler import warn_degree_zero_diffusion
from ..assembly.options import AssemblyOptions, assembly_options
from ..assembly.penalty import penalty_from_weights, penalty_weights
from ..assembly.scope import AssemblyScope
from ..nonlinear.system import NonlinearSystem, linearisation_options
from ..problem import as_problem
from ..problem.data import on_sub_mesh
from ..partition.ranks import element_work
from .assembly import (DistributedAssembly, compile_relabel_kernel, hand_out_parts, rank_record, rank_report,
                       single_of_rank)
from .comm import RankFailure, bind_rank_device, check_collectively, collective_phase
from .parts import part_face_penalty

#: what rank 0 tells the others (a broadcast per step)
_LINEARIZE, _DONE = "linearize", "done"


class DistributedNonlinearSystem:
    """R(u) = 0 for ``problem`` on ``space`` across the ranks of ``comm`` (a collective constructor).

    ``space`` is read on ``root`` only; ``options`` (or their fields as keywords) as for
    :class:`~polydg.nonlinear.NonlinearSystem`.  On ``root``, :meth:`linearize` returns the gathered
    Jacobian and residual in the one-process numbering; the other ranks call :meth:`follow` and take part
    in each linearisation until rank 0 calls :meth:`finish`.
    """

    def __init__(self, space, problem, comm, options: AssemblyOptions | None = None, *, ranks=None,
                 weighted: bool = True, root: int = 0, say=None, linear_solver: str = "auto", **choices):
        self.comm, self.root = comm, root
        with collective_phase(comm):
            compile_relabel_kernel()
            if comm.Get_rank() == root and space is not None:  # from the whole space: a part may lack degree 0
                warn_degree_zero_diffusion(space, as_problem(problem, space.mesh.dim))
            options = linearisation_options(assembly_options(options, choices)).resolved()
        with collective_phase(comm):  # the GPU backend: rank r of a node on GPU r mod (GPUs on the node), bound
            self._device = bind_rank_device(comm, options.backend)  # before any of its arrays is made
        part, ranks, self.timings = hand_out_parts(space, comm, options, ranks=ranks, weighted=weighted,
                                                   root=root, say=say)
        with collective_phase(comm):
            self.part = part
            local_space = part.space()
            columns = (part.rank_dof_offsets, part.rank_dof_offsets, part.n_dofs)
            local_problem = on_sub_mesh(as_problem(problem, local_space.mesh.dim), part.submesh.elements,
                                        part.n_elements)  # data per element: this rank's, in its local ids
            self.local = NonlinearSystem(local_space, local_problem, options,
                                         linear_solver=linear_solver,
                                         scope=AssemblyScope(elements=part.submesh.owned, column_numbering=columns))
            self.local.penalty_at = self._penalty_at
            self.dof_map = part.dof_map(local_space)  # the single-process dof of each local dof
            self._halo = part.halo_exchange()
        self._halo.check(comm)
        with collective_phase(comm):
            self._work = float(element_work(local_space, options.quadrature_extra)[part.submesh.owned].sum())
        self.rank_report: dict | None = None  # on root: the ranks' last linearisation (timings, balance, sizes)
        reads = comm.gather((self.dof_map, part.submesh.faces), root=root)
        self._reads = reads  # on root: (dofs, faces) whose u and sigma_F each rank's linearisation reads
        self.options = self.local.options
        self.space = space if comm.Get_rank() == root else None
        with collective_phase(comm):  # rank 0's own tables, before the others wait in follow()
            if comm.Get_rank() == root:
                self._by_rank = np.argsort(ranks, kind="stable")  # the elements rank by rank, each in order
                self._owned_counts = np.bincount(ranks, minlength=comm.Get_size())
                self._every_a = np.empty(part.n_elements)  # the owned a_K of every rank, gathered per iterate
                self._single = single_of_rank(space, ranks)
                self._weights = penalty_weights(space.mesh, space.degree, options.penalty_kind)
                self.linear_solver = linear_solver
        self.plan_seconds, self.jit_seconds = self.local.plan_seconds, self.local.jit_seconds

    # -- the penalty at the iterate: a_K of the halo from its owners, of every element on rank 0

    def _penalty_at(self, a_local: np.ndarray) -> np.ndarray:
        """sigma_F of the rank's faces at the iterate, from a_K of its owned elements (``a_local``); rank 0
        also keeps a_K of every element (one Gatherv), for the whole mesh's penalty at the iterate."""
        from mpi4py import MPI

        part, comm = self.part, self.comm
        # called inside the linearisation's collective phase: a rank that failed before this point is at
        # that phase's end, in this same exchange (check_collectively), not in the halo's
        check_collectively(comm, None)
        a_local = self._halo.exchange(comm, a_local)
        owned = np.ascontiguousarray(a_local[part.submesh.owned])
        root = comm.Get_rank() == self.root
        comm.Gatherv(owned, [self._every_a, self._owned_counts, MPI.DOUBLE] if root else None, root=self.root)
        if root:  # (rank 0 alone, after the last exchange of the linearisation)
            self._a_all = np.empty(part.n_elements)
            self._a_all[self._by_rank] = self._every_a
        return part_face_penalty(part, a_local, self.options.penalty)

    # -- rank 0's side

    def linearize(self, u: np.ndarray, *, newton: bool = True, want_jacobian: bool = True,
                  face_penalty: np.ndarray | None = None):
        """On ``root``: the gathered Jacobian (one-process numbering) and residual at ``u``; the other ranks
        take part from :meth:`follow`."""
        self.comm.bcast((_LINEARIZE, newton, want_jacobian, face_penalty is not None), root=self.root)
        return self._linearize(newton, want_jacobian, face_penalty is not None, u, face_penalty)

    def finish(self) -> None:
        """On ``root``: release the ranks waiting in :meth:`follow`."""
        self.comm.bcast((_DONE,), root=self.root)

    def solve_linear(self, matrix, rhs) -> np.ndarray:
        from ..solve import solve

        return solve(matrix, rhs, self.linear_solver, space=self.space)[0]

    # -- every rank

    def follow(self) -> None:
        """On the ranks other than ``root``: linearise whenever rank 0 does, until it calls :meth:`finish`."""
        while True:
            command = self.comm.bcast(None, root=self.root)
            if command[0] == _DONE:
                return
            _, newton, want, frozen = command
            self._linearize(newton, want, frozen)

    def _scatter(self, frozen: bool, u=None, face_penalty=None) -> tuple[np.ndarray, np.ndarray | None]:
        """This rank's u on its local dofs and, when ``frozen``, sigma_F on its local faces, from ``u`` and
        ``face_penalty`` on root: one Scatterv of the entries each rank reads, never the whole arrays."""
        from mpi4py import MPI

        comm, n_u, n_sigma = self.comm, len(self.dof_map), len(self.part.submesh.faces)
        with collective_phase(comm):
            send = None
            if comm.Get_rank() == self.root:
                u = np.asarray(u, dtype=np.float64)
                sigma = np.asarray(face_penalty, dtype=np.float64) if frozen else np.zeros(0)
                pieces = [np.concatenate([u[dofs], sigma[faces] if frozen else sigma])
                          for dofs, faces in self._reads]
                send = [np.concatenate(pieces), [len(p) for p in pieces], MPI.DOUBLE]
            mine = np.empty(n_u + (n_sigma if frozen else 0))
        comm.Scatterv(send, mine, root=self.root)
        return mine[:n_u], (mine[n_u:] if frozen else None)

    def _linearize(self, newton: bool, want_jacobian: bool, frozen: bool, u=None, face_penalty=None):
        from ..assembly.linearized_passes import Linearization

        part, comm = self.part, self.comm
        local_u, local_sigma = self._scatter(frozen, u, face_penalty)
        with collective_phase(comm):
            lin = self.local.linearize(local_u, newton=newton, want_jacobian=want_jacobian,
                                       face_penalty=local_sigma)
        rows = DistributedAssembly(matrix=lin.jacobian, rhs=lin.residual, row_range=part.row_range, dofs=None,
                                   info={"dofs": part.n_dofs, "faces": part.n_faces, "timings": lin.info["timings"],
                                         "timings_max": lin.info["timings"]},
                                   comm=comm, face_penalty=lin.face_penalty, faces=part.submesh.faces, part=part,
                                   _single_of_rank=self._single if comm.Get_rank() == self.root else None)
        whole = rows.gather(self.root)
        per_rank = comm.gather(rank_record(part, lin.info["timings"], lin.jacobian, len(lin.residual), self._work,
                                           None, self.options.as_dict(), self._device), root=self.root)
        if comm.Get_rank() != self.root:
            return None
        self.rank_report = rank_report(per_rank)
        own = penalty_from_weights(self._weights, self.space.mesh.face_elements, self._a_all, self.options.penalty)
        return Linearization(whole.matrix, whole.rhs, whole.face_penalty,  # the slowest rank's timings
                             {"timings": self.rank_report["timings_max"], "penalty_at_iterate": own})

    def rank_summary(self) -> dict:
        """On ``root``: the last linearisation's ``timings_per_rank``, ``balance`` and ``per_rank`` (as a
        distributed assembly's summary has them)."""
        report = self.rank_report or {}
        return {k: report[k] for k in ("timings_per_rank", "balance", "per_rank") if k in report}


def solve_distributed(space, problem, comm, u0=None, options: AssemblyOptions | None = None, *, nonlinear=None,
                      progress=None, root: int = 0, **choices):
    """:func:`~polydg.nonlinear.solve_nonlinear` across the ranks of ``comm`` (a collective call): the
    :class:`~polydg.nonlinear.NonlinearResult` on ``root``, None elsewhere."""
    from ..nonlinear import solve_iteration, split_choices

    options, nonlinear = split_choices(options, nonlinear, choices)
    system = DistributedNonlinearSystem(space, problem, comm, options, root=root,
                                        linear_solver=nonlinear.linear_solver)
    if comm.Get_rank() != root:
        system.follow()
        return None
    try:
        result = solve_iteration(system, np.zeros(space.n_dofs) if u0 is None else u0, nonlinear, progress)
    except RankFailure:  # raised on every rank by a collective step: they have left follow() already
        raise
    except BaseException:  # rank 0's own (no convergence, an interrupt): release the others, then raise
        system.finish()
        raise
    system.finish()
    return result


__all__ = ["DistributedNonlinearSystem", "solve_distributed"]
