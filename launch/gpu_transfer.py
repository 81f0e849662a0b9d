"""What a fresh assembly's host-to-device copies cost, by how the host memory is held.

    python launch/gpu_transfer.py [--mb 180] [--threads 4 8] [--repeat 5] [--json PATH] [--simulator]

A fresh device assembly copies the mesh's and the plan's tables to the card: on Table 2 p = 1's mesh some
180 MB (face vertices and normals, sub-simplices, face elements, ...), about a third of its total on the H200
(`to_device_seconds` in the bench).  ``cupy.asarray`` of a NumPy array copies it, on the calling thread, into
pinned memory from CuPy's pool and queues the device's copy from there (a source already pinned is sent as it
is), so one host thread's memcpy runs beside the copy engine.  This measures the same bytes, in the same mix
of array sizes, copied

- ``pageable``: ``cupy.asarray`` of each NumPy array (CuPy's way, and polydg's for arrays under 8 MiB);
- ``pinned, fresh``: each array first copied into newly allocated pinned memory (``cupyx.empty_pinned``);
- ``pinned, pooled``: the same into pinned memory the pool already holds (a later assembly's case);
- ``pinned, N threads``: pooled pinned memory filled by N host threads, each a slice (NumPy's copy releases
  the GIL);
- ``pinned, resident``: the data already in pinned memory (the copy engine alone: the bound);
- ``polydg``: ``polydg.backend.contiguous``, polydg's own way (arrays from ``STAGED_COPY_BYTES`` up through
  pinned memory filled by the kernels' threads, smaller ones CuPy's way);

the other way, the same arrays from the device into new NumPy memory (``.get()``, as an assembled matrix
comes to the host) and into pinned memory; and the host's own memcpy of the same bytes, for scale.  The
medians of ``--repeat`` runs, seconds and GB/s.  Whether polydg fills its staging memory on several threads
is decided from these figures.  ``--simulator`` runs the script's code with NumPy standing in for CuPy (no
card: the figures mean nothing), to test it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))  # the tree's polydg

#: the share of each table in a fresh Table 2 p = 1 assembly's copies (docs/performance.md, thirteenth session:
#: face vertices and normals 29 MB each, sub-simplices 23 MB, face elements 19 MB, the rest smaller)
MIX = (("face_vertices", np.int64, 29), ("face_normal", np.float64, 29), ("simplices", np.int64, 23),
       ("face_elements", np.int64, 19), ("face_measure", np.float64, 10), ("sigma", np.float64, 10),
       ("simplex_volume", np.float64, 6), *((f"smaller table {k}", np.int64, 6) for k in range(9)))


def tables(total_mb: float) -> list[np.ndarray]:
    """Arrays of the mix's sizes, scaled to ``total_mb`` in all, filled (touched) with values."""
    scale = total_mb / sum(mb for _, _, mb in MIX)
    rng = np.random.default_rng(0)
    out = []
    for _, dtype, mb in MIX:
        n = max(int(mb * scale * 1e6) // np.dtype(dtype).itemsize, 1)
        out.append(rng.integers(0, 2**31, n).astype(dtype))
    return out


class Device:
    """The copy's two ends: CuPy and its pinned memory on a card, NumPy standing in for both on the simulator."""

    def __init__(self, simulator: bool) -> None:
        self.simulator = simulator
        if not simulator:
            import cupy
            import cupyx

            self.cupy, self.cupyx = cupy, cupyx

    def to_device(self, a: np.ndarray):
        return np.array(a) if self.simulator else self.cupy.asarray(a)

    def pinned(self, like: np.ndarray) -> np.ndarray:
        return np.empty_like(like) if self.simulator else self.cupyx.empty_pinned(like.shape, like.dtype)

    def polydg(self, a: np.ndarray):
        """polydg's copy of ``a`` to the device (on the simulator: its staged copy into NumPy memory)."""
        from polydg import backend as bk

        if not self.simulator:
            return bk.contiguous(self.cupy, a)
        return bk.staged_copy(a, np.empty, np.array) if a.nbytes >= bk.STAGED_COPY_BYTES else np.array(a)

    def to_host(self, a, out: np.ndarray | None = None) -> np.ndarray:
        if self.simulator:
            return np.copyto(out, a) if out is not None else np.array(a)
        return a.get(out=out)

    def synchronize(self) -> None:
        if not self.simulator:
            self.cupy.cuda.Device().synchronize()

    def free_pool(self) -> None:
        if not self.simulator:
            self.cupy.get_default_pinned_memory_pool().free_all_blocks()


def fill(dst: np.ndarray, src: np.ndarray, pool: ThreadPoolExecutor | None, threads: int) -> None:
    """``dst[:] = src``, in ``threads`` slices on ``pool`` where given."""
    if pool is None or threads <= 1:
        np.copyto(dst, src)
        return
    bounds = np.linspace(0, len(src), threads + 1).astype(np.int64)
    list(pool.map(lambda k: np.copyto(dst[bounds[k]:bounds[k + 1]], src[bounds[k]:bounds[k + 1]]), range(threads)))


def timed(run, device: Device, repeat: int) -> float:
    """The median seconds of ``run()`` (then the device's wait), after one untimed run."""
    run()
    device.synchronize()
    seconds = []
    for _ in range(repeat):
        t = time.perf_counter()
        run()
        device.synchronize()
        seconds.append(time.perf_counter() - t)
    return statistics.median(seconds)


def measure(total_mb: float, threads: list[int], repeat: int, simulator: bool) -> dict:
    device = Device(simulator)
    arrays = tables(total_mb)
    nbytes = sum(a.nbytes for a in arrays)
    rows = {}

    def row(name: str, seconds: float) -> None:
        rows[name] = {"seconds": seconds, "gb_per_s": nbytes / seconds / 1e9}
        print(f"{name:24s} {seconds * 1e3:8.2f} ms  {nbytes / seconds / 1e9:7.2f} GB/s", flush=True)

    row("host memcpy", timed(lambda: [np.copy(a) for a in arrays], device, repeat))
    row("pageable", timed(lambda: [device.to_device(a) for a in arrays], device, repeat))

    def fresh() -> None:
        device.free_pool()
        out = []
        for a in arrays:
            p = device.pinned(a)
            np.copyto(p, a)
            out.append(device.to_device(p))

    row("pinned, fresh", timed(fresh, device, repeat))
    staging = [device.pinned(a) for a in arrays]
    for n in sorted(set([1, *threads])):
        with ThreadPoolExecutor(max_workers=n) as pool:
            def pooled(pool=pool, n=n) -> None:
                out = []
                for a, p in zip(arrays, staging):
                    fill(p, a, pool, n)
                    out.append(device.to_device(p))
            row("pinned, pooled" if n == 1 else f"pinned, {n} threads", timed(pooled, device, repeat))
    row("pinned, resident", timed(lambda: [device.to_device(p) for p in staging], device, repeat))
    from polydg.threads import thread_count

    n = thread_count()
    row(f"polydg, {n} thread{'s' if n > 1 else ''}", timed(lambda: [device.polydg(a) for a in arrays], device,
                                                             repeat))
    # the other way: an assembled matrix's arrays to the host (``to_host`` in the bench)
    on_device = [device.to_device(a) for a in arrays]
    row("to host, pageable", timed(lambda: [device.to_host(a) for a in on_device], device, repeat))
    row("to host, pinned", timed(lambda: [device.to_host(a, p) for a, p in zip(on_device, staging)], device,
                                 repeat))
    return {"bytes": nbytes, "arrays": len(arrays), "repeat": repeat, "simulator": simulator, "rows": rows}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=float, default=180.0, help="megabytes copied in all (default: Table 2 p = 1's)")
    ap.add_argument("--threads", type=int, nargs="+", default=[4, 8], help="host threads filling pinned memory")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", help="write the figures here")
    ap.add_argument("--simulator", action="store_true", help="NumPy for CuPy: the script's code, no figures")
    args = ap.parse_args(argv)
    if args.mb <= 0 or args.repeat < 1 or min(args.threads) < 1:
        ap.error("--mb must be positive, --repeat and --threads at least 1")
    result = measure(args.mb, args.threads, args.repeat, args.simulator)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
