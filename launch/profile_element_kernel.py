"""Where the element kernel's time goes: its stages, one thread, from memory and from cache.

The element kernel of Approach 2 (``kernels.element_rows``) does, per run of
up to ``MOMENT_BATCH`` points of an element:

1. gather: copy the points and weights, and the coefficients times the weights;
2. pad the run and tabulate the Legendre values on the element's box;
3. add the run's moments;

then, per element, 4. form the block and load from the moments, and 5. write
them into the CSR values.  This script assembles one benchmark case once,
keeps the arguments of the first chunk's ``element_rows`` call, and runs a
copy of the kernel's loop that stops after stage k, for k = 1..5, on one
thread: over the whole chunk (its data come from memory) and over its first
elements again and again (their data stay in cache).  The differences are
the stages' costs per point.  The full copy (stage 5) must give the kernel's
own values, bit for bit; the script checks that before it prints.

Run:  python launch/profile_element_kernel.py                 # 2D paper-2d, p = 2, the benchmark's mesh
      python launch/profile_element_kernel.py --case 3d --degree 2 --scale 0.1
"""

from __future__ import annotations

import argparse
import time

import numba
import numpy as np
from numba import njit

from polydg.assembly import assemble
from polydg.assembly import kernels as K
from polydg.assembly.batched import A_ISOTROPIC, A_POINTWISE, gather_volume_coefficients
from polydg.assembly.moments import (MOMENT_BATCH, MomentTables, legendre_values_batch, pad_moment_batch,
                                     volume_moments_batch)
from polydg.basis import element_box_tables
from polydg.mesh import from_spec
from polydg.partition import agglomerate
from polydg.problem import builtin_problem
from polydg.space import DGSpace

STAGES = ("gather", "pad + Legendre values", "moments", "block from moments", "write block and load")
CASES = {"2d": ("oscillating-square:502", 8_337, "paper-2d"), "3d": ("cube:55", 100_000, "paper-3d")}


def _staged_kernel(dim: int):
    """A serial copy of ``element_rows`` for one dimension that stops after stage ``stage`` (1..5)."""

    @njit(cache=True)
    def staged(stage, e_lo, e_hi, element_offsets, s_lo, points, coef, basis, moments, pattern, want_load, want_block,
               values):  # pragma: no cover - compiled
        pts, X, W = points
        A, B, C, F = coef
        lo, hi, degree, nbasis, table, rec = basis
        psi, counts = moments.psi, moments.counts
        row_base, row_width, block_start, diag_entry, row_start = (pattern.row_base, pattern.row_width,
                                                                   pattern.block_start, pattern.diag_entry,
                                                                   pattern.row_start)
        data, rhs = values
        nbmax = table.shape[0]
        pmax = K._table_degree(table)
        L, xb, w, Ab, Bb, Cb, Fb, mu, mus, block, vec, S = K._moment_scratch(dim, nbmax, pmax, psi.shape[0], data)
        box, scale = K._box_scratch(dim, pmax, data)
        count = 0
        for e in range(e_lo, e_hi):
            nb, p = nbasis[e], degree[e]
            element_box_tables(lo[e], hi[e], p, box, scale)
            r_first, r_last = pts[element_offsets[e] - s_lo], pts[element_offsets[e + 1] - s_lo]
            mu[:, :] = 0
            a_kind = A_ISOTROPIC
            for r0 in range(r_first, r_last, MOMENT_BATCH):
                m = min(MOMENT_BATCH, r_last - r0)
                count += m
                a_kind = gather_volume_coefficients(r0, m, X, W, A, B, C, F, want_load, xb, w, Ab, Bb, Cb, Fb)
                if stage >= 2:
                    m = pad_moment_batch(m, xb, w, Ab, a_kind, Bb, Cb, Fb)
                    legendre_values_batch(xb, m, box, rec, 2 * p, L)
                if stage >= 3:
                    av = Ab[0, 0] if a_kind == A_ISOTROPIC else w
                    volume_moments_batch(m, L, psi, counts[p], Cb, Fb, Bb, av, Ab, a_kind == A_POINTWISE, mu)
            if stage >= 4:
                K.volume_block(p, nb, moments, mu, mus, a_kind, Ab, box, scale, table, S, block, vec)
            if stage >= 5:
                K._add_block(data, row_base[e], row_width[e], block_start[diag_entry[e]], block, nb, nb)
                if want_load:
                    K._add_vec(rhs, row_start[e], vec, nb)
        return count

    return staged


def _copy(a):
    """An argument with its arrays copied (in the named structures too; the read-only moment tables kept)."""
    if isinstance(a, np.ndarray):
        return a.copy()
    if isinstance(a, tuple) and hasattr(a, "_fields") and not isinstance(a, MomentTables):
        return type(a)(*(_copy(x) for x in a))
    return a


def first_chunk_arguments(space, problem) -> tuple:
    """The arguments of the first non-empty ``element_rows`` call of one assembly (arrays copied)."""
    captured: list[tuple] = []
    original = K.element_rows

    def spy(*args):
        if args[0] != args[1] and not captured:
            captured.append(tuple(_copy(a) for a in args))
        return original(*args)

    K.element_rows = spy
    try:
        assemble(space, problem)
    finally:
        K.element_rows = original
    return captured[0]


def profile(args: tuple, cached_elements: int = 100, repeat: int = 9) -> dict:
    """Seconds per point of each stage, from memory (the whole chunk) and from cache (the first elements)."""
    staged = _staged_kernel(args[4].x.shape[1])
    data, rhs = args[-1]
    # the full copy must be the kernel: same values, bit for bit
    data[:] = 0
    rhs[:] = 0
    K.element_rows(*args)
    expected = data.copy(), rhs.copy()
    data[:] = 0
    rhs[:] = 0
    staged(5, *args)
    if not (np.array_equal(data, expected[0]) and np.array_equal(rhs, expected[1])):
        raise AssertionError("the staged copy of element_rows does not reproduce its values")
    cached = (args[0], min(args[1], args[0] + cached_elements)) + tuple(args[2:])
    n_points, n_cached = staged(5, *args), staged(5, *cached)
    inner = max(1, 2 * n_points // max(1, n_cached))  # a cached measurement about twice as long as a whole one
    memory, cache = [np.inf] * 5, [np.inf] * 5
    # the stages take turns within each repetition, so that this machine's slow spells fall on all of them
    for _ in range(repeat):
        for k in range(5):
            t = time.perf_counter()
            staged(k + 1, *args)
            t1 = time.perf_counter()
            for _ in range(inner):
                staged(k + 1, *cached)
            t2 = time.perf_counter()
            memory[k] = min(memory[k], (t1 - t) / n_points)
            cache[k] = min(cache[k], (t2 - t1) / inner / n_cached)
    out = {"points": n_points, "cached_points": n_cached, "memory": memory, "cache": cache}
    data[:] = 0
    rhs[:] = 0
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--case", choices=sorted(CASES), default="2d")
    ap.add_argument("--degree", type=int, default=2)
    ap.add_argument("--scale", type=float, default=1.0, help="shrink the mesh and element count (quick runs)")
    ap.add_argument("--cached-elements", type=int, default=100, help="elements re-run for the from-cache figures")
    ap.add_argument("--repeat", type=int, default=9, help="repetitions; each stage's best is kept")
    args = ap.parse_args()
    spec, n_el, problem_name = CASES[args.case]
    if args.scale != 1.0:
        name, n = spec.split(":")
        spec = f"{name}:{max(2, int(int(n) * args.scale ** (1 / (3 if args.case == '3d' else 2))))}"
        n_el = max(2, int(n_el * args.scale))
    mesh = agglomerate(from_spec(spec), n_el)
    space = DGSpace(mesh, args.degree)
    problem = builtin_problem(problem_name, mesh.dim)
    kernel_args = first_chunk_arguments(space, problem)
    res = profile(kernel_args, args.cached_elements, args.repeat)
    print(f"{spec} -> {mesh.n_elements} elements, p = {args.degree}, {problem_name}; first chunk: elements "
          f"{kernel_args[0]}..{kernel_args[1]}, {res['points']} points; one thread of "
          f"{numba.config.NUMBA_NUM_THREADS}; the staged copy reproduces element_rows bit for bit")
    print(f"{'ns per point':28}{'from memory':>14}{'from cache':>14}")
    previous = (0.0, 0.0)
    for name, mem, cache in zip(STAGES, res["memory"], res["cache"]):
        print(f"{name:28}{1e9 * (mem - previous[0]):14.2f}{1e9 * (cache - previous[1]):14.2f}")
        previous = (mem, cache)
    print(f"{'all':28}{1e9 * res['memory'][-1]:14.2f}{1e9 * res['cache'][-1]:14.2f}")


if __name__ == "__main__":
    main()
