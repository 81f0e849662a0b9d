"""The reductions' registry (assembly/reductions/) and the kernels' named arguments (assembly/arguments.py).

A reduction is found by its ``approach`` name, says what the assembler must
know of it (its devices, whether it fills the pattern), and a new one is a
new registered entry: the test registers a copy of the row kernels' entry
under a new name and assembles with it.
"""

import dataclasses

import numpy as np
import pytest

from polydg.assembly import AssemblyOptions, assemble
from polydg.assembly.assembler import APPROACHES
from polydg.assembly.reductions import LOAD_ALONE, REDUCTIONS, gpu_reductions, reduction, register
from polydg.assembly.reductions.rows import RowPasses
from polydg.errors import OptionError
from polydg.mesh import unit_square
from polydg.partition import agglomerate
from polydg.problem import builtin_problem
from polydg.space import DGSpace


def _space():
    return DGSpace(agglomerate(unit_square(6), 8), 1)


def test_every_approach_is_a_registered_reduction():
    assert APPROACHES == ("auto",) + tuple(REDUCTIONS)
    assert tuple(REDUCTIONS) == ("2", "atomic", "1", "ordered", "blocks")
    rows, atomic, coo, ordered, blocks = (reduction(name) for name in REDUCTIONS)
    assert rows.deterministic and rows.fills_pattern and rows.devices == ("cpu", "gpu")
    assert not atomic.deterministic and atomic.fills_pattern and atomic.devices == ("cpu", "gpu")
    assert coo.deterministic and not coo.fills_pattern and coo.devices == ("cpu",) and coo.gpu is None
    assert ordered.deterministic and ordered.fills_pattern and ordered.devices == ("cpu", "gpu")
    assert ordered.cpu is rows.cpu  # on the CPU, the row kernels
    assert blocks.deterministic and blocks.fills_pattern and blocks.devices == ("cpu", "gpu")
    assert blocks.cpu is rows.cpu  # on the CPU, the row kernels
    # no scratch on a GPU (each entry summed where it is written), but the ordered sums' for a basis too large
    assert blocks.scratch(20, 8) == (0, 0) and blocks.scratch(128, 8) == ordered.scratch(128, 8) != (0, 0)
    assert gpu_reductions() == ("2", "atomic", "ordered", "blocks") and reduction(LOAD_ALONE) is rows
    assert reduction(2) is rows  # the command line's and the user's spelling alike


def test_each_approach_has_its_cpu_and_gpu_executors():
    """One entry per approach: a CPU executor for every one (the reference), a GPU executor or an explicit
    None (CPU only), each with the passes the executors run; the options place and refuse by it."""
    for name in REDUCTIONS:
        entry = reduction(name)
        assert entry.name == name and entry.summary
        assert isinstance(entry.cpu, type) and all(callable(getattr(entry.cpu, m, None))
                                                   for m in ("volume", "interior_faces", "boundary", "matrix"))
        if entry.gpu is None:
            assert entry.devices == ("cpu",)
            assert AssemblyOptions(approach=name).backend == "numpy"  # no GPU executor: placed on the CPU
            with pytest.raises(OptionError, match=f"approach '{name}' runs on the CPU only; on a GPU use "
                                                  "approach 2, atomic, ordered or blocks"):
                AssemblyOptions(approach=name, backend="cupy")
        else:
            assert entry.devices == ("cpu", "gpu") and entry.gpu is not entry.cpu
            assert isinstance(entry.gpu, type) and all(callable(getattr(entry.gpu, m, None))
                                                       for m in ("volume", "interior_faces", "boundary"))
    assert [reduction(n).gpu is not None for n in REDUCTIONS] == [True, True, False, True, True]


def test_the_command_line_offers_the_registered_approaches():
    from polydg.cli.parser import build_parser

    (action,) = [a for a in build_parser()._actions if a.dest == "approach"]
    assert tuple(action.choices) == APPROACHES and action.default == APPROACHES[0]


def test_an_unknown_approach_is_refused_with_the_registered_names():
    with pytest.raises(OptionError, match=r"^unknown approach '3'; choose one of auto, 2, atomic, 1, ordered, blocks$"):
        AssemblyOptions(approach="3")  # the options' own check, as before the registry

    with pytest.raises(OptionError, match=r"unknown approach 'rows'; choose one of auto, 2, atomic, 1, ordered, blocks"):
        reduction("rows")
    with pytest.raises(OptionError, match="unknown approach"):
        assemble(_space(), builtin_problem("poisson", 2), approach="rows")
    with pytest.raises(ValueError, match="already registered"):
        register(reduction("2"))


def test_a_new_registered_reduction_is_assembled_by_its_name():
    """A strategy registered under a new name (here the row kernels' executors again) is what ``approach``
    selects: the same matrix as approach 2, bit for bit."""
    space, problem = _space(), builtin_problem("change-of-type", 2)
    entry = register(dataclasses.replace(reduction("2"), name="rows-again", summary="a copy, for this test"))
    try:
        got = assemble(space, problem, approach="rows-again")
    finally:
        del REDUCTIONS[entry.name]
    ref = assemble(space, problem, approach="2")
    assert got.info["approach"] == "rows-again"
    assert np.array_equal(got.matrix.data, ref.matrix.data) and np.array_equal(got.rhs, ref.rhs)
    assert "rows-again" not in REDUCTIONS


def test_the_plan_arguments_are_the_plans_arrays():
    """The kernels' structures (made once per assembly) hold the plan's own arrays, in the working precision,
    every index array int64 (a field's type is part of the compiled signature)."""
    seen = []

    class Capture(RowPasses):
        def __init__(self, ctx):
            super().__init__(ctx)
            seen.append(ctx)

    space = _space()
    entry = register(dataclasses.replace(reduction("2"), name="capture", cpu=Capture))
    try:
        assemble(space, builtin_problem("poisson", 2), approach="capture", precision="single")
    finally:
        del REDUCTIONS[entry.name]
    (ctx,) = seen
    plan, args = ctx.plan, ctx.args
    pattern = plan.pattern
    for field in ("row_base", "row_width", "row_start", "adj_offsets", "adj_col", "block_start", "diag_entry"):
        assert getattr(args.pattern, field) is getattr(pattern, field), field
    assert args.pattern.adj_interface is plan.adj_interface
    assert args.basis.lo is plan.lo and args.basis.table is plan.table and args.basis.rec is plan.rec
    assert args.basis.nbasis is pattern.element_dofs and args.basis.degree is space.degree
    assert args.faces.normal is plan.normal and args.faces.sigma is plan.sigma
    assert args.faces.sigma.dtype == np.float32 and args.basis.lo.dtype == np.float32
    assert args.faces.face_local is ctx.face_local and (ctx.face_local == -1).all()  # reset after each chunk
    assert ctx.values.data is ctx.data and ctx.values.rhs is ctx.rhs
    for group in args:
        for name, a in group._asdict().items():
            assert a.dtype in (np.int64, np.float32), name


def test_the_ordered_sums_scratch_is_made_room_for_in_the_chunks_and_the_estimate():
    """On a GPU the ordered reduction holds one or two blocks per entity of a chunk besides the points: its
    entry's ``scratch`` is counted in the chunking (more, smaller chunks for one budget) and in the memory
    estimate; nothing is counted for the reductions without it, nor on the CPU (the row kernels there)."""
    from polydg.assembly.memory import assembly_estimate
    from polydg.assembly.plan import element_chunks, face_rule_degrees, scratch_bytes
    from polydg.quadrature import default_degree

    gpu = AssemblyOptions(approach="ordered", backend="cupy", memory_budget_mb=0.05)
    assert scratch_bytes(gpu, 10) == ((100 + 10) * 8, 2 * 2 * 100 * 8)
    assert scratch_bytes(dataclasses.replace(gpu, precision="single"), 10) == ((100 + 10) * 4, 2 * 2 * 100 * 4)
    for other in (dataclasses.replace(gpu, approach="2"), dataclasses.replace(gpu, approach="atomic"),
                  AssemblyOptions(approach="ordered")):
        assert scratch_bytes(other, 10) == (0, 0)
    space = DGSpace(agglomerate(unit_square(12), 30), 3)
    mesh, nb = space.mesh, int(space.element_dofs.max())
    rule = default_degree(space.total_degree, 0)
    faces = face_rule_degrees(space.total_degree, mesh.face_elements, 0)
    everything = np.arange(mesh.n_elements)
    plain = element_chunks(mesh, rule, faces, 0.3, everything)
    roomy = element_chunks(mesh, rule, faces, 0.3, everything, scratch_bytes(gpu, nb))
    assert len(roomy) > len(plain) > 1
    for chunks in (plain, roomy):  # the same elements, in order, once
        assert chunks[0][0] == 0 and chunks[-1][1] == mesh.n_elements
        assert all(a[1] == b[0] for a, b in zip(chunks[:-1], chunks[1:]))
    large = dataclasses.replace(gpu, memory_budget_mb=1024.0)  # the chunk's estimate not cut by the budget
    with_scratch = assembly_estimate(space, large).chunk
    without = assembly_estimate(space, dataclasses.replace(large, approach="2")).chunk
    simplex_scratch, face_scratch = scratch_bytes(large, nb)
    assert with_scratch - without == mesh.n_simplices * simplex_scratch + mesh.n_faces * face_scratch


def test_approach_auto_chooses_the_deterministic_reduction_of_the_mesh_and_device():
    """The default, "auto": the row kernels on the CPU, and on a GPU the row kernels for meshes of few
    sub-simplices per element and small bases, a thread block per element ("blocks") for agglomerated ones and
    for bases of 20 functions or more (the measured choice, choice.py);
    the assembly reports the approach that ran, and plans, chunks and estimates for it."""
    from polydg.assembly.memory import assembly_estimate
    from polydg.assembly.reductions.choice import ROWS_UP_TO, chosen_approach
    from polydg.mesh import build_polytopic_mesh

    assert AssemblyOptions().approach == "auto"
    agglomerated, simplices = _space(), DGSpace(build_polytopic_mesh(unit_square(6)), 1)
    assert agglomerated.mesh.n_simplices > ROWS_UP_TO * agglomerated.mesh.n_elements
    gpu = AssemblyOptions(backend="cupy")  # not resolved: this machine need not have a GPU
    assert gpu.for_space(agglomerated).approach == "blocks" and gpu.for_space(simplices).approach == "2"
    assert gpu.for_space(DGSpace(simplices.mesh, 5)).approach == "blocks"  # 21 functions: 2D p = 5
    assert gpu.for_space(DGSpace(simplices.mesh, 4)).approach == "2"  # 15
    assert AssemblyOptions(backend="numpy").for_space(agglomerated).approach == "2"  # the CPU's
    for name in REDUCTIONS:  # a named approach is kept, wherever it runs
        assert AssemblyOptions(approach=name).for_space(agglomerated).approach == name
        assert chosen_approach(name, agglomerated, "cupy") == name
    with pytest.raises(OptionError, match='approach "auto" is chosen for a space'):
        AssemblyOptions().reduction
    # the estimate of a GPU assembly counts the scratch of the reduction "auto" runs there (blocks: none)
    assert assembly_estimate(agglomerated, gpu).chunk == assembly_estimate(
        agglomerated, gpu.replace(approach="blocks")).chunk < assembly_estimate(
        agglomerated, gpu.replace(approach="ordered")).chunk
    result = assemble(agglomerated, builtin_problem("poisson", 2), backend="numpy")
    assert result.info["approach"] == "2" and result.info["options"]["approach"] == "auto"
    rows = assemble(agglomerated, builtin_problem("poisson", 2), approach="2", backend="numpy")
    assert np.array_equal(result.matrix.data, rows.matrix.data)
