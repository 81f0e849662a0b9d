"""The suite's compiled kernels, compiled once before xdist's workers start (``conftest.py``).

On a cold cache the workers would each compile the kernels their first tests
need, often the same ones side by side (the 2D kernels twice at the start),
and one worker would compile most of the rest while the other ran tests. Two
processes here compile disjoint halves at once, each by tiny assemblies through
the same code paths as the tests (so the same signatures), into the cache the
workers then load from. Kernels that only one test uses (the tests' own
``njit`` functions) are left to that test.

``python -m tests.kernel_warmup NAME...`` compiles the named sets (:data:`SETS`);
a failure here only costs the time: the tests compile whatever is missing.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
#: the files whose edits change what the warm-up compiles (beside polydg's sources, which key the cache itself)
SOURCES = (Path(__file__).resolve(), Path(__file__).resolve().with_name("gpu_simulator_cases.py"))


def stamp_name(package_dir: Path | None = None, sources: tuple[Path, ...] = SOURCES) -> str:
    """The file in the cache directory that says the warm-up ran: named by the warm-up's sources and by where
    they and polydg lie, since Numba keys its cache by a source file's path as well as its contents (a clone of
    the same commit elsewhere, CI's, has its kernels still to compile)."""
    if package_dir is None:
        import polydg

        package_dir = Path(polydg.__file__).parent
    located = "\n".join(str(Path(path).resolve()) for path in (package_dir, *sources))
    digest = hashlib.sha256(located.encode() + b"".join(Path(path).read_bytes() for path in sources))
    return f"tests-warm-{digest.hexdigest()[:12]}"


def _mesh(spec: str, n_elements: int):
    from polydg.mesh import from_spec
    from polydg.partition import agglomerate

    return agglomerate(from_spec(spec), n_elements)


def _space(spec: str, n_elements: int, degrees: tuple[int, int], seed: int = 0):
    from polydg.space import DGSpace

    mesh = _mesh(spec, n_elements)
    degree = np.random.default_rng(seed).integers(degrees[0], degrees[1] + 1, mesh.n_elements)
    return DGSpace(mesh, degree)


def _steady(d: int, precision: str, approaches: tuple[str, ...]) -> None:
    """Every face kind through the named approaches: the row kernels ("2"), the entity kernels ("atomic"),
    the triplets ("1")."""
    from polydg.assembly import assemble

    from .gpu_simulator_cases import all_kinds_problem

    space = _space("square:4" if d == 2 else "cube:2", 4, (1, 2))
    for approach in approaches:
        assemble(space, all_kinds_problem(d), approach=approach, precision=precision)


def _nonlinear() -> None:
    """The linearised kernels (2D; they are not specialised by dimension)."""
    from polydg.nonlinear import NonlinearSystem
    from polydg.problem import Problem, builtin_problem

    space = _space("square:4", 4, (1, 2))
    u = np.random.default_rng(1).standard_normal(space.n_dofs)
    NonlinearSystem(space, builtin_problem("paper-2d", 2)).linearize(u)
    plap = Problem("plap", diffusion=lambda x, u, grad_u: np.sqrt(1 + (grad_u**2).sum(1)) + 0.1 * u**2,
                   reaction=lambda x, u: 3 * u**2, source=1.0, dirichlet=lambda x: x[:, 1])
    NonlinearSystem(space, plap).linearize(u)


def _data_per_element() -> None:
    """The sided executor (coefficients per element; 3D, its kernels are not specialised by dimension)."""
    from polydg.assembly import assemble
    from polydg.problem import Problem
    from polydg.problem.data import ElementData

    space = _space("cube:2", 4, (1, 2))
    assemble(space, Problem("layers", diffusion=ElementData(1.0 + np.arange(space.mesh.n_elements)), source=1.0,
                            dim=3))


def _ranks_and_coarse_quadrature() -> None:
    """What every MPI rank compiles at its start (the relabelling kernel: four ranks at once on a cold cache)
    and the default quadrature sub-triangles of an agglomerated polygon (the command line, the march)."""
    from polydg.distributed.parts import compile_relabel_kernel
    from polydg.mesh.quadrature_simplices import coarse_quadrature_mesh

    compile_relabel_kernel()
    coarse_quadrature_mesh(_mesh("square:4", 4))


def _space_time_3d1() -> None:
    """A 3D + 1 slab: the kernels of dimension four."""
    from polydg.problem import builtin_problem
    from polydg.spacetime import march

    march(_mesh("cube:2", 4), builtin_problem("paper-3d1"), 1, n_slabs=1, final_time=0.2)


#: two halves, by precision (the kernels that take every dimension, such as the boundary's, are specialised by
#: precision alone), disjoint but for the small kernels every mesh and penalty needs, of about the same compile
#: time on a cold cache; the linearised and sided kernels (double) are in the second, for the balance
SETS: dict[str, Callable[[], None]] = {
    "double": lambda: (_steady(2, "double", ("2", "atomic", "1")), _steady(3, "double", ("2", "atomic")),
                       _space_time_3d1(), _ranks_and_coarse_quadrature()),
    "single": lambda: (_steady(2, "single", ("2", "atomic")), _steady(3, "single", ("2", "atomic")), _nonlinear(),
                       _data_per_element()),
}


def warm_in_parallel(names: tuple[str, ...] = tuple(SETS), timeout: float = 300.0) -> dict[str, float | str]:
    """Compile the named sets, each in its own process, at once; returns seconds (or the failure) per set.
    The processes are stopped past ``timeout`` seconds, and on any exception here (an interrupt)."""
    started = time.perf_counter()
    errs = {name: tempfile.TemporaryFile("w+") for name in names}  # not pipes: nothing can block on a full one
    procs: dict[str, subprocess.Popen] = {}
    outcome: dict[str, float | str] = {}
    try:
        for name in names:
            procs[name] = subprocess.Popen([sys.executable, "-m", "tests.kernel_warmup", name], cwd=REPO,
                                           stdout=subprocess.DEVNULL, stderr=errs[name], text=True)
        while len(outcome) < len(procs):
            for name, proc in procs.items():
                if name in outcome or proc.poll() is None:
                    continue
                errs[name].seek(0)
                lines = errs[name].read().strip().splitlines()
                outcome[name] = (round(time.perf_counter() - started, 1) if proc.returncode == 0
                                 else f"exit {proc.returncode}: {lines[-1] if lines else ''}")
            if time.perf_counter() - started > timeout:
                for name in procs:
                    outcome.setdefault(name, f"stopped after {timeout:g} s")
            time.sleep(0.1)
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        for err in errs.values():
            err.close()
    return outcome


def main(names: list[str]) -> int:
    import warnings

    from polydg.errors import CompilationWarning

    warnings.filterwarnings("ignore", category=CompilationWarning)
    for name in names:
        SETS[name]()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
