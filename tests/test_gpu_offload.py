"""The GPU backend's logic that needs no GPU: device choice per MPI rank, coefficients on the device's arrays,
solves on the device (issue #21 items 2, 5, 6).

What a GPU would run is run here on :mod:`array_standin`'s stand-in array type
(NumPy in disguise, with CuPy's namespace behaviour: mixing it with host
arrays raises) or on NumPy / SciPy through the same code paths; the CuPy-only
parts have tests that are skipped, with the reason, where no GPU is present.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

from polydg import backend as bk
from polydg.assembly.coefficients import Coefficients, DeviceCoefficients, HostCoefficientWarning
from polydg.errors import OptionError
from polydg.problem import Problem, builtin_problem

from .array_standin import STANDIN, DeviceStandIn, to_standin

REPO = Path(__file__).resolve().parents[1]
NO_GPU = bk.gpu_unavailable_reason()
needs_gpu = pytest.mark.skipif(NO_GPU is not None, reason=f"no GPU: {NO_GPU}")


# ---------------------------------------------------------------------------
# item 6: one GPU per rank


@pytest.mark.parametrize("local_rank, n_devices, expected", [(0, 1, 0), (3, 1, 0), (0, 4, 0), (3, 4, 3), (5, 4, 1),
                                                             (7, 8, 7), (9, 8, 1), (2, 3, 2), (4, 3, 1)])
def test_rank_r_uses_gpu_r_mod_the_gpus_of_its_node(local_rank, n_devices, expected):
    assert bk.device_for_rank(local_rank, n_devices) == expected


def test_device_choice_refuses_a_node_without_gpus():
    with pytest.raises(OptionError, match="no CUDA device"):
        bk.device_for_rank(0, 0)
    with pytest.raises(ValueError):
        bk.device_for_rank(-1, 2)


def test_bind_rank_device_on_one_rank():
    mpi = pytest.importorskip("mpi4py.MPI")
    from polydg.distributed import comm as dc

    cpu = dc.bind_rank_device(mpi.COMM_SELF, "numpy")
    assert cpu == {"device_index": -1, "device": "cpu", "node_rank": 0, "node_ranks": 1, "device_ranks": 1}
    assert dc.node_local_rank(mpi.COMM_SELF) == (0, 1)
    assert bk.device_count("numpy") == 0 and bk.device_count("cudasim") == 1
    sim = dc.bind_rank_device(mpi.COMM_SELF, "cudasim")  # the simulator: one device, nothing to select
    assert sim["device_index"] == 0 and sim["device"] == "CPU simulator" and sim["device_ranks"] == 1


def test_summary_json_names_the_device_backends_versions(monkeypatch):
    """A device backend's assembly carries its versions in ``info`` (CuPy, numba-cuda, CUDA; issue #27 item 5)
    and summary.json lists them beside polydg's own; the CPU's carries none."""
    from polydg.assembly import assemble
    from polydg.mesh import unit_square
    from polydg.partition import agglomerate
    from polydg.report import summary_dict
    from polydg.space import DGSpace

    assert bk.backend_versions("numpy") == {}
    sim = bk.backend_versions("cudasim")  # read from the installed distributions: nothing is imported
    assert sim == {"numba_cuda": sim["numba_cuda"], "cuda": "simulator"} and sim["numba_cuda"][0].isdigit()
    space = DGSpace(agglomerate(unit_square(4), 5), 1)
    result = assemble(space, builtin_problem("poisson", 2), backend="numpy")
    assert result.info["versions"] == {} and result.info["device"] == "cpu"
    device = {"numba_cuda": "0.30.4", "cupy": "14.2.0", "cuda_runtime": "13.0", "cuda_driver": "13.0",
              "compute_capability": "9.0"}
    monkeypatch.setitem(result.info, "versions", device)
    monkeypatch.setitem(result.info, "device", "NVIDIA H100 80GB HBM3")
    written = summary_dict(mesh=space.mesh, space=space, result=result, options={}, timings=result.info["timings"])
    assert written["device"] == "NVIDIA H100 80GB HBM3"
    assert {k: written["versions"][k] for k in device} == device and "polydg" in written["versions"]


@needs_gpu
def test_cupy_assembly_names_its_versions():
    from polydg.assembly import assemble
    from polydg.mesh import unit_square
    from polydg.partition import agglomerate
    from polydg.space import DGSpace

    space = DGSpace(agglomerate(unit_square(4), 5), 1)
    info = assemble(space, builtin_problem("poisson", 2), backend="cupy").info
    assert {"cupy", "numba_cuda", "cuda_runtime", "cuda_driver", "compute_capability"} <= set(info["versions"])
    assert info["device"] == bk.device_name("cupy")


def test_the_report_names_each_ranks_device():
    from polydg.report import format_table

    summary = {"dofs": 10, "timings": {k: 0.0 for k in ("element_kernel", "interior_kernel", "boundary_kernel",
                                                          "inflow_kernel", "total_kernels", "indices", "penalty",
                                                          "total_assembly", "partition", "distribute", "jit",
                                                          "quadrature_points", "coefficients", "values")},
               "mesh": "m", "dimension": 2, "elements": 1, "sub_elements": 1, "interior_faces": 0, "interfaces": 0,
               "boundary_faces": 3, "problem": "p", "degree": {"min": 1, "max": 1}, "nnz": 9,
               "precision": "double", "approach": "2", "backend": "cupy", "ranks": 2, "jit_seconds": 0.0,
               "balance": {"kernel_time": 1.0, "work": 1.0, "nnz": 1.0, "elements": 1.0},
               "per_rank": [{"device": "GPU 0: H100"}, {"device": "GPU 1: H100"}]}
    try:
        text = format_table(summary)
    except KeyError as missing:  # a timing row this test does not know: add it
        pytest.fail(f"format_table needs {missing}")
    assert "devices: rank 0 GPU 0: H100; rank 1 GPU 1: H100" in text
    assert "to the device" not in text  # no copies counted: no row
    summary["to_device"] = {"copies": 12, "bytes": 3 * 2**20, "seconds": 0.002}
    assert "to the device" in (row := next(x for x in format_table(summary).splitlines() if "to the device" in x))
    assert "0.0020" in row and "12 copies, 3.0 MiB" in row


# ---------------------------------------------------------------------------
# item 2: coefficients evaluated on the device's arrays


def _callables(problem: Problem):
    for name in ("diffusion", "advection", "reaction", "source", "dirichlet", "exact", "exact_gradient", "initial"):
        if callable(getattr(problem, name)):
            yield name, False
    for name in ("neumann", "is_neumann"):
        if callable(getattr(problem, name)):
            yield name, True


BUILTINS = [("paper-2d", 2), ("paper-3d", 3), ("poisson", 2), ("poisson", 3), ("advection", 3),
            ("change-of-type", 2), ("change-of-type", 3), ("neumann", 2), ("neumann", 3), ("neumann", 4),
            ("paper-2d1", 2), ("polynomial:3:mixed", 3), ("polynomial:2:diffusion", 2)]


@pytest.mark.parametrize("name, d", BUILTINS)
def test_every_builtin_problem_runs_on_a_device_array_namespace(name, d):
    """Each callable of each built-in gives back the stand-in's arrays (it never meets a host array) and the
    NumPy values: bitwise, except paper's compiled source on NumPy against its array formula (1e-14)."""
    problem = builtin_problem(name, d)
    rng = np.random.default_rng(0)
    x = rng.random((40, d + 1 if problem.space_time else d))
    normal = rng.standard_normal(x.shape)
    normal /= np.linalg.norm(normal, axis=1, keepdims=True)
    checked = 0
    for coefficient, with_normal in _callables(problem):
        f = getattr(problem, coefficient)
        xs = x[:, :d] if coefficient == "initial" else x
        args = (xs, normal) if with_normal else (xs,)
        host = f(*args)
        device = f(*(to_standin(a) for a in args))
        assert type(device) is DeviceStandIn, (coefficient, type(device))
        assert bk.array_namespace(device) is STANDIN
        if name.startswith("paper-") and coefficient == "source" and not problem.space_time:
            np.testing.assert_allclose(device.get(), host, rtol=1e-14, atol=1e-14)
        else:
            assert np.array_equal(device.get(), host), coefficient
        checked += 1
    assert checked >= 3


@pytest.mark.parametrize("name, d", [("neumann", 3), ("change-of-type", 2), ("paper-3d", 3), ("advection", 2)])
def test_device_coefficients_equal_the_hosts(name, d):
    """DeviceCoefficients on the stand-in's arrays give the kernels' arrays of Coefficients (on NumPy)."""
    problem = builtin_problem(name, d)
    rng = np.random.default_rng(1)
    x = rng.random((300, d))
    normals = np.zeros_like(x)
    normals[np.arange(len(x)), rng.integers(0, d, len(x))] = rng.choice([-1.0, 1.0], len(x))
    host = Coefficients(problem, d, np.float64, 1)
    for dtype in (np.float64, np.float32):
        host = Coefficients(problem, d, dtype, 1)
        device = DeviceCoefficients(problem, d, dtype, STANDIN)
        for got, ref in ((device.volume(to_standin(x), True), host.volume(x, True)),
                         (device.interior(to_standin(x)), host.interior(x)),
                         (device.boundary(to_standin(x), to_standin(normals)), host.boundary(x, normals))):
            for g, r in zip(got, ref):
                assert type(g) is DeviceStandIn and g.dtype == r.dtype and g.shape == r.shape
                if name.startswith("paper") and g.shape[0] == len(x) and g.ndim == 1:  # the compiled source
                    tol = 2e-7 if dtype == np.float32 else 1e-14  # of the largest value: cancellation near 0
                    np.testing.assert_allclose(g.get(), r, rtol=tol, atol=tol * float(np.abs(r).max()))
                else:
                    assert np.array_equal(g.get(), r)
    assert not any(device.on_host.values())


def _reaction(x):  # written against the points' namespace: runs on the device
    xp = bk.array_namespace(x)
    return 1.0 + xp.cos(x[:, 0])


def _user_problem(d: int, diffusion, source) -> Problem:
    return Problem(name=f"user-{id(diffusion)}", diffusion=diffusion, advection=np.ones(d), reaction=_reaction,
                   source=source, dirichlet=lambda x: x[:, 0] * 0.0 + 1.0, dim=d)


def test_numpy_only_callables_are_detected_and_evaluated_on_the_host_once_said():
    """A callable returning a NumPy array, or raising on the device's arrays, runs on the host: same values, one
    warning per callable (not per chunk), and the device-ready callables stay on the device."""
    d = 2

    def diffusion_numpy_only(x):  # np.empty is host memory: the device's values would come back as NumPy
        out = np.empty((len(x), d, d))
        out[:] = np.eye(d)
        out[:, 0, 0] += np.asarray(x)[:, 0] ** 2
        return out

    def source_raises(x):  # mixing with a host array: CuPy (and the stand-in) raise TypeError
        return np.sin(x[:, 0]) + np.linspace(0.0, 1.0, len(x))

    problem = _user_problem(d, diffusion_numpy_only, source_raises)
    x = np.random.default_rng(2).random((50, d))
    ref = Coefficients(problem, d, np.float64, 1).volume(x, True)
    device = DeviceCoefficients(problem, d, np.float64, STANDIN)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):  # three chunks
            got = device.volume(to_standin(x), True)
        again = DeviceCoefficients(problem, d, np.float64, STANDIN).volume(to_standin(x), True)  # a new assembly
    said = [w for w in caught if issubclass(w.category, HostCoefficientWarning)]
    assert len(said) == 2, [str(w.message) for w in said]
    assert "diffusion returned a numpy.ndarray" in str(said[0].message)
    assert "source raised TypeError" in str(said[1].message)
    assert device.on_host == {"diffusion": True, "reaction": False, "source": True}  # constants: no question
    for g, a, r in zip(got, again, ref):
        assert type(g) is DeviceStandIn and np.array_equal(g.get(), r) and np.array_equal(a.get(), r)


def test_a_callable_that_fails_everywhere_still_names_the_problem():
    from polydg.errors import ProblemError

    problem = _user_problem(2, 1.0, lambda x: 1 / 0)
    with pytest.warns(HostCoefficientWarning), pytest.raises(ProblemError, match="source raised ZeroDivisionError"):
        DeviceCoefficients(problem, 2, np.float64, STANDIN).volume(to_standin(np.zeros((3, 2))), True)


def test_on_numpy_nothing_is_probed():
    calls = []

    def source(x):
        calls.append(len(x))
        return np.ones(len(x))

    problem = _user_problem(2, 1.0, source)
    DeviceCoefficients(problem, 2, np.float64, np).volume(np.zeros((7, 2)), True)
    assert calls == [7]  # the points themselves, no probe


@needs_gpu
@pytest.mark.parametrize("name, d", BUILTINS)
def test_builtin_problems_on_cupy(name, d):
    import cupy

    problem = builtin_problem(name, d)
    x = np.random.default_rng(0).random((64, d + 1 if problem.space_time else d))
    for coefficient, with_normal in _callables(problem):
        if coefficient == "initial" or with_normal:
            continue
        got = getattr(problem, coefficient)(cupy.asarray(x))
        assert isinstance(got, cupy.ndarray)
        np.testing.assert_allclose(got.get(), getattr(problem, coefficient)(x), rtol=1e-13, atol=1e-13)


# ---------------------------------------------------------------------------
# item 5: solves where the matrix is


def _system(symmetric: bool):
    from polydg.assembly import assemble
    from polydg.mesh import unit_square
    from polydg.partition import agglomerate
    from polydg.space import DGSpace

    space = DGSpace(agglomerate(unit_square(6), 12), 1)
    result = assemble(space, builtin_problem("poisson" if symmetric else "advection", 2), backend="numpy")
    return space, result


def _solvers_of(library: str):
    """(xp, sparse_linalg, matrix maker) of "scipy" or "cupy" (a device CSR with the int32 indices of the
    GPU assembly's matrices)."""
    if library == "scipy":
        import scipy.sparse.linalg as spla

        return np, spla, lambda A: A
    import cupy
    import cupyx.scipy.sparse as csp
    import cupyx.scipy.sparse.linalg as cspla

    return cupy, cspla, lambda A: csp.csr_matrix((cupy.asarray(A.data), cupy.asarray(A.indices, dtype=np.int32),
                                                  cupy.asarray(A.indptr, dtype=np.int32)), shape=A.shape)


LIBRARIES = ["scipy", pytest.param("cupy", marks=needs_gpu)]


@pytest.mark.parametrize("symmetric, method, solver", [(True, "iterative", "cg+jacobi"),
                                                       (False, "iterative", "gmres(50)+jacobi"),
                                                       (True, "direct", "spsolve"), (False, "direct", "spsolve")])
def test_device_solve_logic_on_scipy(symmetric, method, solver):
    """The device's solve, run with NumPy and SciPy's sparse solvers in place of CuPy's: CG for symmetric
    systems, GMRES otherwise, spsolve for the direct method; the host's solution to the tolerance."""
    import scipy.sparse.linalg as spla

    from polydg.solve import solve, solve_on_device

    space, result = _system(symmetric)
    x, info = solve_on_device(result.matrix.astype(np.float32), result.rhs, method, xp=np, sparse_linalg=spla,
                              tol=1e-12)
    ref, _ = solve(result.matrix, result.rhs, "direct")
    assert info["solver"] == solver and info["device"] is True
    assert method == "direct" or info["symmetric"] is symmetric  # detected, not given
    assert info["residual"] < 1e-5  # float32 matrix entries, solved in float64
    exact, _ = solve_on_device(result.matrix, result.rhs, method, xp=np, sparse_linalg=spla, tol=1e-12)
    assert np.linalg.norm(exact - ref) <= 1e-8 * np.linalg.norm(ref)


@pytest.mark.parametrize("library", LIBRARIES)
def test_block_jacobi_on_inverts_each_element_block(library):
    """block_jacobi_on (the device solves' preconditioner) applies the inverse of every element's diagonal
    block, mixed block sizes included; None for sizes that do not cover the rows or a singular block (which
    CuPy's batched inverse reports only when asked to)."""
    from polydg.assembly import assemble
    from polydg.mesh import unit_square
    from polydg.partition import agglomerate
    from polydg.solve import block_jacobi_on
    from polydg.space import DGSpace

    xp, _, on = _solvers_of(library)
    mesh = agglomerate(unit_square(6), 12)
    space = DGSpace(mesh, np.where(np.arange(mesh.n_elements) % 3 == 0, 2, 1))  # blocks of 6 and 3 dofs
    A = assemble(space, builtin_problem("advection", 2), backend="numpy").matrix
    r = np.random.default_rng(0).standard_normal(space.n_dofs)
    got = bk.to_host(block_jacobi_on(xp, on(A), space.element_dofs)(xp.asarray(r)))
    dense = A.toarray()
    for lo, hi in zip(space.dof_offsets[:-1], space.dof_offsets[1:]):
        np.testing.assert_allclose(got[lo:hi], np.linalg.solve(dense[lo:hi, lo:hi], r[lo:hi]), rtol=1e-12,
                                   atol=1e-12 * np.abs(got).max())
    assert block_jacobi_on(xp, on(A), space.element_dofs[1:]) is None
    singular = A.copy()
    singular.data[:] = 1.0  # every block all ones: rank one
    assert block_jacobi_on(xp, on(singular), space.element_dofs) is None


@pytest.mark.parametrize("library", LIBRARIES)
@pytest.mark.parametrize("symmetric", [True, False])
def test_device_solve_with_element_blocks_uses_block_jacobi(symmetric, library):
    """CG or GMRES with block-Jacobi on the element blocks, on SciPy and on CuPy (whose GMRES counts maxiter
    in inner iterations and calls back once per restart: the iterations reported are inner ones on both)."""
    from polydg.solve import solve, solve_on_device

    xp, linalg, on = _solvers_of(library)
    space, result = _system(symmetric)
    ref, _ = solve(result.matrix, result.rhs, "direct")
    A, b = on(result.matrix), xp.asarray(result.rhs)
    x, info = solve_on_device(A, b, "iterative", xp=xp, sparse_linalg=linalg, tol=1e-12,
                              block_sizes=space.element_dofs)
    _, jacobi = solve_on_device(A, b, "iterative", xp=xp, sparse_linalg=linalg, tol=1e-12)
    assert info["solver"] == ("cg" if symmetric else "gmres(50)") + "+block-jacobi"
    assert np.linalg.norm(bk.to_host(x) - ref) <= 1e-8 * np.linalg.norm(ref)
    assert 0 < info["iterations"] <= jacobi["iterations"]


def test_solve_dispatches_a_device_matrix_to_the_device_solve(monkeypatch):
    """solve() hands a matrix that device_sparse_modules recognises to solve_on_device (here: SciPy standing
    in for cupyx), and keeps host matrices on the host path."""
    import scipy.sparse.linalg as spla

    from polydg import solve as solve_module

    space, result = _system(True)
    _, host_info = solve_module.solve(result.matrix, result.rhs, "iterative", space=space)
    assert "device" not in host_info
    monkeypatch.setattr(bk, "device_sparse_modules", lambda m: (np, spla))
    x, info = solve_module.solve(result.matrix, result.rhs, "iterative", space=space)
    assert info["device"] is True and info["solver"] == "cg+block-jacobi"  # the space's element blocks
    with pytest.raises(solve_module.SolverError, match="did not converge"):
        solve_module.solve(result.matrix, result.rhs, "iterative", maxiter=2)


def test_device_sparse_modules_leaves_host_matrices_alone():
    import scipy.sparse as sp

    assert bk.device_sparse_modules(sp.eye(3, format="csr")) is None


@needs_gpu
@pytest.mark.parametrize("problem, method", [("poisson", "iterative"), ("advection", "iterative"),
                                             ("poisson", "direct")])
def test_cupy_solve_matches_the_host(problem, method):
    from polydg.assembly import assemble
    from polydg.mesh import unit_square
    from polydg.partition import agglomerate
    from polydg.solve import solve
    from polydg.space import DGSpace

    space = DGSpace(agglomerate(unit_square(6), 12), 1)
    gpu = assemble(space, builtin_problem(problem, 2), backend="cupy")
    x, info = solve(gpu.matrix, gpu.rhs, method, tol=1e-12)
    host = assemble(space, builtin_problem(problem, 2), backend="numpy")
    ref, _ = solve(host.matrix, host.rhs, "direct")
    assert info["device"] is True and bk.array_namespace(x) is not np
    assert np.linalg.norm(bk.to_host(x) - ref) <= 1e-8 * np.linalg.norm(ref)


@needs_gpu
def test_command_line_solves_on_the_device(tmp_path, capsys):
    from polydg.assemble import main

    assert main(["--mesh", "square:4", "--degree", "1", "--backend", "cupy", "--solve", "iterative",
                 "--problem", "poisson", "--output", str(tmp_path / "out")]) == 0
    assert "on the device" in capsys.readouterr().err
    assert (tmp_path / "out" / "solution.npy").exists()


def test_command_line_accepts_to_host_and_solves_on_the_host_without_a_gpu(tmp_path, capsys):
    from polydg.assemble import main

    assert main(["--mesh", "square:2", "--degree", "1", "--problem", "poisson", "--to-host", "--solve",
                 "--output", str(tmp_path / "out")]) == 0
    err = capsys.readouterr().err
    assert "solved (splu)" in err and "on the device" not in err
    assert (tmp_path / "out" / "matrix.npz").exists()
