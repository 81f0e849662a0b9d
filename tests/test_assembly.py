"""Assembly: consistency (polynomial reproduction), structure, reductions, precision."""

import numpy as np
import pytest
import scipy.sparse as sp

from polydg.assembly import AssemblyOptions, AssemblyScope, assemble
from polydg.assembly.assembler import APPROACHES
from polydg.errors import OptionError
from polydg.mesh import build_polytopic_mesh, from_spec
from polydg.partition import agglomerate
from polydg.problem import builtin_problem, polynomial_problem
from polydg.solve import errors, solve
from polydg.space import DGSpace

from .conftest import TEST_BACKEND


def _solve_error(space, problem, **options):
    result = assemble(space, problem, **options)
    x, _ = solve(result.matrix.astype(np.float64), result.rhs.astype(np.float64))
    err = errors(space, problem, x, penalty_values=result.face_penalty)
    return err, result


def _relative_l2(space, problem, err):
    zero = errors(space, problem, np.zeros(space.n_dofs))
    return err["l2"] / zero["l2"]


MESH_2D = agglomerate(from_spec("square:8:perturb=0.2:seed=3"), 12)
MESH_3D = agglomerate(from_spec("cube:3:perturb=0.15:seed=1"), 10)


@pytest.mark.parametrize("kind", ["diffusion", "advection-reaction", "mixed"])
@pytest.mark.parametrize("p", [1, 2, 3, 4])
def test_polynomial_reproduction_2d(kind, p):
    problem = polynomial_problem(2, p, kind, seed=p)
    space = DGSpace(MESH_2D, p)
    err, _ = _solve_error(space, problem)
    assert _relative_l2(space, problem, err) < 1e-9


@pytest.mark.parametrize("kind", ["diffusion", "advection-reaction", "mixed"])
@pytest.mark.parametrize("p", [1, 2, 3])
def test_polynomial_reproduction_3d(kind, p):
    problem = polynomial_problem(3, p, kind, seed=10 + p)
    space = DGSpace(MESH_3D, p)
    err, _ = _solve_error(space, problem)
    assert _relative_l2(space, problem, err) < 1e-9


@pytest.mark.parametrize("kind", ["diffusion", "mixed"])
def test_polynomial_reproduction_mixed_degrees(kind):
    # the exact solution has degree 2 and every element at least degree 2
    rng = np.random.default_rng(7)
    degree = rng.integers(2, 5, size=MESH_2D.n_elements)
    problem = polynomial_problem(2, 2, kind, seed=3)
    space = DGSpace(MESH_2D, degree)
    err, _ = _solve_error(space, problem)
    assert _relative_l2(space, problem, err) < 1e-9
    degree3 = np.random.default_rng(8).integers(1, 3, size=MESH_3D.n_elements)
    degree3[:] = np.maximum(degree3, 1)
    problem3 = polynomial_problem(3, 1, kind, seed=4)
    space3 = DGSpace(MESH_3D, degree3)
    err3, _ = _solve_error(space3, problem3)
    assert _relative_l2(space3, problem3, err3) < 1e-9


def test_polynomial_reproduction_on_shared_polygon_mesh(shared_meshes):
    from polydg.mesh import read_mesh

    mesh = build_polytopic_mesh(read_mesh(shared_meshes / "unit_square_polytopic_100_cells.vtk"))
    for kind in ("diffusion", "advection-reaction", "mixed"):
        problem = polynomial_problem(2, 2, kind, seed=5)
        space = DGSpace(mesh, 2)
        err, _ = _solve_error(space, problem)
        assert _relative_l2(space, problem, err) < 1e-9, kind


def test_reproduction_fails_when_degree_too_low():
    # the test above can fail: a cubic is not reproduced by p = 2
    problem = polynomial_problem(2, 3, "diffusion", seed=1)
    space = DGSpace(MESH_2D, 2)
    err, _ = _solve_error(space, problem)
    assert _relative_l2(space, problem, err) > 1e-6


@pytest.mark.parametrize("mesh", [MESH_2D, MESH_3D], ids=["2d", "3d"])
@pytest.mark.parametrize("p", [1, 2])
def test_pure_diffusion_matrix_is_spd(mesh, p):
    problem = polynomial_problem(mesh.dim, p, "diffusion", seed=2)
    result = assemble(DGSpace(mesh, p), problem)
    A = result.matrix.toarray()
    assert np.abs(A - A.T).max() <= 1e-12 * np.abs(A).max()
    assert np.linalg.eigvalsh(0.5 * (A + A.T)).min() > 0


@pytest.mark.parametrize("problem_name", ["paper-2d", "neumann", "change-of-type", "advection"])
def test_three_reductions_give_the_same_matrix(problem_name):
    problem = builtin_problem(problem_name, 2)
    degree = np.random.default_rng(0).integers(1, 4, size=MESH_2D.n_elements)
    space = DGSpace(MESH_2D, degree)
    results = {a: assemble(space, problem, approach=a) for a in ("2", "atomic", "1")}
    ref = results["2"]
    scale = np.abs(ref.matrix).max()
    for a in ("atomic", "1"):
        diff = abs(results[a].matrix - ref.matrix).max()
        assert diff <= 1e-13 * scale, (a, diff)
        assert np.allclose(results[a].rhs, ref.rhs, rtol=0, atol=1e-13 * np.abs(ref.rhs).max())
    # the load alone (matrix=False), by any approach: the same load, no matrix
    for a in ("2", "atomic", "1"):
        load = assemble(space, problem, approach=a, matrix=False)
        assert load.matrix is None and load.info["assembled"] == "load"
        assert np.allclose(load.rhs, ref.rhs, rtol=0, atol=1e-13 * np.abs(ref.rhs).max()), a
    # and the same sparsity pattern: every entry of every coupled block, columns sorted in each row
    for a in ("atomic", "1"):
        m = results[a].matrix
        assert m.has_sorted_indices and np.array_equal(m.indptr, ref.matrix.indptr), a
        assert np.array_equal(m.indices, ref.matrix.indices), a


def test_approach_2_is_bitwise_reproducible_across_memory_budgets():
    problem = builtin_problem("paper-3d", 3)
    space = DGSpace(MESH_3D, 2)
    big = assemble(space, problem, memory_budget_mb=1024)
    small = assemble(space, problem, memory_budget_mb=0.05)
    assert small.info["chunks"] > 1
    assert np.array_equal(big.matrix.data, small.matrix.data)
    assert np.array_equal(big.rhs, small.rhs)
    assert np.array_equal(big.matrix.indices, small.matrix.indices)


def test_indices_are_int64():
    result = assemble(DGSpace(MESH_2D, 1), builtin_problem("poisson", 2))
    assert result.matrix.indices.dtype == np.int64
    assert result.matrix.indptr.dtype == np.int64


def test_single_precision_error_floor():
    # float32 assembly, solved in float64: the discretisation error at this
    # size (~1e-3) dominates; the documented floor is 1e-4 relative on top
    problem = builtin_problem("paper-2d", 2)
    space = DGSpace(agglomerate(from_spec("square:16"), 64), 2)
    err64, r64 = _solve_error(space, problem, precision="double")
    err32, r32 = _solve_error(space, problem, precision="single")
    assert r32.matrix.dtype == np.float32
    rel = abs(r32.matrix.astype(np.float64) - r64.matrix).max() / abs(r64.matrix).max()
    assert rel < 1e-5
    assert abs(err32["l2"] - err64["l2"]) <= 1e-4 * err64["l2"] + 1e-6


def test_row_range_assembly_matches_whole_matrix():
    problem = builtin_problem("paper-2d", 2)
    space = DGSpace(MESH_2D, 2)
    whole = assemble(space, problem)
    n = MESH_2D.n_elements
    parts = [assemble(space, problem, scope=AssemblyScope(elements=np.arange(a, b)))
             for a, b in [(0, n // 3), (n // 3, n)]]
    stacked = sp.vstack([p.matrix for p in parts]).tocsr()
    assert np.array_equal(stacked.toarray(), whole.matrix.toarray())
    assert np.array_equal(np.concatenate([p.rhs for p in parts]), whole.rhs)


@pytest.mark.parametrize("approach", APPROACHES)
def test_rows_of_any_element_subset_are_the_whole_matrix_rows_bitwise(approach):
    # the rows of one MPI rank: an increasing, non-contiguous set of elements,
    # numbered consecutively; every reduction writes exactly the serial values
    problem = builtin_problem("paper-2d", 2)
    mesh = agglomerate(from_spec("square:12"), 20)
    space = DGSpace(mesh, np.random.default_rng(3).integers(1, 4, mesh.n_elements))
    whole = assemble(space, problem, approach=approach)
    subset = np.flatnonzero(np.random.default_rng(5).random(mesh.n_elements) < 0.4)
    part = assemble(space, problem, approach=approach, scope=AssemblyScope(elements=subset))
    rows = np.concatenate([np.arange(space.dof_offsets[e], space.dof_offsets[e + 1]) for e in subset])
    expected = whole.matrix[rows]
    assert part.matrix.shape == expected.shape and part.matrix.nnz == expected.nnz
    assert np.array_equal(part.matrix.indptr, expected.indptr)
    assert np.array_equal(part.matrix.indices, expected.indices)
    if approach == "atomic" and TEST_BACKEND == "cupy":  # a GPU's atomic adds land in no fixed order
        scale = abs(expected.data).max()
        assert np.allclose(part.matrix.data, expected.data, rtol=1e-13, atol=1e-13 * scale)
        assert np.allclose(part.rhs, whole.rhs[rows], rtol=1e-13, atol=1e-13 * abs(whole.rhs).max())
    else:
        assert np.array_equal(part.matrix.data, expected.data)
        assert np.array_equal(part.rhs, whole.rhs[rows])
    with pytest.raises(OptionError, match="increasing array of element ids"):
        assemble(space, problem, scope=AssemblyScope(elements=subset[::-1]))


def test_sparsity_pattern_matches_the_matrix_graph_and_checks_interface_order():
    import dataclasses

    from polydg.assembly.pattern import sparsity_pattern

    mesh = agglomerate(from_spec("square:12"), 20)
    space = DGSpace(mesh, np.random.default_rng(1).integers(0, 3, mesh.n_elements))  # mixed widths
    pat = sparsity_pattern(mesh, space.dof_offsets)
    # the pattern is exactly the block graph: (e, c) blocks for e == c or e, c neighbours
    e_of = np.repeat(np.arange(mesh.n_elements), np.diff(space.dof_offsets))
    rows = np.repeat(np.arange(pat.n_rows), np.diff(pat.indptr))
    pairs = set(zip(e_of[rows].tolist(), e_of[pat.indices].tolist()))
    ia, ib = mesh.interface_elements.T
    expected = ({(e, e) for e in range(mesh.n_elements)} | set(zip(ia.tolist(), ib.tolist()))
                | set(zip(ib.tolist(), ia.tolist())))
    assert pairs == expected
    assert pat.nnz == sum(np.diff(space.dof_offsets)[e] * np.diff(space.dof_offsets)[c] for e, c in expected)
    for r in range(pat.n_rows):  # sorted, distinct columns in every row
        assert np.all(np.diff(pat.indices[pat.indptr[r]:pat.indptr[r + 1]]) > 0)
    assert np.array_equal(pat.adj_col[pat.diag_entry], np.arange(mesh.n_elements))
    assert np.array_equal(pat.adj_col[pat.interface_entry[:, 0]], ib)
    assert np.array_equal(pat.adj_col[pat.interface_entry[:, 1]], ia)
    shuffled = dataclasses.replace(mesh, interface_elements=mesh.interface_elements[::-1].copy())
    with pytest.raises(ValueError, match="lexicographic order"):
        sparsity_pattern(shuffled, space.dof_offsets)


@pytest.mark.parametrize("spec, n_agg, ranks", [("square:16", 40, 3), ("cube:4", 60, 2)])
def test_a_ranks_pattern_holds_only_its_rows(spec, n_agg, ranks):
    """Each rank's pattern (rank numbering, as the distributed assembly builds it) has the arrays of its own
    rows and of its sub-mesh (owned elements and their halo), never of the whole mesh, and its rows are the
    one-process rows with the columns renumbered, in increasing order."""
    from polydg.assembly.pattern import sparsity_pattern
    from polydg.distributed.parts import rank_parts
    from polydg.partition.ranks import rank_partition

    mesh = agglomerate(from_spec(spec), n_agg)
    space = DGSpace(mesh, np.random.default_rng(3).integers(1, 4, mesh.n_elements))
    whole = sparsity_pattern(mesh, space.dof_offsets)
    ranked = rank_partition(space, ranks)
    rows_seen = nnz_seen = 0
    for part in rank_parts(space, ranked):
        local = part.space()
        sub = part.submesh
        pat = sparsity_pattern(sub.mesh, local.dof_offsets, sub.owned,
                               (part.rank_dof_offsets, part.rank_dof_offsets, part.n_dofs))
        n_local = len(sub.owned) + len(sub.halo)
        assert n_local == sub.mesh.n_elements < mesh.n_elements  # a share of the elements, and the halo
        rows = int(local.element_dofs[sub.owned].sum())
        assert pat.n_rows == rows == part.row_range[1] - part.row_range[0]
        assert pat.indptr.shape == (rows + 1,)
        owned = sub.elements[sub.owned]  # their one-process rows
        one_rows = np.concatenate([np.arange(space.dof_offsets[e], space.dof_offsets[e + 1]) for e in owned])
        widths = np.diff(whole.indptr)[one_rows]
        assert pat.nnz == pat.indices.size == widths.sum()
        for name in ("row_base", "row_start", "row_width", "element_dofs", "diag_entry"):
            assert getattr(pat, name).shape == (n_local,), name
        assert pat.adj_offsets.shape == (n_local + 1,) and pat.adj_col.size == pat.block_start.size
        assert pat.adj_col.size == n_local + 2 * sub.mesh.n_interfaces < whole.adj_col.size
        # the same rows, the columns renumbered rank by rank (PETSc's layout) and increasing in every row
        to_rank = np.empty(space.n_dofs, dtype=np.int64)  # elements rank by rank, each rank's in mesh order
        to_rank[np.concatenate([np.arange(space.dof_offsets[e], space.dof_offsets[e + 1])
                                for e in np.argsort(ranked, kind="stable")])] = np.arange(space.n_dofs)
        for r, one in enumerate(one_rows):
            got = pat.indices[pat.indptr[r]:pat.indptr[r + 1]]
            assert np.all(np.diff(got) > 0)
            assert np.array_equal(got, np.sort(to_rank[whole.indices[whole.indptr[one]:whole.indptr[one + 1]]]))
        rows_seen += rows
        nnz_seen += pat.nnz
    assert rows_seen == whole.n_rows and nnz_seen == whole.nnz


def test_blocks_ordered_by_label_are_those_of_a_sort_of_all_entries():
    from polydg.assembly.pattern import _blocks_by_label

    rng = np.random.default_rng(5)
    lengths = rng.integers(1, 30, size=200)
    adj_offsets = np.r_[0, np.cumsum(lengths)].astype(np.int64)
    adj_col = rng.integers(0, 300, size=adj_offsets[-1]).astype(np.int64)
    dofs = rng.integers(1, 11, size=300).astype(np.int64)
    for label in (rng.permutation(300).astype(np.int64), rng.integers(0, 40, 300).astype(np.int64)):  # ties too
        row = np.repeat(np.arange(len(lengths)), lengths)
        order = np.lexsort((label[adj_col], row))  # stable: ties keep their adjacency order
        width = dofs[adj_col[order]]
        start = np.cumsum(width) - width
        start -= np.repeat(start[adj_offsets[:-1]], lengths)
        expected = np.empty_like(start)
        expected[order] = start
        assert np.array_equal(_blocks_by_label(adj_offsets, adj_col, dofs, label), expected)


@pytest.mark.parametrize("spec, n_agg, subset", [("square:12", 40, False), ("cube:5", 60, False), ("cube:5", 60, True)])
def test_chunk_interfaces_are_the_interfaces_with_a_side_in_the_chunk(spec, n_agg, subset):
    """The interior pass's per-chunk interfaces (O(chunk), from the adjacency) are those of the mask over every
    interface that they replace, in the same increasing order, for every chunk of several budgets."""
    from polydg.assembly.passes import chunk_interfaces
    from polydg.assembly.plan import plan_assembly
    from polydg.assembly.timing import Timer

    mesh = agglomerate(from_spec(spec), n_agg)
    space = DGSpace(mesh, np.random.default_rng(2).integers(1, 3, mesh.n_elements))
    problem = builtin_problem("paper-3d" if mesh.dim == 3 else "paper-2d", mesh.dim)
    elements = (np.flatnonzero(np.random.default_rng(4).random(mesh.n_elements) < 0.5) if subset
                else np.arange(mesh.n_elements))
    ie = mesh.interface_elements
    for budget in (1024, 0.05, 0.01):
        plan = plan_assembly(space, problem, AssemblyOptions(memory_budget_mb=budget), AssemblyScope(elements=elements),
                             timer=Timer())
        assert budget == 1024 or len(plan.chunks) > 3
        for e_lo, e_hi in plan.chunks + [(0, mesh.n_elements), (3, 4), (5, 5)]:
            side = (ie >= e_lo) & (ie < e_hi)
            expected = np.flatnonzero(side[:, 0] | side[:, 1])
            got = chunk_interfaces(plan, e_lo, e_hi)
            assert got.dtype == np.int64 and np.array_equal(got, expected), (e_lo, e_hi)


def test_vanishing_boundary_faces_are_those_whose_every_product_vanishes():
    """The boundary faces left out of a pass (constant A: every A_kl n_l zero; constant b: every b_k n_k >= 0)
    are those of the product definition, on a slab's normals and on random ones with zero components; a
    non-finite A leaves none out (its products are NaN: the assembly's finite check must see them)."""
    from polydg.assembly.passes import _diffusion_vanishes, _inflow_vanishes
    from polydg.spacetime import slab_mesh

    rng = np.random.default_rng(7)
    slab = slab_mesh(agglomerate(from_spec("square:4"), 5), 0.0, 0.1).face_normal
    noisy = rng.normal(size=(400, 3)) * (rng.random((400, 3)) < 0.6)
    noisy[:6] = [[0.0, 0.0, np.nan], [np.inf, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 1.0], [np.nan] * 3, [1, 0, 0]]
    for normal in (slab, noisy):  # (inf * 0 in the product definition: NaN, on purpose)
        two_columns = rng.normal(size=(3, 3)) * np.eye(3)[[0, 0, 2]]
        for A in (np.diag([1.0, 2.0, 0.0]), np.eye(3), np.zeros((3, 3)), two_columns):
            with np.errstate(invalid="ignore"):
                expected = np.all(A[None, :, :] * normal[:, None, :] == 0.0, axis=(1, 2))
            assert np.array_equal(_diffusion_vanishes(A, normal), expected)
        for b in (np.array([0.3, -0.2, 1.0]), np.array([0.0, 0.0, 1.0]), np.zeros(3), np.array([np.nan, 0, 1])):
            with np.errstate(invalid="ignore"):
                assert np.array_equal(_inflow_vanishes(b, normal), np.all(b[None, :] * normal >= 0.0, axis=1))
    assert _diffusion_vanishes(np.diag([1.0, 1.0, 0.0]), slab).any()  # a slab's top and bottom faces
    assert not _diffusion_vanishes(np.diag([np.inf, 1.0, 0.0]), slab).any()


def test_classical_penalty_is_the_formula_and_boundary_vertices_are_distinct():
    from polydg.assembly.penalty import face_penalty

    mesh = agglomerate(from_spec("square:12"), 20)
    rng = np.random.default_rng(4)
    degree, a = rng.integers(0, 4, mesh.n_elements), rng.uniform(0.1, 2.0, mesh.n_elements)
    sigma = face_penalty(mesh, degree, a, kind="classical", C_sigma=7.0)
    el = mesh.face_elements
    p = np.maximum(degree, 1).astype(float)
    per_side = np.where(el >= 0, a[el] * (p[el] ** 2 / mesh.diameter[el]), 0.0)
    assert np.array_equal(sigma, 7.0 * per_side.max(axis=1))  # max of both sides; the one side on the boundary
    # element by element, sorted and distinct: lists of 32-48 face vertices here, over 64 in 3 larger elements
    for mesh in (mesh, agglomerate(from_spec("square:24"), 3)):
        el = mesh.face_elements
        offsets, vertices = mesh.element_boundary_vertices()
        assert offsets.dtype == vertices.dtype == np.int64 and offsets[-1] == len(vertices)
        for e in range(mesh.n_elements):
            on_boundary = np.unique(mesh.face_vertices[(el == e).any(axis=1)])
            assert np.array_equal(vertices[offsets[e]:offsets[e + 1]], on_boundary)


def test_the_diffusion_bound_is_the_same_in_chunks_of_any_number_of_points():
    # a_K, the largest row sum of A over K's quadrature points, taken in chunks bounded by points (not by
    # sub-simplices: a high-degree rule has thousands of points per simplex)
    from polydg.assembly.penalty import diffusion_bound
    from polydg.assembly.points import point_counts, point_ranges
    from polydg.quadrature import default_degree

    problem = builtin_problem("change-of-type", 2)
    degree = np.random.default_rng(5).integers(1, 4, MESH_2D.n_elements)
    whole = diffusion_bound(MESH_2D, problem, degree, 1)
    assert whole.min() >= 0 and whole.max() > 0
    q = default_degree(degree[MESH_2D.simplex_element], 1)
    counts = point_counts(2, q)
    for max_points in (1, 7, 100):
        assert np.array_equal(diffusion_bound(MESH_2D, problem, degree, 1, max_points=max_points), whole)
        ranges = point_ranges(2, q, max_points)
        assert ranges[0].start == 0 and ranges[-1].stop == len(q)
        assert all(a.stop == b.start for a, b in zip(ranges, ranges[1:]))
        assert all(counts[r].sum() <= max_points or r.stop - r.start == 1 for r in ranges)


PENALTY_SIGNATURES = """
import json
import sys
import numpy as np
from polydg.assembly import assemble, penalty
from polydg.mesh import from_spec
from polydg.partition import agglomerate
from polydg.problem import builtin_problem
from polydg.space import DGSpace

kernels = (penalty._row_sum_bound, penalty._classical_weights, penalty._face_penalty, penalty._apex_heights)
penalty.compile_penalty_kernels()
before = [len(f.signatures) for f in kernels]
space = DGSpace(agglomerate(from_spec("square:8"), 6), 2)
assemble(space, builtin_problem("paper-2d", 2), penalty_kind=sys.argv[1])
print(json.dumps([before, [len(f.signatures) for f in kernels]]))
"""


@pytest.mark.parametrize("kind", ["classical", "paper"])
def test_penalty_kernels_are_compiled_before_the_assembly_clock_starts(kind):
    # assemble() warms the penalty kernels with compile_penalty_kernels(); if the warm-up's argument types
    # differed from the assembly's, the first real call would compile a second specialisation inside the
    # timed assembly. In a process of its own: this one's earlier tests have compiled them already.
    import json
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "-c", PENALTY_SIGNATURES, kind], capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr
    before, after = json.loads(run.stdout.strip().splitlines()[-1])
    assert before == after and min(before) >= 1, (before, after)


@pytest.mark.parametrize("threads", [1, 2])
def test_coefficients_are_evaluated_piece_by_piece_into_one_array(monkeypatch, threads):
    from polydg.assembly import coefficients as coefficient_module
    from polydg.errors import ProblemError

    monkeypatch.setattr(coefficient_module, "COEFFICIENT_PIECE", 1000)
    problem = builtin_problem("paper-3d", 3)
    x = np.random.default_rng(5).random((4321, 3))  # four full pieces and a partial one
    for dtype in (np.float64, np.float32):
        coefficients = coefficient_module.Coefficients(problem, 3, dtype, threads)
        A, B, C, F = coefficients.volume(x, want_load=True)
        assert A.shape == (1, 3, 3) and B.dtype == dtype and F.flags.c_contiguous
        for got, expected in ((B, problem.advection_at(x)), (C, problem.reaction_at(x)), (F, problem.source_at(x))):
            assert np.array_equal(got, expected.astype(dtype))
    # a NaN in a later piece is reported with its point, from whichever thread met it
    bad = x.copy()
    bad[3500, 1] = np.nan
    with pytest.raises(ProblemError, match=r"advection returned NaN at x = \[.*nan"):
        coefficient_module.Coefficients(problem, 3, np.float64, threads).interior(bad)
    # at most ``threads`` threads evaluate the pieces (the pool may hold more workers)
    import threading

    from polydg.problem import Problem

    seen = set()

    def advection(y):
        seen.add(threading.get_ident())
        return 1.0 + y

    _, B = coefficient_module.Coefficients(Problem(name="threads", advection=advection, dim=3), 3, np.float64,
                                   threads).interior(x)
    assert np.array_equal(B, 1.0 + x) and 1 <= len(seen) <= threads


def test_chunks_reuse_their_work_arrays_and_stay_bitwise_identical(monkeypatch):
    """Points and coefficients of every chunk live in one Workspace: its buffers are made once
    (growing at most a few times), and the chunked matrix equals the one-chunk matrix bit for bit."""
    from polydg.assembly import assembler
    from polydg.assembly import coefficients as coefficient_module
    from polydg.assembly.workspace import Workspace

    problem = builtin_problem("paper-3d", 3)
    space = DGSpace(MESH_3D, 2)
    whole = assemble(space, problem, backend="numpy")  # the host executor's (a GPU's keep no Workspace)
    made: list[str] = []

    class CountingWorkspace(Workspace):
        def take(self, name, shape, dtype):
            before = self._buffers.get(name)
            out = super().take(name, shape, dtype)
            if self._buffers[name] is not before:
                made.append(name)
            return out

    monkeypatch.setattr(assembler, "Workspace", CountingWorkspace)
    monkeypatch.setattr(coefficient_module, "COEFFICIENT_PIECE", 50)  # the coefficients go to the workspace too
    chunked = assemble(space, problem, memory_budget_mb=0.05, backend="numpy")  # the host executor's buffers
    assert chunked.info["chunks"] >= 8
    assert {"x", "weight", "advection", "reaction", "source"} <= set(made)
    assert max(made.count(name) for name in set(made)) <= 4, made
    assert np.array_equal(whole.matrix.data, chunked.matrix.data)
    assert np.array_equal(whole.rhs, chunked.rhs)


@pytest.mark.parametrize("approach", ["2", "atomic", "1"])
def test_repeated_assemblies_reuse_one_workspace_and_return_arrays_of_their_own(monkeypatch, approach):
    """A Workspace passed to assemble keeps its buffers from call to call (none made twice), and
    the results are bitwise those of an assembly with a workspace of its own."""
    from polydg.assembly import Workspace
    from polydg.assembly import coefficients as coefficient_module

    monkeypatch.setattr(coefficient_module, "COEFFICIENT_PIECE", 50)  # the coefficients go to the workspace too
    problem = builtin_problem("paper-3d", 3)
    space = DGSpace(MESH_3D, np.arange(MESH_3D.n_elements) % 3 + 1)  # mixed degrees: every code path
    host = dict(approach=approach, backend="numpy")  # the host executors' Workspace (a GPU's keep none)
    alone = assemble(space, problem, **host)
    workspace = Workspace()
    first = assemble(space, problem, workspace=workspace, **host)
    buffers = dict(workspace._buffers)
    assert {"x", "weight", "advection", "reaction", "source"} <= set(buffers)
    second = assemble(space, problem, workspace=workspace, **host)
    assert all(workspace._buffers[name] is buffer for name, buffer in buffers.items())
    for result in (first, second):
        assert np.array_equal(result.matrix.indptr, alone.matrix.indptr)
        assert np.array_equal(result.matrix.indices, alone.matrix.indices)
        assert np.array_equal(result.matrix.data, alone.matrix.data)
        assert np.array_equal(result.rhs, alone.rhs)
    for buffer in buffers.values():
        for array in (first.matrix.data, first.rhs, second.matrix.data, second.rhs, second.face_penalty):
            assert not np.shares_memory(array, buffer)


def test_coefficients_of_a_piece_are_evaluated_together(monkeypatch):
    """Every coefficient of one piece of points before the next piece: the piece's points are read
    from memory once (b, c, f of 2M points at 2D p = 1: 14.5 -> 12.2 ms)."""
    from polydg.assembly import coefficients as coefficient_module
    from polydg.problem import Problem

    monkeypatch.setattr(coefficient_module, "COEFFICIENT_PIECE", 100)
    calls = []

    def recording(name, value):
        def coefficient(x):
            calls.append((name, len(x)))
            return value(x)
        return coefficient

    problem = Problem(name="recording", dim=2, diffusion=1.0, advection=recording("b", lambda x: 1.0 + x),
                      reaction=recording("c", lambda x: x[:, 0] * x[:, 1]), source=recording("f", lambda x: x[:, 0]))
    x = np.random.default_rng(2).random((250, 2))
    A, B, C, F = coefficient_module.Coefficients(problem, 2, np.float64, 1).volume(x, want_load=True)
    assert np.array_equal(B, 1.0 + x) and np.array_equal(C, x[:, 0] * x[:, 1]) and np.array_equal(F, x[:, 0])
    assert A.shape == (1, 2, 2)
    pieces = [call for call in calls if call[1] > 1]  # after each coefficient's one-point probe of its shape
    assert pieces == [("b", 100), ("c", 100), ("f", 100), ("b", 100), ("c", 100), ("f", 100),
                      ("b", 50), ("c", 50), ("f", 50)]


def _carried_segments(mesh, degree) -> int:
    """How many interfaces the row kernel's face batches cut in two (a segment carried into the next batch).

    Replays the kernel's gathering: each element takes its interfaces in
    column order, each padded to PAD points, into batches of BATCH.
    """
    from polydg.assembly.batched import BATCH, PAD
    from polydg.assembly.points import point_counts
    from polydg.quadrature import default_degree

    fe = mesh.face_elements[: mesh.n_interior_faces]
    per_face = point_counts(mesh.dim - 1, default_degree(np.maximum(degree[fe[:, 0]], degree[fe[:, 1]]), 0))
    per_interface = np.add.reduceat(per_face, mesh.interface_offsets[:-1])
    ie = mesh.interface_elements
    carried = 0
    for e in range(mesh.n_elements):
        mine = np.flatnonzero((ie == e).any(axis=1))
        order = np.argsort(np.where(ie[mine, 0] == e, ie[mine, 1], ie[mine, 0]))
        q = 0
        for n in per_interface[mine[order]]:
            if q + n > BATCH:
                carried += 1
                q = (q + n - BATCH) % BATCH
            else:
                q += n
            q = -(-q // PAD) * PAD % BATCH
    return carried


def test_interface_batches_cut_mid_interface_match_the_face_kernel_3d():
    """The row kernel gathers several interfaces of an element per batch and carries a cut interface's
    block into the next batch; with mixed degrees in 3D it must still give the face-by-face matrix."""
    problem = builtin_problem("paper-3d", 3)
    degree = np.random.default_rng(5).integers(1, 4, size=MESH_3D.n_elements)
    assert _carried_segments(MESH_3D, degree) > 10
    space = DGSpace(MESH_3D, degree)
    rows, faces = assemble(space, problem, approach="2"), assemble(space, problem, approach="atomic")
    scale = np.abs(rows.matrix).max()
    assert abs(rows.matrix - faces.matrix).max() <= 1e-13 * scale
    assert np.array_equal(rows.matrix.indices, faces.matrix.indices)


def test_a_result_reads_in_one_line():
    """The result's repr names the sizes, not the arrays and the info dict (read as attributes)."""
    space = DGSpace(agglomerate(from_spec("square:4"), 8), 1)
    text = repr(assemble(space, builtin_problem("paper-2d", 2)))
    assert "\n" not in text and "array" not in text, text
    assert text.startswith("AssemblyResult(matrix 24 x 24, 288 non-zeros, load of 24 rows, "), text
    text = repr(assemble(space, builtin_problem("paper-2d", 2), matrix=False))
    assert text.startswith("AssemblyResult(no matrix (the load alone), load of 24 rows, "), text
