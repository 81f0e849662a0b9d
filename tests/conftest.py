import os
from pathlib import Path

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")
# The hundreds of processes the tests start (ranks, the command line, the GPU run's stages) keep the bytecode
# of the modules they import: where the environment says not to write it, each would compile polydg's
# sources again (0.1 s a process). The files go to __pycache__ folders, which git ignores.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

#: the polygonal meshes of another project, beside the checkout (``POLYDG_SHARED_MESHES`` names another folder:
#: a GPU machine's copy, carried in launch/wheels/meshes by launch/gpu_wheels.sh)
SHARED_MESHES = Path(os.environ.get("POLYDG_SHARED_MESHES") or Path(__file__).resolve().parents[2] / "shared" / "meshes")


@pytest.fixture(scope="session")
def shared_meshes() -> Path:
    if not SHARED_MESHES.is_dir():
        pytest.skip(f"shared meshes not found at {SHARED_MESHES}")
    return SHARED_MESHES


# ---------------------------------------------------------------------------
# the backend switch: POLYDG_TEST_BACKEND=cupy runs the assembly tests on the GPU (docs/design.md §12)

#: the backend of the assemblies in these tests that name none: numpy (default), cupy (a GPU), or cudasim
#: (numba-cuda's simulator, with NUMBA_ENABLE_CUDASIM=1; slow: for a few tests at a time).  Set as the
#: session's default assembly options (polydg.assembly.set_default_options), with to_host: the tests read
#: SciPy matrices and NumPy vectors.  Approach 1 (COO, the CPU baseline) stays on the CPU: the defaults'
#: rule (polydg.assembly.AssemblyOptions).
TEST_BACKEND = os.environ.get("POLYDG_TEST_BACKEND", "numpy")


def pytest_configure(config):
    if TEST_BACKEND == "numpy":
        return
    from polydg.assembly import set_default_options
    from polydg.backend import resolve_backend
    from polydg.errors import OptionError

    try:
        resolve_backend(TEST_BACKEND)
    except OptionError as exc:  # a backend that cannot run here stops the session, with its one-line reason
        pytest.exit(f"POLYDG_TEST_BACKEND={TEST_BACKEND}: {exc}", returncode=2)
    set_default_options(backend=TEST_BACKEND, to_host=True)


def _whole_suite_under_xdist(config) -> bool:
    """Whether this is xdist's controller running every test (no files, -k, -m, --lf, --sw or -x given), in
    two or more workers."""
    sources = getattr(pytest.Config, "ArgsSource", None)  # pytest 7.2 and later
    option = config.option
    return (not hasattr(config, "workerinput") and config.pluginmanager.hasplugin("dsession")
            and sources is not None and getattr(config, "args_source", None) == sources.TESTPATHS
            and (getattr(option, "numprocesses", 0) or 0) >= 2
            and not any(getattr(option, name, None) for name in ("keyword", "markexpr", "lf", "failedfirst",
                                                                 "stepwise", "exitfirst")))


def pytest_sessionstart(session):
    """The whole suite under xdist, before the workers start: compile the suite's shared kernels once, two
    sets at once (tests/kernel_warmup.py), so that the workers load them instead of compiling them side by
    side. Skipped once done for these sources, for a selection of tests, for another backend, or with
    POLYDG_TEST_WARMUP=0. The outcome goes to the workers in POLYDG_TEST_WARMUP_OUTCOME (a test reads it)."""
    config = session.config
    if (not _whole_suite_under_xdist(config) or TEST_BACKEND != "numpy"
            or os.environ.get("POLYDG_TEST_WARMUP", "1") == "0"):
        return
    import json

    from polydg.jit import use_cache_directory

    from .kernel_warmup import SETS, stamp_name, warm_in_parallel

    cache = use_cache_directory()  # also sets NUMBA_CACHE_DIR, which the warm-up and the workers inherit
    stamp = cache / stamp_name()
    if stamp.exists():
        os.environ["POLYDG_TEST_WARMUP_OUTCOME"] = json.dumps("done before")
        return
    outcome = warm_in_parallel(tuple(SETS))
    os.environ["POLYDG_TEST_WARMUP_OUTCOME"] = json.dumps(outcome)
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line("kernels compiled before the workers start: "
                            + ", ".join(f"{name} {value}{' s' if isinstance(value, float) else ''}"
                                        for name, value in outcome.items()))
    if all(isinstance(value, float) for value in outcome.values()):
        try:
            stamp.touch()  # in the cache directory, which use_cache_directory made
        except OSError:
            pass


def pytest_report_header(config):
    return f"polydg test backend: {TEST_BACKEND} (POLYDG_TEST_BACKEND)"
