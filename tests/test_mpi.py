"""Assembly across MPI ranks, with real ``mpiexec -n 1..4`` (oversubscribed on small machines).

The ranks' results are compared with the one-process assembly in this
process: the gathered matrix bit for bit, each rank's own rows, the partition
boundary faces computed by both sides, the command line's files, and the
failures that must end every rank.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from polydg.assembly import assemble

from .conftest import SHARED_MESHES

pytest.importorskip("mpi4py")
MPIEXEC = shutil.which("mpiexec")
pytestmark = pytest.mark.skipif(MPIEXEC is None, reason="mpiexec not found (pip install 'polydg[mpi]')")

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import mpi_cases  # noqa: E402

RANKS = (1, 2, 3, 4)


def mpiexec(n: int, *args, timeout: float = 300, cwd=None, env_extra=None) -> subprocess.CompletedProcess:
    # this checkout's polydg for the scripts too (a script's own folder comes first on its sys.path)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(HERE.parent) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("NUMBA_NUM_THREADS", None)
    env.update(env_extra or {})
    return subprocess.run([MPIEXEC, "-n", str(n), sys.executable, *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd or HERE.parent, env=env)


@pytest.fixture(scope="module")
def meshes() -> Path | None:
    """The shared meshes' folder, or None without it (then only the Voronoi cases skip)."""
    return SHARED_MESHES if SHARED_MESHES.is_dir() else None


def _case(serial, case: str, approach: str):
    if (case, approach) not in serial:
        pytest.skip(f"shared meshes not found at {SHARED_MESHES}: no {case} case")
    return serial[case, approach]


@pytest.fixture(scope="module")
def serial(meshes):
    """The one-process results of every case and reduction (this also fills the kernel cache for the ranks)."""
    from polydg.distributed.parts import compile_relabel_kernel
    from polydg.problem import builtin_problem

    compile_relabel_kernel()
    out = {}
    for name, space, problem_name in mpi_cases.case_spaces(meshes):
        problem = builtin_problem(problem_name, space.mesh.dim)
        for approach in mpi_cases.APPROACHES:
            out[name, approach] = space, assemble(space, problem, approach=approach)
    return out


@pytest.fixture(scope="module")
def ranked(serial, meshes, tmp_path_factory):
    """For each number of ranks, the folder of mpi_cases.py's results."""
    runs = {}
    for n in RANKS:
        out = tmp_path_factory.mktemp(f"ranks{n}")
        r = mpiexec(n, HERE / "mpi_cases.py", out, *([] if meshes is None else [meshes]))
        assert r.returncode == 0, r.stderr[-3000:]
        runs[n] = out
    return runs


CASES = [(n, c, a) for n in RANKS for c in ("2d-hp", "3d", "voronoi") for a in mpi_cases.APPROACHES]


@pytest.mark.parametrize("n,case,approach", CASES)
def test_gathered_matrix_is_bitwise_the_one_process_matrix(ranked, serial, n, case, approach):
    space, whole = _case(serial, case, approach)
    got = np.load(ranked[n] / f"{case}-{approach}.npz")
    assert int(got["ranks"]) == n
    assert np.array_equal(got["indptr"], whole.matrix.indptr)
    assert np.array_equal(got["indices"], whole.matrix.indices)
    assert np.array_equal(got["data"], whole.matrix.data)  # bit for bit, every reduction
    assert np.array_equal(got["rhs"], whole.rhs)
    assert np.array_equal(got["sigma"], whole.face_penalty)


@pytest.mark.parametrize("n", RANKS[1:])
@pytest.mark.parametrize("case", ["2d-hp", "3d", "voronoi"])
def test_each_rank_writes_exactly_its_rows_and_both_sides_compute_a_boundary_face(ranked, serial, n, case):
    space, whole = _case(serial, case, "2")
    got = np.load(ranked[n] / f"{case}-2.npz")
    element_ranks = got["element_ranks"]
    assert sorted(set(element_ranks.tolist())) == list(range(n))
    dof_rank = np.repeat(element_ranks, space.element_dofs)
    # the rank numbering: rank by rank, each rank's dofs in order
    single_of_rank = np.concatenate([np.flatnonzero(dof_rank == r) for r in range(n)])
    start = 0
    for r in range(n):
        rows = mpi_cases.load_rank_rows(got, r)
        lo, hi = got[f"range{r}"]
        assert (lo, hi) == (start, start + rows.shape[0]) and rows.shape[1] == space.n_dofs
        start = hi
        mine = np.flatnonzero(dof_rank == r)
        assert np.array_equal(got[f"dofs{r}"], mine)  # the rank's rows are its elements' dofs, nobody else's
        assert np.array_equal(single_of_rank[lo:hi], mine)
        # back in the single-process numbering, the rank's rows are the serial rows, bit for bit
        back = sp.csr_matrix((rows.data, single_of_rank[rows.indices], rows.indptr), shape=rows.shape)
        back.sort_indices()
        expected = whole.matrix[mine]
        assert np.array_equal(back.indptr, expected.indptr) and np.array_equal(back.indices, expected.indices)
        assert np.array_equal(back.data, expected.data)
        assert np.array_equal(got[f"b{r}"], whole.rhs[mine])
    assert start == space.n_dofs
    # every interface on a partition boundary: each side's rank holds its own block of it, nonzero
    mesh = space.mesh
    e1, e2 = mesh.interface_elements.T
    crossing = np.flatnonzero(element_ranks[e1] != element_ranks[e2])
    assert len(crossing) > 0
    offsets = space.dof_offsets
    nonzero = 0
    for i in crossing[:: max(1, len(crossing) // 20)]:
        for a, b in ((e1[i], e2[i]), (e2[i], e1[i])):
            r = element_ranks[a]
            rows = mpi_cases.load_rank_rows(got, r)
            lo = got[f"range{r}"][0]
            local_rows = np.searchsorted(single_of_rank[lo:lo + rows.shape[0]], np.arange(offsets[a], offsets[a + 1]))
            cols = np.argsort(single_of_rank)[np.arange(offsets[b], offsets[b + 1])]
            block = rows[local_rows][:, cols].toarray()
            nonzero += np.abs(block).max() > 0  # (pure transport: only the upwind side's block is nonzero)
            assert np.array_equal(block, whole.matrix[offsets[a]:offsets[a + 1], offsets[b]:offsets[b + 1]].toarray())
    assert nonzero >= len(crossing[:: max(1, len(crossing) // 20)])


@pytest.mark.parametrize("n", RANKS[1:])
@pytest.mark.parametrize("case", ["2d-hp", "3d", "voronoi"])
def test_each_halo_element_reads_its_owners_value_and_each_rank_sends_only_its_boundary(ranked, serial, n, case):
    """The halo exchange (polydg.distributed.halo; the penalty's a_K): every local element ends with its
    owner's value (the owned keep theirs, the halo's arrive), and a rank sends each neighbour rank its
    elements with an interface against that rank's, once each: its partition boundary, not the mesh."""
    space, _ = _case(serial, case, "2")
    got = np.load(ranked[n] / f"{case}-2.npz")
    element_ranks = got["element_ranks"]
    e1, e2 = space.mesh.interface_elements.T
    crossing = element_ranks[e1] != element_ranks[e2]
    for r in range(n):
        elements = got[f"halo{r}_elements"]
        assert np.array_equal(got[f"halo{r}_values"], elements + 0.5)
        assert (element_ranks[elements] != r).any()  # a halo there was
        sent = got[f"halo{r}_sent"]
        for s in range(n):  # r's elements across an interface from one of s's
            pairs = np.concatenate([np.stack([e1, e2], 1), np.stack([e2, e1], 1)])[np.tile(crossing, 2)]
            expected = np.unique(pairs[(element_ranks[pairs[:, 0]] == r) & (element_ranks[pairs[:, 1]] == s), 0])
            assert sent[s] == len(expected), (r, s)
        assert sent[r] == 0 and sent.sum() < space.mesh.n_elements  # an Allreduce's array would be all of them


def test_work_weighted_partition_balances_a_mixed_degree_3d_mesh_better_than_element_counts():
    from polydg.mesh import from_spec
    from polydg.partition import agglomerate
    from polydg.partition.ranks import balance, element_work, rank_partition
    from polydg.space import DGSpace

    mesh = agglomerate(from_spec("cube:8"), 300)
    # degrees growing across the cube: equal counts per rank are unequal work
    centre = (mesh.bbox_min + mesh.bbox_max)[:, 0] / 2
    space = DGSpace(mesh, np.where(centre < 0.5, 1, 3))
    work = element_work(space)
    weighted = rank_partition(space, 4)
    counted = rank_partition(space, 4, weighted=False)
    per_rank = [np.bincount(p, weights=work, minlength=4) for p in (weighted, counted)]
    assert balance(per_rank[0]) < 1.1
    assert balance(per_rank[0]) < balance(per_rank[1]) - 0.1
    n = mesh.n_elements
    with pytest.raises(Exception, match=f"cannot split {n} elements over {n + 1} ranks"):
        rank_partition(space, n + 1)


def _same_output_files(one: Path, many: Path) -> tuple[dict, dict]:
    """--output of one process and of several ranks: the same matrix, load and solution, bit for bit;
    returns both summaries."""
    import json

    a, b = sp.load_npz(one / "matrix.npz"), sp.load_npz(many / "matrix.npz")
    assert np.array_equal(a.indptr, b.indptr) and np.array_equal(a.indices, b.indices)
    assert np.array_equal(a.data, b.data)
    for f in ("rhs.npy", "solution.npy"):
        assert np.array_equal(np.load(one / f), np.load(many / f))
    return tuple(json.loads((d / "summary.json").read_text()) for d in (one, many))


def test_command_line_on_two_ranks_writes_the_one_process_files(tmp_path):
    common = ["--mesh", "square:16", "--agglomerate", "40", "--degree", "1:3", "--solve", "--quiet"]
    one = subprocess.run([sys.executable, "-m", "polydg.assemble", *common, "--output", tmp_path / "one"],
                         capture_output=True, text=True, cwd=HERE.parent, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert one.returncode == 0, one.stderr
    two = mpiexec(2, "-m", "polydg.assemble", *common, "--output", tmp_path / "two")
    assert two.returncode == 0, two.stderr
    s1, s2 = _same_output_files(tmp_path / "one", tmp_path / "two")
    # the errors are summed by the ranks, each its part: equal to round-off
    assert list(s1["errors"]) == list(s2["errors"]) == ["l2", "h1", "dg"] and s1["ranks"] == 1 and s2["ranks"] == 2
    assert s2["timings"]["gather"] > 0 == s1["timings"].get("gather", 0.0)  # the matrix to rank 0: its own row
    for key, value in s1["errors"].items():
        assert abs(s2["errors"][key] - value) <= 1e-12 * value
    assert len(s2["timings_per_rank"]) == 2 and s2["balance"]["nnz"] >= 1.0
    assert s1["threads"] == s2["threads"] == s2["threads_per_rank"] == 1  # OMP_NUM_THREADS=1, one process or ranks
    for key in ("element_kernel", "interior_kernel", "total_assembly"):
        assert s2["timings"][key] == max(t[key] for t in s2["timings_per_rank"])


FAILING_PROBLEM = '''
import dataclasses, os, signal
from polydg.problem import builtin_problem

base = builtin_problem("paper-2d", 2)
MODE = os.environ["POLYDG_TEST_FAILURE"]

def source(x):
    if os.environ.get("PMI_RANK") == "1" and len(x) > 100:  # in the assembly, not in a probe at load time
        if MODE == "raise":
            raise ValueError("source undefined on this part of the domain")
        if MODE == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
    return base.source(x)

PROBLEM = dataclasses.replace(base, source=source, name="failing")
'''


def _failure_run(tmp_path, mode, *extra):
    (tmp_path / "failing.py").write_text(FAILING_PROBLEM)
    start = time.perf_counter()
    r = mpiexec(4, "-m", "polydg.assemble", "--mesh", "square:16", "--agglomerate", "40", "--output",
                tmp_path / "out", *extra, timeout=60, env_extra={"POLYDG_TEST_FAILURE": mode})
    return r, time.perf_counter() - start


def test_a_corrupt_mesh_file_ends_every_rank_with_one_message(tmp_path):
    bad = tmp_path / "broken.vtu"
    bad.write_text("<VTKFile type='UnstructuredGrid'><UnstructuredGrid><Piece NumberOfPoints='3'")
    start = time.perf_counter()
    r = mpiexec(4, "-m", "polydg.assemble", "--mesh", bad, "--output", tmp_path / "out", timeout=60)
    assert time.perf_counter() - start < 30
    assert r.returncode != 0
    lines = [line for line in r.stderr.splitlines() if "polydg.assemble: error" in line]
    assert len(lines) == 1 and "broken.vtu" in lines[0], r.stderr
    assert not (tmp_path / "out").exists()


def test_a_problem_raising_on_one_rank_ends_every_rank(tmp_path):
    r, seconds = _failure_run(tmp_path, "raise", "--problem", str(tmp_path / "failing.py") + ":PROBLEM")
    assert seconds < 30 and r.returncode != 0
    lines = [line for line in r.stderr.splitlines() if "polydg.assemble:" in line]
    assert len(lines) == 1 and "rank 1" in lines[0] and "source undefined" in lines[0], r.stderr
    assert not (tmp_path / "out").exists()


FAILING_STEPS = """
import sys
import numpy as np
from mpi4py import MPI
import polydg.distributed.assembly as distributed
from polydg.assembly.options import AssemblyOptions
from polydg.distributed.comm import RankFailure
from polydg.problem import builtin_problem

comm, case = MPI.COMM_WORLD, sys.argv[2]
space = None
if comm.Get_rank() == 0:
    from polydg.mesh import from_spec
    from polydg.partition import agglomerate
    from polydg.space import DGSpace

    space = DGSpace(agglomerate(from_spec("square:8"), 12), 1)
if case == "part":  # rank 0 runs out of memory building rank 2's part, after sending rank 1 its own
    parts = distributed.rank_parts

    def failing(*args, **kwargs):
        for part in parts(*args, **kwargs):
            if part.rank == 2:
                raise MemoryError()
            yield part

    distributed.rank_parts = failing
elif case == "receive" and comm.Get_rank() == 2:  # rank 2 has no room for its part: rank 0, which sends it,
    import polydg.distributed.comm as ranks_comm  # must not wait for it to be received

    def no_room(size):
        raise MemoryError()

    ranks_comm._room = no_room
elif case == "resolve" and comm.Get_rank() == 1:  # rank 1 alone cannot resolve its options, before the
    # device binding's collective
    def unresolved(self):
        raise RuntimeError("no backend here")

    AssemblyOptions.resolved = unresolved
try:
    result = distributed.assemble_distributed(space, builtin_problem("paper-2d", 2), comm, approach="2")
    if case == "gather" and comm.Get_rank() == 0:  # rank 0 cannot hold the gathered matrix
        import numpy

        class Short:
            def __getattr__(self, name):
                return getattr(numpy, name)

            @staticmethod
            def empty(shape, *args, **kwargs):
                if numpy.prod(shape) > 200:
                    raise MemoryError()
                return numpy.empty(shape, *args, **kwargs)

        distributed.np = Short()
    if case == "errors":  # rank 0 hands a solution of the wrong length: refused before any rank is sent it
        result.errors(builtin_problem("paper-2d", 2), np.zeros(3) if comm.Get_rank() == 0 else None)
    else:
        result.gather()
    outcome = "finished"
except RankFailure as exc:
    outcome = f"RankFailure: {exc}"
with open(f"{sys.argv[1]}/{case}.{comm.Get_rank()}", "w") as fh:
    fh.write(outcome)
"""


@pytest.mark.parametrize("case, line", [("part", "rank 0: out of memory"),
                                        ("receive", "rank 2: out of memory"),
                                        ("resolve", "rank 1: RuntimeError: no backend here"),
                                        ("gather", "rank 0: out of memory"),
                                        ("errors", "rank 0: the solution has 3 entries, the space 39 dofs")])
def test_a_rank_failing_while_others_wait_in_a_phase_ends_every_rank(tmp_path, case, line):
    """Rank 0 failing while it hands out the parts (rank 2 waits for its own), rank 2 without room for its
    part (rank 0 is sending it), rank 1 failing before the device binding's collective, rank 0 unable to hold
    the gathered matrix while the others would send it, rank 0 handing errors() a solution of the wrong length
    (each rank is sent its own entries of it): every rank leaves with the same RankFailure."""
    (tmp_path / "steps.py").write_text(FAILING_STEPS)
    r = mpiexec(3, tmp_path / "steps.py", tmp_path, case, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    assert [(tmp_path / f"{case}.{k}").read_text() for k in range(3)] == [f"RankFailure: {line}"] * 3


def test_a_rank_killed_mid_assembly_ends_every_rank(tmp_path):
    r, seconds = _failure_run(tmp_path, "kill", "--problem", str(tmp_path / "failing.py") + ":PROBLEM")
    assert seconds < 30 and r.returncode != 0
    assert not (tmp_path / "out").exists()


FAILING_MARCH = '''
import dataclasses, os, signal, time
from polydg.problem import builtin_problem

base = builtin_problem("paper-2d1")

def source(x):
    if os.environ.get("PMI_RANK") == "1" and len(x) > 100 and x[:, -1].min() > 0.5:  # the third slab's assembly
        time.sleep(2)  # rank 0 waits for it meanwhile
        os.kill(os.getpid(), signal.SIGTERM)
    return base.source(x)

PROBLEM = dataclasses.replace(base, source=source, name="failing-march")
'''


def test_a_rank_ended_mid_march_leaves_no_staged_output(tmp_path):
    # rank 0 stages --output before the march and writes each slab's file there; a rank ended by a signal while
    # rank 0 waits for it ends the job, and rank 0 unwinds first, removing the staging folder (and the new DIR).
    # (A SIGKILL cannot be cleaned up after: mpiexec kills the other ranks too; the next run removes it.)
    (tmp_path / "failing.py").write_text(FAILING_MARCH)
    r = mpiexec(2, "-m", "polydg.assemble", "--problem", str(tmp_path / "failing.py") + ":PROBLEM", "--mesh",
                "square:8", "--agglomerate", "16", "--degree", "1", "--time-slabs", "4", "--output", tmp_path / "out",
                timeout=90)
    assert r.returncode == 128 + 15, (r.returncode, r.stderr)
    assert "rank 1" in r.stderr and "slab 2/4" in r.stderr, r.stderr  # two slabs were written before the signal
    assert not (tmp_path / "out").exists(), sorted(p.name for p in (tmp_path / "out").rglob("*"))


def test_the_single_process_path_runs_without_mpi4py(tmp_path):
    # mpi4py made unimportable: one process assembles as before, and says nothing about MPI
    code = ("import sys; sys.modules['mpi4py'] = None; from polydg.assemble import main; "
            "sys.exit(main(['--mesh', 'square:8', '--agglomerate', '10', '--degree', '1', '--quiet', '--json', "
            f"{str(tmp_path / 's.json')!r}]))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=HERE.parent)
    assert r.returncode == 0, r.stderr
    import json

    assert json.loads((tmp_path / "s.json").read_text())["ranks"] == 1
    # ... and a run under mpiexec without mpi4py is one clear line
    env = dict(os.environ, PMI_SIZE="2")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=HERE.parent, env=env)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "needs mpi4py" in r.stderr, r.stderr


def test_no_gather_leaves_each_ranks_rows_in_its_own_file(tmp_path):
    common = ["--mesh", "square:16", "--agglomerate", "40", "--degree", "1:3", "--quiet"]
    r = mpiexec(3, "-m", "polydg.assemble", *common, "--output", tmp_path / "rows", "--no-gather")
    assert r.returncode == 0, r.stderr
    one = mpiexec(1, "-m", "polydg.assemble", *common, "--output", tmp_path / "one")
    assert one.returncode == 0, one.stderr
    whole = sp.load_npz(tmp_path / "one" / "matrix.npz")
    files = sorted((tmp_path / "rows").glob("rows-rank*.npz"))
    assert [f.name for f in files] == ["rows-rank0.npz", "rows-rank1.npz", "rows-rank2.npz"]
    assert [p.name for p in (tmp_path / "rows").glob(".*")] == [".polydg-output"]  # no temporary file left
    start, seen = 0, []
    for f in files:
        part = np.load(f)
        rows = sp.csr_matrix((part["data"], part["indices"], part["indptr"]), shape=tuple(part["shape"]))
        assert (sp.load_npz(f) != rows).nnz == 0  # SciPy reads the file as the rank's rows
        assert tuple(part["row_range"]) == (start, start + rows.shape[0])
        start += rows.shape[0]
        seen.append(part["dofs"])
        assert np.array_equal(part["rhs"], np.load(tmp_path / "one" / "rhs.npy")[part["dofs"]])
    single_of_rank = np.concatenate(seen)
    assert np.array_equal(np.sort(single_of_rank), np.arange(whole.shape[0]))
    stacked = sp.vstack([sp.csr_matrix((np.load(f)["data"], np.load(f)["indices"], np.load(f)["indptr"]),
                                       shape=tuple(np.load(f)["shape"])) for f in files]).tocsr()
    # rank numbering -> single-process numbering: the one-process matrix exactly
    inverse = np.argsort(single_of_rank)
    back = stacked[inverse][:, inverse]
    assert (back != whole).nnz == 0
    assert (tmp_path / "rows" / "summary.json").exists()
    bad = mpiexec(2, "-m", "polydg.assemble", *common, "--no-gather", "--solve", "--output", tmp_path / "x")
    assert bad.returncode == 2 and "drop --no-gather" in bad.stderr and not (tmp_path / "x").exists()


@pytest.mark.parametrize("n,extra", [(2, ["--space-time-basis", "PQ", "--local-steps", "1:2"]), (4, [])])
def test_space_time_march_on_ranks_gives_the_one_process_slabs(tmp_path, n, extra):
    # every slab assembled by all ranks, gathered, solved on rank 0: the same matrices, loads and solution
    common = ["--mesh", "square:8", "--agglomerate", "20", "--problem", "paper-2d1", "--time-slabs", "3",
              "--degree", "1:2", "--quiet", *extra]
    one = mpiexec(1, "-m", "polydg.assemble", *common, "--output", tmp_path / "one")
    assert one.returncode == 0, one.stderr
    many = mpiexec(n, "-m", "polydg.assemble", *common, "--output", tmp_path / "many")
    assert many.returncode == 0, many.stderr
    s1, s2 = _same_output_files(tmp_path / "one", tmp_path / "many")
    assert s1["errors"] == s2["errors"] and s2["ranks"] == n and s2["slabs"] == 3
    assert len(s2["rank_timings_per_slab"]) == 3 and len(s2["timings_per_rank"]) == n == len(s2["per_rank"])
    # paper-2d1's matrix is kept after slab 1: the ranks assemble their rows of the load alone, and the
    # last slab's load (in --output) is the one process's
    assert s1["assembled_per_slab"] == s2["assembled_per_slab"] == ["matrix+load", "load", "load"]


MARCH_SCRIPT = '''
import json, sys
import numpy as np
from mpi4py import MPI
import polydg.distributed.assembly as distributed
from polydg.distributed.spacetime import SlabAssembler, follow_march
from polydg.mesh import from_spec
from polydg.partition import agglomerate
from polydg.problem import builtin_problem
from polydg.spacetime import march

comm = MPI.COMM_WORLD
problem = builtin_problem("paper-2d1", 2)
mesh = agglomerate(from_spec("square:8"), 20)
NODES = [0.0, 0.25, 0.5, 0.6, 0.7, 0.95, 1.2]  # lengths 0.25, 0.25, 0.1, 0.1, 0.25, 0.25: three slab meshes
CASES = {"load-only": {}, "matrix-every-slab": dict(coefficients_free_of_t=False, space_time_basis="PQ",
                                                    local_steps=np.random.default_rng(0).integers(1, 3, mesh.n_elements))}
report = {}
for name, kwargs in CASES.items():
    if comm.rank != 0:
        follow_march(comm, problem, 2)
        continue
    calls = []
    hand_out_parts = distributed.hand_out_parts
    distributed.hand_out_parts = lambda *a, **k: calls.append(1) or hand_out_parts(*a, **k)
    assembler = SlabAssembler(comm, problem, 2)
    ranked, alone = [], []
    try:
        many = march(mesh, problem, 1, NODES, assembler=assembler, on_slab=lambda s, u, t: ranked.append(u.copy()),
                     **kwargs)
    except BaseException as error:
        assembler.done(error)
        raise
    assembler.done()
    distributed.hand_out_parts = hand_out_parts
    one = march(mesh, problem, 1, NODES, on_slab=lambda s, u, t: alone.append(u.copy()), **kwargs)
    report[name] = {"hand_out_parts": len(calls), "hand_outs": assembler.hand_outs,
                    "assembled": many.info["assembled_per_slab"], "one": one.info["assembled_per_slab"],
                    "solutions": [bool(np.array_equal(a, b)) for a, b in zip(ranked, alone)],
                    "last": bool(np.array_equal(many.assembly.rhs, one.assembly.rhs)
                                 and (many.assembly.matrix != one.assembly.matrix).nnz == 0),
                    "errors": many.errors == one.errors}
if comm.rank == 0:
    open(sys.argv[1], "w").write(json.dumps(report))
'''


@pytest.mark.parametrize("n", [2, 3])
def test_a_march_hands_out_parts_once_per_slab_mesh_and_gives_the_one_process_slabs(tmp_path, n):
    # slabs of one length are one slab mesh moved in time: the ranks move their parts, bit for bit a hand-out's
    script = tmp_path / "march_parts.py"
    script.write_text(MARCH_SCRIPT)
    r = mpiexec(n, script, tmp_path / "report.json")
    assert r.returncode == 0, r.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    expected = {"load-only": ["matrix+load", "load"] * 3, "matrix-every-slab": ["matrix+load"] * 6}
    for name, got in report.items():
        assert got["hand_out_parts"] == got["hand_outs"] == 3  # slabs 1, 3 and 5: each a new slab mesh
        assert got["assembled"] == got["one"] == expected[name]
        assert got["solutions"] == [True] * 6 and got["last"] and got["errors"]


PETSC_SCRIPT = '''
import numpy as np
from mpi4py import MPI
from polydg.distributed import assemble_distributed
from polydg.mesh import from_spec
from polydg.partition import agglomerate
from polydg.problem import builtin_problem
from polydg.space import DGSpace

comm = MPI.COMM_WORLD
space = DGSpace(agglomerate(from_spec("square:8"), 12), 1) if comm.rank == 0 else None
result = assemble_distributed(space, builtin_problem("paper-2d", 2), comm)
A, b = result.to_petsc()
lo, hi = A.getOwnershipRange()
assert (lo, hi) == tuple(result.row_range)
for r in range(lo, hi):
    cols, vals = A.getRow(r)
    row = result.matrix[r - lo]
    assert np.array_equal(cols, row.indices) and np.array_equal(vals, row.data)
assert np.array_equal(b.getArray(), result.rhs)
print("PETSC-OK", comm.rank)
'''


def test_to_petsc_builds_the_ranks_rows_as_one_mpiaij_matrix(tmp_path):
    pytest.importorskip("petsc4py", reason="petsc4py is optional (no binary wheel on PyPI: build PETSc to run this)")
    script = tmp_path / "petsc_rows.py"
    script.write_text(PETSC_SCRIPT)
    r = mpiexec(2, script)
    assert r.returncode == 0 and r.stdout.count("PETSC-OK") == 2, r.stderr


def test_degree_zero_is_said_on_the_root_from_the_whole_space(monkeypatch):
    """The root says degree 0 under a diffusion from the whole space before handing out the parts (the CLI
    shows rank 0's warnings, and rank 0's part may have no element of degree 0), for an assembly and for a
    nonlinear system; a one-rank communicator stands in for the ranks."""
    MPI = pytest.importorskip("mpi4py.MPI")
    from polydg.distributed import assembly as distributed_assembly
    from polydg.distributed import nonlinear as distributed_nonlinear
    from polydg.mesh import from_spec
    from polydg.partition import agglomerate
    from polydg.problem import builtin_problem
    from polydg.space import DGSpace

    said = []
    for module in (distributed_assembly, distributed_nonlinear):
        monkeypatch.setattr(module, "warn_degree_zero_diffusion", lambda space, problem: said.append(space))
    mesh = agglomerate(from_spec("square:4"), 6)
    space = DGSpace(mesh, np.r_[np.ones(mesh.n_elements - 1, dtype=np.int64), 0])  # one element of degree 0
    distributed_assembly.assemble_distributed(space, builtin_problem("paper-2d", 2), MPI.COMM_SELF)
    distributed_nonlinear.DistributedNonlinearSystem(space, builtin_problem("quasilinear", 2), MPI.COMM_SELF)
    assert len(said) == 2 and all(s is space for s in said)
