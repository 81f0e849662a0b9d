"""Faults at the edges (#31): no rank left waiting, output whole or not at all and never stale, targets
checked before any work, non-finite values refused in one line, memory estimated before it is allocated.

These tests start processes and signal them; every process has a timeout and is killed in a finally.
Runs are the smallest that show the point, and share the suite's compiled kernels.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
HARNESS = HERE / "fault_harness.py"
MPIEXEC = shutil.which("mpiexec")

#: a run that takes minutes: a refusal before it starts is one that comes before the mesh
LONG_RUN = ["--mesh", "cube:24", "--agglomerate", "0", "--degree", "2", "--solve"]


def environment(**extra) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("NUMBA_NUM_THREADS", None)
    env.update({k: str(v) for k, v in extra.items()})
    return env


def cli(*args, timeout: float = 300, preexec_fn=None, **env) -> tuple[subprocess.CompletedProcess, float]:
    start = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "polydg.assemble", *map(str, args)], capture_output=True, text=True,
                       env=environment(**env), cwd=ROOT, timeout=timeout, preexec_fn=preexec_fn)
    return r, time.perf_counter() - start


def our_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("polydg.assemble:")]


def one_line(r: subprocess.CompletedProcess, code: int, *words: str) -> str:
    """The run exited with ``code`` and said one line (of polydg's) holding ``words``, and no traceback."""
    lines = our_lines(r.stderr)
    assert r.returncode == code, (r.returncode, r.stderr[-2000:])
    assert len(lines) == 1 and "Traceback" not in r.stderr and "Warning" not in r.stderr, r.stderr[-2000:]
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


# ---------------------------------------------------------------------------
# the targets, checked before any work


@pytest.fixture()
def read_only(tmp_path):
    """A read-only directory (a read-only file system for root, whom access bits do not stop), with a
    writable directory inside it; yields (read_only, writable_inside, command prefix to run in)."""
    top = tmp_path / "ro"
    inside = top / "rw"
    inside.mkdir(parents=True)
    if os.geteuid() != 0:
        top.chmod(0o555)
        try:
            yield top, inside, []
        finally:
            top.chmod(0o755)
        return
    unshare = shutil.which("unshare")
    writable = tmp_path / "writable"
    writable.mkdir()
    script = (f"mount -t tmpfs -o size=1m tmpfs {top} && mkdir {inside} && mount -o remount,ro {top} && "
              f"mount --bind {writable} {inside} && exec \"$@\"")
    probe = subprocess.run([unshare or "unshare", "-m", "sh", "-c", script, "sh", "true"], capture_output=True) \
        if unshare else None
    if probe is None or probe.returncode != 0:
        pytest.skip("no way to make a read-only directory here (root without unshare -m)")
    yield top, inside, ["unshare", "-m", "sh", "-c", script, "sh"]


def run_in(prefix: list[str], *args, timeout: float = 300) -> tuple[subprocess.CompletedProcess, float]:
    start = time.perf_counter()
    r = subprocess.run([*prefix, sys.executable, "-m", "polydg.assemble", *map(str, args)], capture_output=True,
                       text=True, env=environment(), cwd=ROOT, timeout=timeout)
    return r, time.perf_counter() - start


@pytest.mark.parametrize("case", ["read-only directory", "file in the way", "--json at a directory",
                                  "empty name", "name too long", "below a file"])
def test_a_target_that_cannot_be_written_is_refused_before_any_work(tmp_path, request, case):
    # only the read-only case needs (and may have to skip for) a read-only directory
    top, _, prefix = request.getfixturevalue("read_only") if case == "read-only directory" else \
        (tmp_path / "ro", None, [])
    (tmp_path / "a-file").write_text("mine")
    args = {"read-only directory": ["--output", top / "out"],
            "file in the way": ["--output", tmp_path / "a-file"],
            "--json at a directory": ["--json", tmp_path],
            "empty name": ["--output", ""],
            "name too long": ["--output", tmp_path / ("x" * 300)],
            "below a file": ["--json", tmp_path / "a-file" / "run.json"]}[case]
    r, seconds = run_in(prefix, *LONG_RUN, *args)
    line = one_line(r, 2, "--output" if "--output" in args else "--json")
    assert "mesh" not in r.stderr.replace(line, "")  # not a progress line: nothing was read or generated
    assert seconds < 30  # the run itself would take minutes
    assert (tmp_path / "a-file").read_text() == "mine" and not (top / "out").exists()


def test_a_writable_directory_in_a_read_only_parent_takes_the_output(read_only):
    top, inside, prefix = read_only
    r, _ = run_in(prefix, "--mesh", "square:4", "--degree", "1", "--quiet", "--output", inside / "out")
    assert r.returncode == 0, r.stderr
    if prefix:  # the bind mount is gone with its namespace; the files are in the writable folder behind it
        inside = top.parent / "writable"
    assert (inside / "out" / "matrix.npz").exists()
    assert sorted(p.name for p in (inside / "out").iterdir() if p.name.startswith(".")) == [".polydg-output"]


# ---------------------------------------------------------------------------
# the output set: whole, never stale, never over a user's file


def output_set(directory: Path) -> dict:
    """The set in ``directory``: its manifest, checked against the files and their sizes."""
    names = json.loads((directory / ".polydg-output").read_text())["files"]
    hidden = sorted(p.name for p in directory.iterdir() if p.name.startswith("."))
    assert hidden == [".polydg-output"], hidden  # no staging folder, journal or temporary file
    for name in names:
        assert (directory / name).is_file(), name
    summary = json.loads((directory / "summary.json").read_text())
    A = sp.load_npz(directory / "matrix.npz")
    assert A.shape == (summary["dofs"],) * 2 and np.load(directory / "rhs.npy").shape == (summary["dofs"],)
    if "solution.npy" in names:
        assert np.load(directory / "solution.npy").shape == (summary["dofs"],)
    return {"files": sorted(names), "dofs": summary["dofs"]}


OLD = ["--mesh", "square:8", "--agglomerate", "10", "--degree", "1", "--solve", "--quiet"]
NEW = ["--mesh", "square:12", "--agglomerate", "20", "--degree", "1", "--quiet"]
OLD_SET = ["matrix.npz", "rhs.npy", "solution.npy", "solution.vtu", "summary.json"]
NEW_SET = ["matrix.npz", "mesh.vtu", "rhs.npy", "summary.json"]  # no solve: the mesh, not a solution


@pytest.fixture()
def earlier_run(tmp_path) -> Path:
    """DIR after a run that solved (30 dofs), with a user's file beside its set."""
    out = tmp_path / "out"
    r, _ = cli(*OLD, "--output", out)
    assert r.returncode == 0, r.stderr
    (out / "notes.txt").write_text("mine")
    assert output_set(out) == {"files": OLD_SET, "dofs": 30}
    return out


def test_a_second_run_replaces_the_whole_set_and_leaves_the_users_file(earlier_run):
    r, _ = cli(*NEW, "--output", earlier_run)
    assert r.returncode == 0, r.stderr
    assert output_set(earlier_run) == {"files": NEW_SET, "dofs": 60}  # no solution.npy of the first run
    assert (earlier_run / "notes.txt").read_text() == "mine"


@pytest.mark.parametrize("in_the_way", ["file", "directory"])
def test_a_users_file_where_polydg_would_write_is_refused_and_left_alone(tmp_path, in_the_way):
    out = tmp_path / "out"
    out.mkdir()
    if in_the_way == "file":
        (out / "matrix.npz").write_text("mine")
    else:
        (out / "rhs.npy").mkdir()
    r, _ = cli(*NEW, "--output", out)
    one_line(r, 2, "matrix.npz" if in_the_way == "file" else "rhs.npy", "move")
    assert sorted(p.name for p in out.iterdir()) == (["matrix.npz"] if in_the_way == "file" else ["rhs.npy"])
    if in_the_way == "file":
        assert (out / "matrix.npz").read_text() == "mine"


def harness(ranks: int, moment: str, args: list, mark: Path, pause: float = 30) -> subprocess.Popen:
    env = environment(POLYDG_TEST_MOMENT=moment, POLYDG_TEST_MARK=mark, POLYDG_TEST_PAUSE=pause)
    command = [sys.executable, str(HARNESS), *map(str, args)]
    if ranks > 1:
        command = [MPIEXEC, "-n", str(ranks), *command]
    return subprocess.Popen(command, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def signal_at(process: subprocess.Popen, mark: Path, signum: int, timeout: float = 120) -> tuple[str, float]:
    """Wait until the harness reaches its moment, send ``signum`` to the process, wait for its end."""
    try:
        deadline = time.monotonic() + timeout
        while not mark.exists():
            assert process.poll() is None, process.communicate()[1][-2000:]
            assert time.monotonic() < deadline, "the moment never came"
            time.sleep(0.05)
        time.sleep(0.3)
        sent = time.monotonic()
        process.send_signal(signum)
        _, stderr = process.communicate(timeout=60)
        return stderr, time.monotonic() - sent
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


WRITING = [(1, "staging", signal.SIGTERM), (1, "commit", signal.SIGINT), (1, "after", signal.SIGTERM),
           (1, "staging", signal.SIGINT)]
if MPIEXEC is not None:
    WRITING += [(2, "staging", signal.SIGINT), (2, "commit", signal.SIGTERM), (2, "after", signal.SIGINT)]


@pytest.mark.parametrize("ranks,moment,signum", WRITING)
def test_a_signal_while_writing_leaves_the_old_set_or_the_new_one(earlier_run, tmp_path, ranks, moment, signum):
    pytest.importorskip("mpi4py") if ranks > 1 else None
    mark = tmp_path / "mark"
    process = harness(ranks, moment, [*NEW, "--output", earlier_run], mark, pause=3 if moment == "commit" else 30)
    stderr, seconds = signal_at(process, mark, signum)
    # the launcher forwards the signal to every rank: one line all the same, the exit code 128 + signal
    assert process.returncode == 128 + signum, (process.returncode, stderr)
    lines = our_lines(stderr)  # rank 0's own signal, or the one a rank reported first
    assert len(lines) == 1 and lines[0].startswith("polydg.assemble: interrupted (") and \
        lines[0].endswith(f"{signal.Signals(signum).name})"), stderr
    expected = {"files": OLD_SET, "dofs": 30} if moment == "staging" else {"files": NEW_SET, "dofs": 60}
    assert output_set(earlier_run) == expected  # old whole, or new whole (the renames are not interrupted)
    assert (earlier_run / "notes.txt").read_text() == "mine"
    assert seconds < 30


@pytest.mark.parametrize("moment", ["staging", "commit"])
def test_a_killed_writers_leftover_is_removed_by_the_next_run(earlier_run, tmp_path, moment):
    mark = tmp_path / "mark"
    process = harness(1, moment, [*NEW, "--output", earlier_run], mark)
    signal_at(process, mark, signal.SIGKILL)
    hidden = {p.name.split("-")[1] for p in earlier_run.iterdir() if p.name.startswith(".polydg-")}
    assert hidden == ({"output", "staging"} if moment == "staging" else {"output", "staging", "commit"})
    r, _ = cli(*NEW, "--output", earlier_run)
    assert r.returncode == 0, r.stderr
    assert output_set(earlier_run) == {"files": NEW_SET, "dofs": 60}
    assert (earlier_run / "notes.txt").read_text() == "mine"


def test_ctrl_c_as_the_run_ends_is_no_traceback(tmp_path):
    mark = tmp_path / "mark"
    process = harness(1, "end", ["--mesh", "square:4", "--degree", "1", "--quiet"], mark)
    try:
        _, stderr = process.communicate(timeout=300)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert mark.exists() and process.returncode == 0 and stderr == "", stderr


# ---------------------------------------------------------------------------
# finite or refused


PROBLEMS = '''
import numpy as np
from polydg.problem import Problem

def _one_inf(x):
    a = np.ones(len(x))
    a[len(x) // 2] = np.inf
    return a

INF_DIFFUSION = Problem("inf-diffusion", diffusion=_one_inf, source=1.0)
HUGE_DIFFUSION = Problem("huge-diffusion", diffusion=lambda x: np.full(len(x), 1e308), source=1.0)
HUGE_SOURCE = Problem("huge-source", diffusion=1.0, source=lambda x: np.full(len(x), 1e308))
OVERFLOWING_SOURCE = Problem("overflowing-source", diffusion=1.0, source=lambda x: np.exp(1000 * x[:, 0]))
INDEFINITE = Problem("indefinite", source=1.0,
                     diffusion=lambda x: np.broadcast_to([[1.0, 2.0], [2.0, 1.0]], (len(x), 2, 2)).copy())
'''

NON_FINITE = {
    "--penalty inf": (["--penalty", "inf"], ["--penalty", "finite"]),
    "--penalty 1e200 --solve": (["--penalty", "1e200", "--solve"], ["solve", "penalty"]),
    "an inf coefficient": (["--problem", "{}:INF_DIFFUSION"], ["diffusion", "inf"]),
    "a 1e308 diffusion": (["--problem", "{}:HUGE_DIFFUSION", "--solve"], ["diffusion", "1e+308", "overflow"]),
    "a 1e308 source": (["--problem", "{}:HUGE_SOURCE", "--solve"], ["source", "1e+308", "overflow"]),
    "an overflowing source": (["--problem", "{}:OVERFLOWING_SOURCE", "--solve"], ["source", "inf"]),
    "an indefinite callable diffusion": (["--problem", "{}:INDEFINITE"], ["diffusion", "not positive semi-definite"]),
}


@pytest.mark.parametrize("case", list(NON_FINITE))
def test_non_finite_values_are_refused_in_one_line_naming_the_cause(tmp_path, case):
    (tmp_path / "problems.py").write_text(PROBLEMS)
    args, words = NON_FINITE[case]
    args = [a.format(tmp_path / "problems.py") for a in args]
    r, _ = cli("--mesh", "square:8", "--agglomerate", "10", "--degree", "1", "--quiet", "--output", tmp_path / "out",
               *args)
    line = one_line(r, 2, *words)
    if "overflow" in words:  # the cause before what failed, and no solver advice that would send the user elsewhere
        assert "try " not in line and "singular" not in line, line
        assert "solve" not in line or line.index("overflow") < line.index("solve"), line
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------------------
# memory, estimated first


def test_the_memory_estimate_refuses_a_matrix_that_cannot_fit_before_the_mesh_is_made():
    r, seconds = cli("--mesh", "cube:40", "--agglomerate", "0", "--degree", "3", POLYDG_MEMORY_LIMIT="4G")
    line = one_line(r, 2, "11.4 GB", "760,320,000 nonzeros", "4.0 GB is available", "degree 2",
                    "(the limit given: --memory-limit or $POLYDG_MEMORY_LIMIT)")
    assert "mesh" not in r.stderr.replace(line, "")  # refused from the generator's sizes
    assert seconds < 30  # (about 1 s of work; generating cube:40 and its faces alone take 6 s)


def test_a_mesh_that_cannot_be_built_in_the_memory_is_refused_before_it_is_generated():
    # a tiny matrix (10 elements) of a fine mesh whose polytopic mesh alone would take some 30 GB
    r, seconds = cli("--mesh", "cube:200:perturb=0.1", "--agglomerate", "10", POLYDG_MEMORY_LIMIT="2G")
    one_line(r, 2, "building the polytopic mesh of cube:200:perturb=0.1's 48,000,000 cells needs about 30.4 GB",
             "2.0 GB is available (the limit given", "what fits: cube:80:perturb=0.1")
    assert seconds < 30  # (about 1 s: generating cube:200 alone takes 1.5 GB and several seconds)
    r, _ = cli("--mesh", "cube:8", "--agglomerate", "10", "--quiet", POLYDG_MEMORY_LIMIT="2G")
    assert r.returncode == 0, r.stderr


def test_the_memory_estimate_reads_ulimit_and_lets_a_run_that_fits_go():
    import resource

    def four_gigabytes():
        resource.setrlimit(resource.RLIMIT_AS, (4 * 2**30, resource.RLIM_INFINITY))

    r, _ = cli("--mesh", "cube:40", "--agglomerate", "0", "--degree", "3", preexec_fn=four_gigabytes)
    one_line(r, 2, "11.4 GB", "ulimit -v")
    r, _ = cli("--mesh", "cube:3", "--agglomerate", "0", "--degree", "1", "--quiet", "--solve",
               preexec_fn=four_gigabytes)
    assert r.returncode == 0, r.stderr


def test_the_estimate_counts_the_matrix_exactly(monkeypatch):
    from polydg.assembly import assemble
    from polydg.assembly.memory import assembly_estimate, check_assembly_memory
    from polydg.assembly.options import AssemblyOptions
    from polydg.errors import MemoryLimitError
    from polydg.mesh import from_spec
    from polydg.partition import agglomerate
    from polydg.problem import builtin_problem
    from polydg.space import DGSpace

    mesh = agglomerate(from_spec("square:8"), 12)
    space = DGSpace(mesh, np.random.default_rng(1).integers(0, 4, mesh.n_elements))
    options = AssemblyOptions()
    rows = np.arange(3, 9)
    result = assemble(space, builtin_problem("paper-2d", 2), options)
    estimate = assembly_estimate(space, options)
    assert estimate.nnz == result.matrix.nnz and estimate.rows == space.n_dofs
    assert assembly_estimate(space, options, rows).nnz == result.matrix[
        space.dof_offsets[3]:space.dof_offsets[9]].nnz
    assert estimate.matrix >= result.matrix.data.nbytes + result.matrix.indices.nbytes
    monkeypatch.setenv("POLYDG_MEMORY_LIMIT", str(estimate.total - 1))
    with pytest.raises(MemoryLimitError, match="the assembly needs about"):
        check_assembly_memory(space, options)
    with pytest.raises(MemoryLimitError):  # assemble() refuses it too, before its first kernel
        assemble(space, builtin_problem("paper-2d", 2), options)
    monkeypatch.setenv("POLYDG_MEMORY_LIMIT", str(estimate.total))
    check_assembly_memory(space, options)


def test_what_a_refusal_says_fits_does_fit(monkeypatch):
    """A chunk that does not fit: the tip is a smaller --memory-budget, and the run with it passes; a matrix that
    does not fit: a lower degree with the smallest chunk offered, which passes too."""
    import re

    from polydg.assembly.memory import SMALLEST_CHUNK_MB, assembly_estimate, check_assembly_memory
    from polydg.assembly.options import AssemblyOptions
    from polydg.errors import MemoryLimitError
    from polydg.mesh import build_polytopic_mesh, from_spec
    from polydg.space import DGSpace

    mesh = build_polytopic_mesh(from_spec("square:128"))
    space, options = DGSpace(mesh, 2), AssemblyOptions()
    estimate = assembly_estimate(space, options)
    assert estimate.chunk > 4 * SMALLEST_CHUNK_MB * 2**20
    monkeypatch.setenv("POLYDG_MEMORY_LIMIT", str(estimate.matrix + estimate.tables + estimate.chunk // 2))
    with pytest.raises(MemoryLimitError, match=r"what fits: --memory-budget \d+ \(memory_budget_mb") as info:
        check_assembly_memory(space, options)
    budget = int(re.search(r"--memory-budget (\d+)", str(info.value)).group(1))
    check_assembly_memory(space, AssemblyOptions(memory_budget_mb=budget))
    monkeypatch.setenv("POLYDG_MEMORY_LIMIT", str(estimate.matrix // 2))
    with pytest.raises(MemoryLimitError) as info:
        check_assembly_memory(space, options)
    degree = int(re.search(rf"what fits: degree (\d) \([\d.]+ MB with --memory-budget {SMALLEST_CHUNK_MB}\)",
                           str(info.value)).group(1))
    check_assembly_memory(DGSpace(mesh, degree), AssemblyOptions(memory_budget_mb=SMALLEST_CHUNK_MB))


def test_a_direct_solve_whose_factors_cannot_fit_is_refused():
    r, _ = cli("--mesh", "square:48", "--agglomerate", "0", "--degree", "2", "--solve", "direct",
               POLYDG_MEMORY_LIMIT="40M")  # auto would choose the iterative solve here
    one_line(r, 2, "direct solver's factors", "--solve iterative")


def test_sizes_and_limits_read_as_they_are_written():
    from polydg.assembly.memory import available_memory, format_bytes, parse_size
    from polydg.errors import OptionError
    from polydg.mesh.generators import from_spec, spec_sizes

    assert parse_size("4G") == 4 * 2**30 and parse_size("1.5 GB") == 3 * 2**29 and parse_size("512") == 512
    for bad in ("lots", "-1G", "0", "inf"):
        with pytest.raises(OptionError):
            parse_size(bad)
    assert format_bytes(4 * 2**30) == "4.0 GB"
    room, source = available_memory()
    assert room is None or room > 0
    for spec in ("square:5", "cube:3", "oscillating-square:4:perturb=0.1"):
        fine = from_spec(spec)
        from polydg.mesh import build_polytopic_mesh

        mesh = build_polytopic_mesh(fine)
        assert spec_sizes(spec) == (mesh.dim, mesh.n_elements, mesh.n_interfaces)


# ---------------------------------------------------------------------------
# the smaller points


def test_an_unwritable_kernel_cache_is_replaced_and_said_once(tmp_path):
    code = ("import warnings, polydg; from polydg.mesh.output import _walk_loops; import numpy as np; "
            "z = np.zeros(1, np.int64); _walk_loops(z, z[:0], z[:0], 0, z[:0], np.ones(0, bool)); "
            "print(polydg.CACHE_DIRECTORY)")
    r = subprocess.run([sys.executable, "-W", "always", "-c", code], capture_output=True, text=True, cwd=ROOT,
                       env=environment(NUMBA_CACHE_DIR="/proc/no-cache-here", TMPDIR=tmp_path), timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().startswith(str(tmp_path))  # not the source tree's __pycache__
    assert r.stderr.count("cannot be written") == 1 and "/proc/no-cache-here" in r.stderr
    assert not list((ROOT / "polydg" / "mesh").glob("__pycache__/*.nbi"))


def test_an_interrupt_lost_in_a_callback_from_c_ends_the_run_at_its_next_progress_line(capsys):
    """A signal whose exception is raised inside a ctypes callback (as LLVM's object cache calls back during a
    Numba compilation) is swallowed there and reaches only ``sys.unraisablehook``: the guard notes it and the
    next progress line raises it again; an interrupt that was not lost is not raised twice."""
    import ctypes

    from polydg.cli import signals
    from polydg.cli.progress import Progress
    from polydg.errors import Interrupted

    guard = signals.SignalGuard()
    hook = sys.unraisablehook
    sys.unraisablehook = lambda info: guard.note_unraisable(info) or hook(info)
    signals.use(guard)
    try:
        callback = ctypes.CFUNCTYPE(None)(lambda: guard._handle(signal.SIGINT, None))
        callback()  # the handler's exception is lost in the callback: the run would go on
        assert guard.received == signal.SIGINT and guard.swallowed
        with pytest.raises(Interrupted) as raised:
            Progress(quiet=True)("polytopic mesh: 32 elements")
        assert raised.value.signum == signal.SIGINT and not guard.swallowed
        Progress(quiet=True)("DG space")  # raised once: the unwinding is not cut short by it again
        other = signals.SignalGuard()
        assert not other.note_unraisable(type("Info", (), {"exc_value": Interrupted(signal.SIGINT)})())
    finally:
        signals.use(None)
        sys.unraisablehook = hook


def test_ctrl_c_during_a_cold_compilation_is_an_interrupt(tmp_path):
    process = subprocess.Popen([sys.executable, "-m", "polydg.assemble", "--mesh", "square:4", "--degree", "1"],
                               env=environment(NUMBA_CACHE_DIR=tmp_path), cwd=ROOT, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        seen = ""
        while "compiling" not in seen and time.monotonic() < deadline:
            seen += process.stderr.readline()
        time.sleep(2)
        process.send_signal(signal.SIGINT)
        _, rest = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    stderr = seen + rest
    assert process.returncode == 130, stderr
    assert our_lines(stderr)[-1] == "polydg.assemble: interrupted (SIGINT)", stderr
    assert "internal error" not in stderr and "Exception ignored" not in stderr and "Traceback" not in stderr


def test_diffusion_is_checked_at_the_points_like_a_constant():
    from polydg.errors import ProblemError
    from polydg.problem import Problem

    x2, x3 = np.random.default_rng(0).random((50, 2)), np.random.default_rng(0).random((50, 3))
    for x, tensor in ((x2, [[1.0, 2.0], [2.0, 1.0]]), (x3, np.diag([1.0, -1e-3, 2.0])),
                      (x3, [[1.0, 1.0, 0.0], [1.0, 1.0, 1.0], [0.0, 1.0, 1.0]])):
        constant = Problem("c", diffusion=tensor)
        with pytest.raises(ProblemError, match="not positive semi-definite"):
            constant.diffusion_at(x)
        callable_ = Problem("f", diffusion=lambda x, t=np.asarray(tensor): np.broadcast_to(t, (len(x),) + t.shape))
        with pytest.raises(ProblemError, match="not positive semi-definite at x = "):
            callable_.diffusion_at(x)
    # semi-definite (singular) tensors pass: a degenerate diffusion, zero across one direction
    for x, tensor in ((x2, [[1.0, 1.0], [1.0, 1.0]]), (x3, np.diag([1.0, 0.0, 3.0]))):
        Problem("ok", diffusion=lambda x, t=np.asarray(tensor): np.broadcast_to(t, (len(x),) + t.shape)
                ).diffusion_at(x)


def test_an_inf_coefficient_is_named_inf_without_numpy_warnings(recwarn):
    from polydg.errors import ProblemError
    from polydg.problem import Problem

    x = np.random.default_rng(0).random((20, 2))
    with pytest.raises(ProblemError, match="diffusion returned inf at x"):
        Problem("p", diffusion=lambda x: np.where(x[:, 0] > 0.5, np.inf, 1.0)).diffusion_at(x)
    with pytest.raises(ProblemError, match="source returned inf"):
        Problem("p", source=lambda x: np.exp(1000 * x[:, 0])).source_at(x)
    with pytest.raises(ProblemError, match=r"source called sys.exit\(0\)"):
        Problem("p", source=lambda x: sys.exit(0)).source_at(x)
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]


@pytest.mark.parametrize("z", ["nan", "inf"])
def test_a_non_finite_z_coordinate_in_a_2d_mesh_file_is_refused(tmp_path, z):
    import meshio

    from polydg.errors import MeshError
    from polydg.mesh import load_mesh

    polydata = tmp_path / "p.vtk"
    polydata.write_text("# vtk DataFile Version 5.1\nx\nASCII\nDATASET POLYDATA\nPOINTS 4 double\n"
                        f"0 0 0 1 0 0 1 1 {z} 0 1 0\nPOLYGONS 2 4\nOFFSETS vtktypeint64\n0 4\n"
                        "CONNECTIVITY vtktypeint64\n0 1 2 3\n")
    triangles = tmp_path / "t.vtu"
    points = np.array([[0, 0, 0], [1, 0, 0], [1, 1, float(z)], [0, 1, 0]])
    meshio.write(triangles, meshio.Mesh(points, [("triangle", np.array([[0, 1, 2], [0, 2, 3]]))]))
    for path in (polydata, triangles):
        with pytest.raises(MeshError, match="point 2 has a non-finite z coordinate"):
            load_mesh(path)


# ---------------------------------------------------------------------------
# several ranks: no rank left waiting


RANKED_PROBLEM = '''
import dataclasses, os, sys, time
from polydg.problem import builtin_problem

base = builtin_problem("paper-2d", 2)
WHO, _, WHAT = os.environ.get("POLYDG_TEST_FAULT", "").partition(":")
MARK = os.environ.get("POLYDG_TEST_MARK", "")
RANK = os.environ.get("PMI_RANK")

def source(x):
    if len(x) > 100:  # in the assembly, not in a probe at load time
        with open(f"{MARK}.{RANK}.tmp", "w") as fh:
            fh.write(str(os.getpid()))
        os.replace(f"{MARK}.{RANK}.tmp", f"{MARK}.{RANK}")
        if RANK == WHO and WHAT == "exit":
            sys.exit(0)
        if RANK == WHO and WHAT == "sleep":
            time.sleep(60)
    return base.source(x)

PROBLEM = dataclasses.replace(base, source=source, name="ranked")
'''

RANK_FAULTS = {  # fault, the rank signalled and the signal, extra options, exit code, words of the one line
    "SIGINT to a rank at work": ("1:sleep", 1, signal.SIGINT, [], 130, ["interrupted (rank 1: SIGINT)"]),
    "SIGINT to a rank waiting inside MPI": ("2:sleep", 1, signal.SIGINT, [], 130, ["interrupted (rank 1: SIGINT)"]),
    "sys.exit(0) in a coefficient": ("1:exit", None, None, [], 2, ["rank 1", "sys.exit(0)"]),
    "SIGSTOP with --timeout 6": ("2:sleep", 2, signal.SIGSTOP, ["--timeout", "6"], 1,
                                 ["rank 2 did not answer (stopped?)", "ranks 0, 1 waited", "timeout of 6 s"]),
}


@pytest.mark.skipif(MPIEXEC is None, reason="mpiexec not found (pip install 'polydg[mpi]')")
@pytest.mark.parametrize("case", list(RANK_FAULTS))
def test_no_rank_is_left_waiting(tmp_path, case):
    pytest.importorskip("mpi4py")
    fault, target, signum, extra, code, words = RANK_FAULTS[case]
    (tmp_path / "ranked.py").write_text(RANKED_PROBLEM)
    mark = tmp_path / "mark"
    out = tmp_path / "out"
    env = environment(POLYDG_TEST_FAULT=fault, POLYDG_TEST_MARK=mark)
    start = time.monotonic()
    process = subprocess.Popen([MPIEXEC, "-n", "3", sys.executable, "-m", "polydg.assemble", "--mesh", "square:16",
                                "--agglomerate", "40", "--problem", f"{tmp_path / 'ranked.py'}:PROBLEM", "--output",
                                out, *extra], env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, start_new_session=True)
    pids = []
    try:
        deadline = time.monotonic() + 120
        while not all(Path(f"{mark}.{r}").exists() for r in range(3)):
            assert process.poll() is None or target is None, process.communicate()[1][-2000:]
            if process.poll() is not None or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        pids = [int(Path(f"{mark}.{r}").read_text()) for r in range(3) if Path(f"{mark}.{r}").exists()]
        if target is not None:
            time.sleep(1.0)
            os.kill(int(Path(f"{mark}.{target}").read_text()), signum)
        _, stderr = process.communicate(timeout=60)
        seconds = time.monotonic() - start
        deadline = time.monotonic() + 5
        while [pid for pid in pids if running(pid)] and time.monotonic() < deadline:
            time.sleep(0.1)
        left = [pid for pid in pids if running(pid)]
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        for pid in pids:  # a stopped rank must not outlive the test
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    assert process.returncode == code, (process.returncode, stderr[-2000:])
    lines = our_lines(stderr)
    assert len(lines) == 1 and "Traceback" not in stderr, stderr[-2000:]
    for word in words:
        assert word in lines[0], lines[0]
    assert seconds < 45 and not left  # every rank ended within seconds of the fault
    assert not out.exists()


def running(pid: int) -> bool:
    try:
        return "zombie" not in Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False


@pytest.mark.skipif(MPIEXEC is None, reason="mpiexec not found (pip install 'polydg[mpi]')")
def test_a_memory_refusal_reads_the_same_on_ranks():
    pytest.importorskip("mpi4py")
    args = ["--mesh", "cube:40", "--agglomerate", "0", "--degree", "3", "--solve"]
    one, _ = cli(*args, POLYDG_MEMORY_LIMIT="4G")
    r = subprocess.run([MPIEXEC, "-n", "2", sys.executable, "-m", "polydg.assemble", *args], capture_output=True,
                       text=True, env=environment(POLYDG_MEMORY_LIMIT="4G"), cwd=ROOT, timeout=120)
    line = one_line(r, 2, "rank 0: the assembly needs about 11.4 GB")
    assert line.replace("rank 0: ", "") == one_line(one, 2)
    # rank 0 builds the polytopic mesh even when it gathers nothing: the mesh's refusal holds with --no-gather
    r = subprocess.run([MPIEXEC, "-n", "2", sys.executable, "-m", "polydg.assemble", "--mesh", "cube:200",
                        "--agglomerate", "10", "--no-gather", "--output", "unused"], capture_output=True, text=True,
                       env=environment(POLYDG_MEMORY_LIMIT="2G"), cwd=ROOT, timeout=120)
    one_line(r, 2, "rank 0: building the polytopic mesh of cube:200's 48,000,000 cells", "what fits: cube:80")


def test_every_failure_has_its_exit_code_and_wording():
    from polydg.cli.main import failure_line
    from polydg.distributed.comm import RankFailure, describe
    from polydg.errors import Interrupted, MemoryLimitError, OptionError

    assert describe(OptionError("--degree -1")) == ("input", 2, "--degree -1")
    assert describe(MemoryLimitError("needs 12 GB")) == ("input", 2, "needs 12 GB")
    assert describe(MemoryError()) == ("memory", 1, "out of memory")
    assert describe(KeyboardInterrupt()) == ("interrupt", 130, "SIGINT")
    assert describe(Interrupted(signal.SIGTERM)) == ("interrupt", 143, "SIGTERM")
    assert describe(SystemExit(0)) == ("internal", 1, "SystemExit(0) raised")
    assert describe(RankFailure("rank 1: SIGINT", 1, kind="interrupt", code=130)) == ("interrupt", 130,
                                                                                      "rank 1: SIGINT")
    assert failure_line(*describe(MemoryError())) == \
        "polydg.assemble: error: out of memory (a smaller problem; in the assembly, a lower --memory-budget)"
    assert failure_line("interrupt", 130, "rank 1: SIGINT") == "polydg.assemble: interrupted (rank 1: SIGINT)"


AT_ABORT = """
import os, sys
from mpi4py import MPI
from polydg.distributed.watch import RankWatch
watch = RankWatch(MPI.COMM_WORLD)
watch.at_abort(lambda: 1 / 0)  # a failing cleanup does not stop the next
watch.at_abort(lambda: os.rmdir(sys.argv[1]))
watch.finish("polydg.assemble: error: the job's line", 3)
"""


def test_a_job_ended_by_the_watch_removes_what_the_main_thread_cannot(tmp_path):
    # a --timeout while rank 0 waits inside MPI (its staging folder of a march's slabs): the watch's thread
    # ends the job, calling the cleanups registered with at_abort first
    pytest.importorskip("mpi4py")
    (tmp_path / "staging").mkdir()
    (tmp_path / "at_abort.py").write_text(AT_ABORT)
    run = subprocess.run([sys.executable, str(tmp_path / "at_abort.py"), str(tmp_path / "staging")],
                         capture_output=True, text=True, timeout=60, env=environment(), cwd=ROOT)
    assert run.returncode == 3 and run.stderr.strip() == "polydg.assemble: error: the job's line", run.stderr
    assert not (tmp_path / "staging").exists()
