"""The command line's matrices and loads are bit for bit those stored before the redesign (#29).

Four runs (the default, a 3D run with mixed degrees, a space-time march's last slab, the 3D run gathered
from 2 ranks) are digested by ``matrix_digests.py``; the stored digests are kept per kind of CPU
in ``data/matrix_digests.json`` (the kernels' sums are reassociated for the host's vector instructions): on a
CPU with digests of its own every bit is compared; on another, the sizes and sums against each stored CPU's,
and the bits are skipped with the command that stores them.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import matrix_digests  # noqa: E402

STORED = matrix_digests.stored()


@pytest.mark.parametrize("name", list(matrix_digests.CASES))
def test_matrix_is_bitwise_the_stored_one(name, tmp_path):
    if matrix_digests.CASES[name][1] > 1 and (shutil.which("mpiexec") is None
                                              or pytest.importorskip("mpi4py") is None):
        pytest.skip("mpiexec not found")
    got = matrix_digests.run_case(name, tmp_path)
    cpu = matrix_digests.host_cpu()
    for entry in STORED.values():
        want = entry["cases"][name]
        assert (got["shape"], got["nnz"]) == (want["shape"], want["nnz"])
        # the sums first, so that a failure says whether the values moved by round-off or by more
        assert got["abs_sum"] == pytest.approx(want["abs_sum"], rel=1e-12)
        assert got["rhs_abs_sum"] == pytest.approx(want["rhs_abs_sum"], rel=1e-12)
    if cpu in STORED:
        assert got["sha256"] == STORED[cpu]["cases"][name]["sha256"]
    elif all(got["sha256"] != entry["cases"][name]["sha256"] for entry in STORED.values()):
        pytest.skip(f"no stored digests for CPU {cpu!r} (sizes and sums checked): `python tests/matrix_digests.py "
                    f"--write` at a commit known to be right stores them")
