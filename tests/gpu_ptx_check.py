"""Compile every GPU kernel of the executor to PTX with numba-cuda and NVVM, on a machine without a GPU.

The simulator runs the kernels' Python source, so it cannot see what only
the real compiler checks: numba-cuda's typing of the device code, local
arrays of compile-time shapes, constant memory, atomics, and NVVM itself.
This script runs the GPU executor (``cuda_passes.py``) on NumPy arrays with
its launches replaced by a record of each kernel and its arguments, then
compiles each recorded kernel with ``numba.cuda.compile_ptx`` for compute
capability 9.0 (an H100).  Two stand-ins make that possible without a
driver: the current device's compute capability (asked for when a kernel
calls a device function) and the path of NVVM's libdevice (numba-cuda finds
it through NVRTC, which a CUDA toolkit without NVRTC lacks).

    python tests/gpu_ptx_check.py LIBDEVICE CASE [CASE ...]

prints one line per kernel and ``GPU-PTX-OK`` (or ``GPU-PTX-SKIP`` and why,
where NVVM is missing); a failure to compile raises.
"""

from __future__ import annotations

import sys
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


def main(libdevice: str, cases: list[str]) -> int:
    if not cuda_nvvm.is_available():
        print("GPU-PTX-SKIP NVVM (libnvvm) is not available")
        return 0
    cuda_nvvm.get_libdevice = cuda_libs.get_libdevice = lambda: libdevice
    cuda_dispatcher.get_current_device = lambda: SimpleNamespace(compute_capability=CC)
    calls = {}

    def record(ctx, name, n, key, *args):
        kernel = getattr(ctx.kernels, name)
        calls.setdefault((name, ctx.plan.mesh.dim, ctx.plan.dtype.__name__), (kernel, (0,) + args))

    def record_pattern(row_element, *args):  # the pattern's index kernel (launched before the executor's)
        calls.setdefault(("pattern_indices", 0, "int64"), (cuda_kernels.pattern_indices, (0, row_element) + args))

    cuda_passes.DeviceContext.run = record
    cuda_kernels.fill_pattern_indices = record_pattern
    cuda_kernels.warm_pattern_indices = lambda xp: None
    bk.resolve_backend = lambda name, say=None: bk.SIMULATOR  # the executor on NumPy arrays, nothing launched
    for case in cases:
        space, problem = case_setup(case)
        # float64 both reductions, float32 the deterministic one (the atomic float32 kernels differ from
        # the float64 ones only in the type of their atomic adds): CI's time
        for approach, precision in (("2", "double"), ("atomic", "double"), ("2", "single")):
            assemble(space, problem, approach=approach, precision=precision, backend=bk.SIMULATOR)
    for (name, dim, dtype), (kernel, args) in sorted(calls.items()):
        start = time.perf_counter()
        ptx, _ = cuda.compile_ptx(kernel.py_func, tuple(numba.typeof(a) for a in args), cc=CC)
        where = f"{dim}D" if dim else "any"
        print(f"{name:16s} {where:3s} {dtype:8s} PTX {len(ptx) // 1024:5d} kB in {time.perf_counter() - start:.1f} s",
              flush=True)
        if ".entry" not in ptx:
            raise RuntimeError(f"{name}: no kernel entry in the PTX")
    print(f"GPU-PTX-OK {len(calls)} kernels for sm_{CC[0]}{CC[1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2:]))
