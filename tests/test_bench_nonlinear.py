"""launch/bench_nonlinear.py: polydg and scikit-fem solve the same nonlinear DG system (round-off agreement)."""

import importlib.util
import sys
from pathlib import Path

import pytest

pytest.importorskip("skfem", reason="scikit-fem is not installed (pip install -e '.[bench]')")

SCRIPT = Path(__file__).resolve().parents[1] / "launch" / "bench_nonlinear.py"


def _load():
    # imported, not run: the script sets one thread only when run as __main__
    if "bench_nonlinear" not in sys.modules:
        spec = importlib.util.spec_from_file_location("bench_nonlinear", SCRIPT)
        module = importlib.util.module_from_spec(spec)
        sys.modules["bench_nonlinear"] = module
        spec.loader.exec_module(module)
    return sys.modules["bench_nonlinear"]


def test_the_benchmark_writes_the_built_in_quasilinear_problem():
    bench = _load()
    assert bench.check_against_builtin(2) < 1e-13
    assert bench.check_against_builtin(3) < 1e-13


@pytest.mark.parametrize("d, n, p", [(2, 3, 2), (3, 1, 1)])
def test_polydg_and_scikit_fem_newton_solutions_agree_to_round_off(d, n, p):
    # the same rules, penalty at the solution and Jacobian in both: the converged solutions coincide
    bench = _load()
    r = bench.compare(d, n, p, with_ngsolve=False)
    assert r["dofs"]["polydg"] == r["dofs"]["scikit-fem"]
    assert r["err"]["polydg"] > 1e-4  # u is not in the space: a real comparison
    assert r["diff"]["scikit-fem"] < 1e-12
    assert r["err"]["scikit-fem"] == pytest.approx(r["err"]["polydg"], rel=1e-10)
    # both Jacobians are the derivatives of their residuals (sigma frozen)
    assert r["fd"]["polydg"] < 1e-6 and r["fd"]["scikit-fem"] < 1e-6
    assert r["residuals"]["scikit-fem"][-1] < 1e-10 * r["residuals"]["scikit-fem"][0]
