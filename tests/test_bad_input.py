"""Bad input: damaged mesh files and broken problem files fail with one line, nothing else printed.

The readers are fuzzed in-process (hypothesis, reproducible): every damaged
variant of a small valid file either reads into a valid mesh or raises a
one-line MeshError, and nothing a third-party reader prints or warns gets
through.  The command line is then run on a list of bad inputs: one line on
stderr, exit code 2, nothing on stdout; bad mesh files even without --quiet,
so that no progress line (nor the one announcing compiled kernels) comes first.
"""

import contextlib
import io
import re
import subprocess
import threading
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import polydg.mesh.readers as readers
from polydg.errors import CompilationWarning, MeshError, MeshWarning
from polydg.mesh import build_polytopic_mesh, from_spec, read_mesh

from .command_line import in_process

FUZZ = settings(max_examples=50, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


# ---------------------------------------------------------------------------
# small valid files, one per format and flavour


def polydata(legacy: bool) -> bytes:
    """A 2 x 2 grid of squares as legacy VTK POLYDATA (VTK 5.1 or the count-prefixed form)."""
    points = [(i / 2, j / 2) for i in range(3) for j in range(3)]
    quads = [[3 * i + j, 3 * (i + 1) + j, 3 * (i + 1) + j + 1, 3 * i + j + 1] for i in range(2) for j in range(2)]
    lines = ["# vtk DataFile Version 5.1", "grid", "ASCII", "DATASET POLYDATA", f"POINTS {len(points)} double"]
    lines += [f"{x:g} {y:g} 0" for x, y in points]
    if legacy:
        lines.append(f"POLYGONS {len(quads)} {5 * len(quads)}")
        lines += [" ".join(map(str, [4, *q])) for q in quads]
    else:
        lines += [f"POLYGONS {len(quads) + 1} {4 * len(quads)}", "OFFSETS vtktypeint64",
                  " ".join(str(4 * k) for k in range(len(quads) + 1)), "CONNECTIVITY vtktypeint64",
                  " ".join(str(v) for q in quads for v in q)]
    return ("\n".join(lines) + "\n").encode()


def meshio_bytes(mesh, suffix: str, **options) -> bytes:
    import tempfile

    import meshio

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / f"mesh{suffix}"
        # meshio's writers print warnings of their own ("ASCII files are only meant for debugging")
        with contextlib.redirect_stderr(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            meshio.write(path, mesh, **options)
        return path.read_bytes()


def valid_files() -> dict[str, bytes]:
    import meshio

    square = from_spec("square:2")
    xyz = np.column_stack([square.points, np.zeros(len(square.points))])
    tagged = meshio.Mesh(xyz, [("triangle", square.cells), ("line", square.boundary_facets)],
                         cell_data={"gmsh:physical": [np.zeros(square.n_cells, int), square.boundary_tags],
                                    "gmsh:geometrical": [np.zeros(square.n_cells, int), square.boundary_tags]})
    plain = meshio.Mesh(xyz, [("triangle", square.cells)])
    cube = from_spec("cube:1")
    tets = meshio.Mesh(cube.points, [("tetra", cube.cells)])
    return {
        "polydata.vtk": polydata(legacy=False),
        "polydata-legacy.vtk": polydata(legacy=True),
        "ascii.vtk": meshio_bytes(plain, ".vtk", binary=False),
        "binary.vtk": meshio_bytes(plain, ".vtk", binary=True),
        "ascii.vtu": meshio_bytes(plain, ".vtu", binary=False),
        "compressed.vtu": meshio_bytes(plain, ".vtu"),
        "gmsh22.msh": meshio_bytes(tagged, ".msh", file_format="gmsh22", binary=False),
        "gmsh22-binary.msh": meshio_bytes(tagged, ".msh", file_format="gmsh22", binary=True),
        "gmsh41.msh": meshio_bytes(plain, ".msh", file_format="gmsh", binary=False),
        "tetrahedra.msh": meshio_bytes(tets, ".msh", file_format="gmsh22", binary=False),
    }


FORMATS = ["polydata.vtk", "polydata-legacy.vtk", "ascii.vtk", "binary.vtk", "ascii.vtu", "compressed.vtu",
           "gmsh22.msh", "gmsh22-binary.msh", "gmsh41.msh", "tetrahedra.msh"]


@pytest.fixture(scope="module")
def valid() -> dict[str, bytes]:
    files = valid_files()
    assert list(files) == FORMATS
    return files


# ---------------------------------------------------------------------------
# damage


#: numbers that break counts and indices: negative, zero, past 32 and 64 bits, not integers
EXTREMES = [b"-1", b"0", b"2147483648", b"9223372036854775807", b"-9223372036854775808", b"1" + b"0" * 30, b"1e308",
            b"nan", b"2.5"]


def damaged(original: bytes) -> st.SearchStrategy[bytes]:
    """Variants of ``original``: truncated, bytes flipped, digits changed, a number made extreme, bytes
    inserted or deleted, or its first lines followed by garbage."""
    n = len(original)
    position = st.integers(0, n)
    numbers = [m.span() for m in re.finditer(rb"(?<![\w.])-?\d+(?:\.\d+)?(?:e[-+]?\d+)?(?![\w.])", original)]

    def flip(changes):
        data = bytearray(original)
        for i, byte in changes:
            data[i] = byte
        return bytes(data)

    digits = [i for i, c in enumerate(original) if chr(c).isdigit()]

    def head(lines: int) -> bytes:
        return b"".join(original.splitlines(keepends=True)[:lines])

    return st.one_of(
        position.map(lambda i: original[:i]),
        st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, 255)), min_size=1, max_size=4).map(flip),
        st.lists(st.tuples(st.sampled_from(digits), st.sampled_from(b"0123456789-")), min_size=1,
                 max_size=3).map(flip),
        st.tuples(st.sampled_from(numbers), st.sampled_from(EXTREMES)).map(
            lambda t: original[:t[0][0]] + t[1] + original[t[0][1]:]),
        st.tuples(position, st.binary(min_size=1, max_size=40)).map(lambda t: original[:t[0]] + t[1] + original[t[0]:]),
        st.tuples(position, st.integers(1, 40)).map(lambda t: original[:t[0]] + original[t[0] + t[1]:]),
        st.tuples(st.integers(1, 8), st.binary(max_size=80)).map(lambda t: head(t[0]) + t[1]),
    )


def reads_or_fails_on_one_line(path: Path, capfd) -> None:
    """The property: a valid mesh or a one-line MeshError naming the file; no other output, no other warning."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            build_polytopic_mesh(read_mesh(path))
        except MeshError as exc:
            message = str(exc)
            assert message.isprintable() and path.name in message, message
    out, err = capfd.readouterr()
    assert out == "" and err == "", f"printed by a reader: {out + err!r}"
    for w in caught:  # (polydg's one note that it compiles, if this is the process's first compilation)
        if not issubclass(w.category, CompilationWarning):
            assert issubclass(w.category, MeshWarning) and str(w.message).isprintable(), f"warning: {w.message}"


@pytest.fixture(scope="module")
def fuzz_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


@pytest.mark.parametrize("name", FORMATS)
def test_the_valid_files_read(name, valid, fuzz_dir):
    path = fuzz_dir / name
    path.write_bytes(valid[name])
    mesh = build_polytopic_mesh(read_mesh(path))
    assert mesh.measure.sum() == pytest.approx(1.0)


@pytest.mark.parametrize("name", FORMATS)
@FUZZ
@given(data=st.data())
def test_damaged_files_read_or_fail_on_one_line(name, data, valid, fuzz_dir, capfd):
    path = fuzz_dir / name
    path.write_bytes(data.draw(damaged(valid[name]), label="file"))
    reads_or_fails_on_one_line(path, capfd)


@pytest.mark.parametrize("extension", [".vtk", ".vtu", ".msh"])
@settings(FUZZ, max_examples=40)
@given(content=st.binary(max_size=400))
def test_random_bytes_fail_on_one_line(extension, content, fuzz_dir, capfd):
    path = fuzz_dir / f"random{extension}"
    path.write_bytes(content)
    reads_or_fails_on_one_line(path, capfd)


# ---------------------------------------------------------------------------
# what meshio prints becomes part of the message


VTK_HEADER = "# vtk DataFile Version 4.2\nmesh\nASCII\nDATASET UNSTRUCTURED_GRID\n"


@pytest.mark.parametrize("name, text, words", [
    ("header.vtk", "not a VTK header\nat all\n", ["cannot be read as legacy VTK (meshio: Illegal VTK header)"]),
    ("garbage.vtk", VTK_HEADER + "garbage after the header\n", ["legacy VTK", "Unknown section 'GARBAGE'"]),
    ("control.vtk", VTK_HEADER + "\x01\x07 data\n", [r"Unknown section '\x01\x07'"]),  # printable escapes
    ("random.msh", "\x93\xff\x00\x12", ["cannot be read as Gmsh", "binary data"]),
    ("tags.vtu", '<?xml version="1.0"?>\n<VTKFile type="UnstructuredGrid">\n<Piece', ["VTU", "not well-formed XML"]),
    ("shape.xyz", "1 2 3\n", ["unknown mesh file extension '.xyz'"]),
])
def test_meshio_output_is_folded_into_the_message(tmp_path, capfd, name, text, words):
    path = tmp_path / name
    path.write_bytes(text.encode("latin-1"))
    with pytest.raises(MeshError) as info:
        read_mesh(path)
    message = str(info.value)
    assert message.startswith(f"mesh file '{path}': ") and "\n" not in message
    for word in words:
        assert word in message
    assert message.isprintable()
    assert "Couldn't read file" not in message  # meshio's own summary gives way to ours
    assert capfd.readouterr() == ("", "")


def test_a_file_meshio_reads_with_complaints_gives_a_warning(tmp_path, capfd):
    path = tmp_path / "open.msh"
    path.write_text("$MeshFormat\n2.2 0 8\n$EndMeshFormat\n$Nodes\n3\n1 0 0 0\n2 1 0 0\n3 0 1 0\n$EndNodes\n"
                    "$Elements\n1\n1 2 2 0 1 1 2 3\n")  # no $EndElements
    with pytest.warns(MeshWarning, match=r"open\.msh': read as Gmsh, but meshio says: \$Elements not closed"):
        mesh = read_mesh(path)
    assert mesh.n_cells == 1
    assert capfd.readouterr() == ("", "")


def test_the_command_line_shows_input_warnings_on_one_line(tmp_path, capsys, monkeypatch):
    from polydg.assemble import main

    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")  # what main() would set for good

    path = tmp_path / "open.msh"
    path.write_text("$MeshFormat\n2.2 0 8\n$EndMeshFormat\n$Nodes\n3\n1 0 0 0\n2 1 0 0\n3 0 1 0\n$EndNodes\n"
                    "$Elements\n1\n1 2 2 0 1 1 2 3\n")
    assert main(["--mesh", str(path), "--problem", "paper-3d"]) == 2  # stops before any kernel compiles
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith("polydg.assemble: warning: mesh file ") and "$Elements not closed" in lines[0]
    assert lines[-1].startswith("polydg.assemble: error: problem 'paper-3d' is 3D")


# ---------------------------------------------------------------------------
# problem files: their output is held back, shown when they load, folded into the error when not


def test_a_problem_file_that_loads_prints_as_usual(tmp_path, capsys):
    from polydg.problem import load_problem

    path = tmp_path / "chatty.py"
    path.write_text("from polydg.problem import Problem\nprint('loading chatty')\n"
                    "problem = Problem(name='chatty', diffusion=1.0, source=1.0)\n")
    assert load_problem(f"{path}:problem", 2).name == "chatty"
    assert capsys.readouterr().out == "loading chatty\n"


def test_what_a_failing_problem_factory_prints_is_part_of_the_error(tmp_path, capfd):
    from polydg.errors import ProblemError
    from polydg.problem import load_problem

    path = tmp_path / "factory.py"
    path.write_text("import sys\ndef make(d):\n    print('making', d)\n    print('oops', file=sys.stderr)\n"
                    "    raise ValueError(f'no {d}D problem')\n")
    with pytest.raises(ProblemError, match=r"factory.py': make\(3\) raised ValueError: no 3D problem "
                                           r"\(its output: making 3; oops\)$"):
        load_problem(f"{path}:make", 3)
    assert capfd.readouterr() == ("", "")


# ---------------------------------------------------------------------------
# bad values from Python: one line naming the value and what is accepted


@pytest.mark.parametrize("seed", [-1, 2**63, 1.5])
def test_an_agglomeration_seed_metis_cannot_take_is_one_line(seed):
    from polydg.errors import OptionError
    from polydg.partition import agglomerate

    from polydg.mesh import build_polytopic_mesh
    from polydg.partition.ranks import rank_partition
    from polydg.space import DGSpace

    fine = from_spec("square:4")
    with pytest.raises(OptionError) as info:
        agglomerate(fine, 4, seed=seed)
    assert str(info.value) == f"agglomerate: seed must be an integer from 0 to 2**63 - 1 (a METIS seed), got {seed!r}"
    with pytest.raises(OptionError, match=r"^rank_partition: seed must be an integer from 0 to 2\*\*63 - 1"):
        rank_partition(DGSpace(build_polytopic_mesh(fine), 1), 2, seed=seed)


@pytest.mark.parametrize("name, function, reason", [
    ("dirichlet", lambda x, u: u, "boundary data are functions of x: polydg solves no nonlinear boundary conditions"),
    ("neumann", lambda x, normal, u: u,
     "boundary data are functions of x and the normal: polydg solves no nonlinear boundary conditions"),
    ("advection", lambda x, u: x * u[:, None], "a nonlinear advection needs a numerical flux, which polydg does not "
                                               "provide"),
    ("exact", lambda x, grad_u: x[:, 0], "the exact solution is a function of x"),
])
def test_a_coefficient_that_may_not_depend_on_the_iterate_says_why(name, function, reason):
    from polydg.errors import ProblemError
    from polydg.problem import Problem

    named = "grad_u" if name == "exact" else "u"
    with pytest.raises(ProblemError) as info:
        Problem("p", diffusion=1.0, **{name: function})
    assert str(info.value) == (f"problem 'p': {name} names the iterate ({named}): only diffusion, reaction and source "
                               f"may depend on it; {reason}")


# ---------------------------------------------------------------------------
# readers that never finish are stopped


def reader_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "polydg mesh reader"]


def test_a_reader_that_never_finishes_is_stopped(tmp_path, monkeypatch, capfd, valid):
    import meshio

    def endless(*args, **kwargs):
        while True:
            pass

    monkeypatch.setattr(readers, "READ_SECONDS", 0.2)
    monkeypatch.setattr(readers, "READ_SECONDS_PER_MB", 0.0)
    monkeypatch.setattr(meshio, "read", endless)
    path = tmp_path / "square.vtu"
    path.write_bytes(valid["compressed.vtu"])
    with pytest.raises(MeshError, match=r"square\.vtu': cannot be read as VTU \(meshio: the reader did not finish"):
        read_mesh(path)
    assert reader_threads() == []  # stopped, not left spinning
    assert capfd.readouterr() == ("", "")


def test_a_truncated_ply_file_does_not_hang(tmp_path, monkeypatch, capfd):
    # meshio 5.3's PLY reader looks for "end_header" past the end of the file forever
    monkeypatch.setattr(readers, "READ_SECONDS", 0.5)
    path = tmp_path / "cut.ply"
    path.write_text("ply\nformat ascii 1.0\nelement vertex 3\nproperty float x\n")
    with pytest.raises(MeshError, match=r"cut\.ply': cannot be read as PLY"):
        read_mesh(path)
    assert reader_threads() == []
    assert capfd.readouterr() == ("", "")


# ---------------------------------------------------------------------------
# the command line, one subprocess per bad input, run side by side


CASES = ["empty mesh", "truncated polydata", "random bytes", "garbage after a header",
         "wrong cell types", "2D mesh, 3D problem", "missing problem file", "syntax error", "raises on import",
         "lacks NAME", "NAME is not a problem", "polygons past their count", "negative perturbation seed",
         "negative amplitude", "negative waves", "METIS seed past 64 bits", "infinite final time",
         "unknown grid interpolation", "a coefficient SPEC of text",
         "boundary datum of the iterate", "scalar from a diffusion callable",
         "repeat of a march", "repeat of a nonlinear solve", "approach 1 of a nonlinear solve",
         "failed iterative solve"]


def bad_inputs(d: Path, valid: dict[str, bytes]) -> dict[str, tuple[list[str], list[str]]]:
    """Write the bad input files into ``d``; name -> (command-line arguments, words of the error line).

    Bad mesh files run without --quiet, so that any progress line (the mesh
    was read, a kernel compiles) would show.  The cases that fail after the
    mesh is read (problem files, a 2D mesh for a 3D problem) run with --quiet,
    which keeps out the line saying the mesh was read.
    """
    import meshio

    (d / "empty.vtk").write_bytes(b"")
    polygons = valid["polydata.vtk"]
    (d / "truncated.vtk").write_bytes(polygons[:polygons.index(b"POINTS") + 30])
    (d / "random.msh").write_bytes(bytes(range(256))[::-7] * 3)
    (d / "header.vtk").write_text(VTK_HEADER + "garbage after the header\n")
    hexahedron = meshio.Mesh(np.array([[0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 1, 0], [0, 0, 1], [1, 0, 1], [1, 1, 1],
                                       [0, 1, 1]], float), [("hexahedron", np.arange(8)[None])])
    meshio.write(d / "hexahedra.vtu", hexahedron)
    (d / "square.vtk").write_bytes(polygons)
    (d / "syntax.py").write_text("def broken(:\n")
    (d / "raises.py").write_text("print('loading')\nimport warnings\nwarnings.warn('careful')\n"
                                 "raise RuntimeError('no\\nproblem here')\n")
    (d / "other.py").write_text("x = 1\nproblem = 42\n")
    legacy = valid["polydata-legacy.vtk"]  # four squares, the last one past an announced three
    (d / "uncounted.vtk").write_bytes(legacy.replace(b"POLYGONS 4 20", b"POLYGONS 3 15"))
    np.save(d / "grid.npy", np.ones((2, 2)))
    (d / "datum.py").write_text("from polydg.problem import Problem\n"
                                "problem = Problem('datum', diffusion=1.0, source=1.0, dirichlet=lambda x, u: u)\n")
    (d / "scalar.py").write_text("from polydg.problem import Problem\n"
                                 "problem = Problem('scalar', diffusion=lambda x: 2.0, source=1.0)\n")
    quiet = ["--quiet", "--mesh", "square:2"]
    return {
        "empty mesh": (["--mesh", d / "empty.vtk"], ["empty.vtk", "the file is empty"]),
        "truncated polydata": (["--mesh", d / "truncated.vtk"], ["truncated.vtk", "truncated POINTS"]),
        "random bytes": (["--mesh", d / "random.msh"], ["random.msh", "cannot be read as Gmsh"]),
        "garbage after a header": (["--mesh", d / "header.vtk"], ["header.vtk", "meshio: Unknown section"]),
        "wrong cell types": (["--mesh", d / "hexahedra.vtu"], ["hexahedra.vtu", "unsupported cell types"]),
        "2D mesh, 3D problem": (["--quiet", "--mesh", d / "square.vtk", "--problem", "paper-3d"],
                                ["paper-3d", "is 3D, the mesh is 2D"]),
        "missing problem file": ([*quiet, "--problem", f"{d / 'missing.py'}:problem"], ["missing.py", "not found"]),
        "syntax error": ([*quiet, "--problem", f"{d / 'syntax.py'}:problem"], ["syntax.py", "syntax error at line 1"]),
        "raises on import": ([*quiet, "--problem", f"{d / 'raises.py'}:problem"],
                             ["raises.py", "RuntimeError: no problem here",
                              "its output: loading; UserWarning: careful"]),
        "lacks NAME": ([*quiet, "--problem", f"{d / 'other.py'}:absent"], ["other.py", "no attribute 'absent'"]),
        "NAME is not a problem": ([*quiet, "--problem", f"{d / 'other.py'}:problem"],
                                  ["other.py", "problem is a int, expected a polydg.problem.Problem"]),
        "polygons past their count": (["--mesh", d / "uncounted.vtk"],
                                      ["uncounted.vtk", "POLYGONS announces 3 polygons in 15 values, but its "
                                                        "section has 20 values"]),
        "negative perturbation seed": (["--mesh", "square:4:perturb=0.2:seed=-1"],
                                       ["seed=-1: must be a non-negative integer"]),
        "negative amplitude": (["--mesh", "oscillating-square:4:amplitude=-0.01"],
                               ["oscillating-square: amplitude=-0.01: must be a non-negative number"]),
        "negative waves": (["--mesh", "oscillating-square:4:waves=-1"],
                           ["oscillating-square: waves=-1: must be a non-negative integer"]),
        "METIS seed past 64 bits": (["--mesh", "square:8", "--agglomerate", 4, "--seed", 2**63],
                                    ["--seed must be an integer from 0 to 2**63 - 1", "got 9223372036854775808"]),
        "infinite final time": ([*quiet, "--problem", "paper-2d1", "--time-slabs", 2, "--final-time", "inf"],
                                ["--final-time must be a positive finite number, got inf"]),
        "unknown grid interpolation": ([*quiet, "--coefficient", f"diffusion=grid:{d / 'grid.npy'}:0,1,0,1:cubic"],
                                       ["grid.npy:0,1,0,1:cubic: unknown interpolation 'cubic'; expected linear "
                                        "(multilinear) or constant (piecewise constant, also meant when none is "
                                        "given)"]),
        "a coefficient SPEC of text": ([*quiet, "--coefficient", "diffusion=abc"],
                                       ["--coefficient diffusion=abc: SPEC 'abc' is neither a number nor cell:, "
                                        "element: or grid: data; SPEC cell:ARRAY"]),
        "boundary datum of the iterate": ([*quiet, "--problem", f"{d / 'datum.py'}:problem"],
                                          ["problem 'datum': dirichlet names the iterate (u): only diffusion, "
                                           "reaction and source may depend on it; boundary data are functions of x"]),
        "scalar from a diffusion callable": ([*quiet, "--problem", f"{d / 'scalar.py'}:problem"],
                                             ["problem 'scalar': diffusion returned shape () for ",
                                              ",) for a(x) I or (", ", 2, 2)"]),
        "repeat of a march": ([*quiet, "--problem", "paper-2d1", "--time-slabs", 2, "--repeat", 3],
                              ["--repeat times a steady problem's assembly; problem 'paper-2d1' is marched slab by "
                               "slab: drop --repeat 3"]),
        "repeat of a nonlinear solve": ([*quiet, "--problem", "quasilinear", "--repeat", 2],
                                        ["problem 'quasilinear' is nonlinear, solved once by newton: drop --repeat 2"]),
        "approach 1 of a nonlinear solve": ([*quiet, "--problem", "cubic", "--approach", "1"],
                                            ["a nonlinear problem is linearised by row kernels (approach 2), not "
                                             "approach '1'"]),
        "failed iterative solve": (["--quiet", "--mesh", "square:4", "--problem", "poisson", "--penalty", "1e-3",
                                    "--solve", "iterative"],
                                   ["did not converge: CG stopped at its limit of 1000 iterations; GMRES(50) then "
                                    "stopped after ", " iterations (its limit: 20 restart cycles of up to 50 "
                                    "iterations): relative residual "]),
    }


@pytest.fixture(scope="module")
def cli_results(tmp_path_factory, valid) -> dict[str, tuple[subprocess.CompletedProcess, list[str]]]:
    """Each case through main() in this process (tests/command_line.py; test_cli checks the program's exit)."""
    cases = bad_inputs(tmp_path_factory.mktemp("bad-input"), valid)
    assert list(cases) == CASES
    return {name: (in_process(*args), words) for name, (args, words) in cases.items()}


@pytest.mark.parametrize("case", CASES)
def test_bad_input_from_the_command_line(cli_results, case):
    result, words = cli_results[case]
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("polydg.assemble: error: ")
    for word in words:
        assert word in lines[0], lines[0]


@pytest.mark.parametrize("arguments, message", [
    ({"n_slabs": 2, "final_time": float("inf")}, "the final time must be a finite number greater than 0, got inf"),
    ({"n_slabs": 2, "final_time": "1"}, "the final time must be a finite number greater than 0, got '1'"),
    ({"n_slabs": True, "final_time": 1.0}, "the number of time slabs must be a positive integer, got True"),
    ({"time_nodes": [0.0, 1.0], "n_slabs": 2, "final_time": 1.0},
     "give time_nodes, or n_slabs and final_time, not both"),
])
def test_a_march_with_bad_times_is_one_line(arguments, message):
    from polydg.errors import OptionError
    from polydg.mesh import build_polytopic_mesh
    from polydg.problem import builtin_problem
    from polydg.spacetime import march

    with pytest.raises(OptionError) as info:
        march(build_polytopic_mesh(from_spec("square:2")), builtin_problem("paper-2d1"), 1, **arguments)
    assert str(info.value) == message


@pytest.mark.parametrize("shape", [(23,), (25,), (2, 24)])
def test_a_solution_of_the_wrong_size_is_one_line_where_it_is_sampled(shape):
    from polydg.mesh import build_polytopic_mesh
    from polydg.output import sample_solution
    from polydg.solve.system import SolverError
    from polydg.space import DGSpace

    space = DGSpace(build_polytopic_mesh(from_spec("square:2")), 1)  # 8 triangles, 24 dofs
    with pytest.raises(SolverError) as info:
        sample_solution(space, np.zeros(shape))
    assert str(info.value) == f"solution has shape {shape}, the space has 24 dofs"
    assert len(sample_solution(space, np.zeros((1, 24))).values) == 24


def _spaces():
    from polydg.mesh import build_polytopic_mesh
    from polydg.problem import builtin_problem
    from polydg.space import DGSpace

    mesh = build_polytopic_mesh(from_spec("square:2"))
    return mesh, DGSpace(mesh, 1), builtin_problem("paper-2d", 2)


def test_a_mesh_or_a_problem_where_the_space_goes_is_one_line():
    from polydg.assembly import Assembler, assemble
    from polydg.errors import OptionError
    from polydg.solve import errors

    mesh, space, problem = _spaces()
    with pytest.raises(OptionError, match=r"^assemble takes a DGSpace first, got PolytopicMesh: make one: "
                                          r"DGSpace\(mesh, degree\)$"):
        assemble(mesh, problem)
    with pytest.raises(OptionError, match="^assemble takes a DGSpace first, got Problem: the space comes first, "
                                          "then the problem$"):
        assemble(problem, space)
    with pytest.raises(OptionError, match="^Assembler takes a DGSpace first, got str"):
        Assembler("square:2")
    with pytest.raises(OptionError, match="^errors takes a DGSpace first, got Problem"):
        errors(problem, space, np.zeros(space.n_dofs))


def test_values_of_the_wrong_kind_are_one_line():
    from polydg.errors import OptionError, ProblemError
    from polydg.mesh import SimplexMesh
    from polydg.partition import agglomerate
    from polydg.problem.data import CellData, GridData
    from polydg.solve import errors, solve
    from polydg.solve.system import SolverError

    fine = from_spec("square:4")
    assert agglomerate(fine, 8.0).n_elements == agglomerate(fine, 8).n_elements  # a whole float, as from 6 * n**3 / 48
    with pytest.raises(OptionError, match=r"^agglomerate: the number of elements must be a whole number, got 8.5$"):
        agglomerate(fine, 8.5)
    with pytest.raises(OptionError, match=r"^agglomerate takes a fine mesh, got str: make one by "):
        agglomerate("square:4", 4)
    points = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    with pytest.raises(MeshError, match=r"^<array>: cells must be whole vertex numbers; entry \(0, 2\) is 2.5$"):
        SimplexMesh(points, [[0, 1, 2.5]])
    with pytest.raises(MeshError, match=r"^<array>: boundary_tags must be whole tags; entry \(0,\) is 1e\+30$"):
        SimplexMesh(points, [[0, 1, 2]], [[0, 1]], [1e30])
    assert SimplexMesh(points, [[0, 1, 2.0]]).cells.dtype == np.int64
    with pytest.raises(ProblemError, match="^cell data: values are complex; coefficients are real$"):
        CellData(np.ones(4) * (1 + 1j))
    with pytest.raises(ProblemError, match="^grid data: values are complex"):
        GridData(np.ones((2, 2)) * 1j, [0, 1, 0, 1])
    mesh, space, problem = _spaces()
    with pytest.raises(SolverError, match="^solution has complex values"):
        errors(space, problem, np.zeros(space.n_dofs) + 1j)
    import scipy.sparse as sp

    for keyword, value in (("tol", -1), ("tol", 0.0), ("tol", "1e-8"), ("maxiter", 0), ("maxiter", 2.5)):
        with pytest.raises(OptionError, match=f"^{keyword} must be"):
            solve(sp.identity(3, format="csr"), np.ones(3), method="iterative", **{keyword: value})

