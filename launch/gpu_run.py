"""One prepared GPU run (issue #27): the device, correctness, the GPU tests, the kernels, the benchmarks.

``launch/gpu_run.sh`` installs the carried wheels and runs this driver; it can
also be run alone::

    python launch/gpu_run.py --out OUTDIR                      # a CUDA GPU with CuPy and numba-cuda
    NUMBA_ENABLE_CUDASIM=1 python launch/gpu_run.py --simulator --out OUTDIR      # the same stages, tiny
    python launch/gpu_run.py --simulator --quick --out OUTDIR  # one item per stage (what CI runs; the
                                                               # bench: one assembly, one linearisation)

Stages, in order of importance, each in its own process with its own time
limit (``BUDGET``; the whole run fits ``TOTAL`` seconds), each saving its
record as it goes, so that a stage stopped at its limit keeps what it
finished and the later stages still run:

``device``       the card, driver, CUDA, CuPy, numba-cuda, MPI library and mpiexec
``correctness``  an assembly whose ``info`` and summary.json name the device and versions; GPU against CPU to 1e-13 (2D, 3D, a 2D+1 PQ slab, a 3D+1 slab, mixed degrees, every
                 boundary kind, chunks, element subsets), float32 within 1e-6, the row kernels bitwise
                 repeatable, the device CSR equal to the host copy, marches (P, PQ with local steps,
                 iterative) equal to the CPU march, ``mpiexec -n 2`` on the one GPU gathering the
                 one-process matrix bit for bit, the per-point forms as device functions
``tests``        ``POLYDG_TEST_BACKEND=cupy`` pytest on the files with GPU variants and the CuPy-only tests,
                 the nonlinear device executor against the CPU's among them
``kernels``      registers, local, shared and constant memory per thread of every kernel, per
                 (dimension, degree, precision, basis)
``bench``        Table 5 (paper-3d, cube:64, 6.29M dofs at p = 1), Table 2 (one paper-2d1 slab, about 1M
                 dofs at p = 1-3), a Newton linearisation (quasilinear, and with data per fine cell and on
                 a grid; 197k dofs at p = 2) against the CPU's, Table 4 (meshes 1-3, p = 1-3, on the
                 default coarse quadrature sub-triangles), then Table 5's shape at p = 2, 3 and 2-thread
                 CPU totals; kernel times, device-to-host transfer apart, rates against the card's
                 float64 peak and memory bandwidth

Everything lands in ``OUTDIR/results.json`` (one record per stage: status,
seconds, limit, summary, details), ``OUTDIR/run.log`` and
``OUTDIR/tests-junit.xml``: three files, as the device tool brings back at
most eight.  ``--simulator`` runs the same code under numba-cuda's simulator
(backend ``cudasim``) at tiny sizes.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
for _p in (REPO / "launch", REPO / "tests", REPO):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

import numpy as np  # noqa: E402

STAGES = ("device", "correctness", "tests", "kernels", "bench")
#: the GPU reductions the bench times, and their names in its log
BENCH_APPROACHES = ("2", "atomic", "ordered", "blocks")
BENCH_NAMES = {"2": "rows", "atomic": "atomic", "ordered": "ordered", "blocks": "blocks"}
#: seconds per stage on an H100 (the simulator's tiny sizes need far less); the whole run: TOTAL.  What the
#: card runs took (docs/performance.md): device 2-3 s; correctness 90-108 s for the 16 cases, compiling the GPU
#: kernels into the disk cache; tests about 150 s for all of them, loading those kernels; kernels 37-50 s for
#: the 11 variants in 14 processes; the bench about 450 s for every row with all four reductions (its 80 s
#: reach Table 4 mesh 1): a second run gives it the rest with the default alone (``-- --stages bench
#: --bench-only "mesh 2" "mesh 3" cube:48 largest --bench-approaches auto --budget bench=250 --total 260``)
BUDGET = {"device": 10, "correctness": 115, "tests": 195, "kernels": 50, "bench": 80}
TOTAL = 450
#: the whole run, the install step (gpu_run.sh, at most 30 s) included: 8 minutes on an H100
RUN_TOTAL = 480
#: the simulator's limits: its cases are tiny, but a first run on a loaded 2-core machine compiles every CPU
#: kernel (minutes) and runs each GPU thread as a Python thread
SIMULATOR_BUDGET = {"device": 60, "correctness": 420, "tests": 300, "kernels": 120, "bench": 300}
#: a stage is not started with less than this left
MIN_STAGE = 10
#: the process of a stage is stopped this long after its limit (the stage itself stops short of it)
GRACE = 10
#: float64 against the CPU; float32 against the CPU's float64: the simulator cases' documented bound
#: (tests/test_gpu_assembly.py) and, for the larger cases of degree 3, the CPU's own float32 floor
#: (tests/test_assembly.py::test_single_precision_error_floor; the CPU's float32 is 3.4e-6 on 2d-medium)
F64_TOL, F32_TOL, F32_FLOOR = 1e-13, 1e-6, 1e-5

#: test files whose assemblies follow POLYDG_TEST_BACKEND (tests/conftest.py), and the CuPy-only tests
GPU_TEST_FILES = ("tests/test_gpu_assembly.py", "tests/test_gpu_offload.py", "tests/test_assembly.py",
                  "tests/test_spacetime.py", "tests/test_solve.py", "tests/test_cli.py",
                  "tests/test_problem_protocol.py", "tests/test_quadrature_simplices.py", "tests/test_moments.py",
                  "tests/test_convergence.py", "tests/test_nonlinear.py")
#: tests that check the simulator or the PTX on the CPU (CI runs them): not the card's business
CPU_ONLY_TESTS = ("match_the_cpu", "bitwise_repeatable", "device_pattern_is_the_host", "march_on_the_device_matches",
                  "pq_slab_on_the_device", "compile_to_ptx", "runs_on_the_simulator", "two_mpi_ranks",
                  "executor_on_the_simulator", "saved_to_and_loaded")
#: of the nonlinear tests (whose NonlinearSystem follows POLYDG_TEST_BACKEND), the device executor's against
#: the CPU's: the others are the CPU's business and their Newton solves would take the stage's time
NONLINEAR_SELECT = "(not test_nonlinear.py or gpu_executor_on_the_test_backend)"
SIMULATOR_TESTS = ("backend_selection", "test_backend_switch_reaches", "numpy_primitives", "cupy_transfers",
                   "refuses_unsorted")

#: float64 (non-tensor) peak in TFLOP/s and memory bandwidth in TB/s by device name, most specific first
#: (NVIDIA's data sheets)
DEVICE_PEAKS = (("H100 PCIe", 25.6, 2.0), ("H100 NVL", 30.0, 3.9), ("H100", 34.0, 3.35), ("H200", 34.0, 4.8),
                ("A100", 9.7, 2.0), ("V100", 7.8, 0.9), ("P100", 4.7, 0.73))


# ---------------------------------------------------------------------------
# small helpers


def _jsonable(value):
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating,)):
        return float(value)
    if isinstance(value, (np.bool_,)):
        return bool(value)
    if isinstance(value, np.ndarray):
        return value.tolist()
    return str(value)


def write_json(path: Path, obj) -> None:
    """``obj`` as JSON at ``path``, atomically (a reader never sees half a file)."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(obj, indent=1, default=_jsonable) + "\n")
    os.replace(tmp, path)


def say(line: str) -> None:
    print(line, flush=True)


def rel_diff(got, ref) -> float:
    got, ref = np.asarray(got, dtype=np.float64), np.asarray(ref, dtype=np.float64)
    scale = float(np.abs(ref).max()) if ref.size else 0.0
    return float(np.abs(got - ref).max() / scale) if scale > 0 else float(np.abs(got - ref).max(initial=0.0))


def check(checks: dict, name: str, value, limit=None) -> None:
    """Record one check: ``value <= limit`` for numbers, ``value`` itself for booleans."""
    if limit is None:
        checks[name] = {"value": bool(value), "ok": bool(value)}
    else:
        checks[name] = {"value": float(value), "limit": limit, "ok": bool(np.isfinite(value) and value <= limit)}


def device_peaks(device: str) -> tuple[float | None, float | None]:
    """(float64 FLOP/s, bytes/s) of a device by name, or (None, None)."""
    for name, tflops, tbs in DEVICE_PEAKS:
        if name in device:
            return tflops * 1e12, tbs * 1e12
    return None, None


def distribution_version(name: str) -> str:
    import importlib.metadata as md

    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return "absent"


def synchronize(backend: str) -> None:
    if backend == "cupy":
        import cupy

        cupy.cuda.Device().synchronize()


def free_device_memory(backend: str) -> None:
    import gc

    gc.collect()
    if backend == "cupy":
        import cupy

        cupy.get_default_memory_pool().free_all_blocks()


# ---------------------------------------------------------------------------
# a stage: its record, saved as it goes, and its deadline


class Stage:
    def __init__(self, name: str, args):
        self.name, self.simulator, self.quick = name, args.simulator, args.quick
        self.work, self.out = Path(args.work), Path(args.out)
        self.backend = "cudasim" if args.simulator else "cupy"
        self.deadline = time.monotonic() + args.limit - 3
        self.jobs = args.jobs
        self.bench_only = getattr(args, "bench_only", None)
        self.bench_approaches = getattr(args, "bench_approaches", None) or list(BENCH_APPROACHES)
        self.bench_options = bench_options(getattr(args, "bench_option", None) or [])
        self.bench_budgets = getattr(args, "bench_budgets", None) or []
        self.record: dict = {"status": "running", "summary": {}, "details": {}}
        self.save()

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def save(self) -> None:
        write_json(self.work / f"stage-{self.name}.json", self.record)

    def finish(self, ok: bool) -> None:
        self.record["status"] = "ok" if ok else "failed"
        self.save()


def stall_for_tests(stage: Stage) -> None:
    """``POLYDG_GPU_RUN_STALL=STAGE`` holds that stage here, past any limit: how the tests make a stage overrun."""
    if os.environ.get("POLYDG_GPU_RUN_STALL") == stage.name:
        time.sleep(3600)


def run_tasks(stage: Stage, tasks: list[tuple], worker, on_result) -> None:
    """``worker(*task)`` for each task, in ``stage.jobs`` processes (in this one for 1), until the deadline;
    ``on_result(task, result)`` as each ends (a result is a dict; an exception becomes {"error": ...})."""
    if stage.jobs <= 1:
        for task in tasks:
            if stage.left() <= 0:
                on_result(task, {"status": "not run: stage time limit"})
                continue
            try:
                result = worker(*task)
            except Exception as exc:  # a broken case is a result, not the end of the stage
                result = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-2000:]}
            on_result(task, result)
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, TimeoutError as FuturesTimeout, as_completed

    pool = ProcessPoolExecutor(max_workers=stage.jobs, mp_context=multiprocessing.get_context("spawn"))
    futures = {pool.submit(worker, *task): task for task in tasks}
    try:
        for fut in as_completed(futures, timeout=max(stage.left(), 1)):
            try:
                result = fut.result()
            except Exception as exc:
                result = {"error": f"{type(exc).__name__}: {exc}"}
            on_result(futures.pop(fut), result)
    except FuturesTimeout:
        for task in futures.values():
            on_result(task, {"status": "not finished: stage time limit"})
    for process in list(getattr(pool, "_processes", {}).values()):  # workers still busy past the deadline
        process.terminate()
    pool.shutdown(wait=False, cancel_futures=True)


# ---------------------------------------------------------------------------
# stage: device


def stage_device(stage: Stage) -> None:
    rec, checks = stage.record, {}
    versions = {"python": platform.python_version(), "executable": sys.executable}
    for name in ("numpy", "scipy", "numba", "numba-cuda", "cupy-cuda13x", "cupy-cuda12x", "mpi4py", "mpich",
                 "pymetis", "shapely", "meshio", "pyamg", "pytest", "pytest-xdist", "polydg"):
        versions[name] = distribution_version(name)
    rec["details"]["versions"] = versions
    smi = shutil.which("nvidia-smi")
    if smi:
        q = subprocess.run([smi, "--query-gpu=name,driver_version,memory.total,compute_cap,clocks.max.sm,power.limit",
                            "--format=csv,noheader"], capture_output=True, text=True, timeout=30)
        rec["details"]["nvidia_smi"] = q.stdout.strip() or q.stderr.strip()
        head = subprocess.run([smi], capture_output=True, text=True, timeout=30).stdout
        rec["details"]["nvidia_smi_header"] = "\n".join(head.splitlines()[:4])
    else:
        rec["details"]["nvidia_smi"] = "absent"
    stage.save()
    stall_for_tests(stage)

    from polydg import backend as bk

    reason = bk.gpu_unavailable_reason()
    rec["details"]["gpu_unavailable_reason"] = reason
    backend = bk.resolve_backend(stage.backend) if (stage.simulator or reason is None) else None
    summary = rec["summary"]
    if backend is not None:
        summary["device"] = bk.device_name(backend)
        summary.update(bk.backend_versions(backend))
        if backend == "cupy":
            import cupy

            props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
            free, total = cupy.cuda.runtime.memGetInfo()
            summary.update(multiprocessors=props.get("multiProcessorCount"), memory_gib=round(total / 2**30, 1),
                           free_gib=round(free / 2**30, 1), l2_mib=round(props.get("l2CacheSize", 0) / 2**20, 1))
            from numba import cuda

            name = cuda.get_current_device().name
            summary["numba_cuda_device"] = name.decode() if isinstance(name, bytes) else str(name)
        peak, bandwidth = device_peaks(summary["device"])
        summary["fp64_peak_tflops"] = peak / 1e12 if peak else None
        summary["bandwidth_tbs"] = bandwidth / 1e12 if bandwidth else None
    check(checks, "device backend resolves", backend is not None)
    stage.save()

    # MPI: mpi4py's library and mpiexec (from the mpich wheel on the GPU machine)
    mpiexec = shutil.which("mpiexec")
    summary["mpiexec"] = mpiexec
    try:
        from mpi4py import MPI

        summary["mpi_library"] = MPI.Get_library_version().splitlines()[0].strip()
    except Exception as exc:
        summary["mpi_library"] = f"unavailable: {type(exc).__name__}: {exc}"
    check(checks, "mpiexec found", mpiexec is not None)

    rec["details"]["checks"] = checks
    stage.finish(all(c["ok"] for c in checks.values()))


# ---------------------------------------------------------------------------
# stage: correctness


#: GPU-only cases, larger than the simulator's: many threads, blocks and chunks; (spec, elements, degrees, problem)
MEDIUM_CASES = {"2d-medium": ("square:12", 40, (1, 3), "all-kinds"), "3d-medium": ("cube:3", 30, (1, 3), "all-kinds")}
MEDIUM_VARIANTS = {
    "rows": {"approach": "2"}, "rows-again": {"approach": "2"}, "atomic": {"approach": "atomic"},
    "rows-single": {"approach": "2", "precision": "single"}, "atomic-single": {"approach": "atomic", "precision": "single"},
    "rows-chunked": {"approach": "2", "memory_budget_mb": 0.05}, "atomic-chunked": {"approach": "atomic", "memory_budget_mb": 0.05},
    "blocks": {"approach": "blocks"}, "blocks-again": {"approach": "blocks"},
}
QUICK_VARIANTS = ("rows", "rows-again", "atomic", "rows-single")
#: MPI cases: (mesh spec, elements, degrees)
MPI_CASES = {"2d": ("square:3", 8, (1, 2)), "3d": ("cube:2", 10, (1, 2))}


def _case(name: str):
    """(space, problem, variants) of an assembly case: tests/gpu_simulator_cases.py's, or a medium one."""
    from gpu_simulator_cases import CASES, all_kinds_problem, case_setup, variants

    if name in CASES:
        space, problem = case_setup(name)
        return space, problem, variants(name)
    from polydg.mesh import from_spec
    from polydg.partition import agglomerate
    from polydg.problem import builtin_problem
    from polydg.space import DGSpace

    spec, n_el, (lo, hi), problem_name = MEDIUM_CASES[name]
    mesh = agglomerate(from_spec(spec), n_el)
    degree = np.random.default_rng(5).integers(lo, hi + 1, size=mesh.n_elements)
    degree[0], degree[-1] = lo, hi
    problem = all_kinds_problem(mesh.dim) if problem_name == "all-kinds" else builtin_problem(problem_name, mesh.dim)
    return DGSpace(mesh, degree), problem, dict(MEDIUM_VARIANTS)


def task_assembly(name: str, backend: str, quick: bool) -> dict:
    """Every variant of one case on the device against the CPU's deterministic float64 assembly."""
    from polydg.assembly import assemble

    t0 = time.perf_counter()
    space, problem, variants = _case(name)
    if quick:
        variants = {k: v for k, v in variants.items() if k in QUICK_VARIANTS}
    checks, cpu_refs, got = {}, {}, {}
    for variant, options in variants.items():
        ref_key = repr({k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in options.items()
                        if k not in ("approach", "precision")})
        if ref_key not in cpu_refs:
            cpu_refs[ref_key] = assemble(space, problem, backend="numpy",
                                         **{**options, "approach": "2", "precision": "double"})
        cpu = cpu_refs[ref_key]
        result = assemble(space, problem, backend=backend, to_host=True, **options)
        got[variant] = result
        single = options.get("precision") == "single"
        check(checks, f"{variant}: pattern equals the CPU's", np.array_equal(result.matrix.indices, cpu.matrix.indices))
        tol = (F32_FLOOR if name in MEDIUM_CASES else F32_TOL) if single else F64_TOL
        check(checks, f"{variant}: matrix vs CPU", rel_diff(result.matrix.data, cpu.matrix.data), tol)
        check(checks, f"{variant}: load vs CPU", rel_diff(result.rhs, cpu.rhs), tol)
        check(checks, f"{variant}: dtype", result.matrix.data.dtype == (np.float32 if single else np.float64))
    if "rows-again" in got:
        check(checks, "rows bitwise repeatable", np.array_equal(got["rows"].matrix.data, got["rows-again"].matrix.data)
              and np.array_equal(got["rows"].rhs, got["rows-again"].rhs))
    if "blocks" in got:  # the load alone: its values array empty on the device (a view of no memory)
        alone = assemble(space, problem, backend=backend, approach="blocks", to_host=True, matrix=False)
        cpu = cpu_refs[repr({})]
        check(checks, "blocks: load alone vs CPU", rel_diff(alone.rhs, cpu.rhs), F64_TOL)
    if "blocks-again" in got:
        check(checks, "blocks bitwise repeatable", np.array_equal(got["blocks"].matrix.data,
                                                                  got["blocks-again"].matrix.data)
              and np.array_equal(got["blocks"].rhs, got["blocks-again"].rhs))
    if "rows-chunked" in got:
        check(checks, "rows bitwise equal over chunks", np.array_equal(got["rows"].matrix.data,
                                                                      got["rows-chunked"].matrix.data))
        check(checks, "chunked run has several chunks", got["rows-chunked"].info["chunks"] > 1)
    if backend == "cupy":  # the matrix left on the device (int32 CSR) equals the host copy
        on_device = assemble(space, problem, backend=backend, approach="2")
        host = got["rows"]
        check(checks, "device CSR equals the host copy",
              np.array_equal(on_device.matrix.data.get(), host.matrix.data)
              and np.array_equal(on_device.matrix.indices.get().astype(np.int64), host.matrix.indices)
              and np.array_equal(on_device.matrix.indptr.get().astype(np.int64), host.matrix.indptr))
    return {"checks": checks, "dofs": int(space.n_dofs), "seconds": time.perf_counter() - t0}


def task_report(name: str, backend: str, quick: bool) -> dict:
    """A tiny assembly whose info and summary.json name the device and the versions (issue #27 item 5).

    Not in the device stage: a first assembly compiles (the CPU's plan kernels, the GPU's kernels)."""
    from gpu_simulator_cases import case_setup

    from polydg import backend as bk
    from polydg.assembly import assemble
    from polydg.report import summary_dict

    t0 = time.perf_counter()
    space, problem = case_setup("2d-advection")
    result = assemble(space, problem, backend=backend, to_host=True)
    written = summary_dict(mesh=space.mesh, space=space, result=result, options={}, timings=result.info["timings"])
    checks = {}
    check(checks, "info names the device", result.info.get("device") == bk.device_name(backend))
    check(checks, "info's versions are the backend's", result.info.get("versions") == bk.backend_versions(backend))
    check(checks, "summary.json has numba-cuda's version", "numba_cuda" in written["versions"])
    if backend == "cupy":
        check(checks, "summary.json has CuPy's and CUDA's versions",
              {"cupy", "cuda_runtime", "cuda_driver", "compute_capability"} <= set(written["versions"]))
    return {"checks": checks, "summary_json": {"device": written["device"], "versions": written["versions"]},
            "seconds": time.perf_counter() - t0}


def _slab_3d1():
    """A 3D+1 slab of mixed degrees (4D P kernels): paper-3d1 over cube:1's 3 elements x (0.1, 0.3)."""
    from polydg.mesh import from_spec
    from polydg.partition import agglomerate
    from polydg.problem import builtin_problem
    from polydg.space import DGSpace
    from polydg.spacetime import slab_mesh, slab_problem

    mesh = agglomerate(from_spec("cube:1"), 3)
    space = DGSpace(slab_mesh(mesh, 0.1, 0.3), np.array([1, 0, 1]))
    return space, slab_problem(builtin_problem("paper-3d1", 3), 3, 0.1, 0.3)


def task_slab(name: str, backend: str, quick: bool) -> dict:
    """A space-time slab (2D+1 PQ or 3D+1 P, mixed degrees): the rows, atomic and a block per element against the
    CPU."""
    from gpu_simulator_cases import slab_pq_setup

    from polydg.assembly import assemble

    t0 = time.perf_counter()
    space, problem = slab_pq_setup() if name == "slab-2d1-pq" else _slab_3d1()
    cpu = assemble(space, problem, backend="numpy")
    checks = {}
    rows = None
    for approach in ("2", "atomic", "blocks"):
        r = assemble(space, problem, backend=backend, approach=approach, to_host=True)
        check(checks, f"{approach}: matrix vs CPU", rel_diff(r.matrix.data, cpu.matrix.data), F64_TOL)
        check(checks, f"{approach}: load vs CPU", rel_diff(r.rhs, cpu.rhs), F64_TOL)
        rows = r if approach == "2" else rows
    again = assemble(space, problem, backend=backend, approach="2", to_host=True)
    check(checks, "rows bitwise repeatable", np.array_equal(again.matrix.data, rows.matrix.data))
    default = assemble(space, problem, backend=backend, to_host=True)  # "auto": rows or blocks
    check(checks, f"default ({default.info['approach']}): matrix vs CPU", rel_diff(default.matrix.data,
                                                                                 cpu.matrix.data), F64_TOL)
    return {"checks": checks, "dofs": int(space.n_dofs), "basis": space.basis, "dim": space.mesh.dim,
            "seconds": time.perf_counter() - t0}


def task_march(name: str, backend: str, quick: bool) -> dict:
    """A space-time march on the device (state kept there) against the CPU's direct march."""
    from gpu_simulator_cases import march_setup

    from polydg.spacetime import march

    t0 = time.perf_counter()
    mesh, problem, degree, options = march_setup(name)
    device = march(mesh, problem, degree, backend=backend, **options)
    cpu = march(mesh, problem, degree, backend="numpy", **dict(options, method="direct"))
    tol = 1e-12 if options["method"] == "direct" else 1e-8
    checks = {}
    check(checks, "solution vs CPU march", rel_diff(device.solution, cpu.solution), tol)
    check(checks, "errors vs CPU march", rel_diff([device.errors["l2"], device.errors["l2_l2"]],
                                                  [cpu.errors["l2"], cpu.errors["l2_l2"]]), tol)
    return {"checks": checks, "solver": device.info["solver"]["solver"], "seconds": time.perf_counter() - t0}


def _mpi_space(name: str):
    from gpu_simulator_cases import all_kinds_problem

    from polydg.mesh import from_spec
    from polydg.partition import agglomerate
    from polydg.space import DGSpace

    spec, n_el, (lo, hi) = MPI_CASES[name]
    mesh = agglomerate(from_spec(spec), n_el)
    degree = np.random.default_rng(3).integers(lo, hi + 1, mesh.n_elements)
    return DGSpace(mesh, degree), all_kinds_problem(mesh.dim)


def mpi_ranks_main(out: str, backend: str, name: str) -> int:
    """Under ``mpiexec -n N``: each rank assembles its rows on the device backend; rank 0 saves the gather."""
    from mpi4py import MPI

    from polydg.distributed import assemble_distributed

    comm = MPI.COMM_WORLD
    root = comm.Get_rank() == 0
    space, problem = _mpi_space(name)
    arrays = {}
    for approach in ("2", "atomic", "ordered", "blocks"):
        ranks = np.arange(space.mesh.n_elements) % comm.Get_size()  # halo elements between each rank's own
        result = assemble_distributed(space if root else None, problem, comm, ranks=ranks if root else None,
                                      approach=approach, backend=backend)
        whole = result.gather()
        if root:
            arrays[f"{approach}/data"], arrays[f"{approach}/indices"] = whole.matrix.data, whole.matrix.indices
            arrays[f"{approach}/rhs"] = whole.rhs
            arrays[f"{approach}/devices"] = np.array([r["device"] for r in result.info["per_rank"]])
    if root:
        np.savez(out, **arrays)
        print("GPU-RUN-MPI done", flush=True)
    return 0


def task_mpi(name: str, backend: str, quick: bool, work: str, limit: float) -> dict:
    """``mpiexec -n 2`` with both ranks on the one device: the gather equals the one-process device matrix bit
    for bit (the deterministic rows, ordered sums and blocks) and the CPU's to 1e-13 (every GPU reduction)."""
    from polydg.assembly import assemble

    t0 = time.perf_counter()
    mpiexec = shutil.which("mpiexec")
    if mpiexec is None:
        return {"checks": {"mpiexec found": {"value": False, "ok": False}}}
    out = Path(work) / f"mpi-{name}.npz"
    env = dict(os.environ, OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([str(REPO), str(REPO / "tests"), os.environ.get("PYTHONPATH", "")]))
    run = subprocess.run([mpiexec, "-n", "2", sys.executable, str(Path(__file__).resolve()), "--mpi-ranks", str(out),
                          "--backend", backend, "--case", name], env=env, capture_output=True, text=True,
                         timeout=max(limit, 10), cwd=REPO)
    checks = {}
    check(checks, "mpiexec -n 2 ran", run.returncode == 0 and "GPU-RUN-MPI done" in run.stdout)
    if not checks["mpiexec -n 2 ran"]["ok"]:
        return {"checks": checks, "output": (run.stdout + run.stderr)[-3000:]}
    got = np.load(out)
    space, problem = _mpi_space(name)
    cpu = assemble(space, problem, backend="numpy")
    for approach in ("2", "ordered", "blocks"):
        one = assemble(space, problem, backend=backend, approach=approach, to_host=True)
        check(checks, f"{approach}: gathered rows equal the one-process device matrix bitwise",
              np.array_equal(got[f"{approach}/data"], one.matrix.data) and np.array_equal(got[f"{approach}/rhs"], one.rhs))
    for approach in ("2", "atomic", "ordered", "blocks"):
        check(checks, f"{approach}: gathered pattern equals the CPU's", np.array_equal(got[f"{approach}/indices"],
                                                                                   cpu.matrix.indices))
        check(checks, f"{approach}: gathered matrix vs CPU", rel_diff(got[f"{approach}/data"], cpu.matrix.data), F64_TOL)
        check(checks, f"{approach}: gathered load vs CPU", rel_diff(got[f"{approach}/rhs"], cpu.rhs), F64_TOL)
    return {"checks": checks, "devices": got["2/devices"].tolist(), "seconds": time.perf_counter() - t0}


def task_forms(name: str, backend: str, quick: bool, limit: float) -> dict:
    """launch/gpu_forms_check.py: forms.py's per-point functions as device code against the CPU kernels."""
    t0 = time.perf_counter()
    args = ["--mesh", "cube:2", "--elements", "4", "--degree", "1"] if backend != "cupy" else \
        ["--mesh", "cube:8", "--elements", "300", "--degree", "2"]
    run = subprocess.run([sys.executable, str(REPO / "launch" / "gpu_forms_check.py"), *args], capture_output=True,
                         text=True, timeout=max(limit, 10), cwd=REPO,
                         env=dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")))
    checks = {}
    check(checks, "forms as device functions match the CPU kernels", run.returncode == 0 and "GPU-FORMS-OK" in run.stdout)
    return {"checks": checks, "output": [ln for ln in run.stdout.splitlines() if "difference" in ln or "GPU-" in ln]
            or (run.stdout + run.stderr)[-2000:], "seconds": time.perf_counter() - t0}


def correctness_tasks(stage: Stage) -> list[tuple]:
    from gpu_simulator_cases import CASES, MARCH_CASES

    b, q = stage.backend, stage.quick
    if q:
        return [("report", "versions", b, q), ("assembly", "2d-advection", b, q), ("march", "p1-direct", b, q),
                ("mpi", "2d", b, q)]
    # the longest first (MPI ranks and the 3D cases compile the most: every variant's kernels), so that the
    # parallel workers end together (on the H100, 3d-all-kinds started last of 16 and missed the limit)
    tasks = [("mpi", name, b, q) for name in (MPI_CASES if not stage.simulator else ("2d",))]
    tasks += [("assembly", name, b, q) for name in CASES if name.startswith("3d")]
    if not stage.simulator:
        tasks += [("assembly", name, b, q) for name in MEDIUM_CASES]
    tasks += [("slab", "slab-3d1-p", b, q), ("slab", "slab-2d1-pq", b, q)]
    tasks += [("march", name, b, q) for name in MARCH_CASES]
    tasks += [("assembly", name, b, q) for name in CASES if not name.startswith("3d")]
    tasks += [("forms", "forms", b, q), ("report", "versions", b, q)]
    return tasks


def correctness_worker(kind: str, name: str, backend: str, quick: bool, work: str = "", limit: float = 60.0) -> dict:
    if kind == "report":
        return task_report(name, backend, quick)
    if kind == "assembly":
        return task_assembly(name, backend, quick)
    if kind == "slab":
        return task_slab(name, backend, quick)
    if kind == "march":
        return task_march(name, backend, quick)
    if kind == "mpi":
        return task_mpi(name, backend, quick, work, limit)
    return task_forms(name, backend, quick, limit)


def stage_correctness(stage: Stage) -> None:
    tasks = [t + (str(stage.work), max(stage.left() - 5, 10)) for t in correctness_tasks(stage)]
    rec = stage.record
    rec["details"]["cases"] = {}
    worst = {"float64": 0.0, "float32": 0.0}

    def on_result(task, result):
        key = f"{task[0]}/{task[1]}"
        rec["details"]["cases"][key] = result
        checks = result.get("checks", {})
        for cname, c in checks.items():
            if c.get("limit") in (F64_TOL, F32_TOL, F32_FLOOR) and np.isfinite(c["value"]):  # matrices', loads'
                kind = "float64" if c["limit"] == F64_TOL else "float32"
                worst[kind] = max(worst[kind], c["value"])
        bad = [c for c, v in checks.items() if not v["ok"]]
        ok = bool(checks) and not bad and "error" not in result
        result["ok"] = ok
        say(f"correctness {key}: {'ok' if ok else 'FAILED'} ({len(checks)} checks"
            f"{', failed: ' + '; '.join(bad) if bad else ''}{', ' + result['error'] if 'error' in result else ''}"
            f"{', ' + result['status'] if 'status' in result else ''}) {result.get('seconds', 0):.1f} s")
        cases = rec["details"]["cases"].values()
        rec["summary"] = {"cases": len(rec["details"]["cases"]), "cases_failed": sum(not c.get("ok") for c in cases),
                          "checks": sum(len(c.get("checks", {})) for c in cases),
                          "checks_failed": sum(not v["ok"] for c in cases for v in c.get("checks", {}).values()),
                          "worst_rel_diff_float64": worst["float64"], "worst_rel_diff_float32": worst["float32"],
                          "failed": [f"{k}: {c.get('error') or c.get('status') or [n for n, v in c.get('checks', {}).items() if not v['ok']]}"
                                     for k, c in rec["details"]["cases"].items() if not c.get("ok")]}
        stage.save()

    run_tasks(stage, tasks, correctness_worker, on_result)
    stage.finish(rec["summary"].get("cases_failed", 1) == 0 and len(rec["details"]["cases"]) == len(tasks))


# ---------------------------------------------------------------------------
# stage: tests


def stage_tests(stage: Stage) -> None:
    from gpu_test_log import summarise

    log = stage.work / "tests.jsonl"
    junit = stage.out / "tests-junit.xml"
    env = dict(os.environ, POLYDG_TEST_BACKEND=stage.backend, POLYDG_TEST_LOG=str(log),
               PYTHONPATH=os.pathsep.join([str(REPO), str(REPO / "launch"), os.environ.get("PYTHONPATH", "")]))
    if stage.simulator:
        env["NUMBA_ENABLE_CUDASIM"] = "1"
        files = ["tests/test_gpu_assembly.py"] + ([] if stage.quick else ["tests/test_gpu_offload.py",
                                                                          "tests/test_nonlinear.py"])
        select = " or ".join(SIMULATOR_TESTS) if stage.quick else \
            "not (" + " or ".join(CPU_ONLY_TESTS) + ") and " + NONLINEAR_SELECT
    else:
        files = list(GPU_TEST_FILES)
        select = "not (" + " or ".join(CPU_ONLY_TESTS) + ") and " + NONLINEAR_SELECT
    jobs = stage.jobs
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "gpu_test_log", "-p", "no:cacheprovider", "-m", "not slow",
           "-k", select, f"--junitxml={junit}", *files]
    if jobs > 1:
        cmd[4:4] = ["-n", str(jobs), "--dist", "load"]
    stage.record["details"]["command"] = " ".join(cmd)
    stage.save()
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, cwd=REPO, start_new_session=True)
    try:
        rc = proc.wait(timeout=max(stage.left() - 5, 5))
    except subprocess.TimeoutExpired:  # stop it: pytest writes its summary and the JUnit file on SIGINT
        os.killpg(proc.pid, signal.SIGINT)
        try:
            rc = proc.wait(timeout=8)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            rc = proc.wait()
        stage.record["details"]["stopped"] = "at the stage's time limit"
    result = summarise(log)
    counts = result["counts"]
    stage.record["summary"] = {**counts, "returncode": rc, "seconds": time.perf_counter() - t,
                               "backend": stage.backend, "files": len(files)}
    stage.record["details"].update(failures=result["failures"], skip_reasons=result["skip_reasons"])
    ok = rc == 0 and counts["failed"] == 0 and counts["error"] == 0 and counts["passed"] > 0
    stage.finish(ok and "stopped" not in stage.record["details"])


# ---------------------------------------------------------------------------
# stage: kernels (registers and memory per thread, per compiled variant)


#: (label, dimension of the space, degree, precision, basis)
KERNEL_COMBOS = (("2d p1", 2, 1, "double", "P"), ("2d p2", 2, 2, "double", "P"), ("2d p3", 2, 3, "double", "P"),
                 ("3d p1", 3, 1, "double", "P"), ("3d p2", 3, 2, "double", "P"), ("3d p3", 3, 3, "double", "P"),
                 ("2d p3 single", 2, 3, "single", "P"), ("3d p2 single", 3, 2, "single", "P"),
                 ("2d+1 PQ p1", 3, 1, "double", "PQ"), ("2d+1 PQ p2", 3, 2, "double", "PQ"),
                 ("3d+1 p1", 4, 1, "double", "P"))
KERNEL_NAMES = ("volume_rows", "interior_rows", "boundary_rows", "volume_atomic", "interior_atomic", "boundary_atomic",
                "volume_entries", "interior_entries", "boundary_entries")
#: the ordered reduction's kernels (cuda_sums.gpu_sum_kernels)
SUM_KERNEL_NAMES = ("volume_pieces", "volume_sums", "interior_pieces", "interior_sums", "boundary_pieces",
                    "boundary_sums")


def _kernel_space(dim: int, degree: int, basis: str):
    from polydg.mesh import from_spec
    from polydg.partition import agglomerate
    from polydg.problem import builtin_problem
    from polydg.space import DGSpace
    from polydg.spacetime import slab_mesh, slab_problem

    if dim == 2:
        return DGSpace(agglomerate(from_spec("square:3"), 6), degree), builtin_problem("paper-2d", 2)
    if dim == 3 and basis == "P":
        return DGSpace(agglomerate(from_spec("cube:1"), 3), degree), builtin_problem("paper-3d", 3)
    space_dim = dim - 1
    mesh = agglomerate(from_spec("square:2" if space_dim == 2 else "cube:1"), 3)
    name = "paper-2d1" if space_dim == 2 else "paper-3d1"
    return (DGSpace(slab_mesh(mesh, 0.0, 0.1), degree, basis),
            slab_problem(builtin_problem(name, space_dim), space_dim, 0.0, 0.1))


def kernels_worker(label: str, dim: int, degree: int, precision: str, basis: str, backend: str) -> dict:
    """Compile the kernels of one (dimension, degree, precision, basis) by assembling a tiny case with both
    reductions; each compiled variant's registers, local / shared / constant memory and thread limit."""
    from numba import config

    from polydg.assembly import assemble
    from polydg.assembly.cuda_kernels import gpu_kernels, pattern_indices
    from polydg.assembly.cuda_points import map_points
    from polydg.assembly.cuda_sums import gpu_sum_kernels

    t0 = time.perf_counter()
    space, problem = _kernel_space(dim, degree, basis)
    jit = {}
    for approach in ("2", "atomic", "ordered", "blocks"):
        r = assemble(space, problem, backend=backend, approach=approach, precision=precision, to_host=True)
        jit[approach] = r.info["timings"]["jit"]
    dtype = np.float32 if precision == "single" else np.float64
    namespace = gpu_kernels(space.mesh.dim, int(space.max_degree), dtype, basis)
    sums = gpu_sum_kernels(space.mesh.dim, int(space.max_degree), dtype, basis)
    kernels = {}
    alone = {"pattern_indices": pattern_indices, "map_points": map_points}  # module-level kernels
    for name in KERNEL_NAMES + SUM_KERNEL_NAMES + tuple(alone):
        dispatcher = alone[name] if name in alone else getattr(sums if name in SUM_KERNEL_NAMES else namespace, name)
        overloads = getattr(dispatcher, "overloads", None)
        if config.ENABLE_CUDASIM:  # the simulator runs Python: nothing compiled to measure
            kernels[name] = "not compiled (simulator)"
            continue
        if not overloads:
            kernels[name] = "not launched"
            continue
        kernels[name] = [{"registers": k.regs_per_thread, "local_bytes": k.local_mem_per_thread,
                          "shared_bytes": k.shared_mem_per_block, "const_bytes": k.const_mem_size,
                          "max_threads_per_block": k.max_threads_per_block, "arguments": len(args)}
                         for args, k in overloads.items()]
    return {"label": label, "nbasis": int(space.element_dofs.max()), "jit_seconds": jit, "kernels": kernels,
            "seconds": time.perf_counter() - t0}


def stage_kernels(stage: Stage) -> None:
    combos = KERNEL_COMBOS[:1] if stage.quick else (KERNEL_COMBOS[:4] if stage.simulator else KERNEL_COMBOS)
    rec = stage.record
    rec["details"]["variants"] = {}

    def on_result(task, result):
        rec["details"]["variants"][task[0]] = result
        table = {}
        for label, r in rec["details"]["variants"].items():
            for name, ks in r.get("kernels", {}).items():
                if isinstance(ks, list) and ks:
                    table[f"{label} {name}"] = f"{max(k['registers'] for k in ks)} regs, " \
                                               f"{max(k['local_bytes'] for k in ks)} B local"
        rec["summary"] = {"variants": len(rec["details"]["variants"]),
                          "failed": [k for k, r in rec["details"]["variants"].items() if "kernels" not in r],
                          "registers_and_local_memory": table}
        say(f"kernels {task[0]}: {'ok' if 'kernels' in result else result.get('error', result.get('status'))}")
        stage.save()

    run_tasks(stage, [c + (stage.backend,) for c in combos], kernels_worker, on_result)
    stage.finish(not rec["summary"]["failed"] and rec["summary"]["variants"] == len(combos))


# ---------------------------------------------------------------------------
# stage: bench


#: the most entries the "largest" rows' matrices may have: CuPy's CSR indexes with int32 (a margin below 2^31)
CUPY_NNZ_LIMIT = int(0.95 * 2**31)
#: device bytes per entry while a "largest" row is timed: the values and their int64 columns as assembled, the
#: int32 columns of CuPy's matrix, and the previous run's values kept for the bitwise check
DEVICE_BYTES_PER_ENTRY = 28


def largest_cube(p: int, nnz_limit: int) -> int:
    """The largest N (at least 1) whose P_p matrix on cube:N (6 N^3 tetrahedra, one element each) has at most
    ``nnz_limit`` entries: an element couples with itself and at most four neighbours, in blocks of nb x nb.

    >>> largest_cube(2, CUPY_NNZ_LIMIT), largest_cube(3, CUPY_NNZ_LIMIT), largest_cube(3, 10)
    (87, 55, 1)
    """
    nb = (p + 1) * (p + 2) * (p + 3) // 6
    entries = lambda n: 30 * nb * nb * n**3  # noqa: E731 - 6 n^3 elements, 5 blocks each
    n = max(int((nnz_limit / entries(1)) ** (1 / 3)), 1)
    while entries(n + 1) <= nnz_limit:  # the float cube root's last unit
        n += 1
    while n > 1 and entries(n) > nnz_limit:
        n -= 1
    return n


def largest_nnz_limit(simulator: bool) -> int | None:
    """The "largest" rows' bound on entries: CuPy's int32 and 70% of the card's free memory (on the simulator a
    token 20,000: cube:1); None where CuPy sees no card (the CPU baseline's walk over the cases)."""
    if simulator:
        return 20_000
    from polydg import backend as bk

    if bk.gpu_unavailable_reason() is not None:
        return None
    return min(CUPY_NNZ_LIMIT, int(0.7 * bk.free_memory_bytes("cupy") / DEVICE_BYTES_PER_ENTRY))


def bench_cases(simulator: bool, quick: bool):
    """(label, table, builder of (space, problem), paper seconds or None, target seconds or None, CPU baseline?)

    Builders run lazily (a case skipped for time builds nothing); meshes shared by cases are cached.
    """
    from bench_spacetime import MESHES, PAPER_TABLE2, PAPER_TOTAL, SPEC, TABLE2_N

    from polydg.mesh import build_polytopic_mesh, from_spec
    from polydg.mesh.quadrature_simplices import DEFAULT_QUADRATURE_SIMPLICES, quadrature_mesh
    from polydg.partition import agglomerate
    from polydg.problem import builtin_problem
    from polydg.space import DGSpace
    from polydg.spacetime import slab_mesh, slab_problem

    cache = {}

    def cached(key, make):
        if key not in cache:
            cache.clear()  # one mesh at a time: the large ones take host memory
            cache[key] = make()
        return cache[key]

    def table5(spec, p):
        return lambda: (DGSpace(cached(spec, lambda: build_polytopic_mesh(from_spec(spec))), p),
                        builtin_problem("paper-3d", 3))

    def table2(n, p):
        tau = 1.0 / n

        def make():
            mesh = cached(("t2", n), lambda: slab_mesh(build_polytopic_mesh(from_spec(f"oscillating-square:{n}")),
                                                       0.0, tau))
            return DGSpace(mesh, p), slab_problem(builtin_problem("paper-2d1", 2), 2, 0.0, tau)
        return make

    def table4(spec, n_el, p):
        def make():
            def build():  # the polygons' sub-triangles as march() and the command line take them (coarse)
                fine = from_spec(spec)
                polygons = build_polytopic_mesh(fine) if n_el is None else agglomerate(fine, n_el)
                return slab_mesh(quadrature_mesh(polygons, DEFAULT_QUADRATURE_SIMPLICES), 0.0, 0.01)
            return DGSpace(cached(("t4", spec, n_el), build), p), slab_problem(builtin_problem("paper-2d1", 2), 2,
                                                                                0.0, 0.01)
        return make

    def nonlinear(spec, p, kind):
        return lambda: nonlinear_case(cached(("nl", spec), lambda: build_polytopic_mesh(from_spec(spec))), p, kind)

    per_mdof = PAPER_TABLE2["double"]["total_assembly"]
    if simulator:
        yield "table5 cube:1 p=1", "table5", table5("cube:1", 1), None, None, True
        yield "nonlinear quasilinear square:2 p=1", "nonlinear", nonlinear("square:2", 1, "quasilinear"), None, None, \
            True
        if not quick:
            yield "table2 oscillating-square:2 p=1", "table2", table2(2, 1), None, None, True
            yield "nonlinear data square:2 p=1", "nonlinear", nonlinear("square:2", 1, "data"), None, None, True
            yield "table4 oscillating-square:3/4 p=1", "table4", table4("oscillating-square:3", 4, 1), None, None, True
            yield "table2 oscillating-square:2 p=2", "table2", table2(2, 2), None, None, True
            n = largest_cube(3, largest_nnz_limit(simulator))
            yield f"table5 largest cube:{n} p=3", "largest", table5(f"cube:{n}", 3), None, None, False
        return
    yield "table5 cube:64 p=1", "table5", table5("cube:64", 1), 9.4, 0.94, False
    for p in (1, 2, 3):
        yield f"table2 oscillating-square:{TABLE2_N[p]} p={p}", "table2", table2(TABLE2_N[p], p), \
            ("per_mdof", per_mdof[p - 1]), ("per_mdof", per_mdof[p - 1] / 10), True
    # one Newton linearisation (issue #28) of 197k dofs, and the same with data per fine cell and on a grid
    yield "nonlinear quasilinear square:128 p=2", "nonlinear", nonlinear("square:128", 2, "quasilinear"), None, \
        None, True
    yield "nonlinear data square:128 p=2", "nonlinear", nonlinear("square:128", 2, "data"), None, None, True
    for number, n_el in MESHES.items():
        for p in (1, 2, 3):
            yield f"table4 mesh {number} p={p}", "table4", table4(SPEC, n_el, p), PAPER_TOTAL[number][p], \
                PAPER_TOTAL[number][p] / 10, number < 3
    yield "table5 cube:48 p=2", "table5", table5("cube:48", 2), None, None, False
    yield "table5 cube:38 p=3", "table5", table5("cube:38", 3), None, None, False
    # Table 5's shape at the largest sizes the card holds (the issue's "largest that fit"): the default alone
    limit = largest_nnz_limit(simulator)
    for p in (2, 3) if limit is not None else ():
        n = largest_cube(p, limit)
        yield f"table5 largest cube:{n} p={p}", "largest", table5(f"cube:{n}", p), None, None, False


def nonlinear_case(mesh, p: int, kind: str):
    """(space, problem) of a nonlinear row: the built-in ``quasilinear`` problem, or ``data``: diffusion per
    fine cell (located: the executor hands each point's cell), a source on an 8 x 8 grid, reaction u^2."""
    from polydg.problem import CellData, GridData, Problem, builtin_problem
    from polydg.space import DGSpace

    if kind == "quasilinear":
        return DGSpace(mesh, p), builtin_problem("quasilinear", mesh.dim)
    rng = np.random.default_rng(5)
    problem = Problem("data", diffusion=CellData(1.0 + rng.random(mesh.n_fine_cells)), reaction=lambda x, u: u**2,
                      source=GridData(1.0 + rng.random((8, 8)), (0, 1, 0, 1)), dirichlet=0.2)
    return DGSpace(mesh, p), problem


NONLINEAR_KERNELS = ("field", "volume", "interior", "boundary", "volume_rows", "interior_rows", "boundary_rows")


def kernel_resources(namespace, names) -> dict:
    """Registers, local, shared and constant memory per thread of each compiled variant of the kernels
    ``names`` of ``namespace`` (numba-cuda dispatchers); a line where nothing was compiled."""
    from numba import config

    out = {}
    for name in names:
        overloads = getattr(getattr(namespace, name), "overloads", None)
        if config.ENABLE_CUDASIM:  # the simulator runs Python: nothing compiled to measure
            out[name] = "not compiled (simulator)"
        elif not overloads:
            out[name] = "not launched"
        else:
            out[name] = [{"registers": k.regs_per_thread, "local_bytes": k.local_mem_per_thread,
                          "shared_bytes": k.shared_mem_per_block, "const_bytes": k.const_mem_size,
                          "max_threads_per_block": k.max_threads_per_block, "arguments": len(args)}
                         for args, k in overloads.items()]
    return out


def bench_nonlinear(space, problem, backend: str, repeat: int) -> dict:
    """One Newton linearisation (Jacobian and residual, copied to the host) on the device: the first run
    (compilation apart), the median of ``repeat`` more, bitwise repeatability; the CPU's on 2 threads, its
    values against the device's (the Jacobian to 1e-13 of its largest entry, the residual of the largest of
    J u) and its time; the device kernels' resources."""
    import numba

    from polydg.nonlinear import NonlinearSystem

    u = 0.1 * np.random.default_rng(0).standard_normal(space.n_dofs)
    t = time.perf_counter()
    system = NonlinearSystem(space, problem, backend=backend)
    out = {"setup": time.perf_counter() - t}
    t = time.perf_counter()
    first = system.linearize(u)
    out.update(first_run=time.perf_counter() - t, jit_first_run=first.info["timings"]["jit"])
    runs, lin = [], first
    for _ in range(repeat):
        t = time.perf_counter()
        lin = system.linearize(u)
        runs.append(dict(lin.info["timings"], wall=time.perf_counter() - t))
    out["gpu"] = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    checks = {}
    check(checks, "device Jacobian bitwise repeatable", np.array_equal(first.jacobian.data, lin.jacobian.data))
    out["kernels"] = kernel_resources(system.executor.kernels, NONLINEAR_KERNELS)
    before = numba.get_num_threads()
    numba.set_num_threads(min(2, numba.config.NUMBA_NUM_THREADS))
    try:
        host = NonlinearSystem(space, problem, backend="numpy")
        host.linearize(u)  # compiles or loads the CPU kernels
        t = time.perf_counter()
        ref = host.linearize(u)
        out["cpu"] = {"total_assembly": ref.info["timings"]["total_assembly"], "wall": time.perf_counter() - t,
                      "threads": numba.get_num_threads()}
    finally:
        numba.set_num_threads(before)
    check(checks, "Jacobian against the CPU", rel_diff(lin.jacobian.data, ref.jacobian.data), F64_TOL)
    # the residual is a difference of terms of the size of J u: measured against those, as a matrix is
    terms = max(float(np.abs(ref.residual).max()), float(np.abs(ref.jacobian @ u).max()))
    difference = float(np.abs(np.asarray(lin.residual) - ref.residual).max())
    check(checks, "residual against the CPU", difference / terms if terms > 0 else difference, F64_TOL)
    out["checks"] = checks
    out["gpu_over_cpu"] = out["gpu"]["wall"] / out["cpu"]["wall"] if out["cpu"]["wall"] > 0 else None
    return out


def bench_options(pairs: list[str]) -> dict:
    """``["memory_budget_mb=4096", "precision=single"]`` as assembly options (numbers as numbers).

    >>> bench_options(["memory_budget_mb=4096", "precision=single"])
    {'memory_budget_mb': 4096, 'precision': 'single'}
    """
    options = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"gpu_run: --bench-option {pair!r}: expected NAME=VALUE")
        if name in ("approach", "backend", "workspace"):
            raise SystemExit(f"gpu_run: --bench-option {name}: the bench sets it (--bench-approaches for approaches)")
        try:
            options[name] = json.loads(value)
        except ValueError:
            options[name] = value
    return options


def bench_one(space, problem, backend: str, repeat: int, peak, bandwidth,
              approaches: tuple = BENCH_APPROACHES, options: dict | None = None) -> dict:
    """GPU timings of the GPU reductions ``approaches`` (rows, atomic, ordered): medians of ``repeat`` after one run that
    compiles; the result's move to the host apart; bitwise repeatability of the deterministic ones; the volume
    and interior-face kernels' rates (contraction-equivalent) and the values' bandwidth."""
    from bench_assembly import interior_block_bytes, interior_flops, volume_flops

    from polydg.assembly.timing import untimed

    from polydg import backend as bk
    from polydg.assembly import Workspace, assemble
    from polydg.assembly.plan import face_rule_degrees
    from polydg.assembly.points import point_counts
    from polydg.quadrature import default_degree

    mesh = space.mesh
    nq = point_counts(mesh.dim, default_degree(space.degree[mesh.simplex_element], 0))
    flops = volume_flops(space, nq)
    face_q = face_rule_degrees(space.total_degree, mesh.face_elements[:mesh.n_interior_faces], 0)
    face_flops = interior_flops(space, point_counts(mesh.dim - 1, face_q))
    face_bytes = interior_block_bytes(space)
    out = {}

    def one(approach: str) -> dict:
        workspace = Workspace()
        t = time.perf_counter()
        first = assemble(space, problem, backend=backend, approach=approach, workspace=workspace, **(options or {}))
        first_seconds, jit = time.perf_counter() - t, first.info["timings"]["jit"]
        nnz, chunks = int(first.info["nnz"]), int(first.info["chunks"])
        previous = first.matrix.data.copy() if approach != "atomic" else None
        del first
        free_device_memory(backend)
        runs, sent, result = [], [], None
        for _ in range(repeat):
            result = None
            result = assemble(space, problem, backend=backend, approach=approach, workspace=workspace,
                              **(options or {}))
            runs.append(result.info["timings"])
            sent.append(result.info.get("to_device") or {"bytes": 0, "seconds": 0.0})
        med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        # the host-to-device copies, within the stages above (their seconds include waits for queued work)
        med["to_device_bytes"] = int(statistics.median(c["bytes"] for c in sent))
        med["to_device_seconds"] = statistics.median(c["seconds"] for c in sent)
        if previous is not None:
            xp = bk.array_namespace(result.matrix.data)
            med["bitwise_repeatable"] = bool(xp.array_equal(previous, result.matrix.data))
        synchronize(backend)
        t = time.perf_counter()
        host = result.matrix.get() if hasattr(result.matrix, "get") else result.matrix
        bk.to_host(result.rhs)
        med["to_host"] = time.perf_counter() - t
        del host, result, previous
        free_device_memory(backend)
        med.update(first_run=first_seconds, jit_first_run=jit, nnz=nnz, chunks=chunks, repeat=repeat)
        med["unstaged"] = untimed(med)  # what no stage timed
        ek, tk = med["element_kernel"], med["total_kernels"]
        med["volume_gflops"] = flops / ek / 1e9 if ek > 0 else None
        med["volume_fraction_of_fp64_peak"] = flops / ek / peak if ek > 0 and peak else None
        med["values_gbs"] = nnz * np.dtype(np.float64).itemsize / tk / 1e9 if tk > 0 else None
        med["values_fraction_of_bandwidth"] = nnz * 8 / tk / bandwidth if tk > 0 and bandwidth else None
        ik = med["interior_kernel"]  # the interior faces' contraction and the blocks it adds
        med["interior_gflops"] = face_flops / ik / 1e9 if ik > 0 else None
        med["interior_fraction_of_fp64_peak"] = face_flops / ik / peak if ik > 0 and peak else None
        med["interior_blocks_gbs"] = face_bytes / ik / 1e9 if ik > 0 else None
        med["interior_fraction_of_bandwidth"] = face_bytes / ik / bandwidth if ik > 0 and bandwidth else None
        return med

    for approach in approaches:  # each on its own: one failing keeps the others' figures
        try:
            out[f"gpu-{approach}"] = one(approach)
        except Exception as exc:
            out[f"gpu-{approach}"] = {"error": f"{type(exc).__name__}: {exc}"}
            free_device_memory(backend)
    return out


def bench_kept(space, problem, backend: str, repeat: int, options: dict | None = None) -> dict:
    """The rows' total with the plan kept on the device (an Assembler: pattern, tables and penalty weights made
    once): its first assembly, then the median of ``repeat`` later ones, stage by stage."""
    from polydg.assembly import Assembler

    assembler = Assembler(space, backend=backend, approach="2", **(options or {}))
    t = time.perf_counter()
    first = assembler.assemble(problem).info["timings"]
    first_seconds = time.perf_counter() - t
    runs = [assembler.assemble(problem).info["timings"] for _ in range(repeat)]
    later = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    del assembler
    free_device_memory(backend)
    return {"first": first, "first_seconds": first_seconds, "later": later}


def cpu_total(space, problem, threads: int) -> dict:
    """The CPU path's total assembly on ``threads`` threads: one run after a warm one."""
    import numba

    from polydg.assembly import Workspace, assemble

    before = numba.get_num_threads()
    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    try:
        workspace = Workspace()
        assemble(space, problem, workspace=workspace)
        r = assemble(space, problem, workspace=workspace)
        return {"total_assembly": r.info["timings"]["total_assembly"], "threads": numba.get_num_threads()}
    finally:
        numba.set_num_threads(before)


def stage_bench(stage: Stage) -> None:
    from polydg import backend as bk
    from polydg.assembly.reductions.choice import chosen_approach

    backend = bk.resolve_backend(stage.backend)
    device = bk.device_name(backend)
    peak, bandwidth = device_peaks(device)
    repeat = 1 if stage.simulator else 3
    rec = stage.record
    rec["details"].update(device=device, fp64_peak=peak, bandwidth=bandwidth, repeat=repeat, rows={})
    rows = rec["details"]["rows"]
    cpu_later = []

    def summarise():
        table = {}
        for label, r in rows.items():
            if "nonlinear" in r:
                n = r["nonlinear"]
                table[label] = {"dofs": r["dofs"], "gpu_linearisation": n["gpu"]["wall"], "gpu_kernels":
                                n["gpu"]["total_kernels"], "jit_first_run": n["jit_first_run"],
                                "cpu_2_threads": n["cpu"]["wall"], "checks_failed":
                                [c for c, v in n["checks"].items() if not v["ok"]]}
                continue
            # the copies and kernels quoted are the default's (else the first reduction timed)
            g = r.get(f"gpu-{r.get('default')}", {})
            if "total_assembly" not in g:
                g = next((r[f"gpu-{a}"] for a in BENCH_APPROACHES if "total_assembly" in r.get(f"gpu-{a}", {})),
                         None)
            if not g:
                table[label] = r.get("status") or r.get("error")
                continue
            line = {"dofs": r["dofs"], "default": r.get("default"), "gpu_default_total":
                    r.get(f"gpu-{r.get('default')}", {}).get("total_assembly"),
                    "gpu_rows_total": r.get("gpu-2", {}).get("total_assembly"), "gpu_atomic_total":
                    r.get("gpu-atomic", {}).get("total_assembly"), "gpu_ordered_total":
                    r.get("gpu-ordered", {}).get("total_assembly"), "gpu_blocks_total":
                    r.get("gpu-blocks", {}).get("total_assembly"), "to_host": g["to_host"],
                    "to_device_mib": g.get("to_device_bytes", 0) / 2**20, "to_device": g.get("to_device_seconds"),
                    "kernels": g["total_kernels"]}
            # the deterministic reductions timed here, fastest first: whether "auto" chose the fastest of them
            timed = sorted((r[f"gpu-{a}"]["total_assembly"], a) for a in ("2", "ordered", "blocks")
                           if "total_assembly" in r.get(f"gpu-{a}", {}))
            if len(timed) > 1:
                line["fastest_deterministic"] = BENCH_NAMES[timed[0][1]]
                line["default_is_fastest"] = timed[0][1] == r.get("default")
            for key in ("paper", "target"):
                if r.get(key) is not None:
                    line[key] = r[key]
            if "meets_target" in r:
                line["meets_target"] = r["meets_target"]
            if "cpu" in r:
                line["cpu_2_threads"] = r["cpu"]["total_assembly"]
            if "gpu-2-kept" in r:
                line["gpu_rows_kept_later"] = r["gpu-2-kept"]["later"]["total_assembly"]
            for key, variant in r.items():  # the default's reduction in chunks of another budget
                if key.startswith("budget-") and "total_assembly" in variant:
                    line[f"gpu_default_total_{key}"] = [variant["total_assembly"], variant["chunks"]]
            table[label] = line
        rec["summary"] = {"device": device, "rows": table}
        stage.save()

    for label, table, build, paper, target, want_cpu in bench_cases(stage.simulator, stage.quick):
        if stage.bench_only and not any(text in label for text in stage.bench_only):
            continue
        if stage.left() < (5 if stage.simulator else 20):
            rows[label] = {"status": "not run: stage time limit"}
            continue
        t = time.perf_counter()
        try:
            space, problem = build()
            row = {"table": table, "dofs": int(space.n_dofs), "elements": int(space.mesh.n_elements),
                   "sub_simplices": int(space.mesh.n_simplices), "build_seconds": time.perf_counter() - t}
            if table == "nonlinear":
                row["nonlinear"] = bench_nonlinear(space, problem, backend, repeat)
                n = row["nonlinear"]
                say(f"bench {label}: {row['dofs']:,} dofs, linearisation {n['gpu']['wall']:.4f} s (kernels "
                    f"{n['gpu']['total_kernels']:.4f} s, jit {n['jit_first_run']:.1f} s), CPU 2 threads "
                    f"{n['cpu']['wall']:.4f} s")
                row["seconds"] = time.perf_counter() - t
                rows[label] = row
                summarise()
                free_device_memory(backend)
                continue
            default = chosen_approach("auto", space, backend)
            row["options"] = stage.bench_options  # besides the approach, for every assembly of the row
            approaches = tuple(a for a in BENCH_APPROACHES if a in stage.bench_approaches or a == default)
            if table == "largest":  # the default alone: another matrix of that size would not fit beside it
                approaches = (default,)
            row.update(bench_one(space, problem, backend, repeat, peak, bandwidth, approaches, stage.bench_options))
            # the default's reduction again, its chunks sized by this budget
            for mb in stage.bench_budgets if table != "largest" else ():
                options = {**stage.bench_options, "memory_budget_mb": mb}
                row[f"budget-{mb:g}"] = bench_one(space, problem, backend, repeat, peak, bandwidth, (default,),
                                                  options)[f"gpu-{default}"]
            if table == "table5":  # what repeated assemblies of one space cost (a Newton or time loop's)
                row["gpu-2-kept"] = bench_kept(space, problem, backend, repeat, stage.bench_options)
            # the default (approach "auto") runs one of the measured reductions: the targets are its
            row["default"] = default
            total = row[f"gpu-{row['default']}"].get("total_assembly", float("inf"))
            for key, value in (("paper", paper), ("target", target)):
                if isinstance(value, tuple):  # per million dofs
                    row[key] = value[1] * space.n_dofs / 1e6
                elif value is not None:
                    row[key] = value
            if "target" in row:
                row["meets_target"] = bool(total <= row["target"])
            if want_cpu:
                cpu_later.append((label, build))
        except Exception as exc:
            row = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-2000:]}
        row["seconds"] = time.perf_counter() - t
        rows[label] = row
        measured = {a: row[f"gpu-{a}"] for a in BENCH_APPROACHES if f"gpu-{a}" in row}
        first = next(iter(measured.values()), {})  # the copies of the first reduction timed
        say(f"bench {label}: " + (f"{row['dofs']:,} dofs, " + ", ".join(
            f"{BENCH_NAMES[a]} {m.get('total_assembly', float('nan')):.4f} s" for a, m in measured.items())
            + f", to host {first.get('to_host', float('nan')):.4f} s, to device "
            f"{first.get('to_device_bytes', 0) / 2**20:.0f} MiB in {first.get('to_device_seconds', float('nan')):.4f} s"
            if measured else str(row.get("error"))))
        summarise()
        free_device_memory(backend)
    # 2-thread CPU totals of the same cases, where time is left (the GPU figures come first)
    for label, build in cpu_later:
        if stage.left() < (5 if stage.simulator else 30):
            break
        try:
            space, problem = build()
            rows[label]["cpu"] = cpu_total(space, problem, 2)
            default = rows[label].get(f"gpu-{rows[label].get('default')}", {}).get("total_assembly")  # "auto"'s
            if default is not None:
                rows[label]["gpu_over_cpu"] = default / rows[label]["cpu"]["total_assembly"]
            say(f"bench {label}: CPU 2 threads {rows[label]['cpu']['total_assembly']:.4f} s")
        except Exception as exc:
            rows[label]["cpu"] = {"error": f"{type(exc).__name__}: {exc}"}
        summarise()
    summarise()
    stage.finish(all(any(f"gpu-{a}" in r for a in BENCH_APPROACHES) or ("nonlinear" in r and all(v["ok"] for v in r["nonlinear"]["checks"].values()))
                     for r in rows.values()))


# ---------------------------------------------------------------------------
# the driver


STAGE_FUNCTIONS = {"device": stage_device, "correctness": stage_correctness, "tests": stage_tests,
                   "kernels": stage_kernels, "bench": stage_bench}


def run_stage(args) -> int:
    if args.simulator:
        os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
    stage = Stage(args.stage, args)
    try:
        STAGE_FUNCTIONS[args.stage](stage)
    except Exception as exc:
        stage.record.update(status="error", error=f"{type(exc).__name__}: {exc}",
                            traceback=traceback.format_exc()[-3000:])
        stage.save()
        traceback.print_exc()
        return 1
    return 0


def _pump(stream, sinks) -> None:
    for line in iter(stream.readline, ""):
        for sink in sinks:
            sink.write(line)
            sink.flush()


def default_jobs(stage: str, simulator: bool, quick: bool) -> int:
    """Processes of a stage: the simulator's tiny cases run in one; on a GPU machine compilation (CPU-bound,
    per process) is spread over its cores, and the benchmark runs alone."""
    cores = os.cpu_count() or 2
    if stage in ("device", "bench") or quick:
        return 1
    if simulator:
        return 2 if stage == "tests" else 1
    return max(1, min(14, cores - 2))


def drive(args) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="polydg-gpu-run-"))
    start = time.monotonic()
    budget = dict(SIMULATOR_BUDGET if args.simulator else BUDGET)
    total = args.total if args.total else (sum(budget.values()) if args.simulator else TOTAL)
    for item in args.budget or []:
        name, _, seconds = item.partition("=")
        budget[name] = float(seconds)
    results = {"mode": "simulator" if args.simulator else "gpu", "quick": args.quick,
               "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "host": platform.node(), "total_budget": total,
               "budgets": {s: budget[s] for s in args.stages}, "stages": {}}
    if args.install_json and Path(args.install_json).exists():
        results["stages"]["install"] = json.loads(Path(args.install_json).read_text())
    write_json(out / "results.json", results)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if args.simulator:
        env["NUMBA_ENABLE_CUDASIM"] = "1"
    with open(out / "run.log", "a") as log:
        for name in args.stages:
            left = total - (time.monotonic() - start)
            limit = min(budget[name], left)
            if left < budget[name] and left < MIN_STAGE:  # cut short by the run's limit: not worth a start
                results["stages"][name] = {"status": "skipped", "reason": f"{left:.0f} s left of the run's {total} s"}
                write_json(out / "results.json", results)
                continue
            jobs = args.jobs or default_jobs(name, args.simulator, args.quick)
            cmd = [sys.executable, str(Path(__file__).resolve()), "--stage", name, "--out", str(out), "--work",
                   str(work), "--limit", f"{limit:.1f}", "--jobs", str(jobs)]
            cmd += ["--simulator"] * args.simulator + ["--quick"] * args.quick
            cmd += ["--bench-only", *args.bench_only] if args.bench_only and name == "bench" else []
            cmd += ["--bench-approaches", *args.bench_approaches] if args.bench_approaches and name == "bench" else []
            cmd += ["--bench-option", *args.bench_option] if args.bench_option and name == "bench" else []
            cmd += (["--bench-budgets", *map(str, args.bench_budgets)] if args.bench_budgets and name == "bench"
                    else [])
            # a stage of one process gives the host's stages (pattern, penalty, points) every core; a stage of
            # several, one thread per process
            threads = os.environ.get("OMP_NUM_THREADS") or str((os.cpu_count() or 1) if jobs == 1 else 1)
            banner = f"== stage {name}: limit {limit:.0f} s, {jobs} process(es)"
            say(banner)
            log.write(banner + "\n")
            t = time.monotonic()
            proc = subprocess.Popen(cmd, env=dict(env, OMP_NUM_THREADS=threads), stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True, start_new_session=True, cwd=REPO)
            pump = threading.Thread(target=_pump, args=(proc.stdout, (log, sys.stdout)), daemon=True)
            pump.start()
            try:
                rc = proc.wait(timeout=limit + min(GRACE, limit))
            except subprocess.TimeoutExpired:
                rc = None
            for sig in (signal.SIGTERM, signal.SIGKILL):  # the stage's leftovers (workers, pytest, mpiexec)
                try:
                    os.killpg(proc.pid, sig)
                except ProcessLookupError:
                    break
                time.sleep(0.5 if sig == signal.SIGTERM else 0)
            if rc is None:
                proc.wait()  # reaped; the status stays "timeout"
            pump.join(timeout=5)
            path = work / f"stage-{name}.json"
            rec = json.loads(path.read_text()) if path.exists() else {}
            if rc is None:
                rec["status"] = "timeout"
            elif rc != 0 and rec.get("status") in (None, "running", "ok"):
                rec["status"] = "error"
            elif rec.get("status") in (None, "running"):
                rec["status"] = "error"
            rec.update(seconds=round(time.monotonic() - t, 1), limit=round(limit, 1), returncode=rc)
            if name == "tests" and rc is None:  # the outcomes logged before the kill
                from gpu_test_log import summarise

                partial = summarise(work / "tests.jsonl")
                rec.setdefault("summary", {}).update(partial["counts"])
                rec.setdefault("details", {})["failures"] = partial["failures"]
            results["stages"][name] = rec
            results["total_seconds"] = round(time.monotonic() - start, 1)
            write_json(out / "results.json", results)
            line = f"== stage {name}: {rec['status']} in {rec['seconds']} s (limit {rec['limit']} s)"
            say(line)
            log.write(line + "\n")
    shutil.rmtree(work, ignore_errors=True)
    results["total_seconds"] = round(time.monotonic() - start, 1)
    write_json(out / "results.json", results)
    say(f"== results: {out / 'results.json'}")
    for name, rec in results["stages"].items():
        say(f"   {name:12s} {rec.get('status', '?'):8s} {rec.get('seconds', '')!s:>7} s  "
            f"{json.dumps(rec.get('summary', {}), default=_jsonable)[:300]}")
    return 0 if all(r.get("status") in ("ok", "skipped") for r in results["stages"].values()) else 1


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(REPO / "gpu-results"))
    ap.add_argument("--simulator", action="store_true", help="numba-cuda's simulator (backend cudasim), tiny sizes")
    ap.add_argument("--quick", action="store_true", help="one item per stage: every stage's code, in seconds")
    ap.add_argument("--stages", nargs="+", default=list(STAGES), choices=STAGES)
    ap.add_argument("--budget", nargs="*", metavar="STAGE=SECONDS", help="override a stage's time limit")
    ap.add_argument("--total", type=float, help=f"the whole run's limit in seconds (default {TOTAL} on a GPU, "
                    f"{sum(SIMULATOR_BUDGET.values())} on the simulator)")
    ap.add_argument("--jobs", type=int, help="processes per stage (default: by stage and machine)")
    ap.add_argument("--bench-only", nargs="+", metavar="TEXT", help="the bench's rows whose label holds one of "
                    "these (e.g. 'table4' 'cube:48' 'cube:38': what a first run left)")
    ap.add_argument("--bench-approaches", nargs="+", choices=(*BENCH_APPROACHES, "auto"), help="the reductions "
                    "the bench times besides the default's (\"auto\": the default's alone; default: all three)")
    ap.add_argument("--bench-option", nargs="+", metavar="NAME=VALUE", help="an assembly option for every "
                    "bench assembly, e.g. memory_budget_mb=4096 (the options of polydg.assembly.AssemblyOptions)")
    ap.add_argument("--bench-budgets", nargs="+", type=float, metavar="MB", help="also time the default's "
                    "reduction with each of these memory budgets (its chunks), e.g. 4096")
    ap.add_argument("--install-json", help="the install step's record (written by gpu_run.sh)")
    # internal: one stage, in its own process; the MPI ranks of the correctness stage
    ap.add_argument("--stage", choices=STAGES, help=argparse.SUPPRESS)
    ap.add_argument("--work", help=argparse.SUPPRESS)
    ap.add_argument("--limit", type=float, help=argparse.SUPPRESS)
    ap.add_argument("--mpi-ranks", help=argparse.SUPPRESS)
    ap.add_argument("--backend", help=argparse.SUPPRESS)
    ap.add_argument("--case", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.mpi_ranks:
        return mpi_ranks_main(args.mpi_ranks, args.backend, args.case)
    if args.stage:
        return run_stage(args)
    return drive(args)


if __name__ == "__main__":
    sys.exit(main())
