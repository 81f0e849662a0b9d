"""The linearised forms on the GPU executor, run under numba-cuda's simulator in a subprocess of
``test_nonlinear.py`` (``NUMBA_ENABLE_CUDASIM=1`` must be set before ``numba.cuda`` is imported).

``python tests/nonlinear_simulator_cases.py OUT.npz`` linearises every case of :data:`CASES` at its iterate
with backend "cudasim" and saves the Jacobian's values and the residual; the test compares them with the
CPU executor's.  Tiny meshes: the simulator runs a Python thread per GPU thread.  On a GPU the same cases
run in the test's own process (:func:`linearized` with backend "cupy").
"""

from __future__ import annotations

import sys

import numpy as np

from polydg.mesh import from_spec
from polydg.partition import agglomerate
from polydg.problem import CellData, GridData, Problem
from polydg.space import DGSpace

#: name -> (mesh spec, elements, degree range, problem maker)
CASES = {
    "2d-quasilinear": ("square:2", 3, (1, 3), "a(u)"),
    "2d-plap-advection": ("square:2", 3, (1, 2), "a(u, grad u)"),
    "3d-semilinear": ("cube:1", 3, (1, 2), "c(u), f(u)"),
    "2d-cell-data": ("square:2", 3, (1, 2), "data"),
}


def problem_of(kind: str, d: int) -> Problem:
    wind = np.array([0.7, 0.3, 0.1][:d])
    return {
        "a(u)": Problem("a(u)", diffusion=lambda x, u: 1 + u**2, source=lambda x: np.sin(3 * x[:, 0]),
                        dirichlet=lambda x: x[:, 0], is_neumann=lambda x, n: x[:, 1] > 0.99, neumann=0.3),
        "a(u, grad u)": Problem("plap", diffusion=lambda x, u, grad_u: (1 + (grad_u**2).sum(1)) ** 0.5 + 0.1 * u**2,
                                advection=wind, source=1.0, dirichlet=lambda x: x[:, 1]),
        "c(u), f(u)": Problem("cf", diffusion=1.0, reaction=lambda x, u: 3 * u**2,
                              source=lambda x, u: np.exp(0.3 * u) + x[:, 0], advection=wind, dirichlet=0.5),
        # data per fine cell (located: each point's element and cell) and on a grid (a function of x)
        "data": Problem("data", diffusion=CellData(np.linspace(1.0, 2.0, 8)), reaction=lambda x, u: u**2,
                        source=GridData(np.array([[1.0, 2.0], [3.0, 4.0]]), (0, 1, 0, 1)), dirichlet=0.2),
    }[kind]


def case_setup(name: str):
    spec, n, (lo, hi), kind = CASES[name]
    mesh = agglomerate(from_spec(spec), n)
    degree = np.random.default_rng(3).integers(lo, hi + 1, mesh.n_elements)
    space = DGSpace(mesh, degree)
    u = 0.5 * np.random.default_rng(4).standard_normal(space.n_dofs)
    return space, problem_of(kind, mesh.dim), u


def linearized(backend: str) -> dict[str, np.ndarray]:
    """Every case linearised by the device executor of ``backend``: Newton's and Picard's Jacobian values
    and residuals, and Newton's values again (their bitwise repeatability)."""
    from polydg.nonlinear import NonlinearSystem

    saved = {}
    for name in CASES:
        space, problem, u = case_setup(name)
        system = NonlinearSystem(space, problem, backend=backend)
        for newton in (True, False):
            lin = system.linearize(u, newton=newton)
            key = f"{name}-{'newton' if newton else 'picard'}"
            saved[key + "-data"] = lin.jacobian.data
            saved[key + "-residual"] = lin.residual
        saved[name + "-again"] = system.linearize(u).jacobian.data
    return saved


def main(out: str) -> None:
    np.savez(out, **linearized("cudasim"))
    print("NONLINEAR-SIMULATOR-CASES", len(CASES))


if __name__ == "__main__":
    main(sys.argv[1])
