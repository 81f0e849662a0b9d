"""launch/bench_peers.py: polydg and scikit-fem solve the same SIPG / upwind system (round-off agreement)."""

import importlib.util
import sys
from pathlib import Path

import pytest

pytest.importorskip("skfem", reason="scikit-fem is not installed (pip install -e '.[bench]')")

SCRIPT = Path(__file__).resolve().parents[1] / "launch" / "bench_peers.py"


def _load():
    # imported, not run: the script sets one thread only when run as __main__
    if "bench_peers" not in sys.modules:
        spec = importlib.util.spec_from_file_location("bench_peers", SCRIPT)
        module = importlib.util.module_from_spec(spec)
        sys.modules["bench_peers"] = module  # its dataclass looks its module up there
        spec.loader.exec_module(module)
    return sys.modules["bench_peers"]


@pytest.mark.parametrize("problem", ["diffusion", "advection-diffusion"])
@pytest.mark.parametrize("d, n, p", [(2, 3, 1), (2, 3, 3), (3, 2, 2)])
def test_polydg_and_scikit_fem_solutions_agree_to_round_off(problem, d, n, p):
    # u of degree p + 1: every integral of both systems is exact, so the discrete solutions coincide
    bench = _load()
    r = bench.compare(d, n, p, problem, "polynomial")
    assert r["dofs_polydg"] == r["dofs_skfem"] == (2 * n**2 if d == 2 else 6 * n**3) * (
        (p + 1) * (p + 2) // 2 if d == 2 else (p + 1) * (p + 2) * (p + 3) // 6)
    assert r["err_polydg"] > 1e-6  # u is not in the space: a real comparison, not two exact solutions
    assert r["diff"] <= 1e-11 * r["norm"]
    assert r["err_skfem"] == pytest.approx(r["err_polydg"], rel=1e-9)


def test_smooth_solution_errors_match():
    # non-polynomial data: the quadrature rules differ, the errors do not (p = 1 on square:8)
    bench = _load()
    r = bench.compare(2, 8, 1, "advection-diffusion", "smooth")
    assert r["err_skfem"] == pytest.approx(r["err_polydg"], rel=1e-3)
    assert r["diff"] < 1e-3 * r["err_polydg"]
