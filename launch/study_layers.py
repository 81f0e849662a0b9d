"""Convergence on a layered coefficient: agglomerated elements aligned with the layers, or straddling them.

    -div(a grad u) = pi^2 sin(pi x) on the unit square, a = a_i on the layers x in [i/4, (i+1)/4),

whose solution depends on x alone: u = sin(pi x) / a_i + c_i on layer i, the c_i making u
continuous (a u' = pi cos(pi x) is continuous by construction); u = exact on the whole boundary.
The diffusion is data per fine cell (CellData) on square:N, whose cells never cross a layer line;
the elements are METIS agglomerates of about 8 triangles, either as METIS made them (they straddle
the layer lines) or cut along the layer lines (aligned).  Prints the L2 errors and rates
(h = n_elements^(-1/2)) for docs/performance.md.

    python launch/study_layers.py [--contrast 10] [--degrees 1 2] [--sizes 8 16 32 64 128]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from polydg.assembly import assemble
from polydg.mesh import build_polytopic_mesh, from_spec
from polydg.partition.agglomerate import agglomerate_cells, dual_graph, split_disconnected
from polydg.problem import CellData, Problem
from polydg.solve import errors, solve
from polydg.space import DGSpace

LAYERS = np.array([0.0, 0.25, 0.5, 0.75, 1.0])


def layered_problem(fine, contrast: float) -> tuple[Problem, Problem]:
    """(the problem with a CellData diffusion, a problem carrying only its exact solution for the errors)."""
    a = np.array([1.0, contrast, 1.0, contrast])
    shift = np.zeros(4)
    for i in range(1, 4):
        shift[i] = shift[i - 1] + np.sin(np.pi * LAYERS[i]) * (1 / a[i - 1] - 1 / a[i])

    def layer(x):
        return np.minimum(np.searchsorted(LAYERS, x, side="right") - 1, 3)

    def exact(x):
        i = layer(x[:, 0])
        return np.sin(np.pi * x[:, 0]) / a[i] + shift[i]

    centre = fine.points[fine.cells].mean(axis=1)
    k = CellData(a[layer(centre[:, 0])], source=f"layers 1:{contrast:g}")
    problem = Problem("layers", diffusion=k, source=lambda x: np.pi**2 * np.sin(np.pi * x[:, 0]), dirichlet=exact)
    return problem, Problem("layers-exact", exact=exact)


def meshes(n: int):
    """(straddling, aligned) agglomerates of square:n, about 8 triangles per element."""
    fine = from_spec(f"square:{n}")
    parts = agglomerate_cells(fine, max(n * n // 4, 1))
    centre = fine.points[fine.cells].mean(axis=1)
    layer = np.minimum(np.searchsorted(LAYERS, centre[:, 0], side="right") - 1, 3)
    aligned = split_disconnected(dual_graph(fine), parts * 4 + layer)
    return fine, build_polytopic_mesh(fine, parts), build_polytopic_mesh(fine, aligned)


def straddling_fraction(mesh, fine) -> float:
    """The fraction of elements with fine cells on both sides of a layer line."""
    centre = fine.points[fine.cells].mean(axis=1)
    layer = np.minimum(np.searchsorted(LAYERS, centre[mesh.simplex_cell, 0], side="right") - 1, 3)
    lo = np.minimum.reduceat(layer, mesh.element_offsets[:-1])
    hi = np.maximum.reduceat(layer, mesh.element_offsets[:-1])
    return float((lo != hi).mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--contrast", type=float, default=10.0)
    parser.add_argument("--degrees", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--sizes", type=int, nargs="+", default=[8, 16, 32, 64, 128])
    args = parser.parse_args()
    for p in args.degrees:
        rows = {"straddling": [], "aligned": []}
        for n in args.sizes:
            fine, straddling, aligned = meshes(n)
            problem, exact = layered_problem(fine, args.contrast)
            for name, mesh in (("straddling", straddling), ("aligned", aligned)):
                t = time.perf_counter()
                space = DGSpace(mesh, p)
                result = assemble(space, problem)
                x, _ = solve(result.matrix, result.rhs)
                l2 = errors(space, exact, x)["l2"]
                rows[name].append((n, mesh.n_elements, space.n_dofs, straddling_fraction(mesh, fine), l2,
                                   time.perf_counter() - t))
        for name, table in rows.items():
            print(f"p = {p}, contrast 1:{args.contrast:g}, {name}")
            print("   N  elements   dofs  straddling      L2 error   rate")
            for i, (n, n_el, dofs, frac, l2, _) in enumerate(table):
                rate = ""
                if i:
                    h0, h1 = table[i - 1][1] ** -0.5, n_el ** -0.5
                    rate = f"{np.log(table[i - 1][4] / l2) / np.log(h0 / h1):6.2f}"
                print(f"{n:4d} {n_el:9d} {dofs:6d} {frac:10.2f} {l2:13.3e} {rate}")


if __name__ == "__main__":
    main()
