"""What a numba-cuda kernel launch costs the host, by how its array arguments are passed.

    python launch/gpu_launch_overhead.py [--launches 200] [--json PATH] [--simulator]

polydg's GPU kernels take a few structures holding 20-30 arrays (``arguments.py``); the profiles of
``launch/gpu_profile.py`` put numba-cuda's handling of them (typing each CuPy array through DLPack,
wrapping it as a strided memory view) at about 2 ms per launch, a tenth of a Table 2 assembly's 17
launches.  This measures one trivial kernel (one thread, reading its arguments' first entries) launched
``--launches`` times with 1, 8 and 32 array arguments given as CuPy arrays, as numba device arrays made
from them once (``cuda.as_cuda_array``, no copy), as such views made at every launch (polydg's
``cuda_kernels.launch_view``, as a chunk's arrays are passed) and as numba device arrays of
``cuda.to_device``: the host's seconds per launch (launches queued, then one wait) for each.  The choice between keeping the
plan's tables as CuPy arrays or as numba views is made from these figures.  ``--simulator`` runs the numba
device arrays alone under numba-cuda's simulator (no CuPy there), to test the script.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings


def _kernel(n_arrays: int):
    """A kernel of ``n_arrays`` float64 arrays whose one thread adds their first entries into the first."""
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from polydg.backend import numpy_aliases_for_numba_cuda

    numpy_aliases_for_numba_cuda()
    from numba import cuda

    names = [f"a{k}" for k in range(n_arrays)]
    body = "".join(f"        s += {name}[0]\n" for name in names[1:])
    source = (f"def kernel({', '.join(names)}):\n    if cuda.grid(1) == 0:\n        s = a0[0]\n{body}"
              "        a0[0] = s\n")
    namespace = {"cuda": cuda}
    exec(source, namespace)  # noqa: S102 - a fixed text built from integers
    return cuda.jit(namespace["kernel"])


def per_launch(kernel, arrays, launches: int, synchronize) -> float:
    """Host seconds per launch of ``kernel[1, 1](*arrays)``, after one that compiles; ``arrays`` a list, or a
    callable that makes the list at each launch (its time counted)."""
    make = arrays if callable(arrays) else (lambda: arrays)
    kernel[1, 1](*make())
    synchronize()
    t = time.perf_counter()
    for _ in range(launches):
        kernel[1, 1](*make())
    queued = time.perf_counter() - t
    synchronize()
    return queued / launches


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--launches", type=int, default=200)
    ap.add_argument("--json", help="write the figures here")
    ap.add_argument("--simulator", action="store_true")
    args = ap.parse_args(argv)
    if args.simulator:
        os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
    import numpy as np
    from numba import cuda

    rows = {}
    for n_arrays in (1, 8, 32):
        kernel = _kernel(n_arrays)
        host = [np.zeros(16) for _ in range(n_arrays)]
        ways = {"numba to_device": [cuda.to_device(a) for a in host]}
        if not args.simulator:
            import cupy

            on_device = [cupy.asarray(a) for a in host]
            ways["cupy"] = on_device
            ways["numba view of cupy"] = [cuda.as_cuda_array(a) for a in on_device]
            from polydg.assembly.cuda_kernels import launch_view

            # as polydg views a chunk's arrays: at each launch, no stream waited for
            ways["numba view made per launch"] = lambda on_device=on_device: [launch_view(a) for a in on_device]
        with warnings.catch_warnings():  # a one-thread grid: numba-cuda's under-utilisation warning
            warnings.simplefilter("ignore")
            rows[n_arrays] = {way: per_launch(kernel, arrays, args.launches, cuda.synchronize)
                              for way, arrays in ways.items()}
        print(f"{n_arrays:3d} arrays: " + ", ".join(f"{way} {1e6 * s:.1f} us" for way, s in rows[n_arrays].items()),
              flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"launches": args.launches, "simulator": args.simulator, "seconds_per_launch": rows}, f,
                      indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
