"""Keep the GPU kernels of one assembly in numba-cuda's disk cache and load them back, on a machine without a GPU.

A device assembly's kernels are made by ``cuda_kernels.kernel`` (``cuda.jit(cache=True)``): the first process
that compiles one saves it, the next loads it.  This script runs the executor of a small 2D assembly (approach
2, the row kernels) on NumPy arrays with its launches recorded, as ``gpu_ptx_check.py`` does, then has each
recorded kernel's dispatcher compile for the recorded argument types: the path a launch takes, through
numba-cuda's cache.  Stand-ins replace what only a driver gives (the device's compute capability, a context,
the cubin's link at ``bind``); NVVM compiles for real, and the cache saves and loads the compiled kernels as on
a card.  The kernels' cache is ``CACHE`` (the arguments' folder), apart from polydg's own.

    python tests/gpu_cache_check.py LIBDEVICE CACHE

prints one line per kernel, ``name hits misses`` and a hash of its PTX, then ``GPU-CACHE-OK n`` (or ``GPU-CACHE-SKIP`` and why,
where NVVM is missing).
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path
from types import SimpleNamespace

import numba
import numba.cuda.codegen as cuda_codegen
import numba.cuda.cudadrv.devices as cuda_devices
import numba.cuda.cudadrv.libs as cuda_libs
import numba.cuda.cudadrv.nvvm as cuda_nvvm
import numba.cuda.dispatcher as cuda_dispatcher

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import polydg.assembly  # noqa: E402,F401  (the CPU kernels, cached in polydg's own folder)
from polydg import backend as bk  # noqa: E402

CC = (9, 0)


def stand_ins(libdevice: str) -> None:
    """What a driver would tell numba-cuda, so that it compiles and caches without one."""
    device = SimpleNamespace(compute_capability=CC, id=0)
    cuda_nvvm.get_libdevice = cuda_libs.get_libdevice = lambda: libdevice
    cuda_dispatcher.get_current_device = lambda: device
    cuda_devices.get_context = lambda *args, **kwargs: SimpleNamespace(device=device)
    cuda_codegen.JITCUDACodegen.magic_tuple = lambda self: ("no driver", CC)
    cuda_dispatcher._Kernel.bind = lambda self: None  # the link to a cubin: the driver's


def main(libdevice: str, cache: str) -> int:
    if not cuda_nvvm.is_available():
        print("GPU-CACHE-SKIP NVVM (libnvvm) is not available")
        return 0
    stand_ins(libdevice)
    # the GPU kernels' folder alone: numba-cuda reads the environment again at each compilation (the CPU
    # kernels, made when polydg.assembly was imported, keep polydg's folder)
    os.environ["NUMBA_CACHE_DIR"] = numba.config.CACHE_DIR = cache
    from polydg.assembly import assemble, cuda_kernels, cuda_passes
    from polydg.mesh import from_spec
    from polydg.partition import agglomerate
    from polydg.problem import builtin_problem
    from polydg.space import DGSpace

    calls = {}

    def record(ctx, kernel, name, n, key, *args, block=None):
        calls.setdefault(name, (kernel, (0,) + args))

    def record_queued(ctx, kernel, name, n, *args):  # the point maps: nothing ran, the points read as zeros
        record(ctx, kernel, name, n, None, *args)
        for out in args[-2:]:
            out[...] = 0

    cuda_passes.DeviceContext.run_kernel = record
    cuda_passes.DeviceContext.launch_queued = record_queued
    cuda_kernels.fill_pattern_indices = lambda row_element, *args: calls.setdefault(
        "pattern_indices", (cuda_kernels.pattern_indices, (0, row_element) + args))
    cuda_kernels.warm_pattern_indices = lambda xp: None
    bk.resolve_backend = lambda name, say=None: bk.SIMULATOR  # the executor on NumPy arrays, nothing launched
    assemble(DGSpace(agglomerate(from_spec("square:2"), 3), 1), builtin_problem("poisson", 2), approach="2",
             backend=bk.SIMULATOR)
    for name, (kernel, args) in sorted(calls.items()):
        signature = tuple(numba.typeof(a) for a in args)
        kernel.compile(signature)
        hits, misses = (sum(counts.values()) for counts in (kernel.stats.cache_hits, kernel.stats.cache_misses))
        ptx = kernel.overloads[signature].inspect_asm(CC)  # the code compiled, or loaded: the same text
        print(name, hits, misses, hashlib.sha256(ptx.encode()).hexdigest()[:16], flush=True)
    print(f"GPU-CACHE-OK {len(calls)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
