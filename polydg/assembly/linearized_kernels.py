"""Compiled row kernels of a linearised form: the Jacobian and residual of ``linearization.py`` (CPU).

At each quadrature point the Jacobian pairs the test and trial traces t = (phi, d_1 phi, ..., d_d phi)
through a (1 + d) x (1 + d) matrix M and the residual the test traces with a vector rho, both given
per point.  Element e's rows gather their points in batches of ``BATCH``:

    T[i, (q, a)] = t_a(phi_i)(x_q),   U[j, (q, a)] = w_q sum_b M_q[a, b] t_b(phi_j)(x_q),
    block[i, j] += sum over (q, a) of T[i, (q, a)] U[j, (q, a)]      (batched.contract)

and each block is written once at its CSR position, as the linear row kernels do: no races, the same
values for any chunking and thread count.  An interior face adds, for e on side s and its neighbour
on side 1 - s, M[s, s] to the diagonal block and M[s, 1 - s] to block (e, neighbour).

At a face point M's lower-right d x d blocks vanish unless A depends on grad u (``bordered``): the
interior kernel then forms U from M's first row and column alone.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ..basis import element_box_tables, eval_basis_point_scaled
from ..threads import range_kernel
from .batched import contract

#: points per batch of a row's contraction
BATCH = 16


@njit(cache=True, inline="always")
def _add_block(data, base, width, start, block, nr, nc):  # pragma: no cover - compiled
    for i in range(nr):
        pos = base + i * width + start
        for j in range(nc):
            data[pos + j] += block[i, j]


@njit(cache=True, inline="always")
def _pmax(table):  # pragma: no cover - compiled
    p = 0
    for k in range(table.shape[1]):
        p = max(p, table[table.shape[0] - 1, k])
    return p


@njit(cache=True, inline="always")
def _traces(x, box, scale, rec, p, table, nb, leg, dleg, phi, gradT, T, c):  # pragma: no cover - compiled
    """T[:, c:c + 1 + d] = the basis' values and gradients at x."""
    d = x.shape[0]
    eval_basis_point_scaled(x, box, scale, rec, p, table, nb, leg, dleg, phi, gradT)
    for i in range(nb):
        T[i, c] = phi[i]
        for k in range(d):
            T[i, c + 1 + k] = gradT[k, i]


@njit(cache=True, inline="always")
def _trial(w, M, T, c, nb, U):  # pragma: no cover - compiled
    """U[:, c:c + D] = w M t(phi_j) for the traces T[:, c:c + D] (M is D x D)."""
    D = M.shape[0]
    for j in range(nb):
        for a in range(D):
            s = 0.0 * w
            for b in range(D):
                s += M[a, b] * T[j, c + b]
            U[j, c + a] = w * s


@njit(cache=True, inline="always")
def _trial_bordered(w, M, T, c, nb, U):  # pragma: no cover - compiled
    """:func:`_trial` for an M whose lower-right d x d block is zero: row 0 in full, row a > 0 M[a, 0] t_0."""
    D = M.shape[0]
    for j in range(nb):
        s = 0.0 * w
        for b in range(D):
            s += M[0, b] * T[j, c + b]
        U[j, c] = w * s
        t0 = T[j, c]
        for a in range(1, D):
            U[j, c + a] = w * (M[a, 0] * t0)


@njit(cache=True, inline="always")
def _test(w, rho, T, c, nb, vec):  # pragma: no cover - compiled
    """vec[i] += w t(phi_i) . rho."""
    D = rho.shape[0]
    for i in range(nb):
        s = 0.0 * w
        for a in range(D):
            s += T[i, c + a] * rho[a]
        vec[i] += w * s


@njit(cache=True, inline="always")
def _scratch(d, nbmax, pmax, like):  # pragma: no cover - compiled
    dt = like.dtype
    D = d + 1
    return (np.empty((d, pmax + 1), dt), np.empty((d, pmax + 1), dt), np.empty(nbmax, dt), np.empty((d, nbmax), dt),
            np.empty((d, 2), dt), np.empty((d, pmax + 1), dt), np.empty((d, 2), dt), np.empty((d, pmax + 1), dt),
            np.zeros((nbmax, D * BATCH), dt), np.zeros((nbmax, D * BATCH), dt), np.zeros((nbmax, D * BATCH), dt),
            np.empty((nbmax, nbmax), dt), np.empty((nbmax, nbmax), dt), np.empty(nbmax, dt))


@range_kernel
def _volume_rows(e_lo, e_hi, element_offsets, s_lo, pts, X, W, M, RHO, lo, hi, degree, nbasis, table, rec,
                 row_base, row_width, block_start, diag_entry, row_start, want_block, data,
                 rhs):  # pragma: no cover - compiled
    d = X.shape[1]
    D = d + 1
    nbmax = table.shape[0]
    leg, dleg, phi, gradT, box, scale, _b, _s, T, U, _V, block, _o, vec = _scratch(d, nbmax, _pmax(table), X)
    for e in range(e_lo, e_hi):
        if row_base[e] < 0:
            continue
        nb, p = nbasis[e], degree[e]
        element_box_tables(lo[e], hi[e], p, box, scale)
        block[:nb, :nb] = 0.0
        vec[:nb] = 0.0
        r0, r1 = pts[element_offsets[e] - s_lo], pts[element_offsets[e + 1] - s_lo]
        q = 0
        for r in range(r0, r1):
            c = q * D
            _traces(X[r], box, scale, rec, p, table, nb, leg, dleg, phi, gradT, T, c)
            _test(W[r], RHO[r], T, c, nb, vec)
            if want_block:
                _trial(W[r], M[r], T, c, nb, U)
            q += 1
            if q == BATCH or r == r1 - 1:
                if want_block:
                    contract(T, U, q * D, nb, nb, block)
                q = 0
        if want_block:
            _add_block(data, row_base[e], row_width[e], block_start[diag_entry[e]], block, nb, nb)
        for i in range(nb):
            rhs[row_start[e] + i] += vec[i]


@range_kernel
def _interior_rows(e_lo, e_hi, adj_offsets, adj_col, adj_interface, interface_offsets, face_local, bordered, pts, X,
                   W, M, RHO, lo, hi, degree, nbasis, table, rec, row_base, row_width, block_start, diag_entry,
                   row_start, want_block, data, rhs):  # pragma: no cover - compiled
    d = X.shape[1]
    D = d + 1
    nbmax = table.shape[0]
    leg, dleg, phi, gradT, box, scale, boxN, scaleN, T, U, V, bKK, bKN, vec = _scratch(d, nbmax, _pmax(table), X)
    TN = np.zeros((nbmax, D * BATCH), X.dtype)
    for e in range(e_lo, e_hi):
        if row_base[e] < 0:
            continue
        nbK, pK = nbasis[e], degree[e]
        element_box_tables(lo[e], hi[e], pK, box, scale)
        bKK[:nbK, :nbK] = 0.0
        vec[:nbK] = 0.0
        for k in range(adj_offsets[e], adj_offsets[e + 1]):
            t = adj_interface[k]
            if t < 0:
                continue
            c_el = adj_col[k]
            s = 0 if e < c_el else 1  # faces run from the interface's smaller element (side 0) to the other
            nbN, pN = nbasis[c_el], degree[c_el]
            element_box_tables(lo[c_el], hi[c_el], pN, boxN, scaleN)
            bKN[:nbK, :nbN] = 0.0
            f_last = interface_offsets[t + 1] - 1
            q = 0
            for f in range(interface_offsets[t], f_last + 1):
                fl = face_local[f]
                r1 = pts[fl + 1]
                for r in range(pts[fl], r1):
                    c = q * D
                    _traces(X[r], box, scale, rec, pK, table, nbK, leg, dleg, phi, gradT, T, c)
                    _test(W[r], RHO[r, s], T, c, nbK, vec)
                    if want_block:
                        _traces(X[r], boxN, scaleN, rec, pN, table, nbN, leg, dleg, phi, gradT, TN, c)
                        if bordered:  # A free of grad u: M's lower-right blocks are zero at face points
                            _trial_bordered(W[r], M[r, s, s], T, c, nbK, U)
                            _trial_bordered(W[r], M[r, s, 1 - s], TN, c, nbN, V)
                        else:
                            _trial(W[r], M[r, s, s], T, c, nbK, U)
                            _trial(W[r], M[r, s, 1 - s], TN, c, nbN, V)
                    q += 1
                    if q == BATCH or (r == r1 - 1 and f == f_last):
                        if want_block:
                            contract(T, U, q * D, nbK, nbK, bKK)
                            contract(T, V, q * D, nbK, nbN, bKN)
                        q = 0
            if want_block:
                _add_block(data, row_base[e], row_width[e], block_start[k], bKN, nbK, nbN)
        if want_block:
            _add_block(data, row_base[e], row_width[e], block_start[diag_entry[e]], bKK, nbK, nbK)
        for i in range(nbK):
            rhs[row_start[e] + i] += vec[i]


@range_kernel
def _boundary_rows(e_lo, e_hi, boundary_offsets, face_local, pts, X, W, M, RHO, lo, hi, degree, nbasis, table, rec,
                   row_base, row_width, block_start, diag_entry, row_start, want_block, data,
                   rhs):  # pragma: no cover - compiled
    d = X.shape[1]
    D = d + 1
    nbmax = table.shape[0]
    leg, dleg, phi, gradT, box, scale, _b, _s, T, U, _V, block, _o, vec = _scratch(d, nbmax, _pmax(table), X)
    for e in range(e_lo, e_hi):
        f0, f1 = boundary_offsets[e], boundary_offsets[e + 1]
        if f0 == f1 or row_base[e] < 0:
            continue
        nb, p = nbasis[e], degree[e]
        element_box_tables(lo[e], hi[e], p, box, scale)
        block[:nb, :nb] = 0.0
        vec[:nb] = 0.0
        q = 0
        for f in range(f0, f1):
            fl = face_local[f]
            r1 = pts[fl + 1]
            for r in range(pts[fl], r1):
                c = q * D
                _traces(X[r], box, scale, rec, p, table, nb, leg, dleg, phi, gradT, T, c)
                _test(W[r], RHO[r], T, c, nb, vec)
                if want_block:
                    _trial(W[r], M[r], T, c, nb, U)
                q += 1
                if q == BATCH or (r == r1 - 1 and f == f1 - 1):
                    if want_block:
                        contract(T, U, q * D, nb, nb, block)
                    q = 0
        if want_block:
            _add_block(data, row_base[e], row_width[e], block_start[diag_entry[e]], block, nb, nb)
        for i in range(nb):
            rhs[row_start[e] + i] += vec[i]


@range_kernel
def _spread(t_lo, t_hi, offsets, values, out):  # pragma: no cover - compiled
    """out[r] = values[t] for the points r of entities t_lo:t_hi (rows of any width)."""
    for t in range(t_lo, t_hi):
        for r in range(offsets[t], offsets[t + 1]):
            for k in range(values.shape[1]):
                out[r, k] = values[t, k]


#: one value per entity spread over the entity's points (``HostExecutor.per_point``)
spread_kernel = _spread

#: the row kernels (run by ``threads.parallel_range`` over a range of elements): volume terms,
#: interior-face terms and boundary-face terms of each element's rows
volume_kernel, interior_kernel, boundary_kernel = _volume_rows, _interior_rows, _boundary_rows
