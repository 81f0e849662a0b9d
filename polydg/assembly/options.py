"""The user's choices of an assembly, in one frozen object: :class:`AssemblyOptions`.

:func:`~polydg.assembly.assemble`, :func:`~polydg.distributed.assemble_distributed`
and :func:`~polydg.spacetime.march` take it as ``options=``, or its fields as
keywords (the short form), and hand the same object on to every rank and
every slab::

    >>> from polydg.assembly import AssemblyOptions
    >>> options = AssemblyOptions(approach="atomic", precision="single")
    >>> options  # doctest: +NORMALIZE_WHITESPACE
    AssemblyOptions(approach='atomic', precision='single', penalty=10.0, penalty_kind='classical',
                    quadrature_extra=0, memory_budget_mb=None, backend='numpy', to_host=False)
    >>> options.budget_mb, options.replace(backend="cudasim").budget_mb  # the backend's default
    (1024.0, 4096.0)
    >>> options.replace(penalty=7).penalty
    7.0
    >>> AssemblyOptions(penalty_kind="papr")
    Traceback (most recent call last):
    ...
    polydg.errors.OptionError: unknown penalty kind 'papr'; choose one of paper, classical

A field not given takes the session's default: the built-in one, or one
set by :func:`set_default_options` (for the rest of the process) or
:func:`default_options` (inside a ``with`` block); ``backend`` and
``to_host`` go together (:class:`AssemblyOptions`).  That is how the test
suite runs the assemblies that name no backend on another one
(``POLYDG_TEST_BACKEND``, ``tests/conftest.py``)::

    >>> with default_options(quadrature_extra=2):
    ...     AssemblyOptions().quadrature_extra, AssemblyOptions(quadrature_extra=1).quadrature_extra
    (2, 1)

The internal knobs of the layers above the assembly (the rows of one MPI
rank, a slab's penalty scales, ...) are not options: they are an
:class:`~polydg.assembly.scope.AssemblyScope`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import functools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import backend as bk
from ..errors import OptionError
from .penalty import PENALTY_KINDS
from .reductions import REDUCTIONS, gpu_reductions, reduction
from .reductions.choice import AUTO, chosen_approach

#: the approaches: "auto" (the default: :mod:`polydg.assembly.reductions.choice`), then the registered
#: reductions (:mod:`polydg.assembly.reductions`)
APPROACHES = (AUTO,) + tuple(REDUCTIONS)
#: the working precisions and their dtypes
PRECISIONS = {"double": np.float64, "single": np.float32}
#: the largest quadrature extra degree (a rule's points grow as its degree to the dimension: far above the
#: degrees of any basis, quadrature.MAX_LINE_POINTS bounds a rule anyway)
MAX_QUADRATURE_EXTRA = 1000

#: the built-in defaults of the fields (backend: see :class:`AssemblyOptions`; memory_budget_mb: the backend's)
_BUILT_IN = {"approach": AUTO, "precision": "double", "penalty": 10.0, "penalty_kind": "classical",
             "quadrature_extra": 0, "memory_budget_mb": None, "backend": "numpy", "to_host": False}
#: the memory budget of one chunk (MB) where none is given, on the host and on a device: a GPU's chunks are
#: larger, as its launches and waits cost per chunk (an Assembler keeps a device's chunk within a quarter of
#: its free memory)
DEFAULT_MEMORY_BUDGET_MB = {"host": 1024.0, "device": 4096.0}
#: the session's defaults, over the built-in ones (set_default_options, default_options)
_session: dict[str, Any] = {}


def default_budget_mb(backend: str) -> float:
    """The memory budget of a chunk (MB) on ``backend`` where none is given (:data:`DEFAULT_MEMORY_BUDGET_MB`)."""
    return DEFAULT_MEMORY_BUDGET_MB["device" if bk.is_device(backend) else "host"]


def _default(name: str):
    return lambda: _session.get(name, _BUILT_IN[name])


@dataclass(frozen=True)
class AssemblyOptions:
    """The user's choices of an assembly; checked once, when it is made (:class:`~polydg.errors.OptionError`).

    approach : "auto" (default: the deterministic reduction for the mesh and device, chosen when the
        assembly runs: :mod:`~polydg.assembly.reductions.choice`), "2" (row kernels, bitwise
        reproducible), "ordered" (on a GPU, entity blocks summed per element in a fixed order; bitwise
        reproducible), "blocks" (on a GPU, a thread block per element and a thread per entry of its rows;
        bitwise reproducible), "atomic" (the paper's scatter-add) or "1"
        (the COO baseline, CPU only)
    precision : "double" (default) or "single"
    penalty : C_sigma, the penalty constant (default 10)
    penalty_kind : "classical" (default, C_sigma a p^2 / h_K) or "paper" (Appendix A, faces
        read as whole interfaces); see :mod:`polydg.assembly.penalty`
    quadrature_extra : added to the default exactness degree 2p + 1 (default 0)
    memory_budget_mb : bound on the working memory of one chunk of quadrature points, in MB (default None:
        the backend's, :data:`DEFAULT_MEMORY_BUDGET_MB`, 1024 on the CPU and 4096 on a GPU; :attr:`budget_mb`)
    backend : "numpy" (the CPU path), "cupy" (the GPU path: the same plan executed by numba-cuda
        kernels), "auto" (cupy when a GPU is usable; resolved when the assembly runs) or the
        test-only "cudasim" (:mod:`polydg.backend`)
    to_host : with backend "cupy", return a SciPy matrix and a NumPy vector instead of a
        ``cupyx.scipy.sparse.csr_matrix`` and a CuPy array

    ``backend`` and ``to_host`` say where the results live, and their defaults
    go together: options that name no backend (None) get the session's backend
    and its ``to_host`` (built in: numpy, False), except with approach "1": it
    has no GPU executor, so it runs on numpy whatever the session's backend (a
    backend named with approach "1" must be the CPU's).  Options that name a
    backend get ``to_host`` False unless they name it too.

    Frozen: derive another with :meth:`replace`.
    """

    approach: str = field(default_factory=_default("approach"))
    precision: str = field(default_factory=_default("precision"))
    penalty: float = field(default_factory=_default("penalty"))
    penalty_kind: str = field(default_factory=_default("penalty_kind"))
    quadrature_extra: int = field(default_factory=_default("quadrature_extra"))
    memory_budget_mb: float | None = field(default_factory=_default("memory_budget_mb"))
    backend: str | None = None
    to_host: bool | None = None

    def __post_init__(self):
        approach = str(self.approach)  # approach=2 reads as "2"
        backend, to_host = self.backend, self.to_host
        entry = None if approach == AUTO else reduction(approach)  # an unknown name is refused here
        if backend is None:  # the session's placement; a reduction without a GPU executor runs on the CPU
            cpu_only = entry is not None and entry.gpu is None
            backend = "numpy" if cpu_only else _session.get("backend", _BUILT_IN["backend"])
            to_host = _session.get("to_host", _BUILT_IN["to_host"]) if to_host is None else to_host
        values = {"approach": approach, "backend": backend, "to_host": bool(to_host),
                  "penalty": _number(self.penalty, "penalty constant must be positive"),
                  "memory_budget_mb": None if self.memory_budget_mb is None else
                  _number(self.memory_budget_mb, "memory budget must be a positive finite number", "MB"),
                  "quadrature_extra": _integer(self.quadrature_extra)}
        for name, value in values.items():
            object.__setattr__(self, name, value)
        self._validate()

    def _validate(self) -> None:
        """The one validation: each value in its range, and the combinations that cannot run."""
        entry = None if self.approach == AUTO else reduction(self.approach)  # OptionError for an unknown one
        if self.precision not in PRECISIONS:
            raise OptionError(f"unknown precision {self.precision!r}; choose double or single")
        if self.penalty_kind not in PENALTY_KINDS:
            raise OptionError(f"unknown penalty kind {self.penalty_kind!r}; choose one of {', '.join(PENALTY_KINDS)}")
        if not self.penalty > 0:
            raise OptionError(f"penalty constant must be positive, got {self.penalty}")
        if not 0 <= self.quadrature_extra <= MAX_QUADRATURE_EXTRA:
            raise OptionError(f"quadrature extra degree must be from 0 to {MAX_QUADRATURE_EXTRA}, got "
                              f"{self.quadrature_extra}")
        if self.memory_budget_mb is not None and not 0 < self.memory_budget_mb < float("inf"):
            raise OptionError(f"memory budget must be a positive finite number, got {self.memory_budget_mb} MB")
        if self.backend not in bk.BACKENDS + (bk.SIMULATOR,):
            raise OptionError(f"unknown backend {self.backend!r}; choose one of {', '.join(bk.BACKENDS)}")
        if entry is not None and entry.gpu is None and bk.is_device(self.backend):
            *others, last = gpu_reductions()
            named = f"{', '.join(others)} or {last}" if others else last
            raise OptionError(f"approach {self.approach!r} runs on the CPU only; on a GPU use approach {named}")

    @property
    def reduction(self):
        """The registered reduction that ``approach`` names (a :class:`~polydg.assembly.reductions.Reduction`);
        "auto" names one only for a space: :meth:`for_space`."""
        if self.approach == AUTO:
            raise OptionError('approach "auto" is chosen for a space: use options.for_space(space).reduction')
        return reduction(self.approach)

    @property
    def budget_mb(self) -> float:
        """The memory budget of one chunk in MB: ``memory_budget_mb``, else the backend's default (a backend
        "auto" not yet :meth:`resolved` counts as the host)."""
        return default_budget_mb(self.backend) if self.memory_budget_mb is None else self.memory_budget_mb

    @property
    def dtype(self) -> type:
        """The NumPy type of the working precision."""
        return PRECISIONS[self.precision]

    def replace(self, **changes: Any) -> AssemblyOptions:
        """These options with ``changes`` (field names), checked again."""
        return dataclasses.replace(self, **_checked_names(changes))

    def resolved(self, say=None) -> AssemblyOptions:
        """These options with the backend that will run: "auto" decided, and the choice checked here
        (:func:`polydg.backend.resolve_backend`; ``say`` hears what "auto" chose), and the memory budget
        that backend's where none is given (:attr:`budget_mb`)."""
        run = self.replace(backend=bk.resolve_backend(self.backend, say=say))
        return run if run.memory_budget_mb is not None else run.replace(memory_budget_mb=run.budget_mb)

    def for_space(self, space, say=None) -> AssemblyOptions:
        """These options with approach "auto" replaced by the reduction it chooses for the mesh of ``space``
        on their backend (:func:`~polydg.assembly.reductions.choice.chosen_approach`; backend "auto"
        :meth:`resolved` first, ``say`` hearing what it chose); other approaches as they are."""
        if self.approach != AUTO:
            return self
        run = self.resolved(say=say) if self.backend == "auto" else self
        return run.replace(approach=chosen_approach(AUTO, space, run.backend))

    def as_dict(self) -> dict[str, Any]:
        """The fields as a plain dict (JSON-ready: the summary's ``assembly_options``)."""
        return dataclasses.asdict(self)


FIELDS = tuple(f.name for f in dataclasses.fields(AssemblyOptions))


def _named_fields_first(made):
    """The dataclass' ``__init__``, refusing an unknown keyword in one line (with a "did you mean") as
    :func:`assembly_options` does, instead of Python's bare TypeError."""
    def __init__(self, *args, **choices):
        made(self, *args, **_checked_names(choices))

    return functools.wraps(made)(__init__)


AssemblyOptions.__init__ = _named_fields_first(AssemblyOptions.__init__)
#: keywords that were options of ``assemble()`` once, and where they went
_MOVED = {name: f"pass scope=AssemblyScope({name}=...) (polydg.assembly.AssemblyScope)"
          for name in ("elements", "face_penalty", "face_penalty_scale", "column_numbering", "load_boundary_faces")}
_MOVED["comm"] = "use polydg.distributed.assemble_distributed(space, problem, comm, ...)"


def _checked_names(choices: Mapping[str, Any]) -> Mapping[str, Any]:
    for name in choices:
        if name not in FIELDS:
            if name in _MOVED:
                raise OptionError(f"{name!r} is not an assembly option: {_MOVED[name]}")
            close = difflib.get_close_matches(name, FIELDS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise OptionError(f"unknown assembly option {name!r}{hint}; the options are {', '.join(FIELDS)}")
    return choices


def linearisation_options(options: AssemblyOptions) -> AssemblyOptions:
    """``options`` for linearising: double precision by rows (approach 2), "auto" choosing it; another
    precision or approach is refused in one line rather than ignored."""
    if options.precision != "double":
        raise OptionError("a nonlinear problem is linearised in double precision (precision 'double')")
    if options.approach not in (AUTO, "2"):
        raise OptionError(f"a nonlinear problem is linearised by row kernels (approach 2), not approach "
                          f"{options.approach!r}")
    return options.replace(approach="2")


def assembly_options(options: AssemblyOptions | None = None, choices: Mapping[str, Any] | None = None
                     ) -> AssemblyOptions:
    """The options of a call ``f(..., options, **choices)``: ``options`` (default: the session's
    defaults) with the keywords ``choices`` (field names of :class:`AssemblyOptions`) over them.

    >>> assembly_options(None, {"approach": "atomic"}).approach
    'atomic'
    >>> assembly_options(None, {"aproach": "1"})
    Traceback (most recent call last):
    ...
    polydg.errors.OptionError: unknown assembly option 'aproach' (did you mean 'approach'?); the options are approach, precision, penalty, penalty_kind, quadrature_extra, memory_budget_mb, backend, to_host
    """
    choices = _checked_names(choices or {})
    if options is None:
        return AssemblyOptions(**choices)
    if not isinstance(options, AssemblyOptions):
        raise OptionError(f"options must be an AssemblyOptions, got {type(options).__name__}")
    return options.replace(**choices) if choices else options


def set_default_options(**choices: Any) -> None:
    """Make ``choices`` the defaults of the fields not given of every :class:`AssemblyOptions` made
    from now on, in the whole process (:func:`reset_default_options` undoes it)."""
    global _session
    merged = {**_session, **_checked_names(choices)}
    AssemblyOptions(**merged)  # the defaults must make valid options
    _session = merged


def reset_default_options() -> None:
    """Back to the built-in defaults."""
    global _session
    _session = {}


@contextlib.contextmanager
def default_options(**choices: Any) -> Iterator[AssemblyOptions]:
    """Inside the block, ``choices`` are the defaults of the fields not given (as
    :func:`set_default_options`; restored after).  Yields the options of the defaults."""
    global _session
    saved = _session
    set_default_options(**choices)
    try:
        yield AssemblyOptions()
    finally:
        _session = saved


def _number(value: Any, message: str, unit: str = "") -> float:
    """``value`` as a float: a number, not text ("10") or a bool, which ``float`` would take too."""
    try:
        if isinstance(value, (str, bytes, bool, np.bool_)) or (isinstance(value, np.ndarray)
                                                               and value.dtype.kind in "SUb"):
            raise TypeError
        return float(value)
    except (TypeError, ValueError):
        raise OptionError(f"{message}, got {value!r}{' ' + unit if unit else ''}") from None


def _integer(value: Any) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        if isinstance(value, (float, np.floating)) and float(value).is_integer():
            return int(value)
        raise OptionError(f"quadrature extra degree must be an integer >= 0, got {value!r}")
    return int(value)


__all__ = ["APPROACHES", "FIELDS", "PRECISIONS", "AssemblyOptions", "assembly_options", "default_options",
           "reset_default_options", "set_default_options"]
