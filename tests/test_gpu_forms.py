"""The per-point forms compiled by numba-cuda, run on the CUDA simulator, against the CPU kernels.

``launch/gpu_forms_check.py`` compiles forms.py's functions as device code
(one thread per sub-simplex, one per interior face side) and compares every
block and load value with the CPU entity kernels; here it runs under
NUMBA_ENABLE_CUDASIM=1 on a tiny mesh.  On a real GPU the same script was run
on an H100 (figures in docs/performance.md).
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("args", [["--mesh", "cube:2", "--elements", "4", "--degree", "1"],
                                  ["--mesh", "square:3", "--elements", "5", "--degree", "2", "--problem", "paper-2d"]])
def test_forms_as_cuda_device_functions_match_cpu_kernels(args):
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1",
               PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    probe = subprocess.run([sys.executable, "-c", "from numba import cuda; cuda.jit"], env=env,
                           capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"numba.cuda simulator unavailable: {probe.stderr.strip().splitlines()[-1:]}")
    out = subprocess.run([sys.executable, str(REPO / "launch" / "gpu_forms_check.py"), *args], env=env,
                         capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "GPU-FORMS-OK" in out.stdout
    assert "max rel. difference" in out.stdout
