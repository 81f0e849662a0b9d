"""The assembly kernels for the GPU, compiled by numba-cuda from the per-point forms of ``forms.py``.

One source of the mathematics: the device functions below are
``forms.py``'s and ``basis.py``'s own Python functions compiled with
``cuda.jit(device=True)`` (the CPU compiles the same source with
``numba.njit``).  Only the launch structure is the GPU's:

* row kernels (Approach 2, deterministic; "auto" runs them on meshes of few
  sub-simplices per element): one thread per
  element sums its sub-simplices' (volume), its interfaces' faces' (interior)
  or its boundary faces' points into local blocks, in a fixed order, and adds
  each block once at its CSR position.  No two threads touch the same entry,
  so the result is bitwise the same from run to run.
* entity kernels (``approach="atomic"``, the paper's scatter): one thread per
  sub-simplex, per interior face side or per boundary face adds its block into
  the CSR values with ``cuda.atomic.add`` (the order of the additions, and so
  the last bits, vary from run to run).

The kernels are made per (dimension, largest degree, dtype, basis) by
:func:`gpu_kernels`: those are constants of the compiled code, so the
per-thread work arrays (``cuda.local.array``) have compile-time shapes, and
the bases' multi-index table (P_p, or the space-time PQ_p) and Legendre
recurrence are constant memory (``cuda.const.array_like``).  Elements of
lower degree use the leading entries (mixed degrees: both tables are
hierarchical).  Arrays are device arrays: CuPy arrays on a GPU,
NumPy arrays under numba-cuda's simulator (``NUMBA_ENABLE_CUDASIM=1``, set
before ``numba.cuda`` is first imported; this module imports it, so only the
GPU path imports it: the executors ``cuda_passes.py``, ``cuda_sums.py`` and
``cuda_linearized.py`` and the reductions' GPU executors).

The kernels take the CPU's named structures (``arguments.py``: pattern,
basis tables, faces, points, coefficients, values): a launch flattens a
tuple argument, a ``NamedTuple`` included, into one kernel parameter per
array, so the grouping costs the launch nothing; the device functions take
their element's tables and work arrays in tuples.  Flat arrays stay in the
pattern's index kernel (:func:`pattern_indices`), launched while the
pattern is being built, before the plan's structures exist, and in the
per-point device functions, which are ``forms.py``'s and ``basis.py``'s CPU
source compiled again and so keep its signatures.  Coefficient arrays have
one row per quadrature point or a single row (a constant); ``_row`` picks
the right one, as on the CPU.
"""

from __future__ import annotations

import os
import sys
import time
import types
from contextlib import contextmanager
from functools import lru_cache
from types import SimpleNamespace

import numpy as np
from numba import config, cuda, from_dtype  # ``cuda`` at module level: the simulator swaps it while a kernel runs

try:  # numba-cuda's own configuration (numba's, in the versions where they are one)
    from numba.cuda.core import config as cuda_config
except ImportError:  # pragma: no cover - older numba-cuda
    cuda_config = config

from ..backend import numpy_aliases_for_numba_cuda
from ..basis import basis_indices, element_box_tables, eval_basis_point_scaled, legendre_recurrence
from .forms import (dirichlet_point, inflow_point, interior_face_point, load_point, neumann_point, normal_flux,
                    trial_side, volume_point)
from .kernels import DIFFUSIVE, _dot_normal
from .sums_layout import BLOCK_ENTRIES_MAX

numpy_aliases_for_numba_cuda()  # before numba-cuda's CUDA target first loads (at the first compilation)

#: the interpreter's switch interval (seconds) while the simulator runs a launch (:func:`_launching`)
SIMULATOR_SWITCH_INTERVAL = 1e-4
#: threads per block: a multiple of the warp on a GPU; the simulator runs a Python thread per GPU thread
THREADS = 32 if config.ENABLE_CUDASIM else 128


#: whether kernels are kept on disk (:func:`kernel`); ``POLYDG_CUDA_CACHE=0`` compiles them in every process
CACHE_KERNELS = os.environ.get("POLYDG_CUDA_CACHE", "1") != "0" and not config.ENABLE_CUDASIM
if config.CACHE_DIR:  # polydg's cache directory (``polydg.jit``), where numba-cuda read its own setting earlier
    cuda_config.CACHE_DIR = config.CACHE_DIR


def kernel(function):
    """``function`` as a kernel, compiled at its first launch for the arguments' types and kept on disk in
    polydg's cache directory (:mod:`polydg.jit`, one per version of the sources), so that another process
    loads it instead of compiling it again: a GPU run's start-up is the kernels' compilation.  numba-cuda
    keys a kernel by its code and the contents of its closure (the per-degree tables of
    :func:`gpu_kernels`), the signature and the device's compute capability."""
    return cuda.jit(cache=CACHE_KERNELS)(function)


def for_device(function, **helpers):
    """``function``'s source compiled for the device, the CPU helpers it calls resolved to device ones."""
    names = dict(function.py_func.__globals__, **helpers)
    py = types.FunctionType(function.py_func.__code__, names, function.py_func.__name__)
    return cuda.jit(device=True)(py)


# the per-point mathematics, compiled for the device from the CPU's source
_box_tables = cuda.jit(device=True)(element_box_tables.py_func)
_basis = cuda.jit(device=True)(eval_basis_point_scaled.py_func)
_trial = cuda.jit(device=True)(trial_side.py_func)
_volume = for_device(volume_point, trial_side=_trial)
_load = cuda.jit(device=True)(load_point.py_func)
_flux = cuda.jit(device=True)(normal_flux.py_func)
_dot_n = cuda.jit(device=True)(_dot_normal.py_func)
_interior = cuda.jit(device=True)(interior_face_point.py_func)
_dirichlet = cuda.jit(device=True)(dirichlet_point.py_func)
_inflow = cuda.jit(device=True)(inflow_point.py_func)
_neumann = cuda.jit(device=True)(neumann_point.py_func)


# ---------------------------------------------------------------------------
# one entity's points into local blocks (shared by the row and entity kernels)


@cuda.jit(device=True)
def _row(r, a):
    return r if a.shape[0] > 1 else 0


@cuda.jit(device=True)
def simplex_terms(want_block, r0, r1, points, coef, side, rec, table, scratch, block, vec):
    """Add the volume terms (``want_block``; else the load alone) and load of the points r0:r1 (one
    sub-simplex) to block and vec.

    ``side``: the element's (box, scale, degree, nbasis); ``scratch``: (leg, dleg, phi, gradT, ag, bg)."""
    X, W = points.x, points.weight
    A, B, C, F = coef
    box, scale, p, nb = side
    leg, dleg, phi, gradT, ag, bg = scratch
    for r in range(r0, r1):
        _basis(X[r], box, scale, rec, p, table, nb, leg, dleg, phi, gradT)
        if want_block:
            _volume(W[r], phi, gradT, nb, A[_row(r, A)], B[_row(r, B)], C[_row(r, C)], block, ag, bg)
        _load(W[r], phi, nb, F[_row(r, F)], vec)


@cuda.jit(device=True)
def interior_terms(r0, r1, points, coef, n, sigma, side_K, side_N, rec, table, scratch, bKK, bKN):
    """Add the rows of element K at the points r0:r1 of a face shared with N (n: the normal out of K).

    ``side_K``, ``side_N``: (box, scale, degree, nbasis); ``scratch``: (An, leg, dleg, phiK, gradK, fluxK,
    phiN, gradN, fluxN)."""
    W = points.weight
    nbK, nbN = side_K[3], side_N[3]
    An, leg, dleg, phiK, gradK, fluxK, phiN, gradN, fluxN = scratch
    for r in range(r0, r1):
        bn = interior_sides(r, points, coef, n, side_K, side_N, rec, table, scratch)
        _interior(W[r], phiK, fluxK, nbK, phiN, fluxN, nbN, bn, sigma, bKK, bKN)


@cuda.jit(device=True)
def interior_sides(r, points, coef, n, side_K, side_N, rec, table, scratch):
    """Point r of a face between K and N (n out of K): each side's basis values and fluxes (A grad phi).n into
    ``scratch`` (as :func:`interior_terms`'), and b.n."""
    X = points.x
    A, B = coef
    boxK, scaleK, pK, nbK = side_K
    boxN, scaleN, pN, nbN = side_N
    An, leg, dleg, phiK, gradK, fluxK, phiN, gradN, fluxN = scratch
    _basis(X[r], boxK, scaleK, rec, pK, table, nbK, leg, dleg, phiK, gradK)
    _basis(X[r], boxN, scaleN, rec, pN, table, nbN, leg, dleg, phiN, gradN)
    _dot_n(A[_row(r, A)], n, An)
    _flux(gradK, nbK, An, fluxK)
    _flux(gradN, nbN, An, fluxN)
    b = B[_row(r, B)]
    bn = b[0] * n[0]
    for k in range(1, X.shape[1]):
        bn += b[k] * n[k]
    return bn


@cuda.jit(device=True)
def boundary_terms(mode, r0, r1, points, coef, n, sigma, side, rec, table, scratch, block, vec):
    """Add the boundary terms of the points r0:r1 of one boundary face (n outward), as ``kernels.py`` does:

    mode DIFFUSIVE: where n.A n > 0, the Dirichlet SIP terms or the Neumann load;
    mode INFLOW: where b.n < 0 off the Neumann part, the upwind terms (outflow points add nothing).
    ``side``: the element's (box, scale, degree, nbasis); ``scratch``: (An, leg, dleg, phi, gradT, flux).
    """
    W, GD, GN = points.weight, coef.GD, coef.GN
    nb = side[3]
    phi, flux = scratch[3], scratch[5]
    for r in range(r0, r1):
        kind, bn = boundary_point(mode, r, points, coef, n, side, rec, table, scratch)
        if kind == NEUMANN:
            _neumann(W[r], phi, nb, GN[_row(r, GN)], vec)
        elif kind == DIRICHLET:
            _dirichlet(W[r], phi, flux, nb, sigma, GD[_row(r, GD)], block, vec)
        elif kind == INFLOW:
            _inflow(W[r], phi, nb, bn, GD[_row(r, GD)], block, vec)


#: the term a boundary point adds (:func:`boundary_point`)
NONE, DIRICHLET, NEUMANN, INFLOW = 0, 1, 2, 3


@cuda.jit(device=True)
def boundary_point(mode, r, points, coef, n, side, rec, table, scratch):
    """Which term point r of a boundary face adds in ``mode`` (:func:`boundary_terms`' rule) and b.n (0 in
    mode DIFFUSIVE); where one, its basis values (and for Dirichlet its fluxes (A grad phi).n) in ``scratch``:
    (An, leg, dleg, phi, gradT, flux)."""
    X = points.x
    A, B, GD, GN, NEU = coef
    box, scale, p, nb = side
    An, leg, dleg, phi, gradT, flux = scratch
    ana = _dot_n(A[_row(r, A)], n, An)
    neumann = NEU[_row(r, NEU)] != 0
    if mode == DIFFUSIVE:
        if not ana > 0:
            return NONE, 0 * ana
        _basis(X[r], box, scale, rec, p, table, nb, leg, dleg, phi, gradT)
        if neumann:
            return NEUMANN, 0 * ana
        _flux(gradT, nb, An, flux)
        return DIRICHLET, 0 * ana
    b = B[_row(r, B)]
    bn = b[0] * n[0]
    for k in range(1, X.shape[1]):
        bn += b[k] * n[k]
    if bn < 0 and not (ana > 0 and neumann):
        _basis(X[r], box, scale, rec, p, table, nb, leg, dleg, phi, gradT)
        return INFLOW, bn
    return NONE, bn


# ---------------------------------------------------------------------------
# writing local blocks into the CSR values: once per block (rows) or atomically (entities)


@cuda.jit(device=True)
def _zero_block(block, nr, nc):
    for i in range(nr):
        for j in range(nc):
            block[i, j] = 0


@cuda.jit(device=True)
def _zero_vec(vec, n):
    for i in range(n):
        vec[i] = 0


@cuda.jit(device=True)
def _add_block(data, pos, width, block, nr, nc):
    for i in range(nr):
        for j in range(nc):
            data[pos + i * width + j] += block[i, j]


@cuda.jit(device=True)
def _add_vec(rhs, first, vec, n):
    for i in range(n):
        rhs[first + i] += vec[i]


@cuda.jit(device=True)
def _atomic_block(data, pos, width, block, nr, nc):
    for i in range(nr):
        for j in range(nc):
            cuda.atomic.add(data, pos + i * width + j, block[i, j])


@cuda.jit(device=True)
def _atomic_vec(rhs, first, vec, n):
    for i in range(n):
        cuda.atomic.add(rhs, first + i, vec[i])


# ---------------------------------------------------------------------------
# the kernels, per (dimension, largest degree, dtype)


@contextmanager
def _launching():
    """What a launch changes while it runs.

    numba-cuda warns of grids too small to fill the card; ours are small by design where a chunk, a mesh
    or a compiling launch is (the warning would reach the user at every one).  Its own switch, as its tests
    turn it: a ``warnings`` filter would reset the record of warnings already shown at every launch.
    Under the simulator, whose launch polls its threads in a loop that holds the GIL for a whole switch
    interval (5 ms by default) each turn, a short interval hands the GIL to the threads doing the work."""
    before = getattr(cuda_config, "CUDA_LOW_OCCUPANCY_WARNINGS", 0)
    interval = sys.getswitchinterval()
    cuda_config.CUDA_LOW_OCCUPANCY_WARNINGS = 0
    if config.ENABLE_CUDASIM:
        sys.setswitchinterval(SIMULATOR_SWITCH_INTERVAL)
    try:
        yield
    finally:
        cuda_config.CUDA_LOW_OCCUPANCY_WARNINGS = before
        sys.setswitchinterval(interval)


def launch_view(a):
    """``a`` as a launch reads it fastest: an array of another library (CuPy's, anything with
    ``__cuda_array_interface__``) as a numba-cuda device array on the same memory, a ``NamedTuple``
    field by field, anything else as it is.

    numba-cuda types a foreign array again at every launch, a view of its own about four times faster,
    so the structures many launches read are viewed once (:class:`ViewCache`).  No stream is waited for
    where the array's stream is a default one (none named, the legacy or the per-thread default): polydg's
    launches run on the legacy default stream, which orders itself after those.  An array of another
    stream (the caller's own ``cupy.cuda.Stream``) is waited for, as numba-cuda does.
    """
    if isinstance(a, tuple) and hasattr(a, "_fields"):
        return type(a)(*(launch_view(x) for x in a))
    if hasattr(a, "__cuda_array_interface__") and not hasattr(a, "_numba_type_"):  # not numba-cuda's own
        desc = a.__cuda_array_interface__
        return cuda.from_cuda_array_interface(desc, owner=a, sync=desc.get("stream") not in DEFAULT_STREAMS)
    return a


#: the ``stream`` of a CUDA array interface that needs no wait before a launch on the legacy default stream:
#: none named, the legacy default stream (1) and the per-thread default stream (2)
DEFAULT_STREAMS = (None, 1, 2)


class ViewCache:
    """Launch views (:func:`launch_view`) of the structures given, kept by identity; the other arguments of a
    launch are viewed for that launch alone.

    It holds each structure it viewed, so no other object can take its identity while the views live; the
    arrays of one chunk are left out, so that they are freed with the chunk.  (A CuPy array handed to a
    launch as it is costs more than its view: numba-cuda types it from its interface and waits for the
    stream it names, so the host would stop at every launch.)"""

    def __init__(self, *structures):
        self._views: dict[int, tuple] = {}
        self.add(*structures)

    def add(self, *structures) -> None:
        """View ``structures`` (those already viewed are kept as they are)."""
        for s in structures:
            kept = self._views.get(id(s))
            if kept is None or kept[0] is not s:
                self._views[id(s)] = (s, launch_view(s))

    def __call__(self, args: tuple) -> tuple:
        out = []
        for a in args:
            kept = self._views.get(id(a))
            out.append(kept[1] if kept is not None and kept[0] is a else launch_view(a))
        return tuple(out)


def launch(kernel, n: int, *args, block: int | None = None) -> None:
    """Run ``kernel`` with at least ``n`` threads (one per element or entity), ``THREADS`` per block; with
    ``block``, ``n`` blocks of ``block`` threads (a block per element)."""
    if n > 0:
        grid = (n, block) if block else ((n + THREADS - 1) // THREADS, THREADS)
        with _launching():
            kernel[grid](n, *args)


def warm(kernel, *args) -> None:
    """Compile ``kernel`` for ``args`` (those after its thread count) by one launch whose thread returns."""
    with _launching():
        kernel[1, 1](0, *args)


def compile_once(kernel, name: str, args: tuple, compiled: set, timer, synchronize) -> None:
    """Compile ``kernel`` for ``args`` unless ``name`` is in ``compiled`` (the caller's set, which it joins):
    numba-cuda compiles at a first launch, so here by one launch whose threads all return (:func:`warm`),
    timed as ``jit`` and kept out of the stage around it (``timer.compiled``).  The device work queued
    before is waited for first, so that ``jit`` holds only the compilation."""
    if name in compiled:
        return
    synchronize()
    t = time.perf_counter()
    warm(kernel, *args)
    synchronize()
    timer.compiled(t)
    compiled.add(name)


@lru_cache(maxsize=None)
def gpu_kernels(dim: int, pmax: int, dtype, basis: str = "P") -> SimpleNamespace:
    """The GPU kernels of a ``dim``-dimensional space of degrees <= ``pmax`` in ``dtype`` (float64 or float32),
    ``basis`` "P" (total degree) or "PQ" (space-time: degree p in t times total degree p in x).

    The PQ_p table's largest 1D degree is p too, so only the table (and its
    length) differ between the two.

    Each kernel's first argument is the number of threads that do work
    (:func:`launch` passes it), then where its range starts (and a boundary
    kernel's mode), then ``want_block`` (False for the load alone: no block is
    written, nor formed in the volume) for all but the interior kernels, then the named
    structures of ``arguments.py`` (launched by the reductions' GPU
    executors, ``reductions/``).  A boundary face whose ``face_local`` is -1
    has no points in the batch and is left out.  Compiled by numba-cuda at
    their first launch.
    """
    D, P1 = int(dim), int(pmax) + 1
    TABLE = np.ascontiguousarray(basis_indices(int(pmax), D, basis), dtype=np.int64)
    REC = legendre_recurrence(int(pmax), np.dtype(dtype))
    NB = len(TABLE)
    DT = from_dtype(np.dtype(dtype))
    I64 = from_dtype(np.dtype(np.int64))

    # -- one entity's blocks: the atomic kernels' and the ordered sums' pieces (``cuda_sums.py``) ----------

    @cuda.jit(device=True)
    def simplex_blocks(want_block, t, s_lo, simplex_element, points, coef, basis, pattern, block, vec):
        """Sub-simplex ``s_lo + t`` (the batch's t-th) into ``block`` and ``vec`` (zeroed first); its element,
        or -1 (nothing formed) when that element's rows are not assembled here."""
        e = simplex_element[s_lo + t]
        if pattern.row_base[e] < 0:
            return -1  # not a row of this assembly (another rank's element, or a gap in the element set)
        r0, r1 = points.offsets[t], points.offsets[t + 1]
        table = cuda.const.array_like(TABLE)
        rec = cuda.const.array_like(REC)
        box, scale = cuda.local.array((D, 2), DT), cuda.local.array((D, P1), DT)
        leg, dleg = cuda.local.array((D, P1), DT), cuda.local.array((D, P1), DT)
        phi, gradT = cuda.local.array(NB, DT), cuda.local.array((D, NB), DT)
        ag, bg = cuda.local.array((D, NB), DT), cuda.local.array(NB, DT)
        nb, p = basis.nbasis[e], basis.degree[e]
        _zero_block(block, nb, nb)
        _zero_vec(vec, nb)
        _box_tables(basis.lo[e], basis.hi[e], p, box, scale)
        simplex_terms(want_block, r0, r1, points, coef, (box, scale, p, nb), rec, table,
                      (leg, dleg, phi, gradT, ag, bg), block, vec)
        return e

    @cuda.jit(device=True)
    def interior_side_blocks(f, side, r0, r1, points, coef, basis, faces, bKK, bKN):
        """Interior face f's points r0:r1 seen from its ``side``: the rows of that side's element against
        itself (``bKK``) and against the other side's (``bKN``), both zeroed first."""
        table = cuda.const.array_like(TABLE)
        rec = cuda.const.array_like(REC)
        boxK, scaleK = cuda.local.array((D, 2), DT), cuda.local.array((D, P1), DT)
        boxN, scaleN = cuda.local.array((D, 2), DT), cuda.local.array((D, P1), DT)
        leg, dleg = cuda.local.array((D, P1), DT), cuda.local.array((D, P1), DT)
        phiK, gradK, fluxK = cuda.local.array(NB, DT), cuda.local.array((D, NB), DT), cuda.local.array(NB, DT)
        phiN, gradN, fluxN = cuda.local.array(NB, DT), cuda.local.array((D, NB), DT), cuda.local.array(NB, DT)
        n, An = cuda.local.array(D, DT), cuda.local.array(D, DT)
        lo, hi, degree, nbasis = basis.lo, basis.hi, basis.degree, basis.nbasis
        e, c = faces.face_elements[f, side], faces.face_elements[f, 1 - side]
        nbK, pK, nbN, pN = nbasis[e], degree[e], nbasis[c], degree[c]
        _zero_block(bKK, nbK, nbK)
        _zero_block(bKN, nbK, nbN)
        _box_tables(lo[e], hi[e], pK, boxK, scaleK)
        _box_tables(lo[c], hi[c], pN, boxN, scaleN)
        sign = 1.0 if side == 0 else -1.0  # stored normals point from the lower element to the higher
        for m in range(D):
            n[m] = sign * faces.normal[f, m]
        interior_terms(r0, r1, points, coef, n, faces.sigma[f], (boxK, scaleK, pK, nbK), (boxN, scaleN, pN, nbN),
                       rec, table, (An, leg, dleg, phiK, gradK, fluxK, phiN, gradN, fluxN), bKK, bKN)

    @cuda.jit(device=True)
    def boundary_face_blocks(mode, f, points, coef, basis, faces, pattern, block, vec):
        """Boundary face f (terms of ``mode``) into ``block`` and ``vec`` (zeroed first); its place in the
        batch, or -1 (nothing formed) for a face left out (its terms vanish, or the load alone's) or one
        whose element's rows are not assembled here."""
        fl = faces.face_local[f]
        e = faces.face_elements[f, 0]
        if fl < 0 or pattern.row_base[e] < 0:
            return -1
        r0, r1 = points.offsets[fl], points.offsets[fl + 1]
        table = cuda.const.array_like(TABLE)
        rec = cuda.const.array_like(REC)
        box, scale = cuda.local.array((D, 2), DT), cuda.local.array((D, P1), DT)
        leg, dleg = cuda.local.array((D, P1), DT), cuda.local.array((D, P1), DT)
        phi, gradT, flux = cuda.local.array(NB, DT), cuda.local.array((D, NB), DT), cuda.local.array(NB, DT)
        An = cuda.local.array(D, DT)
        nb, p = basis.nbasis[e], basis.degree[e]
        _zero_block(block, nb, nb)
        _zero_vec(vec, nb)
        _box_tables(basis.lo[e], basis.hi[e], p, box, scale)
        boundary_terms(mode, r0, r1, points, coef, faces.normal[f], faces.sigma[f], (box, scale, p, nb), rec, table,
                       (An, leg, dleg, phi, gradT, flux), block, vec)
        return fl

    # -- volume ---------------------------------------------------------------

    @kernel
    def volume_rows(n_el, e_lo, want_block, element_offsets, s_lo, points, coef, basis, pattern, values):
        t = cuda.grid(1)
        if t >= n_el:
            return
        table = cuda.const.array_like(TABLE)
        rec = cuda.const.array_like(REC)
        box, scale = cuda.local.array((D, 2), DT), cuda.local.array((D, P1), DT)
        leg, dleg = cuda.local.array((D, P1), DT), cuda.local.array((D, P1), DT)
        phi, gradT = cuda.local.array(NB, DT), cuda.local.array((D, NB), DT)
        ag, bg = cuda.local.array((D, NB), DT), cuda.local.array(NB, DT)
        block, vec = cuda.local.array((NB, NB), DT), cuda.local.array(NB, DT)
        pts = points.offsets
        e = e_lo + t
        if pattern.row_base[e] < 0:
            return  # not a row of this assembly (another rank's element, or a gap in the element set)
        nb, p = basis.nbasis[e], basis.degree[e]
        _zero_block(block, nb, nb)
        _zero_vec(vec, nb)
        _box_tables(basis.lo[e], basis.hi[e], p, box, scale)
        for s in range(element_offsets[e] - s_lo, element_offsets[e + 1] - s_lo):  # sub-simplices in order
            simplex_terms(want_block, pts[s], pts[s + 1], points, coef, (box, scale, p, nb), rec, table,
                          (leg, dleg, phi, gradT, ag, bg), block, vec)
        if want_block:
            _add_block(values.data, pattern.row_base[e] + pattern.block_start[pattern.diag_entry[e]],
                       pattern.row_width[e], block, nb, nb)
        _add_vec(values.rhs, pattern.row_start[e], vec, nb)

    @kernel
    def volume_atomic(n_s, s_lo, want_block, simplex_element, points, coef, basis, pattern, values):
        t = cuda.grid(1)
        if t >= n_s:
            return
        block, vec = cuda.local.array((NB, NB), DT), cuda.local.array(NB, DT)
        e = simplex_blocks(want_block, t, s_lo, simplex_element, points, coef, basis, pattern, block, vec)
        if e < 0:
            return
        nb = basis.nbasis[e]
        if want_block:
            _atomic_block(values.data, pattern.row_base[e] + pattern.block_start[pattern.diag_entry[e]],
                          pattern.row_width[e], block, nb, nb)
        _atomic_vec(values.rhs, pattern.row_start[e], vec, nb)

    # -- volume, a thread block per element: a thread per block entry -----------------------------------
    # A tile of the element's points at a time: TILE threads form each point's basis and trial side (as
    # the rows' simplex_terms do) into shared memory; then every thread adds the tile to its entries, in
    # point order.  The per-point arithmetic and the order of the sums are the row kernel's.
    # threads per element: the entries (NB^2 block entries, NB load rows) in whole warps, at most 256; on the
    # simulator, whose threads are Python threads, 8 (tiles of 8 points: its elements have several tiles)
    ENTRY_THREADS = 8 if config.ENABLE_CUDASIM else min(256, 32 * ((NB * NB + NB + 31) // 32))
    ENTRIES = (NB * NB + NB + ENTRY_THREADS - 1) // ENTRY_THREADS  # per thread: block entries, then load rows
    # points per tile: a thread for each, and the volume's shared arrays under 48 KB of float64
    TILE = max(1, min(32, ENTRY_THREADS, 6000 // (NB * (2 * D + 2) + 1)))
    # at most 64 entries a thread on a card (NB <= 127: 3D P up to p = 7, 2D+1 PQ to 5, 3D+1 PQ to 3); a
    # larger basis runs the ordered sums in "blocks" (these kernels are then not compiled)
    ENTRIES_FIT = NB * NB + NB <= BLOCK_ENTRIES_MAX

    @cuda.jit(device=True)
    def _block_element(n_el, e_lo, pattern):
        """The element of this thread block (one per element from ``e_lo``), or -1: past the ``n_el`` launched,
        or its rows not assembled here (the same for every thread of the block: none waits at a barrier)."""
        b = cuda.blockIdx.x
        if b >= n_el or pattern.row_base[e_lo + b] < 0:
            return -1
        return e_lo + b

    @cuda.jit(device=True)
    def _own_entries(tid, want_block, nb, acc, ent_i, ent_j):
        """Thread tid's entries of an element of nb functions, zeroed: block entry (ent_i, ent_j), load row ent_i
        (ent_j -1) or none (ent_j -2); the load alone (not ``want_block``) has the load rows only."""
        n_block = nb * nb if want_block else 0
        first = 0 if want_block else nb * nb
        for m in range(ENTRIES):
            acc[m] = 0
            idx = first + tid + m * ENTRY_THREADS
            ent_i[m], ent_j[m] = 0, -2
            if idx < n_block:
                ent_i[m] = idx // nb
                ent_j[m] = idx - ent_i[m] * nb
            elif idx >= nb * nb and idx < nb * nb + nb:
                ent_i[m], ent_j[m] = idx - nb * nb, -1

    @cuda.jit(device=True)
    def _write_entries(e, acc, ent_i, ent_j, pattern, values):
        """Add a thread's entries of element e at their CSR positions and load rows (each written by it alone)."""
        pos = pattern.row_base[e] + pattern.block_start[pattern.diag_entry[e]]
        for m in range(ENTRIES):
            i, j = ent_i[m], ent_j[m]
            if j >= 0:
                values.data[pos + i * pattern.row_width[e] + j] += acc[m]
            elif j == -1:
                values.rhs[pattern.row_start[e] + i] += acc[m]

    @cuda.jit(device=True)
    def _entry_point(q, i, j, sphi, sgrad, sag, sbg):
        """Point q's term of block entry (i, j), as ``forms.volume_point`` adds it."""
        if D == 3:
            return (sphi[q, i] * sbg[q, j] + sgrad[q, 0, i] * sag[q, 0, j] + sgrad[q, 1, i] * sag[q, 1, j]
                    + sgrad[q, 2, i] * sag[q, 2, j])
        if D == 2:
            return sphi[q, i] * sbg[q, j] + sgrad[q, 0, i] * sag[q, 0, j] + sgrad[q, 1, i] * sag[q, 1, j]
        t = sphi[q, i] * sbg[q, j]
        for k in range(D):
            t += sgrad[q, k, i] * sag[q, k, j]
        return t

    @kernel
    def volume_entries(n_el, e_lo, want_block, element_offsets, s_lo, points, coef, basis, pattern, values):
        """Element ``e_lo + blockIdx``'s volume block and load: launched with ``ENTRY_THREADS`` threads per
        block, one block per element (:func:`launch`'s ``block``)."""
        e, tid = _block_element(n_el, e_lo, pattern), cuda.threadIdx.x
        if e < 0:
            return  # the whole block: past the range, or not a row of this assembly
        table = cuda.const.array_like(TABLE)
        rec = cuda.const.array_like(REC)
        # one shared array per line: the simulator tells them apart by the line that makes them
        sphi = cuda.shared.array((TILE, NB), DT)
        sbg = cuda.shared.array((TILE, NB), DT)
        sgrad = cuda.shared.array((TILE, D, NB), DT)
        sag = cuda.shared.array((TILE, D, NB), DT)
        swf = cuda.shared.array(TILE, DT)
        box, scale = cuda.local.array((D, 2), DT), cuda.local.array((D, P1), DT)
        leg, dleg = cuda.local.array((D, P1), DT), cuda.local.array((D, P1), DT)
        phi, gradT = cuda.local.array(NB, DT), cuda.local.array((D, NB), DT)
        ag, bg = cuda.local.array((D, NB), DT), cuda.local.array(NB, DT)
        acc = cuda.local.array(ENTRIES, DT)
        ent_i, ent_j = cuda.local.array(ENTRIES, I64), cuda.local.array(ENTRIES, I64)
        X, W = points.x, points.weight
        A, B, C, F = coef
        nb, p = basis.nbasis[e], basis.degree[e]
        _own_entries(tid, want_block, nb, acc, ent_i, ent_j)
        if tid < TILE:
            _box_tables(basis.lo[e], basis.hi[e], p, box, scale)
        r0 = points.offsets[element_offsets[e] - s_lo]
        r1 = points.offsets[element_offsets[e + 1] - s_lo]
        for q0 in range(r0, r1, TILE):
            nq = min(TILE, r1 - q0)
            if tid < nq:
                r = q0 + tid
                _basis(X[r], box, scale, rec, p, table, nb, leg, dleg, phi, gradT)
                for j in range(nb):
                    sphi[tid, j] = phi[j]
                if want_block:
                    _trial(W[r], phi, gradT, nb, A[_row(r, A)], B[_row(r, B)], C[_row(r, C)], ag, bg)
                    for j in range(nb):
                        sbg[tid, j] = bg[j]
                        for k in range(D):
                            sgrad[tid, k, j] = gradT[k, j]
                            sag[tid, k, j] = ag[k, j]
                swf[tid] = W[r] * F[_row(r, F)]
            cuda.syncthreads()
            for m in range(ENTRIES):
                i, j = ent_i[m], ent_j[m]
                if j >= 0:
                    for q in range(nq):
                        acc[m] += _entry_point(q, i, j, sphi, sgrad, sag, sbg)
                elif j == -1:
                    for q in range(nq):
                        acc[m] += swf[q] * sphi[q, i]
            cuda.syncthreads()
        _write_entries(e, acc, ent_i, ent_j, pattern, values)

    @kernel
    def boundary_entries(n_el, e_lo, mode, want_block, points, coef, basis, faces, pattern, values):
        """Element ``e_lo + blockIdx``'s boundary terms of ``mode`` (as ``boundary_terms``), a thread per
        entry as in :func:`volume_entries`: its boundary faces with points in order, a tile of a face's
        points at a time; a point thread writes the point's kind (0 nothing, 1 Dirichlet, 2 Neumann,
        3 inflow: :func:`boundary_point`), basis values, fluxes and scalars to shared memory."""
        e, tid = _block_element(n_el, e_lo, pattern), cuda.threadIdx.x
        if e < 0:
            return  # the whole block: past the range, or not a row of this assembly
        table = cuda.const.array_like(TABLE)
        rec = cuda.const.array_like(REC)
        sphi = cuda.shared.array((TILE, NB), DT)
        sflux = cuda.shared.array((TILE, NB), DT)
        skind = cuda.shared.array(TILE, I64)
        sw = cuda.shared.array(TILE, DT)  # Dirichlet: w; inflow: -(b.n) w
        sg = cuda.shared.array(TILE, DT)  # Dirichlet and inflow: g_D; Neumann: w g_N
        box, scale = cuda.local.array((D, 2), DT), cuda.local.array((D, P1), DT)
        leg, dleg = cuda.local.array((D, P1), DT), cuda.local.array((D, P1), DT)
        phi, gradT, flux = cuda.local.array(NB, DT), cuda.local.array((D, NB), DT), cuda.local.array(NB, DT)
        An = cuda.local.array(D, DT)
        acc = cuda.local.array(ENTRIES, DT)
        ent_i, ent_j = cuda.local.array(ENTRIES, I64), cuda.local.array(ENTRIES, I64)
        W, GD, GN = points.weight, coef.GD, coef.GN
        nb, p = basis.nbasis[e], basis.degree[e]
        _own_entries(tid, want_block, nb, acc, ent_i, ent_j)
        if tid < TILE:
            _box_tables(basis.lo[e], basis.hi[e], p, box, scale)
        for f in range(faces.boundary_offsets[e], faces.boundary_offsets[e + 1]):  # e's boundary faces in order
            fl = faces.face_local[f]
            if fl < 0:
                continue  # no points here (another mode's face, or its terms vanish)
            n, sigma = faces.normal[f], faces.sigma[f]
            for q0 in range(points.offsets[fl], points.offsets[fl + 1], TILE):
                nq = min(TILE, points.offsets[fl + 1] - q0)
                if tid < nq:
                    r = q0 + tid
                    kind, bn = boundary_point(mode, r, points, coef, n, (box, scale, p, nb), rec, table,
                                              (An, leg, dleg, phi, gradT, flux))
                    if kind == NEUMANN:
                        sg[tid] = W[r] * GN[_row(r, GN)]
                    elif kind == DIRICHLET:
                        sw[tid], sg[tid] = W[r], GD[_row(r, GD)]
                    elif kind == INFLOW:
                        sw[tid], sg[tid] = -bn * W[r], GD[_row(r, GD)]
                    skind[tid] = kind
                    for j in range(nb):
                        sphi[tid, j] = phi[j]
                        sflux[tid, j] = flux[j]
                cuda.syncthreads()
                for m in range(ENTRIES):
                    i, j = ent_i[m], ent_j[m]
                    if j >= -1:
                        for q in range(nq):
                            kind = skind[q]
                            if kind == DIRICHLET:  # forms.dirichlet_point
                                vi = sw[q] * sphi[q, i]
                                gi = sw[q] * sflux[q, i]
                                if j >= 0:
                                    acc[m] += sigma * sphi[q, j] * vi - sflux[q, j] * vi - gi * sphi[q, j]
                                else:
                                    acc[m] += sg[q] * (sigma * vi - gi)
                            elif kind == INFLOW:  # forms.inflow_point
                                vi = sw[q] * sphi[q, i]
                                acc[m] += sphi[q, j] * vi if j >= 0 else sg[q] * vi
                            elif kind == NEUMANN and j == -1:  # forms.neumann_point
                                acc[m] += sg[q] * sphi[q, i]
                cuda.syncthreads()
        _write_entries(e, acc, ent_i, ent_j, pattern, values)

    @kernel
    def interior_entries(n_el, e_lo, points, coef, basis, faces, pattern, values):
        """Element ``e_lo + blockIdx``'s interior-face rows (as ``interior_rows``), a thread per entry as in
        :func:`volume_entries`: its interfaces in column order, each interface's faces in order, a tile of a
        face's points at a time; a point thread writes both sides' basis values and fluxes and the point's
        w and b.n to shared memory (the upwind term is formed where it is used, typed as the form types it:
        ``0.0 * bn`` is float64 in compiled code whatever the working precision).  Each thread sums its
        entries of the diagonal block over all the interfaces and of each interface's block against its
        neighbour, written at the interface's end."""
        e, tid = _block_element(n_el, e_lo, pattern), cuda.threadIdx.x
        if e < 0:
            return  # the whole block: past the range, or not a row of this assembly
        table = cuda.const.array_like(TABLE)
        rec = cuda.const.array_like(REC)
        sphiK = cuda.shared.array((TILE, NB), DT)
        sfluxK = cuda.shared.array((TILE, NB), DT)
        sphiN = cuda.shared.array((TILE, NB), DT)
        sfluxN = cuda.shared.array((TILE, NB), DT)
        sw = cuda.shared.array(TILE, DT)
        sbn = cuda.shared.array(TILE, DT)
        boxK, scaleK = cuda.local.array((D, 2), DT), cuda.local.array((D, P1), DT)
        boxN, scaleN = cuda.local.array((D, 2), DT), cuda.local.array((D, P1), DT)
        leg, dleg = cuda.local.array((D, P1), DT), cuda.local.array((D, P1), DT)
        phiK, gradK, fluxK = cuda.local.array(NB, DT), cuda.local.array((D, NB), DT), cuda.local.array(NB, DT)
        phiN, gradN, fluxN = cuda.local.array(NB, DT), cuda.local.array((D, NB), DT), cuda.local.array(NB, DT)
        n, An = cuda.local.array(D, DT), cuda.local.array(D, DT)
        accK = cuda.local.array(ENTRIES, DT)
        accN = cuda.local.array(ENTRIES, DT)
        ent_i, ent_j = cuda.local.array(ENTRIES, I64), cuda.local.array(ENTRIES, I64)
        entN_i, entN_j = cuda.local.array(ENTRIES, I64), cuda.local.array(ENTRIES, I64)
        W, pts = points.weight, points.offsets
        lo, hi, degree, nbasis = basis.lo, basis.hi, basis.degree, basis.nbasis
        row_base, row_width, block_start = pattern.row_base, pattern.row_width, pattern.block_start
        nbK, pK = nbasis[e], degree[e]
        _own_entries(tid, True, nbK, accK, ent_i, ent_j)  # the diagonal block's (its load rows stay unused)
        if tid < TILE:
            _box_tables(lo[e], hi[e], pK, boxK, scaleK)
        for k in range(pattern.adj_offsets[e], pattern.adj_offsets[e + 1]):  # e's neighbours in column order
            i_f = pattern.adj_interface[k]
            if i_f < 0:
                continue  # the diagonal entry
            c = pattern.adj_col[k]
            nbN, pN = nbasis[c], degree[c]
            for m in range(ENTRIES):  # this thread's entries of the block against c
                accN[m] = 0
                idx = tid + m * ENTRY_THREADS
                entN_i[m], entN_j[m] = 0, -1
                if idx < nbK * nbN:
                    entN_i[m] = idx // nbN
                    entN_j[m] = idx - entN_i[m] * nbN
            if tid < TILE:
                _box_tables(lo[c], hi[c], pN, boxN, scaleN)
            sign = 1.0 if e < c else -1.0  # stored normals point from the lower element to the higher
            for f in range(faces.interface_offsets[i_f], faces.interface_offsets[i_f + 1]):  # in order
                fl = faces.face_local[f]
                sigma = faces.sigma[f]
                for q0 in range(pts[fl], pts[fl + 1], TILE):
                    nq = min(TILE, pts[fl + 1] - q0)
                    if tid < nq:  # one point, as interior_terms forms it
                        r = q0 + tid
                        for m in range(D):
                            n[m] = sign * faces.normal[f, m]
                        bn = interior_sides(r, points, coef, n, (boxK, scaleK, pK, nbK), (boxN, scaleN, pN, nbN),
                                            rec, table, (An, leg, dleg, phiK, gradK, fluxK, phiN, gradN, fluxN))
                        sw[tid], sbn[tid] = W[r], bn
                        for j in range(nbK):
                            sphiK[tid, j] = phiK[j]
                            sfluxK[tid, j] = fluxK[j]
                        for j in range(nbN):
                            sphiN[tid, j] = phiN[j]
                            sfluxN[tid, j] = fluxN[j]
                    cuda.syncthreads()
                    for m in range(ENTRIES):  # forms.interior_face_point, entry by entry
                        i, j = ent_i[m], ent_j[m]
                        if j >= 0:
                            for q in range(nq):
                                bn = sbn[q]
                                up = -bn if bn < 0 else 0.0 * bn
                                vi = sw[q] * sphiK[q, i]
                                gi = 0.5 * sw[q] * sfluxK[q, i]
                                accK[m] += (sigma + up) * sphiK[q, j] * vi - 0.5 * sfluxK[q, j] * vi - gi * sphiK[q, j]
                        i, j = entN_i[m], entN_j[m]
                        if j >= 0:
                            for q in range(nq):
                                bn = sbn[q]
                                up = -bn if bn < 0 else 0.0 * bn
                                vi = sw[q] * sphiK[q, i]
                                gi = 0.5 * sw[q] * sfluxK[q, i]
                                accN[m] += -(sigma + up) * sphiN[q, j] * vi - 0.5 * sfluxN[q, j] * vi + gi * sphiN[q, j]
                    cuda.syncthreads()
            for m in range(ENTRIES):
                i, j = entN_i[m], entN_j[m]
                if j >= 0:
                    values.data[row_base[e] + block_start[k] + i * row_width[e] + j] += accN[m]
        pos = row_base[e] + block_start[pattern.diag_entry[e]]
        for m in range(ENTRIES):
            i, j = ent_i[m], ent_j[m]
            if j >= 0:
                values.data[pos + i * row_width[e] + j] += accK[m]

    # -- interior faces ---------------------------------------------------------

    @kernel
    def interior_rows(n_el, e_lo, points, coef, basis, faces, pattern, values):
        t = cuda.grid(1)
        if t >= n_el:
            return
        table = cuda.const.array_like(TABLE)
        rec = cuda.const.array_like(REC)
        boxK, scaleK = cuda.local.array((D, 2), DT), cuda.local.array((D, P1), DT)
        boxN, scaleN = cuda.local.array((D, 2), DT), cuda.local.array((D, P1), DT)
        leg, dleg = cuda.local.array((D, P1), DT), cuda.local.array((D, P1), DT)
        phiK, gradK, fluxK = cuda.local.array(NB, DT), cuda.local.array((D, NB), DT), cuda.local.array(NB, DT)
        phiN, gradN, fluxN = cuda.local.array(NB, DT), cuda.local.array((D, NB), DT), cuda.local.array(NB, DT)
        n, An = cuda.local.array(D, DT), cuda.local.array(D, DT)
        bKK, bKN = cuda.local.array((NB, NB), DT), cuda.local.array((NB, NB), DT)
        pts = points.offsets
        lo, hi, degree, nbasis = basis.lo, basis.hi, basis.degree, basis.nbasis
        row_base, row_width, block_start = pattern.row_base, pattern.row_width, pattern.block_start
        e = e_lo + t
        if row_base[e] < 0:
            return  # not a row of this assembly
        nbK, pK = nbasis[e], degree[e]
        _zero_block(bKK, nbK, nbK)
        _box_tables(lo[e], hi[e], pK, boxK, scaleK)
        for k in range(pattern.adj_offsets[e], pattern.adj_offsets[e + 1]):  # e's neighbours in column order
            i_f = pattern.adj_interface[k]
            if i_f < 0:
                continue  # the diagonal entry
            c = pattern.adj_col[k]
            nbN, pN = nbasis[c], degree[c]
            _zero_block(bKN, nbK, nbN)
            _box_tables(lo[c], hi[c], pN, boxN, scaleN)
            sign = 1.0 if e < c else -1.0  # stored normals point from the lower element to the higher
            for f in range(faces.interface_offsets[i_f], faces.interface_offsets[i_f + 1]):  # in order
                for m in range(D):
                    n[m] = sign * faces.normal[f, m]
                fl = faces.face_local[f]
                interior_terms(pts[fl], pts[fl + 1], points, coef, n, faces.sigma[f], (boxK, scaleK, pK, nbK),
                               (boxN, scaleN, pN, nbN), rec, table,
                               (An, leg, dleg, phiK, gradK, fluxK, phiN, gradN, fluxN), bKK, bKN)
            _add_block(values.data, row_base[e] + block_start[k], row_width[e], bKN, nbK, nbN)
        _add_block(values.data, row_base[e] + block_start[pattern.diag_entry[e]], row_width[e], bKK, nbK, nbK)

    @kernel
    def interior_atomic(n_sides, f_lo, side_entry, points, coef, basis, faces, pattern, values):
        t = cuda.grid(1)
        if t >= n_sides:
            return
        row_base, row_width, block_start = pattern.row_base, pattern.row_width, pattern.block_start
        fl, side = t // 2, t % 2  # thread 2 fl + side: the rows of face fl's element on that side
        f = f_lo + fl
        e, c = faces.face_elements[f, side], faces.face_elements[f, 1 - side]
        if row_base[e] < 0:
            return  # the rows of this side are not assembled here
        bKK, bKN = cuda.local.array((NB, NB), DT), cuda.local.array((NB, NB), DT)
        interior_side_blocks(f, side, points.offsets[fl], points.offsets[fl + 1], points, coef, basis, faces, bKK,
                             bKN)
        nbK, nbN = basis.nbasis[e], basis.nbasis[c]
        _atomic_block(values.data, row_base[e] + block_start[pattern.diag_entry[e]], row_width[e], bKK, nbK, nbK)
        _atomic_block(values.data, row_base[e] + block_start[side_entry[fl, side]], row_width[e], bKN, nbK, nbN)

    # -- boundary faces -----------------------------------------------------------

    @kernel
    def boundary_rows(n_el, e_lo, mode, want_block, points, coef, basis, faces, pattern, values):
        t = cuda.grid(1)
        if t >= n_el:
            return
        e = e_lo + t
        boundary_offsets = faces.boundary_offsets
        if boundary_offsets[e] == boundary_offsets[e + 1] or pattern.row_base[e] < 0:
            return  # no boundary face, or not a row of this assembly
        table = cuda.const.array_like(TABLE)
        rec = cuda.const.array_like(REC)
        box, scale = cuda.local.array((D, 2), DT), cuda.local.array((D, P1), DT)
        leg, dleg = cuda.local.array((D, P1), DT), cuda.local.array((D, P1), DT)
        phi, gradT, flux = cuda.local.array(NB, DT), cuda.local.array((D, NB), DT), cuda.local.array(NB, DT)
        An = cuda.local.array(D, DT)
        block, vec = cuda.local.array((NB, NB), DT), cuda.local.array(NB, DT)
        pts = points.offsets
        nb, p = basis.nbasis[e], basis.degree[e]
        _zero_block(block, nb, nb)
        _zero_vec(vec, nb)
        _box_tables(basis.lo[e], basis.hi[e], p, box, scale)
        for f in range(boundary_offsets[e], boundary_offsets[e + 1]):  # e's boundary faces in order
            fl = faces.face_local[f]
            if fl < 0:
                continue  # a face whose terms vanish (or, for the load alone, left out): no points
            boundary_terms(mode, pts[fl], pts[fl + 1], points, coef, faces.normal[f], faces.sigma[f],
                           (box, scale, p, nb), rec, table, (An, leg, dleg, phi, gradT, flux), block, vec)
        if want_block:
            _add_block(values.data, pattern.row_base[e] + pattern.block_start[pattern.diag_entry[e]],
                       pattern.row_width[e], block, nb, nb)
        _add_vec(values.rhs, pattern.row_start[e], vec, nb)

    @kernel
    def boundary_atomic(n_f, f_lo, mode, want_block, points, coef, basis, faces, pattern, values):
        t = cuda.grid(1)
        if t >= n_f:
            return
        block, vec = cuda.local.array((NB, NB), DT), cuda.local.array(NB, DT)
        if boundary_face_blocks(mode, f_lo + t, points, coef, basis, faces, pattern, block, vec) < 0:
            return
        e = faces.face_elements[f_lo + t, 0]
        nb = basis.nbasis[e]
        if want_block:
            _atomic_block(values.data, pattern.row_base[e] + pattern.block_start[pattern.diag_entry[e]],
                          pattern.row_width[e], block, nb, nb)
        _atomic_vec(values.rhs, pattern.row_start[e], vec, nb)

    return SimpleNamespace(volume_rows=volume_rows, volume_atomic=volume_atomic, interior_rows=interior_rows,
                           interior_atomic=interior_atomic, boundary_rows=boundary_rows,
                           boundary_atomic=boundary_atomic, simplex_blocks=simplex_blocks,
                           interior_side_blocks=interior_side_blocks, boundary_face_blocks=boundary_face_blocks,
                           volume_entries=volume_entries, boundary_entries=boundary_entries,
                           interior_entries=interior_entries,
                           ENTRY_THREADS=ENTRY_THREADS, ENTRIES_FIT=ENTRIES_FIT)


# ---------------------------------------------------------------------------
# the sparsity pattern's column indices (``device_pattern.py`` builds the rest as array code)


@kernel
def pattern_indices(n_rows, row_element, column_first, element_dofs, adj_offsets, adj_col, block_start, row_base,
                    row_start, row_width, indices):
    """One thread per assembled row: its columns, block by block (every row of an element has the same)."""
    r = cuda.grid(1)
    if r >= n_rows:
        return
    e = row_element[r]
    pos = row_base[e] + (r - row_start[e]) * row_width[e]
    for k in range(adj_offsets[e], adj_offsets[e + 1]):
        c = adj_col[k]
        start, at = column_first[c], pos + block_start[k]
        for j in range(element_dofs[c]):
            indices[at + j] = start + j


def fill_pattern_indices(row_element, *args) -> None:
    """Launch :func:`pattern_indices` on the rows (the arguments as its, after ``n_rows``)."""
    launch(pattern_indices, len(row_element), row_element, *args)


def warm_pattern_indices(xp) -> None:
    """Compile :func:`pattern_indices` (one launch whose thread returns), so that its JIT is not timed as indices."""
    z = xp.zeros(1, dtype=np.int64)
    warm(pattern_indices, *(z,) * 10)
