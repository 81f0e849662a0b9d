"""Mesh benchmark: generate, agglomerate with METIS, build the PolytopicMesh.

Cases (each run in its own process so the peak memory is its own):

* ``oscillating-square:502`` (504,008 triangles, the structured size closest
  to the paper's 503,596) into 8,337 and into 125,981 elements;
* ``cube:55`` (998,250 tetrahedra) into 250,000 elements.

Run:  python launch/bench_mesh.py [--json mesh.json]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

CASES = [("oscillating-square:502", 8_337), ("oscillating-square:502", 125_981), ("cube:55", 250_000)]


def run_one(spec: str, n_elements: int) -> dict:
    from polydg.mesh import build_polytopic_mesh, from_spec
    from polydg.partition import agglomerate_cells

    build_polytopic_mesh(from_spec("square:2"))  # compile the mesh kernels first
    t0 = time.perf_counter()
    fine = from_spec(spec)
    t1 = time.perf_counter()
    parts = agglomerate_cells(fine, n_elements)
    t2 = time.perf_counter()
    mesh = build_polytopic_mesh(fine, parts)
    t3 = time.perf_counter()
    stats = mesh.statistics()
    return {
        "mesh": spec,
        "fine_cells": fine.n_cells,
        "requested_elements": n_elements,
        "generate_s": t1 - t0,
        "agglomerate_s": t2 - t1,
        "build_s": t3 - t2,
        "agglomerate_and_build_s": t3 - t1,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        **stats,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json")
    ap.add_argument("--one", nargs=2, metavar=("SPEC", "N"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(run_one(args.one[0], int(args.one[1]))))
        return
    results = []
    for spec, n in CASES:
        out = subprocess.run([sys.executable, __file__, "--one", spec, str(n)], capture_output=True, text=True,
                             check=True)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        results.append(r)
        print(f"{spec:>24} -> {r['elements']:>7} elements (asked {n}): generate {r['generate_s']:.2f} s, "
              f"agglomerate {r['agglomerate_s']:.2f} s, build {r['build_s']:.2f} s, "
              f"peak {r['peak_rss_mb']:.0f} MB; interior faces {r['interior_faces']}, interfaces "
              f"{r['interfaces']}, boundary faces {r['boundary_faces']}, sub-simplices/element "
              f"{r['sub_elements_per_element']}, faces/element {r['faces_per_element']}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=1)


if __name__ == "__main__":
    main()
