"""The assembly benchmark script runs end to end on a tiny case and reports what it promises."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parents[1] / "launch" / "bench_assembly.py"


def test_bench_assembly_tiny_run_with_baseline(tmp_path):
    out = tmp_path / "bench.json"
    run = subprocess.run([sys.executable, str(BENCH), "--case", "2d", "--degrees", "1", "--scale", "0.0005",
                          "--baseline", "--dgemm-size", "256", "--stream-size", "16", "--json", str(out)],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    assert "best" in run.stdout and "% of DGEMM" in run.stdout and "Approach 1 / Approach 2 total" in run.stdout
    report = json.loads(out.read_text())
    # the reference is the best rate found, never below NumPy's own
    assert report["dgemm_gflops"] >= report["dgemm_numpy_gflops"] > 0
    (case,) = report["results"]
    assert case["p"] == 1 and case["dofs"] == 3 * case["elements"]
    # the moment form does fewer operations than the contraction its rate is quoted against
    assert "contraction-equivalent" in run.stdout and 0 < case["moment_flops"] < case["volume_flops"]
    # the element kernel's reads: paper-2d has a constant A and varying b, c, f, so x, w, b, c, f per point
    assert report["stream_gbps"] > 0 and "of the streaming read rate" in run.stdout
    assert case["volume_points"] > 0 and case["volume_bytes"] == 8 * (2 + 1 + 2 + 1 + 1) * case["volume_points"]
    assert set(case["approaches"]) == {"2", "atomic", "1"}
    for timings in case["approaches"].values():
        assert timings["total_assembly"] > 0 and timings["indices"] >= 0


def test_cpu_baseline_runs_the_gpu_benchs_cases_on_the_cpu(tmp_path):
    """launch/cpu_baseline.py (the GPU-over-CPU ratios' denominators) on the GPU bench's tiny cases: each row's
    figures, the approach the default ran, and stages that account for the total."""
    out = tmp_path / "cpu.json"
    run = subprocess.run([sys.executable, str(BENCH.parent / "cpu_baseline.py"), "--tiny", "--repeat", "1",
                          "--only", "table5", "table2", "--json", str(out)], capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, run.stderr
    rows = json.loads(out.read_text())
    assert {label.split()[0] for label in rows} == {"table5", "table2"} and len(rows) >= 3
    for row in rows.values():
        assert row["approach"] == "2" and row["dofs"] > 0 and row["total_assembly"] > 0
        assert -1e-9 <= row["unstaged"] < row["total_assembly"]


PROFILE = BENCH.parent / "profile_element_kernel.py"


@pytest.mark.skipif(os.environ.get("POLYDG_BENCH_TESTS") != "1",
                    reason="compiles its own staged copy of the element kernel (17 s cold, over CI's time); "
                           "POLYDG_BENCH_TESTS=1 runs it")
def test_profile_element_kernel_stages_reproduce_the_kernel():
    # the script checks that its staged copy of element_rows gives the kernel's values bit for bit, and fails if not
    run = subprocess.run([sys.executable, str(PROFILE), "--scale", "0.01", "--cached-elements", "10", "--repeat", "1"],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    assert "reproduces element_rows bit for bit" in run.stdout
    rows = {line[:28].strip(): line[28:].split() for line in run.stdout.splitlines()[2:]}
    assert set(rows) == {"gather", "pad + Legendre values", "moments", "block from moments", "write block and load",
                         "all"}
    assert float(rows["all"][0]) > 0 and float(rows["all"][1]) > 0



def test_the_interior_face_counts_follow_the_faces_and_their_two_sides():
    """``interior_flops``: 6 (nb+ + nb-)^2 per point of each interior face, and the blocks 8 (nb+ + nb-)^2 bytes:
    square:1 as two triangles has one interior face between two P1 elements (3 + 3 functions); mixed degrees
    widen it."""
    sys.path.insert(0, str(BENCH.parent))
    from bench_assembly import interior_block_bytes, interior_flops

    from polydg.mesh import build_polytopic_mesh, from_spec
    from polydg.space import DGSpace

    mesh = build_polytopic_mesh(from_spec("square:1"))
    assert mesh.n_elements == 2 and mesh.n_interior_faces == 1
    assert interior_flops(DGSpace(mesh, 1), np.array([3])) == 6 * 36 * 3
    assert interior_block_bytes(DGSpace(mesh, 1)) == 8 * 36
    assert interior_flops(DGSpace(mesh, np.array([1, 2])), np.array([2])) == 6 * (3 + 6) ** 2 * 2
