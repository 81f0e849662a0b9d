"""Assembly across MPI ranks: partition, hand out, assemble rows, gather (docs/design.md §11).

::

    rank 0: space --rank_partition (METIS, kernel-work weights)--> ranks
            --rank_parts--> one RankPart per rank, sent one at a time
    every rank: a_K of its elements, its halo's from their owners (one Alltoallv) --> sigma_F of its faces
            --Assembler(options, scope=AssemblyScope(elements=owned)).assemble(problem, face_penalty=sigma)-->
              its rows (the single-process plan and passes; no communication)
            --relabel columns--> rows row_range of the rank numbering (PETSc MPIAIJ)
    gather: rank 0 stacks the rows and renumbers them: the one-process matrix, bit for bit

Rank 0 holds the whole mesh (it read or generated and agglomerated it: the
agglomeration needs the whole fine mesh); every other rank holds only its
part and halo.

This layer sits above :mod:`polydg.assembly`: it imports the assembly, never
the other way round.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from .. import backend as bk
from ..assembly.assembler import Assembler, AssemblyResult, warn_degree_zero_diffusion
from ..assembly.result import csr_as_given
from ..assembly.options import AssemblyOptions, assembly_options
from ..assembly.passes import expand_ranges
from ..assembly.reductions import reduction
from ..assembly.reductions.choice import AUTO
from ..assembly.scope import AssemblyScope
from ..errors import OptionError
from ..partition.ranks import balance, element_work, rank_partition
from ..problem import as_problem
from ..problem.data import on_sub_mesh
from .comm import bind_rank_device, collective_phase, receive_object, send_object
from .parts import (RankPart, compile_relabel_kernel, local_diffusion_bound, part_face_penalty, rank_numbering,
                    rank_parts, relabel_columns, relabel_rows)

__all__ = ["DistributedAssembly", "assemble_distributed"]


@dataclass
class DistributedAssembly:
    """One rank's result of :func:`assemble_distributed`.

    matrix : scipy.sparse.csr_matrix, the rank's rows ``row_range`` of the
        matrix in the rank numbering (rows and columns; int64 indices): the
        PETSc MPIAIJ layout; None for the load alone (``matrix=False``)
    rhs : the load vector of those rows
    row_range : (first, last + 1) of the rows, rank numbering
    dofs : the single-process number of each of the rank's rows
    info : sizes, options, this rank's ``timings``; on rank 0 also
        ``timings_per_rank``, ``timings`` as the maximum over ranks (the
        critical path), ``balance`` (max / mean of kernel time, nnz, elements)
        and ``per_rank`` (each rank's sizes, chunks, device and the options it ran with)
    """

    matrix: sp.csr_matrix
    rhs: np.ndarray
    row_range: tuple[int, int]
    dofs: np.ndarray
    info: dict = field(default_factory=dict)
    comm: object = None
    face_penalty: np.ndarray | None = None  # sigma_F of the rank's faces
    faces: np.ndarray | None = None  # their global ids
    part: RankPart | None = None
    assembler: object = None  # the rank's kept plan of its rows (an Assembler), used again by ``reuse``
    _single_of_rank: np.ndarray | None = None  # rank 0: single-process dof of each rank-numbered dof

    def gather(self, root: int = 0) -> AssemblyResult | None:
        """The whole matrix and load vector on ``root``, in the single-process numbering (None elsewhere).

        A collective call.  The values are moved, never added: the gathered
        matrix is the one-process matrix bit for bit.
        """
        comm = self.comm
        if self.matrix is not None:  # the rows' arrays straight into rank 0's (no pickles, no stacked copy)
            lengths = gather_arrays(comm, np.diff(self.matrix.indptr).astype(np.int64), root)
            indices = gather_arrays(comm, self.matrix.indices.astype(np.int64, copy=False), root)
            data = gather_arrays(comm, self.matrix.data, root)
        pieces = comm.gather((self.rhs, self.face_penalty, self.faces), root=root)  # O(dofs + faces)
        if comm.Get_rank() != root:
            return None
        t = time.perf_counter()
        rhs_rank = np.concatenate([piece[0] for piece in pieces])
        sigma = np.zeros(self.info["faces"])
        for piece in pieces:  # a face on a partition boundary comes from both ranks, with the same value
            sigma[piece[2]] = piece[1]
        n = self.info["dofs"]
        single = self._single_of_rank
        order = np.empty(n, dtype=np.int64)
        order[single] = np.arange(n)  # the rank-numbered row of each single-process dof
        matrix = None  # the load alone (matrix=False) has none
        if self.matrix is not None:
            indptr = np.zeros(n + 1, dtype=np.int64)
            np.cumsum(lengths, out=indptr[1:])
            del lengths
            indptr, indices, data = relabel_rows(indptr, indices, data, single, rows=order)
            matrix = csr_as_given(data, indices, indptr, (n, n))
        info = dict(self.info, gather_seconds=time.perf_counter() - t)
        info["rank_timings"], info["timings"] = info["timings"], info["timings_max"]  # the critical path
        return AssemblyResult(matrix, rhs_rank[order], sigma, info)

    def errors(self, problem, solution: np.ndarray | None, root: int = 0, **options) -> dict:
        """:func:`polydg.solve.errors` of ``solution`` (single-process numbering, given on ``root``),
        computed by the ranks in parallel: each its elements and the faces whose first element
        it owns, then one sum.  A collective call; every rank gets the result.

        The sums are grouped differently from one process: equal to round-off, not bitwise.
        """
        from mpi4py import MPI

        from ..solve import errors

        comm, part = self.comm, self.part
        with collective_phase(comm):
            space = part.space()
            mesh = space.mesh
            dofs = part.dof_map(space)  # the single-process dof of each local dof: the entries this rank reads
            owned = np.zeros(mesh.n_elements, dtype=bool)
            owned[part.submesh.owned] = True
            local_x = np.empty(len(dofs))
        reads = comm.gather(dofs, root=root)
        send = None
        with collective_phase(comm):  # each rank is sent its entries alone: O(dofs + halo), not dofs a rank
            if comm.Get_rank() == root:
                x = np.asarray(solution, dtype=np.float64).reshape(-1)
                if len(x) != self.info["dofs"]:
                    raise OptionError(f"the solution has {len(x)} entries, the space {self.info['dofs']} dofs")
                send = [np.concatenate([x[d] for d in reads]), [len(d) for d in reads], MPI.DOUBLE]
        comm.Scatterv(send, local_x, root=root)
        with collective_phase(comm):
            local_problem = on_sub_mesh(as_problem(problem, mesh.dim), part.submesh.elements, part.n_elements)
            local = errors(space, local_problem, local_x, penalty_values=self.face_penalty,
                           faces=owned[mesh.face_elements[:, 0]], **options)
        keys = list(local)  # the one process' order (l2, h1, dg): the same on every rank
        squares = np.array([local[k] ** 2 for k in keys])
        comm.Allreduce(MPI.IN_PLACE, squares, op=MPI.SUM)
        return {k: float(np.sqrt(v)) for k, v in zip(keys, squares)}

    def to_petsc(self):
        """The rank's rows as a PETSc MPIAIJ matrix and vector (needs petsc4py)."""
        try:
            from petsc4py import PETSc
        except ImportError:
            raise OptionError("to_petsc() needs petsc4py (pip install petsc4py)") from None
        n_local, n = self.matrix.shape[0], self.info["dofs"]
        comm = getattr(self.comm, "unwrapped", self.comm)  # a watched communicator: PETSc wants MPI's own
        A = PETSc.Mat().createAIJ(size=((n_local, n), (n_local, n)),
                                  csr=(self.matrix.indptr, self.matrix.indices, self.matrix.data), comm=comm)
        A.assemble()
        b = PETSc.Vec().createMPI((n_local, n), comm=comm)
        b.setArray(self.rhs)
        return A, b


def assemble_distributed(space, problem, comm, options: AssemblyOptions | None = None, *,
                         ranks: np.ndarray | None = None, weighted: bool = True, root: int = 0, say=None,
                         reuse: DistributedAssembly | None = None, matrix: bool = True, progress=None,
                         workspace=None, scope: AssemblyScope | None = None, hand_out=None,
                         **choices) -> DistributedAssembly:
    """Assemble across the ranks of ``comm``: each rank gets its rows (see :class:`DistributedAssembly`).

    ``space`` is needed on ``root`` only (other ranks may pass None or their
    own copy, which is not read).  ``options`` (an
    :class:`~polydg.assembly.AssemblyOptions`, or its fields as keywords
    ``choices``) go, every one, to each rank's
    :func:`~polydg.assembly.assemble`; the ranks' rows are relabelled and
    gathered on the host, so a GPU backend's rows come back there
    (``to_host`` taken as True).  ``matrix``, ``progress`` and ``workspace``
    as in :func:`~polydg.assembly.assemble`, for each rank's rows.

    ``ranks`` gives the rank of every element (default:
    :func:`~polydg.partition.ranks.rank_partition`, weighted by kernel work
    unless ``weighted=False``).  ``scope`` (on ``root``: arrays over the whole
    mesh) gives penalties, penalty scales and the load's boundary faces,
    handed to each rank for its faces; the rows and the column numbering are
    the ranks' own (a scope that sets them is refused).  ``reuse``, a
    previous result of the same space, options and scope on the same ranks,
    skips the partition and the distribution, and each rank's plan of its rows
    (its :class:`~polydg.assembly.Assembler`: pattern, rules, chunks; the
    quadrature points are mapped again) unless its ``assembler`` was set to None
    (repeated assemblies: time steps, parameter sweeps).  ``hand_out``, called as :func:`hand_out_parts`
    is and returning what it returns, gives each rank its part in its stead (a march's slab: an earlier
    slab's parts moved in time, :mod:`polydg.distributed.spacetime`).  A collective call; an error on any
    rank raises :class:`~polydg.distributed.comm.RankFailure` on every rank.
    """
    rank, size = comm.Get_rank(), comm.Get_size()
    with collective_phase(comm):
        t0 = time.perf_counter()
        compile_relabel_kernel()
        jit = time.perf_counter() - t0
        options = assembly_options(options, choices)  # the same check, and error, on every rank
        asked = options  # as the user gave them (info["options"]'s approach: "auto" as on one process)
        chosen = None
        if rank == root and space is not None and matrix:  # from the whole space: a part may lack degree 0
            warn_degree_zero_diffusion(space, as_problem(problem, space.mesh.dim))
        if rank == root and options.approach == AUTO:  # chosen once, from the whole mesh: every rank runs it
            chosen = (options.for_space(space).approach if space is not None  # (a reuse may come without it)
                      else reuse.info["approach"])
    if options.approach == AUTO:
        options = options.replace(approach=comm.bcast(chosen, root=root))
    if reuse is not None:  # the same space, partition and parts as a previous call
        part, ranks = reuse.part, reuse.info.get("element_ranks")
        timings = {"partition": 0.0, "distribute": 0.0}
    else:
        part, ranks, timings = (hand_out or hand_out_parts)(space, comm, options, scope=scope, matrix=matrix,
                                                            ranks=ranks, weighted=weighted, root=root, say=say)

    with collective_phase(comm):
        problem = as_problem(problem, part.submesh.mesh.dim)
        problem = on_sub_mesh(problem, part.submesh.elements, part.n_elements)  # data per element (#28): local ids
        local_space = part.space()
    sigma = part.face_penalty  # given (a kept penalty), or from a_K of every element:
    if sigma is None:
        with collective_phase(comm):
            a_local = local_diffusion_bound(part, local_space, problem, options.quadrature_extra)
            halo = part.halo_exchange()
        halo.check(comm)
        a_local = halo.exchange(comm, a_local)  # a_K of the halo elements from their owners
        with collective_phase(comm):
            sigma = part_face_penalty(part, a_local, options.penalty)

    with collective_phase(comm):
        given_budget = options.memory_budget_mb
        options = options.resolved()
    with collective_phase(comm):  # the GPU backend: rank r of a node on GPU r mod (GPUs on the node)
        device = bind_rank_device(comm, options.backend)  # its first step a collective (the node's ranks)
        if bk.is_device(options.backend):
            options = options.replace(to_host=True)  # the rank's rows are relabelled and gathered on the host
            if given_budget is None:  # a GPU's default chunk, shared by the node's ranks on that GPU
                options = options.replace(memory_budget_mb=options.budget_mb / device["device_ranks"])
    if say is not None and rank == root and bk.is_device(options.backend):
        say(f"backend {options.backend}: rank r uses GPU r mod (GPUs on its node); rank 0: {device['device']}")

    with collective_phase(comm):
        # a reduction that fills the pattern (approaches 2 and atomic) writes the rank numbering's columns
        # directly; approach 1's SciPy conversion sorts local columns, relabelled after
        direct = reduction(options.approach).fills_pattern
        columns = (part.rank_dof_offsets, part.rank_dof_offsets, part.n_dofs) if direct else None
        assembler = reuse.assembler if reuse is not None else None
        if assembler is None or assembler.options != options:
            rows = AssemblyScope(elements=part.submesh.owned, column_numbering=columns,
                                 load_boundary_faces=part.load_boundary_faces)
            assembler = Assembler(local_space, options, scope=rows, keep_points=False)
        result = assembler.assemble(problem, matrix=matrix, progress=progress, workspace=workspace,
                                    face_penalty=sigma)
        matrix = result.matrix  # None for the load alone (matrix=False)
        if not direct and matrix is not None:
            t = time.perf_counter()
            matrix = relabel_columns(matrix, part.dof_map(local_space, rank_numbering=True), part.n_dofs)
            result.info["timings"]["indices"] += time.perf_counter() - t
            result.info["timings"]["total_assembly"] += time.perf_counter() - t
        dofs = part.dof_map(local_space)[_owned_rows(local_space, part)]
    timings.update(result.info["timings"])
    timings["jit"] += jit

    info = dict(result.info, options=dict(result.info["options"], approach=asked.approach))  # "auto" as asked
    info.update(dofs=part.n_dofs, elements=part.n_elements, faces=part.n_faces, rank=rank, ranks=size, row_range=list(part.row_range),
                owned_elements=int(len(part.submesh.owned)), halo_elements=int(len(part.submesh.halo)),
                timings=timings, device=device["device"], device_index=device["device_index"])
    single = None
    with collective_phase(comm):
        info["work"] = float(element_work(local_space, options.quadrature_extra)[part.submesh.owned].sum())
        if rank == root:
            single = single_of_rank(space, ranks)
    per_rank = comm.gather(rank_record(part, timings, matrix, len(result.rhs), info["work"], info["chunks"],
                                       info["options"], device), root=root)
    if rank == root:
        info.update(rank_report(per_rank))
        info["element_ranks"] = ranks
    return DistributedAssembly(matrix=matrix, rhs=result.rhs, row_range=part.row_range, dofs=dofs, info=info,
                               comm=comm, face_penalty=sigma, faces=part.submesh.faces, part=part, assembler=assembler,
                               _single_of_rank=single)


def hand_out_parts(space, comm, options: AssemblyOptions, *, scope: AssemblyScope | None = None, matrix: bool = True,
                   ranks: np.ndarray | None = None, weighted: bool = True, root: int = 0,
                   say=None) -> tuple[RankPart, np.ndarray | None, dict]:
    """Partition ``space`` (on ``root``) over the ranks of ``comm`` and send each rank its part.

    Returns this rank's :class:`RankPart`, the rank of every element (on ``root``; None elsewhere) and the
    seconds of the ``partition`` and ``distribute`` steps.  ``scope`` (on ``root``: arrays over the whole
    mesh) gives penalties, penalty scales and the load's boundary faces, handed to each rank for its faces.
    A collective call.
    """
    rank, size = comm.Get_rank(), comm.Get_size()
    timings = {}
    t0 = time.perf_counter()
    parts = None
    with collective_phase(comm):
        if rank == root:
            scope = AssemblyScope() if scope is None else scope
            if scope.elements is not None or scope.column_numbering is not None:
                raise OptionError("elements and column_numbering are chosen per rank by the distributed assembly")
            scope.check(space.mesh, reduction(options.approach), matrix)
            if ranks is None:
                ranks = rank_partition(space, size, weighted=weighted, quadrature_extra=options.quadrature_extra)
            ranks = np.asarray(ranks, dtype=np.int64)
            if ranks.shape != (space.mesh.n_elements,) or ranks.min() < 0 or ranks.max() >= size:
                raise OptionError(f"ranks must give a rank in [0, {size}) for each of the "
                                  f"{space.mesh.n_elements} elements")
            parts = rank_parts(space, ranks, penalty_kind=options.penalty_kind, scope=scope)
    timings["partition"] = time.perf_counter() - t0
    if say is not None and rank == root:
        say(f"partitioned {space.mesh.n_elements:,} elements over {size} ranks in {timings['partition']:.3f} s")
    t = time.perf_counter()
    with collective_phase(comm):
        if rank == root:
            mine, waiting = None, set(range(size)) - {root}
            try:
                for part in parts:  # built and sent one at a time: rank 0 never holds them all
                    if part.rank == root:
                        mine = part
                    else:  # a rank without room for its part declines it: its error is reported at the end
                        send_object(comm, part, part.rank, tag=11)
                        waiting.discard(part.rank)
            except BaseException:  # (building a part ran out of memory): release the ranks still waiting
                for r in sorted(waiting):
                    send_object(comm, None, r, tag=11)
                raise
            part = mine
        else:  # nothing sent: rank 0 failed, and its error is the one reported at this phase's end
            part = receive_object(comm, root, tag=11)
    timings["distribute"] = time.perf_counter() - t
    return part, ranks, timings


#: the most entries one Gatherv of :func:`gather_arrays` receives (MPI's counts and displacements are C ints)
GATHER_ROUND = 1 << 26


def gather_arrays(comm, local: np.ndarray, root: int = 0, round_entries: int | None = None) -> np.ndarray | None:
    """The ranks' 1-D arrays (of one dtype) end to end in rank order on ``root``, None elsewhere (a
    collective call).  By Gatherv of numpy buffers, in rounds of at most ``round_entries`` entries in all
    (each rank's next slice; :data:`GATHER_ROUND` by default), so that no count or displacement passes a C
    int at any size."""
    from mpi4py.util.dtlib import from_numpy_dtype

    round_entries = GATHER_ROUND if round_entries is None else round_entries
    local = np.ascontiguousarray(local)
    counts = np.asarray(comm.allgather(len(local)), dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(counts)])
    kind = from_numpy_dtype(local.dtype)
    root_here = comm.Get_rank() == root
    one_round = starts[-1] <= round_entries
    per_rank = max(1, round_entries // comm.Get_size())
    out = buffer = None
    with collective_phase(comm):  # rank 0's arrays made before any rank sends (out of memory: every rank raises)
        if root_here:
            out = np.empty(int(starts[-1]), dtype=local.dtype)
            buffer = None if one_round else np.empty(int(np.minimum(counts, per_rank).sum()), dtype=local.dtype)
    if one_round:  # straight into place
        comm.Gatherv(local, [out, (counts, starts[:-1]), kind] if root_here else None, root=root)
        return out
    for lo in range(0, int(counts.max()), per_rank):
        sizes = np.clip(counts - lo, 0, per_rank)
        at = np.concatenate([[0], np.cumsum(sizes)])
        received = buffer[:int(at[-1])] if root_here else None
        comm.Gatherv(local[lo:lo + per_rank], [received, (sizes, at[:-1]), kind] if root_here else None, root=root)
        if root_here:
            for r in np.flatnonzero(sizes):
                out[starts[r] + lo:starts[r] + lo + sizes[r]] = received[at[r]:at[r + 1]]
    return out


def single_of_rank(space, ranks: np.ndarray) -> np.ndarray:
    """The single-process dof of each rank-numbered dof (on the root, which holds ``space``)."""
    new = rank_numbering(ranks)
    nb = space.element_dofs
    by_new = np.argsort(new)
    return (np.repeat(space.dof_offsets[:-1][by_new] - np.r_[0, np.cumsum(nb[by_new])[:-1]], nb[by_new])
            + np.arange(space.n_dofs)).astype(np.int64)


def _owned_rows(space, part: RankPart) -> np.ndarray:
    """Local dofs of the owned elements, in order (the rows just assembled)."""
    owned = part.submesh.owned
    return expand_ranges(space.dof_offsets[owned], space.dof_offsets[owned + 1])


def rank_record(part: RankPart, timings: dict, matrix, rows: int, work: float, chunks: int, options: dict,
                device: dict) -> dict:
    """What a rank tells rank 0 of one assembly (or linearisation), for :func:`rank_report`."""
    return {"timings": timings, "nnz": int(matrix.nnz) if matrix is not None else 0,
            "elements": int(len(part.submesh.owned)), "halo": int(len(part.submesh.halo)), "rows": int(rows),
            "work": float(work), "chunks": chunks, "options": options, "device": device["device"],
            "device_index": device["device_index"], "node_rank": device["node_rank"]}


def rank_report(per_rank: list[dict]) -> dict:
    """Rank 0's view: timings per rank, their maximum (the critical path) and the load balance."""
    keys = per_rank[0]["timings"].keys()
    kernels = [r["timings"].get("total_kernels", 0.0) for r in per_rank]
    return {
        "timings_per_rank": [r["timings"] for r in per_rank],
        "timings_max": {k: max(r["timings"].get(k, 0.0) for r in per_rank) for k in keys},
        "balance": {"kernel_time": balance(kernels), "nnz": balance([r["nnz"] for r in per_rank]),
                    "elements": balance([r["elements"] for r in per_rank]),
                    "work": balance([r["work"] for r in per_rank])},
        "per_rank": [{k: r[k] for k in ("nnz", "elements", "halo", "rows", "work", "chunks", "options", "device",
                                        "device_index", "node_rank")} for r in per_rank],
    }
