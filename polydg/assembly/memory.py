"""The memory an assembly (and a direct solve) needs, estimated before anything is allocated.

The matrix is most of it.  Every row of element e has the same width
W_e = n_e + sum of n_c over e's neighbours c (the sparsity pattern's row
lengths), so

    nnz = sum over the assembled elements of n_e W_e,

one pass over the interfaces.  The matrix takes nnz (value + index) bytes
plus its row pointers; a chunk of quadrature points its share of
:data:`~polydg.assembly.plan.BYTES_PER_POINT` per point (at most the memory
budget); Approach 1 also its COO triplets, one per entry of every
sub-simplex and sub-face block.  :func:`check_assembly_memory` compares the
sum with :func:`available_memory` (and, on a GPU, with the device's free
memory) and refuses, in one line giving the estimate and what would fit,
before the pattern is built.

The memory available is the least of the system's available memory
(``MemAvailable``), what the cgroup still allows (``memory.max`` less
``memory.current``) and what ``ulimit -v`` leaves this process; or
``POLYDG_MEMORY_LIMIT`` (bytes, or ``4G``, ``512M``...) when set (the
command line's ``--memory-limit``).
"""

from __future__ import annotations

import math
import os
import re
import resource
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import MemoryLimitError, OptionError

#: the environment variable that sets the memory a run may use
LIMIT_VARIABLE = "POLYDG_MEMORY_LIMIT"

#: K, KB, KI, KIB (any case) and so on: binary units all
_UNITS = {"": 1, "B": 1, **{prefix + tail: 2 ** (10 * (k + 1)) for k, prefix in enumerate("KMGT")
                            for tail in ("", "B", "I", "IB")}}


def parse_size(text: str, name: str = LIMIT_VARIABLE) -> int:
    """``"4G"``, ``"512 MB"``, ``"1.5e9"`` as bytes (binary units: 1G = 2**30 bytes).

    >>> parse_size("4G"), parse_size("512M"), parse_size("1000"), parse_size("4Gi") == parse_size("4 GiB")
    (4294967296, 536870912, 1000, True)
    """
    match = re.fullmatch(r"\s*([0-9.]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*", str(text))
    unit = match.group(2).upper() if match else None
    if match is None or unit not in _UNITS:
        raise OptionError(f"{name} {text!r}: expected a size such as 4G, 512M or a number of bytes")
    value = float(match.group(1)) * _UNITS[unit]
    if not (math.isfinite(value) and value > 0):
        raise OptionError(f"{name} {text!r}: the size must be positive")
    return int(value)


def format_bytes(n: float) -> str:
    """``12.3 GB``, ``512 MB``: binary units, as :func:`parse_size` reads them."""
    for unit, size in (("TB", 2**40), ("GB", 2**30), ("MB", 2**20), ("KB", 2**10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} bytes"


def available_memory() -> tuple[int | None, str]:
    """(bytes this process may still allocate, where that figure comes from); (None, "") when unknown."""
    given = os.environ.get(LIMIT_VARIABLE, "").strip()
    if given:
        return parse_size(given), f"the limit given: --memory-limit or ${LIMIT_VARIABLE}"  # the CLI sets it
    bounds = []
    meminfo = _read_numbers("/proc/meminfo")
    if "MemAvailable" in meminfo:
        bounds.append((meminfo["MemAvailable"] * 1024, "available memory"))
    cgroup = _cgroup_room()
    if cgroup is not None:
        bounds.append((cgroup, "the cgroup's memory limit"))
    try:
        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    except (ValueError, OSError):
        soft = resource.RLIM_INFINITY
    if soft != resource.RLIM_INFINITY:
        used = _read_numbers("/proc/self/status").get("VmSize", 0) * 1024
        bounds.append((max(soft - used, 0), "ulimit -v"))
    return min(bounds) if bounds else (None, "")


def _read_numbers(path: str) -> dict[str, int]:
    """``Key: 123 kB`` lines of a /proc file as {Key: 123}."""
    out = {}
    try:
        for line in Path(path).read_text().splitlines():
            key, _, rest = line.partition(":")
            parts = rest.split()
            if parts and parts[0].isdigit():
                out[key] = int(parts[0])
    except OSError:
        pass
    return out


def _cgroup_room() -> int | None:
    """What this process's cgroup still allows (v2 ``memory.max``, or v1's limit), None without a limit."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":  # cgroup v2
            base = Path("/sys/fs/cgroup") / path.lstrip("/")
            limit, usage = base / "memory.max", base / "memory.current"
        elif "memory" in controllers.split(","):
            base = Path("/sys/fs/cgroup/memory") / path.lstrip("/")
            limit, usage = base / "memory.limit_in_bytes", base / "memory.usage_in_bytes"
        else:
            continue
        try:
            text = limit.read_text().strip()
            if text == "max" or int(text) >= 2**60:
                return None
            return max(int(text) - int(usage.read_text().strip()), 0)
        except (OSError, ValueError):
            return None
    return None


# ---------------------------------------------------------------------------
# the estimate


@dataclass
class MemoryEstimate:
    """Bytes an assembly needs: ``matrix`` (values, indices, row pointers, load), ``chunk`` (the largest
    chunk's quadrature points and coefficients), ``triplets`` (Approach 1's COO arrays) and ``tables``
    (the moment form's tables of the highest degree)."""

    nnz: int
    rows: int
    matrix: int
    chunk: int
    triplets: int = 0
    tables: int = 0

    @property
    def total(self) -> int:
        return self.matrix + self.chunk + self.triplets + self.tables

    def describe(self) -> str:
        parts = [f"the matrix {format_bytes(self.matrix)} for {self.nnz:,} nonzeros"]
        for size, what in ((self.triplets, "approach 1's triplets"), (self.tables, "the degree's moment tables"),
                           (self.chunk, "a chunk of points")):
            if size >= 2**20:
                parts.append(f"{what} {format_bytes(size)}")
        return f"about {format_bytes(self.total)} ({', '.join(parts)})"


def moment_table_bytes(pmax: int, d: int, basis: str = "P") -> int:
    """About the memory of :func:`~polydg.assembly.moments.moment_tables` up to degree ``pmax``.

    A block entry (i, j) of a term reads the moments m with |i_k - j_k| <= m_k
    <= i_k + j_k of the parity of i_k + j_k in every direction k: at most
    prod_k (min(i_k, j_k) + 1) of them, for 2 + 3d + d^2 terms (those of
    A = a I and those of a full A), 16 bytes each (index and coefficient).
    Twice that bound: the peak while the tables are made (each degree's
    entries, then joined), 1.0 to 1.7 times the bound from 2D p = 8 to 24
    and 3D p = 4 to 10.
    """
    from ..basis import basis_indices

    entries = 0
    for p in range(int(pmax) + 1):
        idx = basis_indices(p, d, basis)
        entries += int(np.prod(np.minimum(idx[:, None, :], idx[None, :, :]) + 1, axis=2).sum())
    return int(entries * (2 + 3 * d + d * d) * 16 * 2)


def block_nnz(mesh, element_dofs: np.ndarray, elements: np.ndarray) -> int:
    """The non-zeros of the rows of ``elements`` (increasing, distinct): n_e^2 for each row element's own
    block and n_a n_b for each side in the rows of each interface (a, b): the sum of n_e W_e
    (W_e = n_e + the dofs of e's neighbours) over the rows, a few passes over the interfaces instead of bincounts."""
    nb = np.asarray(element_dofs, dtype=np.int64)
    a, b = mesh.interface_elements[:, 0], mesh.interface_elements[:, 1]
    cross = nb[a] * nb[b]
    if len(elements) == mesh.n_elements:  # every row
        return int((nb * nb).sum() + 2 * cross.sum())
    in_rows = np.zeros(mesh.n_elements, dtype=np.int64)
    in_rows[elements] = 1
    return int((nb[elements] ** 2).sum() + (cross * (in_rows[a] + in_rows[b])).sum())


#: the share of a GPU's free memory one chunk may take (its points, coefficients and the executor's buffers)
DEVICE_CHUNK_SHARE = 0.25


def chunk_budget_mb(options) -> float:
    """The budget (MB) that chunks are cut by for ``options`` (resolved): their ``budget_mb``, on a GPU within
    :data:`DEVICE_CHUNK_SHARE` of the device's free memory (which the host's budget knows nothing of)."""
    from .. import backend as bk

    if options.backend != "cupy":
        return options.budget_mb
    return min(options.budget_mb, bk.free_memory_bytes("cupy") / 2**20 * DEVICE_CHUNK_SHARE)


def assembly_estimate(space, options, elements: np.ndarray | None = None, matrix: bool = True) -> MemoryEstimate:
    """The memory :func:`~polydg.assembly.assemble` of ``space`` with ``options`` will need (see the module)."""
    from ..quadrature import default_degree
    from .plan import BYTES_PER_POINT, face_rule_degrees, scratch_bytes
    from .points import point_counts

    options = options.for_space(space)  # the backend and reduction that run
    mesh = space.mesh
    elements = np.arange(mesh.n_elements) if elements is None else np.asarray(elements, dtype=np.int64)
    nb = space.element_dofs
    rows = int(nb[elements].sum())
    value = np.dtype(options.dtype).itemsize
    nnz = block_nnz(mesh, nb, elements) if matrix else 0
    matrix_bytes = nnz * (value + 8) + (rows + 1) * 8 + rows * value
    # the chunk: every quadrature point of the rows' elements and their faces, at most the budget
    d = mesh.dim
    rule = space.total_degree
    q_element = default_degree(rule, options.quadrature_extra)
    simplices = np.diff(mesh.element_offsets)
    points = int((point_counts(d, q_element[elements]) * simplices[elements]).sum())
    faces_of_rule = np.bincount(face_rule_degrees(rule, mesh.face_elements, options.quadrature_extra))
    rules = np.flatnonzero(faces_of_rule)
    points = max(points, int((faces_of_rule[rules] * point_counts(d - 1, rules)).sum()))
    # and what an executor holds per entity besides (the ordered sums' blocks on a GPU)
    simplex_scratch, face_scratch = scratch_bytes(options, int(nb.max()))
    scratch = int(simplices[elements].sum()) * simplex_scratch + mesh.n_faces * face_scratch
    chunk = min(points * BYTES_PER_POINT + scratch, int(options.budget_mb * 2**20))
    triplets = 0
    # a reduction that builds its own matrix (approach 1) holds COO triplets: a block per sub-simplex and sub-face
    # (read from ``options.reduction``: the reductions' executors import this module, through the kept points)
    if matrix and not options.reduction.fills_pattern:
        fe = mesh.face_elements
        inner = fe[:, 1] >= 0
        other = np.where(inner, nb[np.maximum(fe[:, 1], 0)], 0)
        entries = int((simplices[elements] * nb[elements] ** 2).sum() + ((nb[fe[:, 0]] + other) ** 2).sum())
        triplets = 2 * entries * (16 + value)  # the triplets, and their concatenation
    tables = moment_table_bytes(space.max_degree, d, getattr(space, "basis", "P"))
    return MemoryEstimate(nnz=nnz, rows=rows, matrix=matrix_bytes, chunk=chunk, triplets=triplets, tables=tables)


def check_assembly_memory(space, options, elements: np.ndarray | None = None, matrix: bool = True) -> MemoryEstimate:
    """Refuse (:class:`~polydg.errors.MemoryLimitError`) an assembly that cannot fit; returns the estimate.

    On a GPU backend the matrix and the chunk must fit the device's free
    memory, and the host's too when the matrix is copied there.
    """
    from .. import backend as bk

    estimate = assembly_estimate(space, options, elements, matrix)
    room, source = available_memory()
    on_device = bk.is_device(options.backend)
    if on_device:
        device = bk.free_memory_bytes(options.backend)
        if estimate.total > device:
            raise MemoryLimitError(_refusal("the assembly", estimate, device, "the GPU's free memory", space,
                                            options, elements))
        if not options.to_host:
            return estimate
    if room is not None and (estimate.matrix if on_device else estimate.total) > room:
        raise MemoryLimitError(_refusal("the assembly", estimate, room, source, space, options, elements))
    return estimate


def _refusal(what: str, estimate: MemoryEstimate, room: int, source: str, space, options, elements) -> str:
    """One line: the estimate, the memory there is, and what would fit."""
    fits = what_fits(estimate, room, space)
    tip = f"; what fits: {fits}" if fits else ""
    return f"{what} needs {estimate.describe()}, {format_bytes(room)} is available ({source}){tip}"


#: the smallest chunk (MB) a "what fits" tip offers as ``--memory-budget``
SMALLEST_CHUNK_MB = 16


def what_fits(estimate: MemoryEstimate, room: int, space) -> str:
    """Smaller chunks, a lower degree, a coarser mesh, more ranks: each as far as it would fit ``room``.

    The matrix (and Approach 1's triplets) scale with the elements, with the
    ranks that share them and with the square of the dofs per element; the
    chunk (at most the memory budget) and the moment tables are every
    process's own.  An estimate made before the mesh (``chunk`` 0: its
    points unknown) gives a lower degree as the matrix it needs, the chunk on
    top.
    """
    from ..basis import basis_size

    d, basis = space.mesh.dim, getattr(space, "basis", "P")
    p = int(space.max_degree)
    chunk = min(estimate.chunk, SMALLEST_CHUNK_MB * 2**20)  # the other tips take the smallest chunk offered
    scalable, fixed = estimate.matrix + estimate.triplets, chunk + estimate.tables
    how = (" for its matrix, the points of a chunk on top" if estimate.chunk == 0 else
           f" with --memory-budget {SMALLEST_CHUNK_MB}" if chunk < estimate.chunk else "")
    tips = []
    spare_mb = (room - scalable - estimate.tables) / 2**20  # what a chunk may take
    if estimate.chunk > 0 and SMALLEST_CHUNK_MB <= spare_mb < estimate.chunk / 2**20:
        tips.append(f"--memory-budget {int(spare_mb)} (memory_budget_mb: smaller chunks of points)")
    for lower in range(p - 1, -1, -1):
        need = (scalable * (basis_size(lower, d, basis) / basis_size(p, d, basis)) ** 2 + chunk
                + moment_table_bytes(lower, d, basis))
        if need <= room:
            tips.append(f"degree {lower} ({format_bytes(need)}{how})")
            break
    if room > fixed and scalable > 0:
        elements = int(space.mesh.n_elements * (room - fixed) / scalable)
        if elements >= 1:
            tips.append(f"about {elements:,} elements at degree {p}{how}")
        ranks = math.ceil(scalable / (room - fixed))
        if ranks > 1:
            tips.append(f"{ranks} or more MPI ranks on as many nodes, each keeping its rows")
    if not tips:
        return ""
    return tips[0] if len(tips) == 1 else ", ".join(tips[:-1]) + ", or " + tips[-1]


def early_estimate(dim: int, elements: int, interfaces: int, degree: int, max_degree: int | None = None,
                   precision: str = "double") -> MemoryEstimate:
    """The matrix of ``elements`` elements of ``degree`` and ``interfaces`` interfaces, before there is a mesh,
    and the moment tables up to ``max_degree`` (default ``degree``).

    For the command line's check from a mesh's sizes (a generator's spec,
    the fine cells of a mesh file), ahead of the exact check of the assembly.
    """
    from ..basis import n_basis

    value = 4 if precision == "single" else 8
    n = n_basis(int(degree), dim)
    nnz = n * n * (int(elements) + 2 * int(interfaces))
    rows = n * int(elements)
    return MemoryEstimate(nnz=nnz, rows=rows, matrix=nnz * (value + 8) + (rows + 1) * 8 + rows * value, chunk=0,
                          tables=moment_table_bytes(degree if max_degree is None else max_degree, dim))


def check_early(estimate: MemoryEstimate, space_like) -> None:
    """:func:`check_assembly_memory`'s refusal, for an :func:`early_estimate`."""
    room, source = available_memory()
    if room is not None and estimate.total > room:
        raise MemoryLimitError(_refusal("the assembly", estimate, room, source, space_like, None, None))


# ---------------------------------------------------------------------------
# the direct solver


def direct_solve_bytes(nnz: int, n: int, dim: int) -> int:
    """About the memory of SuperLU's factors of an n x n DG matrix with nnz nonzeros, and its CSC copy.

    The factors hold ``fill`` times the matrix's nonzeros, the fill growing
    with n like n^0.22 in 2D and n^0.57 in 3D (SuperLU's COLAMD ordering on
    the paper's problems, p = 1 to 3; the fit holds within a factor 1.5),
    at 12 bytes an entry (value and 32-bit index).  This is the fit's lower
    end, so that a refusal is sure.
    """
    if n <= 0 or nnz <= 0:
        return 0
    fill = 1.15 * n**0.22 if dim <= 2 else 0.127 * n**0.57
    fill = max(1.0, fill / 1.5)
    return int(nnz * fill * 12 + nnz * 12)


def check_direct_solve(matrix, dim: int) -> None:
    """Refuse a direct solve whose factors will not fit the memory available (one line)."""
    n = int(matrix.shape[0])
    need = direct_solve_bytes(int(matrix.nnz), n, dim)
    room, source = available_memory()
    if room is not None and need > room:
        raise MemoryLimitError(f"the direct solver's factors need about {format_bytes(need)} for the "
                               f"{n:,} x {n:,} matrix with {int(matrix.nnz):,} nonzeros, {format_bytes(room)} is "
                               f"available ({source}); try --solve iterative, a coarser mesh or a lower degree")


__all__ = ["LIMIT_VARIABLE", "MemoryEstimate", "assembly_estimate", "moment_table_bytes", "available_memory", "check_assembly_memory",
           "check_direct_solve", "check_early", "direct_solve_bytes", "early_estimate", "format_bytes",
           "parse_size", "block_nnz", "what_fits"]
