"""Values of a rank's halo elements from the ranks that own them: one ``Alltoallv``.

::

    rank r, for each neighbour s: the values of r's owned elements with a face against an element s owns
        (s's halo elements owned by r), in global order  --Alltoallv-->  s's halo elements owned by r

Each rank sends and receives O(its partition boundary) values, where an
``Allreduce`` over an array of every element moves O(elements) per rank (80 MB
a rank at 10M elements). The values arrive unchanged: a halo element reads
exactly its owner's value.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..mesh.submesh import RankMesh

__all__ = ["HaloExchange"]


@dataclass(frozen=True)
class HaloExchange:
    """Who sends what to whom, in a rank's local element ids.

    send : local ids of the owned elements to send, grouped by destination rank (0, 1, ...), each group in
        global order
    send_counts : (ranks,) how many to each rank
    receive : local ids of the halo elements, grouped by owner rank, each group in global order
    receive_counts : (ranks,) how many from each rank
    """

    send: np.ndarray
    send_counts: np.ndarray
    receive: np.ndarray
    receive_counts: np.ndarray

    @classmethod
    def of_submesh(cls, submesh: RankMesh, halo_ranks: np.ndarray, rank: int, ranks: int) -> HaloExchange:
        """The exchange of the rank ``rank`` whose halo elements (``submesh.halo``, in order) are owned by
        ``halo_ranks``.  An owned element goes to every rank owning an element across one of its
        interfaces: the elements of that rank's halo owned here, in the order it expects them."""
        n_local = len(submesh.elements)
        owner = np.full(n_local, rank, dtype=np.int64)
        halo = submesh.halo
        owner[halo] = halo_ranks
        ie = submesh.mesh.interface_elements
        first_owned = owner[ie[:, 0]] == rank
        crossing = first_owned != (owner[ie[:, 1]] == rank)
        mine = np.where(first_owned, ie[:, 0], ie[:, 1])[crossing]
        theirs = owner[np.where(first_owned, ie[:, 1], ie[:, 0])[crossing]]
        pairs = np.unique(theirs * n_local + mine)  # by destination, then local (= global) order
        order = np.lexsort((halo, halo_ranks))
        return cls(send=pairs % n_local, send_counts=np.bincount(pairs // n_local, minlength=ranks),
                   receive=halo[order], receive_counts=np.bincount(halo_ranks, minlength=ranks))

    def check(self, comm) -> None:
        """Every rank's counts against its neighbours' (a collective call): what one sends another expects.
        A disagreement raises on every rank (:func:`~polydg.distributed.comm.collective_phase`)."""
        from .comm import collective_phase

        told = np.empty_like(self.receive_counts)
        comm.Alltoall(np.ascontiguousarray(self.send_counts), told)
        with collective_phase(comm):
            if not np.array_equal(told, self.receive_counts):
                raise RuntimeError(f"halo sizes disagree: the ranks send {told.tolist()}, the halo holds "
                                   f"{self.receive_counts.tolist()}")

    def exchange(self, comm, values: np.ndarray) -> np.ndarray:
        """``values`` of the local elements (float64) with the halo's replaced by their owners' (a
        collective call); the owned values are returned as given."""
        from mpi4py import MPI

        values = np.array(values, dtype=np.float64)
        sent = np.ascontiguousarray(values[self.send])
        received = np.empty(len(self.receive))
        comm.Alltoallv([sent, self.send_counts, MPI.DOUBLE], [received, self.receive_counts, MPI.DOUBLE])
        values[self.receive] = received
        return values
