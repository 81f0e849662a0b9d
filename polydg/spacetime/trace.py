"""Traces on a time plane t = const: the slab's bottom load and errors at a fixed time.

The bottom face of slab n is the spatial mesh at t_{n-1}; its upwind term
puts into the load

    F_i = int_Omega u_{n-1}(x, t_{n-1}^-) phi_i(x, t_{n-1}^+) dx,

u_{n-1} the previous slab's solution (u_0 for the first slab).  The bottom
of element K of slab n is the top of element K of slab n-1 (slab meshes
share their element numbering), so u_{n-1} is evaluated in the same element
with no point location; the integral uses a rule on K's spatial
sub-triangles.  The same rule gives L2 errors at a fixed time, and times
a Gauss rule in t (:func:`prism_points`), over a slab.  The march computes
the bottom load and the errors as sparse products with the basis tabulated
at these points (:mod:`~polydg.spacetime.slab_state`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..mesh.polytopic import PolytopicMesh
from ..quadrature import simplex_rule
from ..solve import evaluate
from ..space import DGSpace


@dataclass
class TimePlaneRule:
    """Quadrature on the spatial mesh: points ``x`` (m, d), weights (m,), the element of each point (m,)."""

    x: np.ndarray
    weights: np.ndarray
    elements: np.ndarray

    def at(self, t: float) -> np.ndarray:
        """The points (x, t), (m, d+1)."""
        return np.column_stack([self.x, np.full(len(self.x), float(t))])


def time_plane_rule(space_mesh: PolytopicMesh, degree: int) -> TimePlaneRule:
    """A rule exact for spatial polynomials of ``degree`` on every sub-simplex of ``space_mesh``."""
    bary, w = simplex_rule(space_mesh.dim, int(degree))
    x = np.einsum("qj,kjd->kqd", bary, space_mesh.points[space_mesh.simplices]).reshape(-1, space_mesh.dim)
    weights = (space_mesh.simplex_volume[:, None] * w[None, :]).ravel()
    return TimePlaneRule(x, weights, np.repeat(space_mesh.simplex_element, len(w)))


def trace_values(space: DGSpace, solution: np.ndarray, rule: TimePlaneRule, t: float) -> np.ndarray:
    """The slab solution at the rule's points at time t (a time of the slab's closure)."""
    return evaluate(space, solution, rule.at(t), rule.elements)


def prism_points(rule: TimePlaneRule, offsets: np.ndarray, n_time: int) -> tuple[np.ndarray, ...]:
    """The rule on time planes times ``n_time`` Gauss points in each local step: a row per (point, step,
    node), as (point, step, node, m, g, gw): the plane point, its element's step, the Gauss node, the
    element's number of steps m, and the Gauss nodes and weights on (-1, 1).  The row's time in the slab
    (t0, t1) is ``t0 + (t1 - t0) * (step + (g[node] + 1) / 2) / m``."""
    g, gw = np.polynomial.legendre.leggauss(int(n_time))
    steps = np.diff(offsets)[rule.elements]  # (m,) steps of each point's element
    per_point = steps * len(g)
    point = np.repeat(np.arange(len(rule.x)), per_point)  # a row per (point, step, Gauss node)
    local = np.arange(len(point)) - np.repeat(np.cumsum(per_point) - per_point, per_point)
    step, node = local // len(g), local % len(g)
    return point, step, node, steps[point], g, gw


def l2_error_at(space: DGSpace, solution: np.ndarray, rule: TimePlaneRule, t: float, exact) -> float:
    """||u(., t) - u_h(., t)||_{L2(Omega)} with ``exact`` a callable of space-time points (n, d+1)."""
    y = rule.at(t)
    e = np.asarray(exact(y), dtype=np.float64) - trace_values(space, solution, rule, t)
    return float(np.sqrt(rule.weights @ e**2))


__all__ = ["TimePlaneRule", "time_plane_rule", "prism_points", "trace_values", "l2_error_at"]
