"""The command line: default run, every option, outputs, and bad input."""

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import scipy.sparse as sp

from polydg import backend as bk

from .command_line import in_process, program

SUMMARY_KEYS = {"dimension", "elements", "sub_elements", "interior_faces", "interfaces", "boundary_faces", "dofs",
                "nnz", "degree", "precision", "backend", "approach", "ranks", "timings"}
TIMING_KEYS = {"element_kernel", "interior_kernel", "boundary_kernel", "inflow_kernel", "total_kernels", "indices",
               "total_assembly", "solve"}


cli = program  # the program; in_process: main() in this process, for the runs that check a message or a file


def test_default_run_prints_the_table():
    r = cli()
    assert r.returncode == 0, r.stderr
    for row in ("element kernel", "interior kernel", "boundary kernel", "inflow kernel", "total kernels", "indices",
                "total assembly", "solve", "errors: l2"):
        assert row in r.stdout
    assert "square:64" in r.stdout and "256 elements" in r.stdout
    l2 = float(r.stdout.split("errors: l2 ")[1].split(",")[0])
    assert l2 < 1e-3


@pytest.mark.parametrize("user", [None, "ACTIVE"])
def test_command_line_lets_idle_openmp_workers_sleep_unless_told_otherwise(monkeypatch, capsys, user):
    from polydg.assemble import main

    if user is None:
        monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    else:
        monkeypatch.setenv("OMP_WAIT_POLICY", user)
    assert main(["--help"]) == 0
    assert os.environ["OMP_WAIT_POLICY"] == (user or "PASSIVE")
    assert "--repeat" in capsys.readouterr().out


def test_quiet_prints_nothing():
    r = cli("--quiet", "--mesh", "square:4")
    assert r.returncode == 0 and r.stdout == "" and r.stderr == ""


def test_json_summary_keys_and_values(tmp_path):
    path = tmp_path / "run.json"
    r = cli("--mesh", "square:8", "--agglomerate", "10", "--degree", "2", "--problem", "poisson", "--solve",
            "--json", path, "--quiet")
    assert r.returncode == 0, r.stderr
    s = json.loads(path.read_text())
    assert SUMMARY_KEYS <= set(s)
    assert TIMING_KEYS <= set(s["timings"])
    assert set(s["errors"]) == {"l2", "h1", "dg"}
    assert s["dimension"] == 2 and s["ranks"] == 1 and s["approach"] == "2" and s["precision"] == "double"
    assert s["degree"] == {"min": 2, "max": 2} and s["dofs"] == 6 * s["elements"]
    assert s["errors"]["l2"] < 0.05


#: a problem file that prints as it is read and as its source is evaluated
PRINTING_PROBLEM = """
import dataclasses
from polydg.problem import builtin_problem

print("reading the problem file")


def source(x):
    print("evaluating the source")
    return x[:, 0] * 0.0 + 1.0


problem = dataclasses.replace(builtin_problem("poisson", 2), name="printing", source=source)
"""


@pytest.mark.parametrize("run", [["--mesh", "square:4"], ["--mesh", "square:4", "--problem", "paper-2d1",
                                                          "--time-slabs", "2"], ["--mesh", "square:4", "--problem"]],
                         ids=["steady", "march", "printing-problem"])
def test_json_dash_puts_the_summary_alone_on_stdout(run, tmp_path, monkeypatch):
    """``--json -``: standard output parses as the summary; the table, and whatever a problem file prints,
    go to standard error; no file named "-" is made."""
    (tmp_path / "printing.py").write_text(PRINTING_PROBLEM)
    monkeypatch.chdir(tmp_path)
    if run[-1] == "--problem":
        run = run + ["printing.py:problem"]
    r = in_process(*run, "--json", "-")
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)  # nothing but the summary: it parses
    assert s["dofs"] > 0 and "total_assembly" in s["timings"] and s["memory_budget_mb"] == 1024.0
    assert "(JIT, apart)" in r.stderr  # the table, where it does not spoil the JSON
    if "printing.py:problem" in run:
        assert "reading the problem file" in r.stderr and "evaluating the source" in r.stderr
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("__")) == ["printing.py"]


def test_flags_that_do_nothing_here_are_said_to_do_nothing(tmp_path):
    r = in_process("--mesh", "square:4", "--no-gather", "--timeout", "30", "--output", tmp_path / "out",
                   "--backend", "numpy", "--to-host")
    assert r.returncode == 0, r.stderr
    warned = [line for line in r.stderr.splitlines() if "warning" in line]
    assert warned == ["polydg.assemble: warning: --no-gather is for MPI ranks (mpiexec -n N): one process ignores it",
                      "polydg.assemble: warning: --timeout is for MPI ranks (mpiexec -n N): one process ignores it",
                      "polydg.assemble: warning: --to-host is for a GPU backend: the CPU's matrix is on the host "
                      "already"]
    assert (tmp_path / "out" / "matrix.npz").exists()  # the one-process files, not rows-rank0.npz


def test_output_directory(tmp_path):
    out = tmp_path / "out"
    r = cli("--mesh", "cube:2", "--degree", "1:2", "--seed", "3", "--problem", "paper-3d", "--solve", "iterative",
            "--output", out, "--quiet")
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in out.iterdir()) == [".polydg-output", "matrix.npz", "rhs.npy", "solution.npy",
                                                    "solution.vtu", "summary.json"]
    assert json.loads((out / ".polydg-output").read_text())["files"] == ["matrix.npz", "rhs.npy", "solution.npy",
                                                                         "solution.vtu", "summary.json"]
    summary = json.loads((out / "summary.json").read_text())
    A = sp.load_npz(out / "matrix.npz")
    assert A.shape == (summary["dofs"], summary["dofs"]) and A.nnz == summary["nnz"]
    b, x = np.load(out / "rhs.npy"), np.load(out / "solution.npy")
    assert np.linalg.norm(A @ x - b) <= 1e-6 * np.linalg.norm(b)
    assert summary["degree"] == {"min": 1, "max": 2}
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # no temporary folder left behind


@pytest.mark.parametrize("options", [
    ["--approach", "1"], ["--approach", "atomic"], ["--precision", "single"], ["--penalty", "20"],
    ["--penalty-kind", "paper"], ["--quadrature-extra", "2"], ["--memory-budget", "0.01"], ["--repeat", "2"],
    ["--backend", "auto"], ["--problem", "change-of-type"], ["--problem", "neumann"], ["--problem", "advection"],
])
def test_options(options, tmp_path):
    path = tmp_path / "s.json"
    r = in_process("--mesh", "square:6:perturb=0.2", "--agglomerate", "8", "--degree", "1", "--solve", "--json", path,
                   *options)
    assert r.returncode == 0, r.stderr
    s = json.loads(path.read_text())
    # each option reached the assembly's options (the library's own tests show each option changes the matrix)
    flag, value = options
    field = {"--penalty": "penalty", "--penalty-kind": "penalty_kind", "--quadrature-extra": "quadrature_extra",
             "--memory-budget": "memory_budget_mb", "--approach": "approach", "--precision": "precision",
             "--backend": "backend"}.get(flag)
    if field is not None:
        if flag == "--backend":  # auto: cupy where a GPU is usable, else numpy
            from polydg.backend import resolve_backend
            expected = resolve_backend("auto")
        else:
            expected = type(s["assembly_options"][field])(value)
        assert s["assembly_options"][field] == expected, s["assembly_options"]
    if flag == "--approach":
        assert s["approach"] == value
    if flag == "--precision":
        assert s["precision"] == "single"
    if flag == "--repeat":  # each assembly's total, in order, and what runs the job again
        assert s["repeat"] == 2 and len(s["total_assembly_per_repeat"]) == 2
        assert s["timings"]["total_assembly"] == pytest.approx(sum(s["total_assembly_per_repeat"]) / 2)
        assert s["run"]["argv"][:2] == ["--mesh", "square:6:perturb=0.2"] and s["run"]["agglomerate"] == 8
        assert len(s["run"]["polydg_sources"]) == 16
    if flag == "--problem":
        assert s["problem"] == value
    assert s["errors"]["l2"] < 0.5


def test_polygon_file_and_help(shared_meshes):
    r = cli("--mesh", shared_meshes / "unit_square_voronoi_100_cells.vtk", "--problem", "poisson", "--solve", "--quiet")
    assert r.returncode == 0, r.stderr
    h = cli("--help")
    assert h.returncode == 0 and "examples:" in h.stdout and "--memory-budget" in h.stdout


BAD_PROBLEM_FILES = {
    "syntax.py": ("def broken(:\n", "syntax error"),
    "shape.py": ("import numpy as np\nfrom polydg.problem import Problem\n"
                 "problem = Problem(name='bad-shape', diffusion=lambda x: np.ones((len(x), 2)))\n",
                 "diffusion"),
    "nan.py": ("import numpy as np\nfrom polydg.problem import Problem\n"
               "problem = Problem(name='bad-nan', diffusion=1.0, reaction=lambda x: np.full(len(x), np.nan))\n",
               "NaN"),
}


@pytest.mark.parametrize("name", list(BAD_PROBLEM_FILES))
def test_bad_problem_files(tmp_path, name):
    text, word = BAD_PROBLEM_FILES[name]
    (tmp_path / name).write_text(text)
    r = in_process("--mesh", "square:3", "--problem", f"{tmp_path / name}:problem")
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert lines[-1].startswith("polydg.assemble: error:") and word in lines[-1]


@pytest.mark.parametrize("args, word", [
    (["--approach", "3"], "approach"),
    (["--precision", "half"], "precision"),
    (["--degree", "-1"], "degree"),
    (["--degree", "x"], "degree"),
    (["--mesh", "no/such/file.msh"], "not found"),
    (["--mesh", "disk:4"], "unknown mesh generator"),
    (["--problem", "nope"], "unknown problem"),
    (["--problem", "missing_file.py:problem"], "not found"),
    (["--backend", "cupy"], "cupy"),
    (["--repeat", "0"], "repeat"),
    (["--tol", "-1"], "--tol must be"),  # the flags' names, before any work (not the library's rtol)
    (["--max-iterations", "0"], "--max-iterations must be"),
    (["--memory-budget", "-5"], "memory-budget"),
    (["--memory-budget", "inf"], "memory-budget"),
    (["--penalty", "inf"], "penalty"),
    (["--penalty", "nan"], "penalty"),
    (["--seed", "-1", "--degree", "1:2"], "seed"),
    (["--timeout", "0"], "timeout"),
    (["--memory-limit", "lots"], "memory-limit"),
    (["--mesh", "cube:2", "--problem", "paper-2d"], "2D"),
])
def test_bad_options(args, word):
    if args == ["--backend", "cupy"] and bk.gpu_unavailable_reason() is None:
        pytest.skip("a GPU is here: --backend cupy runs (tests/test_gpu_assembly.py)")
    r = in_process(*args)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr
    line = r.stderr.strip().splitlines()[-1]
    assert line.startswith("polydg.assemble: error:") and word in line, line
    if word.endswith("must be"):  # checked with the other options: no progress line before it
        assert r.stderr.strip().splitlines() == [line]


@pytest.mark.parametrize("args", [["--approach", "3"], ["--tol", "-1"], ["--mesh", "NAME"]])
def test_the_program_exits_with_the_code_and_line_of_main(tmp_path, args):
    """What the tests above see of main() in their process is what the program prints in all (its file
    descriptors, no compilation or progress line before the refusal: a fresh process) and exits with: an
    argparse refusal, an option checked before any work, a bad mesh file read without --quiet."""
    if args[-1] == "NAME":
        text, _ = BAD_MESHES["hanging.vtk"]
        (tmp_path / "hanging.vtk").write_text(text)
        args = ["--mesh", tmp_path / "hanging.vtk"]
    r, here = program(*args), in_process(*args)

    def lines(text):  # the progress lines' clocks read apart
        return [re.sub(r"^\[ *[0-9.]+ s\]", "[s]", line) for line in text.splitlines()]

    assert (r.returncode, r.stdout, lines(r.stderr)) == (here.returncode, here.stdout, lines(here.stderr))
    assert r.returncode == 2 and r.stdout == "" and r.stderr.splitlines()[-1].startswith("polydg.assemble: error:")
    assert len(r.stderr.splitlines()) == (2 if args[0] == "--mesh" else 1)  # the mesh's progress line, then it


def test_debug_shows_the_traceback():
    r = cli("--mesh", "disk:4", "--debug")
    # the traceback, then the same line and exit code as without --debug (bad input: 2)
    assert r.returncode == 2 and "Traceback" in r.stderr
    assert r.stderr.splitlines()[-1].startswith("polydg.assemble: error:")


BAD_MESHES = {
    "truncated.vtk": ("# vtk DataFile Version 5.1\nx\nASCII\nDATASET POLYDATA\nPOINTS 4 double\n0 0 0 1 0 0\n",
                      "truncated POINTS"),
    "nan.vtk": ("# vtk DataFile Version 5.1\nx\nASCII\nDATASET POLYDATA\nPOINTS 4 double\n0 0 0 1 0 0 nan 1 0 0 1 0\n"
                "POLYGONS 2 4\nOFFSETS vtktypeint64\n0 4\nCONNECTIVITY vtktypeint64\n0 1 2 3\n", "non-finite"),
    "hanging.vtk": ("# vtk DataFile Version 5.1\nx\nASCII\nDATASET POLYDATA\nPOINTS 8 double\n"
                    "0 0 0 1 0 0 1 1 0 0 1 0 1 2 0 0 2 0 2 0 0 2 2 0\nPOLYGONS 4 12\nOFFSETS vtktypeint64\n0 4 8 12\n"
                    "CONNECTIVITY vtktypeint64\n0 1 2 3 3 2 4 5 1 6 7 4\n", "unmatched facet"),
    "garbage.msh": ("not a mesh at all\n", "cannot be read as Gmsh"),
}


@pytest.mark.parametrize("name", list(BAD_MESHES))
def test_bad_mesh_files_from_the_command_line(tmp_path, name):
    text, word = BAD_MESHES[name]
    (tmp_path / name).write_text(text)
    r = in_process("--mesh", tmp_path / name)
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr
    line = r.stderr.strip().splitlines()[-1]
    assert line.startswith("polydg.assemble: error:") and name in line and word in line, line


# ---------------------------------------------------------------------------
# threads, words, hints and the compile figure (issue #30)


def test_the_thread_count_follows_omp_num_threads_and_is_reported(tmp_path):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.pop("NUMBA_NUM_THREADS", None)
    path = tmp_path / "run.json"
    r = subprocess.run([sys.executable, "-m", "polydg.assemble", "--mesh", "square:4", "--json", str(path)],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    assert json.loads(path.read_text())["threads"] == 1
    assert "ranks 1, threads 1" in r.stdout
    assert "\x1b[" not in r.stderr  # not a terminal: plain lines, no bars


def test_help_is_plain_text_with_every_option_explained(capsys):
    from polydg.assemble import main
    from polydg.cli.parser import build_parser

    assert main(["--help"]) == 0
    text = capsys.readouterr().out
    assert "``" not in text and ":mod:" not in text and ":func:" not in text
    assert "DESIGN" not in text  # nothing outside the repository
    for action in build_parser()._actions:
        assert action.help, f"{action.option_strings} has no help"
    assert "--precision" in text and "float32" in text and "--plot" in text and "s / Mdof" in text


@pytest.mark.parametrize("args, hint", [
    (["--problem", "papr-2d"], "did you mean 'paper-2d'"),
    (["--problem", "poison"], "did you mean 'poisson'"),
    (["--problem", "paper-3d"], "give a 3D mesh, e.g. --mesh cube:N"),
    (["--mesh", "cube:2", "--problem", "paper-2d"], "give a 2D mesh, e.g. --mesh square:N"),
    (["--problem", "paper-2d", "--time-slabs", "4"], "its space-time form: --problem paper-2d1"),
    (["--problem", "paper", "--time-slabs", "4"], "its space-time form: --problem paper-2d1"),
    (["--problem", "paper-2d1"], "is a space-time problem: give --time-slabs N"),
])
def test_a_wrong_problem_gets_a_hint(capsys, args, hint):
    from polydg.assemble import main

    assert main(args + ["--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("polydg.assemble: error:") and hint in err[0], err


COMPILING_PROBLEM = '''
from polydg.problem import builtin_problem
import dataclasses

# a function of a polydg module, compiled when the assembly first calls it (a fresh one per process)
namespace = {"__name__": "polydg._compile_probe"}
exec("from numba import njit\\n@njit\\ndef source(x):\\n    return x * 0.0 + 1.0\\n", namespace)

problem = dataclasses.replace(builtin_problem("poisson", 2), name="compiling",
                              source=lambda x: namespace["source"](x[:, 0]))
'''


def test_one_compile_figure_on_stderr_in_the_table_and_the_summary(tmp_path):
    (tmp_path / "compiling.py").write_text(COMPILING_PROBLEM)
    path = tmp_path / "run.json"
    r = cli("--mesh", "square:4", "--problem", f"{tmp_path / 'compiling.py'}:problem", "--json", path)
    assert r.returncode == 0, r.stderr
    said = [line for line in r.stderr.splitlines() if "] compiled " in line]
    assert len(said) == 1, r.stderr
    figure = float(said[0].split(" in ")[1].split(" s ")[0])
    table = float(r.stdout.split("(JIT, apart)")[1].split()[0])
    summary = json.loads(path.read_text())
    # one figure: stderr's to 2 decimals, the table's to 4 (rounding the table's again could go the other way)
    assert figure > 0 and figure == round(summary["jit_seconds"], 2) and table == round(summary["jit_seconds"], 4)
    assert summary["jit"]["seconds"] == summary["jit_seconds"] and "other" in summary["jit"]["parts"]
    assert summary["jit"]["what"] == "the 2D kernels" and "compiled the 2D kernels in" in said[0]
    assert any("compiling the 2D kernels (first run only" in line for line in r.stderr.splitlines())
    assert "CompilationWarning" not in r.stderr  # the Python API's warning: not on the command line
