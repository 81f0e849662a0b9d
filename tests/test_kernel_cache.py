"""Compiled-kernel caches never outlive the code they were compiled from (``polydg.jit``).

Numba keys a cached function by the text of its own file only; polydg
therefore caches in a directory named after a hash of all its sources.
These tests edit a copy of the package, never the package itself.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import polydg
from polydg import jit

PACKAGE = Path(polydg.__file__).parent

#: a kernel in one module that freezes a constant of another module (batched.PAD) into its machine code
PROBE = '''
from numba import njit

from .assembly.batched import PAD


@njit(cache=True)
def pad_probe():
    return PAD
'''

RUN_PROBE = """
import polydg, polydg._probe as m
print(m.pad_probe(), m.pad_probe.stats.cache_hits.get((), 0), polydg.CACHE_DIRECTORY)
"""


def _copy_package(root: Path) -> Path:
    shutil.copytree(PACKAGE, root / "polydg", ignore=shutil.ignore_patterns("__pycache__"))
    (root / "polydg" / "_probe.py").write_text(PROBE)
    return root / "polydg"


def _run_probe(root: Path, cache_base: Path) -> tuple[int, int, str]:
    env = dict(os.environ, PYTHONPATH=str(root), NUMBA_CACHE_DIR=str(cache_base))
    out = subprocess.run([sys.executable, "-c", RUN_PROBE], env=env, cwd=root, capture_output=True, text=True,
                         timeout=300, check=True).stdout.split()
    return int(out[0]), int(out[1]), out[2]


def test_editing_a_dependency_recompiles_the_kernels_that_inline_it(tmp_path):
    package = _copy_package(tmp_path)
    base = tmp_path / "cache"
    value, hits, first_dir = _run_probe(tmp_path, base)
    assert (value, hits) == (4, 0)  # compiled
    assert _run_probe(tmp_path, base) == (4, 1, first_dir)  # loaded from the cache
    # edit only the dependency: Numba alone would load the probe's stale machine code (PAD = 4)
    batched = package / "assembly" / "batched.py"
    text = batched.read_text()
    assert "\nPAD = 4\n" in text
    batched.write_text(text.replace("\nPAD = 4\n", "\nPAD = 8\n"))
    value, hits, second_dir = _run_probe(tmp_path, base)
    assert (value, hits) == (8, 0) and second_dir != first_dir
    assert Path(first_dir).parent == Path(second_dir).parent == base


def test_the_cache_directory_is_keyed_by_the_sources(tmp_path):
    package = _copy_package(tmp_path)
    before = jit.source_hash(package)
    assert before == jit.source_hash(package) and len(before) == 16
    (package / "report.py").write_text((package / "report.py").read_text() + "\n# an edit\n")
    assert jit.source_hash(package) != before
    # the running package uses its own directory, and child processes inherit it
    assert polydg.CACHE_DIRECTORY.name == f"polydg-{jit.source_hash()}"
    assert os.environ["NUMBA_CACHE_DIR"] == str(polydg.CACHE_DIRECTORY)


def test_the_cache_base_follows_the_environment(tmp_path):
    assert jit.cache_base({"NUMBA_CACHE_DIR": str(tmp_path)}) == tmp_path
    # a directory set by a parent polydg process counts as its base
    assert jit.cache_base({"NUMBA_CACHE_DIR": str(tmp_path / "polydg-0123456789abcdef")}) == tmp_path
    assert jit.cache_base({"XDG_CACHE_HOME": str(tmp_path)}) == tmp_path / "polydg"
    env = {"NUMBA_CACHE_DIR": str(tmp_path)}
    chosen = jit.use_cache_directory(env)
    assert env["NUMBA_CACHE_DIR"] == str(chosen) and chosen.parent == tmp_path


def test_a_versions_first_use_removes_the_cache_directories_unused_for_long(tmp_path):
    import time

    day = 86400.0
    ages = {"polydg-00000000000000a1": 40, "polydg-00000000000000a2": 2, "polydg-notahash": 400, "other": 400}
    for name, age in ages.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "kernel.nbi").write_bytes(b"x")
        os.utime(tmp_path / name, (time.time() - age * day,) * 2)
    env = {"NUMBA_CACHE_DIR": str(tmp_path)}
    chosen = jit.use_cache_directory(env)  # a new directory: this version's first use
    # only polydg's own directories unused for UNUSED_DAYS go; other names are never touched
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([chosen.name, "polydg-00000000000000a2",
                                                                 "polydg-notahash", "other"])
    assert jit.UNUSED_DAYS == 30
    # an existing directory is marked as used at each import, and its use prunes nothing
    os.utime(chosen, (time.time() - 100 * day,) * 2)
    os.utime(tmp_path / "polydg-00000000000000a2", (time.time() - 100 * day,) * 2)
    assert jit.use_cache_directory(env) == chosen and time.time() - chosen.stat().st_mtime < day
    assert (tmp_path / "polydg-00000000000000a2").exists()
    # the directory kept is never removed, however old; a link is never followed; a removal cut short goes next
    elsewhere = tmp_path.parent / f"{tmp_path.name}-elsewhere"
    elsewhere.mkdir()
    (tmp_path / "polydg-00000000000000a3").symlink_to(elsewhere)
    cut_short = tmp_path / "polydg-00000000000000a4.removing-12"
    cut_short.mkdir()
    for path in (chosen, elsewhere, cut_short):
        os.utime(path, (time.time() - 100 * day,) * 2)
    removed = jit.prune_unused(tmp_path, keep=chosen)
    assert sorted(removed) == [tmp_path / "polydg-00000000000000a2", cut_short]
    assert chosen.is_dir() and elsewhere.is_dir() and (tmp_path / "polydg-00000000000000a3").is_symlink()
    assert not any(".removing-" in p.name for p in tmp_path.iterdir())


def test_compilation_is_announced_and_cache_loads_are_not():
    from numba import njit

    said = []
    with jit.announce_compilation(said.append, "test kernels"):
        njit(lambda x: x + 1)(1)  # not a polydg function: says nothing
    assert said == []
    source = textwrap.dedent("""
        from numba import njit

        @njit
        def f(x):
            return x + 2
    """)
    namespace = {"__name__": "polydg._announce_probe"}
    exec(compile(source, "<probe>", "exec"), namespace)
    with jit.announce_compilation(said.append, "test kernels"):
        assert namespace["f"](1) == 3
        assert namespace["f"](2) == 4  # compiled once: one message pair
    assert said[0] == "compiling the test kernels (first run only, cached for later runs)"
    assert len(said) == 2 and said[1].startswith("compiled the test kernels in ")


def _probe(name: str):
    """A fresh function of a polydg module (so that compiling it counts), compiled on its first call."""
    namespace = {"__name__": f"polydg._probe_{name}"}
    exec(compile("from numba import njit\n\n@njit\ndef f(x):\n    return x + 2\n", "<probe>", "exec"), namespace)
    return namespace["f"]


def test_compilation_inside_a_timed_stage_is_moved_to_jit():
    import time

    from polydg.assembly.timing import Timer

    f = _probe("timer")
    timer = Timer()
    before = jit.compiled_seconds()
    start = time.perf_counter()
    assert f(1) == 3
    timer.add("indices", start)
    compiled = jit.compiled_seconds() - before
    assert compiled > 0
    assert abs(timer.t["jit"] - compiled) <= 1e-9  # the stage's compilation is jit's
    assert 0 <= timer.t["indices"] < compiled  # and not the stage's
    timer.add("values", time.perf_counter())  # nothing compiled since: nothing moved
    assert abs(timer.t["jit"] - compiled) <= 1e-9


def test_a_device_kernels_compilation_inside_a_stage_is_jit_and_not_the_stages():
    """numba-cuda compiles a kernel at its first launch, unseen by polydg.jit: the executor closes that interval
    with Timer.compiled, and the stage around it (the point maps' queued launch) leaves it out."""
    import time

    from polydg.assembly.timing import Timer

    timer = Timer()
    start = time.perf_counter()
    time.sleep(0.02)  # the stage's own work
    compiling = time.perf_counter()
    time.sleep(0.05)  # the compilation
    compiled = timer.compiled(compiling) - compiling
    stage_end = timer.add("quadrature_points", start)
    assert compiled >= 0.05 and timer.t["jit"] == compiled
    assert abs(timer.t["quadrature_points"] - (stage_end - start - compiled)) <= 1e-12  # all of it but the jit
    assert timer.t["quadrature_points"] >= 0.02
    later = time.perf_counter()
    timer.add("coefficients", later)  # a later stage: nothing to leave out, jit unchanged
    assert timer.t["jit"] == compiled and timer.t["coefficients"] >= 0


def test_a_device_assemblys_stages_do_not_wait_for_the_device_and_its_total_does(monkeypatch):
    """The stages of a GPU assembly leave the device's queued work running (the host prepares the next chunk
    meanwhile); the total waits for it, once, after the last stage.  A CPU assembly given a recording
    synchronizer in place of the GPU's (the CPU's and the simulator's have none): the assembler's logic."""
    from polydg import backend as bk
    from polydg.assembly import assemble
    from polydg.assembly.timing import Timer
    from polydg.mesh import build_polytopic_mesh, from_spec
    from polydg.problem import builtin_problem
    from polydg.space import DGSpace

    assert bk.device_synchronizer("numpy") is None and bk.device_synchronizer("cudasim") is None
    waits = []
    timer = Timer(sync=lambda: waits.append("stage"))
    timer.add("element_kernel", timer.add("quadrature_points", 0.0))
    assert waits == [] and timer.t["quadrature_points"] > 0
    closes = []
    real_add = Timer.add
    monkeypatch.setattr(Timer, "add", lambda self, key, start: closes.append(key) or real_add(self, key, start))
    monkeypatch.setattr(bk, "device_synchronizer", lambda backend: (lambda: waits.append(len(closes))))
    space = DGSpace(build_polytopic_mesh(from_spec("square:2")), 1)
    result = assemble(space, builtin_problem("poisson", 2), backend="numpy")
    assert waits == [len(closes)] and result.info["timings"]["total_assembly"] > 0  # once, after every stage


def test_the_python_api_warns_once_that_it_compiles_and_the_command_line_does_not(monkeypatch):
    import warnings

    from polydg.errors import CompilationWarning

    monkeypatch.setattr(jit._CLOCK, "warned", False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _probe("warn1")(1)
        _probe("warn2")(1)
    said = [w for w in caught if issubclass(w.category, CompilationWarning)]
    assert len(said) == 1 and "compiling its kernels" in str(said[0].message)
    monkeypatch.setattr(jit._CLOCK, "warned", False)
    said = []
    with warnings.catch_warnings(record=True) as caught, jit.compile_watch(said.append, "the probes") as watch:
        warnings.simplefilter("always")
        _probe("warn3")(1)
        assert watch.finish() > 0 and watch.finish() == watch.seconds  # frozen once said
    assert not [w for w in caught if issubclass(w.category, CompilationWarning)]
    assert said[0] == "compiling the probes (first run only, cached for later runs)"
    assert said[1] == watch.line() and said[1].startswith(f"compiled the probes in {watch.seconds:.2f} s (other ")
    assert len(said) == 2  # the block's end says nothing more
    monkeypatch.setattr(jit._CLOCK, "warned", False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a warning turned into an error does not break the compilation
        assert _probe("warn4")(1) == 3


def test_the_suites_warm_up_compiled_every_set():
    # conftest.py's warm-up, in xdist's controller, hands its outcome to the workers: a set that stopped working
    # (an API renamed under it) fails here rather than only costing time
    given = os.environ.get("POLYDG_TEST_WARMUP_OUTCOME")
    if given is None:
        pytest.skip("no warm-up in this session (only the whole suite under xdist has one)")
    outcome = json.loads(given)
    assert outcome == "done before" or all(isinstance(value, float) for value in outcome.values()), outcome


def test_the_warm_up_runs_for_the_whole_suite_under_xdist_only():
    from types import SimpleNamespace

    from .conftest import _whole_suite_under_xdist

    sources = pytest.Config.ArgsSource

    def config(args_source=sources.TESTPATHS, xdist=True, worker=False, **changed):
        option = dict(numprocesses=2, keyword="", markexpr="", lf=False, failedfirst=False, stepwise=False,
                      exitfirst=False)
        option.update(changed)
        made = SimpleNamespace(option=SimpleNamespace(**option), args_source=args_source,
                               pluginmanager=SimpleNamespace(hasplugin=lambda name: xdist and name == "dsession"))
        if worker:
            made.workerinput = {}
        return made

    assert _whole_suite_under_xdist(config()) and _whole_suite_under_xdist(config(numprocesses=4))
    for other in (config(args_source=sources.ARGS), config(xdist=False), config(worker=True), config(numprocesses=1),
                  config(keyword="mesh"), config(markexpr="slow"), config(lf=True), config(failedfirst=True),
                  config(stepwise=True), config(exitfirst=True)):
        assert not _whole_suite_under_xdist(other)


def test_the_suites_warm_up_reports_a_set_that_fails_and_does_not_stop():
    # conftest.py compiles the suite's kernels before xdist's workers start; a set that fails is reported
    # (its last line of stderr) and the suite goes on to compile what it needs itself
    from .kernel_warmup import warm_in_parallel

    outcome = warm_in_parallel(("no-such-set",), timeout=60)
    assert list(outcome) == ["no-such-set"]
    assert outcome["no-such-set"].startswith("exit 1: KeyError: 'no-such-set'"), outcome


def test_the_warm_ups_stamp_names_where_the_sources_lie(tmp_path):
    # Numba keys its cache by a source file's path: a clone of the same commit elsewhere (CI's) must warm up
    # again, so the stamp changes with polydg's folder and with the warm-up's own files' folder and contents
    from .kernel_warmup import SOURCES, stamp_name

    here = Path(SOURCES[0]).parents[1] / "polydg"
    assert stamp_name(here) == stamp_name(here) and stamp_name(here).startswith("tests-warm-")
    copies = []
    for source in SOURCES:
        copies.append(tmp_path / source.name)
        copies[-1].write_bytes(source.read_bytes())
    assert stamp_name(tmp_path / "polydg") != stamp_name(here)
    copied = stamp_name(here, tuple(copies))
    assert copied != stamp_name(here)
    copies[0].write_bytes(copies[0].read_bytes() + b"\n")
    assert stamp_name(here, tuple(copies)) != copied


#: every GPU kernel of a few spaces, as numba-cuda would key it on disk: the cache kind, whether it lives in
#: polydg's cache directory, and a hash of the closure (the per-degree tables) that its key holds
GPU_KERNEL_KEYS = """
import hashlib
import numpy as np
import polydg
from numba.cuda.dispatcher import CUDADispatcher
from numba.cuda.serialize import dumps
from polydg.assembly import cuda_kernels, cuda_linearized, cuda_points, cuda_sums

for ns in (cuda_kernels.gpu_kernels(2, 1, np.float64, "P"), cuda_kernels.gpu_kernels(3, 2, np.float32, "PQ"),
           cuda_sums.gpu_sum_kernels(3, 2, np.float64, "P"), cuda_linearized.linearized_gpu_kernels(2, 2, "P"),
           cuda_points, cuda_kernels):
    for name, k in sorted(vars(ns).items()):
        if isinstance(k, CUDADispatcher) and not k.targetoptions.get("device"):
            closure = tuple(c.cell_contents for c in k.py_func.__closure__ or ())
            where = str(getattr(k._cache, "_cache_path", "")).startswith(str(polydg.CACHE_DIRECTORY))
            print(name, type(k._cache).__name__, where, hashlib.sha256(dumps(closure)).hexdigest())
"""


def _gpu_kernel_keys(**env) -> list[str]:
    """The lines of GPU_KERNEL_KEYS run with numba-cuda's real compiler (kernels made, none compiled: no GPU
    is needed)."""
    pytest.importorskip("numba.cuda")
    environ = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    environ["PYTHONPATH"] = str(PACKAGE.parent) + os.pathsep + environ.get("PYTHONPATH", "")
    run = subprocess.run([sys.executable, "-c", GPU_KERNEL_KEYS], env=dict(environ, **env), capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    return run.stdout.splitlines()


def test_gpu_kernels_are_kept_on_disk_under_the_same_key_in_every_process():
    """A GPU kernel compiled by one process is loaded by the next (the command line's second run, each test
    worker after the first) only if both key it alike: its closure must pickle to the same bytes whatever
    the process' hash seed, and its cache must be polydg's directory, which follows the sources."""
    first, second = _gpu_kernel_keys(PYTHONHASHSEED="1"), _gpu_kernel_keys(PYTHONHASHSEED="2")
    assert len(first) >= 20 and first == second
    assert all(line.split()[1:3] == ["CUDACache", "True"] for line in first), first
    names = {line.split()[0] for line in first}
    assert {"volume_rows", "interior_entries", "map_points", "pattern_indices", "field"} <= names
    # POLYDG_CUDA_CACHE=0, which compiles in every process instead: the CuPy test of the disk cache runs with it
