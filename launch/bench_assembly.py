"""Assembly benchmark in the paper's rows (Tables 1, 2, 4), with the machine's limits.

Cases (``--case``):

* ``3d``: paper-3d on the unit cube, about one million dofs per degree:
  p = 1: cube:55 (998,250 tets) into 250,000 elements asked (METIS gives
  263,135); p = 2: cube:55 into 100,000 (101,206); p = 3: cube:40 (384,000
  tets) into 50,000 (50,964).
* ``2d``: paper-2d on the oscillating square, 504,008 triangles
  (oscillating-square:502, the closest structured size to the paper's
  503,596) agglomerated into 8,337 elements, p = 1, 2, 3.

For each, Approach 2 (default), and with ``--baseline`` the atomic variant
and Approach 1, are timed (median of ``--repeat`` runs, JIT excluded).  The
DGEMM rate of this machine is measured first (NumPy's own, and the best of
OpenBLAS's kernel sets, see ``best_dgemm_rate``) and the volume kernel's
rate is reported against the best, counted as the direct contraction's
2 nb^2 (d + 1) flops per point (:func:`volume_flops`), and also as the
operations the moment form actually performs (:func:`moment_flops`).  The
machine's streaming read rate is measured too (``stream_rate``), and the
element kernel's reads (:func:`volume_bytes`: 56 bytes per point for
paper-2d) are reported against it: at p <= 2 in 2D the moments cost less
than reading the points' data, and that rate, not DGEMM's, is the roof.

Run:  python launch/bench_assembly.py --case all --repeat 3 --json bench.json
      python launch/bench_assembly.py --case all --baseline --scale 0.2 --repeat 3

Approach 1 keeps every sub-simplex and sub-face block as COO triplets with
duplicates (24 bytes each): at one million dofs and p = 2 in 3D that is
about 13 GB before SciPy's conversion, more than this 24 GB machine can
convert, so the three-way comparison runs at ``--scale 0.2`` (200k dofs).
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np
from numba import get_num_threads, njit, prange

from polydg.assembly import Workspace, assemble
from polydg.backend import quiet_openmp_workers
from polydg.mesh import from_spec
from polydg.partition import agglomerate
from polydg.problem import builtin_problem
from polydg.space import DGSpace

CASES = {
    "3d": [("cube:55", 250_000, 1), ("cube:55", 100_000, 2), ("cube:40", 50_000, 3)],
    "2d": [("oscillating-square:502", 8_337, 1), ("oscillating-square:502", 8_337, 2),
           ("oscillating-square:502", 8_337, 3)],
}
ROWS = ("element_kernel", "interior_kernel", "boundary_kernel", "inflow_kernel", "total_kernels", "indices",
        "values", "quadrature_points", "coefficients", "penalty", "total_assembly")


def dgemm_rate(n: int = 2048, repeat: int = 3) -> float:
    """Measured float64 matrix-product rate of this process's NumPy in GFLOP/s."""
    a = np.random.default_rng(0).random((n, n))
    b = np.random.default_rng(1).random((n, n))
    a @ b
    best = min(_timed(lambda: a @ b) for _ in range(repeat))
    return 2 * n**3 / best / 1e9


#: OpenBLAS kernel sets tried for the machine's best rate.  NumPy's OpenBLAS
#: picks its kernels by CPU model; on a CPU it does not know (an AMD Zen 5
#: here) it may fall back to AVX2 kernels at about half the AVX-512 rate, so
#: the reference is the best of its own choice and these.
CORETYPES = ("SKYLAKEX", "COOPERLAKE", "SAPPHIRERAPIDS", "ZEN", "HASWELL")


def best_dgemm_rate(n: int = 4096) -> tuple[float, float, str]:
    """(NumPy's own rate, the best rate over :data:`CORETYPES`, the kernel set that gave it), GFLOP/s.

    Every rate, NumPy's own included, is measured in a child process (OpenBLAS
    reads OPENBLAS_CORETYPE and its thread count at load time) with NumPy only
    and OpenBLAS on every core: the kernels use them all, and a caller's
    OMP_NUM_THREADS=1 (as in CI and under mpiexec) would otherwise halve the
    reference.  A kernel set the CPU cannot run fails there and is skipped.
    """
    code = "\n".join(["import time", "import numpy as np", inspect.getsource(_timed), inspect.getsource(dgemm_rate),
                      f"print(dgemm_rate({n}))"])
    cores = str(os.cpu_count() or 1)
    base = dict(os.environ, OMP_NUM_THREADS=cores, OPENBLAS_NUM_THREADS=cores)
    base.pop("OPENBLAS_CORETYPE", None)
    rates = {}
    for name in (None,) + CORETYPES:
        env = base if name is None else dict(base, OPENBLAS_CORETYPE=name)
        try:
            out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
            rates[name] = float(out.stdout.strip().splitlines()[-1])
        except (subprocess.SubprocessError, ValueError, IndexError):
            continue  # a kernel set this CPU cannot run
    if None not in rates:
        raise RuntimeError("could not measure NumPy's matrix-product rate in a child process")
    own = rates[None]
    best_name = max(rates, key=lambda k: (rates[k], k is None))
    how = "numpy default" if best_name is None else f"OPENBLAS_CORETYPE={best_name}"
    return own, rates[best_name], how


def stream_rate(megabytes: int = 512, repeat: int = 3) -> float:
    """Rate in GB/s at which this process's Numba threads together read four large float64 arrays.

    The element kernel reads each of its points' data once, from five or so
    arrays side by side (points, weights, coefficient values:
    :func:`volume_bytes`), so this is its roof when the moments cost less
    than the reads, as at p <= 2 in 2D.  Several arrays are read at once
    because that is how the kernel reads, and because on this VM one array
    alone streams more slowly (9-10 GB/s against 11-15 GB/s for four or five).  Each
    thread sums its own contiguous part of every array, best of ``repeat``.
    """
    @njit(parallel=True, fastmath=True)
    def read(a, b, c, d, parts):
        sums = np.zeros(parts)
        n = a.shape[0]
        for t in prange(parts):
            s = 0.0
            for i in range(t * n // parts, (t + 1) * n // parts):
                s += a[i] + b[i] + c[i] + d[i]
            sums[t] = s
        return sums.sum()

    arrays = [np.ones(megabytes * 2**20 // 32) for _ in range(4)]
    parts = get_num_threads()
    read(*arrays, parts)  # compile, and touch every page once
    return 4 * arrays[0].nbytes / min(_timed(lambda: read(*arrays, parts)) for _ in range(repeat)) / 1e9


def volume_bytes(problem, d: int, n_points: int, itemsize: int = 8) -> float:
    """Bytes the element kernel reads from memory: per point, its coordinates and weight and each
    coefficient that varies from point to point (A: d^2 values, b: d, c, f: one each); a constant
    coefficient is one row, read once."""
    per_point = d + 1
    for name, size in (("diffusion", d * d), ("advection", d), ("reaction", 1), ("source", 1)):
        if getattr(problem, name) is not None and not problem.is_constant(name):
            per_point += size
    return float(itemsize * per_point * n_points)


def _timed(f) -> float:
    t = time.perf_counter()
    f()
    return time.perf_counter() - t


def volume_flops(space: DGSpace, q_points_per_simplex: np.ndarray) -> float:
    """The direct volume contraction's floating-point operations, 2 nb^2 (d + 1) per point.

    The element kernel forms the same blocks from moments (``moments.py``)
    with fewer operations (:func:`moment_flops`); rates against this count
    are "contraction-equivalent": the rate a direct kernel would need to
    take the same time.
    """
    d = space.dim
    nb = space.element_dofs[space.mesh.simplex_element]
    return float(np.sum(2.0 * nb**2 * (d + 1) * q_points_per_simplex))


def interior_flops(space: DGSpace, q_points_per_face: np.ndarray) -> float:
    """The direct interior-face contraction's floating-point operations, 6 (nb+ + nb-)^2 per point of each
    interior face: each entry of the face's two-sided block takes three multiply-adds (the penalty and upwind
    term of the two values, and each side's flux A grad v . n times the other's value), the fluxes made once
    per basis function.  Rates against this count are contraction-equivalent, as :func:`volume_flops`'s.
    ``q_points_per_face``: the points of each interior face (the first ``n_interior_faces`` faces)."""
    return float(np.sum(6.0 * _interior_widths(space) ** 2 * q_points_per_face))


def interior_block_bytes(space: DGSpace, itemsize: int = 8) -> float:
    """Bytes of the interior faces' two-sided blocks, (nb+ + nb-)^2 values each: what the interior-face kernel
    adds into the matrix."""
    return float(itemsize * np.sum(_interior_widths(space) ** 2))


def _interior_widths(space: DGSpace) -> np.ndarray:
    """nb+ + nb- of each interior face (float64)."""
    sides = space.mesh.face_elements[:space.mesh.n_interior_faces]
    return (space.element_dofs[sides[:, 0]] + space.element_dofs[sides[:, 1]]).astype(np.float64)


def moment_flops(space: DGSpace, q_points_per_simplex: np.ndarray) -> float:
    """Operations the moment form performs for a problem with A = a I and varying b, c, f.

    Per point and moment: d - 1 products for psi_m, then a multiply-add per
    coefficient that needs it (c, f, a, b_0..b_{d-1} below max(nA, nf); c and
    b below nB; c alone above); per element, a multiply-add per table entry.
    """
    from polydg.assembly.moments import moment_tables

    d, mesh = space.dim, space.mesh
    tables = moment_tables(space.max_degree, d)
    per_point = np.zeros(space.max_degree + 1)
    per_element = np.zeros(space.max_degree + 1)
    for p in range(space.max_degree + 1):
        n_c, n_b, n_a, n_f = (int(v) for v in tables.counts[p])
        n1 = max(n_a, n_f)
        n2 = max(n1, n_b)
        per_point[p] = n_c * (d - 1) + 2 * (n1 * (3 + d) + (n2 - n1) * (1 + d) + (n_c - n2))
        per_element[p] = 2 * (tables.iso_start[p + 1] - tables.iso_start[p])
    points = float(np.sum(per_point[space.degree[mesh.simplex_element]] * q_points_per_simplex))
    return points + float(np.sum(per_element[space.degree]))


def run_case(spec, n_el, p, approaches, repeat, problem_name, cache):
    key = (spec, n_el)
    if key not in cache:
        t = time.perf_counter()
        fine = from_spec(spec)
        mesh = agglomerate(fine, n_el)
        cache.clear()
        cache[key] = (mesh, time.perf_counter() - t)
    mesh, t_mesh = cache[key]
    d = mesh.dim
    space = DGSpace(mesh, p)
    problem = builtin_problem(problem_name, d)
    out = {"mesh": spec, "elements": mesh.n_elements, "sub_elements": mesh.n_simplices,
           "interior_faces": mesh.n_interior_faces, "interfaces": mesh.n_interfaces, "p": p,
           "dofs": space.n_dofs, "mesh_seconds": t_mesh, "approaches": {}}
    from polydg.assembly.points import point_counts
    from polydg.quadrature import default_degree

    nq = point_counts(d, default_degree(np.full(mesh.n_simplices, p), 0))
    out["volume_flops"] = volume_flops(space, nq)
    out["moment_flops"] = moment_flops(space, nq)
    out["volume_points"] = int(nq.sum())
    out["volume_bytes"] = volume_bytes(problem, d, int(nq.sum()))
    # one untimed assembly first: it loads the compiled kernels and touches
    # the process's peak memory once (on this VM the first write to memory
    # the process has never used costs up to ~1 ms per MB, which would
    # otherwise be charged to whichever approach runs first)
    # All approaches reuse one Workspace for the stages they share (the
    # quadrature points and the coefficient values), as the command line's
    # --repeat does: only the first assembly pays for that memory.  Each
    # approach's own arrays (the CSR values, Approach 1's triplets) are new
    # in every call.
    workspace = Workspace()
    assemble(space, problem, approach=approaches[0], workspace=workspace)
    for approach in approaches:
        runs = []
        for _ in range(repeat):
            r = assemble(space, problem, approach=approach, workspace=workspace)
            runs.append(r.info["timings"])
            out["nnz"] = r.info["nnz"]
            del r
        med = {k: statistics.median(t[k] for t in runs) for k in runs[0]}
        out["approaches"][approach] = med
    return out


def print_table(res: dict, rate: float, stream: float) -> None:
    dofs = res["dofs"]
    print(f"\n{res['mesh']} -> {res['elements']} elements, {res['sub_elements']} sub-simplices, "
          f"p = {res['p']}, {dofs} dofs, nnz {res['nnz']}")
    approaches = list(res["approaches"])
    head = "".join(f"{'A' + a + ' s':>12}{'s/Mdof':>10}" for a in approaches)
    print(f"{'':18}{head}")
    for row in ROWS:
        line = "".join(f"{res['approaches'][a][row]:12.4f}{res['approaches'][a][row] / dofs * 1e6:10.4f}"
                       for a in approaches)
        print(f"{row:18}{line}")
    t2 = res["approaches"]["2"]
    gf = res["volume_flops"] / max(t2["element_kernel"], 1e-12) / 1e9
    actual = res["moment_flops"] / max(t2["element_kernel"], 1e-12) / 1e9
    print(f"{'jit (apart)':18}{t2['jit']:12.4f}")
    print(f"volume kernel: {gf:.1f} GFLOP/s contraction-equivalent = {100 * gf / rate:.0f}% of DGEMM "
          f"({rate:.1f} GFLOP/s); the moment form's own operations: {actual:.1f} GFLOP/s "
          f"({res['moment_flops'] / res['volume_flops']:.2f} of the contraction's); "
          f"indices = {100 * t2['indices'] / t2['total_assembly']:.1f}% of total")
    read = res["volume_bytes"] / max(t2["element_kernel"], 1e-12) / 1e9
    print(f"element kernel reads {res['volume_bytes'] / 1e6:.0f} MB "
          f"({res['volume_bytes'] / res['volume_points']:.0f} B per point): {read:.1f} GB/s = "
          f"{100 * read / stream:.0f}% of the streaming read rate ({stream:.1f} GB/s), at which the reads alone "
          f"take {res['volume_bytes'] / stream / 1e9:.4f} s")
    if "1" in res["approaches"]:
        print(f"Approach 1 / Approach 2 total: {res['approaches']['1']['total_assembly'] / t2['total_assembly']:.1f}x")


def main() -> None:
    quiet_openmp_workers()  # as python -m polydg.assemble does, before the first parallel kernel
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--case", choices=["3d", "2d", "all"], default="all")
    ap.add_argument("--degrees", type=int, nargs="*", default=[1, 2, 3])
    ap.add_argument("--baseline", action="store_true", help="also time the atomic variant and Approach 1")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--scale", type=float, default=1.0, help="shrink the element counts (quick runs)")
    ap.add_argument("--json", help="write all figures to this file")
    ap.add_argument("--dgemm-size", type=int, default=4096, help="matrix size of the DGEMM reference")
    ap.add_argument("--stream-size", type=int, default=512, help="MB read for the streaming read rate")
    args = ap.parse_args()
    own, rate, how = best_dgemm_rate(args.dgemm_size)
    print(f"machine: {os.cpu_count()} cores; DGEMM (float64, n = {args.dgemm_size}): NumPy's own {own:.1f} GFLOP/s, "
          f"best {rate:.1f} GFLOP/s ({how}); the volume kernel is compared with the best")
    stream = stream_rate(args.stream_size)
    print(f"streaming read rate ({get_num_threads()} threads, {args.stream_size} MB): {stream:.1f} GB/s")
    approaches = ["2", "atomic", "1"] if args.baseline else ["2"]
    results = []
    cases = ["3d", "2d"] if args.case == "all" else [args.case]
    for case in cases:
        cache: dict = {}
        problem = "paper-3d" if case == "3d" else "paper-2d"
        for spec, n_el, p in CASES[case]:
            if p not in args.degrees:
                continue
            if args.scale != 1.0:
                name, n = spec.split(":")
                spec = f"{name}:{max(2, int(int(n) * args.scale ** (1 / (3 if case == '3d' else 2))))}"
                n_el = max(2, int(n_el * args.scale))
            res = run_case(spec, n_el, p, approaches, args.repeat, problem, cache)
            print_table(res, rate, stream)
            results.append(res)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"dgemm_gflops": rate, "dgemm_numpy_gflops": own, "dgemm_kernels": how, "stream_gbps": stream,
                       "results": results}, fh, indent=1)


if __name__ == "__main__":
    main()
