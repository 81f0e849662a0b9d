"""The prepared GPU run (launch/gpu_run.sh, launch/gpu_run.py; issue #27 item 1), tried on the CPU.

``launch/gpu_run.sh --simulator --quick`` runs every stage's code (the
install check, the device, correctness, GPU tests, kernels, benchmarks) under
numba-cuda's simulator with one item per stage, and must write a
``results.json`` that names every stage with its status.  The full simulator
run (``launch/gpu_run.sh --simulator``: every correctness case, the wider
test selection, more kernels and benchmark rows) is the command of
docs/performance.md, too slow for CI.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "launch"))
import gpu_run  # noqa: E402
import gpu_test_log  # noqa: E402


def _env() -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("OUT", "POLYDG_TEST_BACKEND", "NUMBA_ENABLE_CUDASIM")}
    env["OMP_NUM_THREADS"] = "1"
    return env


def test_the_simulator_run_writes_every_stage(tmp_path):
    out = tmp_path / "out"
    run = subprocess.run(["bash", str(REPO / "launch" / "gpu_run.sh"), "--simulator", "--quick", str(out)],
                         env=_env(), capture_output=True, text=True, timeout=900, cwd=REPO)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    results = json.loads((out / "results.json").read_text())
    assert results["mode"] == "simulator" and results["quick"] is True
    stages = results["stages"]
    assert list(stages) == ["install", *gpu_run.STAGES]
    for name, rec in stages.items():
        assert rec["status"] in ("ok", "skipped"), (name, rec)
        assert "seconds" in rec
    # the install step checks the wheels folder when there is one (it is made by launch/gpu_wheels.sh)
    assert stages["install"]["status"] == ("ok" if (REPO / "launch" / "wheels").is_dir() else "skipped")
    device = stages["device"]
    assert device["summary"]["device"] == "CPU simulator" and device["summary"]["cuda"] == "simulator"
    correctness = stages["correctness"]["summary"]
    assert correctness["cases"] == 4 and correctness["checks_failed"] == 0 and correctness["checks"] > 20
    report = stages["correctness"]["details"]["cases"]["report/versions"]
    assert report["ok"] and report["summary_json"]["versions"]["numba_cuda"] == device["summary"]["numba_cuda"]
    assert 0 < correctness["worst_rel_diff_float64"] <= 1e-13 and correctness["worst_rel_diff_float32"] <= 1e-6
    assert stages["correctness"]["details"]["cases"]["mpi/2d"]["devices"] == ["CPU simulator"] * 2
    tests = stages["tests"]["summary"]
    assert tests["passed"] >= 3 and tests["failed"] == 0 and tests["backend"] == "cudasim"
    assert stages["kernels"]["details"]["variants"]["2d p1"]["kernels"]["volume_rows"] == "not compiled (simulator)"
    row, nonlinear = stages["bench"]["summary"]["rows"].values()  # Table 5's shape, a Newton linearisation
    assert row["dofs"] > 0 and row["gpu_rows_total"] > 0 and row["gpu_atomic_total"] > 0 and row["cpu_2_threads"] > 0
    # the deterministic reductions compared: the fastest named, and whether "auto" chose it
    fastest = min((row[f"gpu_{name}_total"], name) for name in ("rows", "ordered", "blocks"))[1]
    assert row["fastest_deterministic"] == fastest and row["default_is_fastest"] == (fastest == "rows")
    assert nonlinear["dofs"] > 0 and nonlinear["gpu_linearisation"] > 0 and nonlinear["cpu_2_threads"] > 0
    assert nonlinear["checks_failed"] == []
    assert (out / "run.log").exists() and (out / "tests-junit.xml").exists()
    assert sorted(p.name for p in out.iterdir()) == ["results.json", "run.log", "tests-junit.xml"]


def test_a_stage_past_its_limit_keeps_its_record_and_the_next_stage_runs(tmp_path):
    """The device stage held past its 3 s (POLYDG_GPU_RUN_STALL) is stopped: status "timeout", what it saved
    before is kept (the versions, saved first), and the kernels stage after it still runs."""
    out = tmp_path / "out"
    env = dict(_env(), NUMBA_ENABLE_CUDASIM="1", PYTHONPATH=str(REPO), POLYDG_GPU_RUN_STALL="device")
    run = subprocess.run([sys.executable, str(REPO / "launch" / "gpu_run.py"), "--simulator", "--quick", "--out",
                          str(out), "--stages", "device", "kernels", "--budget", "device=3"],
                         env=env, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert run.returncode == 1, run.stdout[-3000:] + run.stderr[-3000:]  # a stage that did not finish
    stages = json.loads((out / "results.json").read_text())["stages"]
    assert stages["device"]["status"] == "timeout" and stages["device"]["returncode"] is None
    assert stages["device"]["details"]["versions"]["python"] and 6 <= stages["device"]["seconds"] < 60
    assert stages["kernels"]["status"] == "ok"


def test_the_test_log_counts_outcomes_and_survives_a_cut_line(tmp_path):
    log = tmp_path / "tests.jsonl"
    lines = [{"nodeid": "a", "outcome": "passed", "message": ""}, {"nodeid": "b", "outcome": "failed", "message": "E x"},
             {"nodeid": "c", "outcome": "skipped", "message": "no GPU"}, {"nodeid": "d", "outcome": "error",
                                                                          "message": "fixture"}]
    log.write_text("".join(json.dumps(x) + "\n" for x in lines) + '{"nodeid": "e", "outc')  # killed mid-line
    got = gpu_test_log.summarise(log)
    assert got["counts"] == {"passed": 1, "failed": 1, "error": 1, "skipped": 1, "xfailed": 0, "xpassed": 0, "total": 4}
    assert got["failures"] == {"b": "E x", "d": "fixture"} and got["skip_reasons"] == {"no GPU": 1}
    assert gpu_test_log.summarise(tmp_path / "absent.jsonl")["counts"]["total"] == 0


@pytest.mark.parametrize("device, peak, bandwidth", [("NVIDIA H100 80GB HBM3", 34e12, 3.35e12),
                                                     ("NVIDIA H100 PCIe", 25.6e12, 2.0e12),
                                                     ("NVIDIA H200", 34e12, 4.8e12), ("CPU simulator", None, None)])
def test_device_peaks_by_name(device, peak, bandwidth):
    assert gpu_run.device_peaks(device) == (peak, bandwidth)


def test_the_gpu_run_fits_its_budget():
    """The stages' limits fit the run's 8 minutes on an H100, in the issue's order of importance."""
    assert gpu_run.STAGES == ("device", "correctness", "tests", "kernels", "bench")
    assert sum(gpu_run.BUDGET.values()) <= gpu_run.TOTAL <= gpu_run.RUN_TOTAL - 30 <= 8 * 60 - 30  # 30 s: pip's
    script = (REPO / "launch" / "gpu_run.sh").read_text()
    assert f"round({gpu_run.RUN_TOTAL} - " in script and script.count("timeout 30 ") == 2
    assert set(gpu_run.BUDGET) == set(gpu_run.STAGES) == set(gpu_run.SIMULATOR_BUDGET)
    for name in gpu_run.GPU_TEST_FILES:
        assert (REPO / name).is_file(), name


def test_the_bench_times_the_named_reductions_and_the_default_and_the_profile_names_its_stages(tmp_path):
    """``--bench-approaches atomic`` times atomic and the default's reduction (rows on Table 5's tetrahedra),
    not the ordered sums, with the ``--bench-option`` given (a tiny memory budget: several chunks), and with
    ``--bench-budgets`` the default's again in chunks of that budget; launch/gpu_profile.py profiles one
    assembly of a bench case and writes its stages and hottest functions."""
    out = tmp_path / "out"
    env = dict(_env(), NUMBA_ENABLE_CUDASIM="1", PYTHONPATH=str(REPO))
    run = subprocess.run([sys.executable, str(REPO / "launch" / "gpu_run.py"), "--simulator", "--quick", "--out",
                          str(out), "--stages", "bench", "--bench-only", "table5", "--bench-approaches", "atomic",
                          "--bench-option", "memory_budget_mb=0.001", "--bench-budgets", "1024"],
                         env=env, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    (row,) = json.loads((out / "results.json").read_text())["stages"]["bench"]["details"]["rows"].values()
    assert row["default"] == "2" and {"gpu-2", "gpu-atomic"} <= set(row) and "gpu-ordered" not in row
    assert row["options"] == {"memory_budget_mb": 0.001} and row["gpu-2"]["chunks"] > 1  # reached assemble
    assert row["budget-1024"]["chunks"] == 1  # --bench-budgets: the default's reduction again, in one chunk
    assert row["gpu-2"]["interior_gflops"] > 0 and row["gpu-2"]["interior_blocks_gbs"] > 0  # the faces' rates
    summary = json.loads((out / "results.json").read_text())["stages"]["bench"]["summary"]["rows"]
    assert next(iter(summary.values()))["gpu_default_total_budget-1024"][1] == 1
    assert gpu_run.bench_options(["memory_budget_mb=4096", "precision=single"]) == {"memory_budget_mb": 4096,
                                                                                    "precision": "single"}
    lines = [x for x in run.stdout.splitlines() if x.startswith("bench table5") and "dofs" in x]
    assert lines and all("rows" in x and "atomic" in x and "ordered" not in x for x in lines)
    prof = subprocess.run([sys.executable, str(REPO / "launch" / "gpu_profile.py"), "table5 cube", "--simulator",
                           "--out", str(out), "--top", "5"], env=env, capture_output=True, text=True, timeout=300,
                          cwd=REPO)
    assert prof.returncode == 0, prof.stdout[-3000:] + prof.stderr[-3000:]
    (record,) = [json.loads(p.read_text()) for p in out.glob("profile-*.json")]
    assert record["approach"] == "2" and record["launch_blocking"] == "1" and len(record["by_own_time"]) == 5
    assert record["timings_profiled"]["total_assembly"] > 0 and (out / "profile-table5-cube-1-p-1.txt").is_file()
    missing = subprocess.run([sys.executable, str(REPO / "launch" / "gpu_profile.py"), "no such case",
                              "--simulator", "--out", str(out)], env=env, capture_output=True, text=True,
                             timeout=300, cwd=REPO)
    assert missing.returncode == 2 and "no bench case" in missing.stderr


def test_the_launch_overhead_script_times_each_way_of_passing_arrays(tmp_path):
    """launch/gpu_launch_overhead.py on the simulator: the numba device arrays' way, per argument count."""
    out = tmp_path / "launch.json"
    run = subprocess.run([sys.executable, str(REPO / "launch" / "gpu_launch_overhead.py"), "--simulator",
                          "--launches", "3", "--json", str(out)], env=_env(), capture_output=True, text=True,
                         timeout=120, cwd=REPO)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    rows = json.loads(out.read_text())["seconds_per_launch"]
    assert sorted(rows, key=int) == ["1", "8", "32"]
    assert all(set(r) == {"numba to_device"} and r["numba to_device"] > 0 for r in rows.values())


def test_the_transfer_script_times_each_way_of_holding_the_host_memory(tmp_path):
    """launch/gpu_transfer.py with NumPy for CuPy: every way timed on the bytes asked for; bad sizes refused."""
    out = tmp_path / "transfer.json"
    script = str(REPO / "launch" / "gpu_transfer.py")
    run = subprocess.run([sys.executable, script, "--simulator", "--mb", "4", "--threads", "2", "--repeat", "1",
                          "--json", str(out)], env=_env(), capture_output=True, text=True, timeout=120, cwd=REPO)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    result = json.loads(out.read_text())
    assert list(result["rows"]) == ["host memcpy", "pageable", "pinned, fresh", "pinned, pooled",
                                    "pinned, 2 threads", "pinned, resident", "polydg, 1 thread",
                                    "to host, pageable", "to host, pinned"]
    assert 0 <= 4e6 - result["bytes"] < 8 * result["arrays"] and all(r["seconds"] > 0 for r in result["rows"].values())
    bad = subprocess.run([sys.executable, script, "--simulator", "--mb", "0"], env=_env(), capture_output=True,
                         text=True, timeout=60, cwd=REPO)
    assert bad.returncode == 2 and "--mb must be positive" in bad.stderr


def test_the_largest_rows_are_sized_by_cupys_int32_and_time_the_default_alone(tmp_path):
    """Table 5's shape at the largest sizes a card holds: cube:N from the entries CuPy's int32 indices allow (an
    upper bound of the count, which the exact count of small cubes stays under), timed with the default's
    reduction alone, neither again in other chunks nor with the plan kept."""
    from polydg.assembly import assemble
    from polydg.mesh import build_polytopic_mesh, from_spec
    from polydg.problem import builtin_problem
    from polydg.space import DGSpace

    limit = gpu_run.CUPY_NNZ_LIMIT
    assert (gpu_run.largest_cube(2, limit), gpu_run.largest_cube(3, limit)) == (87, 55)
    assert gpu_run.CUPY_NNZ_LIMIT < 2**31 and gpu_run.largest_cube(1, 0) == 1
    for n, p in ((2, 1), (2, 2)):  # the bound holds, and is within the boundary's share of the count
        space = DGSpace(build_polytopic_mesh(from_spec(f"cube:{n}")), p)
        nnz = assemble(space, builtin_problem("paper-3d", 3)).matrix.nnz
        bound = 30 * ((p + 1) * (p + 2) * (p + 3) // 6) ** 2 * n**3
        assert 0.4 * bound < nnz <= bound and gpu_run.largest_cube(p, nnz - 1) < n <= gpu_run.largest_cube(p, bound)
    out = tmp_path / "out"
    env = dict(_env(), NUMBA_ENABLE_CUDASIM="1", PYTHONPATH=str(REPO))
    run = subprocess.run([sys.executable, str(REPO / "launch" / "gpu_run.py"), "--simulator", "--out", str(out),
                          "--stages", "bench", "--bench-only", "largest", "--bench-budgets", "1024"],
                         env=env, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    ((label, row),) = json.loads((out / "results.json").read_text())["stages"]["bench"]["details"]["rows"].items()
    assert label == "table5 largest cube:1 p=3" and row["table"] == "largest"
    assert [k for k in row if k.startswith(("gpu-", "budget-"))] == [f"gpu-{row['default']}"]
