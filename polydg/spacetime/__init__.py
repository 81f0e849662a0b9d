"""Discontinuous Galerkin in space and time on prisms K x I_n (docs/design.md §10).

One concept per module:

* :mod:`~polydg.spacetime.slab`: a time slab over a 2D (3D) polytopic mesh
  as a 3D (4D) polytopic mesh (prisms cut conformingly into tetrahedra, or
  pentatopes), with m_K local time steps per element when asked;
* :mod:`~polydg.spacetime.problem`: the steady problem of one slab,
  A = diag(a, 0), b = (w, 1);
* :mod:`~polydg.spacetime.trace`: quadrature on a time plane: the bottom
  load carrying the previous slab's solution, errors at a fixed time;
* :mod:`~polydg.spacetime.time_dependence`: whether a slab's matrix depends
  on t (else the march keeps it and assembles the load alone);
* :mod:`~polydg.spacetime.march`: :func:`march`, slab after slab;
* :mod:`~polydg.spacetime.slab_state`: what the march carries from slab to
  slab (the top trace, the bottom-load and error tables, the factorisation),
  on the host or, with a GPU backend, on the device.

2D + 1 and 3D + 1 with the total-degree space P_p (the default) or PQ_p
(degree p in t times total degree p in x: :func:`polydg.basis.pq_multi_indices`,
the same compiled kernels with another multi-index table), both with local
time steps (``march(..., local_steps=)``).  3D + 1 runs the steady
assembly in 4 dimensions: its kernels are compiled on the first 4D
assembly (never for 2D or 3D runs).
"""

from .march import MarchResult, march, uniform_time_nodes
from .problem import check_space_time, initial_values, slab_problem
from .slab import prism_simplices, prism_tetrahedra, random_local_steps, shifted_slab, slab_mesh, step_offsets
from .trace import TimePlaneRule, l2_error_at, time_plane_rule, trace_values

__all__ = ["MarchResult", "march", "uniform_time_nodes", "check_space_time", "initial_values", "slab_problem",
           "prism_simplices", "prism_tetrahedra", "random_local_steps", "shifted_slab", "slab_mesh", "step_offsets", "TimePlaneRule", "l2_error_at", "time_plane_rule",
           "trace_values"]
