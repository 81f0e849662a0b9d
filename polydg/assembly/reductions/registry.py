"""The registry of reductions: an entry per ``approach``, its executors and what the assembler must know of it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ... import backend as bk
from ...errors import OptionError
from ..passes import assemble_on_host
from .choice import AUTO

#: the reduction that forms a load vector alone (``assemble(..., matrix=False)``) on the CPU: the row kernels,
#: which can skip every block (on a GPU each reduction's executor forms it, its kernels told to skip the blocks);
#: the loads of all the reductions agree to round-off
LOAD_ALONE = "2"


@dataclass(frozen=True)
class Reduction:
    """One way of reducing the blocks into the matrix (one ``approach`` of :func:`~polydg.assembly.assemble`).

    name : the ``approach`` that selects it
    summary : one line for help texts
    deterministic : the matrix is bitwise the same for any chunking, thread count and run, on every device
    fills_pattern : the executors add the blocks into the plan's CSR pattern, so they take any column
        layout of it (``column_numbering``: an MPI rank's columns); otherwise the executor builds its
        own matrix
    cpu : the CPU executor class, made as ``cpu(PassContext)`` (every reduction has one: the CPU is
        the reference the other devices are tested against)
    gpu : the GPU executor class, made as ``gpu(DeviceContext)``; None: CPU only
    scratch : ``scratch(nbasis, itemsize)``, the bytes its GPU executor holds per sub-simplex and per face of a
        chunk besides their points (``nbasis``: the largest basis size), which the chunks make room for;
        None: nothing beyond the points
    """

    name: str
    summary: str
    deterministic: bool
    fills_pattern: bool
    cpu: Callable
    gpu: Callable | None = None
    scratch: Callable[[int, int], tuple[int, int]] | None = None

    @property
    def devices(self) -> tuple[str, ...]:
        """The devices it runs on: "cpu", and "gpu" where it has a GPU executor."""
        return ("cpu", "gpu") if self.gpu is not None else ("cpu",)

    def execute(self, plan, backend: str, coefficients, workspace, timer, progress=None, to_host: bool = False, *,
                kept_points=None, device_tables: dict | None = None) -> tuple[object, object]:
        """Run ``plan`` with this reduction's executor for ``backend``; the matrix (None for the load alone)
        and the load vector.  ``kept_points`` (a :class:`~polydg.assembly.kept_points.KeptPoints`, on the CPU)
        and ``device_tables`` (a dict, on a GPU): what an :class:`~polydg.assembly.Assembler` keeps from one
        assembly to the next; None: made for this call."""
        if bk.is_device(backend):
            from ..cuda_passes import assemble_on_device  # imports numba.cuda: only on the GPU path

            return assemble_on_device(plan, self.gpu, backend, coefficients, workspace, timer, progress, to_host,
                                      device_tables)
        entry = self if plan.matrix else REDUCTIONS[LOAD_ALONE]
        return assemble_on_host(plan, entry.cpu, coefficients, workspace, timer, progress,
                                csr_values=entry.fills_pattern, kept=kept_points)


#: the registered reductions by name, in the order of registration
REDUCTIONS: dict[str, Reduction] = {}


def register(entry: Reduction) -> Reduction:
    """Add ``entry`` to the registry under its name (a name registers once)."""
    if entry.name in REDUCTIONS:
        raise ValueError(f"a reduction named {entry.name!r} is already registered")
    REDUCTIONS[entry.name] = entry
    return entry


def reduction(name) -> Reduction:
    """The registered reduction called ``name``; an :class:`~polydg.errors.OptionError` for an unknown one.

    >>> reduction("atomic").devices, reduction("1").fills_pattern
    (('cpu', 'gpu'), False)
    """
    name = str(name)
    entry = REDUCTIONS.get(name)
    if entry is None:
        raise OptionError(f"unknown approach {name!r}; choose one of {', '.join((AUTO, *REDUCTIONS))}")
    return entry


def gpu_reductions() -> tuple[str, ...]:
    """The names of the reductions with a GPU executor."""
    return tuple(name for name, entry in REDUCTIONS.items() if entry.gpu is not None)
