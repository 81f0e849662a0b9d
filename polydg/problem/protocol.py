"""The Problem contract as a protocol: :func:`as_problem` turns any object that meets it into a :class:`Problem`.

A plain class or instance, a module, or a factory returning one of these: its attributes are read
and held to exactly the rules of a :class:`~polydg.problem.contract.Problem`, so user code need not
import polydg to define a problem; anything else is one line naming the type and the attribute.
"""

from __future__ import annotations

import difflib
import inspect
import types
from typing import Any, Callable

import numpy as np

from ..errors import ProblemError, ProblemWarning, warn_user
from .contract import COEFFICIENTS, DERIVATIVES, Problem, _one_line, _wrong_kind

#: what a plain object may carry besides the coefficients, and what each must be
_SETTINGS: dict[str, tuple[type | tuple[type, ...], str]] = {
    "name": (str, "a str"),
    "description": (str, "a str"),
    "default_mesh": (str, "a str"),
    "space_time": ((bool, np.bool_), "a bool"),
}

#: the attributes that make an object a problem: at least one must be there
_PROTOCOL = COEFFICIENTS + ("initial",)

#: what a problem may be, for messages; the old texts ("expected a polydg.problem.Problem...") stay their prefixes
_AN_OBJECT = f"an object with some of its attributes ({', '.join(_PROTOCOL)})"
_EXPECTED = f"a polydg.problem.Problem or a callable returning one, or {_AN_OBJECT}"
_EXPECTED_RESULT = f"a polydg.problem.Problem or {_AN_OBJECT}"

_MISSING = object()


def _accepts_argument(function: Callable[..., Any]) -> bool:
    """True when ``function`` can be called with one positional argument (the dimension)."""
    try:
        params = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return True
    return any(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL) for p in params)


def _read(obj: Any, attribute: str, owner: str) -> Any:
    """``obj.attribute``, or :data:`_MISSING`; a property that raises is the object's fault."""
    try:
        return getattr(obj, attribute, _MISSING)
    except Exception as exc:  # user code (a property): one line naming the attribute
        raise ProblemError(f"{owner} whose {attribute} raised {type(exc).__name__} when read: "
                           f"{_one_line(exc)}") from exc


def _has_protocol_attribute(obj: Any) -> bool:
    for attribute in _PROTOCOL:
        try:
            if getattr(obj, attribute, _MISSING) is not _MISSING:
                return True
        except Exception:  # a property that raises still says the object means to be a problem
            return True
    return False


def _from_attributes(obj: Any, owner: str) -> Problem:
    """The :class:`Problem` whose fields are ``obj``'s attributes; ``owner`` names ``obj`` in messages."""
    fields: dict[str, Any] = {}
    for attribute in _PROTOCOL + DERIVATIVES:  # derivatives are read too, but do not make a problem alone
        value = _read(obj, attribute, owner)
        if value is _MISSING:
            continue  # absent means zero, as for a Problem built without it
        what = _wrong_kind(attribute, value)
        if what:
            raise ProblemError(f"{owner} whose {attribute} {what}")
        fields[attribute] = value
    for attribute, (kinds, text) in _SETTINGS.items():
        value = _read(obj, attribute, owner)
        if value is _MISSING or value is None:
            continue
        if not isinstance(value, kinds):
            raise ProblemError(f"{owner} whose {attribute} must be {text}, got {type(value).__name__}")
        fields[attribute] = value
    dim = _read(obj, "dim", owner)
    if dim is not _MISSING and dim is not None:
        # bool is an int, but True is no dimension
        if isinstance(dim, (bool, np.bool_)) or not isinstance(dim, (int, np.integer)) or dim not in (2, 3, 4):
            raise ProblemError(f"{owner} whose dim must be 2, 3, 4 or None, got {dim!r}")
        fields["dim"] = int(dim)
    if "name" not in fields:
        # a module's own name; for anything else the class says what it is
        fields["name"] = obj.__name__ if isinstance(obj, types.ModuleType) else type(obj).__name__
    _warn_of_near_names(obj, owner)
    return Problem(**fields)


#: every attribute a plain object's problem is read from, and those a misspelling of which would be zero unsaid
_READ = frozenset(_PROTOCOL + DERIVATIVES + tuple(_SETTINGS) + ("dim",))
_SILENT_IF_MISSPELT = _PROTOCOL + DERIVATIVES


def _own_names(obj: Any) -> list[str]:
    """The public attribute names of ``obj`` a user wrote: a module's own definitions (not its imports, e.g.
    ``from numpy import *``), anything else's attributes; none where ``dir`` fails."""
    try:
        names = [n for n in dir(obj) if not n.startswith("_") and n not in _READ]
    except Exception:
        return []
    if isinstance(obj, types.ModuleType):
        names = [n for n in names if getattr(getattr(obj, n, None), "__module__", obj.__name__) == obj.__name__
                 and not isinstance(getattr(obj, n, None), types.ModuleType)]
    return names


def _warn_of_near_names(obj: Any, owner: str) -> None:
    """Warn (:class:`~polydg.errors.ProblemWarning`) of each public attribute of ``obj`` that is not read but is
    spelt like a coefficient ("diffusoin"), which would otherwise be zero without a word; a helper named as a
    predicate (``is_dirichlet``, ``has_...``) is taken as one."""
    for name in _own_names(obj):
        if name.startswith(("is_", "has_")):
            continue
        close = difflib.get_close_matches(name, _SILENT_IF_MISSPELT, n=1, cutoff=0.8)
        if close:
            warn_user(f"{owner} with an attribute {name!r} that is not read (did you mean {close[0]!r}?)",
                      ProblemWarning)


def _run_plain(function: Callable[[], Any], failed: Callable[[BaseException], str]) -> Any:
    """``function()``, user code; an exception becomes a one-line :class:`ProblemError` saying ``failed(exc)``."""
    try:
        return function()
    except ProblemError:
        raise
    except Exception as exc:
        raise ProblemError(failed(exc)) from exc


def _adapt(obj: Any, dim: int | None, subject: str,
           run: Callable[[Callable[[], Any], Callable[[BaseException], str]], Any] = _run_plain) -> Problem:
    """:func:`as_problem`, with ``subject`` naming ``obj`` in messages and ``run`` running a factory.

    :func:`~polydg.problem.load_problem` passes a ``run`` that holds back
    what a problem file's factory prints.
    """
    if isinstance(obj, Problem):
        problem = obj
    elif isinstance(obj, type) or (callable(obj) and not _has_protocol_attribute(obj)):
        # a factory (a class is one too: its instances carry the attributes)
        factory = obj
        call = f"{subject}({'' if dim is None else dim})"
        made = run(lambda: factory(dim) if _accepts_argument(factory) else factory(),
                   lambda exc: f"{call} raised {type(exc).__name__}: {_one_line(exc)}")
        if isinstance(made, Problem):
            problem = made
        elif not isinstance(made, type) and _has_protocol_attribute(made):
            problem = _from_attributes(made, f"{subject}() returned a {type(made).__name__}")
        else:
            raise ProblemError(f"{subject}() returned a {type(made).__name__}, expected {_EXPECTED_RESULT}")
    elif _has_protocol_attribute(obj):
        problem = _from_attributes(obj, f"{subject} is a {type(obj).__name__}")
    else:
        raise ProblemError(f"{subject} is a {type(obj).__name__}, expected {_EXPECTED}")
    if dim is not None:
        problem.check_dimension(dim)
    return problem


def as_problem(obj: Any, dim: int | None = None) -> Problem:
    """``obj`` as a :class:`Problem` that fits ``dim`` dimensions (any when None).

    ``obj`` may be

    * a :class:`Problem`: returned as it is;
    * any object with some of the contract's attributes (:data:`COEFFICIENTS`
      and ``initial``; a plain instance, a module): each is a method or
      function of ``x`` (``neumann`` and ``is_neumann`` of ``x, normal``), a
      constant, or None, exactly as for a :class:`Problem`, and a missing one
      means zero / absent.  Optional ``name`` (default: the class's name),
      ``dim``, ``description``, ``default_mesh`` and ``space_time`` are
      taken as they are;
    * a callable returning one of these, called with ``dim`` when it takes
      an argument; a class is such a callable: it is instantiated.

    Anything else, an attribute of the wrong kind, or a factory that raises
    gives a one-line :class:`~polydg.errors.ProblemError` naming the type
    and the attribute.  The result is checked against ``dim``.

    >>> class Reaction:
    ...     dim = 2
    ...     reaction = 1.0                      # a constant: never expanded to the points
    ...     def source(self, x):
    ...         return np.ones(len(x))
    >>> problem = as_problem(Reaction, 2)
    >>> problem.name, problem.has_reaction, problem.has_diffusion, problem.source_at(np.zeros((3, 2))).tolist()
    ('Reaction', True, False, [1.0, 1.0, 1.0])
    >>> class Bad:
    ...     diffusion = "A"
    >>> as_problem(Bad())  # doctest: +ELLIPSIS
    Traceback (most recent call last):
        ...
    polydg.errors.ProblemError: as_problem: the object is a Bad whose diffusion must be a callable, ..., got str
    """
    named = isinstance(obj, (type, types.FunctionType, types.BuiltinFunctionType, types.MethodType))
    return _adapt(obj, dim, f"as_problem: {obj.__qualname__ if named else 'the object'}")


def as_steady_problem(obj: Any, dim: int) -> Problem:
    """:func:`as_problem` for an assembly on a ``dim``-dimensional mesh, refusing a space-time problem in
    one line: it is marched slab by slab, each slab a problem of its own."""
    problem = as_problem(obj, dim)
    if problem.space_time:
        raise ProblemError(f"problem {problem.name!r} is a space-time problem: march it slab by slab "
                           "(polydg.spacetime.march; command line: --time-slabs N)")
    return problem
