"""Digests of the matrices and loads that the command line writes, for the bit-for-bit checks of
``test_digests.py``: the default run, a 3D run with mixed degrees, a space-time march's last slab and
the same 3D run gathered from 2 ranks.

The compiled kernels reassociate their sums as the host's vector instructions allow (``batched._FAST``),
so the bits are those of a kind of CPU: the digests are stored per CPU as LLVM names it (``host_cpu``).
``python tests/matrix_digests.py --write`` stores this CPU's in ``tests/data/matrix_digests.json`` beside
the others (the first were made at the commit before the redesign of issue #29; a change that moves any
bit of them must say why).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import scipy.sparse as sp

HERE = Path(__file__).resolve().parent
STORED = HERE / "data" / "matrix_digests.json"

#: case name -> (command-line arguments, ranks)
CASES = {
    "default": ([], 1),
    "3d": (["--mesh", "cube:4", "--agglomerate", "20", "--degree", "1:2", "--seed", "3", "--problem", "paper-3d"], 1),
    "slab": (["--mesh", "square:8", "--agglomerate", "12", "--degree", "1", "--problem", "paper-2d1",
              "--time-slabs", "2", "--final-time", "0.5"], 1),
    "3d-ranks2": (["--mesh", "cube:4", "--agglomerate", "20", "--degree", "1:2", "--seed", "3", "--problem",
                   "paper-3d"], 2),
}


def digest(directory: Path) -> dict:
    """sha256 of the CSR arrays and the load (as little-endian bytes), and the sizes."""
    matrix = sp.load_npz(directory / "matrix.npz").tocsr()
    rhs = np.load(directory / "rhs.npy")
    h = hashlib.sha256()
    for a in (matrix.indptr.astype("<i8"), matrix.indices.astype("<i8"), matrix.data.astype("<f8"),
              rhs.astype("<f8")):
        h.update(np.ascontiguousarray(a).tobytes())
    return {"sha256": h.hexdigest(), "shape": list(matrix.shape), "nnz": int(matrix.nnz),
            "abs_sum": float(np.abs(matrix.data).sum()), "rhs_abs_sum": float(np.abs(rhs).sum())}


def host_cpu() -> str:
    """The CPU the kernels are compiled for, as LLVM names it (``NUMBA_CPU_NAME`` where set)."""
    import llvmlite.binding as llvm

    return os.environ.get("NUMBA_CPU_NAME") or llvm.get_host_cpu_name()


def stored() -> dict:
    """CPU name -> {"commit", "cases"}."""
    return json.loads(STORED.read_text())["by_cpu"]


def run_case(name: str, workdir: Path) -> dict:
    args, ranks = CASES[name]
    out = workdir / name
    command = [sys.executable, "-m", "polydg.assemble", *args, "--output", str(out), "--quiet"]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.pop("NUMBA_NUM_THREADS", None)
    if ranks > 1:
        command = [shutil.which("mpiexec"), "-n", str(ranks), *command]
    r = subprocess.run(command, capture_output=True, text=True, env=env, cwd=HERE.parent, timeout=600)
    if r.returncode != 0:
        raise RuntimeError(f"{name}: exit {r.returncode}: {r.stderr[-2000:]}")
    return digest(out)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        digests = {name: run_case(name, Path(tmp)) for name in CASES}
    if "--write" in sys.argv:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=HERE).stdout.strip()
        by_cpu = stored() if STORED.exists() else {}
        import llvmlite
        import numba

        by_cpu[host_cpu()] = {"commit": commit, "machine": platform.machine(), "numba": numba.__version__,
                              "llvmlite": llvmlite.__version__, "cases": digests}
        STORED.write_text(json.dumps({"by_cpu": by_cpu}, indent=1) + "\n")
    print(json.dumps(digests, indent=1))


if __name__ == "__main__":
    main()
