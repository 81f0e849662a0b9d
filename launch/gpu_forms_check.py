"""Run the per-point forms of ``polydg.assembly.forms`` as numba-cuda device code and compare with the CPU.

docs/design.md (§12) asks that the per-point mathematics stay plain functions that
numba-cuda can compile for the GPU backend.  This script holds that to
account: it compiles ``eval_basis_point_scaled``, ``element_box_tables``,
``volume_point``, ``load_point``, ``normal_flux`` and
``interior_face_point`` from their Python source with ``cuda.jit(device=True)``,
runs one GPU thread per sub-simplex (volume block and load) and one per
interior face side (blocks KK and KN), and compares every value with the CPU
entity kernels that the ``atomic`` and ``1`` reductions use.

    python launch/gpu_forms_check.py                      # a real GPU
    NUMBA_ENABLE_CUDASIM=1 python launch/gpu_forms_check.py --mesh cube:2 --elements 4 --degree 1

(the second line is what the test suite runs, on the CPU simulator).  Prints
the largest relative differences and, on a real GPU, kernel times; exits 1
when a difference exceeds ``--tol``.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

if not hasattr(np, "row_stack"):  # removed in NumPy 2.4; numba-cuda <= 0.2x still registers an overload for it
    np.row_stack = np.vstack

from numba import cuda, float64  # noqa: E402  (module level: the CUDA simulator swaps the kernels' ``cuda``)


def launch(kernel, grid: int, threads: int, args: tuple, times: int) -> list[float]:
    """Run ``kernel[grid, threads](*args)`` ``times`` times; the wall seconds of each run (the first compiles)."""
    out = []
    for _ in range(times):
        t = time.perf_counter()
        kernel[grid, threads](*args)
        cuda.synchronize()
        out.append(time.perf_counter() - t)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mesh", default="cube:16")
    ap.add_argument("--elements", type=int, default=1000)
    ap.add_argument("--degree", type=int, default=2)
    ap.add_argument("--problem", default="paper-3d")
    ap.add_argument("--tol", type=float, default=1e-12)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)

    import math

    from polydg.assembly import kernels as K
    from polydg.assembly.arguments import (BasisTables, EntityBuffers, FaceTables, InteriorCoefficients, Points,
                                           VolumeCoefficients)
    from polydg.assembly.coefficients import Coefficients
    from polydg.assembly.plan import face_rule_degrees
    from polydg.assembly.cuda_kernels import for_device
    from polydg.assembly.forms import interior_face_point, load_point, normal_flux, trial_side, volume_point
    from polydg.assembly.penalty import diffusion_bound, face_penalty
    from polydg.assembly.points import simplex_points
    from polydg.basis import element_box_tables, eval_basis_point_scaled, legendre_recurrence, multi_indices
    from polydg.mesh.generators import from_spec
    from polydg.partition.agglomerate import agglomerate
    from polydg.problem import builtin_problem
    from polydg.quadrature import default_degree

    simulated = cuda.jit is getattr(getattr(cuda, "simulator", None), "jit", None)
    mesh = agglomerate(from_spec(args.mesh), args.elements)
    D, P = mesh.dim, args.degree
    problem = builtin_problem(args.problem, D)
    table = np.ascontiguousarray(multi_indices(P, D), dtype=np.int64)
    NB = len(table)
    P1 = P + 1  # local-array shapes must be plain constants of the closure, not expressions
    rec = legendre_recurrence(P)
    degree = np.full(mesh.n_elements, P, dtype=np.int64)
    nbasis = np.full(mesh.n_elements, NB, dtype=np.int64)
    lo, hi = np.ascontiguousarray(mesh.bbox_min), np.ascontiguousarray(mesh.bbox_max)
    coeff = Coefficients(problem, D, np.float64, 1)
    device = "CPU simulator" if simulated else cuda.get_current_device().name
    if isinstance(device, bytes):
        device = device.decode()
    print(f"{args.mesh} -> {mesh.n_elements} elements, {mesh.n_simplices} sub-simplices, "
          f"{mesh.n_interior_faces} interior faces, p = {P}; device: {device}")

    dev_box = cuda.jit(device=True)(element_box_tables.py_func)
    dev_basis = cuda.jit(device=True)(eval_basis_point_scaled.py_func)
    dev_volume = for_device(volume_point, trial_side=cuda.jit(device=True)(trial_side.py_func))
    dev_load = cuda.jit(device=True)(load_point.py_func)
    dev_flux = cuda.jit(device=True)(normal_flux.py_func)
    dev_dot_normal = cuda.jit(device=True)(K._dot_normal.py_func)
    dev_face = cuda.jit(device=True)(interior_face_point.py_func)

    # ---- volume: one thread per sub-simplex ------------------------------------
    @cuda.jit
    def simplex_kernel(simplex_element, pts, X, W, A, B, C, F, lo, hi, table, rec, vals, loads):
        s = cuda.grid(1)
        if s < simplex_element.shape[0]:
            e = simplex_element[s]
            box = cuda.local.array((D, 2), float64)
            scale = cuda.local.array((D, P1), float64)
            leg = cuda.local.array((D, P1), float64)
            dleg = cuda.local.array((D, P1), float64)
            phi = cuda.local.array(NB, float64)
            gradT = cuda.local.array((D, NB), float64)
            ag = cuda.local.array((D, NB), float64)
            bg = cuda.local.array(NB, float64)
            block = cuda.local.array((NB, NB), float64)
            vec = cuda.local.array(NB, float64)
            for i in range(NB):
                vec[i] = 0.0
                for j in range(NB):
                    block[i, j] = 0.0
            dev_box(lo[e], hi[e], P, box, scale)
            for r in range(pts[s], pts[s + 1]):
                dev_basis(X[r], box, scale, rec, P, table, NB, leg, dleg, phi, gradT)
                ra = r if A.shape[0] > 1 else 0
                dev_volume(W[r], phi, gradT, NB, A[ra], B[r], C[r], block, ag, bg)
                dev_load(W[r], phi, NB, F[r], vec)
            for i in range(NB):
                loads[s, i] = vec[i]
                for j in range(NB):
                    vals[s, i, j] = block[i, j]

    q = default_degree(degree[mesh.simplex_element], 0)
    batch = simplex_points(mesh.points[mesh.simplices], mesh.simplex_volume, q)
    A, B, C, F = coeff.volume(batch.x, want_load=True)
    if B.shape[0] == 1 or C.shape[0] == 1 or F.shape[0] == 1:
        raise SystemExit("this check wants a problem with varying b, c and f (e.g. paper-3d)")
    ns = mesh.n_simplices
    ref = np.empty(ns * NB * NB)
    ref_load = np.empty(ns * NB)
    # the CPU reference: the moment form (its Legendre values reach degree 2P)
    from polydg.assembly.moments import moment_tables
    K.simplex_blocks(0, ns, mesh.simplex_element, Points(batch.offsets, batch.x, batch.weight),
                     VolumeCoefficients(A, B, C, F),
                     BasisTables(lo, hi, degree, nbasis, table, legendre_recurrence(2 * P)),
                     moment_tables(P, D), True,
                     EntityBuffers(ref, np.arange(ns + 1, dtype=np.int64) * NB * NB, ref_load,
                                   np.arange(ns + 1, dtype=np.int64) * NB))
    host = (mesh.simplex_element, batch.offsets, batch.x, batch.weight, A, B, C, F, lo, hi, table, rec)
    dev = [cuda.to_device(np.ascontiguousarray(a)) for a in host]
    vals, loads = cuda.device_array((ns, NB, NB)), cuda.device_array((ns, NB))
    threads = 128
    grid = (ns + threads - 1) // threads
    times = launch(simplex_kernel, grid, threads, (*dev, vals, loads), 1 if simulated else args.repeat + 1)
    got, got_load = vals.copy_to_host().ravel(), loads.copy_to_host().ravel()
    err_v = np.abs(got - ref).max() / np.abs(ref).max()
    err_l = np.abs(got_load - ref_load).max() / np.abs(ref_load).max()
    n_points = int(batch.offsets[-1])
    line = f"volume: {ns} sub-simplices, {n_points} points; max rel. difference block {err_v:.2e}, load {err_l:.2e}"
    if not simulated:
        t_best = min(times[1:])
        line += f"; GPU kernel {t_best * 1e3:.2f} ms ({n_points / t_best / 1e9:.2f} Gpoints/s, first call {times[0]:.2f} s)"
    print(line)

    # ---- interior faces: one thread per face side ---------------------------------
    @cuda.jit
    def face_kernel(face_elements, pts, X, W, A, B, normal, sigma, lo, hi, table, rec, vals):
        t = cuda.grid(1)
        if t < 2 * face_elements.shape[0]:
            f, side = t // 2, t % 2
            e, c = face_elements[f, side], face_elements[f, 1 - side]
            sign = 1.0 if side == 0 else -1.0
            boxK = cuda.local.array((D, 2), float64)
            scaleK = cuda.local.array((D, P1), float64)
            boxN = cuda.local.array((D, 2), float64)
            scaleN = cuda.local.array((D, P1), float64)
            leg = cuda.local.array((D, P1), float64)
            dleg = cuda.local.array((D, P1), float64)
            phiK = cuda.local.array(NB, float64)
            gradK = cuda.local.array((D, NB), float64)
            phiN = cuda.local.array(NB, float64)
            gradN = cuda.local.array((D, NB), float64)
            fluxK = cuda.local.array(NB, float64)
            fluxN = cuda.local.array(NB, float64)
            n = cuda.local.array(D, float64)
            An = cuda.local.array(D, float64)
            bKK = cuda.local.array((NB, NB), float64)
            bKN = cuda.local.array((NB, NB), float64)
            for i in range(NB):
                for j in range(NB):
                    bKK[i, j] = 0.0
                    bKN[i, j] = 0.0
            for k in range(D):
                n[k] = sign * normal[f, k]
            dev_box(lo[e], hi[e], P, boxK, scaleK)
            dev_box(lo[c], hi[c], P, boxN, scaleN)
            for r in range(pts[f], pts[f + 1]):
                dev_basis(X[r], boxK, scaleK, rec, P, table, NB, leg, dleg, phiK, gradK)
                dev_basis(X[r], boxN, scaleN, rec, P, table, NB, leg, dleg, phiN, gradN)
                ra = r if A.shape[0] > 1 else 0
                rb = r if B.shape[0] > 1 else 0
                dev_dot_normal(A[ra], n, An)
                dev_flux(gradK, NB, An, fluxK)
                dev_flux(gradN, NB, An, fluxN)
                bn = 0.0
                for k in range(D):
                    bn += B[rb, k] * n[k]
                dev_face(W[r], phiK, fluxK, NB, phiN, fluxN, NB, bn, sigma[f], bKK, bKN)
            for i in range(NB):
                for j in range(NB):
                    vals[f, side, 0, i, j] = bKK[i, j]
                    vals[f, side, 1, i, j] = bKN[i, j]

    n_int = mesh.n_interior_faces
    faces = np.arange(n_int, dtype=np.int64)
    fb = simplex_points(mesh.points, mesh.face_measure[faces], face_rule_degrees(degree, mesh.face_elements, 0)[faces],
                        cells=mesh.face_vertices[faces])
    Af, Bf = coeff.interior(fb.x)
    sigma = face_penalty(mesh, degree, diffusion_bound(mesh, problem, degree, 0))
    normal = np.ascontiguousarray(mesh.face_normal)
    ref_f = np.empty(n_int * 4 * NB * NB)
    # face f's points are the batch's entity f: face_local is the identity on the interior faces
    face_tables = FaceTables(normal, sigma, mesh.face_elements, mesh.interface_offsets, np.zeros(1, dtype=np.int64),
                             faces)
    K.interior_face_blocks(faces, Points(fb.offsets, fb.x, fb.weight), InteriorCoefficients(Af, Bf),
                           BasisTables(lo, hi, degree, nbasis, table, rec), face_tables,
                           EntityBuffers(ref_f, np.arange(n_int + 1, dtype=np.int64) * 4 * NB * NB,
                                         np.empty(0), np.zeros(0, dtype=np.int64)))
    host = (np.ascontiguousarray(mesh.face_elements[:n_int]), fb.offsets, fb.x, fb.weight, Af, Bf, normal, sigma, lo,
            hi, table, rec)
    dev = [cuda.to_device(np.ascontiguousarray(a)) for a in host]
    fvals = cuda.device_array((n_int, 2, 2, NB, NB))
    grid = (2 * n_int + threads - 1) // threads
    times = launch(face_kernel, grid, threads, (*dev, fvals), 1 if simulated else args.repeat + 1)
    got_f = fvals.copy_to_host().ravel()  # same slot order as the CPU buffer: K1K1, K1K2, K2K2, K2K1
    err_f = np.abs(got_f - ref_f).max() / np.abs(ref_f).max()
    n_fp = int(fb.offsets[-1])
    line = f"interior faces: {n_int} faces, {n_fp} points; max rel. difference {err_f:.2e}"
    if not simulated:
        t_best = min(times[1:])
        line += f"; GPU kernel {t_best * 1e3:.2f} ms ({2 * n_fp / t_best / 1e9:.2f} Gpoint-sides/s)"
    print(line)
    worst = max(err_v, err_l, err_f)
    ok = math.isfinite(worst) and worst <= args.tol
    print("GPU-FORMS-OK" if ok else f"GPU-FORMS-MISMATCH {worst:.2e} > {args.tol:.0e}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
