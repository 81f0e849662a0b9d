"""Newton's and Picard's methods for the IP-dG residual of a nonlinear problem (docs/design.md §8).

Each iterate u_k gives the residual R(u_k) and a Jacobian J (Newton's exact one, or Picard's: the
linear form with the coefficients frozen at u_k), from one assembly on a kept plan; the update solves
J du = -R(u_k).  A backtracking line search on ||R|| (Armijo, halving the step) guards hard starts.

The penalty sigma_F comes from a_K at the iterate and is frozen within each step (the Jacobian does
not differentiate it).  Once the relative update falls below ``penalty_freeze`` it is frozen across
steps too, so that the last steps solve one discrete problem and Newton converges quadratically; at
convergence sigma is recomputed at the solution and, if it moved by more than ``penalty_rtol``, the
iteration goes on with the new one.  The solution is thus the one with sigma taken at the solution
itself, whatever the path (Newton and Picard reach the same).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ..errors import OptionError, PolyDGError

NONLINEAR_METHODS = ("newton", "picard")


class NonlinearError(PolyDGError, RuntimeError):
    """A nonlinear solve that did not converge or diverged."""


@dataclass(frozen=True)
class NonlinearOptions:
    """How the nonlinear iteration runs and when it stops.

    method : "newton" (default) or "picard"
    rtol : converged when ||R(u_k)|| <= rtol ||R(u_0)|| ...
    atol : ... or ||R(u_k)|| <= atol ...
    update_tol : ... or ||u_k - u_{k-1}|| <= update_tol ||u_k|| (the update at round-off)
    max_iterations : steps before giving up (a NonlinearError)
    line_search : backtrack (halving, Armijo on ||R||) when a full step does not reduce the residual
    penalty_freeze, penalty_rtol : see the module docstring
    linear_solver : the method of :func:`polydg.solve.solve` for each step's linear system
    """

    method: str = "newton"
    rtol: float = 1e-10
    atol: float = 0.0
    update_tol: float = 1e-12
    max_iterations: int = 30
    line_search: bool = True
    penalty_freeze: float = 0.1
    penalty_rtol: float = 1e-8
    linear_solver: str = "auto"

    def __post_init__(self) -> None:
        if self.method not in NONLINEAR_METHODS:
            raise OptionError(f"unknown nonlinear method {self.method!r}; choose {' or '.join(NONLINEAR_METHODS)}")
        for name in ("rtol", "atol", "update_tol", "penalty_freeze", "penalty_rtol"):
            value = getattr(self, name)
            if not (value >= 0 and np.isfinite(value)):
                raise OptionError(f"nonlinear {name} must be a finite number >= 0, got {value!r}")
        if not (isinstance(self.max_iterations, (int, np.integer)) and self.max_iterations >= 1):
            raise OptionError(f"max_iterations must be a positive integer, got {self.max_iterations!r}")


@dataclass
class NonlinearResult:
    """What a nonlinear solve returns.

    solution : the last iterate's coefficients; converged : always True (else a NonlinearError)
    residuals : ||R(u_k)|| for k = 0, 1, ...; updates : ||u_{k+1} - u_k||; steps : the line search's step
    seconds : per step, {"assembly": ..., "solve": ..., "line_search": ...} (assembly without compilation: the
        step's assemblies outside the line search, its new iterate's and any at u_k when sigma is frozen again);
        first_assembly : the assembly at u_0, before the first step
    jit : seconds of compilation (or cache loading) of the kernels, apart
    face_penalty : sigma_F of the solution; last : the last assembly (its Jacobian and residual)
    """

    solution: np.ndarray
    method: str
    residuals: list[float] = field(default_factory=list)
    updates: list[float] = field(default_factory=list)
    steps: list[float] = field(default_factory=list)
    seconds: list[dict] = field(default_factory=list)
    first_assembly: float = 0.0
    face_penalty: np.ndarray | None = None
    last: Any = None
    converged: bool = True
    jit: float = 0.0

    @property
    def iterations(self) -> int:
        return len(self.updates)

    @property
    def assembly_seconds(self) -> float:
        """Every assembly of the solve, u_0's and the line searches' included (compilation apart)."""
        return self.first_assembly + float(sum(s["assembly"] + s["line_search"] for s in self.seconds))

    @property
    def solve_seconds(self) -> float:
        """Every step's linear solve."""
        return float(sum(s["solve"] for s in self.seconds))

    def last_assembly(self, options):
        """The last linearisation as an :class:`~polydg.assembly.AssemblyResult` (its Jacobian and residual), with
        the record of ``options`` (the resolved linearisation options: double precision, by rows) a report reads."""
        from ..assembly.result import AssemblyResult

        last = self.last
        info = {"precision": "double", "backend": options.backend, "approach": "2", "iterations": self.iterations,
                "penalty": {"constant": options.penalty, "kind": options.penalty_kind},
                "quadrature_extra": options.quadrature_extra, "memory_budget_mb": options.budget_mb,
                "options": options.as_dict()}
        return AssemblyResult(last.jacobian, last.residual, last.face_penalty, info)

    def summary(self) -> dict:
        """The JSON-ready record of the iteration (summary.json's ``nonlinear``)."""
        return {"method": self.method, "iterations": self.iterations, "residuals": self.residuals,
                "updates": self.updates, "steps": self.steps, "seconds": self.seconds,
                "first_assembly_seconds": self.first_assembly, "jit_seconds": self.jit}


def solve_iteration(system, u0: np.ndarray, options: NonlinearOptions | None = None,
                    progress: Callable[[str], None] | None = None) -> NonlinearResult:
    """Iterate from ``u0`` on ``system`` until the residual is small (see :class:`NonlinearOptions`).

    ``system.linearize(u, newton=, want_jacobian=, face_penalty=)`` returns a
    :class:`~polydg.assembly.linearized_passes.Linearization` whose ``info["penalty_at_iterate"]`` is sigma
    at u, and ``system.solve_linear(J, b)`` solves one step's system.
    """
    options = options or NonlinearOptions()
    newton = options.method == "newton"
    name = options.method.capitalize()
    u = np.array(u0, dtype=np.float64, copy=True)
    result = NonlinearResult(solution=u, method=options.method)
    sigma = None  # None: sigma at each iterate; else frozen

    def assembled(v, want_jacobian=True, penalty=None):
        lin = system.linearize(v, newton=newton, want_jacobian=want_jacobian,
                               face_penalty=sigma if penalty is None else penalty)
        result.jit += lin.info["timings"].get("jit", 0.0)  # compilation, reported apart
        return lin, lin.info["timings"]["total_assembly"]

    lin, assembly_seconds = assembled(u)
    result.first_assembly = assembly_seconds
    r = r0 = float(np.linalg.norm(lin.residual))
    result.residuals.append(r)
    _check_finite(r, name, 0, r0)
    if progress:
        progress(f"{options.method} 0: residual {r:.3e}, assembly {assembly_seconds:.3f} s")
    for k in range(1, options.max_iterations + 1):
        if _small(r, r0, options) and _penalty_settled(lin, sigma, options):
            break
        extra = 0.0
        if sigma is not None and not _penalty_settled(lin, sigma, options):
            sigma = lin.info["penalty_at_iterate"]  # the solution's own sigma: go on with it
            lin, extra = assembled(u)
            r = float(np.linalg.norm(lin.residual))
        t = time.perf_counter()
        du = system.solve_linear(lin.jacobian, -lin.residual)
        solve_seconds = time.perf_counter() - t
        step, searched = 1.0, 0.0
        while True:
            full = step == 1.0 or not options.line_search
            # backtracking measures R with sigma of u, the R that du linearises: with sigma moving along the
            # line (a of the iterate), du need not be a descent direction for the residual at each point
            trial, seconds = assembled(u + step * du, want_jacobian=full,
                                       penalty=None if full else lin.face_penalty)
            r_new = float(np.linalg.norm(trial.residual))
            if step < 1.0:
                searched += seconds
            else:
                assembly_seconds = seconds + extra
            if (not options.line_search or r_new <= (1 - 1e-4 * step) * r or step <= 1 / 64
                    or _small(r_new, r0, options)):
                break
            step /= 2
        if trial.jacobian is None:  # accepted after backtracking: the Jacobian (and sigma) there
            trial, seconds = assembled(u + step * du)
            assembly_seconds += seconds
            r_new = float(np.linalg.norm(trial.residual))
        u = u + step * du
        lin, r = trial, r_new
        update = float(np.linalg.norm(step * du))
        result.residuals.append(r)
        result.updates.append(update)
        result.steps.append(step)
        result.seconds.append({"assembly": assembly_seconds, "solve": solve_seconds, "line_search": searched})
        _check_finite(r, name, k, r0)
        if progress:
            progress(f"{options.method} {k}: residual {r:.3e} (relative {r / r0 if r0 else 0.0:.2e}), update "
                     f"{update:.3e}" + (f", step {step:g}" if step < 1 else "")
                     + f", assembly {assembly_seconds:.3f} s, solve {solve_seconds:.3f} s")
        scale = max(float(np.linalg.norm(u)), 1e-300)
        if sigma is None and update <= options.penalty_freeze * scale:
            sigma = lin.info["penalty_at_iterate"]
        if update <= options.update_tol * scale and _penalty_settled(lin, sigma, options):
            break
    else:
        if not (_small(r, r0, options) and _penalty_settled(lin, sigma, options)):
            raise NonlinearError(
                f"{name} did not converge in {options.max_iterations} iterations: residual {r:.3e} (started at "
                f"{r0:.3e}, asked {max(options.rtol * r0, options.atol):.1e}); try "
                + ("Picard (method='picard', --nonlinear picard), a closer initial guess or more iterations "
                   "(max_iterations, --max-iterations)" if newton
                   else "Newton (method='newton', --nonlinear newton) or more iterations (max_iterations, "
                        "--max-iterations)"))
    result.solution = u
    result.face_penalty = lin.face_penalty
    result.last = lin
    return result


def _small(r: float, r0: float, options: NonlinearOptions) -> bool:
    return r <= max(options.rtol * r0, options.atol)


def _penalty_settled(lin, sigma, options: NonlinearOptions) -> bool:
    """Whether the frozen sigma is the iterate's own, to ``penalty_rtol`` (always, while it is not frozen)."""
    if sigma is None:
        return True
    own = lin.info["penalty_at_iterate"]
    scale = float(np.abs(own).max()) if own.size else 0.0
    return float(np.abs(own - sigma).max(initial=0.0)) <= options.penalty_rtol * max(scale, 1e-300)


def _check_finite(r: float, name: str, k: int, r0: float) -> None:
    if not np.isfinite(r) or (r0 > 0 and r > 1e12 * r0):
        raise NonlinearError(f"{name} diverged at iteration {k}: residual {r:.3e} (started at {r0:.3e}); try a "
                             f"damped start (line search), Picard (method='picard', --nonlinear picard) or a closer "
                             "initial guess")
