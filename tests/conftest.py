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
