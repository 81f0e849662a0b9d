"""The GPU executor's test cases, run under numba-cuda's simulator in a subprocess of ``test_gpu_assembly.py``.

``NUMBA_ENABLE_CUDASIM=1`` must be set before ``numba.cuda`` is first
imported, so the simulator cannot run inside the pytest process that runs
the CPU tests.  ``python tests/gpu_simulator_cases.py OUT.npz`` (with that
variable set) assembles every case of :data:`CASES` in each of its
:data:`VARIANTS` with the GPU kernels on NumPy arrays (backend ``"cudasim"``)
and saves the CSR values and load vectors; the test compares them with the
CPU's, computed in its own process from the same :func:`case_setup`.

Tiny meshes on purpose: the simulator runs one Python thread per GPU thread.
"""

from __future__ import annotations

import dataclasses
import sys
import time

import numpy as np

from polydg.assembly.scope import AssemblyScope
from polydg.mesh import from_spec
from polydg.partition import agglomerate
from polydg.problem import Problem, builtin_problem
from polydg.space import DGSpace

#: name -> (mesh spec, elements after agglomeration, degree range, problem name)
CASES = {
    "2d-all-kinds": ("square:2", 3, (1, 3), "all-kinds"),
    "2d-change-of-type": ("square:2", 3, (1, 3), "change-of-type"),
    "2d-advection": ("square:2", 3, (1, 2), "advection"),
    "3d-all-kinds": ("cube:1", 3, (1, 2), "all-kinds"),
    "3d-change-of-type": ("cube:1", 3, (1, 2), "change-of-type"),
}

#: variant -> assemble() keywords (options, and a scope); "rows-again" repeats "rows" (bitwise repeatability)
VARIANTS = {
    "rows": {"approach": "2"},
    "rows-again": {"approach": "2"},
    "atomic": {"approach": "atomic"},
    "rows-single": {"approach": "2", "precision": "single"},
    "atomic-single": {"approach": "atomic", "precision": "single"},
    "ordered": {"approach": "ordered"},
}

#: extra variants: several chunks, the rows of a range of elements, and of a set with a gap
EXTRA = {
    "2d-all-kinds": {
        "rows-chunked": {"approach": "2", "memory_budget_mb": 0.002},
        "atomic-chunked": {"approach": "atomic", "memory_budget_mb": 0.002},
        "rows-range": {"approach": "2", "scope": AssemblyScope(elements=np.arange(1, 3))},
        # a gap in the element set (an MPI rank's owned elements in its sub-mesh): element 1's rows are skipped
        "rows-gap": {"approach": "2", "scope": AssemblyScope(elements=np.array([0, 2]))},
        "atomic-gap": {"approach": "atomic", "scope": AssemblyScope(elements=np.array([0, 2]))},
        "ordered-chunked": {"approach": "ordered", "memory_budget_mb": 0.002},
        "ordered-gap": {"approach": "ordered", "scope": AssemblyScope(elements=np.array([0, 2]))},
        "blocks": {"approach": "blocks"},
        "blocks-chunked": {"approach": "blocks", "memory_budget_mb": 0.002},
        # faces of 9 points and more: several of the simulator's tiles (8 points) on one face
        "rows-extra": {"approach": "2", "quadrature_extra": 9},
        "blocks-extra": {"approach": "blocks", "quadrature_extra": 9},
        "blocks-gap": {"approach": "blocks", "scope": AssemblyScope(elements=np.array([0, 2]))},
    },
    "2d-change-of-type": {"blocks": {"approach": "blocks"}},  # faces where n.A n <= 0: nothing added
    "3d-all-kinds": {
        "rows-gap": {"approach": "2", "scope": AssemblyScope(elements=np.array([0, 2]))},
        "atomic-gap": {"approach": "atomic", "scope": AssemblyScope(elements=np.array([0, 2]))},
        "ordered-single": {"approach": "ordered", "precision": "single"},
        "blocks": {"approach": "blocks"},
        "blocks-single": {"approach": "blocks", "precision": "single"},
    },
}


#: the sparsity pattern built on the device: name -> (mesh spec, elements, assembled rows or None, rank columns)
PATTERN_CASES = {
    "2d-mixed": ("square:3", 6, None, False),
    "2d-rows-gap": ("square:3", 6, np.array([0, 2, 3, 5]), False),
    "3d-mixed": ("cube:1", 4, None, False),
    "3d-rank-columns": ("cube:1", 4, np.array([1, 2]), True),
}
PATTERN_FIELDS = ("indptr", "indices", "row_base", "row_width", "adj_offsets", "adj_col", "block_start", "diag_entry",
                  "interface_entry", "row_start", "elements", "element_dofs")


def pattern_setup(name: str):
    """(mesh, dof_offsets, elements, column_numbering) of pattern case ``name``: mixed degrees; with rank
    columns, the elements' columns numbered in a shuffled order (as an MPI rank numbering lays them out)."""
    spec, n_el, elements, rank_columns = PATTERN_CASES[name]
    mesh = agglomerate(from_spec(spec), n_el)
    rng = np.random.default_rng(3)
    dofs = DGSpace(mesh, rng.integers(1, 3, mesh.n_elements)).dof_offsets
    columns = None
    if rank_columns:
        label = rng.permutation(mesh.n_elements)
        order = np.argsort(label)
        width = np.diff(dofs)[order]
        first = np.empty(mesh.n_elements, dtype=np.int64)
        first[order] = np.cumsum(width) - width
        columns = (label, first, int(dofs[-1]))
    return mesh, dofs, elements, columns


#: space-time on the device: name -> march options (a tiny 2D + 1 march); "slab-pq" is one PQ slab's assembly
MARCH_CASES = {
    # constant coefficients: the slab matrix comes back, factorised once (splu) and reused
    "p1-direct": {"problem": "paper-2d1", "degree": 1, "space_time_basis": "P", "method": "direct"},
    # a reaction that depends on t: a new matrix per slab (spsolve); PQ, mixed degrees, local steps
    "pq-mixed-local-steps": {"problem": "reaction-in-t", "degree": "mixed", "space_time_basis": "PQ",
                             "method": "direct", "local_steps": 2},
    # the row kernels named: "auto" runs "blocks" on these slabs (8 sub-simplices per element)
    "p1-iterative": {"problem": "paper-2d1", "degree": 1, "space_time_basis": "P", "method": "iterative",
                     "approach": "2"},
}


def march_setup(name: str):
    """(spatial mesh, problem, degree, march options) of march case ``name``: 3 slabs of (0, 0.3)."""
    from polydg.problem import builtin_problem

    options = dict(MARCH_CASES[name])
    mesh = agglomerate(from_spec("square:2"), 3)
    problem = builtin_problem("paper-2d1", 2)
    if options.pop("problem") == "reaction-in-t":  # c = 1 + t (written against the points' namespace)
        problem = dataclasses.replace(problem, name="paper-2d1-reaction-in-t", reaction=lambda y: 1.0 + y[:, 2])
    degree = options.pop("degree")
    if degree == "mixed":
        degree = np.array([0, 1, 0])
    return mesh, problem, degree, dict(options, n_slabs=3, final_time=0.3)


def slab_pq_setup():
    """One PQ slab of mixed degrees over (0.1, 0.3), its slab problem: the PQ_p kernels' case."""
    from polydg.problem import builtin_problem
    from polydg.spacetime import slab_mesh, slab_problem

    mesh = agglomerate(from_spec("square:2"), 3)
    space = DGSpace(slab_mesh(mesh, 0.1, 0.3), np.array([1, 0, 1]), "PQ")
    return space, slab_problem(builtin_problem("paper-2d1", 2), 2, 0.1, 0.3)


def all_kinds_problem(d: int) -> Problem:
    """Every face kind in one problem: pointwise A (SPD, anisotropic), b, c, f; Dirichlet, Neumann, inflow, outflow.

    b = (1, -1/2, ...) + x/4: x_0 = 0 is inflow and Neumann (the inflow terms
    are skipped there), x_1 = 1 inflow and Dirichlet, x_0 = 1 outflow and
    Neumann, the rest Dirichlet, inflow or outflow by the sign of b.n.
    """

    def diffusion(x):
        A = np.zeros((len(x), d, d))
        for k in range(d):
            A[:, k, k] = 1.0 + 0.5 * x[:, k] ** 2
        A[:, 0, 1] = A[:, 1, 0] = 0.2 * x[:, 0]
        return A

    def advection(x):
        return np.array([1.0, -0.5, 0.25][:d]) + 0.25 * x

    return Problem(
        name="all-kinds", diffusion=diffusion, advection=advection,
        reaction=lambda x: 1.0 + x[:, 0] * x[:, 1],
        source=lambda x: np.cos(x.sum(axis=1)),
        dirichlet=lambda x: np.sin(x[:, 0] + 2 * x[:, 1]),
        neumann=lambda x, normal: 1.0 + x[:, 1] * normal[:, 0],
        is_neumann=lambda x, normal: np.abs(normal[:, 0]) > 0.5,
        dim=d,
    )


def case_setup(name: str):
    """The space and problem of case ``name``."""
    spec, n_el, (p_lo, p_hi), problem_name = CASES[name]
    mesh = agglomerate(from_spec(spec), n_el)
    degree = np.random.default_rng(1).integers(p_lo, p_hi + 1, size=mesh.n_elements)
    degree[0], degree[-1] = p_lo, p_hi  # both ends of the range: mixed degrees for certain
    problem = all_kinds_problem(mesh.dim) if problem_name == "all-kinds" else builtin_problem(problem_name, mesh.dim)
    return DGSpace(mesh, degree), problem


def variants(name: str) -> dict[str, dict]:
    return {**VARIANTS, **EXTRA.get(name, {})}


#: the point maps on the device: mesh spec -> elements after agglomeration
POINT_CASES = {"square:3": 5, "cube:2": 5}


def point_setup(spec: str):
    """(mesh, entities) of point case ``spec``: entities name -> (cells, measures of the whole mesh, the listed
    ones: an index array or a range (base, n)); a range of sub-simplices, every other face."""
    mesh = agglomerate(from_spec(spec), POINT_CASES[spec])
    faces = np.arange(1, mesh.n_faces, 2)
    return mesh, {"simplices": (mesh.simplices, mesh.simplex_volume, (2, mesh.n_simplices - 3)),
                  "faces": (mesh.face_vertices, mesh.face_measure, faces)}


def point_degrees(n: int) -> dict[str, object]:
    """One rule degree for all, one per entity (0..5), and one for all in launches of 36 threads (fewer than
    the points)."""
    return {"one": 3, "mixed": np.random.default_rng(0).integers(0, 6, n), "strided": 6}


def _point_maps() -> dict[str, np.ndarray]:
    """Each point case's points made on the device (:func:`polydg.assembly.cuda_points.device_simplex_points`),
    on the stand-in's arrays: array code that mixed in a host array would raise."""
    from array_standin import STANDIN, DeviceStandIn, to_standin  # run as a script: tests/ is on the path

    from polydg.assembly.cuda_kernels import launch, warm
    from polydg.assembly.cuda_points import device_simplex_points

    quiet, unwritten = [], set()

    def launcher(most: int | None):
        """A launch of at most ``most`` threads (each then takes several points), after a compiling launch
        whose writes, if it made any, show: the batch's arrays start as NaN."""
        def run(kernel, name, n, *args):
            x, weight = args[-2], args[-1]
            if id(x) not in unwritten:  # a new batch
                unwritten.add(id(x))
                x[...], weight[...] = np.nan, np.nan
            before = x.copy(), weight.copy()
            warm(kernel, *args)  # a compiling launch: one thread, which must write nothing
            quiet.append(bool(np.array_equal(before[0], x, equal_nan=True)
                              and np.array_equal(before[1], weight, equal_nan=True)))
            launch(kernel, n if most is None else min(n, most), *args)
        return run

    arrays = {}
    for spec in POINT_CASES:
        mesh, entities = point_setup(spec)
        for entity, (cells, measures, listed) in entities.items():
            ranged = isinstance(listed, tuple)
            n = listed[1] if ranged else len(listed)
            # the simulator's launches (64 threads at most), and 36: most of a second block of 32 idle
            for kind, degrees in point_degrees(n).items():
                most = 36 if kind == "strided" else None
                batch = device_simplex_points(STANDIN, launcher(most), to_standin(mesh.points), to_standin(cells),
                                              to_standin(measures), n, degrees, base=listed[0] if ranged else 0,
                                              members=None if ranged else to_standin(listed))
                key = f"points/{spec}/{entity}/{kind}"
                for field in ("x", "weight", "offsets", "device_offsets"):
                    arrays[f"{key}/{field}"] = np.asarray(getattr(batch, field)).view(np.ndarray)
                arrays[f"{key}/on_device"] = np.array(all(type(getattr(batch, f)) is DeviceStandIn
                                                          for f in ("x", "weight", "device_offsets")))
    arrays["points/compiling-launches-wrote-nothing"] = np.array(len(quiet) > 0 and all(quiet))
    return arrays


def main(out: str) -> int:
    from polydg.assembly import assemble

    arrays, start = {}, time.perf_counter()
    for name in CASES:
        space, problem = case_setup(name)
        for variant, options in variants(name).items():
            result = assemble(space, problem, backend="cudasim", **options)
            arrays[f"{name}/{variant}/data"] = result.matrix.data
            arrays[f"{name}/{variant}/indices"] = result.matrix.indices
            arrays[f"{name}/{variant}/rhs"] = result.rhs
            arrays[f"{name}/{variant}/backend"] = np.array(result.info["backend"])
    n_assemblies = len(arrays) // 4
    from array_standin import STANDIN, DeviceStandIn  # run as a script: tests/ is on the path

    from polydg.assembly.device_pattern import device_sparsity_pattern

    for name in PATTERN_CASES:  # on the stand-in's arrays: array code that mixed in a host array would raise
        pattern = device_sparsity_pattern(STANDIN, *pattern_setup(name))
        for field in PATTERN_FIELDS:
            arrays[f"pattern/{name}/{field}"] = getattr(pattern, field).view(np.ndarray)
        arrays[f"pattern/{name}/on_device"] = np.array(all(type(getattr(pattern, f)) is DeviceStandIn
                                                           for f in PATTERN_FIELDS))
    space, problem = slab_pq_setup()
    for approach in ("2", "atomic", "ordered", "blocks"):
        result = assemble(space, problem, backend="cudasim", approach=approach)
        arrays[f"slab-pq/{approach}/data"], arrays[f"slab-pq/{approach}/rhs"] = result.matrix.data, result.rhs
    arrays.update(_point_maps())
    arrays.update(_loads_alone())
    arrays.update(_blocks_too_large())
    arrays.update(_auto_choices())
    arrays.update(_kept_plans())
    arrays.update(_marches())
    np.savez(out, **arrays)
    print(f"GPU-SIMULATOR-CASES {n_assemblies} assemblies in {time.perf_counter() - start:.1f} s")
    return 0


#: the default approach "auto": a case of few sub-simplices per element, and a coarse one (square:4 into 3)
AUTO_CASES = ("2d-all-kinds", "2d-coarse")


def auto_setup(name: str):
    """(space, problem) of auto case ``name``: a case of :data:`CASES`, or 32 triangles in 3 elements."""
    if name != "2d-coarse":
        return case_setup(name)
    mesh = agglomerate(from_spec("square:4"), 3)
    return DGSpace(mesh, np.array([1, 2, 2])), all_kinds_problem(2)


def _auto_choices() -> dict[str, np.ndarray]:
    from polydg.assembly import assemble

    arrays = {}
    for name in AUTO_CASES:
        space, problem = auto_setup(name)
        result = assemble(space, problem, backend="cudasim")  # the default approach: "auto"
        arrays[f"auto/{name}/approach"] = np.array(result.info["approach"])
        arrays[f"auto/{name}/data"], arrays[f"auto/{name}/rhs"] = result.matrix.data, result.rhs
    return arrays


#: the load alone (``matrix=False``) on the device: the cases, and the PQ slab without its bottom face
LOAD_CASES = ("2d-all-kinds", "3d-all-kinds", "slab-pq")


def load_setup(name: str):
    """(space, problem, scope) of load case ``name``: the slab's scope leaves out the bottom face's load (as the
    march does, whose bottom load is the trace) and takes the full assembly's penalty."""
    if name != "slab-pq":
        space, problem = case_setup(name)
        return space, problem, AssemblyScope()
    from polydg.assembly import assemble

    space, problem = slab_pq_setup()
    penalty = assemble(space, problem, backend="numpy").face_penalty
    return space, problem, AssemblyScope(face_penalty=penalty,
                                         load_boundary_faces=space.mesh.face_normal[:, -1] != -1.0)


def _loads_alone() -> dict[str, np.ndarray]:
    from polydg.assembly import assemble

    arrays = {}
    for name in LOAD_CASES:
        space, problem, scope = load_setup(name)
        for approach in ("2", "atomic", "ordered", "blocks"):
            result = assemble(space, problem, backend="cudasim", approach=approach, scope=scope, matrix=False)
            arrays[f"load/{name}/{approach}/rhs"] = result.rhs
            arrays[f"load/{name}/{approach}/matrix"] = np.array(result.matrix is None)
    return arrays


def _blocks_too_large() -> dict[str, np.ndarray]:
    """Approach "blocks" where its kernels do not take the basis (``ENTRIES_FIT`` false, as for more than 127
    functions; set by hand here on the 2D p <= 3 kernels): the ordered sums run, so their matrix comes back."""
    from polydg.assembly import assemble
    from polydg.assembly.cuda_kernels import gpu_kernels

    space, problem = case_setup("2d-all-kinds")
    kernels = gpu_kernels(2, int(space.max_degree), np.float64, "P")
    kernels.ENTRIES_FIT = False
    try:
        result = assemble(space, problem, backend="cudasim", approach="blocks")
    finally:
        kernels.ENTRIES_FIT = True
    return {"blocks-too-large/data": result.matrix.data, "blocks-too-large/rhs": result.rhs}


def _kept_plans() -> dict[str, np.ndarray]:
    """One Assembler on the device: all-kinds, change-of-type, all-kinds again on the space of "2d-all-kinds"
    (that of "2d-change-of-type" too: the same mesh and degrees), its device pattern and tables kept."""
    from polydg.assembly import Assembler

    space, problem = case_setup("2d-all-kinds")
    other = builtin_problem("change-of-type", 2)
    arrays = {}
    for approach in ("2", "atomic", "ordered"):
        kept = Assembler(space, backend="cudasim", approach=approach)
        copies = set()  # the executor's mesh table on the device, once for every assembly
        for k, p in enumerate((problem, other, problem)):
            result = kept.assemble(p)
            arrays[f"kept/{approach}/{k}/data"], arrays[f"kept/{approach}/{k}/rhs"] = result.matrix.data, result.rhs
            arrays[f"kept/{approach}/{k}/made"] = np.array(result.info["plan"]["made"])
            (tables,) = kept._device_tables.values()
            copies.add(id(tables["mesh.element_offsets" if approach == "2" else "mesh.simplex_element"]))
        arrays[f"kept/{approach}/mesh_table_copies"] = np.array(len(copies))
    return arrays


def _marches() -> dict[str, np.ndarray]:
    """Each march case on the simulator's backend, with the types of what its slabs kept on the device."""
    from polydg.spacetime import march
    from polydg.spacetime.slab_state import SlabState

    arrays, kept = {}, set()
    solve, carry = SlabState.solve, SlabState.carry

    def solve_kept(self, matrix, load, *args):
        u, info = solve(self, matrix, load, *args)
        kept.update((type(matrix).__module__.split(".")[0], type(load).__module__, type(u).__module__))
        return u, info

    def carry_kept(self, u):
        carry(self, u)
        kept.add(type(self.trace).__module__)

    SlabState.solve, SlabState.carry = solve_kept, carry_kept
    try:
        for name in MARCH_CASES:
            kept.clear()
            mesh, problem, degree, options = march_setup(name)
            result = march(mesh, problem, degree, backend="cudasim", **options)
            arrays[f"march/{name}/solution"] = result.solution
            arrays[f"march/{name}/errors"] = np.array([result.errors["l2"], result.errors["l2_l2"]])
            arrays[f"march/{name}/solver"] = np.array(result.info["solver"]["solver"])
            arrays[f"march/{name}/factorisations"] = np.array(result.info["factorisations"])
            arrays[f"march/{name}/kept"] = np.array(sorted(kept))
            arrays[f"march/{name}/assembled"] = np.array(result.info["assembled_per_slab"])
    finally:
        SlabState.solve, SlabState.carry = solve, carry
    return arrays


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
