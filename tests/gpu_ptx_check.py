"""Compile every GPU kernel of the executor to PTX with numba-cuda and NVVM, on a machine without a GPU.

The simulator runs the kernels' Python source, so it cannot see what only
the real compiler checks: numba-cuda's typing of the device code, local
arrays of compile-time shapes, constant memory, atomics, and NVVM itself.
This script runs the GPU executor (``cuda_passes.py``) on NumPy arrays with
its launches replaced by a record of each kernel and its arguments, then
compiles each recorded kernel with ``numba.cuda.compile_ptx`` for compute
capability 9.0 (an H100).  The cases ``nonlinear-2d`` and ``nonlinear-3d`` do the same for the
linearised forms' executor (``cuda_linearized.py``): a Newton and a Picard Jacobian and a residual
alone of a problem with every coefficient and boundary kind, each kernel compiled for every argument
signature it was called with.  Two stand-ins make that possible without a
driver: the current device's compute capability (asked for when a kernel
calls a device function) and the path of NVVM's libdevice (numba-cuda finds
it through NVRTC, which a CUDA toolkit without NVRTC lacks).  Where the toolkit
has ``ptxas``, each kernel's PTX is also assembled for sm_90 and its registers,
stack frame and spills per thread are printed.

    python tests/gpu_ptx_check.py LIBDEVICE CASE [CASE ...]

prints one line per kernel and ``GPU-PTX-OK`` (or ``GPU-PTX-SKIP`` and why,
where NVVM is missing); a failure to compile raises.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import numba
import numba.cuda.cudadrv.libs as cuda_libs
import numba.cuda.cudadrv.nvvm as cuda_nvvm
import numba.cuda.dispatcher as cuda_dispatcher
from numba import cuda

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from polydg import backend as bk  # noqa: E402
from polydg.assembly import assemble, cuda_kernels, cuda_passes  # noqa: E402
from tests.gpu_simulator_cases import case_setup  # noqa: E402

CC = (9, 0)
NONLINEAR_CASES = {"nonlinear-2d": ("square:2", 3), "nonlinear-3d": ("cube:1", 3)}


def nonlinear_problem(d: int):
    """Every coefficient a function of the iterate (a(u, grad u) and its derivatives, c(u), f(u)), an advection
    (inflow and outflow faces), Dirichlet and Neumann faces: every path of the per-point forms."""
    import numpy as np

    from polydg.problem import Problem

    wind = np.array([0.7, 0.3, 0.1][:d])
    return Problem("every-kind", diffusion=lambda x, u, grad_u: (1 + (grad_u**2).sum(1)) ** 0.5 + 0.1 * u**2,
                   advection=wind, reaction=lambda x, u: 3 * u**2, source=lambda x, u: np.exp(0.3 * u) + x[:, 0],
                   dirichlet=lambda x: x[:, 0], is_neumann=lambda x, n: x[:, 1] > 0.99, neumann=0.3)


def record_nonlinear(cases: list[str], calls: dict) -> None:
    """Linearise each nonlinear case with ``DeviceExecutor`` on NumPy arrays, recording its launches."""
    import numpy as np

    from polydg.assembly import cuda_linearized
    from polydg.mesh import from_spec
    from polydg.nonlinear import NonlinearSystem
    from polydg.partition import agglomerate
    from polydg.space import DGSpace

    def record(executor, kernel, name, n, *args):
        signature = tuple(numba.typeof(a) for a in (0,) + args)
        calls.setdefault((f"nl_{name}", executor.plan.mesh.dim, signature), (kernel, (0,) + args))
        if name in ("field", "volume", "map_points"):  # nothing ran: the outputs read as zeros
            for out in args[-2:] if name in ("field", "map_points") else args[-1:]:
                out[...] = 0

    cuda_linearized.DeviceExecutor._launch = record
    for case in cases:
        spec, n = NONLINEAR_CASES[case]
        mesh = agglomerate(from_spec(spec), n)
        space = DGSpace(mesh, np.random.default_rng(3).integers(1, 3, mesh.n_elements))
        system = NonlinearSystem(space, nonlinear_problem(mesh.dim), backend=bk.SIMULATOR)
        u = 0.5 * np.random.default_rng(4).standard_normal(space.n_dofs)
        for newton, want in ((True, True), (False, True), (True, False)):
            system.linearize(u, newton=newton, want_jacobian=want)


def assembled(ptxas: str, ptx: str) -> str:
    """The PTX assembled for sm_90 by ``ptxas``: its registers per thread, stack frame and spills (what the
    card's local memory holds per thread), or why it failed."""
    with tempfile.TemporaryDirectory() as work:
        source = Path(work) / "kernel.ptx"
        source.write_text(ptx)
        run = subprocess.run([ptxas, f"-arch=sm_{CC[0]}{CC[1]}", "-v", "-o", str(Path(work) / "kernel.cubin"),
                              str(source)], capture_output=True, text=True, timeout=300)
    if run.returncode != 0:
        raise RuntimeError(f"ptxas refused the PTX: {run.stderr.strip()[-2000:]}")
    registers = re.findall(r"Used (\d+) registers", run.stderr)
    frame = re.findall(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", run.stderr)
    frame = frame[-1] if frame else ("?", "?", "?")
    return (f"sm_{CC[0]}{CC[1]}: {registers[-1] if registers else '?'} registers, {frame[0]} B stack frame, "
            f"{frame[1]} B spill stores, {frame[2]} B spill loads")


def main(libdevice: str, cases: list[str]) -> int:
    if not cuda_nvvm.is_available():
        print("GPU-PTX-SKIP NVVM (libnvvm) is not available")
        return 0
    cuda_nvvm.get_libdevice = cuda_libs.get_libdevice = lambda: libdevice
    cuda_dispatcher.get_current_device = lambda: SimpleNamespace(compute_capability=CC)
    calls = {}
    ptxas = shutil.which("ptxas", path=str(Path(libdevice).resolve().parents[2] / "bin"))

    def record(ctx, kernel, name, n, key, *args, block=None):
        calls.setdefault((name, ctx.plan.mesh.dim, ctx.plan.dtype.__name__), (kernel, (0,) + args))

    def record_pattern(row_element, *args):  # the pattern's index kernel (launched before the executor's)
        calls.setdefault(("pattern_indices", 0, "int64"), (cuda_kernels.pattern_indices, (0, row_element) + args))

    def record_queued(ctx, kernel, name, n, *args):  # the point maps: nothing ran, the points read as zeros
        record(ctx, kernel, name, n, None, *args)
        for out in args[-2:]:
            out[...] = 0

    cuda_passes.DeviceContext.run_kernel = record  # every reduction's launches (run() calls it too)
    cuda_passes.DeviceContext.launch_queued = record_queued
    cuda_kernels.fill_pattern_indices = record_pattern
    cuda_kernels.warm_pattern_indices = lambda xp: None
    bk.resolve_backend = lambda name, say=None: bk.SIMULATOR  # the executor on NumPy arrays, nothing launched
    record_nonlinear([c for c in cases if c in NONLINEAR_CASES], calls)
    for case in (c for c in cases if c not in NONLINEAR_CASES):
        space, problem = case_setup(case)
        # float64 every GPU reduction, float32 the deterministic one (the atomic float32 kernels differ from
        # the float64 ones only in the type of their atomic adds; the ordered sums' share the rows'
        # device functions): CI's time
        for approach, precision in (("2", "double"), ("atomic", "double"), ("ordered", "double"), ("blocks", "double"),
                                    ("2", "single")):
            assemble(space, problem, approach=approach, precision=precision, backend=bk.SIMULATOR)
    for (name, dim, dtype), (kernel, args) in sorted(calls.items(), key=lambda item: str(item[0])):
        start = time.perf_counter()
        ptx, _ = cuda.compile_ptx(kernel.py_func, tuple(numba.typeof(a) for a in args), cc=CC)
        where = f"{dim}D" if dim else "any"
        dtype = dtype if isinstance(dtype, str) else "float64"
        print(f"{name:16s} {where:3s} {dtype:8s} PTX {len(ptx) // 1024:5d} kB in {time.perf_counter() - start:.1f} s",
              flush=True)
        if ptxas:
            print(f"{'':16s} {where:3s} {dtype:8s} {assembled(ptxas, ptx)}", flush=True)
        if ".entry" not in ptx:
            raise RuntimeError(f"{name}: no kernel entry in the PTX")
    print(f"GPU-PTX-OK {len(calls)} kernels for sm_{CC[0]}{CC[1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2:]))
