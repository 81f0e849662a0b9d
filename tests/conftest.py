import os
from pathlib import Path

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")

SHARED_MESHES = Path(__file__).resolve().parents[2] / "shared" / "meshes"


@pytest.fixture(scope="session")
def shared_meshes() -> Path:
    if not SHARED_MESHES.is_dir():
        pytest.skip(f"shared meshes not found at {SHARED_MESHES}")
    return SHARED_MESHES


# ---------------------------------------------------------------------------
# the backend switch: POLYDG_TEST_BACKEND=cupy runs the assembly tests on the GPU (DESIGN.md section 8)

#: the backend that ``assemble`` uses in these tests where a test names none: numpy (default), cupy (a GPU),
#: or cudasim (numba-cuda's simulator, with NUMBA_ENABLE_CUDASIM=1; slow: for a few tests at a time)
TEST_BACKEND = os.environ.get("POLYDG_TEST_BACKEND", "numpy")


def _assemble_on_test_backend(original):
    """``assemble`` with ``backend=TEST_BACKEND`` and ``to_host=True`` where the caller names no backend.

    Approach 1 (COO, the CPU baseline) stays on the CPU: the GPU executor has the two other reductions.
    """
    import functools

    @functools.wraps(original)
    def assemble(*args, **kwargs):
        if "backend" not in kwargs and str(kwargs.get("approach", "2")) != "1":
            kwargs["backend"] = TEST_BACKEND
            kwargs.setdefault("to_host", True)  # the tests read SciPy matrices and NumPy vectors
        return original(*args, **kwargs)

    return assemble


def pytest_collection_finish(session):
    """Every module that holds polydg's ``assemble`` (tests, the CLI, the space-time march) gets the switched one."""
    if TEST_BACKEND == "numpy":
        return
    import sys

    from polydg.assembly import assembler
    from polydg.backend import resolve_backend
    from polydg.errors import OptionError

    try:
        resolve_backend(TEST_BACKEND)
    except OptionError as exc:  # a backend that cannot run here stops the session, with its one-line reason
        pytest.exit(f"POLYDG_TEST_BACKEND={TEST_BACKEND}: {exc}", returncode=2)
    original = assembler.assemble
    switched = _assemble_on_test_backend(original)
    for module in list(sys.modules.values()):
        if getattr(module, "assemble", None) is original:
            module.assemble = switched


def pytest_report_header(config):
    return f"polydg test backend: {TEST_BACKEND} (POLYDG_TEST_BACKEND)"
