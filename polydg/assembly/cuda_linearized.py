"""The linearised forms on a GPU: the executor of ``linearized_passes.py`` with numba-cuda kernels.

The same plan and passes as on the CPU; here the points, the iterate at the points, the pointwise M
and rho (array code against the backend's ``xp``) and the CSR values stay on the device.  Kernels are
one thread per element (rows, in a fixed order: bitwise repeatable), compiled per (dimension, largest
degree, basis) from the CPU's per-point source (the basis of ``basis.py``): at each point a thread
forms Y = M t(phi_j) for its trial functions and adds w t(phi_i) . Y to its block.  Double precision
only (a Newton iteration in single precision stalls at its round-off).  This module imports
``numba.cuda``: only the device path imports it.
"""

from __future__ import annotations

from functools import lru_cache
from types import SimpleNamespace

import numpy as np
from numba import cuda, from_dtype

from .. import backend as bk
from ..backend import contiguous, numpy_aliases_for_numba_cuda
from ..basis import basis_indices, element_box_tables, eval_basis_point_scaled, legendre_recurrence
from . import linearization as forms
from .result import csr_as_given
from .cuda_kernels import ViewCache, compile_once, for_device, kernel, launch
from .linearization import PointForms
from .linearized_passes import HostExecutor
from .plan import AssemblyPlan
from .cuda_points import device_simplex_points
from .points import PointBatch
from .timing import Timer

numpy_aliases_for_numba_cuda()  # before numba-cuda's CUDA target first loads (at the first compilation)

_box_tables = cuda.jit(device=True)(element_box_tables.py_func)
_basis = cuda.jit(device=True)(eval_basis_point_scaled.py_func)


_row = cuda.jit(device=True)(forms._row.py_func)
_entry = cuda.jit(device=True)(forms._entry.py_func)
_products = for_device(forms._normal_products, _row=_row, _entry=_entry)
_volume_point = for_device(forms.volume_point, _row=_row, _entry=_entry)
_interior_point = for_device(forms.interior_point, _row=_row, _entry=_entry, _normal_products=_products)
_boundary_point = for_device(forms.boundary_point, _row=_row, _entry=_entry, _normal_products=_products)


@cuda.jit(device=True)
def _trace(phi, gradT, a, i):
    """t_a(phi_i): the value (a = 0) or the derivative d/dx_{a-1}."""
    return phi[i] if a == 0 else gradT[a - 1, i]


@cuda.jit(device=True)
def _pair(w, M, phi, gradT, nb, phiN, gradN, nbN, Y, block):
    """block[i, j] += w t(phi_i) . M t(phiN_j): test traces (phi, gradT), trial traces (phiN, gradN)."""
    D = M.shape[0]
    for a in range(D):
        for j in range(nbN):
            s = 0.0 * w
            for b in range(D):
                s += M[a, b] * _trace(phiN, gradN, b, j)
            Y[a, j] = w * s
    for i in range(nb):
        for j in range(nbN):
            s = 0.0 * w
            for a in range(D):
                s += _trace(phi, gradT, a, i) * Y[a, j]
            block[i, j] += s


@cuda.jit(device=True)
def _load(w, rho, phi, gradT, nb, vec):
    D = rho.shape[0]
    for i in range(nb):
        s = 0.0 * w
        for a in range(D):
            s += _trace(phi, gradT, a, i) * rho[a]
        vec[i] += w * s


@cuda.jit(device=True)
def _zero(block, nr, nc):
    for i in range(nr):
        for j in range(nc):
            block[i, j] = 0


@cuda.jit(device=True)
def _add_block(data, pos, width, block, nr, nc):
    for i in range(nr):
        for j in range(nc):
            data[pos + i * width + j] += block[i, j]


@lru_cache(maxsize=None)
def linearized_gpu_kernels(dim: int, pmax: int, basis: str = "P") -> SimpleNamespace:
    """The field and row kernels of a ``dim``-dimensional space of degrees <= ``pmax`` (float64)."""
    D, DD, P1 = int(dim), int(dim) + 1, int(pmax) + 1
    TABLE = np.ascontiguousarray(basis_indices(int(pmax), D, basis), dtype=np.int64)
    REC = legendre_recurrence(int(pmax), np.float64)
    NB = len(TABLE)
    DT = from_dtype(np.dtype(np.float64))

    @kernel
    def field(n_t, entity_element, offsets, X, coef, dof_offsets, lo, hi, degree, nbasis, values, gradients):
        t = cuda.grid(1)
        if t >= n_t:
            return
        table = cuda.const.array_like(TABLE)
        rec = cuda.const.array_like(REC)
        box, scale = cuda.local.array((D, 2), DT), cuda.local.array((D, P1), DT)
        leg, dleg = cuda.local.array((D, P1), DT), cuda.local.array((D, P1), DT)
        phi, gradT = cuda.local.array(NB, DT), cuda.local.array((D, NB), DT)
        e = entity_element[t]
        if e < 0:
            for r in range(offsets[t], offsets[t + 1]):
                values[r] = 0.0
                for k in range(D):
                    gradients[r, k] = 0.0
            return
        p, nb, first = degree[e], nbasis[e], dof_offsets[e]
        _box_tables(lo[e], hi[e], p, box, scale)
        for r in range(offsets[t], offsets[t + 1]):
            _basis(X[r], box, scale, rec, p, table, nb, leg, dleg, phi, gradT)
            u = 0.0
            for i in range(nb):
                u += coef[first + i] * phi[i]
            values[r] = u
            for k in range(D):
                g = 0.0
                for i in range(nb):
                    g += coef[first + i] * gradT[k, i]
                gradients[r, k] = g

    @kernel
    def volume_rows(n_el, e_lo, element_offsets, s_lo, pts, X, W, M, RHO, lo, hi, degree, nbasis, row_base, row_width,
                    block_start, diag_entry, row_start, want, data, rhs):
        t = cuda.grid(1)
        if t >= n_el:
            return
        table = cuda.const.array_like(TABLE)
        rec = cuda.const.array_like(REC)
        box, scale = cuda.local.array((D, 2), DT), cuda.local.array((D, P1), DT)
        leg, dleg = cuda.local.array((D, P1), DT), cuda.local.array((D, P1), DT)
        phi, gradT = cuda.local.array(NB, DT), cuda.local.array((D, NB), DT)
        Y, block, vec = cuda.local.array((DD, NB), DT), cuda.local.array((NB, NB), DT), cuda.local.array(NB, DT)
        e = e_lo + t
        if row_base[e] < 0:
            return
        nb, p = nbasis[e], degree[e]
        _zero(block, nb, nb)
        for i in range(nb):
            vec[i] = 0
        _box_tables(lo[e], hi[e], p, box, scale)
        for r in range(pts[element_offsets[e] - s_lo], pts[element_offsets[e + 1] - s_lo]):
            _basis(X[r], box, scale, rec, p, table, nb, leg, dleg, phi, gradT)
            _load(W[r], RHO[r], phi, gradT, nb, vec)
            if want:
                _pair(W[r], M[r], phi, gradT, nb, phi, gradT, nb, Y, block)
        if want:
            _add_block(data, row_base[e] + block_start[diag_entry[e]], row_width[e], block, nb, nb)
        for i in range(nb):
            rhs[row_start[e] + i] += vec[i]

    @kernel
    def interior_rows(n_el, e_lo, adj_offsets, adj_col, adj_interface, interface_offsets, face_local, pts, X, W, M,
                      RHO, lo, hi, degree, nbasis, row_base, row_width, block_start, diag_entry, row_start, want, data,
                      rhs):
        t = cuda.grid(1)
        if t >= n_el:
            return
        table = cuda.const.array_like(TABLE)
        rec = cuda.const.array_like(REC)
        box, scale = cuda.local.array((D, 2), DT), cuda.local.array((D, P1), DT)
        boxN, scaleN = cuda.local.array((D, 2), DT), cuda.local.array((D, P1), DT)
        leg, dleg = cuda.local.array((D, P1), DT), cuda.local.array((D, P1), DT)
        phi, gradT = cuda.local.array(NB, DT), cuda.local.array((D, NB), DT)
        phiN, gradN = cuda.local.array(NB, DT), cuda.local.array((D, NB), DT)
        Y, vec = cuda.local.array((DD, NB), DT), cuda.local.array(NB, DT)
        bKK, bKN = cuda.local.array((NB, NB), DT), cuda.local.array((NB, NB), DT)
        e = e_lo + t
        if row_base[e] < 0:
            return
        nbK, pK = nbasis[e], degree[e]
        _zero(bKK, nbK, nbK)
        for i in range(nbK):
            vec[i] = 0
        _box_tables(lo[e], hi[e], pK, box, scale)
        for k in range(adj_offsets[e], adj_offsets[e + 1]):
            f_t = adj_interface[k]
            if f_t < 0:
                continue
            c = adj_col[k]
            s = 0 if e < c else 1
            nbN, pN = nbasis[c], degree[c]
            _box_tables(lo[c], hi[c], pN, boxN, scaleN)
            _zero(bKN, nbK, nbN)
            for f in range(interface_offsets[f_t], interface_offsets[f_t + 1]):
                fl = face_local[f]
                for r in range(pts[fl], pts[fl + 1]):
                    _basis(X[r], box, scale, rec, pK, table, nbK, leg, dleg, phi, gradT)
                    _load(W[r], RHO[r, s], phi, gradT, nbK, vec)
                    if want:
                        _basis(X[r], boxN, scaleN, rec, pN, table, nbN, leg, dleg, phiN, gradN)
                        _pair(W[r], M[r, s, s], phi, gradT, nbK, phi, gradT, nbK, Y, bKK)
                        _pair(W[r], M[r, s, 1 - s], phi, gradT, nbK, phiN, gradN, nbN, Y, bKN)
            if want:
                _add_block(data, row_base[e] + block_start[k], row_width[e], bKN, nbK, nbN)
        if want:
            _add_block(data, row_base[e] + block_start[diag_entry[e]], row_width[e], bKK, nbK, nbK)
        for i in range(nbK):
            rhs[row_start[e] + i] += vec[i]

    @kernel
    def boundary_rows(n_el, e_lo, boundary_offsets, face_local, pts, X, W, M, RHO, lo, hi, degree, nbasis, row_base,
                      row_width, block_start, diag_entry, row_start, want, data, rhs):
        t = cuda.grid(1)
        if t >= n_el:
            return
        table = cuda.const.array_like(TABLE)
        rec = cuda.const.array_like(REC)
        box, scale = cuda.local.array((D, 2), DT), cuda.local.array((D, P1), DT)
        leg, dleg = cuda.local.array((D, P1), DT), cuda.local.array((D, P1), DT)
        phi, gradT = cuda.local.array(NB, DT), cuda.local.array((D, NB), DT)
        Y, block, vec = cuda.local.array((DD, NB), DT), cuda.local.array((NB, NB), DT), cuda.local.array(NB, DT)
        e = e_lo + t
        f0, f1 = boundary_offsets[e], boundary_offsets[e + 1]
        if f0 == f1 or row_base[e] < 0:
            return
        nb, p = nbasis[e], degree[e]
        _zero(block, nb, nb)
        for i in range(nb):
            vec[i] = 0
        _box_tables(lo[e], hi[e], p, box, scale)
        for f in range(f0, f1):
            fl = face_local[f]
            for r in range(pts[fl], pts[fl + 1]):
                _basis(X[r], box, scale, rec, p, table, nb, leg, dleg, phi, gradT)
                _load(W[r], RHO[r], phi, gradT, nb, vec)
                if want:
                    _pair(W[r], M[r], phi, gradT, nb, phi, gradT, nb, Y, block)
        if want:
            _add_block(data, row_base[e] + block_start[diag_entry[e]], row_width[e], block, nb, nb)
        for i in range(nb):
            rhs[row_start[e] + i] += vec[i]

    # -- the forms at each point (linearization.py's per-point functions)

    @kernel
    def volume_forms(n, A, dA, dag, b, c, dc, f, df, u, g, want, M, rho, a):
        r = cuda.grid(1)
        if r < n:
            a[r] = _volume_point(r, A, dA, dag, b, c, dc, f, df, u, g, want, M, rho)

    @kernel
    def interior_forms(n, A0, dA0, dag0, A1, dA1, dag1, b, u0, g0, u1, g1, normal, sigma, want, M, rho):
        r = cuda.grid(1)
        if r < n:
            An0, dAn0 = cuda.local.array(D, DT), cuda.local.array(D, DT)
            An1, dAn1 = cuda.local.array(D, DT), cuda.local.array(D, DT)
            _interior_point(r, A0, dA0, dag0, A1, dA1, dag1, b, u0, g0, u1, g1, normal, sigma, want, M, rho,
                            An0, dAn0, An1, dAn1)

    @kernel
    def boundary_forms(n, A, dA, dag, b, u, g, normal, sigma, gD, gN, neu, want, M, rho):
        r = cuda.grid(1)
        if r < n:
            An, dAn = cuda.local.array(D, DT), cuda.local.array(D, DT)
            _boundary_point(r, A, dA, dag, b, u, g, normal, sigma, gD, gN, neu, want, M, rho, An, dAn)

    return SimpleNamespace(field=field, volume_rows=volume_rows, interior_rows=interior_rows,
                           boundary_rows=boundary_rows, volume=volume_forms, interior=interior_forms,
                           boundary=boundary_forms)


class DeviceExecutor:
    """The passes' means on a device (``backend`` "cupy", or the simulator's "cudasim"): the mesh's and the
    plan's arrays copied once, the points, iterate, forms and values of each linearisation in the backend's
    arrays."""

    def __init__(self, plan: AssemblyPlan, backend: str):
        self.plan, self.backend = plan, backend
        xp = self.xp = bk.array_module(backend)
        space, mesh, pattern = plan.space, plan.mesh, plan.pattern
        self.kernels = linearized_gpu_kernels(mesh.dim, int(space.max_degree), getattr(space, "basis", "P"))
        dev = self.dev
        self.points, self.simplices, self.volumes = dev(mesh.points), dev(mesh.simplices), dev(mesh.simplex_volume)
        self.face_vertices, self.face_measure = dev(mesh.face_vertices), dev(mesh.face_measure)
        self.lo, self.hi = dev(np.asarray(plan.lo, np.float64)), dev(np.asarray(plan.hi, np.float64))
        self.degree, self.nbasis, self.dof_offsets = dev(space.degree), dev(space.element_dofs), dev(space.dof_offsets)
        self.element_offsets, self.boundary_offsets = dev(mesh.element_offsets), dev(plan.boundary_offsets)
        self.interface_offsets, self.adj_interface = dev(mesh.interface_offsets), dev(plan.adj_interface)
        self.csr = tuple(dev(a) for a in (pattern.row_base, pattern.row_width, pattern.block_start, pattern.diag_entry,
                                          pattern.row_start))
        self.adj = dev(pattern.adj_offsets), dev(pattern.adj_col)
        self.face_local = xp.full(mesh.n_faces, -1, dtype=np.int64)
        self.chunks = plan.chunks  # the device's memory holds a plan's chunk of the linearisation's arrays
        self.workspace = self.x_only = None  # the forms' outputs are the backend's new arrays, at every iterate
        self._warm: set[str] = set()
        self.streamed = not bk.on_default_stream(backend)  # the caller's own stream: each launch waited for
        self.views = self._tables()

    def begin(self, u, want_jacobian: bool, timer: Timer) -> None:
        """Start a linearisation at the iterate ``u`` (copied to the device): new values (zeroed) and load."""
        xp, pattern = self.xp, self.plan.pattern
        self.timer, self.want = timer, want_jacobian
        self.u = contiguous(xp, np.asarray(bk.to_host(u)), np.float64)
        self.data = xp.zeros(pattern.nnz if want_jacobian else 0, dtype=np.float64)
        self.rhs = xp.zeros(pattern.n_rows, dtype=np.float64)
        self.views = self._tables(self.u, self.data, self.rhs)  # a new cache: the last iterate's arrays go

    def _tables(self, *more) -> ViewCache:
        """Launch views of what every launch reads: the plan's tables, and ``more`` (an iterate's arrays)."""
        return ViewCache(self.points, self.simplices, self.volumes, self.face_vertices, self.face_measure, self.lo,
                         self.hi, self.degree, self.nbasis, self.dof_offsets, self.element_offsets,
                         self.boundary_offsets, self.interface_offsets, self.adj_interface, *self.csr, *self.adj,
                         self.face_local, *more)

    def dev(self, a):
        if bk.array_namespace(a) is not np:
            return a
        a = np.ascontiguousarray(a)
        return contiguous(self.xp, a.astype(np.int64, copy=False) if a.dtype.kind in "iub" else a)

    def synchronize(self) -> None:
        if self.backend == "cupy":
            cuda.synchronize()

    def run_forms(self, kind: str, n: int, *args) -> None:
        """The point loop of ``kind`` (``linearization.py``'s forms) as a kernel, one thread per point."""
        self._run(kind, n, *args)

    def _run(self, name: str, n: int, *args) -> None:
        self._launch(getattr(self.kernels, name), name, n, *args)

    def _launch(self, kernel, name: str, n: int, *args) -> None:
        args = self.views(args)  # numba-cuda's own arrays: typed faster, no stream waited for
        compile_once(kernel, name, args, self._warm, self.timer, self.synchronize)  # timed apart, as jit
        launch(kernel, n, *args)
        if self.streamed:  # the array code that reads its output runs on another stream
            self.synchronize()

    # -- points and the iterate there

    def simplex_points(self, s_lo: int, s_hi: int, q) -> PointBatch:
        return device_simplex_points(self.xp, self._launch, self.points, self.simplices, self.volumes, s_hi - s_lo,
                                     q, base=s_lo)

    def face_points(self, faces: np.ndarray) -> PointBatch:
        return device_simplex_points(self.xp, self._launch, self.points, self.face_vertices, self.face_measure,
                                     len(faces), self.plan.face_degrees(faces), members=self.dev(faces))

    def iterate(self, entity_element: np.ndarray, batch: PointBatch, side: int = 0):
        xp = self.xp
        n, d = int(batch.x.shape[0]), int(batch.x.shape[1])
        values, gradients = xp.empty(n, dtype=np.float64), xp.empty((n, d), dtype=np.float64)
        self._run("field", len(entity_element), self.dev(entity_element), batch.device_offsets, batch.x, self.u,
                  self.dof_offsets, self.lo, self.hi, self.degree, self.nbasis, values, gradients)
        return values, gradients

    #: the points' location (data per cell or element), on the host: the data is looked up there
    where = HostExecutor.where

    def per_point(self, values: np.ndarray, batch: PointBatch, name: str = ""):
        if batch.points_each:  # one rule: each entity's value for its points_each points in turn
            return self.xp.repeat(contiguous(self.xp, np.asarray(values)), batch.points_each, axis=0)
        counts = np.diff(batch.offsets)
        owner = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
        return contiguous(self.xp, np.asarray(values))[contiguous(self.xp, owner)]

    def gather_bound(self, a, batch: PointBatch, elements: np.ndarray, a_bound: np.ndarray) -> None:
        a = bk.to_host(a)
        if len(a):
            np.maximum.at(a_bound, elements, np.maximum.reduceat(a, batch.offsets[:-1]))

    # -- the kernels

    def _arrays(self, forms: PointForms):
        xp = self.xp
        rho = contiguous(xp, forms.rho)
        if forms.M is None:
            D = int(rho.shape[-1])
            return xp.zeros((1, D, D) if rho.ndim == 2 else (1, 2, 2, D, D)), rho
        return contiguous(xp, forms.M), rho

    def _tail(self):
        return (self.lo, self.hi, self.degree, self.nbasis, *self.csr, self.want, self.data, self.rhs)

    def volume_rows(self, e_lo: int, e_hi: int, s_lo: int, batch: PointBatch, forms: PointForms) -> None:
        M, rho = self._arrays(forms)
        self._run("volume_rows", e_hi - e_lo, e_lo, self.element_offsets, s_lo, batch.device_offsets, batch.x,
                  batch.weight, M, rho, *self._tail())

    def interior_rows(self, e_lo: int, e_hi: int, batch: PointBatch, forms: PointForms) -> None:
        M, rho = self._arrays(forms)
        self._run("interior_rows", e_hi - e_lo, e_lo, *self.adj, self.adj_interface, self.interface_offsets,
                  self.face_local, batch.device_offsets, batch.x, batch.weight, M, rho, *self._tail())

    def boundary_rows(self, e_lo: int, e_hi: int, batch: PointBatch, forms: PointForms) -> None:
        M, rho = self._arrays(forms)
        self._run("boundary_rows", e_hi - e_lo, e_lo, self.boundary_offsets, self.face_local,
                  batch.device_offsets, batch.x, batch.weight, M, rho, *self._tail())

    def mark_faces(self, faces: np.ndarray, on: bool) -> None:
        f = self.dev(faces)
        self.face_local[f] = self.xp.arange(len(faces), dtype=np.int64) if on else -1

    def results(self):
        """The Jacobian and residual copied to the host (SciPy CSR, NumPy): the Newton step's solve runs there."""
        self.synchronize()
        jacobian = None
        if self.want:
            pattern = self.plan.pattern
            jacobian = csr_as_given(bk.to_host(self.data), bk.to_host(pattern.indices), bk.to_host(pattern.indptr),
                                    (pattern.n_rows, pattern.n_cols))
        return jacobian, bk.to_host(self.rhs)
