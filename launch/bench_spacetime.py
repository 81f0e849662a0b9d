"""One space-time slab's assembly in the paper's Table 4 setting (issue #19).

The oscillating square ``oscillating-square:502`` (504,008 triangles, the
closest structured size to the paper's 503,596; as bench_assembly.py's 2d
case) is the spatial mesh, in three forms:

* mesh 1: agglomerated into 8,337 elements (METIS, asked 8,337);
* mesh 2: agglomerated into 125,957 elements (asked 122,000: METIS gives
  more parts than asked here, 130,106 for 125,981, and 122,000 is the
  closest to the paper's 125,981 of the counts tried);
* mesh 3: not agglomerated, one element per triangle
  (``build_polytopic_mesh(fine)``).

One slab Omega x (0, tau), tau = 0.002 by default (about h = 1/502), is built over it
(``polydg.spacetime.slab_mesh``: every sub-triangle's prism cut into 3
tetrahedra) and the steady assembler runs on ``DGSpace(slab, p)`` with the
slab problem of paper-2d1 (``slab_problem``), p = 1, 2, 3 of total degree in
(x, t) (4, 10, 20 dofs per element: the paper's dofs), double precision,
Approach 2.  Only the assembly is timed: one untimed assembly first (JIT and
the first touch of the process's memory), then the median of ``--repeat``.
The slab mesh's build is timed apart, as is the spatial mesh's.

Why tau ~ h and not 0.1: building the slab mesh checks unmatched boundary
facets with a k-d tree pair search of radius the longest boundary-facet
edge (``_check_unmatched_interior`` in polydg/mesh/polytopic.py); with
tau = 0.1 the lateral facets' edges are 0.1 long and the search among the
2M top and bottom triangles asks for ~1e10 pairs (MemoryError on 24 GB).
The assembly's cost does not depend on tau.

``--quadrature-simplices fine coarse`` runs every case over both spatial
sub-triangulations (``polydg.mesh.quadrature_simplices``): the fine
triangles, or each element re-triangulated from its boundary vertices
(fewer prisms and fewer top and bottom faces; the same matrix to
round-off for polynomial data); the slab-mesh build time includes the
re-triangulation.  The default is polydg's default.

The paper's totals (one NVIDIA Tesla P100, Table 4) are printed beside
polydg's, with the ratio paper / polydg.  Only orders of magnitude compare:
different machines (here a CPU), and the paper's time step is its own.

Memory: the CSR matrix costs 16 bytes per nonzero (float64 value, int64
column).  Its nonzeros are known before assembling, nb^2 (n_el + 2
n_interfaces) for a uniform degree (every element's block row holds itself
and its face neighbours; a slab's neighbours are the spatial mesh's), and a
case whose matrix would exceed ``--max-matrix-gb`` (6 GB by default) is
skipped with its reason printed.  Mesh 3 at p = 3 is 10M dofs with 8.06e8
nonzeros (12.9 GB): skipped by default; with ``--max-matrix-gb 14`` it runs
on this 24 GB machine at a peak resident size of 13.9 GB (about the
matrix plus 1 GB).

``--table2``: the paper's Table 2 layout instead (seconds per million dofs
per row: element, interior, inflow, total kernels, indices, total assembly;
p = 1..5, single and double precision).  The spatial mesh is the
unagglomerated oscillating square at a resolution chosen per p so that one
slab has about one million dofs (``TABLE2_N``: 2 N^2 elements of
(p+1)(p+2)(p+3)/6 dofs), tau = 1/N; the paper's "inflow kernel" row is
polydg's boundary + inflow kernels (both printed too).  Each case: one
untimed assembly (for float32 the first one compiles the single-precision
kernels; its JIT seconds are reported apart), then the median of ``--repeat``.

Run:  python launch/bench_spacetime.py --meshes 1 --repeat 3
      python launch/bench_spacetime.py --meshes 1 2 --repeat 3 --quadrature-simplices fine coarse
      python launch/bench_spacetime.py --table2 --repeat 3
      python launch/bench_spacetime.py --meshes 1 2 3 --repeat 3 --max-matrix-gb 14 --json st.json
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import time


from polydg.assembly import Workspace, assemble
from polydg.backend import quiet_openmp_workers
from polydg.mesh import from_spec
from polydg.mesh.polytopic import build_polytopic_mesh
from polydg.mesh.quadrature_simplices import DEFAULT_QUADRATURE_SIMPLICES, QUADRATURE_SIMPLICES, quadrature_mesh
from polydg.partition import agglomerate
from polydg.problem import builtin_problem
from polydg.space import DGSpace
from polydg.spacetime import slab_mesh
from polydg.spacetime.problem import slab_problem

SPEC = "oscillating-square:502"
#: mesh number -> elements asked of METIS (None: one element per triangle)
MESHES = {1: 8_337, 2: 122_000, 3: None}
#: paper Table 4 (P100, double precision), total assembly in seconds, by mesh and p
PAPER_TOTAL = {1: {1: 1.34, 2: 1.7, 3: 3.7}, 2: {1: 1.9, 2: 4.6, 3: 15.0}, 3: {1: 2.9, 2: 9.6, 3: 32.9}}
ROWS = ("element_kernel", "interior_kernel", "boundary_kernel", "inflow_kernel", "total_kernels", "indices",
        "values", "quadrature_points", "coefficients", "penalty", "total_assembly")
BYTES_PER_NNZ = 16  # float64 value + int64 column index

#: --table2: oscillating-square:N per p, one element per triangle (about 1.0M dofs per slab)
TABLE2_N = {1: 354, 2: 224, 3: 158, 4: 120, 5: 95}
#: paper Table 2 (P100, Approach 2), seconds per million dofs, by precision, row and p
PAPER_TABLE2 = {
    "single": {"element_kernel": (0.007, 0.061, 0.27, 1, 3), "interior_kernel": (0.019, 0.09, 0.2, 0.36, 0.8),
               "inflow": (0.002, 0.015, 0.06, 0.16, 0.4), "total_kernels": (0.029, 0.17, 0.52, 1.5, 4.2),
               "indices": (0.63, 1.2, 2.3, 3.9, 7), "total_assembly": (0.79, 1.5, 3.1, 6, 12.2)},
    "double": {"element_kernel": (0.008, 0.069, 0.3, 1.2, 3.7), "interior_kernel": (0.018, 0.083, 0.2, 0.53, 1.2),
               "inflow": (0.003, 0.017, 0.07, 0.19, 0.5), "total_kernels": (0.03, 0.17, 0.57, 1.9, 5.5),
               "indices": (0.84, 1.5, 2.7, 4.4, 7.7), "total_assembly": (1.02, 1.9, 3.7, 7.2, 14.7)},
}
TABLE2_ROWS = (("element_kernel", "element kernel"), ("interior_kernel", "interior kernel"),
               ("boundary_kernel", "  (boundary kernel)"), ("inflow_kernel", "  (inflow kernel)"),
               ("inflow", "inflow kernel (bdry+inflow)"), ("total_kernels", "total kernels"),
               ("indices", "indices"), ("total_assembly", "total assembly"))


def dofs_per_element(p: int, d: int = 3) -> int:
    """Dimension of the total-degree-p polynomials in d variables."""
    from math import comb
    return comb(p + d, d)


def expected_nnz(n_elements: int, n_interfaces: int, p: int) -> int:
    """Nonzeros of the slab matrix at uniform degree p: nb^2 per element and 2 nb^2 per interface."""
    nb = dofs_per_element(p)
    return nb * nb * (n_elements + 2 * n_interfaces)


def space_mesh(number: int, fine_cache: dict):
    """(spatial polytopic mesh, seconds to build it from the fine mesh, seconds for the fine mesh)."""
    if "fine" not in fine_cache:
        t = time.perf_counter()
        fine_cache["fine"] = from_spec(SPEC)
        fine_cache["seconds"] = time.perf_counter() - t
    fine = fine_cache["fine"]
    t = time.perf_counter()
    n_el = MESHES[number]
    mesh = build_polytopic_mesh(fine) if n_el is None else agglomerate(fine, n_el)
    return mesh, time.perf_counter() - t, fine_cache["seconds"]


def run_mesh(number: int, degrees, repeat: int, tau: float, max_gb: float, fine_cache: dict,
             variants=("fine",)) -> list[dict]:
    """Every case of one Table 4 mesh, once per quadrature-simplices variant."""
    mesh2d, t_agg, t_fine = space_mesh(number, fine_cache)
    out = []
    for variant in variants:
        out.extend(run_variant(number, mesh2d, t_agg, t_fine, variant, degrees, repeat, tau, max_gb, fine_cache))
        gc.collect()
    return out


def run_variant(number: int, fine_mesh2d, t_agg: float, t_fine: float, variant: str, degrees, repeat: int,
                tau: float, max_gb: float, fine_cache: dict) -> list[dict]:
    t = time.perf_counter()
    mesh2d = quadrature_mesh(fine_mesh2d, variant)
    t_quad = time.perf_counter() - t
    t = time.perf_counter()
    slab = slab_mesh(mesh2d, 0.0, tau)
    t_slab = time.perf_counter() - t + t_quad
    print(f"\nmesh {number}, {variant} quadrature simplices: {SPEC} ({fine_cache['fine'].n_cells:,} triangles, "
          f"{t_fine:.2f} s) -> {mesh2d.n_elements:,} elements "
          f"({'agglomerated' if MESHES[number] else 'one per triangle'}, {t_agg:.2f} s), {mesh2d.n_simplices:,} "
          f"sub-triangles ({t_quad:.2f} s); slab (0, {tau:g}): {slab.n_elements:,} elements, "
          f"{slab.n_simplices:,} tetrahedra, {slab.n_interior_faces:,} interior faces on {slab.n_interfaces:,} "
          f"interfaces, {slab.n_boundary_faces:,} boundary faces; slab-mesh build {t_slab:.2f} s "
          f"(of which the quadrature simplices {t_quad:.2f} s)")
    problem = slab_problem(builtin_problem("paper-2d1", 2), 2, 0.0, tau)
    out = []
    for p in degrees:
        base = {"mesh": number, "spec": SPEC, "quadrature_simplices": variant, "sub_triangles": mesh2d.n_simplices,
                "quadrature_simplices_seconds": t_quad, "elements": slab.n_elements, "tetrahedra": slab.n_simplices,
                "interior_faces": slab.n_interior_faces, "interfaces": slab.n_interfaces,
                "boundary_faces": slab.n_boundary_faces, "p": p, "tau": tau,
                "fine_mesh_seconds": t_fine, "space_mesh_seconds": t_agg, "slab_mesh_seconds": t_slab,
                "paper_total": PAPER_TOTAL[number][p]}
        nnz = expected_nnz(slab.n_elements, slab.n_interfaces, p)
        gb = nnz * BYTES_PER_NNZ / 1e9
        dofs = slab.n_elements * dofs_per_element(p)
        if gb > max_gb:
            reason = (f"matrix would hold {nnz:,} nonzeros = {gb:.1f} GB at {BYTES_PER_NNZ} B each "
                      f"(> --max-matrix-gb {max_gb:g}; this machine has 24 GB)")
            print(f"  p = {p}: {dofs:,} dofs: skipped, {reason}")
            out.append(dict(base, dofs=dofs, expected_nnz=nnz, skipped=reason))
            continue
        space = DGSpace(slab, p)
        workspace = Workspace()
        t = time.perf_counter()
        warm = assemble(space, problem, workspace=workspace)
        t_warm = time.perf_counter() - t
        jit = warm.info["timings"]["jit"]
        del warm
        gc.collect()
        runs, nnz_real = [], None
        for _ in range(repeat):
            r = assemble(space, problem, workspace=workspace)
            runs.append(r.info["timings"])
            nnz_real = r.info["nnz"]
            del r
            gc.collect()
        med = {k: statistics.median(t[k] for t in runs) for k in runs[0]}
        totals = [t["total_assembly"] for t in runs]
        res = dict(base, dofs=space.n_dofs, nnz=nnz_real, expected_nnz=nnz, matrix_gb=nnz_real * BYTES_PER_NNZ / 1e9,
                   warmup_seconds=t_warm, jit_seconds=jit, repeat=repeat, totals=totals, timings=med,
                   runs=runs)
        print_case(res)
        out.append(res)
        del space, workspace
        gc.collect()
    return out


def print_case(res: dict) -> None:
    dofs, med = res["dofs"], res["timings"]
    print(f"  p = {res['p']}: {dofs:,} dofs, nnz {res['nnz']:,} ({res['matrix_gb']:.2f} GB; expected "
          f"{res['expected_nnz']:,}); first assembly {res['warmup_seconds']:.2f} s, "
          f"of which JIT {res['jit_seconds']:.2f} s")
    print(f"  {'':18}{'s':>10}{'s/Mdof':>10}")
    for row in ROWS:
        if row in med:
            print(f"  {row:18}{med[row]:10.4f}{med[row] / dofs * 1e6:10.4f}")
    tot = med["total_assembly"]
    print(f"  total runs: {', '.join(f'{t:.4f}' for t in res['totals'])} s; paper (P100) {res['paper_total']:g} s; "
          f"paper / polydg = {res['paper_total'] / tot:.1f}")


def print_summary(results: list[dict]) -> None:
    print("\nsummary (total assembly of one slab, median; paper: Table 4, P100)")
    print(f"{'mesh':>4}{'quad':>7}{'p':>3}{'elements':>10}{'dofs':>12}{'nnz':>15}{'element':>9}{'interior':>9}"
          f"{'bdry+infl':>10}{'indices':>9}{'total s':>9}{'s/Mdof':>8}{'paper s':>8}{'ratio':>7}{'slab mesh s':>12}")
    for r in results:
        if "skipped" in r:
            print(f"{r['mesh']:>4}{r['quadrature_simplices']:>7}{r['p']:>3}{r['elements']:>10,}{r['dofs']:>12,}"
                  f"{r['expected_nnz']:>15,}  skipped: "
                  f"{r['skipped']}")
            continue
        t = r["timings"]
        print(f"{r['mesh']:>4}{r['quadrature_simplices']:>7}{r['p']:>3}{r['elements']:>10,}{r['dofs']:>12,}{r['nnz']:>15,}"
              f"{t['element_kernel']:9.4f}{t['interior_kernel']:9.4f}{t['boundary_kernel'] + t['inflow_kernel']:10.4f}"
              f"{t['indices']:9.4f}{t['total_assembly']:9.4f}{t['total_assembly'] / r['dofs'] * 1e6:8.3f}"
              f"{r['paper_total']:8.2f}{r['paper_total'] / t['total_assembly']:7.1f}{r['slab_mesh_seconds']:12.2f}")


def run_table2(degrees, precisions, repeat: int) -> list[dict]:
    """One unagglomerated slab per p at about 1M dofs; s/Mdof per row, per precision."""
    out = []
    for p in degrees:
        n = TABLE2_N[p]
        spec = f"oscillating-square:{n}"
        tau = 1.0 / n
        t = time.perf_counter()
        fine = from_spec(spec)
        mesh2d = build_polytopic_mesh(fine)
        t_mesh = time.perf_counter() - t
        t = time.perf_counter()
        slab = slab_mesh(mesh2d, 0.0, tau)
        t_slab = time.perf_counter() - t
        del fine, mesh2d
        problem = slab_problem(builtin_problem("paper-2d1", 2), 2, 0.0, tau)
        space = DGSpace(slab, p)
        print(f"\np = {p}: {spec} x (0, {tau:.4g}): {slab.n_elements:,} elements, {slab.n_simplices:,} tetrahedra, "
              f"{space.n_dofs:,} dofs; meshes {t_mesh:.2f} s, slab {t_slab:.2f} s", flush=True)
        for prec in precisions:
            workspace = Workspace()
            t = time.perf_counter()
            warm = assemble(space, problem, precision=prec, workspace=workspace)
            t_warm = time.perf_counter() - t
            jit = warm.info["timings"]["jit"]
            del warm
            gc.collect()
            runs, nnz = [], None
            for _ in range(repeat):
                r = assemble(space, problem, precision=prec, workspace=workspace)
                runs.append(r.info["timings"])
                nnz = r.info["nnz"]
                del r
                gc.collect()
            med = {k: statistics.median(tt[k] for tt in runs) for k in runs[0]}
            med["inflow"] = med["boundary_kernel"] + med["inflow_kernel"]
            per = {k: v / space.n_dofs * 1e6 for k, v in med.items()}
            res = {"p": p, "precision": prec, "spec": spec, "tau": tau, "elements": slab.n_elements,
                   "dofs": space.n_dofs, "nnz": nnz, "warmup_seconds": t_warm, "jit_seconds": jit,
                   "repeat": repeat, "totals": [tt["total_assembly"] for tt in runs], "timings": med,
                   "s_per_mdof": per, "slab_mesh_seconds": t_slab}
            print(f"  {prec}: nnz {nnz:,}; first assembly {t_warm:.2f} s (JIT {jit:.2f} s); totals "
                  f"{', '.join(f'{x:.3f}' for x in res['totals'])} s -> {per['total_assembly']:.3f} s/Mdof "
                  f"(paper {PAPER_TABLE2[prec]['total_assembly'][p - 1]:g})", flush=True)
            out.append(res)
            del workspace
            gc.collect()
        del space, slab
        gc.collect()
    return out


def print_table2(results: list[dict]) -> None:
    degrees = sorted({r["p"] for r in results})
    print("\nTable 2 layout: seconds per million dofs (median), polydg | paper (P100)")
    head = "".join(f"{'p = ' + str(p):>18}" for p in degrees)
    for prec in ("single", "double"):
        rs = {r["p"]: r for r in results if r["precision"] == prec}
        if not rs:
            continue
        print(f"{prec + ' precision':30}{head}")
        for key, label in TABLE2_ROWS:
            cells = []
            for p in degrees:
                if p not in rs:
                    cells.append(f"{'-':>18}")
                    continue
                v = rs[p]["s_per_mdof"][key]
                paper = PAPER_TABLE2[prec].get(key)
                cells.append(f"{v:9.3f} | {paper[p - 1]:<6g}" if paper else f"{v:9.3f}{'':9}")
            print(f"{label:30}{''.join(cells)}")
        print(f"{'dofs':30}" + "".join(f"{rs[p]['dofs']:>18,}" if p in rs else f"{'-':>18}" for p in degrees))


def main() -> None:
    quiet_openmp_workers()  # as python -m polydg.assemble does, before the first parallel kernel
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--meshes", type=int, nargs="*", choices=sorted(MESHES), default=[1, 2, 3])
    ap.add_argument("--degrees", type=int, nargs="*", choices=[1, 2, 3], default=[1, 2, 3])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--tau", type=float, default=0.002, help="slab length: the slab is (0, tau)")
    ap.add_argument("--max-matrix-gb", type=float, default=6.0, help="skip cases whose CSR matrix would be larger")
    ap.add_argument("--quadrature-simplices", nargs="*", choices=QUADRATURE_SIMPLICES,
                    default=[DEFAULT_QUADRATURE_SIMPLICES],
                    help="the spatial sub-triangles the prisms are built over: fine (the fine mesh's), coarse "
                         "(each element re-triangulated from its boundary, polydg.mesh.quadrature_simplices), or "
                         "both, one after the other (default: polydg's, "
                         f"{DEFAULT_QUADRATURE_SIMPLICES})")
    ap.add_argument("--json", help="write all figures to this file")
    ap.add_argument("--table2", action="store_true",
                    help="the paper's Table 2 layout (s/Mdof per row, p = 1..5, single and double) instead")
    ap.add_argument("--table2-degrees", type=int, nargs="*", choices=sorted(TABLE2_N), default=[1, 2, 3, 4, 5])
    ap.add_argument("--precisions", nargs="*", choices=["single", "double"], default=["single", "double"])
    args = ap.parse_args()
    if args.table2:
        print(f"machine: {os.cpu_count()} cores; one slab of paper-2d1 per p (unagglomerated oscillating "
              f"square, about 1M dofs), Approach 2, median of {args.repeat} after a warm-up (JIT excluded)")
        results = run_table2(args.table2_degrees, args.precisions, args.repeat)
        print_table2(results)
        if args.json:
            with open(args.json, "w") as fh:
                json.dump({"cores": os.cpu_count(), "table2": results}, fh, indent=1)
        return
    print(f"machine: {os.cpu_count()} cores; one slab of paper-2d1, double precision, Approach 2, "
          f"median of {args.repeat} (JIT excluded by a warm-up assembly)")
    fine_cache: dict = {}
    results = []
    for number in args.meshes:
        results.extend(run_mesh(number, args.degrees, args.repeat, args.tau, args.max_matrix_gb, fine_cache,
                                args.quadrature_simplices))
        gc.collect()
    print_summary(results)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"cores": os.cpu_count(), "results": results}, fh, indent=1)


if __name__ == "__main__":
    main()
