"""Finite or refused: the face penalty, the assembled matrix and the load vector.

Coefficients are checked where they are evaluated (``Problem.*_at``), but
finite values can still overflow in the assembly's products (a coefficient
of 1e308, a penalty constant of 1e200).  :func:`check_finite_result` looks
at the results once, with one sum per array (a non-finite sum, then a scan
to count and place the bad entries), and refuses them in one line that
names the stage and the likely cause: the coefficient with the largest
values at the elements' centres, or the penalty.
"""

from __future__ import annotations

import numpy as np

from ..errors import NonFiniteError, PolyDGError

#: coefficients beyond this size make the assembly's products overflow double precision
HUGE = 1e100

#: the coefficients sampled for the cause: (name, method)
_SAMPLED = (("diffusion", "diffusion_at"), ("advection", "advection_at"), ("reaction", "reaction_at"),
            ("source", "source_at"), ("dirichlet", "dirichlet_at"))


def _all_finite(values, xp) -> bool:
    if values is None or values.size == 0:
        return True
    with np.errstate(all="ignore"):
        if bool(xp.isfinite(values.sum())):
            return True
        return bool(xp.isfinite(values).all())  # a finite but overflowing sum is no fault


def check_finite_result(space, problem, options, face_penalty, matrix, rhs, elements=None) -> None:
    """Raise :class:`~polydg.errors.NonFiniteError` when the penalty, the matrix or the load is not finite.

    ``elements`` are the assembled rows' elements (default all), to name the
    element of the first bad row.  Host or device arrays.
    """
    from .. import backend as bk

    xp = bk.array_module(options.backend) if matrix is not None or rhs is not None else np
    checks = (("the face penalty", face_penalty, np), ("the assembled matrix", None if matrix is None else matrix.data, xp),
              ("the assembled load vector", rhs, xp))
    for stage, values, module in checks:
        if _all_finite(values, module):
            continue
        values = bk.to_host(values)
        bad = ~np.isfinite(values)
        kinds = " and ".join(k for k, there in (("NaN", np.isnan(values).any()), ("inf", np.isinf(values).any()))
                             if there)
        first = int(np.flatnonzero(bad)[0])
        where = _where(stage, first, space, matrix, elements)
        raise NonFiniteError(f"{stage} has {int(bad.sum()):,} {kinds} values (first {where}): "
                             f"{likely_cause(space, problem, options, face_penalty)}")


def _where(stage: str, index: int, space, matrix, elements) -> str:
    """``face 3``, or ``row 17 (element 4)``."""
    if stage == "the face penalty":
        return f"at face {index}"
    row = index
    if stage == "the assembled matrix":
        from .. import backend as bk

        row = int(np.searchsorted(bk.to_host(matrix.indptr), index, side="right") - 1)
    elements = np.arange(space.mesh.n_elements) if elements is None else np.asarray(elements)
    ends = np.cumsum(space.element_dofs[elements])
    element = int(elements[min(int(np.searchsorted(ends, row, side="right")), len(elements) - 1)])
    return f"in row {row}, element {element}"


def likely_cause(space, problem, options, face_penalty=None) -> str:
    """The coefficient (or the penalty) whose size makes the values overflow, as far as a sample shows."""
    mesh = space.mesh
    centres = 0.5 * (mesh.bbox_min + mesh.bbox_max)
    if len(centres) > 4096:  # a sample suffices to name the culprit
        centres = centres[np.linspace(0, len(centres) - 1, 4096).astype(np.int64)]
    largest = []
    for name, method in _SAMPLED:
        if getattr(problem, name, None) is None:
            continue
        try:
            with np.errstate(all="ignore"):
                values = np.abs(np.asarray(getattr(problem, method)(centres)))
        except PolyDGError as exc:  # a coefficient that misbehaves at the centres says so itself
            return str(exc)
        values = values.reshape(values.shape[0], -1).max(axis=1) if values.size else values
        if values.size:
            i = int(np.argmax(values))
            point = None if problem.is_constant(name) else centres[i]
            largest.append((float(values[i]), name, point))
    big = max(largest, default=None, key=lambda item: item[0])
    if big is not None and big[0] > HUGE:
        size, name, point = big
        where = "" if point is None else " at x = [" + ", ".join(f"{v:.6g}" for v in point) + "]"
        return (f"the values overflow double precision: the {name} of problem {problem.name!r} reaches {size:.3g}"
                f"{where}; scale the problem")
    penalty = float(options.penalty)
    sigma = np.asarray(face_penalty if face_penalty is not None else [], dtype=np.float64)
    finite_sigma = sigma[np.isfinite(sigma)]
    if penalty > HUGE or not np.isfinite(sigma).all() or (finite_sigma.size and finite_sigma.max() > HUGE):
        return f"the values overflow double precision: the penalty constant C_sigma = {penalty:g} is too large"
    return ("the values overflow double precision or come from a degenerate element (the coefficients at the "
            "elements' centres and the penalty are moderate)")


__all__ = ["HUGE", "check_finite_result", "likely_cause"]
